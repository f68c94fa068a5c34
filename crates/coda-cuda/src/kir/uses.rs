//! The buffers a kernel reads or writes, read off its kernel IR: the
//! parameters it must take. The emitter adds a buffer's fields to the
//! argument structs when it first emits an access to it, and the manifest
//! describes those same structs, so this set is what the manifest lists
//! (`tests/it/params.rs` checks it for every example and case).

use super::{BufId, Kernel, KernelKind, Op};
use std::collections::BTreeSet;

impl Kernel {
    /// Every buffer the kernel's nodes load or finish, its stores and
    /// partials write, its GEMM operands, staging copy, grid reductions and
    /// row prelude use.
    pub fn buffers(&self) -> BTreeSet<BufId> {
        let mut used = BTreeSet::new();
        for node in &self.nodes {
            match &node.op {
                Op::Load(b) | Op::FinishCol(b) => {
                    used.insert(*b);
                }
                Op::FinishRow(_, bufs) => used.extend(bufs.iter().copied()),
                _ => {}
            }
        }
        used.extend(self.stores.iter().map(|s| s.buf));
        used.extend(self.partials.iter().flat_map(|p| p.bufs.iter().copied()));
        match &self.kind {
            KernelKind::Gemm(spec) => {
                used.extend([spec.a.buf, spec.b.buf]);
                if let Some(prelude) = &spec.prelude {
                    used.insert(prelude.ready);
                    used.extend(prelude.kernel.buffers());
                }
            }
            KernelKind::Row { grid: Some(grid), .. } => {
                used.extend(grid.parts.iter().map(|(_, b)| *b));
                used.insert(grid.counter);
            }
            KernelKind::Row { grid: None, .. } | KernelKind::Col { .. } => {}
            KernelKind::Copy { src, dst } => used.extend([*src, *dst]),
        }
        used
    }
}
