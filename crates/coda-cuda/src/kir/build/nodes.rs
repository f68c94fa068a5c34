//! Node DAGs of a kernel under construction: where each value comes from
//! (a block input, this kernel's computation, an earlier kernel's store,
//! finished partials) and the node that computes or loads it.

use super::{space_of, Builder, Ctx};
use crate::error::CodegenError;
use crate::kir::{Node, NodeId, Op, PartialKind, Space};
use crate::plan::{Home, KernelPlan};
use coda_ir::{Axis, DType, Dim, Inst, Value};

impl Builder<'_> {
    /// The node computing or loading `v` in the kernel under construction.
    ///
    /// The nodes a kernel computes form chains as long as the program (one
    /// per `let`), so they are built without recursion: a depth-first walk
    /// with an explicit stack visits the operands [`Self::op_of`] will read
    /// in its order and builds each node after its operands, which gives the
    /// node order (and so the emitted code) of a recursive walk.
    pub(super) fn node_of(&mut self, ctx: &mut Ctx, v: Value) -> Result<NodeId, CodegenError> {
        let root = self.c(v);
        let mut stack = vec![(root, false)];
        while let Some((v, operands_done)) = stack.pop() {
            if ctx.memo.contains_key(&v) {
                continue;
            }
            if operands_done {
                self.make_node(ctx, v)?;
                continue;
            }
            stack.push((v, true));
            if matches!(self.source_of(ctx, v), Source::Computed { .. }) {
                let operands = computed_operands(self.block.inst(v));
                stack.extend(operands.into_iter().rev().map(|x| (self.c(x), false)));
            }
        }
        ctx.memo.get(&root).copied().ok_or_else(|| self.internal(format!("no node for {root}")))
    }

    /// Where kernel `ctx.k` gets canonical `v` from.
    fn source_of(&self, ctx: &Ctx, v: Value) -> Source {
        let home = &self.plan.homes[v.index()];
        let is_col_kernel = matches!(self.plan.kernels[ctx.k], KernelPlan::Col { .. });
        match *home {
            Home::Param => Source::Param,
            Home::Acc(x) if x == ctx.k => Source::Computed { acc: true },
            Home::Row(x) | Home::Col(x) | Home::Grid(x) if x == ctx.k => Source::Computed { acc: false },
            Home::Inline | Home::RowPartial(..) if is_col_kernel && self.has_mat_before(v, ctx.k) => Source::Scratch,
            Home::Inline => Source::Computed { acc: false },
            Home::RowPartial(_, kind) => Source::FinishRow(kind),
            Home::ColPartial(_) => Source::FinishCol,
            Home::Acc(x) | Home::Row(x) | Home::Col(x) | Home::Grid(x) if x < ctx.k && self.widens_narrow(v) => {
                Source::Computed { acc: false }
            }
            Home::Acc(x) | Home::Row(x) | Home::Col(x) | Home::Grid(x) if x < ctx.k => Source::Earlier(x),
            _ => Source::Nowhere,
        }
    }

    /// Builds the node of canonical `v`, whose operands (if computed here)
    /// have their nodes already (see [`Self::node_of`]).
    fn make_node(&mut self, ctx: &mut Ctx, v: Value) -> Result<NodeId, CodegenError> {
        let kernel = &self.plan.kernels[ctx.k];
        let space = space_of(self.block, v);
        let node = match self.source_of(ctx, v) {
            Source::Param => {
                let Inst::Param(i) = self.block.inst(v) else { return Err(self.internal("param")) };
                // A GEMM epilogue reads tile operands with vector loads that
                // check bounds only: through the input's staging buffer,
                // aligned by construction (`Buffer::vector_aligned`).
                let gemm = matches!(kernel, KernelPlan::Gemm { .. });
                let buf = if gemm && space == Space::Tile { self.staging_buf(*i) } else { self.param_bufs[*i] };
                Node { op: Op::Load(buf), space, reg: None, value: v }
            }
            Source::Computed { acc: true } => {
                let op = self.op_of(ctx, v)?;
                Node { op, space: Space::Tile, reg: self.plan.maps[v.index()].clone(), value: v }
            }
            Source::Computed { acc: false } => Node { op: self.op_of(ctx, v)?, space, reg: None, value: v },
            Source::Scratch => {
                let dtype = self.carry_dtype(v);
                Node { op: Op::Load(self.scratch_buf(v, dtype)), space, reg: None, value: v }
            }
            Source::FinishRow(kind) => {
                let bufs = self.partial_bufs.get(&v).cloned().unwrap_or_default();
                Node { op: Op::FinishRow(kind, bufs), space, reg: None, value: v }
            }
            Source::FinishCol => {
                let buf = self.partial_bufs.get(&v).and_then(|b| b.first().copied());
                let buf = buf.ok_or_else(|| self.internal("column partial without a buffer"))?;
                Node { op: Op::FinishCol(buf), space, reg: None, value: v }
            }
            Source::Earlier(x) => {
                let (stored, dtype) = self.stored_as(v, self.carry_dtype(v), ctx.k);
                if let std::collections::btree_map::Entry::Vacant(entry) = self.mats.entry((stored, dtype)) {
                    entry.insert(x);
                    self.mats_of.entry(x).or_default().insert((stored, dtype));
                }
                Node { op: Op::Load(self.scratch_buf(stored, dtype)), space, reg: None, value: v }
            }
            Source::Nowhere => {
                let home = &self.plan.homes[v.index()];
                return Err(self.internal(format!("kernel {} reads {v} homed at {home:?}", ctx.k)));
            }
        };
        ctx.nodes.push(node);
        let id = ctx.nodes.len() - 1;
        ctx.memo.insert(v, id);
        Ok(id)
    }

    /// The materialization that holds `v` as `dtype` for kernel `k`: `v`'s
    /// own, or, for `v = cast(x)` to `dtype`, that of `x` as `dtype` when an
    /// earlier kernel stores it (a GEMM operand): the same bits, stored once.
    fn stored_as(&self, v: Value, dtype: DType, k: usize) -> (Value, DType) {
        match self.cast_of(v, dtype) {
            Some(x) if self.mats.get(&(x, dtype)).is_some_and(|kx| *kx < k) => (x, dtype),
            _ => (v, dtype),
        }
    }

    /// Whether a later kernel recomputes `v` instead of loading it: an f32
    /// tile that is one element-wise step from a 16-bit tile (a rounded
    /// gradient times a gain), whose other operands are scalars or
    /// broadcast vectors. Storing the 16-bit tile instead halves the traffic
    /// of both kernels (`a·g` in f32 is 8 bytes a element, `a` in bf16 2).
    fn widens_narrow(&self, v: Value) -> bool {
        let is_tile = |x: Value| {
            let shape = &self.block.ty(x).shape;
            !shape.rows.is_one() && !shape.cols.is_one()
        };
        if self.carry_dtype(v) != DType::F32 || !is_tile(v) {
            return false;
        }
        let inst = self.block.inst(v);
        if !matches!(inst, Inst::Unary { .. } | Inst::Binary { .. }) {
            return false;
        }
        let operands = inst.operands();
        let narrow_tile = |x: Value| {
            let x = self.c(x);
            is_tile(x)
                && self.block.ty(x).dtype.is_half()
                && matches!(self.block.inst(x), Inst::Cast { .. })
                && !matches!(self.plan.homes[x.index()], Home::Inline)
        };
        // A scalar or vector, or one broadcast to a tile.
        let vector = |x: Value| match self.block.inst(self.c(x)) {
            Inst::Broadcast { arg, .. } => !is_tile(*arg),
            _ => !is_tile(x),
        };
        operands.iter().filter(|x| narrow_tile(**x)).count() == 1
            && operands.iter().all(|x| narrow_tile(*x) || vector(*x))
    }

    fn has_mat_before(&self, v: Value, k: usize) -> bool {
        self.mats.get(&(v, self.carry_dtype(v))).is_some_and(|x| *x < k)
    }

    /// The dtype a value is carried in between kernels: its own dtype when
    /// that is 16-bit (the value is already rounded to it, so storing it
    /// that way is exact and halves the traffic), else f32.
    pub(super) fn carry_dtype(&self, v: Value) -> DType {
        let dtype = self.block.ty(v).dtype;
        if dtype.is_half() {
            dtype
        } else {
            DType::F32
        }
    }

    /// The operation of `v` with its operands' nodes.
    pub(super) fn op_of(&mut self, ctx: &mut Ctx, v: Value) -> Result<Op, CodegenError> {
        let inst = self.block.inst(v).clone();
        let mut n = |b: &mut Self, x: Value| b.node_of(ctx, x);
        Ok(match inst {
            Inst::Param(_) => return Err(self.internal("param as an operation")),
            Inst::MatMul { .. } => Op::Acc,
            Inst::Const(c) => Op::Const(c),
            Inst::DimValue(d) => Op::Dim(d),
            Inst::RopeTable { spec, table, .. } => Op::Rope(spec, table),
            Inst::Unary { op, arg } => Op::Unary(op, n(self, arg)?),
            Inst::Binary { op, lhs, rhs } => Op::Binary(op, n(self, lhs)?, n(self, rhs)?),
            Inst::Select { cond, on_true, on_false } => {
                Op::Select(n(self, cond)?, n(self, on_true)?, n(self, on_false)?)
            }
            Inst::Cast { to, arg } => Op::Cast(to, n(self, arg)?),
            Inst::Broadcast { arg, .. } => Op::Broadcast(n(self, arg)?),
            Inst::Transpose { arg } => Op::Transpose(n(self, arg)?),
            Inst::SliceCols { arg, start, step, .. } => Op::Slice { arg: n(self, arg)?, start, step },
            Inst::ConcatCols { parts } => {
                let mut offset = Dim::constant(0);
                let mut out = Vec::new();
                for p in parts {
                    out.push((n(self, p)?, offset.clone()));
                    offset = offset.add(&self.block.ty(p).shape.cols).map_err(|e| self.internal(e.to_string()))?;
                }
                Op::Concat(out)
            }
            Inst::Interleave { even, odd } => Op::Interleave(n(self, even)?, n(self, odd)?),
            Inst::TakeCols { arg, index } => {
                let width = self.block.ty(arg).shape.cols.clone();
                Op::Take { arg: n(self, arg)?, index: n(self, index)?, width }
            }
            Inst::ScatterCols { arg, index, cols } => {
                Op::Scatter { arg: n(self, arg)?, index: n(self, index)?, width: cols }
            }
            Inst::RopePartner { spec, arg } => Op::RopePartner(spec, n(self, arg)?),
            Inst::UnpermuteCols { arg, perm } => Op::Unpermute(perm, n(self, arg)?),
            Inst::PermuteCols { arg, perm } => Op::Permute(perm, n(self, arg)?),
            Inst::PermuteRows { .. } | Inst::StackRows { .. } => {
                return Err(self.internal("rows in pair order or stacked outside a GEMM operand"))
            }
            Inst::GroupReduce { op, groups, arg } => {
                let cols = self.block.ty(arg).shape.cols.clone();
                Op::GroupReduce { op, groups, arg: n(self, arg)?, cols }
            }
            Inst::GroupExpand { groups, arg, .. } => Op::GroupExpand(groups, n(self, arg)?),
            Inst::SliceHeads { arg, part } => Op::SliceHeads(part, n(self, arg)?),
            Inst::TopK { arg, k, indices } => {
                let width = self.block.ty(arg).shape.cols.clone();
                Op::TopK { arg: n(self, arg)?, count: k, indices, width }
            }
            Inst::GatherRows { table, index } => {
                let rows = self.block.ty(table).shape.rows.clone();
                Op::GatherRows { table: n(self, table)?, index: n(self, index)?, rows }
            }
            Inst::ScatterAddRows { .. } => {
                return Err(self.internal("a scatter-add of rows reached the kernel IR (`limits` refuses it)"))
            }
            Inst::PadHeads { arg, part, .. } => Op::PadHeads(part, n(self, arg)?),
            Inst::Reduce { op, axis: Axis::Cols, arg } => {
                let width = self.block.ty(arg).shape.cols.clone();
                Op::RowReduce { op, arg: n(self, arg)?, width }
            }
            Inst::Reduce { op, axis: Axis::Rows, arg } => {
                let height = self.block.ty(arg).shape.rows.clone();
                if matches!(self.plan.homes[v.index()], Home::Grid(_)) {
                    Op::GridReduce { op, arg: n(self, arg)?, height }
                } else {
                    Op::ColReduce { op, arg: n(self, arg)?, height }
                }
            }
        })
    }
}

/// Where a kernel gets a value from ([`Builder::source_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A block input.
    Param,
    /// Computed in this kernel from its operands (`acc`: in the GEMM's
    /// accumulator registers).
    Computed { acc: bool },
    /// Loaded from the scratch buffer an earlier kernel stored it in, for a
    /// column kernel.
    Scratch,
    /// Finished from row partials.
    FinishRow(PartialKind),
    /// Finished from column partials.
    FinishCol,
    /// Loaded from what an earlier kernel (this one) stores.
    Earlier(usize),
    /// Nowhere this kernel can read (a bug).
    Nowhere,
}

/// The operands [`Builder::op_of`] reads, in its order.
fn computed_operands(inst: &Inst) -> Vec<Value> {
    match inst {
        Inst::MatMul { .. } | Inst::PermuteRows { .. } => Vec::new(),
        other => other.operands(),
    }
}
