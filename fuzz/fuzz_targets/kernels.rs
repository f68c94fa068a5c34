//! Differential fuzzing of the code generator: for every block of an
//! input that checks, the kernels `codac compile` makes of it, run by the
//! kernel-IR emulator (`coda::cuda::emulate`), against the reference
//! interpreter on the block as written.
//!
//! Each forward block is reparameterized as `coda::compile` does
//! (`coda::opt::reparameterize`), and so are the blocks of `grad_view` when
//! the file declares gradients; blocks the code generator refuses, and
//! blocks too large to evaluate (`common::small_enough`), are skipped.
//! Besides the rules' kernels, every form `codac bench --autotune` can
//! choose is checked: each GEMM unfused in turn, and every Hopper tile
//! configuration asked for by name (partials follow the tile). With
//! every symbolic dim bound to 3 and `coda::random_inputs` (seed 0), the
//! emulated outputs are compared with the interpreter's with storage
//! rounding. A bug, recorded as a crash, is:
//!
//! * a panic, or an emulation error, of kernels the generator accepted;
//! * an output element the kernels never wrote (NaN where the interpreter
//!   has a finite value);
//! * an output whose relative L2 distance from the interpreter's exceeds
//!   `max(TOLERANCE, SENSITIVITY × d)`, where `d` is the distance between
//!   the interpreter's exact and storage-rounded outputs: a random program
//!   can be so ill-conditioned that roundings alone move its result, which
//!   that bound absorbs, while a wrong partition, a misplaced epilogue or a
//!   lost reduction moves an output by its own size.
//!
//! Outputs with a non-finite interpreter value are not compared.

#![no_main]

use coda::cuda::config::TileConfig;
use coda::cuda::kir::KernelKind;
use coda::cuda::CodegenOptions;
use coda::ir::{Block, BlockKind, DType};
use coda::{Checked, EvalOptions, HostTensor};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

#[path = "common/mod.rs"]
mod common;
use common::{small_dims, small_enough};

/// The distance an output may always have from the interpreter's.
const TOLERANCE: f64 = 0.05;
/// How many times the rounding distance an output may have.
const SENSITIVITY: f64 = 10.0;

fuzz_target!(|data: &[u8]| {
    let Ok(checked) = coda::check_bytes("fuzz.coda", data) else { return };
    if checked.has_errors() {
        return;
    }
    check_blocks(&checked);
    if !checked.grads.is_empty() {
        if let Ok(view) = coda::grad_view(&checked) {
            check_blocks(&view);
        }
    }
});

fn check_blocks(checked: &Checked) {
    for block in &checked.module.blocks {
        let rewritten = match block.kind {
            BlockKind::Block => match coda::opt::reparameterize(block, &coda::opt::Options::default()) {
                Ok(r) => r.block,
                Err(_) => continue,
            },
            _ => block.clone(),
        };
        let rules = CodegenOptions::default();
        let Ok(compiled) = coda::cuda::compile_block(&rewritten, &checked.source, &rules) else { continue };
        let dims = small_dims(block);
        if !small_enough(block, &dims) || !small_enough(&rewritten, &dims) {
            continue;
        }
        let Ok(inputs) = coda::random_inputs(block, &dims, 0) else { continue };
        let eval = |round_to_storage| coda::eval(block, &dims, &inputs, &EvalOptions { round_to_storage });
        let (Ok(rounded), Ok(exact)) = (eval(true), eval(false)) else { continue };
        let host = host_inputs(block, &inputs);
        for (form, options) in forms(&compiled.ir) {
            let compiled = match coda::cuda::compile_block(&rewritten, &checked.source, &options) {
                Ok(c) => c,
                Err(err) => panic!("block `{}`: {form} does not compile: {err}", block.name),
            };
            let what = format!("block `{}`, {form}", block.name);
            let got = match coda::cuda::emulate::emulate(&compiled.ir, &rewritten, &dims, &host) {
                Ok(got) => got,
                Err(err) => panic!("{what}: the emulator failed on the generated kernels: {err}"),
            };
            for output in &block.outputs {
                let name = &output.tensor.name;
                let (Some(want), Some(exact), Some(got)) = (rounded.get(name), exact.get(name), got.get(name)) else {
                    panic!("{what}: output `{name}` missing from the kernels' outputs");
                };
                compare(&what, name, &want.data, &exact.data, got);
            }
        }
    }
}

/// The forms of a block's kernels to check, named: the rules' (first),
/// each GEMM of `ir` unfused, and each Hopper tile configuration.
fn forms(ir: &coda::cuda::kir::BlockIr) -> Vec<(String, CodegenOptions)> {
    let mut forms = vec![("the rules' kernels".to_string(), CodegenOptions::default())];
    for k in ir.kernels.iter().filter(|k| matches!(k.kind, KernelKind::Gemm(_))) {
        let options = CodegenOptions { unfused: [k.name.clone()].into_iter().collect(), ..Default::default() };
        forms.push((format!("{} unfused", k.name), options));
    }
    for config in TileConfig::ALL.into_iter().filter(|c| c.is_sm90()) {
        let options = CodegenOptions { tile_config: Some(config), ..Default::default() };
        forms.push((format!("tiles {}", config.name()), options));
    }
    forms
}

/// The inputs as the kernels read them: `f32`, rounded to their dtypes.
fn host_inputs(block: &Block, inputs: &BTreeMap<String, HostTensor>) -> BTreeMap<String, Vec<f32>> {
    let mut host = BTreeMap::new();
    for (name, t) in inputs {
        let dtype = block
            .param(name)
            .map(|(_, p)| p.dtype)
            .or_else(|| block.outputs.iter().find(|o| &o.tensor.name == name).map(|o| o.tensor.dtype))
            .unwrap_or(DType::F32);
        let data = t.data.iter().map(|v| coda::ir::interp::round_to_dtype(*v, dtype) as f32).collect();
        host.insert(name.clone(), data);
    }
    host
}

fn compare(block: &str, output: &str, want: &[f64], exact: &[f64], got: &[f32]) {
    if want.iter().chain(exact).any(|v| !v.is_finite()) {
        return;
    }
    if let Some(i) = got.iter().position(|v| v.is_nan()) {
        panic!("block `{block}`: output `{output}` element {i} was never written (the interpreter has {})", want[i]);
    }
    let distance = |a: &mut dyn Iterator<Item = f64>, b: &[f64]| {
        let (mut diff, mut norm) = (0.0f64, 0.0f64);
        for (x, y) in a.zip(b) {
            diff += (x - y).powi(2);
            norm += y * y;
        }
        if norm == 0.0 {
            return if diff == 0.0 { 0.0 } else { f64::INFINITY };
        }
        (diff / norm).sqrt()
    };
    let rounding = distance(&mut exact.iter().copied(), want);
    let error = distance(&mut got.iter().map(|v| f64::from(*v)), want);
    let bound = TOLERANCE.max(SENSITIVITY * rounding);
    if error > bound {
        panic!(
            "block `{block}`: output `{output}` is {error:.3e} from the interpreter's (relative L2), over {bound:.3e} \
             (the interpreter's own rounding moves it {rounding:.3e})"
        );
    }
}
