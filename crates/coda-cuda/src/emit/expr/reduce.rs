//! Reductions in the statement writer: a whole-row or whole-column
//! reduction as a loop over the row (or column) with a block-wide exchange,
//! and a GEMM's row partials finished where they are read.

use super::{chunk, Emitter};
use crate::emit::code::Code;
use crate::error::CodegenError;
use crate::kir::{NodeId, PartialKind};
use coda_ir::{ColGroups, Dim, ReduceOp};

impl Emitter<'_> {
    /// The shared array a block-wide reduction over `tpr` threads exchanges
    /// its partial results through: `red` beyond a warp, which the kernel
    /// must then declare ([`Self::block_reductions`]), else none.
    pub(crate) fn reduction_scratch(&mut self, tpr: u32) -> &'static str {
        if tpr > 32 {
            self.block_reductions = true;
            "red"
        } else {
            "nullptr"
        }
    }

    pub(super) fn finish_row(&mut self, kind: PartialKind, bufs: &[usize], m: &Code) -> Result<Code, CodegenError> {
        let tpr = self.coop;
        let red = self.reduction_scratch(tpr);
        let first = *bufs.first().ok_or_else(|| self.internal("partial without a buffer"))?;
        let b = self.buf(first);
        let quad = self.quad_rows && tpr == 1;
        let reads = [m.clone(), scratch_code(red)];
        let text = match kind {
            PartialKind::RowSum | PartialKind::RowSumSq | PartialKind::RowPick | PartialKind::ColSum if quad => {
                format!("cg::finish_sum_quad({b}, {b}_ld, {m}, {b}_cols)")
            }
            PartialKind::RowSum | PartialKind::RowSumSq | PartialKind::RowPick | PartialKind::ColSum => {
                format!("cg::finish_sum<{tpr}>({b}, {b}_ld, {m}, {b}_cols, {red})")
            }
            PartialKind::RowMax if quad => format!("cg::finish_max_quad({b}, {b}_ld, {m}, {b}_cols)"),
            PartialKind::RowMax => format!("cg::finish_max<{tpr}>({b}, {b}_ld, {m}, {b}_cols, {red})"),
            PartialKind::RowLse => {
                let second = *bufs.get(1).ok_or_else(|| self.internal("lse partial without its sums"))?;
                let s = self.buf(second);
                format!("cg::finish_lse<{tpr}>({b}, {s}, {b}_ld, {m}, {b}_cols, {red})")
            }
        };
        Ok(Code::of(text, &reads))
    }

    /// A whole-row (`row == true`, over columns `k`) or whole-column
    /// reduction at the current row `m` / column `k`.
    pub(super) fn reduce(
        &mut self,
        node: NodeId,
        op: ReduceOp,
        arg: NodeId,
        extent: &Dim,
        at: &str,
        row: bool,
    ) -> Result<Code, CodegenError> {
        // A lone whole-row reduction streams few tensors: chunked as if one.
        let mut values = self.reductions(&[GroupMember { node, op, arg }], extent, (at, 1), row)?;
        values.pop().ok_or_else(|| self.internal("a reduction without a value"))
    }

    /// Whole-row reductions of `members` at row `m`, all over the same
    /// `extent` columns, in one pass over the row: every member accumulates
    /// in the same loop (their loads shared), then each combines in a fixed
    /// order. Every member's operand must be computable inside that loop:
    /// the per-row values it reads are evaluated already. The loop's chunks
    /// hold `streams` loads each ([`chunk::chunk_width`]).
    pub(crate) fn row_reductions(
        &mut self,
        members: &[GroupMember],
        extent: &Dim,
        (m, streams): (&str, usize),
    ) -> Result<Vec<Code>, CodegenError> {
        self.reductions(members, extent, (m, streams), true)
    }

    fn reductions(
        &mut self,
        members: &[GroupMember],
        extent: &Dim,
        (at, streams): (&str, usize),
        row: bool,
    ) -> Result<Vec<Code>, CodegenError> {
        let tpr = self.coop;
        let red = self.reduction_scratch(tpr);
        let names: Vec<String> = members.iter().map(|x| self.local_for(self.kernel.nodes[x.node].value)).collect();
        // A whole-row reduction of a CTA-per-row kernel runs in chunks.
        let chunk_width = extent.as_const().and_then(|w| chunk::chunk_width(0, w, tpr, streams));
        let chunk_width = chunk_width.filter(|_| row && crate::kir::whole_cta(tpr) && self.chunk.is_none());
        let extent = self.dim_int(extent);
        for (x, name) in members.iter().zip(&names) {
            self.stmt(Code::lit(accumulator(x.op, name)), self.kernel.nodes[x.node].value);
        }
        let i = self.locals.fresh(if row { "kk" } else { "mm" });
        // A reduction inside a chunked loop's elements runs plain.
        let outer_chunk = self.chunk.take();
        let column_tile = !row && self.column_tile;
        if let Some(width) = chunk_width {
            self.open_chunks(&i, ("", &extent), (tpr, width), &[]);
        } else if column_tile {
            let warps = tpr / 32;
            // Independent loads of several rows in flight per thread.
            self.line("#pragma unroll 8");
            self.open(format!("for (int {i} = (int)(threadIdx.x / 32); {i} < {extent}; {i} += {warps})"));
        } else {
            let header = format!("for (int {i} = cg::lane<{tpr}>(); {i} < {extent}; {i} += {tpr})");
            match row {
                true => self.open_column_loop(header),
                false => self.open(header),
            }
        }
        let saved = std::mem::replace(&mut self.coop, 1);
        for (x, name) in members.iter().zip(&names) {
            let v = if row { self.eval(x.arg, at, &i)? } else { self.eval(x.arg, &i, at)? };
            self.line_of(accumulate(x.op, name, &v));
        }
        self.coop = saved;
        if chunk_width.is_some() {
            self.close_chunk_elements();
        }
        self.close();
        self.chunk = outer_chunk;
        let combine = match column_tile {
            true => ("tile_col", tpr / 32),
            false => ("block", tpr),
        };
        let (m, k) = if row { (at.to_string(), "0".to_string()) } else { ("0".to_string(), at.to_string()) };
        let mut out = Vec::with_capacity(members.len());
        for (x, name) in members.iter().zip(names) {
            let finish = self.combine(x.op, &name, combine, red);
            self.define("float", &name, finish, Some(self.kernel.nodes[x.node].value));
            self.bind(x.node, &m, &k, Code::local(&name));
            out.push(Code::local(name));
        }
        Ok(out)
    }
}

/// One reduction of a batch that shares a pass over its columns
/// ([`Emitter::group_reductions`], [`Emitter::row_reductions`]).
pub(crate) struct GroupMember {
    /// The [`crate::kir::Op::GroupReduce`] or [`crate::kir::Op::RowReduce`] node.
    pub(crate) node: NodeId,
    /// Its reduction.
    pub(crate) op: ReduceOp,
    /// Its operand.
    pub(crate) arg: NodeId,
}

impl Emitter<'_> {
    /// Reductions over the columns of group `g` (`cols` columns) at row
    /// `m`, one per member: the [`Self::coop`] threads of a warp (or one
    /// thread) stride over the group's columns once, accumulating every
    /// member (members share their loads), then combine each result in a
    /// fixed order. A head is at most a few hundred columns, and a row
    /// kernel's warps take different groups (`emit::rowk`). Every member's
    /// operand must be computable inside that loop: it reads no reduction
    /// that is not yet evaluated.
    pub(crate) fn group_reductions(
        &mut self,
        members: &[GroupMember],
        (groups, cols): (ColGroups, &Dim),
        (m, g): (&str, &str),
        streams: Option<usize>,
    ) -> Result<Vec<Code>, CodegenError> {
        let gi = Code::index(g);
        let j = self.locals.fresh("kj");
        let (count, column) = match groups {
            ColGroups::Heads(w) => (w.to_string(), format!("{g} * {w} + {j}")),
            ColGroups::Lanes(w) => {
                let heads = cols.div_exact(&Dim::constant(w)).map_err(|e| self.internal(e.to_string()))?;
                (self.dim_int(&heads), format!("{g} + {j} * {w}"))
            }
        };
        let names: Vec<String> = members.iter().map(|x| self.local_for(self.kernel.nodes[x.node].value)).collect();
        for (x, name) in members.iter().zip(&names) {
            self.stmt(Code::lit(accumulator(x.op, name)), self.kernel.nodes[x.node].value);
        }
        let tpr = self.coop;
        // A warp over one head of a CTA-per-row kernel loads it in chunks
        // (vector loads, a rotary partner's chunk beside), as the
        // whole-row passes do.
        let chunk_width = match (groups, streams) {
            (ColGroups::Heads(w), Some(streams)) if tpr == 32 && self.chunk.is_none() => {
                chunk::chunk_width(0, w, tpr, streams).filter(|v| w % (i64::from(tpr) * v) == 0).map(|v| (w, v))
            }
            _ => None,
        };
        let outer_chunk = self.chunk.take();
        let c = match chunk_width {
            Some((w, width)) => {
                let c = self.locals.fresh("kc");
                let (lo, end) = (format!("{g} * {w} + "), format!("{g} * {w} + {w}"));
                self.open_chunks(&c, (&lo, &end), (tpr, width), &[]);
                Code::local(c).reading(&[g])
            }
            None => {
                self.open(format!("for (int {j} = cg::lane<{tpr}>(); {j} < {count}; {j} += {tpr})"));
                self.index("kc", Code::of(column, [&gi]).reading(&[&j]))
            }
        };
        let outer_coop = std::mem::replace(&mut self.coop, 1);
        for (x, name) in members.iter().zip(&names) {
            let v = self.eval(x.arg, m, &c)?;
            self.line_of(accumulate(x.op, name, &v));
        }
        self.coop = outer_coop;
        if chunk_width.is_some() {
            self.close_chunk_elements();
        }
        self.chunk = outer_chunk;
        self.close();
        let mut out = Vec::with_capacity(members.len());
        for (x, name) in members.iter().zip(names) {
            let finish = self.combine(x.op, &name, ("block", tpr), "nullptr");
            self.define("float", &name, finish, Some(self.kernel.nodes[x.node].value));
            self.bind(x.node, m, g, Code::local(&name));
            out.push(Code::local(name));
        }
        Ok(out)
    }
}

impl Emitter<'_> {
    /// The result of a reduction into `name`: every thread's accumulators
    /// combined in a fixed order through the shared array `red` (or
    /// `nullptr` within a warp), writing the combining statements a
    /// log-sum-exp needs first. `(family, n)` names the prelude's
    /// functions: `block_*<n>` over the `n` threads of a row,
    /// `tile_col_*<n>` over the `n` warps of a column tile.
    fn combine(&mut self, op: ReduceOp, name: &str, (family, n): (&str, u32), red: &str) -> Code {
        let (acc, m, s, bad) = (format!("{name}_acc"), format!("{name}_m"), format!("{name}_s"), format!("{name}_bad"));
        let red_code = scratch_code(red);
        match op {
            ReduceOp::Sum => Code::of(format!("cg::{family}_sum<{n}>({acc}, {red})"), [&red_code]).reading(&[&acc]),
            ReduceOp::Max => Code::of(format!("cg::{family}_max<{n}>({acc}, {red})"), [&red_code]).reading(&[&acc]),
            ReduceOp::LogSumExp => {
                let text = format!("{bad} = cg::{family}_sum<{n}>({bad} != 0.0f ? 1.0f : 0.0f, {red});");
                self.line_of(Code::of(text, [&red_code]).reading(&[&bad]));
                let text = format!("cg::{family}_lse<{n}>({m}, {s}, {red});");
                self.line_of(Code::of(text, [&red_code]).reading(&[&m, &s]));
                Code::lit(format!("cg::lse_finish({m}, {s}, {bad})")).reading(&[&m, &s, &bad])
            }
        }
    }
}

/// The declaration of the accumulators of a reduction into `name`.
fn accumulator(op: ReduceOp, name: &str) -> String {
    match op {
        ReduceOp::LogSumExp => format!("float {name}_m = coda::neg_inf(), {name}_s = 0.0f, {name}_bad = 0.0f;"),
        ReduceOp::Sum => format!("float {name}_acc = 0.0f;"),
        ReduceOp::Max => format!("float {name}_acc = coda::neg_inf();"),
    }
}

/// `x` added to the accumulators of a reduction into `name`.
fn accumulate(op: ReduceOp, name: &str, x: &Code) -> Code {
    let (acc, m, s, bad) = (format!("{name}_acc"), format!("{name}_m"), format!("{name}_s"), format!("{name}_bad"));
    match op {
        ReduceOp::Sum => Code::of(format!("{acc} += {x};"), [x]).reading(&[&acc]),
        ReduceOp::Max => Code::of(format!("{acc} = cg::maximum({acc}, {x});"), [x]).reading(&[&acc]),
        ReduceOp::LogSumExp => Code::of(format!("cg::lse_push({m}, {s}, {bad}, {x});"), [x]).reading(&[&m, &s, &bad]),
    }
}

/// The shared array of a block-wide reduction
/// ([`Emitter::reduction_scratch`]) as code: `red`, or a null pointer.
fn scratch_code(red: &str) -> Code {
    match red {
        "red" => Code::local(red),
        _ => Code::lit(red),
    }
}
