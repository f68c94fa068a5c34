//! Row kernels.
//!
//! A row kernel runs a CTA per row (256 threads, or the count that
//! `kir::row_cta_threads` balances its columns with, striding over
//! columns) or, when it stores only per-row values, a warp per row (8 rows
//! per CTA of 256).
//! Per-row values (whole-row reductions, finished partials and what depends
//! on them) are computed first, identical in every thread; then each stored
//! tile is written by a column loop. A row kernel with grid reductions
//! then writes each CTA's partials, takes a ticket, and in the CTA that
//! arrives last reduces the partials and evaluates and stores its scalar
//! tail (see [`crate::kir::GridSpec`]). Column-reduction kernels are in
//! [`super::colk`].

use super::code::Code;
use super::expr::chunk_width;
use super::expr::Emitter;
use super::ops::perm_args;
use super::row_passes;
use crate::error::CodegenError;
use crate::kir::{row_kernel_threads, whole_cta, BufId, GridSpec, Op, Space, Store, CTA_THREADS};
use coda_ir::{Dim, ReduceOp};

/// The `__global__` function of a row kernel. A CTA-per-row kernel is
/// written twice: first to survey the row streams it loads, then with the
/// ones worth it staged in shared memory ([`Emitter::stage_rows`]).
pub(crate) fn emit_row(
    em: &mut Emitter<'_>,
    rows: &Dim,
    tpr: u32,
    grid: Option<&GridSpec>,
    entry: &str,
) -> Result<String, CodegenError> {
    let mut streams = Vec::new();
    if whole_cta(tpr) {
        let mut probe = Emitter::new(em.ir, em.kernel, em.block, em.source);
        probe.coherent = em.coherent.clone();
        write_row(&mut probe, rows, (tpr, grid), &[])?;
        streams = probe.survey().choose(&probe);
    }
    write_row(em, rows, (tpr, grid), &streams)?;
    Ok(wrap(em, entry, row_kernel_threads(tpr)))
}

/// The body of a row kernel, with `streams` (buffer, width) staged.
fn write_row(
    em: &mut Emitter<'_>,
    rows: &Dim,
    (tpr, grid): (u32, Option<&GridSpec>),
    streams: &[(BufId, i64)],
) -> Result<(), CodegenError> {
    let threads = row_kernel_threads(tpr);
    // With grid reductions, the warp-per-row body sits inside `if (m < rows)`
    // (no early return: every thread reaches the CTA barriers after it).
    let guarded = grid.is_some() && tpr < threads;
    em.set_indent(if guarded { 2 } else { 1 });
    em.stage_rows(streams, threads);
    let staging = em.take_lines();
    let tail = em.kernel.tail_nodes();
    if whole_cta(tpr) && row_streams(em) <= UNROLLED_STREAMS {
        em.unroll_columns = Some(4);
    }
    let body = row_body(em, tpr, grid, &tail);
    em.unroll_columns = None;
    let body = body?;
    em.set_indent(1);
    if let Some(g) = grid {
        let slots = g.parts.len() as u32 * g.rows_per_cta;
        em.line(format!("__shared__ float gred[{slots}];  // [grid reduction][row of the CTA]"));
    }
    if tpr < threads {
        let rows_expr = em.dim_int(rows);
        em.line(format!("const int m = (int)blockIdx.x * {} + (int)threadIdx.x / {tpr};", threads / tpr));
        if guarded {
            em.line(format!("if (m < {rows_expr}) {{"));
            em.extend(body);
            em.line("}");
        } else {
            em.line(format!("if (m >= {rows_expr}) return;"));
            em.extend(body);
        }
    } else {
        if em.kernel.reads_row_index() || !streams.is_empty() {
            em.line("const int m = (int)blockIdx.x;");
        }
        em.extend(staging);
        em.extend(body);
    }
    if let Some(g) = grid {
        grid_tail(em, rows, (g, threads), &tail)?;
    }
    Ok(())
}

/// A one-row kernel whose columns are independent (`threads_per_row == 1`,
/// see `kir::KernelKind::Row`): thread `k` of the grid computes column `k`
/// of every column store at least `k + 1` wide; per-row values are
/// computed by every thread and stored by the grid's first thread.
pub(crate) fn emit_row_columns(em: &mut Emitter<'_>, entry: &str) -> Result<String, CodegenError> {
    let threads = CTA_THREADS;
    em.set_indent(1);
    em.line(format!("const int k = (int)blockIdx.x * {threads} + (int)threadIdx.x;"));
    for (id, node) in em.kernel.nodes.clone().iter().enumerate() {
        if node.reg.is_none() && matches!(node.space, Space::Scalar | Space::Row) {
            em.eval(id, "0", "0")?;
        }
    }
    let stores = em.kernel.stores.clone();
    let narrow: Vec<&Store> = stores.iter().filter(|s| is_narrow(em, s)).collect();
    for s in narrow {
        let v = em.eval(s.node, "0", "0")?;
        let store = store_call(em, s, "0", "0", &v);
        em.stmt(Code::of(format!("if (k == 0) {store}"), [&store]).reading(&["k"]), em.kernel.nodes[s.node].value);
    }
    for (w, same_width) in column_stores_by_width(em, &stores) {
        let we = em.dim_int(&w);
        em.open(format!("if (k < {we})"));
        for s in same_width {
            let v = stored_value(em, s, "0", "k")?;
            let store = store_call(em, s, "0", "k", &v);
            em.stmt(store, em.kernel.nodes[s.node].value);
        }
        em.close();
    }
    Ok(wrap(em, entry, threads))
}

/// The columns a column-parallel one-row kernel covers: the width of its
/// column stores, the widest when they are of several constant widths
/// (`kir` allows several widths only when they are all constants).
pub(crate) fn store_width(em: &Emitter<'_>) -> Option<Dim> {
    let widths: Vec<Dim> = column_stores_by_width(em, &em.kernel.stores).into_iter().map(|(w, _)| w).collect();
    let constants: Option<Vec<i64>> = widths.iter().map(Dim::as_const).collect();
    match constants.and_then(|c| c.into_iter().max()) {
        Some(widest) => Some(Dim::constant(widest)),
        None => widths.first().cloned(),
    }
}

/// The column (full-row-width) stores of a row kernel grouped by width, in
/// the order the widths first appear.
fn column_stores_by_width<'s>(em: &Emitter<'_>, stores: &'s [Store]) -> Vec<(Dim, Vec<&'s Store>)> {
    let mut groups: Vec<(Dim, Vec<&Store>)> = Vec::new();
    for s in stores.iter().filter(|s| !is_narrow(em, s)) {
        let w = em.block.ty(em.kernel.nodes[s.node].value).shape.cols.clone();
        match groups.iter_mut().find(|(g, _)| *g == w) {
            Some((_, group)) => group.push(s),
            None => groups.push((w, vec![s])),
        }
    }
    groups
}

/// The row prelude of a Hopper GEMM (see `kir::RowPrelude`): the row
/// kernel's `Params` struct, its body as a device function computing row
/// `m` with one warp, and the `Pre` struct the mainloop takes (named
/// `pre`), whose `ready` is the counter buffer.
pub(crate) fn emit_prelude(em: &mut Emitter<'_>, ready: BufId, pre: &str) -> Result<String, CodegenError> {
    em.set_indent(1);
    let tail = em.kernel.tail_nodes();
    // A warp walks a whole row, so without several loads in flight per lane
    // a row costs a memory latency per 32 elements.
    em.unroll_columns = Some(8);
    let body = row_body(em, 32, None, &tail);
    em.unroll_columns = None;
    let body = body?.join("\n");
    let ready = em.buf_w(ready);
    let params = format!("Params_{}", em.kernel.name);
    let func = format!("row_{}", em.kernel.name);
    let red = match em.block_reductions {
        true => "    float* const red = nullptr;  // a warp per row: no shared memory\n",
        false => "",
    };
    Ok(format!(
        "struct {params} {{\n{fields}}};\n\n\
         // Row m of the row kernel, computed by one warp (its lanes are threadIdx.x % 32).\n\
         __device__ __forceinline__ void {func}(const {params}& p, const int m) {{\n{red}{body}\n}}\n\n\
         struct {pre} {{\n    static constexpr bool kActive = true;\n    typedef {params} Params;\n    \
         static __device__ __forceinline__ void row(const Params& p, int m) {{ {func}(p, m); }}\n    \
         static __device__ __forceinline__ int* ready(const Params& p) {{ return {ready}; }}\n}};\n\n",
        fields = em.params.c_fields("    "),
    ))
}

/// The per-row part of a row kernel for row `m` with `tpr` threads per
/// row: per-row values, narrow stores, the column loops of the wide
/// stores, and with grid reductions each row's values into `gred`.
fn row_body(
    em: &mut Emitter<'_>,
    tpr: u32,
    grid: Option<&GridSpec>,
    tail: &[bool],
) -> Result<Vec<String>, CodegenError> {
    em.push_scope();
    if whole_cta(tpr) {
        em.row_angle_tables(tpr)?;
    }
    em.coop = tpr;
    // In node order, so that a staged value finds the per-row values it
    // reads computed, and a per-row value the staged values it reads.
    for (id, node) in em.kernel.nodes.clone().iter().enumerate() {
        if tail[id] || node.reg.is_some() {
            continue;
        }
        if whole_cta(tpr) {
            row_passes::stage(em, (id, node), tpr, tail)?;
            em.coop = tpr;
        }
        if matches!(node.space, Space::Scalar | Space::Row) {
            em.eval(id, "m", "0")?;
        }
    }
    em.coop = 1;
    let stores = em.kernel.stores.clone();
    let guard = if tpr > 1 { format!("if (threadIdx.x % {tpr} == 0) ") } else { String::new() };
    let narrow: Vec<&Store> = stores.iter().filter(|s| is_narrow(em, s) && !tail[s.node]).collect();
    for s in narrow {
        let v = em.eval(s.node, "m", "0")?;
        let m = if em.kernel.nodes[s.node].space == Space::Scalar { "0" } else { "m" };
        let store = store_call(em, s, m, "0", &v);
        em.stmt(Code::of(format!("{guard}{store}"), [&store]), em.kernel.nodes[s.node].value);
    }
    for (w, same_width) in column_stores_by_width(em, &stores) {
        for piece in loop_pieces(em, &w) {
            let (start, end) = match piece {
                Some((0, hi)) => (String::new(), hi.to_string()),
                Some((lo, hi)) => (format!("{lo} + "), hi.to_string()),
                None => (String::new(), em.dim_int(&w)),
            };
            em.k_range = piece;
            let bounds = piece.or_else(|| w.as_const().map(|hi| (0, hi)));
            let streams = row_streams(em);
            let width = bounds.and_then(|(lo, hi)| chunk_width(lo, hi, tpr, streams)).filter(|_| whole_cta(tpr));
            if let Some(width) = width {
                chunked_store_loop(em, &same_width, (&start, &end), (tpr, width))?;
            } else {
                em.open_column_loop(format!("for (int k = {start}cg::lane<{tpr}>(); k < {end}; k += {tpr})"));
                for s in &same_width {
                    let v = stored_value(em, s, "m", "k")?;
                    let store = store_call(em, s, store_row(em, s), "k", &v);
                    em.stmt(store, em.kernel.nodes[s.node].value);
                }
                em.close();
            }
            em.k_range = None;
        }
    }
    if let Some(g) = grid {
        grid_row_values(em, g, tpr)?;
    }
    em.pop_scope();
    Ok(em.take_lines())
}

/// A column loop of stores in chunks ([`chunk`]): each store's elements
/// into an array, stored whole after the element loop.
fn chunked_store_loop(
    em: &mut Emitter<'_>,
    stores: &[&Store],
    bounds: (&str, &str),
    (tpr, width): (u32, i64),
) -> Result<(), CodegenError> {
    let arrays: Vec<String> = stores.iter().map(|s| em.local_for(em.kernel.nodes[s.node].value) + "_o").collect();
    let chunks = em.open_chunks("k", bounds, (tpr, width), &arrays);
    for (s, array) in stores.iter().zip(&arrays) {
        let v = stored_value(em, s, "m", "k")?;
        let elem = &chunks.elem;
        em.stmt(
            Code::of(format!("{array}[{elem}] = {v};"), [&v]).reading(&[array, elem]),
            em.kernel.nodes[s.node].value,
        );
    }
    em.close_chunk_elements();
    for (s, array) in stores.iter().zip(&arrays) {
        let at = (store_row(em, s), chunks.start.as_str());
        let store = store_with(em, s, at, &Code::local(array), ("st_chunk", "st_chunk_acc"));
        em.stmt(store, em.kernel.nodes[s.node].value);
    }
    em.close();
    Ok(())
}

/// A CTA-per-row kernel's column loops are unrolled 4 times
/// ([`unrolled`]) when it streams at most this many tensors along its rows
/// ([`row_streams`]): each thread then keeps several loads in flight,
/// which is what such a kernel waits on. With more streams the unrolled
/// loop's registers cost occupancy. On the H100 (M = 8192), kernels of 4
/// to 6 streams gained (Llama-3 backward 0.297 → 0.237 and 0.179 → 0.143
/// ms, parallel_block 0.214 → 0.167 and 0.121 → 0.105 ms, gemma_mlp
/// 0.066 → 0.052 ms) and two of 7 and 8 lost (parallel_block 0.475 → 0.503
/// ms with 40 registers, Llama-3 0.270 → 0.336 ms with 42 instead of 32).
const UNROLLED_STREAMS: usize = 6;

/// The tensors a row kernel streams along its rows: the buffers it loads
/// element by element and those it stores whole rows of.
fn row_streams(em: &Emitter<'_>) -> usize {
    let loads: std::collections::BTreeSet<BufId> = em
        .kernel
        .nodes
        .iter()
        .filter(|n| n.space == Space::Tile)
        .filter_map(|n| match n.op {
            Op::Load(b) => Some(b),
            _ => None,
        })
        .collect();
    loads.len() + em.kernel.stores.iter().filter(|s| !is_narrow(em, s)).count()
}

// Row kernels unroll their plain column loops (`Emitter::unroll_columns`),
// so that each thread has several loads in flight instead of one memory
// latency per iteration: row preludes (a warp per row) by 8, CTA-per-row
// kernels with few row streams by 4. Measured on the H100, in the
// 256-thread row kernels of the Llama-3 backward: unrolling every kernel by
// 4 made two kernels faster (0.33 → 0.26 and 0.78 → 0.73 ms) and the
// SwiGLU backward (then a row kernel) slower (1.63 → 1.85 ms); by 8 made
// ptxas spill.

/// The pieces `[lo, hi)` a column loop of constant width `w` is split into:
/// one per stretch between the constant offsets of the kernel's column
/// concatenations (a gradient's zero padding and its slice, the two halves
/// of a gated activation's gradient), so that in each piece a
/// concatenation is one of its parts, not a select between all of them
/// (the SwiGLU backward computed both halves' math and loads for every
/// column). `[None]` (one loop over the whole width) when there is nothing
/// to split.
fn loop_pieces(em: &Emitter<'_>, w: &Dim) -> Vec<Option<(i64, i64)>> {
    let Some(width) = w.as_const() else { return vec![None] };
    let mut cuts: Vec<i64> = em
        .kernel
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Concat(parts) => Some(parts.iter().filter_map(|(_, off)| off.as_const()).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .filter(|&c| c > 0 && c < width)
        .collect();
    if cuts.is_empty() {
        return vec![None];
    }
    cuts.sort_unstable();
    cuts.dedup();
    let bounds: Vec<i64> = std::iter::once(0).chain(cuts).chain(std::iter::once(width)).collect();
    bounds.windows(2).map(|b| Some((b[0], b[1]))).collect()
}

/// Each row's value of every grid reduction into `gred` (one lane per row).
fn grid_row_values(em: &mut Emitter<'_>, g: &GridSpec, tpr: u32) -> Result<(), CodegenError> {
    let slot = if g.rows_per_cta == 1 { String::new() } else { format!(" + (int)threadIdx.x / {tpr}") };
    for (j, (node, _)) in g.parts.iter().enumerate() {
        let Op::GridReduce { arg, .. } = em.kernel.nodes[*node].op else {
            return Err(em.internal("grid partial of a node that is not a grid reduction"));
        };
        let x = em.eval(arg, "m", "0")?;
        let base = j as u32 * g.rows_per_cta;
        let lane = if tpr > 1 { format!("if (cg::lane<{tpr}>() == 0) ") } else { String::new() };
        em.stmt(
            Code::of(format!("{lane}gred[{base}{slot}] = {x};"), [&x]).reading(&["gred"]),
            em.kernel.nodes[*node].value,
        );
    }
    Ok(())
}

/// The end of a row kernel with grid reductions: the CTA's partials, the
/// ticket, and in the last CTA the reductions of the partials, the tail
/// nodes, the tail stores and the counter reset.
fn grid_tail(
    em: &mut Emitter<'_>,
    rows: &Dim,
    (g, threads): (&GridSpec, u32),
    tail: &[bool],
) -> Result<(), CodegenError> {
    let r = g.rows_per_cta;
    em.line("__syncthreads();");
    let n = if r == 1 {
        "1".to_string()
    } else {
        let rows_expr = em.dim_int(rows);
        em.line(format!("const int gn = min({r}, {rows_expr} - (int)blockIdx.x * {r});  // rows of this CTA"));
        "gn".to_string()
    };
    em.open("if (threadIdx.x == 0)");
    for (j, (node, buf)) in g.parts.iter().enumerate() {
        let (value, f) = grid_op(em, *node, "cta_sum", "cta_max")?;
        let access = em.access(*buf, &Code::lit("(int)blockIdx.x"), &Code::lit("0"), true);
        let text = format!("cg::st({access}, cg::{f}(gred + {}, {n}));", j as u32 * r);
        em.stmt(Code::of(text, [&access, &Code::index(&n)]).reading(&["gred"]), value);
    }
    em.close();
    let counter = em.buf_w(g.counter);
    em.line(format!("if (!cg::grid_last({counter})) return;"));
    em.coop = threads;
    for (node, buf) in &g.parts {
        let (value, f) = grid_op(em, *node, "grid_sum", "grid_max")?;
        let b = em.buf(*buf);
        let name = em.local_for(value);
        let red = em.reduction_scratch(threads);
        let red = Code::lit(format!("cg::{f}<{threads}>({b}, {b}_rows, {red})")).reading(&[red]);
        em.define("float", &name, red, Some(value));
        em.bind(*node, "0", "0", Code::local(name));
    }
    for s in em.kernel.stores.clone().iter().filter(|s| tail[s.node]) {
        let v = em.eval(s.node, "0", "0")?;
        let store = store_call(em, s, "0", "0", &v);
        em.stmt(Code::of(format!("if (threadIdx.x == 0) {store}"), [&store]), em.kernel.nodes[s.node].value);
    }
    em.coop = 1;
    em.line(format!("if (threadIdx.x == 0) *{counter} = 0;  // ready for the next launch"));
    Ok(())
}

/// The IR value of grid reduction `node` and the helper for its op.
fn grid_op(
    em: &Emitter<'_>,
    node: usize,
    sum: &'static str,
    max: &'static str,
) -> Result<(coda_ir::Value, &'static str), CodegenError> {
    let n = &em.kernel.nodes[node];
    match n.op {
        Op::GridReduce { op: ReduceOp::Sum, .. } => Ok((n.value, sum)),
        Op::GridReduce { op: ReduceOp::Max, .. } => Ok((n.value, max)),
        _ => Err(em.internal("a grid reduction that is neither a sum nor a maximum")),
    }
}

/// Whether a store writes one value per row (or a scalar).
fn is_narrow(em: &Emitter<'_>, s: &Store) -> bool {
    matches!(em.kernel.nodes[s.node].space, Space::Scalar | Space::Row)
}

/// The value store `s` writes at column `k`. A store that puts a pair
/// layout back in column order (`Store::col_perm`) reads column `k` of
/// the result from its pair position, so the store itself stays in column
/// order and can be chunked.
pub(super) fn stored_value(em: &mut Emitter<'_>, s: &Store, m: &str, k: &str) -> Result<Code, CodegenError> {
    let Some(perm) = s.col_perm else { return em.eval(s.node, m, k) };
    let at = Code::of(format!("cg::pair_position({k}, {})", perm_args(&perm)), [&Code::index(k)]);
    let at = em.index("kq", at);
    em.eval(s.node, m, &at)
}

pub(super) fn store_call(em: &mut Emitter<'_>, s: &Store, m: &str, k: &str, v: &Code) -> Code {
    store_with(em, s, (m, k), v, ("st", "st_acc"))
}

/// The call of helper `plain` (or `acc` for an accumulating store) storing
/// `v` for store `s` at row `m`, column `k` (shifted by the store's column
/// offset).
fn store_with(em: &mut Emitter<'_>, s: &Store, (m, k): (&str, &str), v: &Code, (plain, acc): (&str, &str)) -> Code {
    let k = match s.col_offset {
        Some(offset) => Code::of(format!("{k} + {offset}"), [&Code::index(k)]),
        None => Code::index(k),
    };
    let access = em.access(s.buf, &Code::index(m), &k, true);
    let f = if s.accumulate { acc } else { plain };
    Code::of(format!("cg::{f}({access}, {v});"), [&access, v])
}

/// The row index of a column store in a row kernel: `0` for a per-column
/// value, `m` otherwise.
fn store_row(em: &Emitter<'_>, s: &Store) -> &'static str {
    if em.kernel.nodes[s.node].space == Space::Col {
        "0"
    } else {
        "m"
    }
}

/// The params struct and the entry around the body written so far.
pub(super) fn wrap(em: &mut Emitter<'_>, entry: &str, threads: u32) -> String {
    let body = em.take_lines().join("\n");
    let params = format!("Params_{}", em.kernel.name);
    // A column tile exchanges one value per thread (two for log-sum-exp),
    // a row reduction one per warp.
    let per_thread = if em.column_tile { 32 } else { 1 };
    let red = match em.block_reductions {
        true => format!("    __shared__ float red[{}];\n", 2 * threads / 32 * per_thread),
        false => String::new(),
    };
    format!(
        "struct {params} {{\n{fields}}};\n\nextern \"C\" __global__ void __launch_bounds__({threads})\n\
         {entry}({params} p) {{\n{red}{body}\n}}\n",
        fields = em.params.c_fields("    "),
    )
}
