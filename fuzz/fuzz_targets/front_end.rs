//! Fuzzes the whole codac front end with arbitrary bytes.
//!
//! Each input goes through `coda::check_bytes` (UTF-8 check, lexer, parser,
//! name/shape checking, lowering, IR verification). That must never panic,
//! and must never report a bug in codac: an `InternalError` (the verifier
//! rejected lowered IR) or an `E9000` diagnostic makes the target panic so
//! that libFuzzer records the input. Rendering the diagnostics must not
//! panic either; like `codac`, the target renders at most the first
//! `MAX_RENDERED` of them (rendering echoes whole source lines, so rendering
//! thousands of diagnostics would dominate the run time).
//!
//! When the input checks without errors, the target also runs
//! `coda::explain_text` and `coda::explain_json`, then evaluates every block
//! with the reference interpreter on `coda::random_inputs`, with every
//! symbolic dimension bound to 3, once without and once with storage
//! rounding. Evaluation errors are fine (a slice or a rope may be out of
//! range at run time) as long as they carry a source location, except
//! `EvalError::Malformed` (`is_bug`), which means a block broke an
//! invariant that the verifier should have caught.
//!
//! Every accepted input is then compiled (`coda::compile`: the
//! reparameterizer, the partitioner and the CUDA emitter, for the
//! forward blocks and, when the file has `grad` declarations, for the
//! backward blocks too). A refusal with a located diagnostic is fine; a
//! `RewriteError` (a rule built an ill-typed block) or an internal code
//! generator error is a bug.
//!
//! Blocks whose values would be large (constant dims such as
//! `dim V = 128256` are legal) are not evaluated, so that the fuzzer
//! measures the compiler and not the speed of the interpreter: evaluation is
//! skipped when a parameter or any IR value would have more than
//! `MAX_VALUE_ELEMENTS` elements, when all values together would exceed
//! `MAX_TOTAL_ELEMENTS`, or when the matmuls would need more than
//! `MAX_MATMUL_MACS` multiply-adds (`common/mod.rs`). Sizes come from
//! `coda::ir::interp::bind_shape`, the interpreter's own binding rule.

#![no_main]

use coda::cuda::CodegenError;
use coda::{Checked, CompileError, CompileOptions, EvalOptions};
use libfuzzer_sys::fuzz_target;

#[path = "common/mod.rs"]
mod common;
use common::{small_dims, small_enough};

/// Diagnostics rendered per input, as in `codac` (`MAX_DIAGNOSTICS`).
const MAX_RENDERED: usize = 50;

fuzz_target!(|data: &[u8]| {
    let checked = match coda::check_bytes("fuzz.coda", data) {
        Ok(checked) => checked,
        Err(err) => panic!("internal compiler error from check_bytes: {err}"),
    };
    if let Some(ice) = checked.diagnostics.iter().find(|d| d.code == "E9000") {
        panic!("E9000 internal compiler error diagnostic:\n{ice:?}");
    }
    let shown = checked.diagnostics.len().min(MAX_RENDERED);
    let _ = coda::render_to_string(&checked.source, &checked.diagnostics[..shown]);
    if checked.has_errors() {
        return;
    }
    let _ = coda::explain_text(&checked);
    let _ = coda::explain_json(&checked);
    compile_without_bugs(&checked);
    if !checked.grads.is_empty() {
        match coda::grad_view(&checked) {
            Ok(view) => compile_without_bugs(&view),
            Err(err) => panic!("internal compiler error from grad_view: {err}"),
        }
    }
    for block in &checked.module.blocks {
        let dims = small_dims(block);
        if !small_enough(block, &dims) {
            continue;
        }
        let Ok(inputs) = coda::random_inputs(block, &dims, 0) else {
            continue;
        };
        for round_to_storage in [false, true] {
            let options = EvalOptions { round_to_storage };
            if let Err(err) = coda::eval(block, &dims, &inputs, &options) {
                if err.is_bug() {
                    panic!("the interpreter found a malformed block `{}`: {err}", block.name);
                }
                if err.span().is_none() {
                    panic!("an evaluation error of block `{}` without a location: {err}", block.name);
                }
            }
        }
    }
});

/// Compiles every block; only a bug in codac makes it panic.
fn compile_without_bugs(checked: &Checked) {
    match coda::compile(checked, &CompileOptions::default()) {
        Err(err @ CompileError::Rewrite(_)) => panic!("a rewrite rule misfired: {err}"),
        Err(err @ CompileError::Codegen(CodegenError::Internal { .. })) => panic!("{err}"),
        _ => {}
    }
}
