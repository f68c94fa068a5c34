//! CUDA emission: one self-contained `.cu` file per kernel and the block's
//! manifest entry.
//!
//! A file is a header comment (file name, the source file name as given,
//! the entry point and what it computes), the template headers it needs
//! verbatim in include order (`coda_common.cuh` and `coda_epilogue.cuh`;
//! `coda_gemm_sm80.cuh` in a GEMM, `coda_gemm_sm90.cuh` in a Hopper one:
//! [`headers_for`], decided by the kernel IR), the generated-code helpers
//! (`prelude.cuh` of this crate), and the kernel: an `Epi_<k>` functor plus
//! an `extern "C"` entry instantiating a mainloop for GEMM kernels, a
//! `Params_<k>` struct plus an `extern "C"` entry for the others.

mod code;
mod colk;
mod expr;
mod gemm;
mod names;
mod ops;
mod params;
mod row_passes;
mod rowk;

use crate::config::Mainloop;
use crate::error::CodegenError;
use crate::kir::{row_kernel_threads, BlockIr, Kernel, KernelKind, Layout, PartialKind, CTA_THREADS};
use crate::manifest::{BlockManifest, BufferSpec, KernelSpec, StructSpec, TensorMapSpec};
use crate::symexpr::SymExpr;
use crate::KernelSource;
use coda_diagnostics::SourceFile;
use coda_ir::{Block, BlockKind, Dim};
use expr::Emitter;

/// The template headers, in include order: (file name, text). A kernel
/// embeds those it needs ([`headers_for`]).
pub const HEADERS: [(&str, &str); 4] = [
    (COMMON_HEADER, include_str!("../../cuda/coda_common.cuh")),
    ("coda_epilogue.cuh", include_str!("../../cuda/coda_epilogue.cuh")),
    (SM80_HEADER, include_str!("../../cuda/coda_gemm_sm80.cuh")),
    (SM90_HEADER, include_str!("../../cuda/coda_gemm_sm90.cuh")),
];

/// The loads, stores and packing every kernel uses.
const COMMON_HEADER: &str = "coda_common.cuh";
/// The portable mainloop's header name.
const SM80_HEADER: &str = "coda_gemm_sm80.cuh";
/// The Hopper mainloop's header name.
const SM90_HEADER: &str = "coda_gemm_sm90.cuh";

/// The generated-code helpers embedded after the template headers.
pub const PRELUDE: &str = include_str!("../prelude.cuh");

/// Emits every kernel of a block and its manifest entry.
pub(crate) fn emit_block(
    ir: &BlockIr,
    block: &Block,
    source: &SourceFile,
) -> Result<(Vec<KernelSource>, BlockManifest), CodegenError> {
    let mut sources = Vec::new();
    let mut specs = Vec::new();
    for kernel in &ir.kernels {
        let (src, spec) = emit_kernel(ir, kernel, block, source)?;
        sources.push(src);
        specs.push(spec);
    }
    let manifest = BlockManifest {
        block: ir.name.clone(),
        kind: if ir.kind == BlockKind::Kernel { "kernel".into() } else { "block".into() },
        dims: ir.dims.clone(),
        buffers: ir.buffers.iter().map(|b| buffer_spec(ir, b)).collect(),
        kernels: specs,
    };
    Ok((sources, manifest))
}

fn buffer_spec(ir: &BlockIr, b: &crate::kir::Buffer) -> BufferSpec {
    BufferSpec {
        name: b.name.clone(),
        role: b.role.name().into(),
        dtype: b.dtype.name().into(),
        rank: b.rank,
        shape: [b.rows.to_string(), b.cols.to_string()],
        ld: b.ld.as_ref().map(ToString::to_string),
        accumulate: b.accumulate,
        staging_of: b.staging_of.map(|s| ir.buffers[s].name.clone()),
    }
}

/// What a kernel launch looks like besides its code.
struct Launch {
    kind: &'static str,
    config: Option<String>,
    grid: SymExpr,
    threads: u32,
    smem: u32,
    persistent: bool,
    tensor_maps: Vec<TensorMapSpec>,
    args: Vec<StructSpec>,
}

fn emit_kernel(
    ir: &BlockIr,
    kernel: &Kernel,
    block: &Block,
    source: &SourceFile,
) -> Result<(KernelSource, KernelSpec), CodegenError> {
    let entry = format!("coda_{}_{}", ir.name, kernel.name);
    let file = format!("{}_{}.cu", ir.name, kernel.name);
    let mut em = Emitter::new(ir, kernel, block, source);
    let (code, launch) = match &kernel.kind {
        KernelKind::Gemm(spec) => {
            let prelude = match &spec.prelude {
                Some(p) => Some(prelude_code(ir, p, block, source, &kernel.name, &mut em)?),
                None => None,
            };
            let pre = prelude.as_ref().map(|p| p.pre.as_str());
            let (code, gemm_args, col_vecs) = gemm::emit(&mut em, spec, &entry, pre)?;
            let code = match &prelude {
                Some(p) => format!("{}{code}", p.code),
                None => code,
            };
            let (bm, bn, _) = spec.config.tile();
            let grid = SymExpr::from(&spec.m).ceil_div(bm).times(SymExpr::from(&spec.n).ceil_div(bn));
            let mut args = gemm_args;
            args.push(em.params.spec("Params"));
            args.extend(prelude.map(|p| p.params));
            let sm90 = spec.config.is_sm90();
            let launch = Launch {
                kind: "gemm",
                config: Some(spec.config.name().into()),
                grid,
                threads: spec.config.threads(),
                smem: spec.config.smem_bytes_with(col_vecs),
                persistent: sm90,
                tensor_maps: if sm90 { tensor_maps(ir, spec) } else { Vec::new() },
                args,
            };
            (code, launch)
        }
        KernelKind::Row { threads_per_row: 1, .. } => {
            let code = rowk::emit_row_columns(&mut em, &entry)?;
            let width =
                rowk::store_width(&em).ok_or_else(|| em.internal("a column-parallel row kernel without columns"))?;
            let grid = SymExpr::from(&width).ceil_div(i64::from(CTA_THREADS));
            (code, simple_launch(&em, "row", grid))
        }
        KernelKind::Row { rows, threads_per_row, grid } => {
            let code = rowk::emit_row(&mut em, rows, *threads_per_row, grid.as_ref(), &entry)?;
            let threads = row_kernel_threads(*threads_per_row);
            let grid = SymExpr::from(rows).ceil_div(i64::from(threads / threads_per_row));
            (code, Launch { threads, ..simple_launch(&em, "row", grid) })
        }
        KernelKind::Col { cols } => {
            let code = colk::emit_col(&mut em, &entry)?;
            let tiles = SymExpr::from(cols).ceil_div(i64::from(colk::COL_TILE));
            let grid = match em.col_groups {
                1 => tiles,
                groups => tiles.times(SymExpr::from(&Dim::constant(groups as i64))),
            };
            (code, Launch { threads: colk::COL_THREADS, ..simple_launch(&em, "colreduce", grid) })
        }
    };
    let globals: String = em.globals.values().map(|d| format!("{d}\n")).collect();
    let code = format!("{globals}{code}");
    let summary = summary(ir, kernel, block);
    let mainloop = match &kernel.kind {
        KernelKind::Gemm(spec) => Some(spec.config.spec().mainloop),
        _ => None,
    };
    let head = FileHead { file: &file, entry: &entry, kind: launch.kind, summary: &summary };
    let text = file_text(&head, source, ir, mainloop, &code);
    let spec = KernelSpec {
        name: kernel.name.clone(),
        kind: launch.kind.into(),
        entry: entry.clone(),
        file: file.clone(),
        summary,
        config: launch.config,
        grid: [launch.grid.to_string(), "1".into(), "1".into()],
        block: [launch.threads, 1, 1],
        smem_bytes: launch.smem,
        persistent: launch.persistent,
        tensor_maps: launch.tensor_maps,
        args: launch.args,
    };
    Ok((KernelSource { name: entry, file_name: file, source: text }, spec))
}

/// The emitted row prelude of a GEMM kernel.
struct PreludeCode {
    /// The `Params` struct, the row function and the `Pre` struct.
    code: String,
    /// The `Pre` struct's name.
    pre: String,
    /// The manifest entry of the `Params` struct (the entry's last argument).
    params: StructSpec,
}

/// Emits the row prelude `p` of GEMM kernel `gemm`, whose emitter `em`
/// then reads the prelude's outputs through L2 (`Emitter::coherent`: other
/// CTAs write them while the kernel runs, so the read-only path is out)
/// and emits the prelude's file-scope declarations too.
fn prelude_code(
    ir: &BlockIr,
    p: &crate::kir::RowPrelude,
    block: &Block,
    source: &SourceFile,
    gemm: &str,
    em: &mut Emitter<'_>,
) -> Result<PreludeCode, CodegenError> {
    let mut sub = Emitter::new(ir, &p.kernel, block, source);
    let pre = format!("Pre_{gemm}");
    let code = rowk::emit_prelude(&mut sub, p.ready, &pre)?;
    em.coherent.extend(p.kernel.stores.iter().map(|s| s.buf));
    em.globals.extend(sub.globals);
    Ok(PreludeCode { code, pre, params: sub.params.spec(&format!("Params_{}", p.kernel.name)) })
}

fn simple_launch(em: &Emitter<'_>, kind: &'static str, grid: SymExpr) -> Launch {
    Launch {
        kind,
        config: None,
        grid,
        threads: CTA_THREADS,
        smem: 0,
        persistent: false,
        tensor_maps: Vec::new(),
        args: vec![em.params.spec(&format!("Params_{}", em.kernel.name))],
    }
}

/// The tensor maps of a Hopper GEMM: A, B, and B's pair-order view when its
/// rows are read in pair order (`coda::Sm90PairRows`: rows `[start, end)`
/// as `{k, half, i, group}`, in boxes of [`crate::config::pair_box_rows`]
/// pair-order rows).
fn tensor_maps(ir: &BlockIr, spec: &crate::kir::GemmSpec) -> Vec<TensorMapSpec> {
    let size = |d: &Dim| SymExpr::from(d).to_string();
    let plain = |op: &crate::kir::Operand, inner: &Dim, outer: &Dim| TensorMapSpec {
        buffer: ir.buffers[op.buf].name.clone(),
        stacked: None,
        base_row: 0,
        dims: vec![size(inner), size(outer)],
        strides: vec![1],
        box_dims: vec![64, 64],
    };
    // Stacked weights: the plain map covers the first (never read: every
    // row is in the pair-order view), the pair-order view both.
    let b_rows = match spec.b.stacked {
        Some((_, rows)) => Dim::constant(rows),
        None => spec.n.clone(),
    };
    let a = |op: &crate::kir::Operand, k: &Dim| match op.layout {
        Layout::AKxM => plain(op, &spec.m, k),
        _ => plain(op, k, &spec.m),
    };
    let b = |op: &crate::kir::Operand, k: &Dim, rows: &Dim| match op.layout {
        Layout::BKxN => plain(op, &spec.n, k),
        _ => plain(op, k, rows),
    };
    // A concatenated K's further parts: `ta1`, `tb1`, … after the first's.
    let mut maps = Vec::new();
    for (i, ((pa, pb), k)) in spec.operand_pairs().zip(spec.pair_ks()).enumerate() {
        maps.extend([a(pa, k), b(pb, k, if i == 0 { &b_rows } else { &spec.n })]);
    }
    if let Some(p) = spec.b.row_perm {
        // `config::for_target` keeps other pair orders off the Hopper
        // mainloop; the header's static_assert refuses them too.
        let box_rows = crate::config::pair_box_rows(p).unwrap_or(64);
        // Stacked weights: the halves of the one group are the two buffers,
        // a distance apart that the host measures (`TensorMapSpec::stacked`).
        let (stacked, half) = match spec.b.stacked {
            Some((buf, _)) => (Some(ir.buffers[buf].name.clone()), 0),
            None => (None, p.group / 2),
        };
        maps.push(TensorMapSpec {
            buffer: ir.buffers[spec.b.buf].name.clone(),
            stacked,
            base_row: p.start,
            dims: vec![size(&spec.k), "2".into(), (p.group / 2).to_string(), ((p.end - p.start) / p.group).to_string()],
            strides: vec![half, 1, p.group],
            box_dims: vec![64, 2, box_rows as u32 / 2, 1],
        });
    }
    maps
}

/// The first lines of a kernel's file: its name, entry point, launch kind
/// and what it computes.
struct FileHead<'a> {
    file: &'a str,
    entry: &'a str,
    kind: &'a str,
    summary: &'a str,
}

/// The template headers a kernel with this GEMM mainloop (`None`: not a
/// GEMM) needs, in include order: every kernel uses `coda_common.cuh`'s
/// loads, stores and packing and `coda_epilogue.cuh`'s reductions (through
/// `prelude.cuh`); a GEMM adds the portable mainloop, whose tile machinery
/// the Hopper one shares, and a Hopper GEMM the Hopper mainloop.
fn headers_for(mainloop: Option<Mainloop>) -> impl Iterator<Item = &'static str> {
    HEADERS.into_iter().filter_map(move |(name, text)| {
        let needed = match name {
            SM80_HEADER => mainloop.is_some(),
            SM90_HEADER => matches!(mainloop, Some(Mainloop::Cooperative | Mainloop::PingPong)),
            _ => true,
        };
        needed.then_some(text)
    })
}

fn file_text(head: &FileHead<'_>, source: &SourceFile, ir: &BlockIr, mainloop: Option<Mainloop>, code: &str) -> String {
    let FileHead { file, entry, kind, summary } = head;
    let mut out = format!(
        "// {file} -- generated by codac from {}, block `{}`; do not edit.\n// kernel {entry} ({kind}): {summary}\n\n",
        source.name, ir.name
    );
    for text in headers_for(mainloop) {
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(PRELUDE);
    out.push_str("\n// ---- generated kernel ----\n\n");
    out.push_str(code);
    out
}

/// What a kernel stores and which partials it writes, for its summary.
fn outputs_text(ir: &BlockIr, kernel: &Kernel, block: &Block) -> String {
    let mut stores: Vec<String> = Vec::new();
    for s in &kernel.stores {
        let b = &ir.buffers[s.buf];
        // The parts of a concatenation stored one by one are one buffer.
        let text = format!("{}{} ({})", b.name, if s.accumulate { " +=" } else { "" }, b.dtype);
        if !stores.contains(&text) {
            stores.push(text);
        }
    }
    let partials: Vec<String> = kernel
        .partials
        .iter()
        .map(|p| {
            let reduced = kernel.nodes.get(p.node).map_or(p.value, |n| n.value);
            let what =
                block.names.get(reduced.index()).cloned().flatten().unwrap_or_else(|| format!("v{}", reduced.index()));
            let kind = if p.kind == PartialKind::RowSumSq { "row sum of squares" } else { p.kind.name() };
            format!("{kind} partials of {what}")
        })
        .collect();
    let mut parts = Vec::new();
    if !stores.is_empty() {
        parts.push(format!("stores {}", stores.join(", ")));
    }
    if !partials.is_empty() {
        parts.push(partials.join(", "));
    }
    parts.join("; ")
}

/// One line saying what a kernel computes.
fn summary(ir: &BlockIr, kernel: &Kernel, block: &Block) -> String {
    let name = |id: usize| ir.buffers[id].name.clone();
    let outputs = outputs_text(ir, kernel, block);
    match &kernel.kind {
        KernelKind::Gemm(g) => {
            let operand = |o: &crate::kir::Operand| {
                let t = matches!(o.layout, Layout::AKxM | Layout::BNxK);
                let read = match o.stacked {
                    Some((second, _)) => format!("[{}+{}]", name(o.buf), name(second)),
                    None => name(o.buf),
                };
                format!("{read}{}", if t { ".T" } else { "" })
            };
            let prelude = match &g.prelude {
                Some(p) => {
                    format!("rows first (row prelude, a warp per row): {}; ", outputs_text(ir, &p.kernel, block))
                }
                None => String::new(),
            };
            // A concatenated K: `[a0 | a1] @ [b0; b1]`.
            let (a, b) = match g.k_parts.is_none() {
                true => (operand(&g.a), operand(&g.b)),
                false => {
                    let (a, b): (Vec<String>, Vec<String>) =
                        g.operand_pairs().map(|(a, b)| (operand(a), operand(b))).unzip();
                    (format!("[{}]", a.join(" | ")), format!("[{}]", b.join("; ")))
                }
            };
            format!("acc = {a} @ {b} [{} x {} x {}], {} tiles; {prelude}{outputs}", g.m, g.n, g.k, g.config.name())
        }
        KernelKind::Row { rows, threads_per_row, grid } => {
            let grid = grid.as_ref().map_or(String::new(), |g| grid_summary(kernel, block, g));
            match *threads_per_row {
                1 => format!("one row, one thread per column; {outputs}"),
                32 => format!("one warp per row of {}; {outputs}{grid}", dim_text(rows)),
                CTA_THREADS => format!("one CTA per row of {}; {outputs}{grid}", dim_text(rows)),
                threads => format!("one CTA of {threads} threads per row of {}; {outputs}{grid}", dim_text(rows)),
            }
        }
        KernelKind::Col { cols } => {
            format!("one CTA per {} columns of {}; {outputs}", colk::COL_TILE, dim_text(cols))
        }
    }
}

/// `; grid reduction over rows (sum of v27, sum of v33) finished by the last CTA`.
fn grid_summary(kernel: &Kernel, block: &Block, g: &crate::kir::GridSpec) -> String {
    let what: Vec<String> = g
        .parts
        .iter()
        .filter_map(|(node, _)| match &kernel.nodes.get(*node)?.op {
            crate::kir::Op::GridReduce { op, arg, .. } => {
                let v = kernel.nodes.get(*arg)?.value;
                let name = block.names.get(v.index()).cloned().flatten().unwrap_or_else(|| format!("v{}", v.index()));
                let op = if *op == coda_ir::ReduceOp::Max { "max" } else { "sum" };
                Some(format!("{op} of {name}"))
            }
            _ => None,
        })
        .collect();
    format!("; grid reduction over rows ({}) finished by the last CTA", what.join(", "))
}

fn dim_text(d: &Dim) -> String {
    d.to_string()
}
