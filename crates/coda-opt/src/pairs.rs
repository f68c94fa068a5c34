//! Pair layouts: which matmuls read their weight rows interleaved, and how
//! values computed in that layout are used.
//!
//! With `W' = permute_rows(W, P)` (row `p` of `W'` is row `P.source(p)` of
//! `W`), `(h @ W'ᵀ)[:, p] = (h @ Wᵀ)[:, P.source(p)]`: the accumulator holds
//! the same columns, in pair order. Values keep that order through
//! elementwise work; the rules below consume it.

use crate::Options;
use coda_ir::{Block, Inst, PairPerm, RopeStyle, Value};
use std::collections::{BTreeMap, BTreeSet};

/// `[gate | up]` halves of `Y = h @ Wᵀ` (`W: [2F, K]`) as even/odd columns:
/// `Y[:, :F] = Y'[:, 0::2]`, `Y[:, F:] = Y'[:, 1::2]` with `Y' = h @ permute_rows(W, pairs 0..2F group 2F)ᵀ`.
pub(crate) const RULE_GATED: &str = "gated-pair-layout";

/// Rotate-half RoPE on `Y = h @ Wᵀ` as interleaved RoPE on `Y'` whose weight
/// rows are interleaved per head: column `i` and `i + d/2` of a head become
/// neighbours, with the same angle, so
/// `rope_half(Y) = unpermute(rope_interleaved(Y'))`.
pub(crate) const RULE_ROPE: &str = "rope-pair-layout";

/// A per-column vector combined with a value in pair layout is read in that
/// layout: `(Y + 1 ⊗ b)' = Y' + 1 ⊗ b'` with `b'[p] = b[P.source(p)]`, since
/// a permutation of columns commutes with adding a per-column vector (a
/// bias between a projection and its RoPE, as in Qwen2 or GPT-NeoX).
pub(crate) const RULE_PERMUTE_VECTOR: &str = "permuted-column-vector";

/// A per-head reduction of a value in pair layout, and a per-head value
/// expanded over its heads, are the same in pair order: every pair group
/// lies inside one head, so the permutation only reorders columns within
/// heads, `group_reduce(Y')[:, h] = group_reduce(Y)[:, h]` and
/// `group_expand(s)' = group_expand(s)`. QK-norm between a projection and
/// its RoPE (Qwen3, Gemma-3, Persimmon) then keeps the RoPE pair layout.
pub(crate) const RULE_HEAD_STATISTICS: &str = "per-head-statistics-in-pair-layout";

/// A value in pair layout that leaves the block is stored in original column
/// order by its store: `out[:, P.source(p)] = Y'[:, p]`.
pub(crate) const RULE_UNPERMUTE_STORE: &str = "unpermute-in-store";

/// `interleave(Y'[:, 0::2], Y'[:, 1::2]) = Y'`: the even and odd halves of
/// a value put back together. A value saved for the backward in pair layout
/// (`interleave(z[:, :F], z[:, F:])`) is then the pair-layout accumulator
/// itself, stored as it is.
pub(crate) const RULE_INTERLEAVE_HALVES: &str = "interleave-of-halves";

/// A matmul's pair layout and the rule that wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The permutation of the weight rows (and accumulator columns).
    pub(crate) perm: PairPerm,
    /// [`RULE_GATED`] or [`RULE_ROPE`].
    pub(crate) rule: &'static str,
}

/// Whether every pair group of `perm` lies inside one head of `width`
/// columns (see [`RULE_HEAD_STATISTICS`]).
pub(crate) fn within_heads(perm: PairPerm, width: i64) -> bool {
    width > 0 && width % perm.group == 0 && perm.start % width == 0
}

/// Chooses a pair permutation for each matmul whose result (through
/// elementwise work) is split into halves or rotated by rotate-half RoPE,
/// and whose right operand is a weight read transposed (`x @ w.T`, the
/// layout whose rows the GEMM loader can gather). `excluded` matmuls keep
/// their layout.
pub(crate) fn choose(block: &Block, options: &Options, excluded: &BTreeSet<Value>) -> BTreeMap<Value, Choice> {
    let mut chosen = BTreeMap::new();
    if !options.pair_layouts {
        return chosen;
    }
    let users = block.users();
    for (v, inst) in block.insts.iter() {
        let Inst::MatMul { rhs, rhs_transposed: true, .. } = inst else { continue };
        if excluded.contains(&v) || !is_weight(block, *rhs) {
            continue;
        }
        let Some(n) = block.ty(v).shape.cols.as_const() else { continue };
        if let Some(perm) = wanted_perm(block, &users, v, n) {
            chosen.insert(v, perm);
        }
    }
    chosen
}

/// A block input, or block inputs stacked ([`crate::siblings`]): rows the
/// GEMM's loader can gather.
fn is_weight(block: &Block, v: Value) -> bool {
    match block.inst(v) {
        Inst::Param(_) => true,
        Inst::StackRows { parts } => parts.iter().all(|p| matches!(block.inst(*p), Inst::Param(_))),
        _ => false,
    }
}

/// The permutation the users of matmul `v` (with `n` columns) want, looking
/// through elementwise work.
fn wanted_perm(block: &Block, users: &[Vec<Value>], v: Value, n: i64) -> Option<Choice> {
    let mut stack = vec![v];
    let mut seen = BTreeSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        for &u in &users[x.index()] {
            match block.inst(u) {
                Inst::SliceCols { start, len, step: 1, .. } if n % 2 == 0 => {
                    let half = n / 2;
                    let (s, l) = (start.as_const(), len.as_const());
                    if l == Some(half) && (s == Some(0) || s == Some(half)) {
                        return Some(Choice { perm: PairPerm { start: 0, end: n, group: n }, rule: RULE_GATED });
                    }
                }
                // Partial rotary pairs only part of each head: no one
                // permutation group per head.
                Inst::RopePartner { spec, .. } if spec.style == RopeStyle::Half && spec.rotary_dim == spec.head_dim => {
                    let (start, end) = (spec.start.as_const()?, spec.end.as_const()?);
                    let perm = PairPerm { start, end, group: spec.head_dim };
                    if perm.is_valid() && end <= n {
                        return Some(Choice { perm, rule: RULE_ROPE });
                    }
                }
                Inst::Unary { .. } | Inst::Cast { .. } | Inst::Binary { .. } | Inst::Select { .. } => stack.push(u),
                _ => {}
            }
        }
    }
    None
}
