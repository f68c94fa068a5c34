//! End-to-end tests of `codac eval`'s limits and errors: every run-time
//! error of the interpreter is a diagnostic located in the `.coda` source
//! (never an IR id), and an evaluation that would need more memory than
//! allowed is refused before it starts, saying how much and what to change.

use std::path::PathBuf;
use std::time::{Duration, Instant};

mod common;
use common::codac;

/// Writes `text` to a fresh file named `name` and returns its path.
fn source(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("codac-eval-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether `stderr` holds a located diagnostic whose code starts with
/// `code`, at `at` (`file:line:col`), with help, and no IR id.
fn located(stderr: &str, code: &str, at: &str) -> bool {
    let ir_id = stderr.split(|c: char| !(c == '%' || c.is_ascii_digit())).any(|w| w.len() > 1 && w.starts_with('%'));
    stderr.contains(&format!("error[{code}")) && stderr.contains(at) && stderr.contains("help:") && !ir_id
}

const SLICE: &str = "dim M\ndim N\nblock b(x: f32[M, N]) -> (y: f32[M, 6]) {\n    y = x[:, 6:12]\n}\n";

#[test]
fn a_run_time_error_points_at_the_expression() {
    let path = source("slice.coda", SLICE);
    let file = path.to_str().unwrap_or_default();
    let out = codac(&["eval", file, "--dims", "M=2,N=8", "--random", "--color", "never"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(located(&stderr, "E0703", "slice.coda:4:14"), "{stderr}");
    assert!(stderr.contains("columns 6..12 of a value with 8 columns"), "{stderr}");
}

#[test]
fn a_run_time_error_of_the_backward_points_at_the_forward_source() {
    let text_of = "dim M\ndim N\nblock f(x: f32[M, N]) -> (y: f32[M, 6]) {\n    y = x[:, 6:12] * x[:, 0:6]\n}\ngrad g = f(y) wrt (x)\n";
    let path = source("grad_slice.coda", text_of);
    let file = path.to_str().unwrap_or_default();
    let out = codac(&["eval", file, "--grad", "--dims", "M=2,N=8", "--random", "--color", "never"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // The backward pads the slice's gradient by `N - 12` columns: E0701 or E0703, at the slice.
    assert!(located(&stderr, "E070", "grad_slice.coda:4:14"), "{stderr}");
}

/// The case: the 8B block at M = 30,000 under 4 GiB is refused at
/// once, with the estimate, the limit and smaller dims that fit.
#[test]
fn an_evaluation_too_large_for_the_memory_is_refused_before_it_starts() {
    let start = Instant::now();
    let out = codac(&[
        "eval",
        "examples/llama3_block.coda",
        "--dims",
        "M=30000",
        "--random",
        "--max-memory",
        "4G",
        "--color",
        "never",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(start.elapsed() < Duration::from_secs(20), "took {:?}", start.elapsed());
    assert!(located(&stderr, "E0702", "llama3_block.coda:"), "{stderr}");
    for needle in ["more than the limit of 4.0 GiB", "at M = 30000", "--max-memory", "`--dims M="] {
        assert!(stderr.contains(needle), "no `{needle}` in {stderr}");
    }
}

#[test]
fn max_memory_takes_a_size() {
    let path = source("slice_ok.coda", SLICE);
    let file = path.to_str().unwrap_or_default();
    let out = codac(&["eval", file, "--dims", "M=2,N=12", "--random", "--max-memory", "lots"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("512M"), "{}", text(&out.stderr));
    // Off a terminal an evaluation prints no progress: standard error stays empty.
    let out = codac(&["eval", file, "--dims", "M=2,N=12", "--random", "--max-memory", "1G"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
}
