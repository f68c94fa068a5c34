//! The reparameterizer is checked by the interpreter: for every example, every
//! GPU-code case and every IR case that checks, each block's rewritten form
//! verifies and agrees with the original program on random inputs (several
//! seeds, several sizes of the run-time dims), in exact arithmetic (where
//! every rule is an identity up to f64 rounding) and with rounding to storage
//! types (where the rewritten program rounds at different points and must stay
//! within bf16 tolerance of the original, or, for an output the rounding
//! itself moves further, within the original's distance from the exact
//! result).

use coda::ir::Block;
use coda::{DimBindings, EvalOptions, HostTensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) fn coda_files(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "coda"))
        .collect();
    files.sort();
    files
}

fn blocks_of(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let checked = coda::check(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"));
    checked.module.blocks.into_iter().filter(|b| b.kind == coda::ir::BlockKind::Block).collect()
}

/// ‖a − b‖ / ‖b‖ over every output (0 when both are zero).
fn rel_l2(a: &BTreeMap<String, HostTensor>, b: &BTreeMap<String, HostTensor>, name: &str) -> f64 {
    let (x, y) = (&a[name].data, &b[name].data);
    assert_eq!(x.len(), y.len(), "output {name} changed size");
    let num: f64 = x.iter().zip(y).map(|(p, q)| (p - q) * (p - q)).sum();
    let den: f64 = y.iter().map(|q| q * q).sum();
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Rewrites `block` and compares it with the original; returns the rules applied.
fn check_block(block: &Block, what: &str, sizes: &[i64], seeds: &[u64]) -> BTreeMap<&'static str, usize> {
    check_block_with(block, what, sizes, seeds, &coda::opt::Options::default())
}

/// [`check_block`] with the reparameterizer's options.
fn check_block_with(
    block: &Block,
    what: &str,
    sizes: &[i64],
    seeds: &[u64],
    options: &coda::opt::Options,
) -> BTreeMap<&'static str, usize> {
    let random = |dims: &DimBindings, seed: u64, _: &EvalOptions| {
        coda::random_inputs(block, dims, seed).unwrap_or_else(|e| panic!("{what}: {e}"))
    };
    check_rewrite(block, what, sizes, seeds, options, random)
}

/// Rewrites `block` with `options` and compares it with the original on
/// the inputs `inputs(dims, seed, eval options)` gives, for every size and
/// seed, in exact arithmetic and with rounding; returns the rules applied.
fn check_rewrite(
    block: &Block,
    what: &str,
    sizes: &[i64],
    seeds: &[u64],
    options: &coda::opt::Options,
    inputs: impl Fn(&DimBindings, u64, &EvalOptions) -> BTreeMap<String, HostTensor>,
) -> BTreeMap<&'static str, usize> {
    let rewritten = coda::opt::reparameterize(block, options).unwrap_or_else(|e| panic!("{what}: {e}"));
    coda::ir::verify::verify(&rewritten.block).unwrap_or_else(|e| panic!("{what}: rewritten block: {e}"));
    for &size in sizes {
        let dims: DimBindings = block.symbolic_dims().map(|d| (d.to_string(), size)).collect();
        for &seed in seeds {
            let mut exact = BTreeMap::new();
            for (round, tolerance) in [(false, 1e-9f64), (true, 1e-2)] {
                let options = EvalOptions { round_to_storage: round };
                let inputs = inputs(&dims, seed, &options);
                let original = coda::eval(block, &dims, &inputs, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
                let new = coda::eval(&rewritten.block, &dims, &inputs, &options)
                    .unwrap_or_else(|e| panic!("{what}: rewritten: {e}"));
                for name in original.keys() {
                    // A rule may round at other points than the original
                    // (a summed product rounds once): with rounding, the
                    // rewritten output is compared with the exact result,
                    // and may be as far from it as a few times the
                    // original is (the output's own conditioning), and no
                    // more. The two trade one bf16-level error for
                    // another: with one row, where the weight and gain
                    // gradients are outer products of single rounded rows,
                    // both reach 2-6% and either may be the larger
                    // (Gemma-2's backward: the rewritten one in about half
                    // of the outputs, up to 2.1 times the original's).
                    let (err, bound) = match round {
                        true => (rel_l2(&new, &exact, name), tolerance.max(3.0 * rel_l2(&original, &exact, name))),
                        false => (rel_l2(&new, &original, name), tolerance),
                    };
                    assert!(
                        err <= bound,
                        "{what}: output {name} differs after rewriting (rel. L2 {err:e} from the {}, bound {bound:e}, \
                         size {size}, seed {seed}, rounding {round}); rules {:?}",
                        if round { "exact result" } else { "original" },
                        rewritten.applied
                    );
                }
                if !round {
                    exact = original;
                }
            }
        }
    }
    rewritten.applied
}

#[test]
fn rewrites_of_examples_agree_with_the_original() {
    let mut seen = BTreeMap::new();
    for path in coda_files("examples") {
        for block in blocks_of(&path) {
            let what = format!("{} / {}", path.display(), block.name);
            seen.insert(block.name.clone(), check_block(&block, &what, &[3], &[1, 2]));
        }
    }
    // The rules that make the examples' kernel counts, at least once each.
    let llama = seen.get("llama3_layer").cloned().unwrap_or_default();
    assert_eq!(llama.get("row-scale-through-matmul"), Some(&2), "{llama:?}");
    assert_eq!(llama.get("gated-pair-layout"), Some(&1), "{llama:?}");
    assert_eq!(llama.get("rope-pair-layout"), Some(&1), "{llama:?}");
    assert_eq!(llama.get("unpermute-in-store"), Some(&1), "{llama:?}");
    // Separate gate and up weights: one product of both, in the gated pair layout.
    let mistral = seen.get("mistral_layer").cloned().unwrap_or_default();
    assert_eq!(mistral.get("stacked-sibling-weights"), Some(&1), "{mistral:?}");
    assert_eq!(mistral.get("gated-pair-layout"), Some(&1), "{mistral:?}");
    // LayerNorm deferral, once per LayerNorm (two of them).
    let gpt2 = seen.get("gpt2_layer").cloned().unwrap_or_default();
    for rule in ["row-scale-through-matmul", "row-shift-through-matmul", "bias-through-matmul", "variance-from-moments"]
    {
        assert_eq!(gpt2.get(rule), Some(&2), "{rule}: {gpt2:?}");
    }
}

#[test]
fn rewrites_of_cases_agree_with_the_original() {
    for dir in ["tests/cuda-cases", "tests/cases/ir"] {
        for path in coda_files(dir) {
            for block in blocks_of(&path) {
                let what = format!("{} / {}", path.display(), block.name);
                check_block(&block, &what, &[1, 4, 37], &[1, 2, 3]);
            }
        }
    }
}

/// The inference option: norm gains folded into the weights. The rewritten
/// blocks agree with the originals, every deferred norm's gain moves, and
/// the folded weights are made by weight-preparation kernels (the norm
/// consumers' kernel counts do not change).
#[test]
fn folded_gains_agree_with_the_original() {
    let options = coda::opt::Options { fold_gains: true, ..coda::opt::Options::default() };
    let expected = [("gpt2_block.coda", 2, 6), ("lm_head_ce.coda", 1, 1), ("llama3_block.coda", 2, 2)];
    for (file, folds, weight_preps) in expected {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(file);
        let block = blocks_of(&path).into_iter().next().unwrap_or_else(|| panic!("{file}: no block"));
        let applied = check_block_with(&block, file, &[3], &[1], &options);
        assert_eq!(applied.get("gain-into-weight"), Some(&folds), "{file}: {applied:?}");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let checked = coda::check(file, &text).unwrap_or_else(|e| panic!("{e}"));
        let explain = coda::ExplainOptions { rewrite: options, ..Default::default() };
        let json = coda::explain_json_with(&checked, &explain);
        let kernels: Vec<_> = json["kernels"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|k| k["block"] == block.name.as_str())
            .collect();
        let count = |kind: &str| kernels.iter().filter(|k| k["kind"] == kind).count();
        assert_eq!(count("weight_prep"), weight_preps, "{file}: {kernels:?}");
    }
}

/// The saving forwards of the gated examples (the forward plus the tensors
/// it saves for the backward, `docs/backward.md` §3) agree with their
/// originals after rewriting, and store the pre-activation saved in pair
/// layout as the pair-layout accumulator itself (`interleave-of-halves`).
#[test]
fn rewrites_of_saving_forwards_agree_with_the_original() {
    for file in ["llama3_block.coda", "gemma_mlp.coda", "mistral_layer.coda"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let checked = coda::check(file, &text).unwrap_or_else(|e| panic!("{e}"));
        let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{file}: {e}"));
        let saving = &view.grads.first().unwrap_or_else(|| panic!("{file}: no grad")).saving_forward;
        let applied = check_block(saving, &format!("{file} / {}", saving.name), &[3], &[1]);
        assert_eq!(applied.get("interleave-of-halves"), Some(&1), "{file}: {applied:?}");
        assert_eq!(applied.get("gated-pair-layout"), Some(&1), "{file}: {applied:?}");
    }
}

/// The backward blocks of the examples agree with their originals after
/// rewriting (with the opt-in `zdz` rule), on the inputs a training step
/// gives them: the saved tensors
/// are the saving forward's on the same forward inputs (the
/// `row-dot-from-saved-product` rule reads them in place of recomputation,
/// so it holds for those inputs only), the output gradients random.
#[test]
fn rewrites_of_backward_blocks_agree_with_the_original() {
    let mut seen = BTreeMap::new();
    for path in coda_files("examples") {
        // The examples with their constant dims made small (as for the
        // finite differences), so that the interpreter runs in seconds.
        let checked = crate::grad::small_example(&path);
        let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for gradient in &view.grads {
            let what = format!("{} / {}", path.display(), gradient.backward.name);
            let applied = check_backward(gradient, &what, &[1, 5, 37], &[1, 2, 3]);
            seen.insert(gradient.backward.name.clone(), applied);
        }
    }
    let rule = "row-dot-from-saved-product";
    // The LM head saves its logits as shifted exponentials, not as the
    // product the rule reads (docs/backward.md §3).
    for (block, count) in [("llama3_layer_grad", 1), ("lm_head_ce_grad", 0), ("gemma_mlp_grad", 1)] {
        let applied = seen.get(block).cloned().unwrap_or_default();
        assert_eq!(applied.get(rule).copied().unwrap_or(0), count, "{block}: {applied:?}");
    }
    // Separate q/k/v and gate/up weights: the input gradients they share
    // are one product each; a fused weight leaves no sum to take.
    let rule = "summed-products";
    for (block, count) in [("qwen3_layer_grad", 2), ("gemma2_layer_grad", 2), ("llama3_layer_grad", 0)] {
        let applied = seen.get(block).cloned().unwrap_or_default();
        assert_eq!(applied.get(rule).copied().unwrap_or(0), count, "{block}: {applied:?}");
    }
}

/// [`check_block`] for a backward block, with the `zdz` rule on, on a
/// training step's inputs.
fn check_backward(
    gradient: &coda::grad::Gradient,
    what: &str,
    sizes: &[i64],
    seeds: &[u64],
) -> BTreeMap<&'static str, usize> {
    let block = &gradient.backward;
    let options = coda::opt::Options { saved_products: true, ..coda::opt::Options::default() };
    let step = |dims: &DimBindings, seed: u64, eval: &EvalOptions| {
        let forward = &gradient.saving_forward;
        let mut inputs = coda::random_inputs(forward, dims, seed).unwrap_or_else(|e| panic!("{what}: {e}"));
        let saved = coda::eval(forward, dims, &inputs, eval).unwrap_or_else(|e| panic!("{what}: {e}"));
        inputs.extend(saved);
        let given = coda::random_inputs(block, dims, seed ^ 0x6772).unwrap_or_else(|e| panic!("{what}: {e}"));
        for (name, t) in given {
            inputs.entry(name).or_insert(t);
        }
        inputs.retain(|name, _| block.param(name).is_some());
        inputs
    };
    check_rewrite(block, what, sizes, seeds, &options, step)
}

/// A norm without learned parameters, whether its gain and bias are left
/// out or written as the literals `1.0` and `0.0`, defers through the
/// matmul it feeds like a norm with a gain, and the rewritten block agrees
/// with the original.
#[test]
fn norms_without_parameters_defer_through_the_matmul() {
    for norm in ["layernorm(x)", "layernorm(x, 1.0, 0.0, eps=1e-5)", "rmsnorm(x)", "rmsnorm(x, 1.0)"] {
        let src = format!(
            "dim M\ndim D = 64\ndim N = 32\nblock b(x: bf16[M, D], w: bf16[N, D]) -> (y: bf16[M, N]) {{\n    \
             y = bf16({norm} @ w.T)\n}}\n"
        );
        let checked = coda::check("norm.coda", &src).unwrap_or_else(|e| panic!("{norm}: {e}"));
        assert!(!checked.has_errors(), "{norm}: {}", checked.render_diagnostics());
        let block = &checked.module.blocks[0];
        let applied = check_block(block, norm, &[3], &[1]);
        assert_eq!(applied.get("row-scale-through-matmul"), Some(&1), "{norm}: {applied:?}");
    }
}

/// A bias between a projection and its rotate-half RoPE is read in the pair
/// layout, so the RoPE still runs in the GEMM's epilogue: one GEMM kernel
/// and no row kernel.
#[test]
fn a_bias_before_rope_keeps_the_pair_layout() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cuda-cases/bias_rope.coda");
    let block = blocks_of(&path).into_iter().next().unwrap_or_else(|| panic!("{}: no block", path.display()));
    let rules = check_block(&block, "bias_rope", &[1, 4, 37], &[1, 2]);
    assert_eq!(rules.get("rope-pair-layout"), Some(&1), "{rules:?}");
    assert_eq!(rules.get("permuted-column-vector"), Some(&1), "{rules:?}");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let checked = coda::check(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"));
    let json = coda::explain_json(&checked);
    let kernels: Vec<_> = json["kernels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|k| k["block"] == "qkv_bias_rope" && k["kind"] != "fallback")
        .map(|k| k["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kernels, ["gemm"], "{json}");
}

/// Sibling weights: two products of one left operand are stacked only where
/// their results meet in element-wise work (not q and k stored apart), and
/// a stack that keeps no pair layout (pair layouts off, as in a saving
/// forward stacked before differentiation) is computed as its parts again;
/// each form agrees with the original.
#[test]
fn sibling_weights_stack_where_they_meet_and_split_without_pair_layouts() {
    let src = "dim M\ndim D = 64\ndim F = 96\n\
        block gated(h: bf16[M, D], w1: bf16[F, D], w2: bf16[F, D]) -> (y: bf16[M, F]) {\n    \
            y = bf16(silu(bf16(h @ w1.T)) * bf16(h @ w2.T))\n}\n\
        block apart(h: bf16[M, D], w1: bf16[F, D], w2: bf16[F, D]) -> (a: bf16[M, F], b: bf16[M, F]) {\n    \
            a = h @ w1.T\n    b = h @ w2.T\n}\n\
        grad gated_grad = gated wrt (h, w1, w2)\n";
    let checked = coda::check("siblings.coda", src).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let [gated, apart] = [&checked.module.blocks[0], &checked.module.blocks[1]];
    let applied = check_block(gated, "gated", &[1, 5], &[1, 2]);
    assert_eq!(applied.get("stacked-sibling-weights"), Some(&1), "{applied:?}");
    assert_eq!(applied.get("gated-pair-layout"), Some(&1), "{applied:?}");
    let applied = check_block(apart, "apart", &[3], &[1]);
    assert_eq!(applied.get("stacked-sibling-weights"), None, "{applied:?}");
    let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{e}"));
    let saving = &view.grads.first().unwrap_or_else(|| panic!("no grad")).saving_forward;
    assert!(saving.insts.iter().any(|(_, i)| matches!(i, coda::ir::Inst::StackRows { .. })));
    // `explain --grad` names the saved product by both weights.
    let text = coda::explain_text(&view);
    assert!(text.contains("= `h @ [w1; w2].T`"), "{text}");
    let off = coda::opt::Options { pair_layouts: false, ..coda::opt::Options::default() };
    let applied = check_block_with(saving, "saving, pair layouts off", &[1, 5], &[1, 2], &off);
    assert_eq!(applied.get("unstacked-sibling-weights"), Some(&1), "{applied:?}");
    let split = coda::opt::reparameterize(saving, &off).unwrap_or_else(|e| panic!("{e}")).block;
    assert!(!split.insts.iter().any(|(_, i)| matches!(i, coda::ir::Inst::StackRows { .. })));
}
