//! A CPU emulator of the kernel IR, for testing without a GPU.
//!
//! [`emulate`] runs a [`BlockIr`]'s kernels in launch order on host buffers
//! of `f32` (16-bit values rounded as the GPU stores them), with the same
//! buffers, the same per-tile partials (tile sizes of the chosen configs,
//! register column maps deciding which tile holds which column) and the
//! same finishing reads. It checks the partitioning, the buffer plumbing
//! and the node semantics against the reference interpreter; it does not
//! check the CUDA text (fragment indexing, stores), which only a GPU run
//! does. Arithmetic is `f64` rounded to `f32` per node. Grid reductions go
//! through their per-CTA partial buffers in CTA order, as on the GPU.
//! Staging buffers are always copies (the runtime's path for misaligned
//! tensors), filled before the kernels and emptied after them.

use crate::kir::{BlockIr, ColMap, GridSpec, KernelKind, Node, Op, PartialKind, PartialOut, Role, Space};
use crate::symexpr::SymExpr;
use coda_ir::interp::round_to_dtype;
use coda_ir::{Block, DType, Dim, ReduceOp, RopeSpec, RopeStyle, RopeTable};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

/// A host buffer: `rows x cols` with leading dimension `ld`.
#[derive(Debug, Clone)]
struct HostBuf {
    rows: i64,
    cols: i64,
    ld: i64,
    dtype: DType,
    data: Vec<f32>,
}

impl HostBuf {
    fn get(&self, m: i64, k: i64) -> f32 {
        if m < 0 || k < 0 || m >= self.rows || k >= self.cols {
            return 0.0;
        }
        self.data.get((m * self.ld + k) as usize).copied().unwrap_or(0.0)
    }

    fn put(&mut self, m: i64, k: i64, v: f64, accumulate: bool) {
        if m < 0 || k < 0 || m >= self.rows || k >= self.cols {
            return;
        }
        let i = (m * self.ld + k) as usize;
        let prev = if accumulate { f64::from(self.data[i]) } else { 0.0 };
        let stored = round_to_dtype(prev + v, self.dtype);
        self.data[i] = stored as f32;
    }
}

/// Runs every kernel; `inputs` holds each block input (and the previous
/// content of `+=` outputs) row-major by name. Returns the outputs.
pub fn emulate(
    ir: &BlockIr,
    block: &Block,
    dims: &BTreeMap<String, i64>,
    inputs: &BTreeMap<String, Vec<f32>>,
) -> Result<BTreeMap<String, Vec<f32>>, String> {
    let eval = |e: &SymExpr| e.eval(dims).map_err(|e| e.to_string());
    let mut bufs = Vec::new();
    for b in &ir.buffers {
        let (rows, cols) = (eval(&b.rows)?, eval(&b.cols)?);
        let ld = match &b.ld {
            Some(ld) if b.role != Role::Input && b.role != Role::Output => eval(ld)?,
            _ => cols,
        };
        let mut data = vec![f32::NAN; (rows * ld).max(0) as usize];
        if let Some(given) = inputs.get(&b.name) {
            if b.role == Role::Input || b.role == Role::Output {
                data = given.clone();
            }
        }
        bufs.push(HostBuf { rows, cols, ld, dtype: b.dtype, data });
    }
    // A GEMM's row prelude computes every row of its row kernel before the
    // GEMM reads them: the same as running the row kernel first.
    let launches = ir.kernels.iter().flat_map(|k| match &k.kind {
        KernelKind::Gemm(crate::kir::GemmSpec { prelude: Some(p), .. }) => vec![p.kernel.as_ref(), k],
        _ => vec![k],
    });
    stage(ir, &mut bufs, Role::Input);
    for kernel in launches {
        let mut em = Emu {
            block,
            dims,
            bufs: &mut bufs,
            nodes: &kernel.nodes,
            acc: Vec::new(),
            acc_cols: 0,
            memo: RefCell::new(HashMap::new()),
        };
        em.run(kernel)?;
    }
    stage(ir, &mut bufs, Role::Output);
    let mut out = BTreeMap::new();
    for b in ir.buffers.iter().zip(&bufs).filter(|(b, _)| b.role == Role::Output) {
        out.insert(b.0.name.clone(), b.1.data.clone());
    }
    Ok(out)
}

/// The runtime's staging copies, as for misaligned tensors: each staging
/// buffer of an input is filled from the input (`role` input, before the
/// kernels), and each staging buffer of an output emptied into the output
/// (`role` output, after them).
fn stage(ir: &BlockIr, bufs: &mut [HostBuf], role: Role) {
    for (staging, b) in ir.buffers.iter().enumerate() {
        let Some(tensor) = b.staging_of.filter(|t| ir.buffers[*t].role == role) else { continue };
        let (src, dst) = if role == Role::Input { (tensor, staging) } else { (staging, tensor) };
        let from = bufs[src].clone();
        for m in 0..from.rows {
            for k in 0..from.cols {
                bufs[dst].put(m, k, f64::from(from.get(m, k)), false);
            }
        }
    }
}

struct Emu<'a> {
    block: &'a Block,
    dims: &'a BTreeMap<String, i64>,
    bufs: &'a mut Vec<HostBuf>,
    nodes: &'a [Node],
    acc: Vec<f64>,
    acc_cols: i64,
    /// Values of per-row, per-column and scalar nodes already computed.
    memo: RefCell<HashMap<(usize, i64, i64), f32>>,
}

fn dim(d: &Dim, dims: &BTreeMap<String, i64>) -> i64 {
    d.eval(&|n| dims.get(n).copied()).unwrap_or(0)
}

impl Emu<'_> {
    fn d(&self, d: &Dim) -> i64 {
        dim(d, self.dims)
    }

    fn shape(&self, node: usize) -> (i64, i64) {
        let s = &self.block.ty(self.nodes[node].value).shape;
        (self.d(&s.rows), self.d(&s.cols))
    }

    fn run(&mut self, kernel: &crate::kir::Kernel) -> Result<(), String> {
        match &kernel.kind {
            KernelKind::Gemm(g) => {
                self.gemm(g)?;
                let (bm, bn, _) = g.config.tile();
                for p in &kernel.partials {
                    self.partial(p, bm, bn);
                }
            }
            KernelKind::Row { rows, grid: Some(g), .. } => self.grid(g, rows)?,
            _ => {}
        }
        for s in &kernel.stores {
            let (rows, cols) = self.shape(s.node);
            for m in 0..rows {
                for k in 0..cols {
                    let v = self.eval(s.node, m, k);
                    let col = s.col_perm.map_or(k, |p| p.source(k)) + s.col_offset.unwrap_or(0);
                    self.bufs[s.buf].put(m, col, f64::from(v), s.accumulate);
                }
            }
        }
        Ok(())
    }

    fn gemm(&mut self, g: &crate::kir::GemmSpec) -> Result<(), String> {
        let (m, n) = (self.d(&g.m), self.d(&g.n));
        let ks = g.pair_ks().map(|k| self.d(k)).collect::<Vec<_>>();
        let mut sums = vec![0.0f64; (m * n).max(0) as usize];
        for ((ga, gb), kk) in g.operand_pairs().zip(ks) {
            let (a, b) = (&self.bufs[ga.buf], &self.bufs[gb.buf]);
            let second = gb.stacked.map(|(buf, from)| (&self.bufs[buf], from));
            let at = |i: i64, k: i64| match ga.layout {
                crate::kir::Layout::AMxK => a.get(i, k),
                _ => a.get(k, i),
            };
            let row = |j: i64| gb.row_perm.map_or(j, |p| p.source(j));
            let bt = |k: i64, j: i64| match gb.layout {
                crate::kir::Layout::BKxN => b.get(k, j),
                _ => match second {
                    Some((part, from)) if row(j) >= from => part.get(row(j) - from, k),
                    _ => b.get(row(j), k),
                },
            };
            for i in 0..m {
                for j in 0..n {
                    sums[(i * n + j) as usize] +=
                        (0..kk).map(|k| f64::from(at(i, k)) * f64::from(bt(k, j))).sum::<f64>();
                }
            }
        }
        let acc = sums.into_iter().map(|s| f64::from(s as f32)).collect();
        self.acc = acc;
        self.acc_cols = n;
        Ok(())
    }

    /// The grid reductions of a row kernel, as the GPU runs them: each CTA
    /// reduces its rows in row order into its partial (stored as fp32),
    /// then the partials are reduced in CTA order; the results are the
    /// scalar values of the reduction nodes. The counter is left at 0.
    fn grid(&mut self, g: &GridSpec, rows: &Dim) -> Result<(), String> {
        let (rows, per_cta) = (self.d(rows), i64::from(g.rows_per_cta.max(1)));
        let ctas = (rows + per_cta - 1) / per_cta;
        let nodes = self.nodes;
        for (node, buf) in &g.parts {
            let Some(Op::GridReduce { op, arg, .. }) = nodes.get(*node).map(|n| &n.op) else {
                return Err(format!("grid partial of node {node}, which is not a grid reduction"));
            };
            for b in 0..ctas {
                let xs: Vec<f64> =
                    (b * per_cta..((b + 1) * per_cta).min(rows)).map(|m| f64::from(self.eval(*arg, m, 0))).collect();
                self.bufs[*buf].put(b, 0, reduce(*op, &xs), false);
            }
            let part = &self.bufs[*buf];
            let xs: Vec<f64> = (0..ctas).map(|b| f64::from(part.get(b, 0))).collect();
            self.memo.borrow_mut().insert((*node, 0, 0), reduce(*op, &xs) as f32);
        }
        self.bufs[g.counter].put(0, 0, 0.0, false);
        Ok(())
    }

    /// Per-tile partials of a register node, tiles decided by its map.
    fn partial(&mut self, p: &PartialOut, bm: i64, bn: i64) {
        let map: ColMap =
            self.nodes[p.node].reg.clone().unwrap_or(ColMap { offset: 0, stride: 1, len: Dim::constant(1) });
        let (rows, len) = (self.shape(p.node).0, self.d(&map.len));
        let acc_col = |k: i64| map.offset + k * map.stride;
        if p.kind == PartialKind::ColSum {
            let tiles = (rows + bm - 1) / bm;
            for k in 0..len {
                for t in 0..tiles {
                    let s: f64 = (t * bm..((t + 1) * bm).min(rows)).map(|m| f64::from(self.eval(p.node, m, k))).sum();
                    self.bufs[p.bufs[0]].put(k, t, s, false);
                }
            }
            return;
        }
        let tiles = (self.acc_cols + bn - 1) / bn;
        for m in 0..rows {
            let index = p.index.map(|ix| self.eval(ix, m, 0));
            for t in 0..tiles {
                let ks: Vec<i64> = (0..len).filter(|k| acc_col(*k) / bn == t).collect();
                let xs: Vec<f64> = ks.iter().map(|k| f64::from(self.eval(p.node, m, *k))).collect();
                let (a, b) = match p.kind {
                    PartialKind::RowSum => (xs.iter().sum(), None),
                    PartialKind::RowSumSq => (xs.iter().map(|x| x * x).sum(), None),
                    PartialKind::RowMax => (xs.iter().fold(f64::NEG_INFINITY, |a, x| a.max(*x)), None),
                    PartialKind::RowPick => {
                        let hit = ks.iter().zip(&xs).find(|(k, _)| Some(**k as f32) == index);
                        (hit.map_or(0.0, |(_, x)| *x), None)
                    }
                    PartialKind::RowLse => {
                        let mx = xs.iter().fold(f64::NEG_INFINITY, |a, x| a.max(*x));
                        let s = if mx == f64::NEG_INFINITY { 0.0 } else { xs.iter().map(|x| (x - mx).exp()).sum() };
                        (mx, Some(s))
                    }
                    PartialKind::ColSum => (0.0, None),
                };
                self.bufs[p.bufs[0]].put(m, t, a, false);
                if let (Some(s), Some(id)) = (b, p.bufs.get(1)) {
                    self.bufs[*id].put(m, t, s, false);
                }
            }
        }
    }

    /// The node's value at `(m, k)` (indices normalized to its space).
    fn eval(&self, id: usize, m: i64, k: i64) -> f32 {
        let node = &self.nodes[id];
        let (m, k) = match node.space {
            Space::Scalar => (0, 0),
            Space::Row => (m, 0),
            Space::Col => (0, k),
            Space::Tile => (m, k),
        };
        // Row, column and scalar values, and the tile's per-group and
        // top-k reductions, are kept: every element that reads one would
        // otherwise recompute it, and nested per-head reductions (a norm's
        // backward) would take time exponential in their depth.
        let kept = node.space != Space::Tile || matches!(node.op, Op::GroupReduce { .. } | Op::TopK { .. });
        if kept {
            if let Some(v) = self.memo.borrow().get(&(id, m, k)) {
                return *v;
            }
        }
        let v = self.compute(node, m, k);
        if kept {
            self.memo.borrow_mut().insert((id, m, k), v);
        }
        v
    }

    fn compute(&self, node: &Node, m: i64, k: i64) -> f32 {
        let e = |x: usize| f64::from(self.eval(x, m, k));
        let v: f64 = match &node.op {
            Op::Acc => self.acc.get((m * self.acc_cols + k) as usize).copied().unwrap_or(0.0),
            Op::Load(b) => f64::from(self.bufs[*b].get(m, k)),
            Op::Const(c) => *c,
            Op::Dim(d) => self.d(d) as f64,
            Op::Rope(spec, table) => rope_table(spec, *table, k, self.dims),
            Op::FinishRow(kind, bufs) => self.finish_row(*kind, bufs, m),
            Op::FinishCol(b) => {
                let buf = &self.bufs[*b];
                (0..buf.cols).map(|t| f64::from(buf.get(k, t))).sum()
            }
            // The interpreter's own scalar semantics, so the two cannot drift apart.
            Op::Unary(op, a) => coda_ir::interp::apply_unary(*op, e(*a)),
            Op::Binary(op, a, b) => coda_ir::interp::apply_binary(*op, e(*a), e(*b)),
            Op::Select(c, a, b) => {
                if e(*c) != 0.0 {
                    e(*a)
                } else {
                    e(*b)
                }
            }
            Op::Cast(to, a) => match to {
                DType::I32 => f64::from(e(*a) as i32),
                DType::Bool => f64::from(u8::from(e(*a) != 0.0)),
                _ => round_to_dtype(e(*a), *to),
            },
            Op::Broadcast(a) => e(*a),
            Op::Transpose(a) => f64::from(self.eval(*a, k, m)),
            Op::Slice { arg, start, step } => f64::from(self.eval(*arg, m, self.d(start) + k * step)),
            Op::Concat(parts) => {
                let (part, off) =
                    parts.iter().rev().find(|(_, o)| self.d(o) <= k).cloned().unwrap_or((0, Dim::constant(0)));
                f64::from(self.eval(part, m, k - self.d(&off)))
            }
            Op::Interleave(ev, od) => f64::from(self.eval(if k % 2 == 0 { *ev } else { *od }, m, k / 2)),
            Op::RopePartner(spec, a) => f64::from(self.eval(*a, m, rope_col(spec, k, self.dims).2)),
            Op::Unpermute(perm, a) => f64::from(self.eval(*a, m, perm.position(k))),
            Op::Permute(perm, a) => f64::from(self.eval(*a, m, perm.source(k))),
            Op::Take { arg, index, width } => {
                let i = f64::from(self.eval(*index, m, 0));
                if i >= 0.0 && i.fract() == 0.0 && (i as i64) < self.d(width) {
                    f64::from(self.eval(*arg, m, i as i64))
                } else {
                    0.0
                }
            }
            Op::Scatter { arg, index, width } => {
                let i = f64::from(self.eval(*index, m, 0));
                let hit = i >= 0.0 && i.fract() == 0.0 && (i as i64) < self.d(width) && i as i64 == k;
                if hit {
                    f64::from(self.eval(*arg, m, 0))
                } else {
                    0.0
                }
            }
            Op::GroupReduce { op, groups, arg, cols } => {
                let columns = (0..self.d(cols)).filter(|c| groups.group_of(*c) == k);
                let xs: Vec<f64> = columns.map(|c| f64::from(self.eval(*arg, m, c))).collect();
                reduce(*op, &xs)
            }
            Op::GroupExpand(groups, a) => f64::from(self.eval(*a, m, groups.group_of(k))),
            Op::TopK { arg, count, indices, width } => {
                let row: Vec<f64> = (0..self.d(width)).map(|c| f64::from(self.eval(*arg, m, c))).collect();
                let host =
                    coda_ir::interp::HostTensor { dtype: coda_ir::DType::F32, rows: 1, cols: row.len(), data: row };
                let top = coda_ir::interp::top_k(&host, *count as usize, *indices);
                top.get(k as usize).copied().unwrap_or(0.0)
            }
            Op::GatherRows { table, index, rows } => {
                let i = f64::from(self.eval(*index, m, 0));
                let row = (i.fract() == 0.0 && i >= 0.0 && i < self.d(rows) as f64).then_some(i as i64);
                row.map_or(0.0, |r| f64::from(self.eval(*table, r, k)))
            }
            Op::SliceHeads(part, a) => f64::from(self.eval(*a, m, part.source(k))),
            Op::PadHeads(part, a) => part.position(k).map_or(0.0, |c| f64::from(self.eval(*a, m, c))),
            Op::RowReduce { op, arg, width } => {
                let xs: Vec<f64> = (0..self.d(width)).map(|c| f64::from(self.eval(*arg, m, c))).collect();
                reduce(*op, &xs)
            }
            // Set by `grid` before anything reads it; this is the same
            // reduction without the per-CTA grouping.
            Op::GridReduce { op, arg, height } => {
                let xs: Vec<f64> = (0..self.d(height)).map(|r| f64::from(self.eval(*arg, r, 0))).collect();
                reduce(*op, &xs)
            }
            Op::ColReduce { op, arg, height } => {
                let xs: Vec<f64> = (0..self.d(height)).map(|r| f64::from(self.eval(*arg, r, k))).collect();
                reduce(*op, &xs)
            }
        };
        v as f32
    }

    fn finish_row(&self, kind: PartialKind, bufs: &[usize], m: i64) -> f64 {
        let b = &self.bufs[bufs[0]];
        let xs: Vec<f64> = (0..b.cols).map(|t| f64::from(b.get(m, t))).collect();
        match kind {
            PartialKind::RowMax => xs.iter().fold(f64::NEG_INFINITY, |a, x| a.max(*x)),
            PartialKind::RowLse => {
                let s = &self.bufs[bufs[1]];
                let mx = xs.iter().fold(f64::NEG_INFINITY, |a, x| a.max(*x));
                if mx == f64::NEG_INFINITY {
                    return mx;
                }
                let sum: f64 = xs.iter().enumerate().map(|(t, x)| f64::from(s.get(m, t as i64)) * (x - mx).exp()).sum();
                mx + sum.ln()
            }
            _ => xs.iter().sum(),
        }
    }
}

fn reduce(op: ReduceOp, xs: &[f64]) -> f64 {
    match op {
        ReduceOp::Sum => xs.iter().sum(),
        ReduceOp::Max => xs.iter().fold(f64::NEG_INFINITY, |a, x| a.max(*x)),
        ReduceOp::LogSumExp => {
            let mx = xs.iter().fold(f64::NEG_INFINITY, |a, x| a.max(*x));
            if !mx.is_finite() {
                return mx;
            }
            mx + xs.iter().map(|x| (x - mx).exp()).sum::<f64>().ln()
        }
    }
}

/// `(freq, sign, partner)` of column `n`.
fn rope_col(spec: &RopeSpec, n: i64, dims: &BTreeMap<String, i64>) -> (f64, f64, i64) {
    let (start, end) = (dim(&spec.start, dims), dim(&spec.end, dims));
    if n < start || n >= end {
        return (0.0, 0.0, n);
    }
    let j = (n - start) % spec.head_dim;
    if j >= spec.rotary_dim {
        return (0.0, 0.0, n);
    }
    let half = spec.rotary_dim / 2;
    let (pair, first, off) = match spec.style {
        RopeStyle::Half => (j % half, j < half, half),
        RopeStyle::Interleaved => (j / 2, j % 2 == 0, 1),
    };
    let freq = spec.base.powf(-((2 * pair) as f64) / spec.rotary_dim as f64);
    (freq, if first { -1.0 } else { 1.0 }, if first { n + off } else { n - off })
}

fn rope_table(spec: &RopeSpec, table: RopeTable, k: i64, dims: &BTreeMap<String, i64>) -> f64 {
    let (freq, sign, _) = rope_col(spec, k, dims);
    match table {
        RopeTable::Freq => freq,
        RopeTable::Sign => sign,
    }
}
