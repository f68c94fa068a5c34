//! GEMM kernels: the `Epi_<kernel>` functor and the `extern "C"` entry that
//! instantiates `coda::gemm_sm80` (portable) or `coda::gemm_sm90_rows`
//! (Hopper, with its tensor maps).
//!
//! The functor's `apply` evaluates, in order: scalars; per-row values for
//! the thread's `Frag::RI` rows (loads, finished partials of earlier
//! kernels); then, for every accumulator pair `(i, j)`, the register values
//! (two per pair for stride-1 maps, one for pair ops), their stores and
//! their contributions to partial reductions; finally the row / column
//! reductions over the CTA tile and the partial stores.
//!
//! In 255-register configurations (and every Hopper one) with at most one
//! partial, one full-tile store (a value on the accumulator's own columns,
//! into a bf16 / f16 buffer of the accumulator's shape) goes through shared
//! memory and is written with coalesced 16-byte stores when the buffer's
//! base is 16-byte aligned and its leading dimension a multiple of 8
//! (checked at run time, uniformly for the CTA, by the helper); otherwise
//! with bounded element stores. When nothing else uses the scratch during
//! the pair loop, each pair is put there as it is computed
//! (`coda::staged_put`); otherwise its values overwrite `f.acc` (dead once
//! its pair has been processed) and `coda::store_tile_staged` writes them
//! after the loop.
//!
//! The staged store may also be a pair operation's half-width output
//! (`coda::StagedHalfCols`) or an output put back from pair order
//! (`coda::StagedUnpermuteCols`, when every group lies inside one tile):
//! both were 2-byte scattered stores before. A second full-tile store on
//! the accumulator's own columns goes through the scratch during the loop
//! (`coda::staged_put` with `coda::StagedOwnCols`, before the staged store).
//!
//! Without a staged store (its outputs are concatenation parts, or it keeps
//! several partials), a Hopper epilogue holds up to two 16-bit full-tile
//! outputs packed in the accumulator registers until the loop ends and
//! stores them through the scratch then (`packed.rs`,
//! `coda::store_tile_packed`, which bounds the edge tiles' rows and columns).
//!
//! Likewise one full-tile 16-bit operand read at the accumulator's own
//! columns (a residual) is staged into shared memory with coalesced 16-byte
//! loads and read back per pair (`coda::staged_pair`): its long-latency
//! global loads then stay out of the unrolled per-pair code, where the
//! compiler would hoist them into registers beside the accumulators (spills
//! with 128 accumulators per thread on the Hopper mainloop). On the Hopper
//! mainloop the copies are issued by the functor's `prefetch` before the
//! tile's K loop (`coda::stage_tile_async`), together with those of up to
//! [`MAX_STAGED_COL_VECS`] column vectors read at the pair's own columns
//! (`cg::stage_col_async`, read back with `cg::col_pair`).
//!
//! A configuration that stages subtiles (`TileConfig::stage_cols`) puts the
//! same staged stores and operand through two small regions instead, a few
//! columns at a time, from inside the pair loop (`subtile.rs`).

mod ahead;
mod entry;
mod facts;
mod heads;
mod hoist;
mod lse;
mod operands;
mod outputs;
mod packed;
mod staging;
mod subtile;

use staging::{put_finish_call, staged_call, staging_map, OutCols, Staging};

use super::code::{Code, Line};
use super::expr::Emitter;
use crate::error::CodegenError;
use crate::kir::{ColMap, GemmSpec, NodeId, PartialKind, Space};
use crate::manifest::StructSpec;
use std::collections::{BTreeSet, HashMap};

/// The functor, the entry point and the argument structs of a GEMM kernel
/// (`GemmArgs`, then `GemmKParts` for a concatenated K).
/// Also returns how many column vectors the functor stages per tile (they
/// add to the kernel's shared memory, `TileConfig::smem_bytes_with`).
pub(crate) fn emit(
    em: &mut Emitter<'_>,
    spec: &GemmSpec,
    entry: &str,
    pre: Option<&str>,
) -> Result<(String, Vec<StructSpec>, usize), CodegenError> {
    let epi = format!("Epi_{}", em.kernel.name);
    let mut g = Gemm {
        regs: HashMap::new(),
        cols: HashMap::new(),
        rows: Vec::new(),
        pairs: HashMap::new(),
        quads: HashMap::new(),
        ahead: Vec::new(),
        held: Vec::new(),
        streaming: false,
        may_stream: false,
        inline_pairs: HashMap::new(),
        inline_depth: 0,
        pair_readers: HashMap::new(),
        pair_invariants: HashMap::new(),
        staged: None,
        twins: Vec::new(),
        scratch: None,
        scratch2: None,
        staged_load: None,
        col_vecs: Vec::new(),
        config: spec.config,
        put_staged: false,
        packed: Vec::new(),
        whole_col_tiles: spec.n.as_const().filter(|n| n % spec.config.tile().1 == 0),
        head_arrays: HashMap::new(),
        plain_loads: false,
        in_head_loop: false,
        lse_shifts: Vec::new(),
    };
    g.lse_shifts = Gemm::lse_shifts(em);
    g.staged = staging::staged_store(em, spec);
    g.twins = g.staged.map_or_else(Vec::new, |(first, how)| staging::twin_stores(em, spec, first, how));
    g.scratch = g.staged.and_then(|(first, _)| staging::scratch_store(em, spec, first, &g.twins));
    let subtiled = g.subtiled();
    if subtiled && spec.config.stage_regions() < 2 {
        g.scratch = None; // one region holds the staged store's subtiles only
    }
    if subtiled && spec.config.stage_regions() >= 3 {
        let taken: Vec<usize> = g.twins.iter().copied().chain(g.scratch).collect();
        g.scratch2 = g.staged.and_then(|(first, _)| staging::scratch_store(em, spec, first, &taken));
    }
    g.may_stream = spec.config.is_sm90() && !subtiled && g.staged.is_none() && g.scratch.is_none();
    if g.staged.is_none() {
        g.packed = packed::stores(em, spec);
    }
    em.set_indent(2);
    g.scalars(em)?;
    g.row_values(em)?;
    g.partial_decls(em)?;
    g.main_loop(em)?;
    // Staged subtiles were stored in the loop.
    if let Some(idx) = g.scratch.filter(|_| !subtiled) {
        let store = em.kernel.stores[idx].clone();
        let call = put_finish_call(em, store.buf, Staging::Identity, OutCols::GemmN);
        em.stmt(call, em.kernel.nodes[store.node].value);
    }
    if let Some((idx, how)) = g.staged.filter(|_| !subtiled) {
        let store = em.kernel.stores[idx].clone();
        let call = if g.put_staged {
            put_finish_call(em, store.buf, how, OutCols::Buffer)
        } else {
            staged_call(em, store.buf, how)
        };
        em.stmt(call, em.kernel.nodes[store.node].value);
        for twin in g.twins.clone() {
            let s = em.kernel.stores[twin].clone();
            let (b, t, map) = (em.buf_w(s.buf), super::params::c_type(em.ir.buffers[s.buf].dtype), staging_map(how));
            let call = format!("coda::store_staged_again<{t}, {map}>(f, t, {b}, {b}_ld, {b}_cols, smem);");
            em.stmt(Code::lit(call).reading(&["f", "t", "smem"]), em.kernel.nodes[s.node].value);
        }
    }
    g.reductions(em)?;
    let body = em.take_lines().join("\n");
    let mut prefetches: Vec<String> = (g.staged_load.iter().filter(|_| !subtiled))
        .map(|(_, call)| format!("coda::stage_tile_async{call};"))
        .collect();
    for (slot, buf) in g.col_vecs.iter().enumerate() {
        let b = em.buf(*buf);
        prefetches.push(format!("cg::stage_col_async(f, t, {slot}, smem, {b}, {b}_cols);"));
    }
    let prefetch = entry::prefetch_hook(&prefetches);
    let code = format!(
        "struct {epi} {{\n    struct Params {{\n{fields}    }};\n    static constexpr int kSmemFloats = 0;\n{col_vecs}{prefetch}    \
         template <class Frag, class Tile>\n    static __device__ void apply(const Params& p, Frag& f, const Tile& t, float* smem) {{\n\
         {body}\n    }}\n}};\n\n{entry_code}",
        fields = em.params.c_fields("        "),
        col_vecs = match g.col_vecs.len() {
            0 => String::new(),
            n => format!("    static constexpr int kColVecs = {n};\n"),
        },
        entry_code = if spec.config.is_sm90() {
            entry::sm90_entry(spec, &epi, entry, pre, g.col_vecs.len())
        } else {
            entry::sm80_entry(spec, &epi, entry)
        },
    );
    let mut args = vec![entry::gemm_args(em, spec)];
    args.extend(entry::k_parts_args(em, spec));
    Ok((code, args, g.col_vecs.len()))
}

struct Gemm {
    /// Slot values of register nodes in the current `(i, j)` body.
    regs: HashMap<NodeId, Vec<Code>>,
    /// Own-column index locals in the current body, by (offset, stride, slot).
    cols: HashMap<(i64, i64, usize), Code>,
    /// Per-row values: node and array name.
    rows: Vec<(NodeId, String)>,
    /// Pair loads in the current body, by (node, map offset).
    pairs: HashMap<(NodeId, i64), String>,
    /// Quad loads (the even and odd columns of a pair) in the current body,
    /// by (load node, map offset, first buffer column of the pair's quad).
    quads: HashMap<(NodeId, i64, i64), String>,
    /// The `(buffer, column expression in n, aligned)` of every quad load
    /// in the current body, fetched ahead of the pair loop (`ahead_lines`;
    /// `aligned` as `Gemm::aligned` found it).
    ahead: Vec<(usize, String, bool)>,
    /// The quad loads of the current body whose next pairs' quads are held
    /// in registers ahead of the loop (`ahead::Held`; staged subtiles only).
    held: Vec<ahead::Held>,
    /// Whether `ahead` is copied into the scratch (`cg::stream_quad`, when
    /// `may_stream` and no operand is staged there) or prefetched into L2.
    streaming: bool,
    /// Whether quad loads may be streamed through the scratch: the Hopper
    /// mainloop, and no store staged through the scratch.
    may_stream: bool,
    /// Element-wise tile expressions evaluated for both slots at once in
    /// the current body, by (node, map offset).
    inline_pairs: HashMap<(NodeId, i64), Vec<Code>>,
    /// How many [`Gemm::inline_pair`] evaluations are under way, one inside
    /// the other (at most [`MAX_INLINE_PAIR_DEPTH`]).
    inline_depth: usize,
    /// [`reads_tile_pairs`] and [`pair_invariant`] of the nodes asked about.
    pair_readers: HashMap<NodeId, bool>,
    pair_invariants: HashMap<NodeId, bool>,
    /// The store written through shared memory, by index, and how.
    staged: Option<(usize, Staging)>,
    /// Stores of the same node, staged the same way into another buffer of
    /// the same type (a saved tensor beside the next GEMM's operand): the
    /// staged tile is written to them too (`coda::store_staged_again`).
    twins: Vec<usize>,
    /// A second full-tile store written through the scratch during the
    /// loop (`coda::staged_put` / `staged_put_finish` with `StagedOwnCols`, before
    /// the staged store), by index.
    scratch: Option<usize>,
    /// A third full-tile store, through region 2 of a configuration that
    /// stages subtiles in three regions (`Sm90Cfg128x192pps3`), by index.
    scratch2: Option<usize>,
    /// Whether the staged store is written during the loop
    /// (`coda::staged_put`): when the scratch is otherwise free then (no
    /// staged operand, no scratch store).
    put_staged: bool,
    /// Column vectors staged per tile (`cg::stage_col_async`), by slot.
    col_vecs: Vec<usize>,
    /// Stores held packed in the accumulators until the loop ends, by
    /// index, in slot order (`packed.rs`); only without a staged store.
    packed: Vec<usize>,
    /// The GEMM's N when it is a constant multiple of the tile's BN: then
    /// every column of every tile is one of the accumulator's.
    whole_col_tiles: Option<i64>,
    /// The tile configuration: column vectors are staged only on the Hopper
    /// mainloop (whose prefetch hook issues the copies), as many as its
    /// shared memory holds.
    config: crate::config::TileConfig,
    /// The tile operand read through shared memory: its buffer and the
    /// template and call arguments of `coda::stage_tile_finish` (before the
    /// loop) and `coda::stage_tile_async` (the prefetch hook).
    staged_load: Option<(usize, String)>,
    /// The per-head nodes computed before the pair loop, by their arrays
    /// (`heads.rs`).
    head_arrays: HashMap<NodeId, String>,
    /// Whether operands are evaluated element by element, with no staged,
    /// pair or quad loads (the passes before the pair loop).
    plain_loads: bool,
    /// Whether the current body is the loop over rows and heads that
    /// computes per-head values (`heads.rs`), rather than a pair loop.
    in_head_loop: bool,
    /// The shift of each log-sum-exp partial, by partial index (`lse.rs`).
    lse_shifts: Vec<Option<lse::LseShift>>,
}

/// The most column vectors a Hopper epilogue stages per tile (1 KiB of
/// shared memory each with 256-column tiles); more are read from global
/// memory.
const MAX_STAGED_COL_VECS: usize = 4;

/// How deep [`Gemm::inline_pair`] evaluations nest (each is a few stack
/// frames): an element-wise expression deeper than this (a chain of
/// thousands of `let`s) has its deeper operands evaluated one slot at a
/// time by [`Emitter::eval`], which needs no recursion, instead of
/// overflowing the stack.
const MAX_INLINE_PAIR_DEPTH: usize = 64;

impl Gemm {
    fn scalars(&mut self, em: &mut Emitter<'_>) -> Result<(), CodegenError> {
        for (id, node) in em.kernel.nodes.iter().enumerate() {
            if node.reg.is_none() && node.space == Space::Scalar {
                em.eval(id, "0", "0")?;
            }
        }
        Ok(())
    }

    /// Per-row values for the thread's rows, into `name[Frag::RI]` arrays.
    fn row_values(&mut self, em: &mut Emitter<'_>) -> Result<(), CodegenError> {
        let ids: Vec<NodeId> = (0..em.kernel.nodes.len())
            .filter(|id| em.kernel.nodes[*id].reg.is_none() && em.kernel.nodes[*id].space == Space::Row)
            .filter(|id| !matches!(em.kernel.nodes[*id].op, crate::kir::Op::Const(_)))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        for id in &ids {
            let name = em.local_for(em.kernel.nodes[*id].value);
            em.line(format!("float {name}_r[Frag::RI];"));
            self.rows.push((*id, format!("{name}_r")));
        }
        em.line("#pragma unroll");
        em.open("for (int i = 0; i < Frag::RI; ++i)");
        em.line("const int m = f.row_in(i) ? f.row(i) : 0;");
        // Every thread runs this loop, and a quad's lanes share m.
        em.quad_rows = true;
        for (id, array) in self.rows.clone() {
            let v = em.eval(id, "m", "0")?;
            em.line_of(Code::of(format!("{array}[i] = {v};"), [&v]).reading(&[&array, "i"]));
        }
        em.quad_rows = false;
        // Per-row values later kernels read: one thread per row, in the
        // first column tile.
        for store in em.kernel.stores.clone().iter().filter(|s| em.kernel.nodes[s.node].reg.is_none()) {
            let array = self.rows.iter().find(|(id, _)| *id == store.node).map(|(_, a)| a.clone());
            let array = array.ok_or_else(|| em.internal("GEMM store of a value that is not per row"))?;
            let access = em.access(store.buf, &Code::local("m"), &Code::lit("0"), true);
            let f = if store.accumulate { "st_acc" } else { "st" };
            let text =
                format!("if (f.row_in(i) && f.row_writer() && t.tile_n_idx == 0) cg::{f}({access}, {array}[i]);");
            em.stmt(Code::of(text, [&access]).reading(&["f", "t", "i", &array]), em.kernel.nodes[store.node].value);
        }
        em.close();
        Ok(())
    }

    /// Register nodes reachable from stores and partials.
    fn live(em: &Emitter<'_>) -> BTreeSet<NodeId> {
        let mut stack: Vec<NodeId> = em.kernel.stores.iter().map(|s| s.node).collect();
        stack.extend(em.kernel.partials.iter().map(|p| p.node));
        let mut live = BTreeSet::new();
        while let Some(id) = stack.pop() {
            let Some(node) = em.kernel.nodes.get(id) else { continue };
            if node.reg.is_none() || !live.insert(id) {
                continue;
            }
            // Computed before the pair loop (`heads.rs`).
            if node.reg.as_ref().is_some_and(ColMap::per_head) {
                continue;
            }
            stack.extend(node.op.operands());
        }
        live
    }

    fn main_loop(&mut self, em: &mut Emitter<'_>) -> Result<(), CodegenError> {
        let live = Self::live(em);
        let outer = em.take_lines();
        let mut head_lines = self.head_passes(em, &live)?;
        head_lines.extend(self.lse_passes(em)?);
        self.open_body(em);
        self.ahead.clear();
        self.held.clear();
        self.streaming = false;
        for id in &live {
            self.register(em, *id)?;
        }
        for (idx, store) in em.kernel.stores.clone().into_iter().enumerate() {
            let twin = self.twins.contains(&idx);
            let held = self.packed.contains(&idx);
            // Per-row and per-head values are stored outside the pair loop.
            let outside = em.kernel.nodes[store.node].reg.as_ref().is_none_or(ColMap::per_head);
            if self.staged.map(|(i, _)| i) == Some(idx) || twin || held || outside {
                continue;
            }
            if let Some(region) = self.scratch_region(idx) {
                self.put(em, &store, Staging::Identity, OutCols::GemmN.of(em, &store), region)?;
            } else {
                self.store(em, &store)?;
            }
        }
        for (idx, part) in em.kernel.partials.clone().iter().enumerate() {
            self.accumulate(em, idx, part)?;
        }
        let subtiled = self.subtiled();
        self.put_staged = self.staged.is_some() && (subtiled || (self.staged_load.is_none() && self.scratch.is_none()));
        if let Some((idx, how)) = self.staged {
            let store = em.kernel.stores[idx].clone();
            let vars = self.slot_values(em, store.node, "staged store")?;
            if self.put_staged {
                self.put(em, &store, how, OutCols::Buffer.of(em, &store), self.staged_region())?;
            } else {
                for (slot, v) in vars.iter().enumerate() {
                    em.line_of(Code::of(format!("f.acc[i][j][{slot}] = {v};"), [v]).reading(&["f", "i", "j"]));
                }
            }
        }
        // Last: the loop has read this pair's accumulators.
        for (slot, idx) in self.packed.clone().into_iter().enumerate() {
            let store = em.kernel.stores[idx].clone();
            let vars = self.slot_values(em, store.node, "packed store")?;
            packed::pack_line(em, slot, &store, &vars)?;
        }
        em.pop_scope();
        let body = hoist::without_unread_indices(em.take_body());
        let reads = |name: &str| body.iter().any(|line| line.reads(name));
        let (reads_n, reads_m) = (reads("n"), reads("m"));
        let (hoisted, body) = hoist::column_invariants(body);
        // Columns outside, rows inside: what depends on the column only (a
        // gain, a rotary frequency, a column index) is evaluated once per
        // column pair, not once per row of the thread. Every row still
        // combines its pairs in increasing j, so partial sums keep their order.
        let pad = |n: usize| "    ".repeat(n);
        let mut lines = outer;
        if let Some((_, call)) = self.staged_load.as_ref().filter(|_| !subtiled) {
            lines.push(format!("{}coda::stage_tile_finish{call};", pad(2)));
        } else if (self.scratch.is_some() || self.put_staged || self.staged_load.is_some()) && self.col_vecs.is_empty()
        {
            lines.push(format!("{}f.sync();  // the loop writes the scratch", pad(2)));
        }
        if !self.col_vecs.is_empty() {
            lines.push(format!("{}cg::stage_cols_finish(f);", pad(2)));
            lines.push(format!("{}const char* colv = cg::col_area(t, smem);", pad(2)));
        }
        lines.extend(head_lines);
        let (before, ahead) = self.ahead_lines(em);
        lines.extend(before.into_iter().map(|l| format!("{}{l}", pad(2))));
        let outer_lines = std::mem::take(&mut lines);
        lines.push(format!("{}#pragma unroll", pad(2)));
        lines.push(format!("{}for (int j = 0; j < Frag::CJ; ++j) {{", pad(2)));
        if subtiled {
            let operand = self.staged_load.as_ref().map(|(buf, _)| *buf);
            lines.extend(subtile::begin_lines(em, operand).into_iter().map(|l| format!("{}{l}", pad(3))));
        }
        lines.extend(ahead.into_iter().map(|l| format!("{}{l}", pad(3))));
        if reads_n {
            lines.push(format!("{}const int n = f.col(j);", pad(3)));
        }
        lines
            .extend(hoisted.iter().map(|line| Line { indent: line.indent.saturating_sub(1), ..line.clone() }.render()));
        // Column sums of this pair over the thread's rows, kept after them.
        let col_sums: Vec<usize> = (em.kernel.partials.iter().enumerate())
            .filter(|(_, p)| p.kind == PartialKind::ColSum)
            .map(|(idx, _)| idx)
            .collect();
        for idx in &col_sums {
            lines.push(format!("{}float part{idx}_j[2] = {{0.0f, 0.0f}};", pad(3)));
        }
        lines.push(format!("{}#pragma unroll", pad(3)));
        lines.push(format!("{}for (int i = 0; i < Frag::RI; ++i) {{", pad(3)));
        if reads_m {
            lines.push(format!("{}const int m = f.row(i);", pad(4)));
        }
        // Every partial's contributions are guarded by the row predicate.
        if !em.kernel.partials.is_empty() {
            lines.push(format!("{}const bool row_ok = f.row_in(i);", pad(4)));
        }
        lines.extend(body.iter().map(Line::render));
        lines.push(format!("{}}}", pad(3)));
        for idx in &col_sums {
            lines.push(format!("{}coda::col_keep<coda::SumOp>(f, j, part{idx}_j, part{idx});", pad(3)));
        }
        if subtiled {
            let stores = self.sub_stores(em);
            lines.extend(subtile::end_lines(em, &stores).into_iter().map(|l| format!("{}{l}", pad(3))));
        }
        lines.push(format!("{}}}", pad(2)));
        let mut tail = Vec::new();
        for (slot, idx) in self.packed.clone().into_iter().enumerate() {
            let store = em.kernel.stores[idx].clone();
            tail.push(format!("{}{}", pad(2), packed::store_line(em, slot, &store)?));
        }
        let lines = [outer_lines, lines, tail].concat();
        em.set_indent(0);
        for line in lines {
            em.line(line);
        }
        em.set_indent(2);
        Ok(())
    }

    /// Starts the body of a loop over the thread's pairs or heads: a memo
    /// scope with fresh per-body memos and the per-row values bound.
    fn open_body(&mut self, em: &mut Emitter<'_>) {
        em.set_indent(4);
        em.push_scope();
        self.regs.clear();
        self.cols.clear();
        self.pairs.clear();
        self.quads.clear();
        self.inline_pairs.clear();
        for (id, array) in self.rows.clone() {
            em.bind(id, "m", "0", Code::lit(format!("{array}[i]")).reading(&[&array, "i"]));
        }
    }

    /// Whether the configuration stages subtiles (`subtile.rs`).
    fn subtiled(&self) -> bool {
        self.config.stage_cols().is_some()
    }

    /// The scratch region of the staged store when subtiles are staged:
    /// region 1 beside a staged operand or a scratch store (region 0).
    fn staged_region(&self) -> usize {
        usize::from(self.staged_load.is_some() || self.scratch.is_some())
    }

    /// The region a scratch store goes through: 0 for the scratch store,
    /// 2 for the second (after the staged store's region 1).
    fn scratch_region(&self, idx: usize) -> Option<usize> {
        if self.scratch == Some(idx) {
            Some(0)
        } else if self.scratch2 == Some(idx) {
            Some(2)
        } else {
            None
        }
    }

    /// The stores written through the regions of staged subtiles, in the
    /// order their subtiles are stored: the scratch store, the staged
    /// store, its twins, the second scratch store.
    fn sub_stores(&self, em: &Emitter<'_>) -> Vec<subtile::SubStore> {
        let buf = |idx: usize| em.kernel.stores[idx].buf;
        let cols = |idx: usize, or: OutCols| or.of(em, &em.kernel.stores[idx]);
        let scratch_store = |idx: usize, region: usize| subtile::SubStore {
            buf: buf(idx),
            how: Staging::Identity,
            cols: cols(idx, OutCols::GemmN),
            region,
        };
        let scratch = self.scratch.map(|idx| scratch_store(idx, 0));
        let staged = self.staged.into_iter().flat_map(|(idx, how)| {
            let region = self.staged_region();
            std::iter::once(idx).chain(self.twins.iter().copied()).map(move |i| subtile::SubStore {
                buf: buf(i),
                how,
                cols: cols(i, OutCols::Buffer),
                region,
            })
        });
        let scratch2 = self.scratch2.map(|idx| scratch_store(idx, 2));
        scratch.into_iter().chain(staged).chain(scratch2).collect()
    }

    /// The slot values of register node `node`, evaluated earlier in the
    /// pair's body; `what` (a store, a partial) reads it.
    fn slot_values(&self, em: &Emitter<'_>, node: NodeId, what: &str) -> Result<Vec<Code>, CodegenError> {
        self.regs.get(&node).cloned().ok_or_else(|| em.internal(format!("{what} of an unevaluated node")))
    }
}
