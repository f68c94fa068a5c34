//! The reverse sweep and one vector-Jacobian product per instruction kind.
//!
//! For `y = f(a, b, …)` with gradient `g = ∂L/∂y`, each rule adds
//! `∂L/∂a = g · ∂y/∂a` (as a vector-Jacobian product) to the gradient of
//! every active operand. Rules read forward values through
//! [`Builder::primal`], the backward's recomputed copy.

use crate::builder::Builder;
use crate::GradError;
use coda_diagnostics::Span;
use coda_ir::{Axis, BinaryOp, Block, ColGroups, DType, Dim, Inst, ReduceOp, Shape, UnaryOp, Value};

/// Walks the forward in reverse, propagating every finished gradient.
pub(crate) fn sweep(b: &mut Builder<'_>) -> Result<(), GradError> {
    let fwd = b.fwd;
    for (v, inst) in fwd.insts.iter().collect::<Vec<_>>().into_iter().rev() {
        if !b.active[v.index()] {
            continue;
        }
        let Some(g) = b.take_gradient(v)? else { continue };
        rule(b, v, inst, g)?;
    }
    Ok(())
}

/// The vector-Jacobian product of one instruction.
fn rule(b: &mut Builder<'_>, v: Value, inst: &Inst, g: Value) -> Result<(), GradError> {
    let span = b.fwd.insts.span(v);
    match inst {
        // Leaves: params collect their gradient; constants, dims and rotary tables have none.
        Inst::Param(_) | Inst::Const(_) | Inst::DimValue(_) | Inst::RopeTable { .. } => Ok(()),
        Inst::Unary { op, arg } => {
            let (x, y) = (b.primal(*arg), b.primal(v));
            let dx = crate::unary::vjp(b, *op, x, y, g, span)?;
            b.accumulate(*arg, dx)
        }
        Inst::Binary { op, lhs, rhs } => binary(b, v, *op, *lhs, *rhs, g, span),
        // y = c ? t : f  ⇒  dt = [c] g, df = [¬c] g
        Inst::Select { cond, on_true, on_false } => {
            let c = b.primal(*cond);
            let zero = b.konst(0.0, span)?;
            let dt = b.select(c, g, zero, span)?;
            let df = b.select(c, zero, g, span)?;
            b.accumulate(*on_true, dt)?;
            b.accumulate(*on_false, df)
        }
        // A float-to-float cast is the identity up to rounding: dx = g (straight through).
        Inst::Cast { arg, .. } => b.accumulate(*arg, g),
        // y = broadcast(x)  ⇒  dx = g summed over every widened axis
        Inst::Broadcast { arg, .. } => {
            let shape = b.fwd.ty(*arg).shape.clone();
            let dx = sum_to(b, g, &shape, span)?;
            b.accumulate(*arg, dx)
        }
        Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, operand_dtype } => {
            let m = MatMul { lhs: *lhs, rhs: *rhs, lt: *lhs_transposed, rt: *rhs_transposed, dtype: *operand_dtype };
            matmul(b, &m, g, span)
        }
        // y = xᵀ  ⇒  dx = gᵀ
        Inst::Transpose { arg } => {
            let dx = b.emit(Inst::Transpose { arg: g }, span)?;
            b.accumulate(*arg, dx)
        }
        Inst::Reduce { op, axis, arg } => reduce(b, v, *op, *axis, *arg, g, span),
        Inst::GroupReduce { op, groups, arg } => group_reduce(b, v, *op, *groups, *arg, g, span),
        // y[:, n] = x[:, group(n)]  ⇒  dx[:, j] = Σ over the columns n of group j of g[:, n]
        Inst::GroupExpand { groups, arg, .. } => {
            let dx = b.emit(Inst::GroupReduce { op: ReduceOp::Sum, groups: *groups, arg: g }, span)?;
            b.accumulate(*arg, dx)
        }
        // y = the parts of every head  ⇒  dx = g in those parts, 0 elsewhere
        Inst::SliceHeads { arg, part } => {
            let cols = b.fwd.ty(*arg).shape.cols.clone();
            let dx = b.emit(Inst::PadHeads { arg: g, part: *part, cols }, span)?;
            b.accumulate(*arg, dx)
        }
        // y = x placed in the parts of every head  ⇒  dx = the parts of g
        Inst::PadHeads { arg, part, .. } => {
            let dx = b.emit(Inst::SliceHeads { arg: g, part: *part }, span)?;
            b.accumulate(*arg, dx)
        }
        Inst::SliceCols { arg, start, len, step } => slice(b, v, *arg, start, len, *step, g, span),
        // y = [p₀ | p₁ | …]  ⇒  dpᵢ = g[:, offsetᵢ .. offsetᵢ + colsᵢ]
        Inst::ConcatCols { parts } => {
            let mut offset = Dim::constant(0);
            for part in parts {
                let cols = b.fwd.ty(*part).shape.cols.clone();
                let piece = if parts.len() == 1 {
                    g
                } else {
                    let slice = Inst::SliceCols { arg: g, start: offset.clone(), len: cols.clone(), step: 1 };
                    b.emit(slice, span)?
                };
                b.accumulate(*part, piece)?;
                offset = offset.add(&cols).map_err(|e| GradError::Internal(e.to_string()))?;
            }
            Ok(())
        }
        // y[:, 2j] = e[:, j], y[:, 2j+1] = o[:, j]  ⇒  de = g[:, 0::2], do = g[:, 1::2]
        Inst::Interleave { even, odd } => {
            let len = b.fwd.ty(*even).shape.cols.clone();
            let de = b.emit(Inst::SliceCols { arg: g, start: Dim::constant(0), len: len.clone(), step: 2 }, span)?;
            let d_odd = b.emit(Inst::SliceCols { arg: g, start: Dim::constant(1), len, step: 2 }, span)?;
            b.accumulate(*even, de)?;
            b.accumulate(*odd, d_odd)
        }
        // y[m] = x[m, i[m]]  ⇒  dx[m, c] = [c = i[m]] g[m] (the index gets no gradient)
        Inst::TakeCols { arg, index } => {
            let cols = b.fwd.ty(*arg).shape.cols.clone();
            let i = b.primal(*index);
            let dx = b.emit(Inst::ScatterCols { arg: g, index: i, cols }, span)?;
            b.accumulate(*arg, dx)
        }
        // y[m, j] = x[m, c_j(m)] for the columns c_j of the row's top k  ⇒
        // dx[m, c_j(m)] = g[m, j], 0 elsewhere (the choice gets no gradient)
        Inst::TopK { arg, k, indices: false } => {
            let cols = b.fwd.ty(*arg).shape.cols.clone();
            let x = b.primal(*arg);
            let chosen = b.emit(Inst::TopK { arg: x, k: *k, indices: true }, span)?;
            let one = Dim::constant(1);
            for j in 0..*k {
                let start = Dim::constant(j);
                let gj = b.emit(Inst::SliceCols { arg: g, start: start.clone(), len: one.clone(), step: 1 }, span)?;
                let cj = b.emit(Inst::SliceCols { arg: chosen, start, len: one.clone(), step: 1 }, span)?;
                let dx = b.emit(Inst::ScatterCols { arg: gj, index: cj, cols: cols.clone() }, span)?;
                b.accumulate(*arg, dx)?;
            }
            Ok(())
        }
        Inst::TopK { indices: true, .. } => Ok(()),
        // y[m, :] = T[i[m], :]  ⇒  dT[v, :] = Σ_{m : i[m] = v} g[m, :] (the index gets no gradient)
        Inst::GatherRows { table, index } => {
            let rows = b.fwd.ty(*table).shape.rows.clone();
            let i = b.primal(*index);
            let dt = b.emit(Inst::ScatterAddRows { arg: g, index: i, rows }, span)?;
            b.accumulate(*table, dt)
        }
        // y[v, :] = Σ_{i[m] = v} x[m, :]  ⇒  dx[m, :] = g[i[m], :]
        Inst::ScatterAddRows { arg, index, .. } => {
            let i = b.primal(*index);
            let dx = b.emit(Inst::GatherRows { table: g, index: i }, span)?;
            b.accumulate(*arg, dx)
        }
        // y[m, c] = [c = i[m]] x[m]  ⇒  dx[m] = g[m, i[m]]
        Inst::ScatterCols { arg, index, .. } => {
            let i = b.primal(*index);
            let dx = b.emit(Inst::TakeCols { arg: g, index: i }, span)?;
            b.accumulate(*arg, dx)
        }
        // y[:, n] = x[:, partner(n)] with `partner` an involution (a permutation
        // that is its own inverse)  ⇒  dx[:, n] = g[:, partner(n)]
        Inst::RopePartner { spec, arg } => {
            let dx = b.emit(Inst::RopePartner { spec: spec.clone(), arg: g }, span)?;
            b.accumulate(*arg, dx)
        }
        // Stacked weights get their gradients from the matmul that reads them.
        Inst::StackRows { .. } => {
            Err(not_differentiable(b, v, "stacked weights are differentiated only as a matmul's right operand"))
        }
        Inst::PermuteRows { .. } | Inst::PermuteCols { .. } | Inst::UnpermuteCols { .. } => Err(not_differentiable(
            b,
            v,
            "pair layouts are made by the reparameterizer; differentiate the block before reparameterizing it",
        )),
    }
}

fn not_differentiable(b: &Builder<'_>, v: Value, reason: &str) -> GradError {
    GradError::NotDifferentiable {
        value: v,
        what: format!("`{}`", coda_ir::print::print_value(b.fwd, v)),
        reason: reason.to_string(),
    }
}

/// Elementwise functions of two arguments.
fn binary(
    b: &mut Builder<'_>,
    v: Value,
    op: BinaryOp,
    lhs: Value,
    rhs: Value,
    g: Value,
    span: Span,
) -> Result<(), GradError> {
    let (x, y) = (b.primal(lhs), b.primal(rhs));
    match op {
        // d(x + y) = dx + dy
        BinaryOp::Add => {
            b.accumulate(lhs, g)?;
            b.accumulate(rhs, g)
        }
        // d(x - y) = dx - dy
        BinaryOp::Sub => {
            b.accumulate(lhs, g)?;
            if b.active[rhs.index()] {
                let minus = b.un(UnaryOp::Neg, g, span)?;
                b.accumulate(rhs, minus)?;
            }
            Ok(())
        }
        // d(x y) = y dx + x dy
        BinaryOp::Mul => {
            if b.active[lhs.index()] {
                let dx = b.bin(BinaryOp::Mul, g, y, span)?;
                b.accumulate(lhs, dx)?;
            }
            if b.active[rhs.index()] {
                let dy = b.bin(BinaryOp::Mul, g, x, span)?;
                b.accumulate(rhs, dy)?;
            }
            Ok(())
        }
        // d(x / y) = dx / y - (x / y) dy / y
        BinaryOp::Div => {
            if b.active[lhs.index()] {
                let dx = b.bin(BinaryOp::Div, g, y, span)?;
                b.accumulate(lhs, dx)?;
            }
            if b.active[rhs.index()] {
                let q = b.primal(v);
                let gq = b.bin(BinaryOp::Mul, g, q, span)?;
                let gq_y = b.bin(BinaryOp::Div, gq, y, span)?;
                let dy = b.un(UnaryOp::Neg, gq_y, span)?;
                b.accumulate(rhs, dy)?;
            }
            Ok(())
        }
        // d min(x, y) = [x < y] dx + [y < x] dy, split evenly at ties (as PyTorch)
        BinaryOp::Min => extremum(b, BinaryOp::Lt, lhs, rhs, g, span),
        // d max(x, y) = [x > y] dx + [y > x] dy, split evenly at ties
        BinaryOp::Max => extremum(b, BinaryOp::Gt, lhs, rhs, g, span),
        // Comparisons are piecewise constant: no gradient (their result is not active).
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq | BinaryOp::Ne => Ok(()),
    }
}

/// The gradient of `min` (`wins = Lt`) or `max` (`wins = Gt`): the winner gets
/// `g`, the loser 0, and each gets `g / 2` at a tie.
fn extremum(
    b: &mut Builder<'_>,
    wins: BinaryOp,
    lhs: Value,
    rhs: Value,
    g: Value,
    span: Span,
) -> Result<(), GradError> {
    let (x, y) = (b.primal(lhs), b.primal(rhs));
    let half = b.scale(g, 0.5, span)?;
    let tie = b.bin(BinaryOp::Eq, x, y, span)?;
    let tied = b.mask(tie, half, span)?;
    for (this, other, operand) in [(x, y, lhs), (y, x, rhs)] {
        if !b.active[operand.index()] {
            continue;
        }
        let won = b.bin(wins, this, other, span)?;
        let d = b.select(won, g, tied, span)?;
        b.accumulate(operand, d)?;
    }
    Ok(())
}

/// `g` summed down to `shape` over the axes where `shape` is 1 and `g` is not.
fn sum_to(b: &mut Builder<'_>, g: Value, shape: &Shape, span: Span) -> Result<Value, GradError> {
    let mut out = g;
    let current = b.bwd.ty(g).shape.clone();
    if shape.rows.is_one() && !current.rows.is_one() {
        out = b.reduce(ReduceOp::Sum, Axis::Rows, out, span)?;
    }
    if shape.cols.is_one() && !current.cols.is_one() {
        out = b.reduce(ReduceOp::Sum, Axis::Cols, out, span)?;
    }
    Ok(out)
}

/// A matmul's operands and flags.
#[derive(Clone, Copy)]
pub(crate) struct MatMul {
    pub(crate) lhs: Value,
    pub(crate) rhs: Value,
    pub(crate) lt: bool,
    pub(crate) rt: bool,
    pub(crate) dtype: coda_ir::DType,
}

impl MatMul {
    /// `dA` from `dC` (or from what stands for it) and the backward's `B`.
    pub(crate) fn lhs_gradient(&self, w: Value, g: Value) -> Inst {
        if self.lt {
            self.product(w, g, self.rt, true)
        } else {
            self.product(g, w, false, !self.rt)
        }
    }

    /// `dB` from `dC` (or from what stands for it) and the backward's `A`.
    pub(crate) fn rhs_gradient(&self, a: Value, g: Value) -> Inst {
        if self.rt {
            self.product(g, a, true, self.lt)
        } else {
            self.product(a, g, !self.lt, false)
        }
    }

    fn product(&self, lhs: Value, rhs: Value, lhs_transposed: bool, rhs_transposed: bool) -> Inst {
        Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, operand_dtype: self.dtype }
    }
}

/// `C = op(A) op(B)`  ⇒  `d op(A) = dC op(B)ᵀ` and `d op(B) = op(A)ᵀ dC`; a
/// transposed operand gets the transpose, folded into the new matmul's flags:
///
/// * `A` plain: `dA = dC op(B)ᵀ`; `A` transposed: `dA = op(B) dCᵀ`;
/// * `B` plain: `dB = op(A)ᵀ dC`; `B` transposed: `dB = dCᵀ op(A)`.
///
/// The gradient is read in the forward's 16-bit operand type, like the
/// forward; with fp8 operands it is quantized with scales of its own
/// ([`crate::fp8`]).
fn matmul(b: &mut Builder<'_>, m: &MatMul, g: Value, span: Span) -> Result<(), GradError> {
    if let Inst::StackRows { parts } = b.fwd.inst(m.rhs) {
        if m.rt {
            return stacked_matmul(b, m, parts, g, span);
        }
    }
    if m.dtype.is_fp8() {
        return crate::fp8::product_gradients(b, m, g, span);
    }
    if b.active[m.lhs.index()] {
        let da = b.emit(m.lhs_gradient(b.primal(m.rhs), g), span)?;
        let da = round_stored_gradient(b, m.lhs, da, m.dtype, span)?;
        b.accumulate(m.lhs, da)?;
    }
    if b.active[m.rhs.index()] {
        let dw = b.emit(m.rhs_gradient(b.primal(m.lhs), g), span)?;
        let dw = round_stored_gradient(b, m.rhs, dw, m.dtype, span)?;
        b.accumulate(m.rhs, dw)?;
    }
    Ok(())
}

/// `y = a @ [W₀; W₁; …]ᵀ = [a @ W₀ᵀ | a @ W₁ᵀ | …]`  ⇒  with `gᵢ` the
/// columns of `g` that part `i` makes, `dWᵢ = gᵢᵀ @ a` and
/// `da = Σᵢ gᵢ @ Wᵢ`: the products of the separate weights, so the
/// backward never reads the stack.
fn stacked_matmul(b: &mut Builder<'_>, m: &MatMul, parts: &[Value], g: Value, span: Span) -> Result<(), GradError> {
    let widths: Vec<Dim> = parts.iter().map(|p| b.fwd.ty(*p).shape.rows.clone()).collect();
    let pieces = b.column_pieces(g, &widths, span)?;
    for (&part, piece) in parts.iter().zip(pieces) {
        let one = MatMul { rhs: part, ..*m };
        matmul(b, &one, piece, span)?;
    }
    Ok(())
}

/// The gradient `d` of a matmul operand `x` (rounded to `dtype` by the
/// matmul), rounded to `dtype` too when it is stored: when `x` is computed
/// element-wise from a row statistic (a norm's output), its backward
/// reduces `d` along each whole row, which no GEMM tile holds, so `d`
/// leaves the GEMM that computes it. It is then stored in the operand's
/// type, as PyTorch keeps the gradient of a 16-bit tensor; a gradient used
/// only inside its GEMM's epilogue (an activation's backward) stays f32.
fn round_stored_gradient(
    b: &mut Builder<'_>,
    x: Value,
    d: Value,
    dtype: DType,
    span: Span,
) -> Result<Value, GradError> {
    if reads_row_statistic(b.fwd, x) {
        b.in_storage_type(d, dtype, span)
    } else {
        Ok(d)
    }
}

/// Whether `v` is computed element-wise (through broadcasts and casts)
/// from a reduction along rows (`reduce.*.cols`), stopping at matmuls and
/// params.
fn reads_row_statistic(block: &Block, v: Value) -> bool {
    let mut stack = vec![v];
    let mut seen = vec![false; block.insts.len()];
    while let Some(x) = stack.pop() {
        if std::mem::replace(&mut seen[x.index()], true) {
            continue;
        }
        match block.inst(x) {
            Inst::Reduce { axis: Axis::Cols, .. } => return true,
            Inst::Unary { .. }
            | Inst::Binary { .. }
            | Inst::Select { .. }
            | Inst::Cast { .. }
            | Inst::Broadcast { .. } => stack.extend(block.inst(x).operands()),
            _ => {}
        }
    }
    false
}

/// Reductions along one axis; `ŷ`, `ĝ` are `y`, `g` broadcast back to `x`'s shape.
fn reduce(
    b: &mut Builder<'_>,
    v: Value,
    op: ReduceOp,
    axis: Axis,
    arg: Value,
    g: Value,
    span: Span,
) -> Result<(), GradError> {
    let shape = b.fwd.ty(arg).shape.clone();
    let (x, y) = (b.primal(arg), b.primal(v));
    let dx = match op {
        // y = Σ x  ⇒  dx = ĝ
        ReduceOp::Sum => b.broadcast(g, &shape, span)?,
        // y = log Σ e^x  ⇒  dx = ĝ e^(x - ŷ) (the softmax)
        ReduceOp::LogSumExp => {
            let shifted = b.bin(BinaryOp::Sub, x, y, span)?;
            let softmax = b.un(UnaryOp::Exp, shifted, span)?;
            b.bin(BinaryOp::Mul, g, softmax, span)?
        }
        // y = max x  ⇒  dx = [x = ŷ] ĝ / #{x = ŷ} (split evenly between tied maxima)
        ReduceOp::Max => {
            let hit = b.bin(BinaryOp::Eq, x, y, span)?;
            let one = b.konst(1.0, span)?;
            let ones = b.mask(hit, one, span)?;
            let count = b.reduce(ReduceOp::Sum, axis, ones, span)?;
            let share = b.bin(BinaryOp::Div, g, count, span)?;
            b.mask(hit, share, span)?
        }
    };
    b.accumulate(arg, dx)
}

/// Reductions over groups of columns, as [`reduce`] with `ŷ`, `ĝ` expanded
/// back over each group's columns instead of broadcast.
fn group_reduce(
    b: &mut Builder<'_>,
    v: Value,
    op: ReduceOp,
    groups: ColGroups,
    arg: Value,
    g: Value,
    span: Span,
) -> Result<(), GradError> {
    let cols = b.fwd.ty(arg).shape.cols.clone();
    let (x, y) = (b.primal(arg), b.primal(v));
    let expand =
        |b: &mut Builder<'_>, value: Value| b.emit(Inst::GroupExpand { groups, arg: value, cols: cols.clone() }, span);
    let dx = match op {
        // y = Σ x over a group  ⇒  dx = ĝ
        ReduceOp::Sum => expand(b, g)?,
        // y = log Σ e^x over a group  ⇒  dx = ĝ e^(x - ŷ) (the group's softmax)
        ReduceOp::LogSumExp => {
            let y_hat = expand(b, y)?;
            let shifted = b.bin(BinaryOp::Sub, x, y_hat, span)?;
            let softmax = b.un(UnaryOp::Exp, shifted, span)?;
            let g_hat = expand(b, g)?;
            b.bin(BinaryOp::Mul, g_hat, softmax, span)?
        }
        // y = max x over a group  ⇒  dx = [x = ŷ] ĝ / #{x = ŷ} (split evenly between tied maxima)
        ReduceOp::Max => {
            let y_hat = expand(b, y)?;
            let hit = b.bin(BinaryOp::Eq, x, y_hat, span)?;
            let one = b.konst(1.0, span)?;
            let ones = b.mask(hit, one, span)?;
            let count = b.emit(Inst::GroupReduce { op: ReduceOp::Sum, groups, arg: ones }, span)?;
            let share = b.bin(BinaryOp::Div, g, count, span)?;
            let share = expand(b, share)?;
            b.mask(hit, share, span)?
        }
    };
    b.accumulate(arg, dx)
}

/// `y = x[:, start + k·step]` for `k < len`  ⇒  `dx` is `g` put back at those
/// columns and 0 elsewhere: `[0 | g | 0]` for a range, `interleave(g, 0)` or
/// `interleave(0, g)` for the even or odd half of a tensor.
#[allow(clippy::too_many_arguments)]
fn slice(
    b: &mut Builder<'_>,
    v: Value,
    arg: Value,
    start: &Dim,
    len: &Dim,
    step: i64,
    g: Value,
    span: Span,
) -> Result<(), GradError> {
    let shape = b.fwd.ty(arg).shape.clone();
    let rows = shape.rows.clone();
    let dx = match step {
        1 => {
            let end = start.add(len).map_err(|e| GradError::Internal(e.to_string()))?;
            let after = shape.cols.sub(&end).map_err(|e| GradError::Internal(e.to_string()))?;
            let mut parts = Vec::new();
            if start.as_const() != Some(0) {
                parts.push(b.full(0.0, &Shape::new(rows.clone(), start.clone()), span)?);
            }
            parts.push(g);
            if after.as_const() != Some(0) {
                parts.push(b.full(0.0, &Shape::new(rows.clone(), after), span)?);
            }
            if parts.len() == 1 {
                g
            } else {
                b.emit(Inst::ConcatCols { parts }, span)?
            }
        }
        2 if halves(start, len, &shape.cols) => {
            let zero = b.full(0.0, &Shape::new(rows, len.clone()), span)?;
            let (even, odd) = if start.as_const() == Some(0) { (g, zero) } else { (zero, g) };
            b.emit(Inst::Interleave { even, odd }, span)?
        }
        _ => {
            return Err(not_differentiable(
                b,
                v,
                "only column ranges and the even or odd half of a tensor have a gradient rule",
            ))
        }
    };
    b.accumulate(arg, dx)
}

/// Whether a step-2 slice is the whole even (`start` 0) or odd (`start` 1) half.
fn halves(start: &Dim, len: &Dim, cols: &Dim) -> bool {
    let whole = len.mul(&Dim::constant(2)).is_ok_and(|twice| &twice == cols);
    whole && matches!(start.as_const(), Some(0 | 1))
}
