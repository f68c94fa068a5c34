//! Kernel names: each kernel is named by what it makes, so that a change of
//! the partition renames only the kernels it changes.
//!
//! A GEMM is `gemm_<anchor>`, where the anchor is the first named value its
//! epilogue computes from the accumulator (the value whose tile it
//! produces: `gemm_x1` for `x1 = x0 + attn @ w_o.T`), else the first named
//! value or block output it stores, else its operands (`gemm_du_w_qkv`, a
//! dgrad). A row kernel is `row_<value>` and a column-reduction kernel
//! `col_<value>` after the first named value or block output they store
//! (what they finish), else the first value they store (`row_v40`); a row
//! prelude is named like a row kernel. Names are C identifiers (other
//! characters become `_`); a name already taken gets `_2`, `_3`, … in
//! launch order. Launch order itself is the order of [`BlockIr::kernels`]
//! and of the manifest's kernel list.

use super::{BlockIr, Kernel, KernelKind, Op, Role};
use coda_ir::{Block, Inst, Value};
use std::collections::BTreeSet;

impl BlockIr {
    /// Names every kernel and row prelude (see the module docs); the last
    /// stage before emission, once no kernel is added, dropped or fused.
    pub(crate) fn name_kernels(&mut self, block: &Block) {
        let mut taken = BTreeSet::new();
        for k in 0..self.kernels.len() {
            let base = base_name(self, &self.kernels[k], block);
            self.kernels[k].name = unique(&mut taken, base);
            if let KernelKind::Gemm(gemm) = &self.kernels[k].kind {
                if let Some(p) = &gemm.prelude {
                    let base = base_name(self, &p.kernel, block);
                    let name = unique(&mut taken, base);
                    if let KernelKind::Gemm(gemm) = &mut self.kernels[k].kind {
                        if let Some(p) = &mut gemm.prelude {
                            p.kernel.name = name;
                        }
                    }
                }
            }
        }
    }
}

/// `base`, or `base_2`, `base_3`, … when taken; marks the result taken.
fn unique(taken: &mut BTreeSet<String>, base: String) -> String {
    let name = if taken.contains(&base) {
        (2..).map(|i| format!("{base}_{i}")).find(|n| !taken.contains(n)).unwrap_or(base)
    } else {
        base
    };
    taken.insert(name.clone());
    name
}

/// The name of `kernel` before collisions are resolved.
fn base_name(ir: &BlockIr, kernel: &Kernel, block: &Block) -> String {
    let (kind, anchor) = match &kernel.kind {
        KernelKind::Gemm(gemm) => {
            let anchor = product(kernel, block)
                .or_else(|| first_named_store(ir, kernel, block))
                .unwrap_or_else(|| operands(block, gemm.matmul));
            ("gemm", anchor)
        }
        KernelKind::Row { .. } => ("row", finished(ir, kernel, block)),
        KernelKind::Col { .. } => ("col", finished(ir, kernel, block)),
    };
    format!("{kind}_{}", identifier(&anchor))
}

/// The first named value a GEMM kernel computes from its accumulator, in
/// node order.
fn product(kernel: &Kernel, block: &Block) -> Option<String> {
    kernel.nodes.iter().filter(|n| n.reg.is_some() || matches!(n.op, Op::Acc)).find_map(|n| name_of(block, n.value))
}

/// The name of the first store whose value is named or whose buffer is (or
/// stands for) a block output.
fn first_named_store(ir: &BlockIr, kernel: &Kernel, block: &Block) -> Option<String> {
    kernel.stores.iter().find_map(|s| {
        let value = kernel.nodes.get(s.node).and_then(|n| name_of(block, n.value));
        let buffer = &ir.buffers[s.buf];
        let output = match (buffer.role, buffer.staging_of) {
            (Role::Output, _) => Some(s.buf),
            (Role::Staging, Some(o)) if ir.buffers[o].role == Role::Output => Some(o),
            _ => None,
        };
        value.or_else(|| output.map(|o| ir.buffers[o].name.clone()))
    })
}

/// What a row or column kernel finishes: its first named store, else its
/// first stored value or partial by index.
fn finished(ir: &BlockIr, kernel: &Kernel, block: &Block) -> String {
    let stored = kernel.stores.iter().filter_map(|s| kernel.nodes.get(s.node)).map(|n| n.value);
    let partials = kernel.partials.iter().map(|p| p.value);
    first_named_store(ir, kernel, block)
        .or_else(|| stored.chain(partials).next().map(|v| value_name(block, v)))
        .unwrap_or_else(|| "empty".into())
}

/// `<lhs>_<rhs>`: the names of a matmul's operands, seen through casts,
/// transposes and row permutations.
fn operands(block: &Block, matmul: Value) -> String {
    let Inst::MatMul { lhs, rhs, .. } = block.inst(matmul) else { return value_name(block, matmul) };
    format!("{}_{}", operand_name(block, *lhs), operand_name(block, *rhs))
}

fn operand_name(block: &Block, mut v: Value) -> String {
    while name_of(block, v).is_none() {
        match block.inst(v) {
            Inst::Cast { arg, .. } | Inst::Transpose { arg } | Inst::PermuteRows { arg, .. } => v = *arg,
            _ => break,
        }
    }
    value_name(block, v)
}

fn name_of(block: &Block, v: Value) -> Option<String> {
    block.names.get(v.index()).cloned().flatten()
}

/// `v`'s name, else `v<index>`.
fn value_name(block: &Block, v: Value) -> String {
    name_of(block, v).unwrap_or_else(|| format!("v{}", v.index()))
}

/// `text` with every character outside `[A-Za-z0-9_]` replaced by `_`.
fn identifier(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}
