//! The gradient of a product of fp8 operands.
//!
//! `C = op(A) op(B)` with fp8 operands reads its gradient in fp8 too, as
//! fp8 training recipes do: a gradient read unscaled would round its small
//! values to zero. `dC` is quantized twice, each time with the scales that
//! factor out of the product that reads it:
//!
//! * `dA` contracts over `dC`'s columns, so `dC` is scaled per row:
//!   `dA = diag(1/r) (q_r(dC) op(B)ᵀ)`, with `r = fmax / amax(dC[i, :])`;
//! * `dB` contracts over `dC`'s rows, so `dC` is scaled per column:
//!   `dB = (q_c(dC)ᵀ op(A)) diag(1/c)` (up to transposes), with
//!   `c = fmax / amax(dC[:, j])`.
//!
//! `fmax` is the largest finite value of the operands' fp8 type, so each
//! scaled row or column reaches it and keeps the type's whole range
//! (torchao's axiswise recipe quantizes its `grad_output` along the same
//! axes). The products read the forward's fp8 operands as they are.
//! The forward's own scales are the block's business: computed from
//! `detach`ed values, no gradient flows through them, as in PyTorch.

use crate::builder::Builder;
use crate::vjp::MatMul;
use crate::GradError;
use coda_diagnostics::Span;
use coda_ir::{Axis, BinaryOp, Block, DType, Inst, ReduceOp, UnaryOp, Value, AMAX_FLOOR};

/// Accumulates the gradients of `m`'s active operands, `m.dtype` being an
/// fp8 type, from the gradient `g` of its result.
pub(crate) fn product_gradients(b: &mut Builder<'_>, m: &MatMul, g: Value, span: Span) -> Result<(), GradError> {
    if b.active[m.lhs.index()] {
        // r: [M, 1]. A plain: dA = q_r(g) op(B)ᵀ, rows of g are rows of dA;
        // A transposed: dA = op(B) q_r(g)ᵀ, rows of g are columns of dA.
        let (q, r) = quantize(b, g, Axis::Cols, m.dtype, span)?;
        let da = b.emit(m.lhs_gradient(b.primal(m.rhs), q), span)?;
        let r = if m.lt { b.emit(Inst::Transpose { arg: r }, span)? } else { r };
        let da = b.bin(BinaryOp::Div, da, r, span)?;
        b.accumulate(m.lhs, da)?;
    }
    if b.active[m.rhs.index()] {
        // c: [1, N]. B transposed: dB = q_c(g)ᵀ op(A), columns of g are rows
        // of dB; B plain: dB = op(A)ᵀ q_c(g), columns of g are columns of dB.
        let (q, c) = quantize(b, g, Axis::Rows, m.dtype, span)?;
        let dw = b.emit(m.rhs_gradient(b.primal(m.lhs), q), span)?;
        let c = if m.rt { b.emit(Inst::Transpose { arg: c }, span)? } else { c };
        let dw = b.bin(BinaryOp::Div, dw, c, span)?;
        b.accumulate(m.rhs, dw)?;
    }
    Ok(())
}

/// `(cast(g · s), s)` with `s = fmax / max(amax, AMAX_FLOOR)`, the amax
/// taken along `axis` (`Cols`: one scale per row, `Rows`: one per column),
/// formed once per gradient, axis and type.
fn quantize(b: &mut Builder<'_>, g: Value, axis: Axis, dtype: DType, span: Span) -> Result<(Value, Value), GradError> {
    if let Some(done) = b.quantized.get(&(g, axis, dtype)) {
        return Ok(*done);
    }
    let fmax = dtype
        .max_finite()
        .ok_or_else(|| GradError::Internal(format!("an fp8 product's gradient quantized to {dtype}")))?;
    let magnitude = b.un(UnaryOp::Abs, g, span)?;
    let amax = b.reduce(ReduceOp::Max, axis, magnitude, span)?;
    let floor = b.konst(AMAX_FLOOR, span)?;
    let amax = b.bin(BinaryOp::Max, amax, floor, span)?;
    let top = b.konst(fmax, span)?;
    let scale = b.bin(BinaryOp::Div, top, amax, span)?;
    let scaled = b.bin(BinaryOp::Mul, g, scale, span)?;
    let q = b.emit(Inst::Cast { to: dtype, arg: scaled }, span)?;
    b.quantized.insert((g, axis, dtype), (q, scale));
    Ok((q, scale))
}

/// The amax reductions (`max(abs(…))`) that scale an fp8 cast in `block`
/// (reached from the cast's operand through products, quotients, the
/// floor `max(amax, ε)`, broadcasts and casts) and are active: the scale is
/// differentiated, so its gradient terms, which cancel in exact
/// arithmetic, land after rounding on the element that holds each amax.
/// `detach` keeps them out. In forward order.
pub fn differentiated_scales(block: &Block, active: &[bool]) -> Vec<Value> {
    let mut found = vec![false; block.insts.len()];
    let mut seen = vec![false; block.insts.len()];
    for (_, inst) in block.insts.iter() {
        let Inst::Cast { to, arg } = inst else { continue };
        if !to.is_fp8() {
            continue;
        }
        let mut stack = vec![*arg];
        while let Some(v) = stack.pop() {
            if std::mem::replace(&mut seen[v.index()], true) || !active[v.index()] {
                continue;
            }
            match block.inst(v) {
                Inst::Reduce { op: ReduceOp::Max, arg, .. } if is_amax(block, *arg) => found[v.index()] = true,
                Inst::Binary { op: BinaryOp::Mul | BinaryOp::Div | BinaryOp::Max, .. }
                | Inst::Broadcast { .. }
                | Inst::Transpose { .. }
                | Inst::Cast { .. } => stack.extend(block.inst(v).operands()),
                _ => {}
            }
        }
    }
    block.insts.iter().map(|(v, _)| v).filter(|v| found[v.index()]).collect()
}

/// Whether `v` is `abs(…)`, or a maximum of one, as an amax reduces.
fn is_amax(block: &Block, v: Value) -> bool {
    match block.inst(v) {
        Inst::Unary { op: UnaryOp::Abs, .. } => true,
        Inst::Reduce { op: ReduceOp::Max, arg, .. } => is_amax(block, *arg),
        _ => false,
    }
}
