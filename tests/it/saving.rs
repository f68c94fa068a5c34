//! What the forward saves for the backward (docs/backward.md §3) and where
//! the backward recomputes what it does not save: an activation's output
//! that feeds a matmul is recomputed from the pre-activation the backward
//! reads anyway, in the epilogue of the dgrad GEMM that already loads it
//! (docs/codegen.md, "Values that join an epilogue").

/// The saved tensors of each gradient of the example `file`.
fn saved_of(file: &str) -> Vec<Vec<String>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(file);
    let checked = crate::grad::small_example(&path);
    let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{file}: {e}"));
    view.grads.iter().map(|g| g.saved.iter().map(|s| s.name.clone()).collect()).collect()
}

/// SwiGLU, GeGLU and GELU outputs, each the operand of the next matmul, are
/// element-wise functions of a pre-activation the backward reads for its
/// own derivative, so none is saved.
#[test]
fn activation_outputs_are_recomputed_from_the_saved_pre_activation() {
    assert_eq!(saved_of("llama3_block.coda"), [["x1", "z_pairs", "x2"]]);
    assert_eq!(saved_of("gemma_mlp.coda"), [["x1", "z_pairs"]]);
    assert_eq!(saved_of("gpt2_block.coda"), [["x1", "mm1", "x2"]]);
}

/// An operand whose recomputation would read a tensor the backward does not
/// read otherwise stays saved in the operand type: `h = 2z` needs no `z`
/// for its derivative, so recomputing `h` would read the `f32` `z` (twice
/// the bytes of `h` in bf16) only for that.
#[test]
fn an_operand_of_tensors_the_backward_does_not_read_stays_saved() {
    let text = "dim M\n\
        block f(x: bf16[M, 64], w1: bf16[128, 64], w2: bf16[32, 128]) -> (y: bf16[M, 32]) {\n\
            let z = x @ w1.T\n\
            let h = z * 2.0\n\
            y = h @ w2.T\n\
        }\n\
        grad f_grad = f wrt (x, w1, w2)\n";
    let checked = coda::check("scaled.coda", text).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let gradient = checked.grads.first().unwrap_or_else(|| panic!("no gradient"));
    let saved: Vec<(&str, coda::ir::DType)> = gradient.saved.iter().map(|s| (s.name.as_str(), s.ty.dtype)).collect();
    assert_eq!(saved, [("h", coda::ir::DType::BF16)]);
}

/// The Llama-3 backward reads the saved `z_pairs` in one kernel, the dgrad
/// GEMM `dy = dx_out @ w_down`, a quad per accumulator pair; that epilogue
/// also stores the recomputed `y = swiglu(z)` for the weight gradient
/// `dx_out.T @ y`, and explain says why.
#[test]
fn the_dgrad_epilogue_stores_the_recomputed_swiglu() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama3_block.coda");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let checked = coda::check("examples/llama3_block.coda", &text).unwrap_or_else(|e| panic!("{e}"));
    let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{e}"));
    let compiled = coda::compile(&view, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let readers: Vec<_> = compiled.kernels.iter().filter(|k| k.source.contains("p.z_pairs")).collect();
    let [kernel] = readers.as_slice() else { panic!("{} kernels read z_pairs", readers.len()) };
    let src = &kernel.source;
    assert!(src.contains("cg::quad_bits<true>(p.z_pairs_staged,"), "{}", kernel.file_name);
    assert_eq!(src.matches("(qh0[j % 2][i])").count(), 1, "{}: one quad per pair", kernel.file_name);
    assert!(src.contains("p.tmp_y_bf16"), "{}: does not store y", kernel.file_name);
    assert!(src.contains("p.tmp_dz_bf16"), "{}: does not store dz", kernel.file_name);
    let explain = coda::explain_text(&view);
    assert!(explain.contains("in the epilogue: `y`: it reads no accumulator"), "{explain}");
}

/// A row statistic that the forward outputs is read from that output: the
/// LM head's backward forms the softmax from the saved logits and the
/// output `lse`, and no backward kernel takes the logits' log-sum-exp
/// again. Without the output, the backward recomputes it.
#[test]
fn a_log_sum_exp_the_forward_outputs_is_not_recomputed() {
    assert_eq!(saved_of("lm_head_ce.coda"), [["logits_exp", "logits_max", "lse"]]);
    let text = |with_lse: bool| {
        format!(
            "dim M\n\
             block ce(h: bf16[M, 64], w: bf16[512, 64], t: i32[M]) -> (loss: f32{}) {{\n    \
                 let logits = h @ w.T\n    \
                 loss = cross_entropy(logits, t)\n{}\
             }}\n\
             grad ce_grad = ce(loss) wrt (h, w)\n",
            if with_lse { ", lse: f32[M]" } else { "" },
            if with_lse { "    lse = logsumexp(logits, axis=-1)\n" } else { "" },
        )
    };
    for with_lse in [true, false] {
        let checked = coda::check("ce.coda", &text(with_lse)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
        let gradient = checked.grads.first().unwrap_or_else(|| panic!("no gradient"));
        let logsumexps = gradient
            .backward
            .insts
            .iter()
            .filter(|(_, i)| matches!(i, coda::ir::Inst::Reduce { op: coda::ir::ReduceOp::LogSumExp, .. }))
            .count();
        assert_eq!(logsumexps, usize::from(!with_lse), "log-sum-exps in the backward, lse output: {with_lse}");
    }
}

/// Logits that the backward reads only through the softmax are saved as
/// bf16 exponentials shifted by the maximum of each group of columns, the
/// widest of 64, 32, 16 and 8 that divides the vocabulary, and those
/// maxima; a vocabulary that none divides keeps its f32 logits. The
/// backward's gradients against finite differences:
/// `example_gradients_match_finite_differences` (`lm_head_ce.coda`).
#[test]
fn a_softmax_reads_its_logits_as_shifted_exponentials() {
    let saved = |vocabulary: i64| {
        let text = format!(
            "dim M\n\
             block ce(h: bf16[M, 64], w: bf16[{vocabulary}, 64], t: i32[M]) -> (loss: f32, lse: f32[M]) {{\n    \
                 let logits = h @ w.T\n    \
                 loss = cross_entropy(logits, t)\n    \
                 lse = logsumexp(logits, axis=-1)\n\
             }}\n\
             grad ce_grad = ce(loss) wrt (h, w)\n"
        );
        let checked = coda::check("ce.coda", &text).unwrap_or_else(|e| panic!("{e}"));
        assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
        let gradient = checked.grads.first().unwrap_or_else(|| panic!("no gradient"));
        let saved: Vec<String> =
            gradient.saved.iter().map(|s| format!("{} {}[{}]", s.name, s.ty.dtype.name(), s.ty.shape.cols)).collect();
        saved.join(", ")
    };
    assert_eq!(saved(512), "logits_exp bf16[512], logits_max f32[8], lse f32[1]");
    assert_eq!(saved(96), "logits_exp bf16[96], logits_max f32[3], lse f32[1]");
    assert_eq!(saved(24), "logits_exp bf16[24], logits_max f32[3], lse f32[1]");
    assert_eq!(saved(100), "logits f32[100], lse f32[1]");
}

/// A normalised tensor that the forward outputs is read from that output:
/// Gemma-2's layer output `x2 = bf16(x1 + rmsnorm(mlp, …))`, which the
/// next layer's input norm reads, is saved as the output itself (the
/// saving forward stores nothing more for it), and the input norm's dgrad
/// GEMM reads it instead of recomputing it from `x0`, `mm0` and `mlp`.
#[test]
fn a_normalised_tensor_the_forward_outputs_is_not_recomputed() {
    assert_eq!(saved_of("gemma2_layer.coda"), [["mm0", "gate_up_pairs", "mlp", "x2"]]);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gemma2_layer.coda");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let checked = coda::check("examples/gemma2_layer.coda", &text).unwrap_or_else(|e| panic!("{e}"));
    let gradient = checked.grads.first().unwrap_or_else(|| panic!("no gradient"));
    let x2 = gradient.saved.iter().find(|s| s.name == "x2").unwrap_or_else(|| panic!("x2 not saved"));
    assert!(x2.output.is_some(), "x2 is saved as the forward's output");
    let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{e}"));
    let compiled = coda::compile(&view, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let dhn = (compiled.kernels.iter().find(|k| k.file_name.ends_with("_gemm_dhn.cu")))
        .unwrap_or_else(|| panic!("no gemm_dhn"));
    assert!(dhn.source.contains("p.x2"), "gemm_dhn reads x2");
    for recomputed in ["p.x0", "p.mm0", "p.mlp"] {
        assert!(!dhn.source.contains(recomputed), "gemm_dhn reads {recomputed}");
    }
}

/// Two matmuls whose results feed one residual sum ending in a 16-bit cast
/// share that cast as their save point, which is saved once: GPT-NeoX's
/// parallel attention and MLP, `x2 = bf16(x0 + (attn @ w_o.T + b_o) + mlp)`.
#[test]
fn a_save_point_two_matmuls_share_is_saved_once() {
    assert_eq!(saved_of("gptneox_layer.coda"), [["mm0", "x2"]]);
}
