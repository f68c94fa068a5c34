//! The placement rules of the partitioner (see the parent module): inline,
//! epilogue (with the locality check on accumulator columns), partials,
//! row kernels, column-reduction kernels, and materialization requests.

use super::refusal::Refusal;
use super::{is_inlinable, recompute, Home, KPartPlan, KernelPlan, OperandPlan, Plan, MAX_K_PARTS};
use crate::kir::{ColMap, PartialKind};
use coda_ir::{Axis, BinaryOp, Block, BlockKind, ColGroups, DType, Inst, ReduceOp, RopeStyle, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The partitioner's state.
pub(super) struct Planner<'a> {
    pub(super) block: &'a Block,
    pub(super) plan: Plan,
    /// For inline values: the first kernel position that may read them.
    pub(super) ready: Vec<usize>,
    /// For inline values: whether they read row partials.
    pub(super) row_partial_dep: Vec<bool>,
    /// For epilogue values: how many things in their own kernel use them.
    pub(super) uses_in_kernel: Vec<usize>,
    /// For inline values: what a kernel recomputes or loads to evaluate
    /// them ([`recompute`]); empty in explicit kernels, which have one GEMM.
    pub(super) closures: Vec<Vec<Value>>,
    /// For each kernel: the stored tiles its work loads, each with the
    /// values that read it ([`Planner::note_reads`]).
    pub(super) reads: Vec<BTreeMap<Value, BTreeSet<Value>>>,
    /// What a first walk says about the kernels ([`super::partition`]);
    /// inline values join GEMM epilogues only in a walk that has it.
    pub(super) foresight: Option<super::join::Foresight>,
    /// Whether [`Planner::join_epilogue`] met a GEMM whose output tile is
    /// the shape of the value it placed.
    pub(super) join_choices: bool,
    /// Matmuls whose GEMMs keep a bare epilogue ([`super::partition`]).
    pub(super) unfused: BTreeSet<Value>,
    /// Matmuls whose GEMMs take no per-head reductions: no tile
    /// configuration they may run with holds whole heads in each warp
    /// ([`super::partition`]).
    pub(super) split_heads: BTreeSet<Value>,
}

impl Planner<'_> {
    fn c(&self, v: Value) -> Value {
        self.plan.canon[v.index()]
    }

    pub(super) fn home(&self, v: Value) -> &Home {
        &self.plan.homes[self.c(v).index()]
    }

    pub(super) fn operands(&self, v: Value) -> Vec<Value> {
        self.block.inst(v).operands().into_iter().map(|o| self.c(o)).collect()
    }

    /// The first kernel position at which another kernel may read `v`.
    pub(super) fn avail(&self, v: Value) -> usize {
        match self.home(v) {
            Home::Dead | Home::Param => 0,
            Home::Inline => self.ready[self.c(v).index()],
            other => other.kernel().map_or(0, |k| k + 1),
        }
    }

    /// Whether reading `v` means finishing row partials.
    pub(super) fn reads_row_partials(&self, v: Value) -> bool {
        match self.home(v) {
            Home::RowPartial(..) => true,
            Home::Inline => self.row_partial_dep[self.c(v).index()],
            _ => false,
        }
    }

    /// Whether kernel `k` is the GEMM of a matmul asked to run unfused.
    pub(super) fn is_unfused(&self, k: usize) -> bool {
        matches!(&self.plan.kernels[k], KernelPlan::Gemm { matmul, .. } if self.unfused.contains(matmul))
    }

    pub(super) fn push_kernel(&mut self, kernel: KernelPlan) -> usize {
        self.plan.kernels.push(kernel);
        self.reads.push(BTreeMap::new());
        self.plan.kernels.len() - 1
    }

    /// The last row kernel over `rows` rows at position `>= first`.
    pub(super) fn last_row_kernel(&self, rows: &coda_ir::Dim, first: usize) -> Option<usize> {
        let last = self.plan.kernels.iter().rposition(|k| matches!(k, KernelPlan::Row { rows: r } if r == rows))?;
        (last >= first).then_some(last)
    }

    /// Places one live representative.
    pub(super) fn place(&mut self, v: Value, inst: &Inst) {
        let home = match inst {
            Inst::Param(_) => Home::Param,
            Inst::MatMul { .. } => self.place_matmul(v, inst),
            _ => self.choose(v, inst),
        };
        if let (Some(k), false) = (home.kernel(), matches!(inst, Inst::MatMul { .. })) {
            for o in self.operands(v) {
                self.note_reads(k, v, o);
            }
        }
        self.plan.homes[v.index()] = home;
    }

    fn choose(&mut self, v: Value, inst: &Inst) -> Home {
        if let Some(home) = self.try_inline(v, inst) {
            return home;
        }
        if let Some(home) = self.try_partial(inst) {
            return home;
        }
        match self.try_epilogue(v, inst) {
            Ok((k, map)) => {
                for o in self.operands(v) {
                    if *self.home(o) == Home::Acc(k) {
                        self.uses_in_kernel[o.index()] += 1;
                    }
                }
                self.plan.maps[v.index()] = Some(map);
                return Home::Acc(k);
            }
            Err(reason) => self.plan.why_not_epilogue[v.index()] = Some(reason),
        }
        if let Inst::Reduce { op, axis: Axis::Rows, arg } = inst {
            if let Some(k) = self.grid_reduction(v, *op, *arg) {
                return Home::Grid(k);
            }
            return self.place_col(v);
        }
        if let Some(k) = self.grid_member(v, inst) {
            return Home::Grid(k);
        }
        if let Some(k) = self.col_member(v) {
            return Home::Col(k);
        }
        self.place_row(v)
    }

    fn try_inline(&mut self, v: Value, inst: &Inst) -> Option<Home> {
        if !is_inlinable(inst) {
            return None;
        }
        let mut ready = 0;
        let mut dep = false;
        // A vector an earlier kernel stored (a row or column kernel, or a
        // GEMM with one row or column, e.g. a weight product of a deferred
        // LayerNorm) is a load of it, read by a broadcast. A per-row vector
        // of a row kernel that is not the last one is also read by vector
        // arithmetic (a row statistic finished from partials, as the `zdz`
        // rule makes); the last row kernel's (or a grid reduction's) the
        // value joins instead, since a row kernel uses its own reductions
        // and, inline, every user of the value would wait for the next
        // kernel.
        let broadcast = matches!(inst, Inst::Broadcast { .. });
        let closed_row_vector = |o: Value, x: usize| {
            let shape = &self.block.ty(o).shape;
            shape.cols.is_one() && !shape.rows.is_one() && self.last_row_kernel(&shape.rows, x) != Some(x)
        };
        for o in self.operands(v) {
            match self.home(o) {
                Home::Param | Home::Inline | Home::RowPartial(..) | Home::ColPartial(_) => {}
                Home::Row(_) | Home::Col(_) | Home::Acc(_) | Home::Grid(_) if broadcast => {}
                Home::Row(x) if closed_row_vector(o, *x) => {}
                _ => return None,
            }
            ready = ready.max(self.avail(o));
            dep |= self.reads_row_partials(o);
        }
        if self.block.kind != BlockKind::Kernel {
            let operands = self.operands(v);
            let parts = operands.iter().map(|o| match self.home(*o) {
                Home::Inline => self.closures[o.index()].as_slice(),
                _ => std::slice::from_ref(o),
            });
            let closure = recompute::closure(v, parts)?;
            self.closures[v.index()] = closure;
        }
        self.ready[v.index()] = ready;
        self.row_partial_dep[v.index()] = dep;
        Some(Home::Inline)
    }

    /// Reductions and picks of epilogue values become partials.
    fn try_partial(&mut self, inst: &Inst) -> Option<Home> {
        let unfused = |p: &Self, o: &Value| matches!(*p.home(*o), Home::Acc(k) if p.is_unfused(k));
        match inst {
            _ if inst.operands().iter().any(|o| self.is_stored_concat(*o) || unfused(self, o)) => None,
            Inst::Reduce { op, axis: Axis::Cols, arg } => {
                let Home::Acc(k) = *self.home(*arg) else { return None };
                let (kind, reduced) = match op {
                    ReduceOp::Sum => match self.square_of(*arg, k) {
                        Some(x) => (PartialKind::RowSumSq, x),
                        None => (PartialKind::RowSum, self.c(*arg)),
                    },
                    ReduceOp::Max => (PartialKind::RowMax, self.c(*arg)),
                    ReduceOp::LogSumExp => (PartialKind::RowLse, self.c(*arg)),
                };
                self.uses_in_kernel[reduced.index()] += 1;
                Some(Home::RowPartial(k, kind))
            }
            Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Rows, arg } => {
                let Home::Acc(k) = *self.home(*arg) else { return None };
                let a = self.c(*arg).index();
                self.uses_in_kernel[a] += 1;
                Some(Home::ColPartial(k))
            }
            Inst::TakeCols { arg, index } => {
                let Home::Acc(k) = *self.home(*arg) else { return None };
                let index_ok = matches!(self.home(*index), Home::Param | Home::Inline | Home::RowPartial(..))
                    && self.avail(*index) <= k;
                if !index_ok {
                    return None;
                }
                let a = self.c(*arg).index();
                self.uses_in_kernel[a] += 1;
                Some(Home::RowPartial(k, PartialKind::RowPick))
            }
            _ => None,
        }
    }

    /// `x` when `v` is `x * x` with `x` a register value of kernel `k`.
    pub(crate) fn square_of(&self, v: Value, k: usize) -> Option<Value> {
        match self.block.inst(self.c(v)) {
            Inst::Binary { op: BinaryOp::Mul, lhs, rhs }
                if self.c(*lhs) == self.c(*rhs) && *self.home(*lhs) == Home::Acc(k) =>
            {
                Some(self.c(*lhs))
            }
            _ => None,
        }
    }

    /// An epilogue home: the latest accumulator among the operands, every
    /// other operand ready before that GEMM, and local column access.
    fn try_epilogue(&self, v: Value, inst: &Inst) -> Result<(usize, ColMap), Refusal> {
        let ops = self.operands(v);
        let k = ops
            .iter()
            .filter_map(|o| match self.home(*o) {
                Home::Acc(k) => Some(*k),
                _ => None,
            })
            .max()
            .ok_or(Refusal::NoAccumulator)?;
        if self.is_unfused(k) {
            return Err(Refusal::Unfused);
        }
        for o in &ops {
            let ok = match self.home(*o) {
                Home::Acc(x) => *x <= k,
                Home::Param => true,
                Home::Inline => self.avail(*o) <= k,
                other => other.kernel().is_some_and(|x| x < k),
            };
            if !ok {
                return Err(Refusal::ReadsLater(*o, self.describe(*o)));
            }
        }
        Ok((k, self.epilogue_map(inst, k)?))
    }

    /// The register map of an epilogue value, or why its columns are not
    /// local to a thread.
    fn epilogue_map(&self, inst: &Inst, k: usize) -> Result<ColMap, Refusal> {
        let reg = |o: &Value| -> Option<ColMap> {
            (*self.home(*o) == Home::Acc(k)).then(|| self.plan.maps[self.c(*o).index()].clone()).flatten()
        };
        if inst.operands().iter().any(|o| matches!(self.block.inst(self.c(*o)), Inst::UnpermuteCols { .. })) {
            return Err(Refusal::ReadsUnpermuted);
        }
        if inst.operands().iter().any(|o| self.is_stored_concat(*o)) {
            return Err(Refusal::ReadsStoredConcat);
        }
        let maps: Vec<ColMap> = inst.operands().iter().filter_map(reg).collect();
        let first = maps.first().cloned().ok_or(Refusal::NoAccumulator)?;
        let same = maps.iter().all(|m| *m == first);
        match inst {
            Inst::Unary { .. } | Inst::Cast { .. } | Inst::Binary { .. } | Inst::Select { .. } => {
                if same {
                    Ok(first)
                } else {
                    let operands = inst.operands().into_iter().filter_map(|o| Some((o, reg(&o)?))).collect();
                    Err(Refusal::MixedColumns(operands))
                }
            }
            Inst::SliceCols { start, len, step, .. } => slice_map(&first, start, len, *step),
            Inst::Interleave { .. } => {
                if !same || first.stride != 2 {
                    return Err(Refusal::Interleave);
                }
                let len = first.len.mul(&coda_ir::Dim::constant(2)).map_err(|e| Refusal::Dim(e.to_string()))?;
                Ok(ColMap { offset: first.offset, stride: 1, len })
            }
            Inst::RopePartner { spec, .. } => match spec.style {
                RopeStyle::Interleaved => {
                    let start = spec.start.as_const().ok_or(Refusal::RopeRuntimeStart)?;
                    if first.stride == 1 && (first.offset + start) % 2 == 0 {
                        Ok(first)
                    } else {
                        Err(Refusal::RopeOddStart)
                    }
                }
                RopeStyle::Half => Err(Refusal::RopeHalf(spec.rotary_dim)),
            },
            // Only stored: the store writes column `c` to `perm.source(c)`.
            Inst::UnpermuteCols { .. } if first.offset == 0 && first.stride == 1 => Ok(first),
            // Per-head statistics of heads that one warp holds whole: each
            // thread reduces its columns of the head, then its quad
            // (`emit/gemm/heads.rs`). One value per head and row, held by
            // the head's accumulator columns (stride = the head width).
            Inst::GroupReduce { op: ReduceOp::Sum | ReduceOp::Max, groups: ColGroups::Heads(width), arg } => {
                let heads_fit = first.stride == 1 && first.offset % width == 0 && crate::config::whole_heads(*width);
                let gemm_ok = match &self.plan.kernels[k] {
                    KernelPlan::Gemm { matmul, .. } => !self.split_heads.contains(matmul),
                    _ => false,
                };
                if !heads_fit || self.block.kind == BlockKind::Kernel {
                    return Err(Refusal::OtherThreads);
                }
                if !gemm_ok {
                    return Err(Refusal::HeadsAcrossWarps(*width));
                }
                let heads = self.block.ty(self.c(*arg)).shape.cols.div_exact(&coda_ir::Dim::constant(*width));
                let len = heads.map_err(|e| Refusal::Dim(e.to_string()))?;
                Ok(ColMap { offset: first.offset, stride: *width, len })
            }
            // A per-head value over its head's columns.
            Inst::GroupExpand { groups: ColGroups::Heads(width), cols, .. } if same && first.stride == *width => {
                Ok(ColMap { offset: first.offset, stride: 1, len: cols.clone() })
            }
            Inst::Broadcast { .. } => Err(Refusal::Broadcast),
            Inst::Transpose { .. } => Err(Refusal::Transpose),
            // Only stored, a part at a time (`kir::Store::col_offset`): parts
            // of one register map and constant widths, all in registers.
            Inst::ConcatCols { parts } => {
                let whole = maps.len() == parts.len() && same && first.stride == 1;
                let constant = parts.iter().all(|p| self.block.ty(*p).shape.cols.as_const().is_some());
                if whole && constant {
                    Ok(first)
                } else {
                    Err(Refusal::Concat)
                }
            }
            _ => Err(Refusal::OtherThreads),
        }
    }

    /// Whether `v` is a concatenation living in an epilogue (stored a part
    /// at a time, readable by nothing else in that epilogue).
    pub(super) fn is_stored_concat(&self, v: Value) -> bool {
        matches!(self.block.inst(self.c(v)), Inst::ConcatCols { .. }) && matches!(self.home(v), Home::Acc(_))
    }

    /// `` `x` (%3) `` or `%3`.
    pub(super) fn describe(&self, v: Value) -> String {
        match self.block.names.get(v.index()).cloned().flatten() {
            Some(name) => format!("`{name}` ({v})"),
            None => format!("{v}"),
        }
    }

    fn place_matmul(&mut self, v: Value, inst: &Inst) -> Home {
        let Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, operand_dtype } = inst else {
            return Home::Dead;
        };
        let (a, b, parts) = match self.k_parts(*lhs, *rhs, *lhs_transposed || *rhs_transposed, *operand_dtype) {
            Some(mut parts) => {
                let first = parts.remove(0);
                (first.a, first.b, parts)
            }
            None => {
                let a = self.operand(*lhs, *lhs_transposed, *operand_dtype, false);
                let b = self.operand(*rhs, *rhs_transposed, *operand_dtype, true);
                (a, b, Vec::new())
            }
        };
        let k = self.push_kernel(KernelPlan::Gemm { matmul: v, a, b, parts });
        let len = self.block.ty(v).shape.cols.clone();
        self.plan.maps[v.index()] = Some(ColMap { offset: 0, stride: 1, len });
        Home::Acc(k)
    }

    /// The operand pairs of a product over a concatenated inner dimension
    /// (`[A₀ | A₁] @ [B₀; B₁]`, neither side transposed, the parts' widths
    /// equal pairwise), each planned as a plain operand; none for any other
    /// product, or when a part would be read transposed.
    fn k_parts(&mut self, lhs: Value, rhs: Value, transposed: bool, dtype: DType) -> Option<Vec<KPartPlan>> {
        let (Inst::ConcatCols { parts: left }, Inst::StackRows { parts: right }) =
            (self.block.inst(self.c(lhs)), self.block.inst(self.c(rhs)))
        else {
            return None;
        };
        let (left, right) = (left.clone(), right.clone());
        let count_fits = left.len() == right.len() && (2..=MAX_K_PARTS).contains(&left.len());
        let widths_match =
            left.iter().zip(&right).all(|(a, b)| self.block.ty(*a).shape.cols == self.block.ty(*b).shape.rows);
        let plain = left.iter().chain(&right).all(|p| !self.peel(*p, false, dtype).1);
        if transposed || !count_fits || !widths_match || !plain {
            return None;
        }
        let parts = left
            .iter()
            .zip(&right)
            .map(|(a, b)| KPartPlan {
                a: self.operand(*a, false, dtype, false),
                b: self.operand(*b, false, dtype, true),
            })
            .collect();
        Some(parts)
    }

    fn operand(&mut self, w: Value, transposed: bool, dtype: DType, is_rhs: bool) -> OperandPlan {
        let (w, transposed) = self.peel(w, transposed, dtype);
        let (w, row_perm) = match self.block.inst(w) {
            // Only the loader of a `B_NxK` operand can gather rows.
            Inst::PermuteRows { arg, perm } if transposed && is_rhs => (self.c(*arg), Some(*perm)),
            _ => (w, None),
        };
        let param = |v: Value| match self.block.inst(self.c(v)) {
            Inst::Param(index) if self.block.params.get(*index).is_some_and(|p| p.dtype == dtype) => Some(*index),
            _ => None,
        };
        if let Some(index) = param(w) {
            return OperandPlan::Param { index, transposed, row_perm, stacked: None };
        }
        // Stacked weights (two of equal rows) are read where they are.
        if let Inst::StackRows { parts } = self.block.inst(w) {
            if let ([first, second], true) = (parts.as_slice(), transposed && is_rhs) {
                let equal = self.block.ty(*first).shape == self.block.ty(*second).shape;
                if let (Some(index), Some(other), true) = (param(*first), param(*second), equal) {
                    return OperandPlan::Param { index, transposed, row_perm, stacked: Some(other) };
                }
            }
        }

        self.request_mat(w, dtype);
        OperandPlan::Mat { value: w, transposed, row_perm }
    }

    /// Sees through transposes and casts to the operand type (the matmul
    /// rounds to it anyway).
    fn peel(&self, mut w: Value, mut transposed: bool, dtype: DType) -> (Value, bool) {
        loop {
            w = self.c(w);
            match self.block.inst(w) {
                Inst::Transpose { arg } => {
                    w = *arg;
                    transposed = !transposed;
                }
                Inst::Cast { to, arg } if *to == dtype => w = *arg,
                _ => return (w, transposed),
            }
        }
    }

    /// Asks the home kernel of `v` to store it as `dtype`; inline values
    /// join a GEMM epilogue ([`Self::join_epilogue`]), or, like inputs and
    /// partials, get a row kernel to do it. Returns the kernel.
    pub(super) fn request_mat(&mut self, v: Value, dtype: DType) -> usize {
        let v = self.c(v);
        if let Some(k) = self.plan.mats.get(&(v, dtype)) {
            return *k;
        }
        let k = match self.home(v).clone() {
            Home::Acc(k) => {
                self.uses_in_kernel[v.index()] += 1;
                k
            }
            Home::Row(k) | Home::Col(k) | Home::Grid(k) => k,
            _ => self.join_epilogue(v).unwrap_or_else(|| self.row_kernel_for(v)),
        };
        self.note_reads(k, v, v);
        self.plan.mats.insert((v, dtype), k);
        k
    }

    /// A row kernel that can evaluate the homeless value `v`.
    fn row_kernel_for(&mut self, v: Value) -> usize {
        let rows = self.block.ty(v).shape.rows.clone();
        let first = self.avail(v);
        match self.last_row_kernel(&rows, 0) {
            Some(k) if k >= first || self.row_computes(v, k) => k,
            _ => self.push_kernel(KernelPlan::Row { rows }),
        }
    }

    fn place_row(&mut self, v: Value) -> Home {
        let rows = self.block.ty(v).shape.rows.clone();
        let k = match self.last_row_kernel(&rows, 0) {
            Some(c) if self.fits_row(v, c) => c,
            _ => self.push_kernel(KernelPlan::Row { rows }),
        };
        if !matches!(self.block.inst(v), Inst::Transpose { .. }) {
            for o in self.operands(v) {
                if matches!(self.home(o), Home::Acc(x) if *x < k) {
                    self.try_pull(o, k);
                }
            }
        }
        Home::Row(k)
    }

    fn fits_row(&self, v: Value, c: usize) -> bool {
        let transpose = matches!(self.block.inst(v), Inst::Transpose { .. });
        self.operands(v).into_iter().all(|o| match self.home(o) {
            Home::Row(x) if *x == c => !transpose,
            Home::Param => true,
            Home::Inline => self.avail(o) <= c || self.row_computes(o, c),
            other => other.kernel().is_some_and(|x| x < c),
        })
    }

    /// Whether row kernel `c` can evaluate the inline value `o`: everything
    /// it reads is ready before `c` or is a per-row value `c` computes
    /// itself. A row kernel computes its per-row values first, in order,
    /// each reduction a loop over the row, so a reduction may read an
    /// earlier one: LayerNorm's variance reads its mean, and a block
    /// input's LayerNorm is one kernel that reads the row three times
    /// (mean, variance, normalize) from one load of it from DRAM.
    pub(super) fn row_computes(&self, o: Value, c: usize) -> bool {
        let mut stack = vec![o];
        let mut seen = std::collections::BTreeSet::new();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            match self.home(x) {
                Home::Row(k) if *k == c && self.block.ty(x).shape.cols.is_one() => {}
                Home::Inline if self.avail(x) > c => stack.extend(self.operands(x)),
                _ if self.avail(x) <= c => {}
                _ => return false,
            }
        }
        true
    }

    /// Whether `o` is a broadcast of a value row kernel `c` computes itself.
    pub(super) fn broadcast_of(&self, o: Value, c: usize) -> bool {
        match self.block.inst(self.c(o)) {
            Inst::Broadcast { arg, .. } => *self.home(*arg) == Home::Row(c),
            _ => false,
        }
    }

    /// Moves an epilogue value nothing else in its GEMM uses into row kernel
    /// `k`, and with it those of its operands that then have no other use in
    /// the GEMM, and so on down. A chain of such values is as long as the
    /// program, so the walk keeps its own stack of (operands left, GEMM)
    /// frames, in the order a recursion would visit them.
    fn try_pull(&mut self, o: Value, k: usize) {
        let mut frames: Vec<(std::vec::IntoIter<Value>, usize)> = self.pull_one(o, k).into_iter().collect();
        while let Some((operands, x)) = frames.last_mut() {
            let x = *x;
            let Some(u) = operands.next() else {
                frames.pop();
                continue;
            };
            if *self.home(u) == Home::Acc(x) {
                self.uses_in_kernel[u.index()] = self.uses_in_kernel[u.index()].saturating_sub(1);
                frames.extend(self.pull_one(u, k));
            }
        }
    }

    /// Moves `o` alone into row kernel `k` if it can go ([`Self::try_pull`]):
    /// then its operands to look at next and its GEMM. A value that a kernel
    /// before `k` loads stays in its GEMM, which stores it for that kernel
    /// (a column kernel's log-sum-exp over a clamped product, whose
    /// subtraction is the row kernel's).
    fn pull_one(&mut self, o: Value, k: usize) -> Option<(std::vec::IntoIter<Value>, usize)> {
        let Home::Acc(x) = *self.home(o) else { return None };
        let rows_match =
            matches!(&self.plan.kernels[k], KernelPlan::Row { rows } if *rows == self.block.ty(o).shape.rows);
        let inst = self.block.inst(o);
        let read_before = self.reads[..k].iter().any(|reads| reads.contains_key(&o));
        if self.uses_in_kernel[o.index()] != 0 || !rows_match || !is_inlinable(inst) || read_before {
            return None;
        }
        if matches!(inst, Inst::TakeCols { .. } | Inst::Transpose { .. } | Inst::GatherRows { .. }) {
            return None;
        }
        self.plan.homes[o.index()] = Home::Row(k);
        self.plan.maps[o.index()] = None;
        Some((self.operands(o).into_iter(), x))
    }

    fn place_col(&mut self, v: Value) -> Home {
        let cols = self.block.ty(v).shape.cols.clone();
        let mut first = 0;
        for o in self.operands(v) {
            if self.reads_row_partials(o) {
                first = first.max(self.request_mat(o, DType::F32) + 1);
            }
        }
        let cand = self
            .plan
            .kernels
            .iter()
            .rposition(|k| matches!(k, KernelPlan::Col { cols: c } if *c == cols))
            .filter(|c| *c >= first && self.fits_col(v, *c));
        Home::Col(cand.unwrap_or_else(|| self.push_kernel(KernelPlan::Col { cols })))
    }

    fn fits_col(&self, v: Value, c: usize) -> bool {
        let inst = self.block.inst(v);
        let reduce_or_transpose = matches!(inst, Inst::Reduce { .. } | Inst::Transpose { .. });
        self.operands(v).into_iter().all(|o| {
            let mat_ok = || self.plan.mats.get(&(o, DType::F32)).is_some_and(|k| *k < c);
            match self.home(o) {
                Home::Col(x) if *x == c => !reduce_or_transpose,
                Home::Param => true,
                Home::Inline if self.reads_row_partials(o) => mat_ok(),
                Home::Inline => self.avail(o) <= c,
                Home::RowPartial(..) => mat_ok(),
                other => other.kernel().is_some_and(|x| x < c),
            }
        })
    }

    /// A column kernel that already computes an operand of the `[1, C]`
    /// value `v`, if `v` can join it.
    fn col_member(&self, v: Value) -> Option<usize> {
        let ty = self.block.ty(v);
        if !ty.shape.rows.is_one() {
            return None;
        }
        let c = self
            .operands(v)
            .into_iter()
            .filter_map(|o| match self.home(o) {
                Home::Col(x) => Some(*x),
                _ => None,
            })
            .max()?;
        let same_cols = matches!(&self.plan.kernels[c], KernelPlan::Col { cols } if *cols == ty.shape.cols);
        (same_cols && self.fits_col(v, c)).then_some(c)
    }

    /// Assigns every output to the kernel that stores it.
    pub(super) fn place_outputs(&mut self) {
        for output in &self.block.outputs {
            let v = self.c(output.value);
            let k = match self.home(v).clone() {
                Home::Acc(k) | Home::Row(k) | Home::Col(k) | Home::Grid(k) => k,
                _ => self.join_epilogue(v).unwrap_or_else(|| self.row_kernel_for(v)),
            };
            self.note_reads(k, v, v);
            self.plan.output_kernels.push(k);
        }
    }
}

/// The map of `x[:, start : start + len*step : step]` for `x` with map `m`.
fn slice_map(m: &ColMap, start: &coda_ir::Dim, len: &coda_ir::Dim, step: i64) -> Result<ColMap, Refusal> {
    let s = start.as_const().ok_or(Refusal::SliceRuntimeStart)?;
    let len = len.clone();
    match (m.stride, step) {
        (1, 1) => Ok(ColMap { offset: m.offset + s, stride: 1, len }),
        (1, 2) => Ok(ColMap { offset: (m.offset + s) & !1, stride: 2, len }),
        (2, 1) => Ok(ColMap { offset: m.offset + 2 * s, stride: 2, len }),
        _ => Err(Refusal::SliceStep(step)),
    }
}
