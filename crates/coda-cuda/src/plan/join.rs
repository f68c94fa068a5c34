//! Inline values that join a GEMM epilogue without reading its
//! accumulator.
//!
//! An inline value is recomputed by every kernel that reads it; when a
//! later kernel needs it stored (a GEMM operand, an output), some kernel
//! must evaluate it over its whole shape and store it. By default that is a
//! row kernel. A GEMM whose output tile has the value's shape evaluates it
//! just as well in its epilogue: each thread evaluates the value at its own
//! accumulator columns, from loads at those coordinates. When that epilogue
//! already loads a tensor the value reads, the loads are shared and the
//! value costs only its store, where a row kernel would read the tensor
//! again. The backward's SwiGLU output is the case: `y = swiglu(z)` reads
//! the saved `z` in pair layout (column `2j` holds `z[:, j]`, `2j + 1`
//! holds `z[:, F + j]`), which the dgrad GEMM `dy = dx @ w_down` (output
//! `[M, F]`) loads at its own tile coordinates to form `dz`, so it stores
//! `y` for the weight gradient `dx.T @ y` at the cost of the store alone.

use super::rules::Planner;
use super::{Home, KernelPlan};
use coda_ir::{BlockKind, Inst, Value};
use std::collections::{BTreeMap, BTreeSet};

/// An inline value that a GEMM's epilogue evaluates and stores
/// ([`super::Plan::joined`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Joined {
    /// The GEMM kernel.
    pub(crate) kernel: usize,
    /// The tensors it reads that the epilogue loads already.
    pub(crate) shared: Vec<Value>,
}

/// What a first walk of the partitioner, made without this rule, says
/// about the kernels an inline value could be stored by (see
/// [`super::partition`]): a value's home is chosen when the walk reaches
/// it, but which tensors a kernel loads is known only once the walk has
/// passed everything that kernel computes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Foresight {
    /// The stored tiles each GEMM's epilogue loads, by its matmul.
    gemm: BTreeMap<Value, BTreeSet<Value>>,
    /// For each inline value a row kernel stored (an operand of a later
    /// kernel, an output): the stored tiles that kernel loads for its other
    /// work.
    row: BTreeMap<Value, BTreeSet<Value>>,
}

impl Planner<'_> {
    /// The GEMM kernel whose epilogue evaluates and stores the inline value
    /// `v`, if one should (only in a walk with [`Foresight`]): `v` is
    /// element-wise (its own operation is one that a thread evaluates at
    /// its accumulator columns from its operands there: unary, binary,
    /// select or cast), its shape is the GEMM's output tile, everything it
    /// reads is ready before that GEMM, and the epilogue loads more of the
    /// tensors `v` reads than the row kernel that stored `v` in the first
    /// walk loads for its other work: then the loads are shared and `v`
    /// costs the epilogue its store alone. Among such GEMMs, the one
    /// sharing the most tensors, then the latest (the stored value lives
    /// the shortest).
    pub(super) fn join_epilogue(&mut self, v: Value) -> Option<usize> {
        let v = self.plan.canon[v.index()];
        if let Some(joined) = self.plan.joined.get(&v) {
            return Some(joined.kernel);
        }
        let elementwise = matches!(
            self.block.inst(v),
            Inst::Unary { .. } | Inst::Binary { .. } | Inst::Select { .. } | Inst::Cast { .. }
        );
        let shape = self.block.ty(v).shape.clone();
        let tile = !shape.rows.is_one() && !shape.cols.is_one();
        if self.block.kind == BlockKind::Kernel || *self.home(v) != Home::Inline || !elementwise || !tile {
            return None;
        }
        let first = self.avail(v);
        let output_tile = |k: usize| {
            matches!(&self.plan.kernels[k], KernelPlan::Gemm { matmul, .. } if self.block.ty(*matmul).shape == shape)
                && !self.is_unfused(k)
        };
        let candidates: Vec<usize> = (first..self.plan.kernels.len()).filter(|k| output_tile(*k)).collect();
        self.join_choices |= !candidates.is_empty();
        let foresight = self.foresight.as_ref()?;
        let leaves = self.tile_leaves(v);
        let row_shared = foresight.row.get(&v).map_or(0, |r| leaves.iter().filter(|l| r.contains(l)).count());
        let gemm_loads = |k: usize, x: &Value| match &self.plan.kernels[k] {
            KernelPlan::Gemm { matmul, .. } => {
                foresight.gemm.get(matmul).is_some_and(|r| r.contains(x))
                    || self.reads.get(k).is_some_and(|r| r.contains_key(x))
            }
            _ => false,
        };
        let (shared, kernel) = candidates
            .into_iter()
            .map(|k| (leaves.iter().copied().filter(|l| gemm_loads(k, l)).collect::<Vec<_>>(), k))
            .max_by_key(|(shared, k)| (shared.len(), *k))?;
        if shared.len() <= row_shared {
            return None;
        }
        self.plan.joined.insert(v, Joined { kernel, shared });
        Some(kernel)
    }

    /// What this walk says about its kernels, for a next walk.
    pub(super) fn foresight(&self) -> Foresight {
        let mut out = Foresight::default();
        for (k, kernel) in self.plan.kernels.iter().enumerate() {
            let Some(reads) = self.reads.get(k) else { continue };
            match kernel {
                KernelPlan::Gemm { matmul, .. } => {
                    out.gemm.insert(*matmul, reads.keys().copied().collect());
                }
                KernelPlan::Row { .. } => {
                    let mats = self.plan.mats.iter().filter(|(_, x)| **x == k).map(|((v, _), _)| *v);
                    let outputs = self.block.outputs.iter().zip(&self.plan.output_kernels);
                    let outputs = outputs.filter(|(_, x)| **x == k).map(|(o, _)| self.plan.canon[o.value.index()]);
                    let stored: BTreeSet<Value> = mats.chain(outputs).collect();
                    for v in stored.into_iter().filter(|v| *self.home(*v) == Home::Inline) {
                        let others = reads.iter().filter(|(_, readers)| readers.iter().any(|r| *r != v));
                        out.row.insert(v, others.map(|(tile, _)| *tile).collect());
                    }
                }
                KernelPlan::Col { .. } => {}
            }
        }
        out
    }

    /// Notes that `reader`, computed or stored by kernel `k`, reads `v`:
    /// the stored tiles `v` is loaded or recomputed from join `k`'s reads.
    pub(super) fn note_reads(&mut self, k: usize, reader: Value, v: Value) {
        let leaves: Vec<Value> =
            self.tile_leaves(v).into_iter().filter(|l| self.home(*l).kernel() != Some(k)).collect();
        if let Some(reads) = self.reads.get_mut(k) {
            for leaf in leaves {
                reads.entry(leaf).or_default().insert(reader);
            }
        }
    }

    /// The stored tiles (inputs and values earlier kernels store) that a
    /// kernel reading `v` loads: `v` itself, or for an inline value those
    /// of its closure.
    fn tile_leaves(&self, v: Value) -> Vec<Value> {
        let v = self.plan.canon[v.index()];
        let candidates = match self.home(v) {
            Home::Inline => self.closures[v.index()].clone(),
            _ => vec![v],
        };
        candidates
            .into_iter()
            .filter(|x| {
                let shape = &self.block.ty(*x).shape;
                let stored = !matches!(self.home(*x), Home::Inline | Home::Dead);
                stored && !shape.rows.is_one() && !shape.cols.is_one()
            })
            .collect()
    }
}
