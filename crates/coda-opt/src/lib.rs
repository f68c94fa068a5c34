//! The reparameterizer: rewrites a verified block into an equivalent block
//! whose memory-bound work fits GEMM epilogues, before the partitioner
//! places it.
//!
//! Rules, by family (each identity is written above its code):
//!
//! * **norm deferral** ([`rowscale`]): a per-row scale leaves a matmul's left
//!   operand, `(r ⊙ X) @ W = r ⊙ (X @ W)`, so `rmsnorm(x, g) @ W` becomes
//!   `r ⊙ ((x ⊙ g) @ W)`: the producer stores `x ⊙ g` and row partials of
//!   `x²`, the consumer applies `r` in its epilogue.
//! * **LayerNorm deferral** ([`affine`], [`moments`]): a left operand
//!   `σ ⊙ (x − μ) ⊙ γ + β` is expanded into product terms; the tile term
//!   becomes the GEMM (`σ ⊙ ((x ⊙ γ) @ W)`) and the others rank-one
//!   corrections with weight products computed by weight-preparation GEMMs
//!   (`− (σμ) ⊗ (γᵀW) + 1 ⊗ (βᵀW)`, a bias added after the matmul joining
//!   the last); the variance `Σ(x − μ)²` is rewritten with the raw moments
//!   `Σx`, `Σx²`, which the producer's epilogue emits as partials.
//! * **gain folding** ([`fold`], off by default: [`Options::fold_gains`]):
//!   a deferred norm's gain moves into the weight, `W' = diag(g) W`.
//! * **pair layouts** ([`pairs`]): a matmul whose output is split into
//!   `[gate | up]` halves, or rotated by rotate-half RoPE, reads its weight's
//!   rows in interleaved order ([`coda_ir::Inst::PermuteRows`], done by the
//!   GEMM's operand loader, so the weight in memory is untouched), which puts
//!   every pair in adjacent accumulator columns; halves become even/odd
//!   columns, rotate-half RoPE becomes interleaved RoPE, and an output
//!   leaving the block is put back in order by its store
//!   ([`coda_ir::Inst::UnpermuteCols`]). Per-head statistics (QK-norm
//!   before RoPE) keep the layout, which only reorders columns within heads.
//!
//! * **sibling weights** ([`siblings`]): two products of one left operand
//!   whose results meet in element-wise work (separate `gate_proj` and
//!   `up_proj` weights) become one product with the weights' rows stacked
//!   ([`coda_ir::Inst::StackRows`], read by the GEMM's loader where each
//!   weight is), which the gated pair layout then takes; one that keeps no
//!   pair layout is computed as its parts again.
//! * **summed products** ([`sums`], with the pair layouts): a sum of
//!   products of weights, `A₀ @ W₀ + A₁ @ W₁` (the gradient of an input
//!   read by separate q/k/v or gate/up weights), becomes one product over
//!   the concatenated inner dimension, `[A₀ | A₁] @ [W₀; W₁]`, whose GEMM
//!   reads each part where it is.
//! * **row dots from saved products** ([`zdz`], backward blocks, off by
//!   default: [`Options::saved_products`]): a row
//!   sum `Σ_j (D @ R)_j P_j` over a dgrad GEMM's result is `Σ_k D_k S_k`
//!   for the forward's saved product `S = P @ Rᵀ`
//!   ([`coda_ir::Block::saved_products`]), so the RMSNorm backward's row
//!   term moves into the epilogue that produces `D`, one GEMM earlier.
//!
//! Common subexpressions, dead values and scalars are handled by the
//! partitioner's value numbering and liveness. Every rule is checked by the
//! interpreter: the rewritten block must agree with the original on random
//! inputs (`tests/it/rewrites.rs`).

mod affine;
mod fold;
mod moments;
mod pairs;
mod rewriter;
mod rowscale;
mod siblings;
mod sums;
mod zdz;

use coda_ir::Block;
use std::collections::BTreeMap;

/// Options of the reparameterizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Apply the norm-deferral rules.
    pub defer_norms: bool,
    /// Apply the rules that read operands in a layout of their own: pair
    /// layouts, sibling weights and summed products.
    pub pair_layouts: bool,
    /// Defer LayerNorm too (its row shift and bias leave the operand as
    /// rank-one corrections; needs `defer_norms`). On by default; its
    /// rounding error grows with a row's `|mean| / std` (see
    /// `docs/reparameterizer.md`), so blocks whose normalized rows are
    /// dominated by their mean should turn it off.
    pub defer_layernorm: bool,
    /// Fold a deferred norm's gain into the weight (`W' = diag(g) W`, made
    /// by a weight-preparation kernel) instead of multiplying it into the
    /// producer's output. Off by default: the right choice for inference
    /// with static weights, not for training, where the weights change
    /// every step (see `docs/reparameterizer.md`).
    pub fold_gains: bool,
    /// Read row dot products from the forward's saved products (backward
    /// blocks only: their inputs must come from the saving forward). Off by
    /// default: it removes the RMSNorm backward's finishing kernels, but on
    /// the H100 the epilogues that take over their work cost more than
    /// they did (the Llama-3 8B training step 18.47 against 18.36 ms, the
    /// LM head with cross-entropy 46.1 against 44.6 ms; see
    /// `docs/backward.md`).
    pub saved_products: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            defer_norms: true,
            pair_layouts: true,
            defer_layernorm: true,
            fold_gains: false,
            saved_products: false,
        }
    }
}

impl Options {
    /// No rewriting at all (the greedy partition of the plain block).
    pub fn none() -> Self {
        Options {
            defer_norms: false,
            pair_layouts: false,
            defer_layernorm: false,
            fold_gains: false,
            saved_products: false,
        }
    }
}

/// A rewritten block and the rules that made it.
#[derive(Debug, Clone)]
pub struct Reparameterized {
    /// The equivalent block.
    pub block: Block,
    /// How many times each rule applied, by rule name.
    pub applied: BTreeMap<&'static str, usize>,
}

/// A rule built an ill-typed block: a bug in codac, not in the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewriteError(pub String);

impl std::fmt::Display for RewriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the reparameterizer built an invalid block: {}", self.0)
    }
}

impl std::error::Error for RewriteError {}

/// Rewrites one verified block into an equivalent verified block.
pub fn reparameterize(block: &Block, options: &Options) -> Result<Reparameterized, RewriteError> {
    // The saved products are read first: the walks below rebuild the block
    // without them.
    let (block, dots) = match options.saved_products && !block.saved_products.is_empty() {
        true => {
            let (block, dots) = zdz::rewrite(block).map_err(|e| RewriteError(e.0))?;
            (std::borrow::Cow::Owned(block), dots)
        }
        false => (std::borrow::Cow::Borrowed(block), 0),
    };
    let (stacked, siblings) = match options.pair_layouts {
        true => siblings::stack(block.as_ref()).map_err(|e| RewriteError(e.0))?,
        false => (block.into_owned(), 0),
    };
    let block = &stacked;
    let mut excluded = std::collections::BTreeSet::new();
    loop {
        let plan = pairs::choose(block, options, &excluded);
        let outcome = rewriter::rewrite(block, options, &plan).map_err(|e| RewriteError(e.0))?;
        // A pair layout that some user could not absorb is dropped and the
        // block is rewritten again without it (at most once per matmul).
        if outcome.unabsorbed.is_empty() || outcome.unabsorbed.iter().all(|m| excluded.contains(m)) {
            let (block, mut applied) = (outcome.block, outcome.applied);
            if dots > 0 {
                applied.insert(zdz::RULE, dots);
            }
            if siblings > 0 {
                applied.insert(siblings::RULE, siblings);
            }
            let block = apply(block, true, (siblings::RULE_UNSTACK, siblings::unstack), &mut applied)?;
            let block = apply(block, options.defer_norms, (moments::RULE, moments::rewrite), &mut applied)?;
            let block = apply(block, options.pair_layouts, (sums::RULE, sums::rewrite), &mut applied)?;
            coda_ir::verify::verify(&block).map_err(|e| RewriteError(e.to_string()))?;
            return Ok(Reparameterized { block, applied });
        }
        excluded.extend(outcome.unabsorbed);
    }
}

/// A whole-block rule run after the pair layouts, when `on`; the times it
/// applied are counted under its name.
type Pass = fn(&Block) -> Result<(Block, usize), coda_ir::infer::TypeError>;

fn apply(
    block: Block,
    on: bool,
    (rule, pass): (&'static str, Pass),
    applied: &mut BTreeMap<&'static str, usize>,
) -> Result<Block, RewriteError> {
    if !on {
        return Ok(block);
    }
    let (block, n) = pass(&block).map_err(|e| RewriteError(e.0))?;
    if n > 0 {
        applied.insert(rule, n);
    }
    Ok(block)
}

/// Stacks sibling weights ([`siblings`]) and nothing else: what a forward
/// block becomes before it is differentiated, so that its backward reads
/// the stacked product's pair layout as it reads a fused weight's.
pub fn stack_siblings(block: &Block) -> Result<Block, RewriteError> {
    Ok(siblings::stack(block).map_err(|e| RewriteError(e.0))?.0)
}

/// The rule names, in the order `codac explain` lists them.
pub const RULES: [&str; 14] = [
    rowscale::RULE,
    affine::RULE_SHIFT,
    affine::RULE_BIAS,
    affine::RULE_MERGE_BIAS,
    moments::RULE,
    fold::RULE,
    siblings::RULE,
    siblings::RULE_UNSTACK,
    pairs::RULE_GATED,
    pairs::RULE_ROPE,
    pairs::RULE_HEAD_STATISTICS,
    pairs::RULE_UNPERMUTE_STORE,
    sums::RULE,
    zdz::RULE,
];
