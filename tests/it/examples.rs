//! The examples in `examples/` check without diagnostics, print stable IR and
//! evaluate on random inputs to finite outputs.

use coda::{DimBindings, EvalOptions};
use std::path::Path;

fn check_example(path: &Path) -> coda::Checked {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let name = format!("examples/{}", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
    let checked = coda::check(&name, &text).unwrap_or_else(|e| panic!("{name}: internal error {e}"));
    assert!(checked.diagnostics.is_empty(), "{name}:\n{}", checked.render_diagnostics());
    assert!(!checked.module.blocks.is_empty(), "{name} defines no block");
    checked
}

#[test]
fn examples_print_stable_ir() {
    insta::glob!("../../examples", "*.coda", |path: &Path| {
        let checked = check_example(path);
        insta::assert_snapshot!(coda::explain_text(&checked));
    });
}

#[test]
fn examples_evaluate_to_finite_outputs() {
    insta::glob!("../../examples", "*.coda", |path: &Path| {
        let checked = check_example(path);
        for block in &checked.module.blocks {
            let dims: DimBindings = block.symbolic_dims().map(|d| (d.to_string(), 24)).collect();
            let inputs = coda::random_inputs(block, &dims, 1).unwrap_or_else(|e| panic!("{}: {e}", block.name));
            for rounding in [false, true] {
                let outputs = coda::eval(block, &dims, &inputs, &EvalOptions { round_to_storage: rounding })
                    .unwrap_or_else(|e| panic!("{}: {e}", block.name));
                assert_eq!(outputs.len(), block.outputs.len());
                for (name, tensor) in &outputs {
                    assert!(tensor.data.iter().all(|v| v.is_finite()), "{}: output {name} is not finite", block.name);
                    assert!(tensor.data.iter().any(|v| *v != 0.0), "{}: output {name} is all zeros", block.name);
                }
            }
        }
    });
}

/// The `// expect-kernels:` header of an example: kind → count.
fn expected_kernels(text: &str) -> Option<Vec<(String, usize)>> {
    let line = text.lines().find_map(|l| l.strip_prefix("// expect-kernels:"))?;
    line.split(',')
        .map(|part| {
            let mut words = part.split_whitespace();
            Some((words.next()?.to_string(), words.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn examples_compile_to_the_kernel_counts_in_their_headers() {
    insta::glob!("../../examples", "*.coda", |path: &Path| {
        let checked = check_example(path);
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let expected =
            expected_kernels(&text).unwrap_or_else(|| panic!("{}: no `// expect-kernels:` header", path.display()));
        let json = coda::explain_json(&checked);
        let kernels = json["kernels"].as_array().cloned().unwrap_or_default();
        for (kind, count) in expected {
            let actual = kernels.iter().filter(|k| k["kind"] == kind.as_str()).count();
            assert_eq!(actual, count, "{}: {kind} kernels", path.display());
        }
        for k in &kernels {
            assert!(k["bytes_moved"].as_u64().is_some_and(|b| b > 0), "{}: {k}", path.display());
        }
    });
}

/// The LM head's loss keeps only per-row partials in its GEMM's epilogue,
/// so the GEMM runs on ping-pong tiles, which take no row prelude: its norm
/// is a row kernel of its own, whether or not row preludes are on.
#[test]
fn lm_head_loss_runs_on_ping_pong_tiles_after_its_norm() {
    let checked = check_example(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lm_head_ce.coda"));
    let count = |row_preludes: bool, kind: &str| {
        let mut options = coda::ExplainOptions::default();
        options.codegen.row_preludes = row_preludes;
        let json = coda::explain_json_with(&checked, &options);
        json["kernels"].as_array().map_or(0, |ks| ks.iter().filter(|k| k["kind"] == kind).count())
    };
    assert_eq!((count(true, "gemm"), count(true, "reduction")), (1, 2));
    assert_eq!((count(false, "gemm"), count(false, "reduction")), (1, 2));
    let text = coda::explain_text(&checked);
    assert!(text.contains("Sm90Cfg128x192pps tiles"), "the loss's GEMM on ping-pong tiles:\n{text}");
    assert!(!text.contains("row prelude"), "no row prelude on ping-pong tiles:\n{text}");
    // The same loss with the tile stored beside it keeps cooperative tiles
    // and its norm as a row prelude.
    let stored = check_example(&Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda-cases/row_prelude.coda"));
    let text = coda::explain_text(&stored);
    assert!(text.contains("Sm90Cfg128x256 tiles; rows first (row prelude"), "stores keep cooperative tiles:\n{text}");
}
