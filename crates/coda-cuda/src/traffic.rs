//! Device-memory traffic: the bytes each generated kernel reads and writes,
//! and the bytes the same block would move unfused, for `codac explain`.
//!
//! Both count every buffer once per kernel (an ideal cache: a GEMM's operand
//! tiles re-read from L2 by several CTAs count once), at the run-time dims
//! given. The *unfused* program runs every computing IR instruction as its
//! own kernel that reads its operands and writes its result in its IR
//! storage type (broadcasts, transposes, column slices and constant tables
//! are views and move nothing; a broadcast operand is read at its own size).
//!
//! Counts use checked arithmetic and saturate at `u64::MAX` (a count too
//! large to hold is reported as the largest one, never wrapped to a small
//! number).

use crate::kir::{BlockIr, Kernel, KernelKind, Op};
use coda_ir::{Block, Inst, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Bytes of buffer `id` at `dims` (0 when its size cannot be evaluated).
fn buffer_bytes(ir: &BlockIr, id: usize, dims: &BTreeMap<String, i64>) -> u64 {
    ir.buffers.get(id).map_or(0, |b| bytes_of(b, dims))
}

/// Bytes of a buffer at `dims` (0 when its size cannot be evaluated).
pub(crate) fn bytes_of(b: &crate::kir::Buffer, dims: &BTreeMap<String, i64>) -> u64 {
    let count = |s: &crate::symexpr::SymExpr| u64::try_from(s.eval(dims).unwrap_or(0)).unwrap_or(0);
    let (rows, cols) = (count(&b.rows), count(&b.cols));
    let bytes = rows.checked_mul(cols).and_then(|n| n.checked_mul(b.dtype.size_bytes() as u64));
    if rows == 0 || cols == 0 {
        return 0;
    }
    bytes.unwrap_or(u64::MAX)
}

/// The buffers a kernel reads and the buffers it writes.
pub fn kernel_buffers(kernel: &Kernel) -> (BTreeSet<usize>, BTreeSet<usize>) {
    let mut reads = BTreeSet::new();
    let mut writes = BTreeSet::new();
    match &kernel.kind {
        KernelKind::Gemm(g) => {
            reads.extend(g.operand_bufs());
            // A row prelude's traffic is the GEMM kernel's: it reads the row
            // kernel's inputs and writes its outputs (read back by the
            // mainloop and the epilogue, counted again as reads).
            if let Some(p) = &g.prelude {
                let (r, w) = kernel_buffers(&p.kernel);
                reads.extend(r);
                writes.extend(w);
                writes.insert(p.ready);
            }
        }
        // A grid reduction's per-CTA partials and ticket counter count once,
        // as writes (the last CTA reads them back from L2).
        KernelKind::Row { grid: Some(g), .. } => {
            writes.extend(g.parts.iter().map(|(_, b)| *b).chain(std::iter::once(g.counter)));
        }
        KernelKind::Row { .. } | KernelKind::Col { .. } => {}
    }
    for node in &kernel.nodes {
        match &node.op {
            Op::Load(b) | Op::FinishCol(b) => {
                reads.insert(*b);
            }
            Op::FinishRow(_, bufs) => reads.extend(bufs.iter().copied()),
            _ => {}
        }
    }
    for s in &kernel.stores {
        writes.insert(s.buf);
        if s.accumulate {
            reads.insert(s.buf);
        }
    }
    for p in &kernel.partials {
        writes.extend(p.bufs.iter().copied());
    }
    (reads, writes)
}

/// Bytes one kernel moves at `dims`.
pub fn kernel_bytes(ir: &BlockIr, kernel: &Kernel, dims: &BTreeMap<String, i64>) -> u64 {
    let (reads, writes) = kernel_buffers(kernel);
    reads.iter().chain(writes.iter()).map(|b| buffer_bytes(ir, *b, dims)).fold(0, u64::saturating_add)
}

/// Bytes the block moves when every computing instruction is its own kernel.
pub fn unfused_bytes(block: &Block, dims: &BTreeMap<String, i64>) -> u64 {
    let bytes_of = |v: Value| -> u64 {
        let ty = block.ty(v);
        let lookup = |name: &str| dims.get(name).copied();
        let count = |d: &coda_ir::Dim| u64::try_from(d.eval(&lookup).unwrap_or(0)).unwrap_or(0);
        let (rows, cols) = (count(&ty.shape.rows), count(&ty.shape.cols));
        if rows == 0 || cols == 0 {
            return 0;
        }
        rows.checked_mul(cols).and_then(|n| n.checked_mul(ty.dtype.size_bytes() as u64)).unwrap_or(u64::MAX)
    };
    // The value a view reads through to.
    let source = |mut v: Value| loop {
        match block.inst(v) {
            Inst::Broadcast { arg, .. } | Inst::Transpose { arg } | Inst::SliceCols { arg, .. } => v = *arg,
            _ => return v,
        }
    };
    let live = live_values(block);
    let mut total = 0;
    for (v, inst) in block.insts.iter() {
        let view = matches!(
            inst,
            Inst::Param(_)
                | Inst::Const(_)
                | Inst::DimValue(_)
                | Inst::Broadcast { .. }
                | Inst::Transpose { .. }
                | Inst::SliceCols { .. }
                | Inst::RopeTable { .. }
        );
        if view || !live[v.index()] {
            continue;
        }
        let operands: BTreeSet<Value> = inst.operands().into_iter().map(source).collect();
        let moved = operands.into_iter().map(bytes_of).fold(bytes_of(v), u64::saturating_add);
        total = u64::saturating_add(total, moved);
    }
    total
}

fn live_values(block: &Block) -> Vec<bool> {
    let mut live = vec![false; block.insts.len()];
    for o in &block.outputs {
        live[o.value.index()] = true;
    }
    let all: Vec<_> = block.insts.iter().collect();
    for (v, inst) in all.into_iter().rev() {
        if live[v.index()] {
            for o in inst.operands() {
                live[o.index()] = true;
            }
        }
    }
    live
}

/// The default binding of run-time dims for traffic figures: 8192 each.
pub fn default_dims(block: &Block) -> BTreeMap<String, i64> {
    block.symbolic_dims().map(|d| (d.to_string(), 8192)).collect()
}
