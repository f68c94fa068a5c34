//! What a kernel uses, read off its kernel IR: the buffers it reads or
//! writes (the parameters it must take), and which of the row and column
//! indices its values are evaluated at. The emitter adds a buffer's fields to the
//! argument structs when it first emits an access to it, and the manifest
//! describes those same structs, so this set is what the manifest lists
//! (`tests/it/params.rs` checks it for every example and case).

use super::{BufId, Kernel, KernelKind, Op, Space};
use std::collections::BTreeSet;

impl Kernel {
    /// Every buffer the kernel's nodes load or finish, its stores and
    /// partials write, its GEMM operands, grid reductions and row prelude
    /// use.
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
                used.extend(spec.operand_bufs());
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
        }
        used
    }

    /// Whether evaluating the kernel's values outside its grid tail reads
    /// the row index: some store writes per row, or some per-row or
    /// per-element node does more than combine its operands element-wise
    /// (a load, a finished partial, an index transform, a reduction along
    /// the row). A row kernel with one CTA per row declares `m` only then.
    pub fn reads_row_index(&self) -> bool {
        self.reads_index(|space| matches!(space, Space::Row | Space::Tile))
    }

    /// Whether evaluating the kernel's values outside its grid tail reads
    /// the column index, as [`Self::reads_row_index`] for the row: a
    /// column kernel declares `c` only then.
    pub fn reads_col_index(&self) -> bool {
        self.reads_index(|space| matches!(space, Space::Col | Space::Tile))
    }

    /// Whether a store or a non-element-wise node outside the grid tail
    /// lies in a space that `along` says varies along the index.
    fn reads_index(&self, along: impl Fn(Space) -> bool) -> bool {
        let tail = self.tail_nodes();
        let outside_tail = |id: usize| !tail.get(id).copied().unwrap_or(false);
        let element_wise = |op: &Op| {
            matches!(
                op,
                Op::Const(_)
                    | Op::Dim(_)
                    | Op::Unary(..)
                    | Op::Binary(..)
                    | Op::Select(..)
                    | Op::Cast(..)
                    | Op::Broadcast(_)
            )
        };
        let stores = self.stores.iter().any(|s| outside_tail(s.node) && along(self.nodes[s.node].space));
        let nodes =
            (self.nodes.iter().enumerate()).any(|(id, n)| outside_tail(id) && along(n.space) && !element_wise(&n.op));
        stores || nodes
    }
}
