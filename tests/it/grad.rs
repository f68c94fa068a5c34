//! Reverse-mode differentiation checked against central finite differences
//! in f64, on small shapes and several seeds: every example (with its dims
//! shrunk) and every case in `tests/cases/grad/` (one per op family).
//!
//! For a forward block `f` and random output gradients `dy`, the backward
//! block must give `∂L/∂x` for `L(x) = Σ_outputs Σ dy ⊙ f(x)`; each checked
//! element of each requested input is compared with
//! `(L(x + h e) - L(x - h e)) / 2h`. The backward's saved inputs come from
//! the saving forward on the same inputs.

use coda::grad::{differentiate, GradSpec, Gradient};
use coda::ir::Block;
use coda::{DimBindings, EvalOptions, HostTensor};
use std::collections::BTreeMap;

/// Finite-difference step.
const STEP: f64 = 1e-5;
/// Elements checked per input at most (spread over the tensor).
const MAX_CHECKED: usize = 48;

type Tensors = BTreeMap<String, HostTensor>;

fn exact() -> EvalOptions {
    EvalOptions { round_to_storage: false }
}

/// Integer inputs: small indices, every fourth row the ignore index -100.
fn integer_inputs(block: &Block, inputs: &mut Tensors) {
    for p in block.params.iter().filter(|p| p.dtype == coda::ir::DType::I32) {
        if let Some(t) = inputs.get_mut(&p.name) {
            for (k, x) in t.data.iter_mut().enumerate() {
                *x = if k % 4 == 3 { -100.0 } else { (*x).rem_euclid(7.0) };
            }
        }
    }
}

/// `Σ dy ⊙ f(x)` over the differentiated outputs.
fn loss(forward: &Block, dims: &DimBindings, inputs: &Tensors, grads: &Gradient, dy: &Tensors) -> f64 {
    let outputs = coda::eval(forward, dims, inputs, &exact()).unwrap_or_else(|e| panic!("{}: {e}", forward.name));
    let mut total = 0.0;
    for (j, name) in &grads.output_grads {
        let Some(weights) = dy.get(name) else { continue };
        let value = &outputs[&forward.outputs[*j].tensor.name];
        total += value.data.iter().zip(&weights.data).map(|(a, b)| a * b).sum::<f64>();
    }
    total
}

/// Evaluates the backward on inputs consistent with the forward.
fn backward(grads: &Gradient, dims: &DimBindings, inputs: &Tensors, seed: u64) -> (Tensors, Tensors) {
    let saved = coda::eval(&grads.saving_forward, dims, inputs, &exact()).unwrap_or_else(|e| panic!("saving: {e}"));
    let mut dy = coda::random_inputs(&grads.backward, dims, seed ^ 0x5eed).unwrap_or_else(|e| panic!("{e}"));
    dy.retain(|name, _| grads.output_grads.iter().any(|(_, n)| n == name));
    let mut all = inputs.clone();
    for s in &grads.saved {
        all.insert(s.name.clone(), saved[&s.name].clone());
    }
    all.extend(dy.clone());
    all.retain(|name, _| grads.backward.param(name).is_some());
    let outputs = coda::eval(&grads.backward, dims, &all, &exact()).unwrap_or_else(|e| panic!("backward: {e}"));
    (outputs, dy)
}

/// Checks one forward block's gradients on one seed; returns how many elements were compared.
fn check_against_differences(forward: &Block, spec: &GradSpec, dims: &DimBindings, seed: u64) -> usize {
    let grads = differentiate(forward, spec).unwrap_or_else(|e| panic!("{}: {e}", forward.name));
    let mut inputs = coda::random_inputs(forward, dims, seed).unwrap_or_else(|e| panic!("{e}"));
    integer_inputs(forward, &mut inputs);
    let (outputs, dy) = backward(&grads, dims, &inputs, seed);
    let mut compared = 0;
    for (i, out_name) in &grads.input_grads {
        let name = &forward.params[*i].name;
        let analytic = &outputs[out_name];
        let n = inputs[name].data.len();
        let stride = n.div_ceil(MAX_CHECKED).max(1);
        for k in (0..n).step_by(stride) {
            let x0 = inputs[name].data[k];
            let shifted = |delta: f64| {
                let mut shifted = inputs.clone();
                if let Some(t) = shifted.get_mut(name) {
                    t.data[k] = x0 + delta;
                }
                shifted
            };
            let up = loss(forward, dims, &shifted(STEP), &grads, &dy);
            let down = loss(forward, dims, &shifted(-STEP), &grads, &dy);
            let numeric = (up - down) / (2.0 * STEP);
            let got = analytic.data[k];
            let tolerance = 1e-6 + 1e-5 * got.abs().max(numeric.abs());
            assert!(
                (got - numeric).abs() <= tolerance,
                "{}: d{name}[{k}] = {got}, finite differences give {numeric} (seed {seed})",
                forward.name
            );
            compared += 1;
        }
    }
    compared
}

/// The file with every `dim NAME = …` whose name is in `small` given that value.
fn shrink_dims(text: &str, small: &[(&str, i64)]) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let replaced = match words.as_slice() {
            ["dim", name, "=", ..] => small.iter().find(|(n, _)| n == name).map(|(n, v)| format!("dim {n} = {v}")),
            _ => None,
        };
        out.push_str(&replaced.unwrap_or_else(|| line.to_string()));
        out.push('\n');
    }
    out
}

/// The small dims used for each example.
fn example_dims(file: &str) -> &'static [(&'static str, i64)] {
    match file {
        "llama3_block.coda" => &[("D", 8), ("F", 6), ("HD", 4), ("QH", 2), ("KVH", 1)],
        "gpt2_block.coda" => &[("D", 6), ("H", 10)],
        // A vocabulary of two groups of 8: the logits are saved as shifted exponentials.
        "lm_head_ce.coda" => &[("D", 6), ("V", 16)],
        "parallel_block.coda" => &[("D", 8), ("F", 6), ("HD", 4), ("H", 2)],
        "gemma_mlp.coda" => &[("D", 6), ("F", 5)],
        "out_proj_kernel.coda" => &[("D", 6)],
        "qwen2_layer.coda" | "mistral_layer.coda" | "qwen3_layer.coda" => {
            &[("D", 8), ("F", 6), ("HD", 4), ("QH", 2), ("KVH", 1)]
        }
        // Heads of 8, so that the rotated quarter is a pair.
        "gptneox_layer.coda" => &[("D", 16), ("F", 6), ("HD", 8)],
        // The q projection (QH · HD = 8) wider than the model, as in Gemma-2 2B.
        "gemma2_layer.coda" => &[("D", 6), ("F", 5), ("HD", 4), ("QH", 2), ("KVH", 1)],
        "phi3_layer.coda" | "olmo2_layer.coda" => &[("D", 8), ("F", 6), ("HD", 4), ("H", 2)],
        other => panic!("no small dims for {other}"),
    }
}

/// The gradients to check: the file's `grad` declarations, or the default
/// request for every block when it declares none.
fn gradients(checked: &coda::Checked) -> Vec<Gradient> {
    let view = coda::grad_view(checked).unwrap_or_else(|e| panic!("{}: {e}", checked.source.name));
    assert!(!view.has_errors(), "{}", view.render_diagnostics());
    view.grads
}

/// Every gradient of a file against finite differences, on three seeds.
fn check_file(checked: &coda::Checked) {
    let grads = gradients(checked);
    assert!(!grads.is_empty(), "{}: no gradient", checked.source.name);
    for gradient in &grads {
        let forward = checked.module.block(&gradient.forward).unwrap_or_else(|| panic!("{}", gradient.forward));
        let spec = GradSpec {
            name: gradient.backward.name.clone(),
            wrt: gradient.input_grads.iter().map(|(i, _)| *i).collect(),
            outputs: gradient.output_grads.iter().map(|(j, _)| *j).collect(),
            span: gradient.backward.span,
        };
        let dims: DimBindings = forward.symbolic_dims().map(|d| (d.to_string(), 5)).collect();
        let compared: usize =
            [1, 2, 3].iter().map(|&seed| check_against_differences(forward, &spec, &dims, seed)).sum();
        assert!(compared > 0, "{}: nothing compared", gradient.backward.name);
    }
}

/// `detach(x)` is `x` with no gradient: for `y = x ⊙ detach(x)` the
/// backward gives `dx = dy ⊙ x`, where finite differences, which move both
/// factors, would give `2 dy ⊙ x`; and a value computed only from detached
/// ones (a scale) gets no gradient of its own.
#[test]
fn no_gradient_flows_through_detach() {
    let text = "dim M\ndim N = 4\nblock f(x: f32[M, N]) -> (y: f32[M, N]) {\n    \
                let s = 2.0 / max(abs(detach(x)))\n    y = x * detach(x) * s\n}\n\
                grad f_grad = f wrt (x)\n";
    let checked = coda::check("detach.coda", text).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let gradient = gradients(&checked).remove(0);
    let sums = gradient
        .backward
        .insts
        .iter()
        .filter(|(_, i)| matches!(i, coda::ir::Inst::Reduce { op: coda::ir::ReduceOp::Sum, .. }));
    assert_eq!(
        sums.count(),
        0,
        "a gradient reaches the scale:\n{}",
        coda::ir::print::print_block(&gradient.backward, None)
    );
    let dims: DimBindings = [("M".to_string(), 3)].into_iter().collect();
    let inputs = coda::random_inputs(&checked.module.blocks[0], &dims, 1).unwrap_or_else(|e| panic!("{e}"));
    let (outputs, dy) = backward(&gradient, &dims, &inputs, 1);
    let (x, dy, dx) = (&inputs["x"].data, &dy["dy"].data, &outputs["dx"].data);
    let amax = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for k in 0..x.len() {
        let want = dy[k] * x[k] * (2.0 / amax);
        assert!((dx[k] - want).abs() <= 1e-12 * want.abs().max(1.0), "dx[{k}] = {}, want {want}", dx[k]);
    }
}

/// An example with its constant dims made small.
pub(crate) fn small_example(path: &std::path::Path) -> coda::Checked {
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let text = shrink_dims(&std::fs::read_to_string(path).unwrap_or_default(), example_dims(&file));
    let checked = coda::check(&format!("examples/{file}"), &text).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert!(!checked.has_errors(), "{file}:\n{}", checked.render_diagnostics());
    assert!(!checked.grads.is_empty(), "{file} declares no gradient");
    checked
}

/// The blocks of an example's training step at small dims, as `codac
/// compile --grad` partitions them (forward blocks reparameterized), with
/// their source.
pub(crate) fn step_blocks(file: &str) -> (Vec<Block>, coda::SourceFile) {
    let path = crate::cuda::workspace().join("examples").join(file);
    let view = coda::grad_view(&small_example(&path)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let blocks = view
        .module
        .blocks
        .iter()
        .map(|block| match block.kind {
            coda::ir::BlockKind::Block => {
                coda::opt::reparameterize(block, &coda::opt::Options::default())
                    .unwrap_or_else(|e| panic!("{file}: {e}"))
                    .block
            }
            _ => block.clone(),
        })
        .collect();
    (blocks, view.source)
}

#[test]
fn example_gradients_match_finite_differences() {
    insta::glob!("../../examples", "*.coda", |path: &std::path::Path| check_file(&small_example(path)));
}

#[test]
fn op_family_gradients_match_finite_differences() {
    insta::glob!("../cases/grad", "*.coda", |path: &std::path::Path| {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let header = coda_tests::header(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(header.stage, "grad", "{}", path.display());
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let checked = coda::check(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!checked.has_errors(), "{name}:\n{}", checked.render_diagnostics());
        check_file(&checked);
        emulate_backward(&checked);
    });
}

/// The kernels of every backward block (plain and reparameterized) on the
/// CPU emulator against the interpreter. An embedding's gradient (a
/// scatter-add of rows) and fp8 blocks have no kernels: the code generator
/// refuses them (`refused_constructs_are_refused_at_their_line` and
/// `tests/cuda-cases/fp8_refused.coda` check where).
fn emulate_backward(checked: &coda::Checked) {
    let view = coda::grad_view(checked).unwrap_or_else(|e| panic!("{e}"));
    let name = view.source.name.clone();
    for block in &view.module.blocks {
        if coda::cuda::limits::check_supported(block, &view.source).is_err() {
            continue;
        }
        crate::cuda::emulate_block(&name, block, &view.source, 3);
        let rewritten = coda::opt::reparameterize(block, &coda::opt::Options::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .block;
        crate::cuda::emulate_block(&name, &rewritten, &view.source, 3);
    }
}

/// The GPU cases' backward blocks at their own dims, among them per-head
/// norms (`qk_norm.coda`), whose nested group reductions the emulator
/// keeps: recomputed per element, one block takes minutes.
#[test]
fn backward_blocks_of_the_gpu_cases_emulate_like_the_interpreter() {
    let mut emulated = 0;
    for path in crate::cuda::inputs() {
        let name = crate::cuda::display_name(&path);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if name.starts_with("examples/") || crate::cuda::expects_error(&path, &text) {
            continue;
        }
        let checked = coda::check(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        if !checked.grads.is_empty() {
            emulate_backward(&checked);
            emulated += 1;
        }
    }
    assert!(emulated >= 5, "only {emulated} GPU cases declare gradients");
}

#[test]
fn backward_blocks_compile_and_emulate_like_the_interpreter() {
    insta::glob!("../../examples", "*.coda", |path: &std::path::Path| {
        let checked = small_example(path);
        let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{e}"));
        let name = view.source.name.clone();
        let compiled = coda::compile(&view, &coda::CompileOptions::default());
        let compiled = compiled.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(compiled.manifest.blocks.len(), view.module.blocks.len());
        emulate_backward(&checked);
    });
}

/// `examples/llama3_block.coda` with its backward blocks ([`coda::grad_view`]).
fn llama3_grad_view() -> coda::Checked {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama3_block.coda");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let checked = coda::check("examples/llama3_block.coda", &text).unwrap_or_else(|e| panic!("{e}"));
    coda::grad_view(&checked).unwrap_or_else(|e| panic!("{e}"))
}

/// Every example's backward block reads the block inputs that its GEMM
/// epilogues use as tile operands through staging buffers, so each quad
/// load checks bounds only (`cg::load4_aligned`, never the fully checked
/// `cg::load4`) and each pair loop is emitted once (docs/codegen.md,
/// "Aligned epilogue operands"). The Llama-3 and Gemma backward blocks
/// read their saved pre-activation in pair layout a quad per pair.
#[test]
fn gemm_epilogues_read_block_inputs_through_staging_buffers() {
    let mut quads = 0;
    for path in crate::cuda::inputs().iter().filter(|p| crate::cuda::display_name(p).starts_with("examples/")) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let name = crate::cuda::display_name(path);
        let checked = coda::check(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{name}: {e}"));
        let compiled = coda::compile(&view, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        for kernel in compiled.kernels.iter().filter(|k| k.source.contains("coda::gemm_sm90_rows<")) {
            let src = &kernel.source;
            assert!(!src.contains("const bool interior"), "{}: the pair loop emitted twice", kernel.file_name);
            assert!(!src.contains("cg::load4(p."), "{}: a quad load of an unaligned buffer", kernel.file_name);
            assert!(
                !src.contains("kStreamSlots, false>"),
                "{}: a quad stream of an unaligned buffer",
                kernel.file_name
            );
            quads += src.matches("cg::load4_aligned<").count()
                + src.matches("kStreamSlots, true>").count()
                + src.matches("cg::quad_bits<true>").count();
        }
    }
    assert!(quads >= 2, "{quads} aligned quad reads in the examples' backward blocks");
}

#[test]
fn nvrtc_compiles_the_llama3_backward() {
    let Some(compiler) = crate::cuda::nvrtc("the compile check") else { return };
    let view = llama3_grad_view();
    let compiled = coda::compile(&view, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(compiled.kernels.len() >= 8, "{} kernels", compiled.kernels.len());
    // The generated code is the same for every sm_80+ target; one architecture suffices here.
    let arch = coda_runtime::Arch::SM_90A;
    for kernel in &compiled.kernels {
        let options = coda_runtime::CompileOptions::new(arch).file_name(&kernel.file_name);
        let out = compiler.compile(&kernel.source, &options).unwrap_or_else(|e| panic!("{}: {e}", kernel.file_name));
        // Warnings (an unused column-index local in a concatenation) are the
        // emitter's, reported here without failing; errors fail.
        if out.has_warnings() {
            println!("note: {} has NVRTC warnings:\n{}", kernel.file_name, out.log);
        }
    }
}

/// The SwiGLU backward's epilogue stores three values: `dz = [dgate | dup]`
/// (two bf16 concatenation parts) and the recomputed `y = swiglu(z)` for
/// the weight gradient (docs/backward.md §3). It runs on staged subtiles
/// with three regions (`config::subtiles_pay`), one per stored value, all
/// from one quad of the saved `z` per pair, held a pair ahead.
#[test]
fn the_swiglu_backward_stores_dz_and_y_on_staged_subtiles() {
    let view = llama3_grad_view();
    let compiled = coda::compile(&view, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let dswiglu: Vec<_> =
        compiled.kernels.iter().filter(|k| k.source.contains("cg::quad_bits<true>(p.z_pairs_staged,")).collect();
    let [kernel] = dswiglu.as_slice() else { panic!("{} kernels read z_pairs a quad per pair", dswiglu.len()) };
    let src = &kernel.source;
    assert!(
        src.contains("coda::gemm_sm90_rows<coda::Sm90Cfg128x192pps3,"),
        "{}: not on staged subtiles",
        kernel.file_name
    );
    for put in [
        "coda::sub_put<__nv_bfloat16, coda::StagedOwnCols, 0>(f, t, i, j, p.tmp_dz_bf16,",
        "coda::sub_put<__nv_bfloat16, coda::StagedOwnCols, 1>(f, t, i, j, p.tmp_y_bf16,",
        "coda::sub_put<__nv_bfloat16, coda::StagedOwnCols, 2>(f, t, i, j, p.tmp_dz_bf16 + 14336,",
    ] {
        assert!(src.contains(put), "{}: no `{put}`", kernel.file_name);
    }
    assert!(!src.contains("const bool interior"), "{}: the pair loop emitted twice", kernel.file_name);
    assert!(!src.contains("coda::pack_acc<"), "{}: held in the accumulators", kernel.file_name);
    assert!(!src.contains("cg::st2"), "{}: an output stored pair by pair", kernel.file_name);
}

/// The Llama-3 training step stores every tensor once: the saving forward's
/// `x1` is the output the next GEMM reads (through a staging buffer, which
/// the runtime copies into the output only when the output is misaligned), the saved `x_out` is the output `x2`,
/// and the backward's `dx0` is `dx1`, the operand of the `w_o` GEMMs.
/// Gradients go between kernels in their tensors' types (docs/backward.md
/// §3): the Llama-3 backward passes no f32 tile from one kernel to
/// another, only per-row statistics; the dgrads that feed the RMSNorm
/// backward's row sums are stored in bf16, and the f32 products of a
/// stored dgrad and a gain are recomputed where they are read.
#[test]
fn a_backward_passes_gradients_in_their_tensors_types() {
    let view = llama3_grad_view();
    let gradient = view.grads.first().unwrap_or_else(|| panic!("no gradient"));
    let blocks = vec![gradient.backward.clone()];
    let module = coda::ir::Module { file_name: view.module.file_name.clone(), blocks };
    let backward = coda::Checked { module, ..view };
    let compiled = coda::compile(&backward, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let block = &compiled.manifest.blocks[0];
    let scratch: Vec<(&str, &str, &str)> = block
        .buffers
        .iter()
        .filter(|b| b.role == "scratch")
        .map(|b| (b.name.as_str(), b.dtype.as_str(), b.shape[1].as_str()))
        .collect();
    for (name, dtype, cols) in &scratch {
        assert!(*dtype != "f32" || *cols == "1", "{name}: an f32 tile passed between kernels ({cols} columns)");
    }
    assert!(scratch.iter().any(|(n, d, _)| *n == "tmp.dx_out.bf16" && *d == "bf16"), "{scratch:?}");
}

#[test]
fn a_training_step_stores_each_tensor_once() {
    let view = llama3_grad_view();
    let gradient = view.grads.first().unwrap_or_else(|| panic!("no gradient"));
    let saved: Vec<&str> = gradient.saved.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(saved, ["x1", "z_pairs", "x2"]);
    assert_eq!(gradient.saving_forward.outputs.len(), 4, "x2, qkv and the saved x1, z_pairs");
    let blocks = vec![gradient.saving_forward.clone(), gradient.backward.clone()];
    let module = coda::ir::Module { file_name: view.module.file_name.clone(), blocks };
    let steps = coda::Checked { module, ..view };
    let compiled = coda::compile(&steps, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut staged_outputs = Vec::new();
    for block in &compiled.manifest.blocks {
        for b in &block.buffers {
            let output = |name: &str| block.buffers.iter().any(|o| o.name == name && o.role == "output");
            if let Some(tensor) = b.staging_of.as_deref().filter(|t| output(t)) {
                staged_outputs.push(format!("{} for {tensor}", b.name));
            }
        }
        for k in &block.kernels {
            // `…; stores a (bf16), b (f32); …`: the buffers the kernel stores.
            let stored = k.summary.split("stores ").nth(1).and_then(|rest| rest.split(';').next()).unwrap_or("");
            let names: Vec<&str> = stored.split(", ").filter_map(|s| s.split(" (").next()).collect();
            for output in ["x1", "dx0"] {
                assert!(!names.contains(&output), "{} stores {output} besides its scratch: {}", k.file, k.summary);
            }
        }
    }
    assert_eq!(staged_outputs, ["tmp.x1.bf16 for x1", "tmp.dx1.bf16 for dx0"]);
}

/// The Llama-3 backward's CTA-per-row kernels move their rows in chunks of
/// eight columns (docs/codegen.md, "Row kernels in chunks"): the RoPE
/// backward reads `dqkv` at its columns and at the rotary partners' as two
/// chunk loads, and no row stream of any of them is read or written an
/// element at a time.
#[test]
fn row_kernels_read_and_write_rows_in_chunks() {
    let view = llama3_grad_view();
    let compiled = coda::compile(&view, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let cta_per_row = |src: &str| src.contains("const int m = (int)blockIdx.x;") && src.contains("cg::lane<256>()");
    let rows: Vec<_> = compiled.kernels.iter().filter(|k| cta_per_row(&k.source)).collect();
    assert!(rows.len() >= 3, "{} CTA-per-row kernels", rows.len());
    for kernel in rows {
        let (src, name) = (&kernel.source, &kernel.file_name);
        let body = &src[src.rfind("extern \"C\" __global__").unwrap_or(0)..];
        assert!(body.contains("cg::load_chunk(") && body.contains("cg::st_chunk("), "{name}: no chunk accesses");
        for line in body.lines().filter(|l| l.contains("cg::load(") || l.contains("cg::st(")) {
            assert!(
                line.contains("_ld, m, 0, ") || line.contains("(p.pos,"),
                "{name}: an element access of a row stream: {line}"
            );
        }
    }
    let rope = compiled.kernels.iter().find(|k| k.source.contains("cg::rope_partner(kv")).expect("the RoPE backward");
    assert_eq!(rope.source.matches("cg::load_chunk(dqkv").count(), 2, "{}", rope.file_name);
}

/// A subtiled epilogue that reads quads of an aligned buffer prefetches
/// the rows its tile's quads read into L2 before its pair loop
/// (docs/codegen.md, "Staged subtiles on ping-pong tiles"): the Llama-3
/// backward's dSwiGLU kernel.
#[test]
fn subtiled_quad_reads_prefetch_their_tile_rows() {
    let view = llama3_grad_view();
    let compiled = coda::compile(&view, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let subtiled_quads: Vec<_> = compiled
        .kernels
        .iter()
        .filter(|k| k.source.contains("coda::sub_begin(") && k.source.contains("cg::quad_bits<"))
        .collect();
    assert!(!subtiled_quads.is_empty(), "no subtiled epilogue reads quads");
    for kernel in subtiled_quads {
        let apply = &kernel.source[kernel.source.rfind("static __device__ void apply").unwrap_or(0)..];
        let prefetch = apply.find("cg::prefetch_rows_l2(f, p.z_pairs");
        let first_load = apply.find("cg::quad_bits<");
        assert!(prefetch.is_some() && prefetch < first_load, "{}: no prefetch before the quad loads", kernel.file_name);
    }
}

/// A backward the code generator has no kernel for, an embedding's table
/// gradient, is refused at the lookup's line with what to use instead.
#[test]
fn refused_constructs_are_refused_at_their_line() {
    let text = "dim M\ndim V = 9\ndim D = 4\n\
                block embed(ids: i32[M], table: bf16[V, D]) -> (y: bf16[M, D]) {\n    \
                    y = embedding(ids, table) * 2.0\n}\n\
                grad embed_grad = embed wrt (table)\n";
    let checked = coda::check("embed.coda", text).unwrap_or_else(|e| panic!("{e}"));
    let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{e}"));
    let error = match coda::compile(&view, &coda::CompileOptions::for_arch("sm_90a")) {
        Ok(_) => panic!("the backward of an embedding lookup compiled"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("embed.coda:5:9"), "{error}");
    assert!(error.contains("index_add_"), "{error}");
}
