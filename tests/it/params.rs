//! Kernel parameters: every kernel of every example and case (and of their
//! backward blocks), emitted for sm_90a and for sm_80, takes exactly the
//! buffers its kernel IR reads or writes, and its parameters fit CUDA's
//! limit. The runtime builds launch arguments from the manifest alone, so
//! a buffer the manifest lists but the kernel never touches would be bound
//! (and allocated) for nothing, and one it leaves out would be unbound.

use crate::cuda::{display_name, expects_error, inputs};
use coda::cuda::limits::{param_bytes, MAX_PARAM_BYTES};
use coda::cuda::manifest::FieldValue;
use std::collections::BTreeSet;

/// The blocks `codac compile` partitions: each `block` reparameterized,
/// each `kernel` as written.
fn compiled_blocks(blocks: &[coda::ir::Block]) -> Vec<coda::ir::Block> {
    let options = coda::opt::Options::default();
    blocks
        .iter()
        .map(|block| match block.kind {
            coda::ir::BlockKind::Block => {
                coda::opt::reparameterize(block, &options).unwrap_or_else(|e| panic!("{}: {e}", block.name)).block
            }
            coda::ir::BlockKind::Kernel => block.clone(),
        })
        .collect()
}

/// Checks every kernel of `block` compiled for `arch`.
fn check_block(name: &str, block: &coda::ir::Block, source: &coda::SourceFile, arch: &str) {
    let options = coda::cuda::CodegenOptions { arch: arch.into(), ..Default::default() };
    let compiled = coda::cuda::compile_block(block, source, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (ir, manifest) = (&compiled.ir, &compiled.manifest);
    assert_eq!(ir.kernels.len(), manifest.kernels.len(), "{name}: kernels");
    for (kernel, spec) in ir.kernels.iter().zip(&manifest.kernels) {
        let what = format!("{name} ({arch}): kernel {} of block {}", kernel.name, block.name);
        let uses: BTreeSet<&str> = kernel.buffers().into_iter().map(|b| ir.buffers[b].name.as_str()).collect();
        let mut listed = BTreeSet::new();
        for field in spec.args.iter().flat_map(|a| &a.fields) {
            if let FieldValue::Ptr(buffer) = &field.value {
                listed.insert(buffer.as_str());
            }
        }
        assert_eq!(listed, uses, "{what}: manifest parameters against the buffers its kernel IR uses");
        for map in &spec.tensor_maps {
            assert!(
                uses.contains(map.buffer.as_str()),
                "{what}: a tensor map of {}, which it does not use",
                map.buffer
            );
        }
        let bytes = param_bytes(spec);
        assert!(bytes <= MAX_PARAM_BYTES, "{what}: {bytes} bytes of parameters");
    }
}

#[test]
fn kernels_take_exactly_the_buffers_they_use() {
    for path in inputs() {
        let name = display_name(&path);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if expects_error(&path, &text) {
            continue;
        }
        let checked = coda::check(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        // What `codac compile --grad` compiles too: the saving forwards and
        // the backward blocks.
        let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{name}: {e}"));
        let savings: Vec<coda::ir::Block> = view.grads.iter().map(|g| g.saving_forward.clone()).collect();
        let mut blocks = compiled_blocks(&checked.module.blocks);
        blocks.extend(compiled_blocks(&view.module.blocks));
        blocks.extend(compiled_blocks(&savings));
        for block in &blocks {
            for arch in ["sm_90a", "sm_80"] {
                check_block(&name, block, &checked.source, arch);
            }
        }
    }
}

/// A block summing `inputs` inputs of 24 bytes of parameters each into one
/// output, all in one row kernel.
fn wide_block(inputs: usize) -> String {
    let params: Vec<String> = (0..inputs).map(|i| format!("x{i}: f32[M, 4]")).collect();
    let sums: Vec<String> = (0..inputs)
        .step_by(20)
        .map(|g| {
            let terms: Vec<String> = (g..(g + 20).min(inputs)).map(|i| format!("x{i}")).collect();
            format!("    let s{} = {}\n", g / 20, terms.join(" + "))
        })
        .collect();
    let total: Vec<String> = (0..sums.len()).map(|i| format!("s{i}")).collect();
    let total = total.chunks(10).map(|c| format!("({})", c.join(" + "))).collect::<Vec<_>>().join(" + ");
    format!("dim M\nblock wide({}) -> (y: f32[M, 4]) {{\n{}    y = {total}\n}}\n", params.join(", "), sums.concat())
}

/// The largest kernel that fits compiles (NVRTC takes its 32,760 bytes); one
/// tensor more is refused with a located error before anything is written
/// (NVRTC would say "Formal parameter space overflowed").
#[test]
fn a_kernel_past_the_parameter_limit_is_refused() {
    let compile = |inputs: usize| {
        let checked = coda::check("wide.coda", &wide_block(inputs)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
        coda::compile(&checked, &coda::CompileOptions::default())
    };
    let fits = compile(1364).unwrap_or_else(|e| panic!("{e}"));
    let bytes: Vec<usize> = fits.manifest.blocks[0].kernels.iter().map(param_bytes).collect();
    assert_eq!(bytes, [32_760]);
    match compile(1365) {
        Err(coda::CompileError::Codegen(coda::cuda::CodegenError::Limit { block, diagnostic, .. })) => {
            assert_eq!((block.as_str(), diagnostic.code), ("wide", "E0602"));
            assert!(!diagnostic.labels.is_empty() && diagnostic.help.is_some(), "{diagnostic:?}");
        }
        other => panic!("expected E0602, got {other:?}"),
    }
}

/// `n` repeats of `t = t - max(t) + sum(t, axis=0)`: each column sum needs a
/// kernel of its own.
fn reduction_chain(n: usize) -> String {
    let steps: String =
        (0..n).map(|i| format!("    let t{} = t{i} - max(t{i}, axis=-1) + sum(t{i}, axis=0)\n", i + 1)).collect();
    format!("dim M\nblock chain(x: f32[M, 64]) -> (y: f32[M, 64]) {{\n    let t0 = x\n{steps}    y = t{n}\n}}\n")
}

/// On a chain of reductions, a kernel that recomputed every earlier step
/// would take every earlier reduction as a parameter (808 fields at 100
/// steps, past CUDA's limit at about 680), and kernels, their parameters
/// and the manifest would grow quadratically. What a kernel recomputes is
/// bounded (`plan/recompute.rs`), so they grow linearly.
#[test]
fn chains_of_reductions_stay_linear() {
    let mut nodes = Vec::new();
    for n in [150, 300] {
        let checked = coda::check("chain.coda", &reduction_chain(n)).unwrap_or_else(|e| panic!("{e}"));
        let block = &compiled_blocks(&checked.module.blocks)[0];
        let options = coda::cuda::CodegenOptions::default();
        let compiled = coda::cuda::compile_block(block, &checked.source, &options).unwrap_or_else(|e| panic!("{e}"));
        let most = compiled.ir.kernels.iter().map(|k| k.buffers().len()).max().unwrap_or(0);
        assert!(most <= 100, "{n} steps: a kernel takes {most} tensors");
        nodes.push(compiled.ir.kernels.iter().map(|k| k.nodes.len()).sum::<usize>());
    }
    assert!(nodes[1] < nodes[0] * 5 / 2, "kernel nodes at 150 and 300 steps: {nodes:?}");
}
