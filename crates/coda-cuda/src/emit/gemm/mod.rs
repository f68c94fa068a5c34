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
mod packed;
mod subtile;

use ahead::Access;

use super::expr::{binary, Emitter};
use crate::error::CodegenError;
use crate::kir::{ColMap, GemmSpec, NodeId, Op, PartialKind, PartialOut, Space};
use crate::manifest::{FieldSpec, FieldValue, StructSpec};
use coda_ir::UnaryOp;
use std::collections::{BTreeSet, HashMap};

/// The functor, the entry point and the `GemmArgs` struct of a GEMM kernel.
/// Also returns how many column vectors the functor stages per tile (they
/// add to the kernel's shared memory, `TileConfig::smem_bytes_with`).
pub(crate) fn emit(
    em: &mut Emitter<'_>,
    spec: &GemmSpec,
    entry: &str,
    pre: Option<&str>,
) -> Result<(String, StructSpec, usize), CodegenError> {
    let epi = format!("Epi_{}", em.kernel.name);
    let mut g = Gemm {
        regs: HashMap::new(),
        cols: HashMap::new(),
        rows: Vec::new(),
        pairs: HashMap::new(),
        quads: HashMap::new(),
        ahead: Vec::new(),
        streaming: false,
        may_stream: false,
        inline_pairs: HashMap::new(),
        inline_depth: 0,
        pair_readers: HashMap::new(),
        pair_invariants: HashMap::new(),
        staged: None,
        twins: Vec::new(),
        scratch: None,
        staged_load: None,
        col_vecs: Vec::new(),
        config: spec.config,
        put_staged: false,
        packed: Vec::new(),
        whole_col_tiles: spec.n.as_const().filter(|n| n % spec.config.tile().1 == 0),
    };
    g.staged = staged_store(em, spec);
    g.twins = g.staged.map_or_else(Vec::new, |(first, how)| twin_stores(em, spec, first, how));
    g.scratch = g.staged.and_then(|(first, _)| scratch_store(em, spec, first, &g.twins));
    let subtiled = g.subtiled();
    if subtiled && spec.config.stage_regions() < 2 {
        g.scratch = None; // one region holds the staged store's subtiles only
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
            em.stmt(call, em.kernel.nodes[s.node].value);
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
    let prefetch = prefetch_hook(&prefetches);
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
            sm90_entry(spec, &epi, entry, pre, g.col_vecs.len())
        } else {
            sm80_entry(spec, &epi, entry)
        },
    );
    Ok((code, gemm_args(em, spec), g.col_vecs.len()))
}

/// The functor's `prefetch` (called by the Hopper mainloop before each
/// tile's K loop), running `calls`: `coda::stage_tile_async` of the staged
/// tile operand (`apply` finishes it with `coda::stage_tile_finish` and the
/// same arguments) and `cg::stage_col_async` of each staged column vector
/// (finished by `cg::stage_cols_finish`). None without calls.
fn prefetch_hook(calls: &[String]) -> String {
    if calls.is_empty() {
        return String::new();
    }
    format!(
        "    static constexpr bool kPrefetch = true;\n    template <class Frag, class Tile>\n    \
         static __device__ void prefetch(const Params& p, const Frag& f, const Tile& t, float* smem) {{\n{}    }}\n",
        calls.iter().map(|c| format!("        {c}\n")).collect::<String>()
    )
}

/// The entry point instantiating the portable mainloop.
fn sm80_entry(spec: &GemmSpec, epi: &str, entry: &str) -> String {
    let cfg = format!("coda::{}", spec.config.name());
    let rows = match &spec.b.row_perm {
        Some(p) => format!(", coda::PairRows<{}, {}, {}>", p.start, p.end, p.group),
        None => String::new(),
    };
    format!(
        "extern \"C\" __global__ void __launch_bounds__({cfg}::kThreads, {cfg}::kMinBlocks)\n\
         {entry}(coda::GemmArgs g, {epi}::Params e) {{\n    coda::gemm_sm80<{cfg}, {la}, {lb}, {elem}, {epi}{rows}>(g, e);\n}}\n",
        la = spec.a.layout.tag(),
        lb = spec.b.layout.tag(),
        elem = super::params::c_type(spec.elem),
    )
}

/// The entry point instantiating the Hopper mainloop: the tensor maps of A
/// and B (and of B's pair-order view) come first, by value; the shared
/// memory the host passes is checked against the header's formula. A row
/// prelude (`pre`: its `Pre` struct) takes the template's last argument
/// (after `coda::NoPrologue`), and its `Params` struct the entry's.
fn sm90_entry(spec: &GemmSpec, epi: &str, entry: &str, pre: Option<&str>, col_vecs: usize) -> String {
    let cfg = format!("coda::{}", spec.config.name());
    let map = |name: &str| format!("const __grid_constant__ coda::TmaDesc {name}");
    let (maps, rows, tbp) = match &spec.b.row_perm {
        Some(p) => (
            format!("{}, {}, {}", map("ta"), map("tb"), map("tbp")),
            format!("coda::Sm90PairRows<{}, {}, {}>", p.start, p.end, p.group),
            "tbp",
        ),
        None => (format!("{}, {}", map("ta"), map("tb")), "coda::IdentityRows".to_string(), "tb"),
    };
    format!(
        "static_assert(coda::gemm_sm90_smem_bytes<{cfg}, {epi}>() == {smem}, \"codac's shared-memory size for {cfg}\");\n\n\
         extern \"C\" __global__ void __launch_bounds__({cfg}::kThreads, 1)\n\
         {entry}({maps}, coda::GemmArgs g, {epi}::Params e{pre_arg}) {{\n    \
         coda::gemm_sm90_rows<{cfg}, {la}, {lb}, {elem}, {epi}, {rows}{pro}{pre}>(ta, tb, {tbp}, g, e{pre_val});\n}}\n",
        pro = if pre.is_some() { ", coda::NoPrologue" } else { "" },
        pre = pre.map_or(String::new(), |p| format!(", {p}")),
        pre_arg = pre.map_or(String::new(), |p| format!(", {p}::Params pre")),
        pre_val = if pre.is_some() { ", pre" } else { "" },
        smem = spec.config.smem_bytes_with(col_vecs),
        la = spec.a.layout.tag(),
        lb = spec.b.layout.tag(),
        elem = super::params::c_type(spec.elem),
    )
}

/// The `GemmArgs` fields.
fn gemm_args(em: &Emitter<'_>, spec: &GemmSpec) -> StructSpec {
    let a = em.ir.buffers[spec.a.buf].name.clone();
    let b = em.ir.buffers[spec.b.buf].name.clone();
    let f = |name: &str, kind: &str, value: FieldValue| FieldSpec { name: name.into(), kind: kind.into(), value };
    StructSpec::new(
        "GemmArgs",
        vec![
            f("a", "ptr", FieldValue::Ptr(a.clone())),
            f("b", "ptr", FieldValue::Ptr(b.clone())),
            f("m", "i32", FieldValue::Expr(spec.m.to_string())),
            f("n", "i32", FieldValue::Expr(spec.n.to_string())),
            f("k", "i32", FieldValue::Expr(spec.k.to_string())),
            f("lda", "i64", FieldValue::Ld(a)),
            f("ldb", "i64", FieldValue::Ld(b)),
        ],
    )
}

struct Gemm {
    /// Slot values of register nodes in the current `(i, j)` body.
    regs: HashMap<NodeId, Vec<String>>,
    /// Own-column index locals in the current body, by (offset, stride, slot).
    cols: HashMap<(i64, i64, usize), String>,
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
    /// Whether `ahead` is copied into the scratch (`cg::stream_quad`, when
    /// `may_stream` and no operand is staged there) or prefetched into L2.
    streaming: bool,
    /// Whether quad loads may be streamed through the scratch: the Hopper
    /// mainloop, and no store staged through the scratch.
    may_stream: bool,
    /// Element-wise tile expressions evaluated for both slots at once in
    /// the current body, by (node, map offset).
    inline_pairs: HashMap<(NodeId, i64), Vec<String>>,
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
}

/// How a staged store maps accumulator columns to output columns.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Staging {
    /// The accumulator's own columns (`store_tile_staged`).
    Identity,
    /// A pair operation's half-width output (`coda::StagedHalfCols`).
    Half,
    /// A pair layout put back in order (`coda::StagedUnpermuteCols`).
    Unpermute(coda_ir::PairPerm),
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

/// The store to stage through shared memory, if any (see the module docs):
/// only in 255-register configurations with at most one partial, where the
/// extra address arithmetic does not spill.
fn staged_store(em: &Emitter<'_>, spec: &GemmSpec) -> Option<(usize, Staging)> {
    let roomy = spec.config.is_sm90()
        || matches!(spec.config, crate::config::TileConfig::Cfg128x128w4 | crate::config::TileConfig::Cfg128x256);
    if !roomy || em.kernel.partials.len() > 1 {
        return None;
    }
    let fits = |how: &Staging| spec.config.stage_cols().is_none_or(|cols| subtile::fits(*how, cols));
    em.kernel.stores.iter().enumerate().find_map(|(i, s)| staging(em, spec, s).filter(fits).map(|how| (i, how)))
}

/// How store `s` could be staged through shared memory, if it can: a full
/// 16-bit tile of the accumulator's rows, written once.
fn staging(em: &Emitter<'_>, spec: &GemmSpec, s: &crate::kir::Store) -> Option<Staging> {
    let (_, bn, _) = spec.config.tile();
    let subtiled = spec.config.stage_cols().is_some();
    let map = em.kernel.nodes[s.node].reg.as_ref()?;
    let buf = &em.ir.buffers[s.buf];
    let rows = buf.rows == crate::symexpr::SymExpr::from(&spec.m);
    // A concatenation part goes through staged subtiles only, shifted by
    // whole 16-byte chunks and of constant width (`OutCols::Part`).
    let part_ok =
        s.col_offset.is_none_or(|o| subtiled && o % crate::config::CHUNK_COLS == 0 && part_end(em, s).is_some());
    if !rows || s.accumulate || !buf.dtype.is_half() || map.offset != 0 || !part_ok {
        return None;
    }
    if s.col_offset.is_some() {
        return (map.stride == 1 && s.col_perm.is_none()).then_some(Staging::Identity);
    }
    match (map.stride, s.col_perm) {
        (1, None) if map.len == spec.n => Some(Staging::Identity),
        // A whole tile is put back from pair order group by group; staged
        // subtiles only need whole subtiles per group (`subtile::fits`).
        (1, Some(p)) if map.len == spec.n && p.start % p.group == 0 && (bn % p.group == 0 || subtiled) => {
            Some(Staging::Unpermute(p))
        }
        (2, None) => Some(Staging::Half),
        _ => None,
    }
}

/// The stores that repeat the staged store `first` (same node, staged the
/// same way, same element type) into other buffers: Hopper only, where the
/// scratch always holds a whole tile.
fn twin_stores(em: &Emitter<'_>, spec: &GemmSpec, first: usize, how: Staging) -> Vec<usize> {
    let stores = &em.kernel.stores;
    let Some(staged) = stores.get(first) else { return Vec::new() };
    let dtype = em.ir.buffers[staged.buf].dtype;
    let same_way = |s: &crate::kir::Store| {
        staging(em, spec, s) == Some(how)
            && s.node == staged.node
            && em.ir.buffers[s.buf].dtype == dtype
            && s.buf != staged.buf
    };
    if !spec.config.is_sm90() {
        return Vec::new();
    }
    (0..stores.len()).filter(|i| *i != first && same_way(&stores[*i])).collect()
}

/// A second store that can go through the scratch during the loop, besides
/// the staged store `first` and its `twins` (which repeat it from the
/// scratch after it): one on the accumulator's own columns. The scratch
/// holds at most the staged operand then, read before each pair is written
/// (see `coda::staged_put`), so no pair loop reads what it writes.
fn scratch_store(em: &Emitter<'_>, spec: &GemmSpec, first: usize, twins: &[usize]) -> Option<usize> {
    let own = |i: usize, s: &crate::kir::Store| {
        i != first && !twins.contains(&i) && matches!(staging(em, spec, s), Some(Staging::Identity))
    };
    em.kernel.stores.iter().enumerate().find_map(|(i, s)| own(i, s).then_some(i))
}

/// The `coda::Staged*` column map of a staged store.
fn staging_map(how: Staging) -> String {
    match how {
        Staging::Identity => "coda::StagedOwnCols".to_string(),
        Staging::Half => "coda::StagedHalfCols".to_string(),
        Staging::Unpermute(p) => format!("coda::StagedUnpermuteCols<{}, {}, {}>", p.start, p.end, p.group),
    }
}

/// The output column bound of a `put_call`.
#[derive(Debug, Clone, Copy)]
enum OutCols {
    /// The output buffer's own column count.
    Buffer,
    /// The GEMM's `N`: for the scratch store, whose buffer has the
    /// accumulator's columns by its selection (as `store_tile_staged` uses).
    GemmN,
    /// A concatenation part's columns `offset .. end` of the buffer (staged
    /// subtiles only): written through the buffer shifted by `offset`,
    /// bounded by the part's width.
    Part { offset: i64, end: i64 },
}

impl OutCols {
    /// The bound of `b`'s written columns, in the frame of [`Self::base`].
    fn expr(self, b: &str) -> String {
        match self {
            OutCols::Buffer => format!("{b}_cols"),
            OutCols::GemmN => "t.n".to_string(),
            OutCols::Part { offset, end } => (end - offset).to_string(),
        }
    }

    /// The pointer the tile's column 0 is written through.
    fn base(self, b: &str) -> String {
        match self {
            OutCols::Part { offset, .. } if offset != 0 => format!("{b} + {offset}"),
            _ => b.to_string(),
        }
    }

    /// `self`, or the part `store` writes when it is a concatenation part.
    fn of(self, em: &Emitter<'_>, store: &crate::kir::Store) -> OutCols {
        match (store.col_offset, part_end(em, store)) {
            (Some(offset), Some(end)) => OutCols::Part { offset, end },
            _ => self,
        }
    }
}

/// The column where a concatenation part ends (its bound), when the part's
/// width is a constant.
fn part_end(em: &Emitter<'_>, s: &crate::kir::Store) -> Option<i64> {
    let value = em.kernel.nodes[s.node].value;
    let width = em.block.ty(value).shape.cols.as_const()?;
    Some(width + s.col_offset?)
}

/// One pair of a store written into the scratch during the loop
/// (`coda::staged_put`): the staged store when the scratch is free, or the
/// scratch store (`Staging::Identity`, `OutCols::GemmN`).
fn put_call(em: &mut Emitter<'_>, buf: usize, how: Staging, cols: OutCols, (v0, v1): (&str, &str)) -> String {
    let (b, t, map) = (em.buf_w(buf), super::params::c_type(em.ir.buffers[buf].dtype), staging_map(how));
    let cols = cols.expr(&b);
    format!("coda::staged_put<{t}, {map}>(f, t, i, j, {b}, {b}_ld, {cols}, smem, {v0}, {v1});")
}

/// The store of a tile that `put_call` filled, after the loop (same `cols`).
fn put_finish_call(em: &mut Emitter<'_>, buf: usize, how: Staging, cols: OutCols) -> String {
    let (b, t, map) = (em.buf_w(buf), super::params::c_type(em.ir.buffers[buf].dtype), staging_map(how));
    let cols = cols.expr(&b);
    format!("coda::staged_put_finish<{t}, {map}>(f, t, {b}, {b}_ld, {cols}, smem);")
}

/// The call that writes the staged store from `f.acc` after the loop.
fn staged_call(em: &mut Emitter<'_>, buf: usize, how: Staging) -> String {
    let (b, t) = (em.buf_w(buf), super::params::c_type(em.ir.buffers[buf].dtype));
    match how {
        // The helper checks the buffer's alignment itself (uniformly for the
        // CTA) and falls back to bounded element stores.
        Staging::Identity => format!("coda::store_tile_staged(f, t, f.acc, {b}, {b}_ld, smem);"),
        _ => {
            format!("coda::store_tile_staged_map<{t}, {}>(f, t, f.acc, {b}, {b}_ld, {b}_cols, smem);", staging_map(how))
        }
    }
}

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
            .filter(|id| !matches!(em.kernel.nodes[*id].op, super::super::kir::Op::Const(_)))
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
            em.line(format!("{array}[i] = {v};"));
        }
        em.quad_rows = false;
        // Per-row values later kernels read: one thread per row, in the
        // first column tile.
        for store in em.kernel.stores.clone().iter().filter(|s| em.kernel.nodes[s.node].reg.is_none()) {
            let array = self.rows.iter().find(|(id, _)| *id == store.node).map(|(_, a)| a.clone());
            let array = array.ok_or_else(|| em.internal("GEMM store of a value that is not per row"))?;
            let access = em.access(store.buf, "m", "0", true);
            let f = if store.accumulate { "st_acc" } else { "st" };
            let text =
                format!("if (f.row_in(i) && f.row_writer() && t.tile_n_idx == 0) cg::{f}({access}, {array}[i]);");
            em.stmt(text, em.kernel.nodes[store.node].value);
        }
        em.close();
        Ok(())
    }

    fn partial_decls(&mut self, em: &mut Emitter<'_>) -> Result<(), CodegenError> {
        for (idx, part) in em.kernel.partials.iter().enumerate() {
            let name = format!("part{idx}");
            let init = match part.kind {
                PartialKind::RowMax => "coda::neg_inf()",
                _ => "0.0f",
            };
            match part.kind {
                PartialKind::ColSum => {
                    // Kept column sums (`coda::col_keep`): one pair per 8 column pairs.
                    em.stmt(format!("float {name}[(Frag::CJ + 7) / 8][2];"), part.value);
                    em.line("#pragma unroll");
                    em.line(format!(
                        "for (int q = 0; q < (Frag::CJ + 7) / 8; ++q) {name}[q][0] = {name}[q][1] = 0.0f;"
                    ));
                }
                PartialKind::RowLse => {
                    em.stmt(format!("float {name}_m[Frag::RI], {name}_s[Frag::RI];"), part.value);
                    em.line("#pragma unroll");
                    em.line(format!(
                        "for (int i = 0; i < Frag::RI; ++i) {{ {name}_m[i] = coda::neg_inf(); {name}_s[i] = 0.0f; }}"
                    ));
                }
                _ => {
                    em.stmt(format!("float {name}[Frag::RI];"), part.value);
                    em.line("#pragma unroll");
                    em.line(format!("for (int i = 0; i < Frag::RI; ++i) {name}[i] = {init};"));
                }
            }
        }
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
            stack.extend(node.op.operands());
        }
        live
    }

    fn main_loop(&mut self, em: &mut Emitter<'_>) -> Result<(), CodegenError> {
        let live = Self::live(em);
        let outer = em.take_lines();
        em.set_indent(4);
        em.push_scope();
        self.regs.clear();
        self.cols.clear();
        self.pairs.clear();
        self.quads.clear();
        self.ahead.clear();
        self.streaming = false;
        self.inline_pairs.clear();
        for (id, array) in self.rows.clone() {
            em.bind(id, "m", "0", format!("{array}[i]"));
        }
        for id in &live {
            self.register(em, *id)?;
        }
        for (idx, store) in em.kernel.stores.clone().into_iter().enumerate() {
            let twin = self.twins.contains(&idx);
            let held = self.packed.contains(&idx);
            if self.staged.map(|(i, _)| i) == Some(idx) || twin || held || em.kernel.nodes[store.node].reg.is_none() {
                continue;
            }
            if self.scratch == Some(idx) {
                self.put(em, &store, Staging::Identity, OutCols::GemmN.of(em, &store), 0)?;
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
                    em.line(format!("f.acc[i][j][{slot}] = {v};"));
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
        let body = drop_unused_indices(em.take_lines());
        let text = body.join("\n");
        let (hoisted, body) = hoist_column_invariants(body);
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
        if uses(&text, "n") {
            lines.push(format!("{}const int n = f.col(j);", pad(3)));
        }
        lines.extend(hoisted.into_iter().map(|l| l.replacen(&pad(1), "", 1)));
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
        if uses(&text, "m") {
            lines.push(format!("{}const int m = f.row(i);", pad(4)));
        }
        if uses(&text, "row_ok") {
            lines.push(format!("{}const bool row_ok = f.row_in(i);", pad(4)));
        }
        lines.extend(body);
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

    /// Whether the configuration stages subtiles (`subtile.rs`).
    fn subtiled(&self) -> bool {
        self.config.stage_cols().is_some()
    }

    /// The scratch region of the staged store when subtiles are staged:
    /// region 1 beside a staged operand or a scratch store (region 0).
    fn staged_region(&self) -> usize {
        usize::from(self.staged_load.is_some() || self.scratch.is_some())
    }

    /// The stores written through the regions of staged subtiles, in the
    /// order their subtiles are stored: the scratch store, the staged
    /// store, its twins.
    fn sub_stores(&self, em: &Emitter<'_>) -> Vec<subtile::SubStore> {
        let buf = |idx: usize| em.kernel.stores[idx].buf;
        let cols = |idx: usize, or: OutCols| or.of(em, &em.kernel.stores[idx]);
        let scratch = self.scratch.map(|idx| subtile::SubStore {
            buf: buf(idx),
            how: Staging::Identity,
            cols: cols(idx, OutCols::GemmN),
            region: 0,
        });
        let staged = self.staged.into_iter().flat_map(|(idx, how)| {
            let region = self.staged_region();
            std::iter::once(idx).chain(self.twins.iter().copied()).map(move |i| subtile::SubStore {
                buf: buf(i),
                how,
                cols: cols(i, OutCols::Buffer),
                region,
            })
        });
        scratch.into_iter().chain(staged).collect()
    }

    /// The slot values of register node `node`, evaluated earlier in the
    /// pair's body; `what` (a store, a partial) reads it.
    fn slot_values(&self, em: &Emitter<'_>, node: NodeId, what: &str) -> Result<Vec<String>, CodegenError> {
        self.regs.get(&node).cloned().ok_or_else(|| em.internal(format!("{what} of an unevaluated node")))
    }

    /// The local holding the own column of `map` at `slot`.
    fn col(&mut self, em: &mut Emitter<'_>, map: &ColMap, slot: usize) -> String {
        let key = (map.offset, map.stride, slot);
        if let Some(v) = self.cols.get(&key) {
            return v.clone();
        }
        let o = map.offset;
        let expr = match (map.stride, slot) {
            (1, 0) if o == 0 => "n".to_string(),
            (1, s) => format!("n + {} - {o}", s).replace(" + 0 - 0", "").replace(" - 0", ""),
            _ if o == 0 => "n >> 1".to_string(),
            _ => format!("(n - {o}) >> 1"),
        };
        let name = em.index(if map.stride == 1 { "c" } else { "cp" }, expr);
        self.cols.insert(key, name.clone());
        name
    }

    /// Whether every column of every tile is a column of `map`, so that a
    /// partial over it needs no column check: the map starts at the
    /// accumulator's first column and spans its N, a constant multiple of
    /// BN (two checks per accumulator pair had cost the Llama-3
    /// out-projection 8% of its cold compile).
    fn spans_every_tile(&self, map: &ColMap) -> bool {
        let Some(n) = self.whole_col_tiles else { return false };
        map.offset == 0 && map.len.as_const().is_some_and(|len| len * map.stride == n)
    }

    fn slots(map: &ColMap) -> usize {
        if map.stride == 1 {
            2
        } else {
            1
        }
    }

    /// Emits the slot values of register node `id`.
    fn register(&mut self, em: &mut Emitter<'_>, id: NodeId) -> Result<(), CodegenError> {
        let node = em.kernel.nodes[id].clone();
        let map = node.reg.clone().ok_or_else(|| em.internal("not a register node"))?;
        let name = em.local_for(node.value);
        let mut vars = Vec::new();
        if let Op::RopePartner(spec, _) = &node.op {
            let c0 = self.col(em, &map, 0);
            let (s, e) = (em.dim_int(&spec.start), em.dim_int(&spec.end));
            em.stmt(format!("const bool {name}_sw = {c0} >= {s} && {c0} < {e};"), node.value);
        }
        for slot in 0..Self::slots(&map) {
            let expr = self.slot_expr(em, id, &map, slot, &name)?;
            let var = if Self::slots(&map) == 2 { format!("{name}_{slot}") } else { format!("{name}_p") };
            em.stmt(format!("const float {var} = {expr};"), node.value);
            vars.push(var);
        }
        self.regs.insert(id, vars);
        Ok(())
    }

    /// The value of operand `op` for slot `slot` of a node with map `map`.
    fn operand(&mut self, em: &mut Emitter<'_>, op: NodeId, map: &ColMap, slot: usize) -> Result<String, CodegenError> {
        if let Some(vars) = self.regs.get(&op) {
            return Ok(vars.get(slot).or(vars.first()).cloned().unwrap_or_default());
        }
        let half = if slot == 0 { "x" } else { "y" };
        if let (Op::Load(buf), Space::Tile, 1) = (&em.kernel.nodes[op].op, em.kernel.nodes[op].space, map.stride) {
            return Ok(format!("{}.{half}", self.pair_load(em, op, *buf, map, "m")));
        }
        // A column vector (a gain, a bias) at the pair's own columns: one
        // 4-byte load for both instead of two bounded 2-byte loads.
        if let Some((vector, buf)) = column_vector_load(em, op).filter(|_| map.stride == 1) {
            return Ok(format!("{}.{half}", self.pair_load(em, vector, buf, map, "0")));
        }
        if map.stride == 1
            && self.inline_depth < MAX_INLINE_PAIR_DEPTH
            && reads_tile_pairs(em, op, &mut self.pair_readers)
        {
            self.inline_depth += 1;
            let vars = self.inline_pair(em, op, map);
            self.inline_depth -= 1;
            let vars = vars?;
            return vars.get(slot).cloned().ok_or_else(|| em.internal("inline pair slots"));
        }
        // Both columns of an aligned pair see the same rotary frequency, so
        // a value that depends on the column only through it (the angle,
        // its sine and cosine) is computed once per pair: slot 1 reuses
        // slot 0's evaluation.
        let aligned_pair = map.stride == 1 && map.offset % 2 == 0;
        let slot =
            if slot == 1 && aligned_pair && pair_invariant(em, op, &mut self.pair_invariants) { 0 } else { slot };
        let c = self.col(em, map, slot);
        em.eval(op, "m", &c)
    }

    /// Both slots of an element-wise tile expression that is not a register
    /// value (a residual stream recomputed from saved tensors, say),
    /// evaluated together so that each tile load in it is one pair load
    /// (`pair_load`) instead of two element loads.
    fn inline_pair(&mut self, em: &mut Emitter<'_>, op: NodeId, map: &ColMap) -> Result<Vec<String>, CodegenError> {
        let key = (op, map.offset);
        if let Some(vars) = self.inline_pairs.get(&key) {
            return Ok(vars.clone());
        }
        let node = em.kernel.nodes[op].clone();
        let vars = match sliced_tile_load(em, op) {
            Some(TileCols { load, buf, start, step: 1 }) => {
                let at = ColMap { offset: map.offset - start, ..map.clone() };
                let pair = self.pair_load(em, load, buf, &at, "m");
                vec![format!("{pair}.x"), format!("{pair}.y")]
            }
            Some(TileCols { load, buf, start, step: 2 }) if start >= 0 => {
                // Buffer columns `start + 2c` and `start + 2c + 2`: two
                // elements of the quad at `start - parity + 2c`.
                let parity = start & 1;
                let quad = self.quad_load(em, load, buf, map, start - parity);
                let lane = |slot: i64| ["x", "y", "z", "w"][(parity + 2 * slot) as usize];
                vec![format!("{quad}.{}", lane(0)), format!("{quad}.{}", lane(1))]
            }
            _ => {
                let name = em.local_for(node.value);
                let mut vars = Vec::new();
                for slot in 0..2 {
                    let expr = self.slot_expr(em, op, map, slot, &name)?;
                    let var = format!("{name}_{slot}");
                    em.stmt(format!("const float {var} = {expr};"), node.value);
                    vars.push(var);
                }
                vars
            }
        };
        self.inline_pairs.insert(key, vars.clone());
        Ok(vars)
    }

    /// Both elements of a load at the pair's own columns, as one `float2`
    /// (a single 4- or 8-byte load when aligned): of a tile (`row` = `m`,
    /// staged through shared memory where it can be) or of a column vector
    /// (`row` = `0`).
    fn pair_load(&mut self, em: &mut Emitter<'_>, op: NodeId, buf: usize, map: &ColMap, row: &str) -> String {
        let key = (op, map.offset);
        if let Some(v) = self.pairs.get(&key) {
            return v.clone();
        }
        let value = em.kernel.nodes[op].value;
        let name = em.local_for(value);
        if row == "m" && self.can_stage(em, buf, map) {
            if self.staged_load.is_none() {
                let b = em.buf(buf);
                let t = super::params::c_type(em.ir.buffers[buf].dtype);
                self.staged_load = Some((buf, format!("<{t}>(f, t, {b}, {b}_ld, {b}_rows, {b}_cols, smem)")));
            }
            let t = super::params::c_type(em.ir.buffers[buf].dtype);
            let read = if self.subtiled() {
                subtile::pair_call(em, buf)
            } else {
                format!("coda::staged_pair<{t}>(f, i, j, smem)")
            };
            em.stmt(format!("const float2 {name} = {read};"), value);
            self.pairs.insert(key, name.clone());
            return name;
        }
        let c0 = self.col(em, map, 0);
        let access = em.access(buf, row, &c0, false);
        let load = match self.col_slot(em, buf, map, row) {
            Some(slot) => format!("cg::col_pair<Frag>(t, colv, {slot}, {access})"),
            None if row == "m" && map.stride == 1 => {
                let at = Access { buf, a: 1, b: -map.offset, width: 2 };
                match Self::aligned(em, at, None) {
                    Some(whole) => format!("cg::load2_aligned<{whole}>({access})"),
                    None => format!("cg::load2({access})"),
                }
            }
            None => format!("cg::load2({access})"),
        };
        em.stmt(format!("const float2 {name} = {load};"), value);
        self.pairs.insert(key, name.clone());
        name
    }

    /// The slot of a column vector read at the pair's own columns that is
    /// staged per tile (see `cg::stage_col_async`), if it is: a 16- or
    /// 32-bit float vector on the Hopper mainloop, at most
    /// `MAX_STAGED_COL_VECS` of them, and no more than the configuration's
    /// shared memory has room for (their slots add to it: three beside the
    /// ping-pong tiles with 192 accumulators).
    fn col_slot(&mut self, em: &Emitter<'_>, buf: usize, map: &ColMap, row: &str) -> Option<usize> {
        let dtype = em.ir.buffers[buf].dtype;
        let float = dtype.is_half() || dtype == coda_ir::DType::F32;
        if row != "0" || !self.config.is_sm90() || !float || map.offset != 0 || map.stride != 1 {
            return None;
        }
        if let Some(slot) = self.col_vecs.iter().position(|b| *b == buf) {
            return Some(slot);
        }
        let room = self.config.smem_bytes_with(self.col_vecs.len() + 1) <= crate::config::SM90_MAX_SMEM;
        (self.col_vecs.len() < MAX_STAGED_COL_VECS && room).then(|| {
            self.col_vecs.push(buf);
            self.col_vecs.len() - 1
        })
    }

    /// Whether a pair load of `buf` at `map` can read the staged operand:
    /// a 16-bit buffer at the accumulator's own columns, and no other
    /// buffer staged already (the scratch holds one tile).
    fn can_stage(&self, em: &Emitter<'_>, buf: usize, map: &ColMap) -> bool {
        let half = em.ir.buffers[buf].dtype.is_half();
        let own = map.offset == 0 && map.stride == 1;
        // Staged subtiles keep the operand in region 0 and the outputs beside
        // it, so they need two regions.
        let room = !self.subtiled() || self.config.stage_regions() >= 2;
        half && own && room && !self.streaming && self.staged_load.as_ref().is_none_or(|(b, _)| *b == buf)
    }

    fn slot_expr(
        &mut self,
        em: &mut Emitter<'_>,
        id: NodeId,
        map: &ColMap,
        slot: usize,
        name: &str,
    ) -> Result<String, CodegenError> {
        let node = em.kernel.nodes[id].clone();
        Ok(match &node.op {
            Op::Acc => format!("f.acc[i][j][{slot}]"),
            Op::Unary(op, a) => {
                let a = self.operand(em, *a, map, slot)?;
                unary_epilogue(*op, &a)
            }
            Op::Binary(op, a, b) => {
                let (a, b) = (self.operand(em, *a, map, slot)?, self.operand(em, *b, map, slot)?);
                binary(*op, &a, &b)
            }
            Op::Select(c, a, b) => {
                let c = self.operand(em, *c, map, slot)?;
                let (a, b) = (self.operand(em, *a, map, slot)?, self.operand(em, *b, map, slot)?);
                format!("({c} != 0.0f ? {a} : {b})")
            }
            Op::Cast(to, a) => {
                let a = self.operand(em, *a, map, slot)?;
                em.cast(*to, &a, node.value)?
            }
            Op::Slice { arg, start, step } => {
                let arg_map =
                    em.kernel.nodes[*arg].reg.clone().ok_or_else(|| em.internal("slice of a non-register"))?;
                let vars = self.regs.get(arg).cloned().unwrap_or_default();
                let from = match (arg_map.stride, *step) {
                    (1, 2) => ((arg_map.offset + start.as_const().unwrap_or(0)) & 1) as usize,
                    (1, _) => slot,
                    _ => 0,
                };
                vars.get(from).cloned().ok_or_else(|| em.internal("slice operand slot"))?
            }
            Op::Interleave(e, o) => {
                let half = ColMap { offset: map.offset, stride: 2, len: map.len.clone() };
                self.operand(em, if slot == 0 { *e } else { *o }, &half, 0)?
            }
            Op::RopePartner(_, a) => {
                let vars = self.regs.get(a).cloned().unwrap_or_default();
                let (same, other) = (vars.get(slot).cloned(), vars.get(1 - slot.min(1)).cloned());
                let (same, other) = same.zip(other).ok_or_else(|| em.internal("rope partner slots"))?;
                format!("({name}_sw ? {other} : {same})")
            }
            _ => return Err(em.internal(format!("register node {id} with a non-local operation"))),
        })
    }

    fn store(&mut self, em: &mut Emitter<'_>, store: &crate::kir::Store) -> Result<(), CodegenError> {
        let (node, buf, accumulate) = (store.node, store.buf, store.accumulate);
        let map = em.kernel.nodes[node].reg.clone().ok_or_else(|| em.internal("GEMM store of a non-register"))?;
        let vars = self.slot_values(em, node, "store")?;
        let value = em.kernel.nodes[node].value;
        if let Some(perm) = store.col_perm {
            // Pair layout put back in column order: one element store per slot.
            let op = if accumulate { "st_acc" } else { "st" };
            for (slot, v) in vars.iter().enumerate() {
                let c = self.col(em, &map, slot);
                let col = format!("cg::pair_source({c}, {})", super::expr::perm_args(&perm));
                let access = em.access(buf, "m", &col, true);
                em.stmt(format!("cg::{op}({access}, {v});"), value);
            }
            return Ok(());
        }
        let c0 = self.col(em, &map, 0);
        let (access, end) = match store.col_offset {
            // One part of a concatenation: shifted, and bounded by the
            // part's end (a column bound, so the helpers stay branch-free).
            Some(offset) => {
                let end =
                    part_end(em, store).ok_or_else(|| em.internal("a stored concatenation part of run-time width"))?;
                let b = em.buf_w(buf);
                let c = if offset == 0 { c0 } else { format!("{c0} + {offset}") };
                (format!("{b}, {b}_ld, m, {c}, {b}_rows, {end}"), Some(end))
            }
            None => (em.access(buf, "m", &c0, true), None),
        };
        let pair_store = map.stride == 1 && vars.len() == 2 && !accumulate;
        let aligned = match pair_store {
            true => {
                let offset = store.col_offset.unwrap_or(0);
                Self::aligned(em, Access { buf, a: 1, b: offset - map.offset, width: 2 }, end)
            }
            false => None,
        };
        let text = match (vars.as_slice(), accumulate) {
            ([v0, v1], false) => match aligned {
                Some(whole) => format!("cg::st2_aligned<{whole}>({access}, {v0}, {v1});"),
                None => format!("cg::st2({access}, {v0}, {v1});"),
            },
            ([v0, v1], true) => format!("cg::st2_acc({access}, {v0}, {v1});"),
            ([v], false) => format!("cg::st({access}, {v});"),
            ([v], true) => format!("cg::st_acc({access}, {v});"),
            _ => return Err(em.internal("store slots")),
        };
        em.stmt(text, value);
        Ok(())
    }

    /// A pair of a store written into the scratch during the loop (the
    /// staged store when `put_staged`, or the scratch store): slot 1 repeats
    /// slot 0 for a pair operation's single value, which its map ignores.
    fn put(
        &mut self,
        em: &mut Emitter<'_>,
        store: &crate::kir::Store,
        how: Staging,
        cols: OutCols,
        region: usize,
    ) -> Result<(), CodegenError> {
        let vars = self.slot_values(em, store.node, "store")?;
        let (Some(v0), Some(v1)) = (vars.first(), vars.last()) else { return Err(em.internal("put store slots")) };
        let text = if self.subtiled() {
            subtile::put_call(em, subtile::SubStore { buf: store.buf, how, cols, region }, (v0, v1))
        } else {
            put_call(em, store.buf, how, cols, (v0, v1))
        };
        em.stmt(text, em.kernel.nodes[store.node].value);
        Ok(())
    }

    /// Adds the node's slots to partial `idx`.
    fn accumulate(&mut self, em: &mut Emitter<'_>, idx: usize, part: &PartialOut) -> Result<(), CodegenError> {
        let map = em.kernel.nodes[part.node].reg.clone().ok_or_else(|| em.internal("partial of a non-register"))?;
        let vars = self.slot_values(em, part.node, "partial")?;
        let len = em.dim_int(&map.len);
        let name = format!("part{idx}");
        let index = match part.index {
            Some(ix) => Some(em.eval(ix, "m", "0")?),
            None => None,
        };
        let every_col = self.spans_every_tile(&map);
        for (slot, v) in vars.iter().enumerate() {
            let c = self.col(em, &map, slot);
            let cond = match every_col {
                true => "row_ok".to_string(),
                false => format!("row_ok && {c} >= 0 && {c} < {len}"),
            };
            let text = match part.kind {
                PartialKind::RowSum => format!("if ({cond}) {name}[i] += {v};"),
                PartialKind::RowSumSq => format!("if ({cond}) {name}[i] += {v} * {v};"),
                PartialKind::RowMax => format!("if ({cond}) {name}[i] = fmaxf({name}[i], {v});"),
                PartialKind::RowLse => format!("if ({cond}) coda::lse_add({name}_m[i], {name}_s[i], {v});"),
                PartialKind::RowPick => {
                    let ix = index.clone().unwrap_or_else(|| "-1.0f".into());
                    format!("if ({cond} && (float){c} == {ix}) {name}[i] += {v};")
                }
                PartialKind::ColSum => format!("if ({cond}) {name}_j[{slot}] += {v};"),
            };
            em.stmt(text, part.value);
        }
        Ok(())
    }

    fn reductions(&mut self, em: &mut Emitter<'_>) -> Result<(), CodegenError> {
        for (idx, part) in em.kernel.partials.clone().iter().enumerate() {
            let name = format!("part{idx}");
            match part.kind {
                PartialKind::RowLse => {
                    let (bm, bs) = (em.buf_w(part.bufs[0]), em.buf_w(part.bufs[1]));
                    em.stmt(format!("coda::row_reduce_lse(f, {name}_m, {name}_s, smem);"), part.value);
                    em.line(format!("coda::store_row_partial(f, t, {name}_m, {bm});"));
                    em.line(format!("coda::store_row_partial(f, t, {name}_s, {bs});"));
                }
                PartialKind::ColSum => self.col_partial(em, idx, part)?,
                kind => {
                    let op = if kind == PartialKind::RowMax { "MaxOp" } else { "SumOp" };
                    let b = em.buf_w(part.bufs[0]);
                    em.stmt(format!("coda::row_reduce<coda::{op}>(f, {name}, smem);"), part.value);
                    em.line(format!("coda::store_row_partial(f, t, {name}, {b});"));
                }
            }
        }
        Ok(())
    }

    /// Column sums over the CTA's rows, stored at `[own column][tile_m]`:
    /// each tile column by the thread that finished it in the scratch
    /// (`coda::col_reduce_kept`), all of them at once. (Four threads had
    /// stored the whole tile's, 64 dependent 64-bit address computations
    /// each: a fifth of the `w_qkv` dgrad's SASS.) A pair operation's sum
    /// sits at the pair's first column.
    fn col_partial(&mut self, em: &mut Emitter<'_>, idx: usize, part: &PartialOut) -> Result<(), CodegenError> {
        let name = format!("part{idx}");
        let map = em.kernel.nodes[part.node].reg.clone().ok_or_else(|| em.internal("column partial"))?;
        let b = em.buf_w(part.bufs[0]);
        let len = em.dim_int(&map.len);
        em.stmt(format!("coda::col_reduce_kept<coda::SumOp>(f, {name}, smem);"), part.value);
        em.open("for (int lc = f.thread_index(); lc < Frag::BN; lc += Frag::kThreads)");
        if map.stride != 1 {
            em.line("if (lc % 2 != 0) continue;");
        }
        em.line("const int n = t.tile_n0 + lc;");
        self.cols.clear();
        let c = self.col(em, &map, 0);
        let store = format!("{b}[(long long){c} * {b}_ld + t.tile_m_idx] = smem[lc];");
        match self.spans_every_tile(&map) {
            true => em.line(store),
            false => em.line(format!("if ({c} >= 0 && {c} < {len}) {store}")),
        }
        em.close();
        Ok(())
    }
}

/// Whether `word` occurs in `text` as an identifier.
/// The body without `const int` column-index locals nothing reads (a slot's
/// column is computed on demand and may end up unused, e.g. when its value
/// is stored through a pair).
fn drop_unused_indices(body: Vec<String>) -> Vec<String> {
    body.iter()
        .filter(|line| {
            let Some(rest) = line.trim_start().strip_prefix("const int ") else { return true };
            let name = rest.split(' ').next().unwrap_or_default();
            // Read somewhere besides its own declaration.
            let others: String =
                body.iter().filter(|l| !std::ptr::eq(*l, *line)).cloned().collect::<Vec<_>>().join("\n");
            uses(&others, name)
        })
        .cloned()
        .collect()
}

/// Splits the per-pair body into the declarations that depend on the column
/// only (no row index, row predicate, accumulator, scratch or per-row
/// local, directly or through another declaration), in order, and the rest.
fn hoist_column_invariants(body: Vec<String>) -> (Vec<String>, Vec<String>) {
    let mut row_dependent: BTreeSet<String> = ["i", "m", "row_ok", "f", "smem"].map(String::from).into();
    let (mut hoisted, mut rest) = (Vec::new(), Vec::new());
    for line in body {
        let code = line.split("  //").next().unwrap_or_default();
        let declared = code
            .trim_start()
            .strip_prefix("const ")
            .and_then(|d| d.split_once(" = "))
            .and_then(|(lhs, _)| lhs.split_whitespace().nth(1))
            .map(String::from);
        let free = identifiers(code.split_once(" = ").map_or(code, |(_, rhs)| rhs));
        match declared {
            Some(_) if free.iter().all(|id| !row_dependent.contains(id)) => hoisted.push(line),
            _ => {
                row_dependent.extend(declared);
                rest.push(line);
            }
        }
    }
    (hoisted, rest)
}

/// The identifiers `text` reads as variables: not members (`.x`, `p.bias`)
/// and not qualified names (`cg::load`).
fn identifiers(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let qualified = start > 0 && matches!(bytes[start - 1], b'.' | b':');
            let namespace = text[i..].starts_with("::");
            if !qualified && !namespace {
                out.push(text[start..i].to_string());
            }
        } else if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Whether node `id` has the same value at columns `2j` and `2j + 1`: it
/// reads columns only through interleaved rotary frequency tables whose
/// range starts and ends at even columns (pairs never straddle its ends).
fn pair_invariant(em: &Emitter<'_>, id: NodeId, memo: &mut HashMap<NodeId, bool>) -> bool {
    node_flag(em, id, memo, |em, id| {
        let Some(node) = em.kernel.nodes.get(id) else { return Flag::Is(false) };
        if node.reg.is_none() && matches!(node.space, Space::Row | Space::Scalar) {
            return Flag::Is(true);
        }
        match &node.op {
            Op::Rope(spec, coda_ir::RopeTable::Freq) => Flag::Is(
                spec.style == coda_ir::RopeStyle::Interleaved
                    && spec.start.as_const().is_some_and(|s| s % 2 == 0)
                    && spec.end.as_const().is_some_and(|e| e % 2 == 0),
            ),
            Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::Cast(..) | Op::Broadcast(_) if node.reg.is_none() => {
                Flag::All
            }
            _ => Flag::Is(false),
        }
    })
}

/// Whether `id` is a tile value outside the registers that reads tile
/// loads through element-wise operations only (or is such a load, or a
/// constant-offset slice of one): [`Gemm::inline_pair`] evaluates it for
/// both slots of a pair with pair loads.
fn reads_tile_pairs(em: &Emitter<'_>, id: NodeId, memo: &mut HashMap<NodeId, bool>) -> bool {
    node_flag(em, id, memo, |em, id| {
        let Some(node) = em.kernel.nodes.get(id) else { return Flag::Is(false) };
        if node.reg.is_some() || node.space != Space::Tile {
            return Flag::Is(false);
        }
        if sliced_tile_load(em, id).is_some() {
            return Flag::Is(true);
        }
        match &node.op {
            Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::Cast(..) => Flag::Any,
            _ => Flag::Is(false),
        }
    })
}

/// What a node contributes to a property of node DAGs ([`node_flag`]).
enum Flag {
    /// The node has it or not, whatever its operands.
    Is(bool),
    /// The node has it when one of its operands has it.
    Any,
    /// The node has it when all its operands have it.
    All,
}

/// A property of `id` defined over its operands by `rule`, with the
/// answers for every node looked at kept in `memo`. The walk keeps its own
/// stack (element-wise chains are as long as the program) and asks about
/// each node once per kernel, not once per reader.
fn node_flag(
    em: &Emitter<'_>,
    id: NodeId,
    memo: &mut HashMap<NodeId, bool>,
    rule: impl Fn(&Emitter<'_>, NodeId) -> Flag,
) -> bool {
    let operands = |id: NodeId| em.kernel.nodes.get(id).map(|n| n.op.operands()).unwrap_or_default();
    let mut stack = vec![(id, false)];
    while let Some((id, operands_done)) = stack.pop() {
        if memo.contains_key(&id) {
            continue;
        }
        let flag = rule(em, id);
        if let Flag::Is(answer) = flag {
            memo.insert(id, answer);
            continue;
        }
        if !operands_done {
            stack.push((id, true));
            stack.extend(operands(id).into_iter().filter(|o| !memo.contains_key(o)).map(|o| (o, false)));
            continue;
        }
        let mut answers = operands(id).into_iter().map(|o| memo.get(&o).copied().unwrap_or(false));
        let answer = match flag {
            Flag::Any => answers.any(|a| a),
            _ => answers.all(|a| a),
        };
        memo.insert(id, answer);
    }
    memo.get(&id).copied().unwrap_or(false)
}

/// Where a tile value reads a buffer: column `c` of the value is column
/// `start + step * c` of `buf`, loaded by node `load`.
#[derive(Debug, Clone, Copy)]
struct TileCols {
    load: NodeId,
    buf: usize,
    start: i64,
    step: i64,
}

/// A tile load, directly or through slices with constant starts, whose
/// composed step is 1 (a column range) or 2 (the even or odd columns of a
/// tensor in pair layout).
fn sliced_tile_load(em: &Emitter<'_>, id: NodeId) -> Option<TileCols> {
    // The slices from `id` down to the load, outermost first (a loop: a
    // chain of slices is as long as the program).
    let mut slices = Vec::new();
    let mut at = id;
    let (load, buf) = loop {
        let node = em.kernel.nodes.get(at)?;
        if node.reg.is_some() || node.space != Space::Tile {
            return None;
        }
        match &node.op {
            Op::Load(buf) => break (at, *buf),
            Op::Slice { arg, start, step } => {
                slices.push((start.as_const(), *step));
                at = *arg;
            }
            _ => return None,
        }
    };
    let mut cols = TileCols { load, buf, start: 0, step: 1 };
    for (start, step) in slices.into_iter().rev() {
        cols = TileCols { start: cols.start + cols.step * start?, step: cols.step * step, ..cols };
        if !matches!(cols.step, 1 | 2) {
            return None;
        }
    }
    Some(cols)
}

pub(crate) fn uses(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        !ident(before) && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The column-vector load under `op`'s broadcasts, and its buffer.
fn column_vector_load(em: &Emitter<'_>, mut op: NodeId) -> Option<(NodeId, usize)> {
    while let Op::Broadcast(a) = em.kernel.nodes[op].op {
        op = a;
    }
    match em.kernel.nodes[op].op {
        Op::Load(buf) if em.kernel.nodes[op].space == Space::Col => Some((op, buf)),
        _ => None,
    }
}

/// A unary function of a GEMM accumulator value: the exponential family
/// uses the SFU forms of `coda_common.cuh` (`ex2.approx`, `rcp.approx`:
/// relative error about 1e-6, far inside the 5e-3 tolerance of any output
/// that depends on a matmul, and 5–10× fewer instructions than `expf` and
/// an IEEE division, which made SwiGLU the largest epilogue cost on the
/// H100). Every other function is [`unary_reg`]'s.
fn unary_epilogue(op: UnaryOp, a: &str) -> String {
    match op {
        UnaryOp::Exp => format!("coda::exp_fast({a})"),
        UnaryOp::Sigmoid => format!("coda::sigmoid({a})"),
        UnaryOp::Silu => format!("coda::silu({a})"),
        _ => unary_reg(op, a),
    }
}

/// A unary function of a value (no rotary angle special case).
pub(super) fn unary_reg(op: UnaryOp, a: &str) -> String {
    match op {
        UnaryOp::Neg => format!("(-{a})"),
        UnaryOp::Exp => format!("expf({a})"),
        UnaryOp::Log => format!("logf({a})"),
        UnaryOp::Sqrt => format!("sqrtf({a})"),
        UnaryOp::Rsqrt => format!("cg::rsqrt({a})"),
        UnaryOp::Tanh => format!("tanhf({a})"),
        UnaryOp::Sigmoid => format!("cg::sigmoid({a})"),
        UnaryOp::Relu => format!("cg::relu({a})"),
        UnaryOp::GeluTanh => format!("cg::gelu_tanh({a})"),
        UnaryOp::GeluErf => format!("cg::gelu_erf({a})"),
        UnaryOp::Silu => format!("cg::silu({a})"),
        UnaryOp::Softplus => format!("cg::softplus({a})"),
        UnaryOp::Abs => format!("fabsf({a})"),
        UnaryOp::Sin => format!("sinf({a})"),
        UnaryOp::Cos => format!("cosf({a})"),
    }
}
