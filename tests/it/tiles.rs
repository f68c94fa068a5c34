//! Tile configurations asked for by name (`--tile-config`,
//! `CodegenOptions::tile_config`), above all the epilogue-warpgroup
//! mainloop `Sm90Cfg128x192ew`: which GEMMs take it, that its kernels
//! compile with NVRTC without warnings (`CODAC_REQUIRE_NVRTC=1` makes a
//! missing NVRTC a failure, as in `cuda.rs`), and that its 32-row epilogue
//! tiles give partial buffers the finishing kernels read correctly (the CPU
//! emulator against the interpreter).

use crate::cuda::{
    assert_nvrtc_compiles, display_name, emulate_block_with, expects_error, inputs, nvrtc, wants_a_prologue, workspace,
};
use coda::cuda::config::TileConfig;
use coda_runtime::Arch;

const EW: TileConfig = TileConfig::Sm90Cfg128x192ew;

/// The forward and backward views of an example, checked.
fn views(file: &str) -> Vec<coda::Checked> {
    let text = std::fs::read_to_string(workspace().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let checked = coda::check(file, &text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let backward = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{file}: {e}"));
    vec![checked, backward]
}

fn compile(checked: &coda::Checked, tile_config: Option<TileConfig>, a_prologue: bool) -> coda::Compiled {
    let options = coda::CompileOptions { tile_config, a_prologue, ..Default::default() };
    coda::compile(checked, &options).unwrap_or_else(|e| panic!("{}: {e}", checked.source.name))
}

/// GEMM kernels of a compiled file: (file, configuration, threads, shared memory).
fn gemms(compiled: &coda::Compiled) -> Vec<(String, String, u32, u32)> {
    let kernels = compiled.manifest.blocks.iter().flat_map(|b| &b.kernels).filter(|k| k.kind == "gemm");
    kernels.map(|k| (k.file.clone(), k.config.clone().unwrap_or_default(), k.block[0], k.smem_bytes)).collect()
}

/// Every Hopper GEMM of three examples' forward and backward blocks takes the
/// configuration asked for, with its 512 threads and its shared memory; a
/// GEMM with an A prologue (the LM head under `--a-prologue`) keeps the
/// rules' choice, since that mainloop has none; and every such kernel
/// compiles with NVRTC for sm_90a without warnings.
#[test]
fn an_asked_configuration_goes_to_every_gemm_that_can_take_it() {
    let mut sources = Vec::new();
    for file in ["examples/llama3_block.coda", "examples/gpt2_block.coda", "examples/lm_head_ce.coda"] {
        for checked in views(file) {
            let compiled = compile(&checked, Some(EW), false);
            // Portable GEMMs (`Cfg64x64` for narrow products) stay portable.
            let gemms: Vec<_> = gemms(&compiled).into_iter().filter(|g| g.1.starts_with("Sm90")).collect();
            assert!(!gemms.is_empty(), "{file}: no Hopper GEMM");
            for (kernel, config, threads, smem) in &gemms {
                assert_eq!(config, EW.name(), "{file}: {kernel}");
                assert_eq!((*threads, *smem), (512, EW.smem_bytes()), "{file}: {kernel}");
            }
            sources.extend(compiled.kernels.into_iter().filter(|k| k.source.contains("coda::Sm90Cfg128x192ew")));
        }
    }
    let lm_head = &views("examples/lm_head_ce.coda")[0];
    let configs: Vec<String> = gemms(&compile(lm_head, Some(EW), true)).into_iter().map(|g| g.1).collect();
    assert_eq!(configs, ["Sm90Cfg128x256"], "the A-prologue GEMM keeps its configuration");

    let Some(compiler) = nvrtc("the NVRTC part") else { return };
    let jobs: Vec<_> = sources.into_iter().map(|k| (k, Arch::SM_90A)).collect();
    assert_nvrtc_compiles(compiler, &jobs);
}

/// The cases of `tests/cuda-cases` (sizes 1 and 37) and the gpt2 training
/// step (row and column partials, pair layouts) on the epilogue-warpgroup
/// configuration, emulated against the interpreter.
#[test]
fn epilogue_warpgroup_kernels_emulate_like_the_interpreter() {
    for path in inputs().into_iter().filter(|p| !display_name(p).starts_with("examples/")) {
        let name = display_name(&path);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if expects_error(&path, &text) {
            continue;
        }
        let checked = coda::check(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for block in &checked.module.blocks {
            let block = coda::opt::reparameterize(block, &coda::opt::Options::default())
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .block;
            for m in [1, 37] {
                emulate_block_with(&name, &block, &checked.source, m, Some(EW));
            }
        }
    }
    let backward = &views("examples/gpt2_block.coda")[1];
    assert!(!wants_a_prologue(&backward.source.text));
    for block in &backward.module.blocks {
        emulate_block_with(&backward.source.name, block, &backward.source, 3, Some(EW));
    }
}
