//! Grid reductions: a sum or maximum over the rows of a per-row value joins
//! the row kernel that computes the value (or that can compute it: inputs,
//! inline values ready by then), instead of a column-reduction kernel of
//! its own. Every CTA of that row kernel reduces its rows in row order into
//! one partial per CTA; the CTA that arrives last reduces the partials in a
//! fixed order and evaluates the scalar work downstream of the reductions
//! (the *tail*, values homed [`Home::Grid`]).
//!
//! **Invariants:** a grid-reduced operand is a per-row (`[R, 1]`) value of
//! a row kernel over `R` rows; a tail value is a scalar whose operands are
//! grid values of the same kernel or values ready before it (inputs,
//! inline values, values stored by earlier kernels); nothing per-row in a
//! kernel reads its own tail (`fits_row` only admits values of earlier
//! kernels), so the tail can run after every row is done.

use super::rules::Planner;
use super::{is_inlinable, Home, KernelPlan};
use coda_ir::{Inst, ReduceOp, Value};

impl Planner<'_> {
    /// The row kernel that reduces `arg` over its rows into `v`, if this
    /// reduction can be a grid reduction (a new row kernel when no
    /// existing one can compute `arg`).
    pub(super) fn grid_reduction(&mut self, v: Value, op: ReduceOp, arg: Value) -> Option<usize> {
        if !matches!(op, ReduceOp::Sum | ReduceOp::Max) {
            return None;
        }
        let arg = self.plan.canon[arg.index()];
        let shape = self.block.ty(arg).shape.clone();
        if !shape.cols.is_one() || !self.block.ty(v).shape.cols.is_one() {
            return None;
        }
        match self.home(arg).clone() {
            Home::Dead => None,
            // The kernel that computes it reduces it (rows agree by shape).
            Home::Row(x) => Some(x),
            _ => {
                let first = self.avail(arg);
                let existing = self.last_row_kernel(&shape.rows, first).filter(|c| self.row_computable(arg, *c));
                Some(existing.unwrap_or_else(|| self.push_kernel(KernelPlan::Row { rows: shape.rows })))
            }
        }
    }

    /// Whether row kernel `c` can compute (or load) the per-row value `o`.
    fn row_computable(&self, o: Value, c: usize) -> bool {
        match self.home(o) {
            Home::Row(x) => *x == c,
            Home::Param => true,
            Home::Inline => self.avail(o) <= c || self.broadcast_of(o, c),
            Home::Dead => false,
            other => other.kernel().is_some_and(|x| x < c),
        }
    }

    /// The row kernel whose grid tail can compute the scalar `v`: one of
    /// its operands is a grid value of that kernel and every other operand
    /// is ready before it.
    pub(super) fn grid_member(&self, v: Value, inst: &Inst) -> Option<usize> {
        let shape = &self.block.ty(v).shape;
        if !is_inlinable(inst) || !shape.rows.is_one() || !shape.cols.is_one() {
            return None;
        }
        let operands = self.operands(v);
        let k = operands
            .iter()
            .filter_map(|o| match self.home(*o) {
                Home::Grid(x) => Some(*x),
                _ => None,
            })
            .max()?;
        let ready = operands.iter().all(|o| match self.home(*o) {
            Home::Grid(x) => *x <= k,
            Home::Param => true,
            Home::Inline => self.avail(*o) <= k,
            Home::Dead => false,
            other => other.kernel().is_some_and(|x| x < k),
        });
        ready.then_some(k)
    }
}
