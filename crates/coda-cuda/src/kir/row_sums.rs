//! Column sums of a row kernel's values, as partials per block of rows.
//!
//! A gain's gradient is a sum over the rows of a per-element product that a
//! CTA-per-row kernel computes (the norm's backward reads the same
//! tensors): Qwen3's QK-norm gains, Gemma-2's post-norm gains. The row
//! kernel stored the product whole, in `f32` (`[M, C]`: 134 MB for Qwen3's
//! q at M = 8192), and a column-reduction kernel read it back. Instead,
//! each CTA of the row kernel takes [`ROWS_PER_CTA`] rows in turn, adds
//! the product of each into a shared array of `C` sums, and writes the
//! array as one row of a `[⌈M / ROWS_PER_CTA⌉, C]` partial buffer; the
//! column kernel sums that buffer's rows instead of the product's.
//!
//! Identity: `Σ_m x[m, c] = Σ_b Σ_{m ∈ block b} x[m, c]`. Numerics: the
//! same `f32` sums in another order (each block's rows in row order, then
//! the blocks in the column kernel's fixed order), deterministic.

use super::{BlockIr, BufId, Kernel, KernelKind, Op, PartialKind, PartialOut, Role, Space};
use crate::symexpr::SymExpr;
use coda_ir::{DType, ReduceOp};

/// Rows each CTA of a row kernel with column-sum partials takes, one after
/// the other: at M = 8192 a grid of 1024 CTAs, as many as the
/// multiprocessors hold at once, and partials an eighth of the product's
/// size.
pub(crate) const ROWS_PER_CTA: u32 = 8;

/// Moves every column sum of a row kernel's stored product into that row
/// kernel as partials ([`fold`]), where the product is an `f32` scratch
/// tensor that only the column sums read.
pub(crate) fn fold_column_sums(ir: &mut BlockIr) {
    for c in 0..ir.kernels.len() {
        if !matches!(ir.kernels[c].kind, KernelKind::Col { .. }) {
            continue;
        }
        for buf in summed_loads(&ir.kernels[c]) {
            if let Some((r, store)) = producer(ir, c, buf) {
                fold(ir, (r, store), buf);
            }
        }
    }
}

/// The buffers a column kernel loads as tiles only to sum them over rows:
/// every user of each such load is a column sum of it.
fn summed_loads(kernel: &Kernel) -> Vec<BufId> {
    let mut bufs = Vec::new();
    for (id, node) in kernel.nodes.iter().enumerate() {
        let (Op::Load(buf), Space::Tile) = (&node.op, node.space) else { continue };
        let mut users = kernel.nodes.iter().filter(|n| n.op.operands().contains(&id)).peekable();
        let summed = |n: &super::Node| matches!(n.op, Op::ColReduce { op: ReduceOp::Sum, arg, .. } if arg == id);
        let stored = kernel.stores.iter().any(|s| s.node == id);
        if users.peek().is_some() && users.all(summed) && !stored && !bufs.contains(buf) {
            bufs.push(*buf);
        }
    }
    bufs
}

/// The row kernel and its store that write `buf` whole, when `buf` is an
/// `f32` scratch tensor of constant width that no kernel but column kernel
/// `c` reads and that row kernel (a CTA per row, no grid reductions) is
/// its only writer.
fn producer(ir: &BlockIr, c: usize, buf: BufId) -> Option<(usize, usize)> {
    let b = &ir.buffers[buf];
    if b.role != Role::Scratch || b.dtype != DType::F32 || b.cols.as_const().is_none() {
        return None;
    }
    let mut writer = None;
    for (k, kernel) in ir.kernels.iter().enumerate() {
        let (reads, writes) = crate::traffic::kernel_buffers(kernel);
        if k != c && reads.contains(&buf) {
            return None;
        }
        if writes.contains(&buf) {
            if writer.is_some() || k > c {
                return None;
            }
            writer = Some(k);
        }
    }
    let r = writer?;
    let kernel = &ir.kernels[r];
    let KernelKind::Row { threads_per_row, grid: None, .. } = kernel.kind else { return None };
    let [store] =
        kernel.stores.iter().enumerate().filter(|(_, s)| s.buf == buf).map(|(i, _)| i).collect::<Vec<_>>()[..]
    else {
        return None;
    };
    let s = &kernel.stores[store];
    let plain = !s.accumulate && s.col_perm.is_none() && s.col_offset.is_none();
    let whole = kernel.nodes[s.node].space == Space::Tile;
    (super::whole_cta(threads_per_row) && plain && whole).then_some((r, store))
}

/// Turns `buf` into the partial buffer of row kernel `r`, whose store
/// `store` it replaces.
fn fold(ir: &mut BlockIr, (r, store): (usize, usize), buf: BufId) {
    let KernelKind::Row { rows, .. } = &ir.kernels[r].kind else { return };
    let blocks = SymExpr::from(rows).ceil_div(i64::from(ROWS_PER_CTA));
    let s = ir.kernels[r].stores.remove(store);
    let value = ir.kernels[r].nodes[s.node].value;
    ir.kernels[r].partials.push(PartialOut {
        node: s.node,
        kind: PartialKind::ColSum,
        index: None,
        bufs: vec![buf],
        value,
    });
    let b = &mut ir.buffers[buf];
    let stem = b.name.strip_prefix("tmp.").unwrap_or(&b.name).to_string();
    b.name = format!("part.{stem}.col_sum");
    b.role = Role::Partial;
    b.rows = blocks;
    b.ld = Some(b.cols.clone());
}
