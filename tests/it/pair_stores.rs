//! Stores that put a pair layout back in column order (`Store::col_perm`).
//! The emulator runs the kernel IR, which applies the permutation, so an
//! emitter that ignored it would pass every emulated check and fail only
//! on a GPU (OLMo-2's QK-norm has such a row kernel). So every kernel
//! with such a store must read its columns through `cg::pair_position`
//! (row and column kernels) or place them through `cg::pair_source` or a
//! `StagedUnpermuteCols` staging (GEMM epilogues).

use crate::cuda::case_blocks;
use crate::grad::step_blocks;
use coda::cuda::kir::KernelKind;
use coda::cuda::CodegenOptions;
use coda::ir::Block;

/// The kernels of `block` with a pair-layout store, each with whether its
/// source reads or places the columns in pair order.
fn pair_stores(block: &Block, source: &coda::SourceFile) -> Vec<(String, bool)> {
    let compiled = coda::cuda::compile_block(block, source, &CodegenOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", block.name));
    let mut found = Vec::new();
    for kernel in &compiled.ir.kernels {
        let prelude = match &kernel.kind {
            KernelKind::Gemm(g) => g.prelude.as_ref().map(|p| &*p.kernel),
            _ => None,
        };
        for k in std::iter::once(kernel).chain(prelude) {
            if k.stores.iter().all(|s| s.col_perm.is_none()) {
                continue;
            }
            let file = format!("{}_{}.cu", block.name, kernel.name);
            let text = compiled.kernels.iter().find(|s| s.file_name == file).map(|s| s.source.as_str());
            let text = text.unwrap_or_else(|| panic!("{}: no source {file}", block.name));
            let ordered = match k.kind {
                KernelKind::Gemm(_) => text.contains("cg::pair_source(") || text.contains("StagedUnpermuteCols"),
                _ => text.contains("cg::pair_position("),
            };
            found.push((format!("{} {}", block.name, k.name), ordered));
        }
    }
    found
}

#[test]
fn pair_layout_stores_put_columns_back_in_every_kernel_form() {
    let mut found = Vec::new();
    for (_, block, source) in case_blocks() {
        found.extend(pair_stores(&block, &source));
    }
    for file in ["llama3_block.coda", "olmo2_layer.coda", "qwen2_layer.coda", "gptneox_layer.coda"] {
        let (blocks, source) = step_blocks(file);
        for block in &blocks {
            found.extend(pair_stores(block, &source));
        }
    }
    let forms: Vec<&String> = found.iter().map(|(k, _)| k).collect();
    assert!(found.iter().any(|(k, _)| k.contains(" row_")), "no row kernel with a pair-layout store: {forms:?}");
    assert!(found.iter().any(|(k, _)| k.contains(" gemm_")), "no GEMM with a pair-layout store: {forms:?}");
    let unordered: Vec<&String> = found.iter().filter(|(_, ordered)| !ordered).map(|(k, _)| k).collect();
    assert!(unordered.is_empty(), "pair-layout stores left in pair order: {unordered:?}");
}
