//! From a [`Plan`] to a [`BlockIr`]: buffers, node DAGs, stores and partials.
//!
//! Kernels are built from the last to the first, so that when a kernel is
//! built every later kernel has already said which of its values it reads
//! (each such read is a store in this kernel, fp32 unless a matmul needs the
//! 16-bit operand type). Node DAGs are built on demand from the stores and
//! partials (`nodes`), so a kernel contains exactly what it needs. Kernels
//! left with nothing to store are dropped. A staging buffer stands for an
//! input a GEMM reads, or an output a later kernel reads
//! ([`Role::Staging`]); the runtime makes its padded copy when the tensor
//! is not aligned. Each GEMM takes the configuration of the tile stage
//! ([`crate::tiles`]); kernels are named after the row preludes are fused
//! ([`BlockIr::name_kernels`]).

mod nodes;

use super::{
    BlockIr, BufId, Buffer, ColMap, GemmSpec, GridSpec, KPart, KParts, Kernel, KernelKind, Layout, Node, NodeId, Op,
    Operand, PartialKind, PartialOut, Role, Space, Store,
};
use crate::config::TileConfig;
use crate::error::CodegenError;
use crate::plan::{Home, KPartPlan, KernelPlan, OperandPlan, Plan};
use crate::symexpr::SymExpr;
use crate::tiles::{Epilogue, Tiles};
use coda_ir::{Block, DType, Dim, Inst, PairPerm, ShapeClass, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Builds the kernels of a partitioned block.
pub(crate) fn build(block: &Block, plan: &Plan, tiles: &Tiles) -> Result<BlockIr, CodegenError> {
    let mut b = Builder {
        block,
        plan,
        tiles,
        buffers: Vec::new(),
        param_bufs: Vec::new(),
        output_bufs: Vec::new(),
        partial_bufs: HashMap::new(),
        scratch: BTreeMap::new(),
        mats: plan.mats.clone(),
        mats_of: kernel_mats(&plan.mats),
        members: kernel_members(plan),
        staging: BTreeMap::new(),
        used_names: BTreeSet::new(),
    };
    b.declare_io();
    b.declare_partials();
    let mut built: Vec<Option<Kernel>> = vec![None; plan.kernels.len()];
    for k in (0..plan.kernels.len()).rev() {
        built[k] = Some(b.build_kernel(k)?);
    }
    let kernels = built.into_iter().flatten().filter(|k| !k.stores.is_empty() || !k.partials.is_empty()).collect();
    Ok(BlockIr {
        name: block.name.clone(),
        kind: block.kind,
        dims: block.symbolic_dims().map(str::to_string).collect(),
        buffers: b.buffers,
        kernels,
    })
}

struct Builder<'a> {
    block: &'a Block,
    plan: &'a Plan,
    /// Every GEMM's configuration (the tile stage, [`crate::tiles`]).
    tiles: &'a Tiles,
    buffers: Vec<Buffer>,
    param_bufs: Vec<BufId>,
    output_bufs: Vec<BufId>,
    partial_bufs: HashMap<Value, Vec<BufId>>,
    scratch: BTreeMap<(Value, DType), BufId>,
    mats: BTreeMap<(Value, DType), usize>,
    /// `mats` by kernel, in key order: a block has as many kernels as
    /// values, so no kernel scans the whole map (or `Plan::homes`).
    mats_of: BTreeMap<usize, BTreeSet<(Value, DType)>>,
    /// The values each kernel computes, in arena order (see `mats_of`).
    members: Vec<Vec<Value>>,
    staging: BTreeMap<usize, BufId>,
    used_names: BTreeSet<String>,
}

/// A kernel under construction.
struct Ctx {
    k: usize,
    nodes: Vec<Node>,
    memo: HashMap<Value, NodeId>,
    /// The register nodes of inline values this GEMM's epilogue stores
    /// ([`Builder::joined_node`]).
    joined: HashMap<Value, NodeId>,
}

/// [`Builder::mats_of`].
fn kernel_mats(mats: &BTreeMap<(Value, DType), usize>) -> BTreeMap<usize, BTreeSet<(Value, DType)>> {
    let mut by_kernel: BTreeMap<usize, BTreeSet<(Value, DType)>> = BTreeMap::new();
    for (key, k) in mats {
        by_kernel.entry(*k).or_default().insert(*key);
    }
    by_kernel
}

/// The values each kernel of `plan` computes, in arena order.
pub(crate) fn kernel_members(plan: &Plan) -> Vec<Vec<Value>> {
    let mut members = vec![Vec::new(); plan.kernels.len()];
    for (index, home) in plan.homes.iter().enumerate() {
        if let Some(list) = home.kernel().and_then(|k| members.get_mut(k)) {
            list.push(Value::from_index(index));
        }
    }
    members
}

impl Builder<'_> {
    fn c(&self, v: Value) -> Value {
        self.plan.canon[v.index()]
    }

    /// The values kernel `k` of the plan computes, in arena order.
    fn members(&self, k: usize) -> &[Value] {
        self.members.get(k).map_or(&[], Vec::as_slice)
    }

    fn internal(&self, message: impl Into<String>) -> CodegenError {
        CodegenError::Internal { block: self.block.name.clone(), message: message.into() }
    }

    fn add_buffer(&mut self, buffer: Buffer) -> BufId {
        self.used_names.insert(buffer.name.clone());
        self.buffers.push(buffer);
        self.buffers.len() - 1
    }

    /// A fresh buffer name from `base`.
    fn fresh(&self, base: String) -> String {
        if !self.used_names.contains(&base) {
            return base;
        }
        (2..).map(|i| format!("{base}_{i}")).find(|n| !self.used_names.contains(n)).unwrap_or(base)
    }

    fn value_name(&self, v: Value) -> String {
        self.block.names.get(v.index()).cloned().flatten().unwrap_or_else(|| format!("v{}", v.index()))
    }

    /// The name of `v` stored as `dtype`: `v`'s own, else that of a named
    /// cast of `v` to `dtype` (whose bits the buffer holds, see
    /// [`Self::stored_as`]), else `v<index>`.
    fn stored_name(&self, v: Value, dtype: DType) -> String {
        if self.block.names[v.index()].is_none() {
            let named_cast = self
                .block
                .insts
                .iter()
                .map(|(x, _)| x)
                .find(|x| self.block.names[x.index()].is_some() && self.cast_of(*x, dtype) == Some(v));
            if let Some(x) = named_cast {
                return self.value_name(x);
            }
        }
        self.value_name(v)
    }

    /// `x` (canonical) when `v` is `cast(x)` to `dtype`: a value whose bits,
    /// stored as `dtype`, are those of `x` stored as `dtype` (both round to
    /// nearest even).
    fn cast_of(&self, v: Value, dtype: DType) -> Option<Value> {
        match self.block.inst(self.c(v)) {
            Inst::Cast { to, arg } if *to == dtype => Some(self.c(*arg)),
            _ => None,
        }
    }

    fn declare_io(&mut self) {
        for p in &self.block.params {
            let buf = io_buffer(p, Role::Input, false);
            let id = self.add_buffer(buf);
            self.param_bufs.push(id);
        }
        for o in &self.block.outputs {
            let buf = io_buffer(&o.tensor, Role::Output, o.accumulate);
            let id = self.add_buffer(buf);
            self.output_bufs.push(id);
        }
    }

    fn declare_partials(&mut self) {
        for (index, home) in self.plan.homes.iter().enumerate() {
            let v = Value::from_index(index);
            let (k, kind) = match home {
                Home::RowPartial(k, kind) => (*k, *kind),
                Home::ColPartial(k) => (*k, PartialKind::ColSum),
                _ => continue,
            };
            let Some(KernelPlan::Gemm { matmul, .. }) = self.plan.kernels.get(k) else { continue };
            let (bm, bn, _) = self.tiles.of(k).map_or((128, 128, 0), TileConfig::tile);
            let acc = self.block.ty(*matmul).shape.clone();
            let reduced = self.block.inst(v).operands().first().map(|a| self.block.ty(*a).shape.clone());
            let (rows, cols) = match kind {
                PartialKind::ColSum => {
                    let n = reduced.map_or(acc.cols.clone(), |s| s.cols);
                    (SymExpr::from(n), SymExpr::from(&acc.rows).ceil_div(bm))
                }
                _ => (SymExpr::from(&acc.rows), SymExpr::from(&acc.cols).ceil_div(bn)),
            };
            let name = self.value_name(v);
            let suffixes: &[&str] = if kind == PartialKind::RowLse { &["max", "sumexp"] } else { &[kind.name()] };
            let mut ids = Vec::new();
            for suffix in suffixes {
                let buf = Buffer {
                    name: self.fresh(format!("part.{name}.{suffix}")),
                    role: Role::Partial,
                    dtype: DType::F32,
                    rows: rows.clone(),
                    cols: cols.clone(),
                    rank: 2,
                    ld: Some(cols.clone()),
                    accumulate: false,
                    staging_of: None,
                };
                ids.push(self.add_buffer(buf));
            }
            self.partial_bufs.insert(v, ids);
        }
    }

    /// The scratch buffer holding `v` as `dtype`.
    fn scratch_buf(&mut self, v: Value, dtype: DType) -> BufId {
        if let Some(id) = self.scratch.get(&(v, dtype)) {
            return *id;
        }
        let shape = self.block.ty(v).shape.clone();
        let suffix = if dtype == DType::F32 { String::new() } else { format!(".{dtype}") };
        let cols = SymExpr::from(&shape.cols);
        let ld = if shape.rows.is_one() || shape.cols.is_one() { cols.clone() } else { cols.clone().round_up(8) };
        let output = self.output_holding(v, dtype).map(|i| self.output_bufs[i]);
        let buf = Buffer {
            name: self.fresh(format!("tmp.{}{suffix}", self.stored_name(v, dtype))),
            role: if output.is_some() { Role::Staging } else { Role::Scratch },
            dtype,
            rows: SymExpr::from(&shape.rows),
            cols,
            rank: 2,
            ld: Some(ld),
            accumulate: false,
            staging_of: output,
        };
        let id = self.add_buffer(buf);
        self.scratch.insert((v, dtype), id);
        id
    }

    /// The block output that the materialization of `v` as `dtype` may be
    /// (a [`Role::Staging`] buffer of the output, see [`Buffer::staging_of`]):
    /// one of the same value and type, stored whole by the same kernel, not
    /// accumulated or un-permuted. The kernel then stores the value once,
    /// into the output when it is aligned for the readers (a GEMM operand
    /// needs 16-byte rows), and otherwise into a scratch buffer that the
    /// runtime copies into the output after the block.
    fn output_holding(&self, v: Value, dtype: DType) -> Option<usize> {
        let v = self.c(v);
        let kernel = self.mats.get(&(v, dtype))?;
        // `v` itself, or `bf16(v)`: `v` stored as bf16.
        let holds = |o: Value| self.c(o) == v || self.cast_of(o, dtype) == Some(v);
        self.block.outputs.iter().enumerate().position(|(i, o)| {
            holds(o.value)
                && o.tensor.dtype == dtype
                && o.tensor.rank == 2
                && !o.accumulate
                && self.plan.output_kernels.get(i) == Some(kernel)
        })
    }

    fn build_kernel(&mut self, k: usize) -> Result<Kernel, CodegenError> {
        let mut ctx = Ctx { k, nodes: Vec::new(), memo: HashMap::new(), joined: HashMap::new() };
        let mut stores = Vec::new();
        let targets: Vec<(Value, DType)> = self.mats_of.get(&k).into_iter().flatten().copied().collect();
        for (v, dtype) in targets {
            let buf = self.scratch_buf(v, dtype);
            stores.extend(self.stores_of(&mut ctx, v, buf, false, None)?);
        }
        for (i, output) in self.block.outputs.iter().enumerate() {
            let buf = self.output_bufs[i];
            let held = self.buffers.iter().any(|b| b.role == Role::Staging && b.staging_of == Some(buf));
            if self.plan.output_kernels.get(i) != Some(&k) || held {
                continue;
            }
            let (value, col_perm) = match self.block.inst(self.c(output.value)) {
                Inst::UnpermuteCols { arg, perm } => (*arg, Some(*perm)),
                _ => (output.value, None),
            };
            stores.extend(self.stores_of(&mut ctx, value, buf, output.accumulate, col_perm)?);
        }
        let partials = self.partials_of(&mut ctx)?;
        let mut kind = self.kernel_kind(&ctx, &stores)?;
        let mut tiles = None;
        if let KernelKind::Gemm(spec) = &mut kind {
            let epilogue = Epilogue { nodes: &ctx.nodes, stores: &stores, partials: &partials, buffers: &self.buffers };
            (spec.config, tiles) = self.tiles.refined(k, spec.config, &spec.n, &spec.k, &epilogue);
        }
        let why = self.why_not_epilogue(k);
        let joined = self.why_joined(k);
        Ok(Kernel { name: String::new(), kind, nodes: ctx.nodes, stores, partials, why, joined, tiles })
    }

    /// The stores of `v` into `buf`: one, or for a concatenation of
    /// register values of this GEMM (`plan::rules`, only ever stored) one
    /// per part, each at its column offset.
    fn stores_of(
        &mut self,
        ctx: &mut Ctx,
        v: Value,
        buf: BufId,
        accumulate: bool,
        col_perm: Option<PairPerm>,
    ) -> Result<Vec<Store>, CodegenError> {
        let v = self.c(v);
        let split = matches!(self.plan.kernels[ctx.k], KernelPlan::Gemm { .. })
            && self.plan.homes[v.index()] == Home::Acc(ctx.k);
        if let (true, Inst::ConcatCols { parts }) = (split, self.block.inst(v)) {
            let mut stores = Vec::new();
            let mut offset = 0;
            for part in parts.clone() {
                let node = self.stored_node(ctx, part, buf, accumulate)?;
                stores.push(Store { node, buf, accumulate, col_perm: None, col_offset: Some(offset) });
                let width = self.block.ty(part).shape.cols.as_const();
                offset += width.ok_or_else(|| self.internal("a stored concatenation part of run-time width"))?;
            }
            return Ok(stores);
        }
        let node = match self.plan.joined.get(&v) {
            Some(joined) if joined.kernel == ctx.k => self.joined_node(ctx, v)?,
            _ => self.node_of(ctx, v)?,
        };
        Ok(vec![Store { node, buf, accumulate, col_perm, col_offset: None }])
    }

    /// The register node that GEMM `ctx.k` stores the inline value `v`
    /// from ([`crate::plan::join`]): `v`'s element-wise operation, held at
    /// the accumulator's own columns (`v` has the accumulator's shape), on
    /// its operands' nodes evaluated there. Only the store reads it; other
    /// nodes of the kernel that read `v` evaluate it inline, as they would
    /// any inline value.
    fn joined_node(&mut self, ctx: &mut Ctx, v: Value) -> Result<NodeId, CodegenError> {
        if let Some(id) = ctx.joined.get(&v) {
            return Ok(*id);
        }
        let len = self.block.ty(v).shape.cols.clone();
        let op = self.op_of(ctx, v)?;
        ctx.nodes.push(Node { op, space: Space::Tile, reg: Some(ColMap { offset: 0, stride: 1, len }), value: v });
        let id = ctx.nodes.len() - 1;
        ctx.joined.insert(v, id);
        Ok(id)
    }

    /// Why GEMM `k`'s epilogue stores values that read no accumulator (one
    /// line per value).
    fn why_joined(&self, k: usize) -> Vec<String> {
        let names = |values: &[Value]| -> Vec<String> {
            let name = |x: Value| match self.block.inst(x) {
                Inst::Param(i) => self.block.params.get(*i).map_or_else(|| self.value_name(x), |p| p.name.clone()),
                _ => format!("tmp.{}", self.stored_name(x, self.carry_dtype(x))),
            };
            values.iter().map(|x| name(*x)).collect()
        };
        self.plan
            .joined
            .iter()
            .filter(|(_, joined)| joined.kernel == k)
            .map(|(v, joined)| {
                format!(
                    "`{}`: it reads no accumulator, but is element-wise over this GEMM's output tile and reads {}, \
                     which this epilogue loads at the same coordinates; stored here instead of by a row kernel",
                    self.value_name(*v),
                    names(&joined.shared).join(", ")
                )
            })
            .collect()
    }

    /// The node a store of the concatenation part `v` into `buf` writes:
    /// that of `x` for `v = cast(x)` to the buffer's type (a rounded
    /// gradient stored a part at a time): the store rounds to that type, to
    /// nearest even like the cast, and the part is used nowhere else, so
    /// the kernel does not round twice nor keep both values.
    fn stored_node(&mut self, ctx: &mut Ctx, v: Value, buf: BufId, accumulate: bool) -> Result<NodeId, CodegenError> {
        let dtype = self.buffers[buf].dtype;
        match self.cast_of(v, dtype) {
            Some(x) if !accumulate && dtype.is_half() => self.node_of(ctx, x),
            _ => self.node_of(ctx, v),
        }
    }

    /// Why the values computed by row or column kernel `k` found no GEMM
    /// epilogue (one line per distinct reason, with the value).
    fn why_not_epilogue(&self, k: usize) -> Vec<String> {
        let mut why: Vec<String> = Vec::new();
        for v in self.members(k) {
            let (index, home) = (v.index(), &self.plan.homes[v.index()]);
            if !matches!(home, Home::Row(_) | Home::Col(_) | Home::Grid(_)) {
                continue;
            }
            let Some(reason) = self.plan.why_not_epilogue[index].as_ref().map(ToString::to_string) else { continue };
            let what = self.what(Value::from_index(index));
            if !why.iter().any(|w| w.ends_with(reason.as_str())) {
                why.push(format!("{what}: {reason}"));
            }
        }
        why
    }

    /// `` `name` `` of a named value, else its operation (`add`).
    fn what(&self, v: Value) -> String {
        match self.block.names.get(v.index()).cloned().flatten() {
            Some(name) => format!("`{name}`"),
            None => coda_ir::print::print_value(self.block, v).split_whitespace().next().unwrap_or("value").to_string(),
        }
    }

    fn partials_of(&mut self, ctx: &mut Ctx) -> Result<Vec<PartialOut>, CodegenError> {
        let mut out = Vec::new();
        for v in self.members(ctx.k).to_vec() {
            let kind = match &self.plan.homes[v.index()] {
                Home::RowPartial(_, kind) => *kind,
                Home::ColPartial(_) => PartialKind::ColSum,
                _ => continue,
            };
            let (reduced, index_node) = match self.block.inst(v) {
                Inst::TakeCols { arg, index } => (*arg, Some(self.node_of(ctx, *index)?)),
                Inst::Reduce { arg, .. } if kind == PartialKind::RowSumSq => {
                    let Inst::Binary { lhs, .. } = self.block.inst(self.c(*arg)) else {
                        return Err(self.internal("sum of squares without a square"));
                    };
                    (*lhs, None)
                }
                Inst::Reduce { arg, .. } => (*arg, None),
                _ => return Err(self.internal(format!("partial {v} is not a reduction"))),
            };
            let node = self.node_of(ctx, reduced)?;
            let bufs = self.partial_bufs.get(&v).cloned().unwrap_or_default();
            out.push(PartialOut { node, kind, index: index_node, bufs, value: v });
        }
        Ok(out)
    }

    fn kernel_kind(&mut self, ctx: &Ctx, stores: &[Store]) -> Result<KernelKind, CodegenError> {
        Ok(match &self.plan.kernels[ctx.k] {
            KernelPlan::Gemm { matmul, a, b, parts } => {
                KernelKind::Gemm(self.gemm_spec(ctx.k, *matmul, (a, b), parts)?)
            }
            KernelPlan::Row { rows } => {
                let wide = |n: &Node| matches!(n.space, Space::Tile | Space::Col);
                let reduces = ctx
                    .nodes
                    .iter()
                    .any(|n| matches!(n.op, Op::RowReduce { .. } | Op::GroupReduce { .. } | Op::TopK { .. }));
                let stores_wide = stores.iter().any(|s| ctx.nodes.get(s.node).is_some_and(wide));
                let grid_reduces = ctx.nodes.iter().any(|n| matches!(n.op, Op::GridReduce { .. }));
                let columns_apart =
                    rows.as_const() == Some(1) && !reduces && !grid_reduces && self.one_width(ctx, stores);
                let threads_per_row = match (columns_apart, reduces || stores_wide) {
                    (true, _) => 1,
                    (false, true) => super::row_cta_threads(self.widest_row(ctx)),
                    (false, false) => 32,
                };
                let grid = self.grid_spec(ctx, rows, threads_per_row);
                KernelKind::Row { rows: rows.clone(), threads_per_row, grid }
            }
            KernelPlan::Col { cols } => KernelKind::Col { cols: cols.clone() },
        })
    }

    /// The widest row of constant width that a row kernel walks.
    fn widest_row(&self, ctx: &Ctx) -> Option<i64> {
        let widths = ctx.nodes.iter().filter(|n| matches!(n.space, Space::Tile | Space::Col));
        widths.filter_map(|n| self.block.ty(n.value).shape.cols.as_const()).max()
    }

    /// Whether a row kernel has stores that are not one value per row, all
    /// of one width or all of constant widths (a one-row kernel can then put
    /// its columns in different CTAs, as many as the widest store needs:
    /// the column partials of a backward's gains and biases, finished by
    /// one thread per column instead of one CTA walking them all).
    fn one_width(&self, ctx: &Ctx, stores: &[Store]) -> bool {
        let widths: Vec<&Dim> = stores
            .iter()
            .filter_map(|s| ctx.nodes.get(s.node))
            .filter(|n| matches!(n.space, Space::Tile | Space::Col))
            .map(|n| &self.block.ty(n.value).shape.cols)
            .collect();
        let Some(first) = widths.first() else { return false };
        widths.iter().all(|w| w == first) || widths.iter().all(|w| w.as_const().is_some())
    }

    /// The partial buffers (`[CTAs, 1]` fp32, one per grid reduction) and
    /// the ticket counter of a row kernel's grid reductions, if it has any.
    fn grid_spec(&mut self, ctx: &Ctx, rows: &Dim, threads_per_row: u32) -> Option<GridSpec> {
        let rows_per_cta = super::row_kernel_threads(threads_per_row) / threads_per_row;
        let ctas = SymExpr::from(rows).ceil_div(i64::from(rows_per_cta));
        let mut parts = Vec::new();
        for (id, node) in ctx.nodes.iter().enumerate() {
            if !matches!(node.op, Op::GridReduce { .. }) {
                continue;
            }
            let name = self.fresh(format!("part.{}.grid", self.value_name(node.value)));
            let buf = self.add_buffer(small_buffer(name, Role::Partial, DType::F32, ctas.clone()));
            parts.push((id, buf));
        }
        let first = ctx.nodes.get(parts.first()?.0)?.value;
        let name = self.fresh(format!("ticket.{}", self.value_name(first)));
        let counter = self.add_buffer(small_buffer(name, Role::Counter, DType::I32, SymExpr::constant(1)));
        Some(GridSpec { rows_per_cta, parts, counter })
    }

    fn gemm_spec(
        &mut self,
        k: usize,
        matmul: Value,
        (a, b): (&OperandPlan, &OperandPlan),
        parts: &[KPartPlan],
    ) -> Result<GemmSpec, CodegenError> {
        let Inst::MatMul { lhs, lhs_transposed, operand_dtype, .. } = self.block.inst(matmul) else {
            return Err(self.internal("GEMM kernel without a matmul"));
        };
        let lhs_shape = &self.block.ty(*lhs).shape;
        let inner = if *lhs_transposed { lhs_shape.rows.clone() } else { lhs_shape.cols.clone() };
        let acc = self.block.ty(matmul).shape.clone();
        let k_parts = match (parts, self.block.inst(self.c(*lhs))) {
            ([], _) => None,
            (_, Inst::ConcatCols { parts: left }) => {
                let ks = left.iter().map(|p| self.block.ty(*p).shape.cols.clone()).collect();
                let more = parts
                    .iter()
                    .map(|p| KPart {
                        a: self.operand(&p.a, *operand_dtype, true),
                        b: self.operand(&p.b, *operand_dtype, false),
                    })
                    .collect();
                Some(Box::new(KParts { ks, more }))
            }
            _ => return Err(self.internal("K parts without a concatenated left operand")),
        };
        Ok(GemmSpec {
            m: acc.rows,
            n: acc.cols,
            k: inner,
            k_parts,
            a: self.operand(a, *operand_dtype, true),
            b: self.operand(b, *operand_dtype, false),
            elem: *operand_dtype,
            config: self.tiles.of(k).unwrap_or(TileConfig::Cfg128x128),
            matmul,
            prelude: None,
        })
    }

    fn operand(&mut self, plan: &OperandPlan, dtype: DType, is_a: bool) -> Operand {
        let (buf, transposed, row_perm, stacked) = match plan {
            OperandPlan::Param { index, transposed, row_perm, stacked } => {
                let stacked = stacked.map(|other| {
                    let rows = self.block.params[other].shape.rows.as_const().unwrap_or(0);
                    (self.staging_buf(other), rows)
                });
                (self.staging_buf(*index), *transposed, *row_perm, stacked)
            }
            OperandPlan::Mat { value, transposed, row_perm } => {
                (self.scratch_buf(*value, dtype), *transposed, *row_perm, None)
            }
        };
        let layout = match (is_a, transposed) {
            (true, false) => Layout::AMxK,
            (true, true) => Layout::AKxM,
            (false, false) => Layout::BKxN,
            (false, true) => Layout::BNxK,
        };
        Operand { buf, layout, row_perm, stacked }
    }

    fn staging_buf(&mut self, param: usize) -> BufId {
        if let Some(id) = self.staging.get(&param) {
            return *id;
        }
        let src = self.param_bufs[param];
        let source = self.buffers[src].clone();
        let buf = Buffer {
            name: self.fresh(format!("{}.staged", source.name)),
            role: Role::Staging,
            ld: Some(source.cols.clone().round_up(8)),
            staging_of: Some(src),
            rank: 2,
            ..source
        };
        let id = self.add_buffer(buf);
        self.staging.insert(param, id);
        id
    }
}

/// The space of a value from its shape class.
pub(crate) fn space_of(block: &Block, v: Value) -> Space {
    match block.ty(v).shape.class() {
        ShapeClass::Scalar => Space::Scalar,
        ShapeClass::RowVector => Space::Row,
        ShapeClass::ColVector => Space::Col,
        ShapeClass::Tile => Space::Tile,
    }
}

/// A `[rows, 1]` buffer the host allocates.
pub(super) fn small_buffer(name: String, role: Role, dtype: DType, rows: SymExpr) -> Buffer {
    Buffer {
        name,
        role,
        dtype,
        rows,
        cols: SymExpr::constant(1),
        rank: 2,
        ld: Some(SymExpr::constant(1)),
        accumulate: false,
        staging_of: None,
    }
}

/// The buffer of a block input or output, as the caller passes it.
fn io_buffer(t: &coda_ir::Tensor, role: Role, accumulate: bool) -> Buffer {
    Buffer {
        name: t.name.clone(),
        role,
        dtype: t.dtype,
        rows: SymExpr::from(&t.shape.rows),
        cols: SymExpr::from(&t.shape.cols),
        rank: t.rank,
        ld: None,
        accumulate,
        staging_of: None,
    }
}
