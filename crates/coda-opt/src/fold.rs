//! Gain folding (the inference option, [`crate::Options::fold_gains`]): a
//! deferred norm's per-column gain leaves the GEMM operand for the weight.

use crate::rowscale::{flatten, product};
use coda_ir::infer::TypeError;
use coda_ir::{BinaryOp, Block, Inst, Shape, Value};

/// `(X ⊙ 1gᵀ) @ W = X @ (diag(g) W)` for a per-column vector `g` (`[1, K]`)
/// of the left operand: `Σ_k X_mk g_k W_kn`. With `W` read transposed
/// (`x @ w.T`, `w: [N, K]`) the folded weight is `w ⊙ 1gᵀ`; with `W: [K, N]`
/// it is `W ⊙ g1ᵀ`. The folded weight depends on weights alone: a
/// weight-preparation kernel computes it, and the producer of `X` stores
/// `X` itself (or the GEMM reads a 16-bit block input in place).
pub(crate) const RULE: &str = "gain-into-weight";

/// Splits the per-column factors that depend on weights alone off the
/// product `operand` and multiplies them into `weight`; `None` when it has
/// none (or nothing else).
pub(crate) fn gains(
    block: &mut Block,
    operand: Value,
    weight: Value,
    transposed: bool,
) -> Result<Option<(Value, Value)>, TypeError> {
    let cols = block.ty(operand).shape.cols.clone();
    let mut factors = Vec::new();
    flatten(block, operand, &mut factors);
    let (gains, rest): (Vec<Value>, Vec<Value>) =
        factors.into_iter().partition(|f| weight_gain(block, *f, &cols).is_some());
    if gains.is_empty() || rest.is_empty() {
        return Ok(None);
    }
    let span = block.insts.span(operand);
    let operand = product(block, &rest, span)?;
    let weight_shape = block.ty(weight).shape.clone();
    let mut folded = weight;
    let mut named = vec![weight];
    for g in gains {
        let g = weight_gain(block, g, &cols).ok_or_else(|| TypeError("a gain without its vector".into()))?;
        named.push(g);
        let along_k = if transposed { g } else { block.push(Inst::Transpose { arg: g }, span)? };
        let wide = block.push(Inst::Broadcast { arg: along_k, shape: weight_shape.clone() }, span)?;
        folded = block.push(Inst::Binary { op: BinaryOp::Mul, lhs: folded, rhs: wide }, span)?;
    }
    if let Some(name) = crate::affine::product_name(block, &named) {
        block.set_name(folded, &name);
    }
    Ok(Some((operand, folded)))
}

/// `g` when `f` is `broadcast(g)` of a float `[1, cols]` vector computed
/// from inputs of constant shape only (weights, not activations).
fn weight_gain(block: &Block, f: Value, cols: &coda_ir::Dim) -> Option<Value> {
    let Inst::Broadcast { arg, .. } = block.inst(f) else { return None };
    let Shape { rows, cols: c } = &block.ty(*arg).shape;
    let vector = rows.is_one() && c == cols && !cols.is_one() && block.ty(*arg).dtype.is_float();
    (vector && weights_only(block, *arg)).then_some(*arg)
}

/// Whether `v` depends on block inputs of constant shape only.
fn weights_only(block: &Block, v: Value) -> bool {
    let mut stack = vec![v];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        let shape = &block.ty(x).shape;
        if shape.rows.as_const().is_none() || shape.cols.as_const().is_none() {
            return false;
        }
        if matches!(block.inst(x), Inst::MatMul { .. }) {
            return false;
        }
        stack.extend(block.inst(x).operands());
    }
    true
}
