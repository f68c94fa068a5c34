//! Norm deferral: per-row scales leave a matmul's left operand.

use coda_ir::infer::TypeError;
use coda_ir::{BinaryOp, Block, DType, Inst, Shape, Value};

/// `(r ⊙ X) @ W = r ⊙ (X @ W)` for a per-row vector `r` (`[M, 1]` broadcast
/// along the columns of `X`): row `m` of the product is `Σ_k r_m X_mk W_kn`.
///
/// Numerics: the unfused program rounds `r ⊙ X` to the 16-bit operand type;
/// the rewritten one rounds `X` and multiplies the fp32 accumulator by `r`
/// (one more fp32 rounding). Both operand roundings have the same relative
/// error, so the result is no less accurate. With `X = x ⊙ g` this is
/// RMSNorm deferral: `rmsnorm(x, g) @ W = r ⊙ ((x ⊙ g) @ W)`.
pub(crate) const RULE: &str = "row-scale-through-matmul";

/// Splits `lhs` (a value of the new block, the left operand of a matmul
/// reading it as `operand`) into `(rest, Some(r))` when its product tree has
/// per-row factors `broadcast(r_i)`; `r` is their product, `[M, 1]`.
pub(crate) fn split(block: &mut Block, lhs: Value, operand: DType) -> Result<(Value, Option<Value>), TypeError> {
    let mut root = lhs;
    // The matmul rounds its operand to `operand` anyway.
    while let Inst::Cast { to, arg } = block.inst(root) {
        if *to != operand {
            break;
        }
        root = *arg;
    }
    let rows = block.ty(root).shape.rows.clone();
    let mut factors = Vec::new();
    flatten(block, root, &mut factors);
    let (scales, rest): (Vec<Value>, Vec<Value>) =
        factors.into_iter().partition(|f| row_vector(block, *f, &rows).is_some());
    if scales.is_empty() || rest.is_empty() {
        return Ok((lhs, None));
    }
    let span = block.insts.span(root);
    let rest_value = product(block, &rest, span)?;
    if let Some(name) = crate::affine::product_name(block, &rest) {
        block.set_name(rest_value, &name);
    }
    let rest = rest_value;
    let vectors: Vec<Value> = scales.iter().filter_map(|f| row_vector(block, *f, &rows)).collect();
    let scale = product(block, &vectors, span)?;
    Ok((rest, Some(scale)))
}

/// `r ⊙ acc` for the `[M, N]` accumulator `acc` and the `[M, 1]` vector `r`.
pub(crate) fn apply(block: &mut Block, acc: Value, r: Value) -> Result<Value, TypeError> {
    let span = block.insts.span(acc);
    let shape: Shape = block.ty(acc).shape.clone();
    let wide = block.push(Inst::Broadcast { arg: r, shape }, span)?;
    block.push(Inst::Binary { op: BinaryOp::Mul, lhs: acc, rhs: wide }, span)
}

/// The factors of a product tree, left to right (without recursion: a
/// product chain is as long as the program).
pub(crate) fn flatten(block: &Block, v: Value, out: &mut Vec<Value>) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match block.inst(v) {
            Inst::Binary { op: BinaryOp::Mul, lhs, rhs } => stack.extend([*rhs, *lhs]),
            _ => out.push(v),
        }
    }
}

/// `r` when `f` is `broadcast(r)` of a float `[rows, 1]` vector.
pub(crate) fn row_vector(block: &Block, f: Value, rows: &coda_ir::Dim) -> Option<Value> {
    let Inst::Broadcast { arg, .. } = block.inst(f) else { return None };
    let shape = &block.ty(*arg).shape;
    let float = block.ty(*arg).dtype.is_float();
    (float && shape.cols.is_one() && shape.rows == *rows && !rows.is_one()).then_some(*arg)
}

/// The product of `factors` (at least one), left to right.
pub(crate) fn product(block: &mut Block, factors: &[Value], span: coda_diagnostics::Span) -> Result<Value, TypeError> {
    let Some((&first, others)) = factors.split_first() else {
        return Err(TypeError("a product of no factors".into()));
    };
    let mut acc = first;
    for &f in others {
        acc = block.push(Inst::Binary { op: BinaryOp::Mul, lhs: acc, rhs: f }, span)?;
    }
    Ok(acc)
}
