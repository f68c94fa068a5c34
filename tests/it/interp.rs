//! The interpreter against formulas written out independently in the test,
//! and against hand-computed values.

use coda::{DimBindings, EvalOptions, HostTensor};
use std::collections::BTreeMap;

type Tensors = BTreeMap<String, HostTensor>;

/// Checks `source`, evaluates its only block on random inputs, returns (inputs, outputs).
fn run(source: &str, dims: &[(&str, i64)], seed: u64) -> (Tensors, Tensors) {
    let checked = coda::check("test.coda", source).unwrap_or_else(|e| panic!("internal error {e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let block = &checked.module.blocks[0];
    let dims: DimBindings = dims.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let inputs = coda::random_inputs(block, &dims, seed).unwrap_or_else(|e| panic!("{e}"));
    let outputs = coda::eval(block, &dims, &inputs, &EvalOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    (inputs, outputs)
}

fn close(a: f64, b: f64, what: &str) {
    assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{what}: {a} vs {b}");
}

#[test]
fn rmsnorm_matches_the_textbook_formula() {
    let src = "dim M\ndim N = 8\nblock b(x: f32[M, N], g: f32[N]) -> (y: f32[M, N]) { y = rmsnorm(x, g, 1e-5) }";
    let (i, o) = run(src, &[("M", 3)], 1);
    let (x, g, y) = (&i["x"], &i["g"], &o["y"]);
    for r in 0..3 {
        let ms: f64 = (0..8).map(|c| x.get(r, c) * x.get(r, c)).sum::<f64>() / 8.0;
        for c in 0..8 {
            close(y.get(r, c), x.get(r, c) / (ms + 1e-5).sqrt() * g.get(0, c), "rmsnorm");
        }
    }
}

#[test]
fn shorthands_match_their_textbook_formulas() {
    let src = "dim M\ndim N = 5\nblock b(x: f32[M, N]) -> (sq: f32[M, N], cl: f32[M, N], lo: f32[M, N], \
               p: f32[M, N], lp: f32[M, N], pc: f32[M, N], p3: f32[M, N], pm2: f32[M, N], p13: f32[M, N], \
               pf: f32[M, N], ph: f32[M, N], pmh: f32[M, N]) {\n\
               sq = square(x)\n cl = clamp(x, -0.5, 0.25)\n lo = clamp(x, min=0.1)\n\
               p = softmax(x)\n lp = log_softmax(x, axis=-1)\n pc = softmax(x, axis=0)\n\
               p3 = pow(x, 3)\n pm2 = pow(x, exponent=-2)\n p13 = pow(x, 13)\n\
               pf = pow(abs(x) + 1.0, 1.5)\n ph = pow(abs(x), 0.5)\n pmh = pow(abs(x) + 1.0, -0.5)\n}";
    let (i, o) = run(src, &[("M", 3)], 4);
    let x = &i["x"];
    for r in 0..3 {
        let row_sum: f64 = (0..5).map(|c| x.get(r, c).exp()).sum();
        for c in 0..5 {
            let v = x.get(r, c);
            let col_sum: f64 = (0..3).map(|q| x.get(q, c).exp()).sum();
            close(o["sq"].get(r, c), v * v, "square");
            close(o["cl"].get(r, c), v.clamp(-0.5, 0.25), "clamp");
            close(o["lo"].get(r, c), v.max(0.1), "clamp with min only");
            close(o["p"].get(r, c), v.exp() / row_sum, "softmax over a row");
            close(o["lp"].get(r, c), v - row_sum.ln(), "log_softmax");
            close(o["pc"].get(r, c), v.exp() / col_sum, "softmax over a column");
            close(o["p3"].get(r, c), v.powi(3), "pow 3");
            close(o["pm2"].get(r, c), v.powi(-2), "pow -2");
            close(o["p13"].get(r, c), v.powi(13), "pow 13");
            close(o["pf"].get(r, c), (v.abs() + 1.0).powf(1.5), "pow 1.5");
            close(o["ph"].get(r, c), v.abs().sqrt(), "pow 0.5");
            close(o["pmh"].get(r, c), 1.0 / (v.abs() + 1.0).sqrt(), "pow -0.5");
        }
    }
}

#[test]
fn layernorm_uses_the_biased_variance() {
    let src = "dim M\ndim N = 6\nblock b(x: f32[M, N], g: f32[N], c: f32[N]) -> (y: f32[M, N]) { y = layernorm(x, g, c, 1e-5) }";
    let (i, o) = run(src, &[("M", 2)], 2);
    let (x, g, b, y) = (&i["x"], &i["g"], &i["c"], &o["y"]);
    for r in 0..2 {
        let mu: f64 = (0..6).map(|c| x.get(r, c)).sum::<f64>() / 6.0;
        let var: f64 = (0..6).map(|c| (x.get(r, c) - mu).powi(2)).sum::<f64>() / 6.0;
        for c in 0..6 {
            close(y.get(r, c), (x.get(r, c) - mu) / (var + 1e-5).sqrt() * g.get(0, c) + b.get(0, c), "layernorm");
        }
    }
}

#[test]
fn norms_without_gain_or_bias_normalize_alone() {
    let src = "dim M\ndim N = 6\nblock b(x: f32[M, N], g: f32[N]) -> (l: f32[M, N], lg: f32[M, N], r: f32[M, N]) {\n\
               l = layernorm(x)\n lg = layernorm(x, g, eps=1e-3)\n r = rmsnorm(x, eps=1e-5)\n}";
    let (i, o) = run(src, &[("M", 3)], 5);
    let (x, g) = (&i["x"], &i["g"]);
    for r in 0..3 {
        let mu: f64 = (0..6).map(|c| x.get(r, c)).sum::<f64>() / 6.0;
        let var: f64 = (0..6).map(|c| (x.get(r, c) - mu).powi(2)).sum::<f64>() / 6.0;
        let ms: f64 = (0..6).map(|c| x.get(r, c).powi(2)).sum::<f64>() / 6.0;
        for c in 0..6 {
            let v = x.get(r, c);
            close(o["l"].get(r, c), (v - mu) / (var + 1e-5).sqrt(), "layernorm without gain and bias");
            close(o["lg"].get(r, c), (v - mu) / (var + 1e-3).sqrt() * g.get(0, c), "layernorm without bias");
            close(o["r"].get(r, c), v / (ms + 1e-5).sqrt(), "rmsnorm without gain");
        }
    }
}

#[test]
fn gelu_forms_match_reference_values() {
    let src = "dim M\nblock b(x: f32[M]) -> (e: f32[M], t: f32[M]) { e = gelu(x) t = gelu_tanh(x) }";
    let checked = coda::check("gelu.coda", src).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let block = &checked.module.blocks[0];
    let dims: DimBindings = [("M".to_string(), 3)].into();
    let x = HostTensor::new(coda::ir::DType::F32, 1, 3, vec![1.0, -0.5, 3.0]).unwrap_or_else(|e| panic!("{e}"));
    let inputs: Tensors = [("x".to_string(), x)].into();
    let o = coda::eval(block, &dims, &inputs, &EvalOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    // Values of 0.5·x·(1 + erf(x/√2)) and the tanh approximation, computed independently.
    let erf = [0.841_344_746_068_542_9, -0.154_268_769_362_993_44, 2.995_950_305_905_11];
    let tanh = [0.841_191_990_608_276_8, -0.154_285_990_174_856_06, 2.996_362_607_918_227];
    for k in 0..3 {
        assert!((o["e"].data[k] - erf[k]).abs() < 1e-12, "gelu erf at {k}: {}", o["e"].data[k]);
        assert!((o["t"].data[k] - tanh[k]).abs() < 1e-12, "gelu tanh at {k}: {}", o["t"].data[k]);
    }
}

#[test]
fn cross_entropy_ignores_rows_and_averages_the_rest() {
    let src = "dim M\ndim V = 5\nblock b(z: f32[M, V], t: i32[M]) -> (loss: f32, rows: f32[M]) {\n  loss = cross_entropy(z, t, ignore_index=-100)\n  rows = cross_entropy(z, t, ignore_index=-100, reduction=none)\n}";
    let checked = coda::check("ce.coda", src).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let block = &checked.module.blocks[0];
    let dims: DimBindings = [("M".to_string(), 3)].into();
    let z: Vec<f64> = (0..15).map(|k| ((k * 7) % 11) as f64 * 0.3 - 1.0).collect();
    let targets = vec![2.0, -100.0, 4.0];
    let inputs: Tensors = [
        ("z".to_string(), HostTensor::new(coda::ir::DType::F32, 3, 5, z.clone()).unwrap_or_else(|e| panic!("{e}"))),
        (
            "t".to_string(),
            HostTensor::new(coda::ir::DType::I32, 1, 3, targets.clone()).unwrap_or_else(|e| panic!("{e}")),
        ),
    ]
    .into();
    let o = coda::eval(block, &dims, &inputs, &EvalOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let row_loss = |r: usize, t: usize| {
        let row = &z[r * 5..r * 5 + 5];
        row.iter().map(|v| v.exp()).sum::<f64>().ln() - row[t]
    };
    let expected = [row_loss(0, 2), 0.0, row_loss(2, 4)];
    for (got, want) in o["rows"].data.iter().zip(expected) {
        close(*got, want, "per-row loss");
    }
    close(o["loss"].data[0], (expected[0] + expected[2]) / 2.0, "mean loss");
}

#[test]
fn rope_conventions_rotate_the_documented_pairs() {
    let src = "dim M\ndim N = 8\nblock b(x: f32[M, N], p: i32[M]) -> (h: f32[M, N], i: f32[M, N]) {\n  h = rope(x, p, head_dim=4, base=100.0, cols=0:8, style=half)\n  i = rope(x, p, head_dim=4, base=100.0, cols=0:4, style=interleaved)\n}";
    let (inp, o) = run(src, &[("M", 2)], 3);
    let (x, p) = (&inp["x"], &inp["p"]);
    for r in 0..2 {
        let pos = p.data[r];
        for head in 0..2 {
            for k in 0..2 {
                let theta = pos * 100f64.powf(-2.0 * k as f64 / 4.0);
                let (a, b) = (head * 4 + k, head * 4 + k + 2);
                close(o["h"].get(r, a), x.get(r, a) * theta.cos() - x.get(r, b) * theta.sin(), "half first");
                close(o["h"].get(r, b), x.get(r, b) * theta.cos() + x.get(r, a) * theta.sin(), "half second");
            }
        }
        for k in 0..2 {
            let theta = pos * 100f64.powf(-2.0 * k as f64 / 4.0);
            let (a, b) = (2 * k, 2 * k + 1);
            close(o["i"].get(r, a), x.get(r, a) * theta.cos() - x.get(r, b) * theta.sin(), "interleaved first");
            close(o["i"].get(r, b), x.get(r, b) * theta.cos() + x.get(r, a) * theta.sin(), "interleaved second");
        }
        for c in 4..8 {
            close(o["i"].get(r, c), x.get(r, c), "outside the rotated range");
        }
    }
}

#[test]
fn swiglu_and_linear_layout_matmul() {
    let src = "dim M\ndim D = 4\ndim F = 3\nblock b(x: bf16[M, D], w: bf16[2 * F, D]) -> (y: f32[M, F]) { y = swiglu(x @ w.T) }";
    let (i, o) = run(src, &[("M", 2)], 4);
    let (x, w) = (&i["x"], &i["w"]);
    for r in 0..2 {
        let z = |n: usize| (0..4).map(|k| x.get(r, k) * w.get(n, k)).sum::<f64>();
        for j in 0..3 {
            let (g, u) = (z(j), z(j + 3));
            close(o["y"].get(r, j), g / (1.0 + (-g).exp()) * u, "swiglu");
        }
    }
}

#[test]
fn row_subsets_of_row_local_blocks_match_the_full_evaluation() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/gpt2_block.coda"))
        .unwrap_or_default();
    let checked = coda::check("gpt2_block.coda", &text).unwrap_or_else(|e| panic!("{e}"));
    let block = &checked.module.blocks[0];
    assert_eq!(coda::ir::interp::row_local_dim(block).as_deref(), Some("M"));
    let dims: DimBindings = [("M".to_string(), 9)].into();
    let inputs = coda::random_inputs(block, &dims, 5).unwrap_or_else(|e| panic!("{e}"));
    let options = EvalOptions { round_to_storage: true };
    let full = coda::eval(block, &dims, &inputs, &options).unwrap_or_else(|e| panic!("{e}"));
    let rows = [7, 0, 4];
    let part = coda::ir::interp::eval_rows(block, &dims, &inputs, &options, &rows)
        .unwrap_or_else(|| panic!("gpt2 block should be row-local"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (f, p) = (&full["x2"], &part["x2"]);
    for (k, &r) in rows.iter().enumerate() {
        for c in 0..f.cols {
            assert_eq!(p.get(k, c).to_bits(), f.get(r, c).to_bits(), "row {r} col {c}");
        }
    }
}

#[test]
fn blocks_that_mix_rows_are_not_row_local() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/lm_head_ce.coda"))
        .unwrap_or_default();
    let checked = coda::check("lm_head_ce.coda", &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(coda::ir::interp::row_local_dim(&checked.module.blocks[0]), None, "the mean loss sums over rows");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/llama3_block.coda"))
        .unwrap_or_default();
    let checked = coda::check("llama3_block.coda", &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(coda::ir::interp::row_local_dim(&checked.module.blocks[0]).as_deref(), Some("M"));
}
