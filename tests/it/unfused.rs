//! GEMMs run unfused (`CodegenOptions::unfused`, `--unfuse`): each GEMM
//! of a block in turn keeps a bare epilogue, and the block's kernels still
//! compute what the interpreter computes (on the CPU emulator); the GEMM
//! stores only its accumulator; a name that is no GEMM is an error that
//! lists the GEMMs.

use crate::cuda::{case_blocks, emulate_block_with};
use crate::grad::{small_example, step_blocks};
use coda::cuda::kir::{Kernel, KernelKind, Op};
use coda::cuda::CodegenOptions;
use coda::ir::{Block, BlockKind};
use std::collections::BTreeSet;

/// Whether `k` is a GEMM whose epilogue only stores the accumulator, as it
/// is or rounded to its storage type: no partials, and every store the
/// accumulator through casts alone (a deferred row scale or a residual
/// makes it fused).
fn is_bare_gemm(k: &Kernel) -> bool {
    let is_acc = |mut id: usize| loop {
        match k.nodes[id].op {
            Op::Acc => return true,
            Op::Cast(_, a) => id = a,
            _ => return false,
        }
    };
    matches!(k.kind, KernelKind::Gemm(_)) && k.partials.is_empty() && k.stores.iter().all(|s| is_acc(s.node))
}

/// The matmul a GEMM kernel computes.
fn matmul(k: &Kernel) -> Option<coda::ir::Value> {
    match &k.kind {
        KernelKind::Gemm(g) => Some(g.matmul),
        _ => None,
    }
}

/// Each GEMM of `block` unfused in turn: the block against the interpreter
/// at `m` tokens, and that GEMM's epilogue bare (the same kernels as by
/// default, where it was bare already).
fn each_gemm_unfused(name: &str, block: &Block, source: &coda::SourceFile, m: i64) {
    let fused =
        coda::cuda::compile_block(block, source, &CodegenOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    for gemm in fused.ir.kernels.iter().filter(|k| matches!(k.kind, KernelKind::Gemm(_))) {
        let options = CodegenOptions { unfused: BTreeSet::from([gemm.name.clone()]), ..Default::default() };
        let what = format!("{name}: block {} with {} unfused", block.name, gemm.name);
        let compiled = coda::cuda::compile_block(block, source, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(compiled.unfused, options.unfused, "{what}");
        if is_bare_gemm(gemm) {
            assert_eq!(compiled.kernels, fused.kernels, "{what}: a bare GEMM's partition changed");
        }
        let unfused = compiled.ir.kernels.iter().find(|k| matmul(k) == matmul(gemm));
        assert!(unfused.is_some_and(is_bare_gemm), "{what}: the GEMM's epilogue is not bare");
        emulate_block_with(&what, block, source, m, &options);
    }
}

#[test]
fn every_gemm_of_the_cases_runs_unfused_like_the_interpreter() {
    for (name, block, source) in case_blocks().into_iter().filter(|(_, b, _)| b.kind == BlockKind::Block) {
        each_gemm_unfused(&name, &block, &source, 37);
    }
}

/// Gemma-2's and Qwen3's training steps, whose gated products on separate
/// gate and up weights are the epilogues that cost most on the H100.
#[test]
fn every_gemm_of_a_training_step_runs_unfused_like_the_interpreter() {
    for file in ["gemma2_layer.coda", "qwen3_layer.coda"] {
        let (blocks, source) = step_blocks(file);
        for block in &blocks {
            each_gemm_unfused(file, block, &source, 3);
        }
    }
}

#[test]
fn a_name_that_is_no_gemm_is_an_error_listing_the_gemms() {
    let path = crate::cuda::workspace().join("examples/gemma2_layer.coda");
    let checked = small_example(&path);
    let mut options = coda::CompileOptions::default();
    options.codegen.unfused.insert("gemm_nope".into());
    let err = coda::compile(&checked, &options).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("no GEMM kernel named `gemm_nope`"), "{err}");
    assert!(err.contains("gemm_attn_w_o, gemm_gate_up, gemm_mlp"), "{err}");
}

/// A GEMM unfused in one block only (`CodegenOptions::unfused_in`, what
/// the autotuner files): that block compiles as `--unfuse` would compile
/// it, the other blocks as by default; a name the block lacks is ignored.
#[test]
fn a_gemm_unfused_in_one_block_leaves_the_others_fused() {
    // The forward block and the training step's blocks, one source.
    let (mut blocks, source) = step_blocks("gemma2_layer.coda");
    let forward = small_example(&crate::cuda::workspace().join("examples/gemma2_layer.coda"));
    blocks.extend(forward.module.blocks.iter().cloned());
    let compiled = |block: &Block, o: &CodegenOptions| {
        coda::cuda::compile_block(block, &source, o).unwrap_or_else(|e| panic!("{}: {e}", block.name))
    };
    let compile = |block: &Block, o: &CodegenOptions| compiled(block, o).kernels;
    let target = &blocks[0];
    let fused_ir = compiled(target, &CodegenOptions::default()).ir;
    let gemm = fused_ir.kernels.iter().find(|k| matches!(k.kind, KernelKind::Gemm(_)) && !is_bare_gemm(k));
    let gemm = gemm.map(|k| k.name.clone()).unwrap_or_else(|| panic!("{}: every GEMM is bare", target.name));
    let mut options = CodegenOptions::default();
    options.unfused_in.insert(target.name.clone(), BTreeSet::from([gemm.clone(), "gemm_nope".to_string()]));
    let by_flag = CodegenOptions { unfused: BTreeSet::from([gemm.clone()]), ..Default::default() };
    assert!(blocks.len() >= 2, "{}", blocks.len());
    for block in &blocks {
        let (tuned, fused) = (compile(block, &options), compile(block, &CodegenOptions::default()));
        if block.name == target.name {
            assert!(tuned == compile(block, &by_flag), "{}: not as --unfuse {gemm}", block.name);
            assert!(tuned != fused, "{}: {gemm} stayed fused", block.name);
        } else {
            assert!(tuned == fused, "{} changed", block.name);
        }
    }
}
