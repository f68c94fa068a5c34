//! End-to-end tests of `--grad`: `explain`, `eval` (with `.npy` inputs and
//! exact expected gradients), `compile`, and the diagnostics of a bad
//! `grad` declaration.

use std::path::{Path, PathBuf};

mod common;
use common::codac;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("codac-grad-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn explain_grad_lists_saved_tensors_and_the_backward_ir() {
    let out = codac(&["explain", "examples/llama3_block.coda", "--grad", "--color", "never"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for needle in [
        "// backward of block `llama3_layer`: computes dattn, dx0, dw_o",
        "// saved by the forward (3 tensor(s), stored by `llama3_layer_saving`):",
        "//   x1: bf16[M, 4096] = `bf16(x0 + attn @ w_o.T)`",
        "//   z_pairs: bf16[M, 28672] = `bf16(rmsnorm(x1, g_ffn, 1e-5) @ w_gu.T)` @ examples/llama3_block.coda:28:13,\n//        halves interleaved",
        "//   x2: bf16[M, 4096] = `bf16(x1 + y @ w_down.T)` @ examples/llama3_block.coda:30:17, the forward's output (stored once)",
        "// recomputed in the backward: y, and 34 other value(s)",
        "//      in the epilogue: `y`: it reads no accumulator, but is element-wise over this GEMM's output tile and reads z_pairs,",
        "block llama3_layer_grad {",
        "output dw_qkv =",
    ] {
        assert!(stdout.contains(needle), "missing `{needle}` in:\n{stdout}");
    }
    assert!(!stdout.contains("block llama3_layer {"), "the forward block is not shown with --grad");
}

#[test]
fn explain_grad_json_gives_the_saved_layout() {
    let out = codac(&["explain", "examples/llama3_block.coda", "--grad", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    let saved = json["blocks"][0]["grad"]["saved"].as_array().cloned().unwrap_or_default();
    let layout_of = |name: &str| saved.iter().find(|s| s["name"] == name).map(|s| s["layout"].clone());
    assert_eq!(layout_of("z_pairs"), Some(serde_json::json!("paired_halves")), "{saved:?}");
    assert_eq!(layout_of("x1"), Some(serde_json::json!("plain")), "{saved:?}");
}

#[test]
fn explain_grad_json_describes_each_backward_block() {
    let out = codac(&["explain", "examples/lm_head_ce.coda", "--grad", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    let block = &json["blocks"][0];
    assert_eq!(block["name"], "lm_head_ce_grad");
    let grad = &block["grad"];
    assert_eq!(grad["forward"], "lm_head_ce");
    assert_eq!(grad["saved"][0]["name"], "logits_exp");
    assert_eq!(grad["saved"][0]["dtype"], "bf16");
    assert_eq!(grad["saved"][0]["layout"], "shifted_exp");
    assert_eq!(grad["saved"][1]["name"], "logits_max");
    assert_eq!(grad["saved"][1]["shape"][1], "2004");
    assert_eq!(grad["saved"][1]["layout"], "group_max");
    assert_eq!(grad["given"][0]["output"], "loss");
    assert_eq!(grad["gradients"][2]["output"], "dw_lm");
    // The one-hot scatter of the cross-entropy gradient lowers to CUDA: the
    // backward compiles, its dgrad and wgrad are GEMM kernels.
    assert!(block["plan"]["compile_error"].is_null(), "{block}");
    let kernels = json["kernels"].as_array().map_or(0, |k| k.iter().filter(|k| k["kind"] == "gemm").count());
    assert_eq!(kernels, 2, "{json}");
}

/// `--saved-products` turns on the `zdz` rule: the RMSNorm backward's row
/// term becomes row partials of the dSwiGLU GEMM, and the dgrad GEMM's
/// epilogue forms `dx1`, so the two row kernels after it go.
#[test]
fn saved_products_move_the_norm_backward_into_epilogues() {
    let plain = codac(&["explain", "examples/llama3_block.coda", "--grad", "--color", "never"]);
    let zdz = codac(&["explain", "examples/llama3_block.coda", "--grad", "--saved-products", "--color", "never"]);
    assert_eq!(zdz.status.code(), Some(0), "{}", text(&zdz.stderr));
    let (plain, zdz) = (text(&plain.stdout), text(&zdz.stdout));
    assert!(plain.contains("// rules applied: none"), "{plain}");
    assert!(plain.contains("// kernels: 8 gemm, 3 elementwise, 1 reduction"), "{plain}");
    assert!(plain.contains("  saved %23 | %24 = matmul.bf16 %21, %3.T    ; made by the saving forward"), "{plain}");
    assert!(zdz.contains("// rules applied: row-dot-from-saved-product ×1"), "{zdz}");
    assert!(zdz.contains("// kernels: 8 gemm, 2 elementwise, 1 reduction"), "{zdz}");
    assert!(zdz.contains("reads tmp.dx_out.bf16, z_pairs, w_down; writes part.v107.row_sum, tmp.dz.bf16,"), "{zdz}");
    // dx0 = dx1: one store, into the output dx0 (read back by the w_o GEMMs).
    assert!(zdz.contains("Sm90Cfg128x256 tiles; stores tmp.v21.bf16 (bf16), tmp.dx1.bf16 (bf16);"), "{zdz}");
    assert!(zdz.contains("writes part.dg_ffn.col_sum, dx0, tmp.v21.bf16;"), "{zdz}");
}

fn write_npy(path: &Path, shape: &[u64], data: &[f32]) {
    use npyz::WriterBuilder;
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("{e}"));
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .unwrap_or_else(|e| panic!("{e}"));
    writer.extend(data.iter().copied()).unwrap_or_else(|e| panic!("{e}"));
    writer.finish().unwrap_or_else(|e| panic!("{e}"));
}

fn read_npy(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap_or_else(|e| panic!("{e}"));
    npy.into_vec::<f32>().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn eval_grad_reads_inputs_and_output_gradients() {
    let dir = temp_dir("eval");
    let file = dir.join("scale.coda");
    let source = "dim M\ndim N = 2\nblock scale(x: f32[M, N], w: f32[N]) -> (y: f32[M, N]) {\n    y = x * x * w\n}\ngrad scale_grad = scale wrt (x, w)\n";
    std::fs::write(&file, source).unwrap_or_else(|e| panic!("{e}"));
    let (x, w, dy) = ([1.0f32, 2.0, 3.0, -1.0], [0.5f32, 4.0], [1.0f32, -2.0, 0.25, 3.0]);
    write_npy(&dir.join("x.npy"), &[2, 2], &x);
    write_npy(&dir.join("w.npy"), &[2], &w);
    write_npy(&dir.join("dy.npy"), &[2, 2], &dy);
    let out_dir = dir.join("out");
    let args = [
        "eval",
        &path_str(&file),
        "--grad",
        "--dims",
        "M=2",
        "--inputs",
        &path_str(&dir),
        "--out",
        &path_str(&out_dir),
    ];
    let out = codac(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("block scale_grad (backward of scale):"));
    // y = x² w: dx = 2 x w dy, dw = Σ_rows x² dy.
    let dx: Vec<f32> = (0..4).map(|k| 2.0 * x[k] * w[k % 2] * dy[k]).collect();
    let dw: Vec<f32> = (0..2).map(|c| x[c] * x[c] * dy[c] + x[c + 2] * x[c + 2] * dy[c + 2]).collect();
    assert_eq!(read_npy(&out_dir.join("dx.npy")), dx);
    assert_eq!(read_npy(&out_dir.join("dw.npy")), dw);
}

#[test]
fn eval_grad_without_declarations_differentiates_every_block() {
    let out = codac(&["eval", "tests/cases/ir/rmsnorm_matmul.coda", "--grad", "--dims", "M=3", "--random"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("_grad (backward of "), "{}", text(&out.stdout));
}

#[test]
fn compile_grad_writes_the_kernels_of_training_steps() {
    let dir = temp_dir("compile");
    let out = codac(&["compile", "examples/gpt2_block.coda", "--grad", "-o", &path_str(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap_or_else(|e| panic!("{e}"));
    assert!(manifest.contains("\"gpt2_layer_saving\""), "{manifest}");
    assert!(manifest.contains("\"gpt2_layer_grad\""), "{manifest}");
    assert!(dir.join("gpt2_layer_grad_gemm_dw_qkv.cu").exists());
    let ce = codac(&["compile", "examples/lm_head_ce.coda", "--grad", "-o", &path_str(&dir)]);
    assert_eq!(ce.status.code(), Some(0), "{}", text(&ce.stderr));
    assert!(dir.join("lm_head_ce_grad_row_dlogits.cu").exists());
}

#[test]
fn a_gradient_of_an_integer_input_is_a_located_error() {
    let dir = temp_dir("error");
    let file = dir.join("ce.coda");
    let source = "dim M\ndim V = 4\nblock ce(z: f32[M, V], t: i32[M]) -> (loss: f32) {\n    loss = cross_entropy(z, t)\n}\ngrad ce_grad = ce wrt (z, t)\n";
    std::fs::write(&file, source).unwrap_or_else(|e| panic!("{e}"));
    let out = codac(&["explain", &path_str(&file), "--grad", "--color", "never"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("error[E0504]: `t` has no gradient: it is an integer tensor"), "{stderr}");
    assert!(stderr.contains("ce.coda:6:27"), "{stderr}");
}
