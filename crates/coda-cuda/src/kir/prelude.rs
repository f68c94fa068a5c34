//! Row preludes: a row kernel fused into the Hopper GEMM that reads its
//! outputs row by row (see [`RowPrelude`]).
//!
//! The typical case is the norm of a block input before a matmul
//! (`rmsnorm(x, g) @ W` with `x` from outside the block, such as the LM
//! head's input): no producer epilogue can emit `Σx²` and `x ⊙ g`, so a row
//! kernel computes them. The GEMM reads that kernel's outputs only at the
//! rows of the tile it computes (its A operand, its per-row scale), so it
//! can compute them itself, a row block at a time, the first time a tile of
//! that row block comes up. The bytes moved are the same; the launch, the
//! dependency between the two kernels, and the row kernel's separate pass
//! over the GPU go away (the rows of later row blocks are computed while
//! the tensor cores work on earlier ones).
//!
//! Only light row kernels are fused ([`MAX_PRELUDE_BYTES_PER_MAC`]): a warp
//! per row is much slower per row than the row kernel's own 256 threads, so
//! a heavy row kernel would stall the GEMM's tiles.
//!
//! Identity: none; the row kernel's code runs unchanged, one warp per row,
//! before any read of its rows (the mainloop waits for the row block's
//! count; see `coda_gemm_sm90.cuh`).

use super::{BlockIr, BufId, Buffer, GemmSpec, Kernel, KernelKind, Layout, Op, Role, RowPrelude, Space};
use crate::symexpr::SymExpr;
use coda_ir::{DType, Dim};
use std::collections::{BTreeMap, BTreeSet};

/// The most memory traffic a row prelude may move per multiply-add of its
/// GEMM: 2% of the GEMM's time on an H100 (3.0 TB/s against 700 dense
/// bf16 TFLOP/s, so 2% of `2 m n k / 700e12` s moves `0.02 × 2 × 3.0 / 700`
/// bytes per `m n k`). The rows are computed a warp per row inside the
/// GEMM, much slower per row than by their own kernel, so only a light row
/// kernel before a heavy GEMM pays: the LM head's norm (0.3%) does; the
/// backward's SwiGLU and RMSNorm row kernels before their dgrad GEMMs
/// (25–60%) measured 1.4–2.2× slower fused than apart on the H100.
const MAX_PRELUDE_BYTES_PER_MAC: f64 = 0.02 * 2.0 * 3.0 / 700.0;

/// Fuses every row kernel into the GEMM kernel right after it when that
/// GEMM runs on the Hopper mainloop, reads the row kernel's outputs only
/// row-locally ([`fusable`]) and is heavy enough to hide it ([`light`], at
/// `dims`). Adds one counter buffer per fusion.
pub(crate) fn fuse_row_preludes(ir: &mut BlockIr, dims: &BTreeMap<String, i64>) {
    let kernels = std::mem::take(&mut ir.kernels);
    let buffers = &mut ir.buffers;
    let mut out: Vec<Kernel> = Vec::with_capacity(kernels.len());
    for mut kernel in kernels {
        let host = out.last().is_some_and(|row| fusable(row, &kernel, buffers) && light(row, &kernel, buffers, dims));
        if let (true, KernelKind::Gemm(spec)) = (host, &mut kernel.kind) {
            if let Some(ready) = counter_buffer(spec, buffers) {
                if let Some(row) = out.pop() {
                    spec.prelude = Some(RowPrelude { kernel: Box::new(row), ready });
                }
            }
        }
        out.push(kernel);
    }
    ir.kernels = out;
}

/// Whether `row` can run as the prelude of `gemm`: `row` is a row kernel
/// without grid reductions over the GEMM's rows, storing only per-row
/// values and rows (no `+=`) and no per-head reductions or top-k; `gemm` is a cooperative Hopper GEMM without
/// another prelude that reads those outputs only as its A
/// operand (`[M, K]`, untransposed) or as per-row vectors of its epilogue;
/// and the two kernels write nothing the other reads.
fn fusable(row: &Kernel, gemm: &Kernel, buffers: &[Buffer]) -> bool {
    let (KernelKind::Row { rows, grid: None, .. }, KernelKind::Gemm(spec)) = (&row.kind, &gemm.kind) else {
        return false;
    };
    if !spec.config.is_sm90() || !spec.config.takes_row_prelude() || spec.prelude.is_some() || *rows != spec.m {
        return false;
    }
    let row_stores_rows =
        row.stores.iter().all(|s| !s.accumulate && matches!(row.nodes[s.node].space, Space::Row | Space::Tile));
    let outs: BTreeSet<BufId> = row.stores.iter().map(|s| s.buf).collect();
    let outputs_are_scratch = outs.iter().all(|b| buffers[*b].role == Role::Scratch);
    // Per-head reductions and top-k choices are staged through shared
    // memory by a whole CTA per row (`emit::rowk`), which a prelude's warp
    // per row is not.
    let per_head = row.nodes.iter().any(|n| matches!(n.op, Op::GroupReduce { .. } | Op::TopK { .. }));
    row_stores_rows
        && outputs_are_scratch
        && !per_head
        && reads_row_locally(gemm, spec, &outs)
        && !gemm_writes_any(gemm, row)
}

/// Whether the row kernel's traffic is small beside the GEMM's work
/// ([`MAX_PRELUDE_BYTES_PER_MAC`]), at `dims`.
fn light(row: &Kernel, gemm: &Kernel, buffers: &[Buffer], dims: &BTreeMap<String, i64>) -> bool {
    let KernelKind::Gemm(spec) = &gemm.kind else { return false };
    let (reads, writes) = crate::traffic::kernel_buffers(row);
    let bytes: u64 = reads.union(&writes).map(|b| crate::traffic::bytes_of(&buffers[*b], dims)).sum();
    let size = |d: &Dim| SymExpr::from(d).eval(dims).unwrap_or(0).max(0) as f64;
    let macs = size(&spec.m) * size(&spec.n) * size(&spec.k);
    (bytes as f64) <= MAX_PRELUDE_BYTES_PER_MAC * macs
}

/// Whether the GEMM kernel reads the buffers `outs` only at its tile's rows.
fn reads_row_locally(gemm: &Kernel, spec: &GemmSpec, outs: &BTreeSet<BufId>) -> bool {
    // The rows of a concatenated K's further parts are not waited for.
    let parts_ok = spec.further_parts().iter().all(|p| p.a.bufs().chain(p.b.bufs()).all(|b| !outs.contains(&b)));
    let a_ok =
        parts_ok && (!outs.contains(&spec.a.buf) || (spec.a.layout == Layout::AMxK && spec.a.row_perm.is_none()));
    let b_ok = spec.b.bufs().all(|b| !outs.contains(&b));
    let nodes_ok = gemm.nodes.iter().all(|n| match &n.op {
        Op::Load(b) if outs.contains(b) => n.space == Space::Row,
        Op::FinishRow(_, bufs) => bufs.iter().all(|b| !outs.contains(b)),
        Op::FinishCol(b) => !outs.contains(b),
        _ => true,
    });
    a_ok && b_ok && nodes_ok
}

/// Whether the GEMM kernel writes a buffer the row kernel reads.
fn gemm_writes_any(gemm: &Kernel, row: &Kernel) -> bool {
    let (reads, _) = crate::traffic::kernel_buffers(row);
    let (_, writes) = crate::traffic::kernel_buffers(gemm);
    reads.intersection(&writes).next().is_some()
}

/// The prelude's counter buffer: `2 M + 1` i32 values, enough for the
/// `1 + 2 ceil(M / BM)` the mainloop uses (`None` if the size overflows).
fn counter_buffer(spec: &GemmSpec, buffers: &mut Vec<Buffer>) -> Option<BufId> {
    let len = spec.m.mul(&Dim::constant(2)).and_then(|d| d.add(&Dim::constant(1))).ok()?;
    let base = format!("ready.{}", buffers[spec.a.buf].name);
    let taken = |n: &str| buffers.iter().any(|b| b.name == n);
    let name =
        if taken(&base) { (2..).map(|i| format!("{base}_{i}")).find(|n| !taken(n)).unwrap_or(base) } else { base };
    buffers.push(super::build::small_buffer(name, Role::Counter, DType::I32, SymExpr::from(len)));
    Some(buffers.len() - 1)
}
