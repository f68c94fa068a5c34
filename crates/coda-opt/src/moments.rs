//! Centred sums of squares from raw moments, so that a producer's epilogue
//! can emit the partial sums a deferred LayerNorm needs.
//!
//! LayerNorm's variance `Σ(x − μ)²` reads `μ`, a reduction of the same row,
//! so no GEMM epilogue producing `x` can compute it. Once the LayerNorm is
//! deferred through its consumers ([`crate::affine`]), the centred tile
//! `x − μ` is needed only by this sum; written with the raw moments `Σx`
//! and `Σx²`, both become per-tile partials of the producer, finished by
//! the consumer with `μ`.

use coda_ir::infer::TypeError;
use coda_ir::{Axis, BinaryOp, Block, Inst, ReduceOp, Value};

/// `Σ_k (x_k − a)² = Σx² − a (2 Σx − K a)` per row, for any per-row `a` and
/// `K` columns (expand the square: `Σx² − 2aΣx + K a²`). The left side is
/// never negative; the right side can round below zero when `a²` dominates
/// (a row that is nearly constant), so the result is `max(·, 0)`, which
/// changes nothing in exact arithmetic.
pub(crate) const RULE: &str = "variance-from-moments";

/// The parts of `Σ (x − a)²`.
struct Centred {
    /// The tile `x`.
    x: Value,
    /// The per-row shift `a` (`[M, 1]`).
    shift: Value,
}

/// Rewrites every `Σ (x − a)²` whose centred tile has no other user and
/// whose shift `a` depends on a row reduction (a value a producer epilogue
/// cannot have); returns the block and the number of rewrites.
pub(crate) fn rewrite(block: &Block) -> Result<(Block, usize), TypeError> {
    let users = block.users();
    crate::rewriter::rebuild(block, |out, map, v| {
        let c = centred_square_sum(block, v, &users)?;
        Some(from_moments(out, map[c.x.index()], map[c.shift.index()], block.insts.span(v)))
    })
}

/// `v` as `Σ (x − a)²` over columns, when the rule applies.
fn centred_square_sum(block: &Block, v: Value, users: &[Vec<Value>]) -> Option<Centred> {
    let Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Cols, arg } = block.inst(v) else { return None };
    let Inst::Binary { op: BinaryOp::Mul, lhs, rhs } = block.inst(*arg) else { return None };
    if lhs != rhs || users[lhs.index()].iter().any(|u| u != arg) {
        return None;
    }
    let Inst::Binary { op: BinaryOp::Sub, lhs: x, rhs: wide } = block.inst(*lhs) else { return None };
    let Inst::Broadcast { arg: shift, .. } = block.inst(*wide) else { return None };
    let shape = &block.ty(*shift).shape;
    let per_row = shape.cols.is_one() && !shape.rows.is_one() && block.ty(*shift).dtype.is_float();
    (per_row && reads_row_reduction(block, *shift)).then_some(Centred { x: *x, shift: *shift })
}

/// Whether a reduction over columns is among the operands of `v`, transitively.
fn reads_row_reduction(block: &Block, v: Value) -> bool {
    let mut stack = vec![v];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        if matches!(block.inst(x), Inst::Reduce { axis: Axis::Cols, .. }) {
            return true;
        }
        stack.extend(block.inst(x).operands());
    }
    false
}

/// `max(Σx² − a (2 Σx − K a), 0)` in `out`.
fn from_moments(out: &mut Block, x: Value, a: Value, span: coda_diagnostics::Span) -> Result<Value, TypeError> {
    let rows = out.ty(a).shape.clone();
    let k = out.ty(x).shape.cols.clone();
    let mut push = |inst: Inst| out.push(inst, span);
    let square = push(Inst::Binary { op: BinaryOp::Mul, lhs: x, rhs: x })?;
    let sum_sq = push(Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Cols, arg: square })?;
    let sum = push(Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Cols, arg: x })?;
    let wide = |push: &mut dyn FnMut(Inst) -> Result<Value, TypeError>, inst: Inst| -> Result<Value, TypeError> {
        let scalar = push(inst)?;
        push(Inst::Broadcast { arg: scalar, shape: rows.clone() })
    };
    let two = wide(&mut push, Inst::Const(2.0))?;
    let width = wide(&mut push, Inst::DimValue(k))?;
    let zero = wide(&mut push, Inst::Const(0.0))?;
    let twice_sum = push(Inst::Binary { op: BinaryOp::Mul, lhs: two, rhs: sum })?;
    let k_a = push(Inst::Binary { op: BinaryOp::Mul, lhs: width, rhs: a })?;
    let inner = push(Inst::Binary { op: BinaryOp::Sub, lhs: twice_sum, rhs: k_a })?;
    let correction = push(Inst::Binary { op: BinaryOp::Mul, lhs: a, rhs: inner })?;
    let centred = push(Inst::Binary { op: BinaryOp::Sub, lhs: sum_sq, rhs: correction })?;
    push(Inst::Binary { op: BinaryOp::Max, lhs: centred, rhs: zero })
}
