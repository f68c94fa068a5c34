//! Tile configurations asked for by name (`--tile-config`,
//! `CodegenOptions::tile_config`), here the staged subtiles of
//! `Sm90Cfg128x192pps` / `pps2`, which the rules also choose: which GEMMs
//! take them, that their kernels compile with NVRTC without warnings
//! (`CODAC_REQUIRE_NVRTC=1` makes a missing NVRTC a failure, as in
//! `cuda.rs`), and that their 192-column tiles give partial buffers the
//! finishing kernels read correctly (the CPU emulator against the
//! interpreter).

use crate::cuda::{assert_nvrtc_compiles, case_blocks, emulate_block_with, nvrtc, workspace};
use coda::cuda::config::TileConfig;
use coda::cuda::manifest::KernelSpec;
use coda_runtime::Arch;

const PPS: TileConfig = TileConfig::Sm90Cfg128x192pps;
const PPS2: TileConfig = TileConfig::Sm90Cfg128x192pps2;
const PPS3: TileConfig = TileConfig::Sm90Cfg128x192pps3;

/// The forward and backward views of an example, checked.
fn views(file: &str) -> Vec<coda::Checked> {
    let text = std::fs::read_to_string(workspace().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let checked = coda::check(file, &text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let backward = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{file}: {e}"));
    vec![checked, backward]
}

fn compile(checked: &coda::Checked, tile_config: Option<TileConfig>) -> coda::Compiled {
    let mut options = coda::CompileOptions::default();
    options.codegen.tile_config = tile_config;
    coda::compile(checked, &options).unwrap_or_else(|e| panic!("{}: {e}", checked.source.name))
}

/// The CUDA source of kernel file `file`.
fn kernel_source<'a>(compiled: &'a coda::Compiled, file: &str) -> &'a str {
    let kernel = compiled.kernels.iter().find(|k| k.file_name == file);
    kernel.map(|k| k.source.as_str()).unwrap_or_else(|| panic!("no {file}"))
}

/// GEMM kernels of a compiled file: (file, configuration, threads, shared memory).
fn gemms(compiled: &coda::Compiled) -> Vec<(String, String, u32, u32)> {
    let kernels = compiled.manifest.blocks.iter().flat_map(|b| &b.kernels).filter(|k| k.kind == "gemm");
    kernels.map(|k| (k.file.clone(), k.config.clone().unwrap_or_default(), k.block[0], k.smem_bytes)).collect()
}

/// Every Hopper GEMM of three examples' forward and backward blocks takes the
/// configuration asked for, with its threads and shared memory, and every
/// such kernel compiles with NVRTC for sm_90a without warnings. Returns the manifests' GEMM
/// kernels.
fn asked_configuration_goes_to_every_gemm_that_can_take_it(asked: TileConfig) -> Vec<KernelSpec> {
    let mut sources = Vec::new();
    let mut specs = Vec::new();
    for file in ["examples/llama3_block.coda", "examples/gpt2_block.coda", "examples/lm_head_ce.coda"] {
        for checked in views(file) {
            let compiled = compile(&checked, Some(asked));
            // Portable GEMMs (`Cfg64x64` for narrow products) stay portable.
            let gemms: Vec<_> = gemms(&compiled).into_iter().filter(|g| g.1.starts_with("Sm90")).collect();
            assert!(!gemms.is_empty(), "{file}: no Hopper GEMM");
            for (kernel, config, threads, smem) in &gemms {
                assert_eq!(config, asked.name(), "{file}: {kernel}");
                assert_eq!(*threads, asked.threads(), "{file}: {kernel}");
                // The staged column vectors (up to four) add to the shared memory.
                let with_vecs = (0..=4).map(|v| asked.smem_bytes_with(v));
                assert!(with_vecs.into_iter().any(|b| b == *smem), "{file}: {kernel}: {smem} bytes");
            }
            let hopper = compiled.manifest.blocks.iter().flat_map(|b| &b.kernels);
            specs.extend(hopper.filter(|k| k.config.as_deref() == Some(asked.name())).cloned());
            let needle = format!("coda::{}", asked.name());
            sources.extend(compiled.kernels.into_iter().filter(|k| k.source.contains(&needle)));
        }
    }
    if let Some(compiler) = nvrtc("the NVRTC part") {
        let jobs: Vec<_> = sources.into_iter().map(|k| (k, Arch::SM_90A)).collect();
        assert_nvrtc_compiles(compiler, &jobs);
    }
    specs
}

/// Every block of the `tests/cuda-cases` files, reparameterized, on each
/// configuration in `configs` at each size in `sizes`, emulated against the
/// interpreter.
fn emulate_cases(configs: &[TileConfig], sizes: &[i64]) {
    for (name, block, source) in case_blocks() {
        for config in configs {
            for m in sizes {
                let options = coda::cuda::CodegenOptions { tile_config: Some(*config), ..Default::default() };
                emulate_block_with(&name, &block, &source, *m, &options);
            }
        }
    }
}

#[test]
fn staged_subtiles_go_to_every_gemm_that_can_take_them() {
    for asked in [PPS, PPS2, PPS3] {
        let specs = asked_configuration_goes_to_every_gemm_that_can_take_it(asked);
        assert!(specs.iter().all(|k| k.persistent), "{}", asked.name());
    }
}

/// The rules give staged subtiles to the Llama-3 gate/up GEMMs (one stored
/// value in the forward: `pps`; the SwiGLU output and the saved
/// pre-activation in the saving forward: `pps2`, one region each), to the
/// QKV GEMM (its rotated output put back from pair order) and to the bare
/// weight gradient of `w_down`, and to the dSwiGLU backward (`dz`'s two
/// parts and the recomputed `y`: `pps2`, the third value stored straight
/// to memory), and keep the cooperative tiles for the GEMMs with a
/// residual, partials or a 4096-column grid.
#[test]
fn the_rules_give_staged_subtiles_to_light_epilogues() {
    let mut both = views("examples/llama3_block.coda").into_iter();
    let (Some(forward), Some(backward)) = (both.next(), both.next()) else { panic!("llama3_block: two views") };
    let configs = |c: &coda::Compiled| -> Vec<(String, String)> {
        gemms(c).into_iter().map(|(file, config, _, _)| (file, config)).collect()
    };
    let compiled_forward = compile(&forward, None);
    let plain = configs(&compiled_forward);
    let staged: Vec<&str> = plain.iter().filter(|(_, c)| c.contains("pps")).map(|(f, _)| f.as_str()).collect();
    assert_eq!(staged, ["llama3_layer_gemm_z.cu", "llama3_layer_gemm_u.cu"], "{plain:?}");
    let qkv = kernel_source(&compiled_forward, "llama3_layer_gemm_u.cu");
    let rotated = "coda::sub_end<__nv_bfloat16, coda::StagedUnpermuteCols<0, 5120, 128>, 0, true>(f, t, j, p.qkv,";
    assert!(qkv.contains(rotated), "gemm_u: the rotated output not staged in subtiles");
    // The training step: each saving forward, then its backward block.
    let blocks = backward.grads.iter().flat_map(|g| [g.saving_forward.clone(), g.backward.clone()]).collect();
    let module = coda::ir::Module { file_name: backward.module.file_name.clone(), blocks };
    let step = compile(&coda::Checked { module, ..backward }, None);
    let by_file: std::collections::BTreeMap<String, String> = configs(&step).into_iter().collect();
    assert_eq!(by_file["llama3_layer_saving_gemm_z.cu"], PPS2.name());
    assert_eq!(by_file["llama3_layer_grad_gemm_dw_down.cu"], PPS.name());
    assert_eq!(by_file["llama3_layer_grad_gemm_y.cu"], PPS3.name(), "dz's two parts and y: a region each");
    assert_eq!(by_file["llama3_layer_grad_gemm_du_w_qkv.cu"], "Sm90Cfg128x256", "partials");
    assert_eq!(by_file["llama3_layer_saving_gemm_x1.cu"], "Sm90Cfg128x256", "a residual and partials");
    let src = kernel_source(&step, "llama3_layer_saving_gemm_z.cu");
    for call in [
        "coda::sub_put<__nv_bfloat16, coda::StagedOwnCols, 0>(f, t, i, j, p.z_pairs,",
        "coda::sub_put<__nv_bfloat16, coda::StagedHalfCols, 1>(f, t, i, j, p.tmp_y_bf16,",
        "coda::sub_end<__nv_bfloat16, coda::StagedOwnCols, 0, true>(f, t, j, p.z_pairs,",
        "coda::sub_end<__nv_bfloat16, coda::StagedHalfCols, 1, false>(f, t, j, p.tmp_y_bf16,",
        "coda::sub_begin(f, t, j);",
    ] {
        assert!(src.contains(call), "saving gemm_z: no `{call}`");
    }
    assert!(!src.contains("coda::staged_put_finish<"), "subtiles are stored in the loop");
}

/// A GEMM whose epilogue stores nothing and keeps only per-row partials (the
/// LM head's loss) takes ping-pong tiles, chosen before its partial
/// buffers are sized; one whose register value another kernel reads
/// (Gemma-2's out-projection at 1000 tokens: the next norm's row kernel
/// reads its sum beside the sum-of-squares partials) keeps the cooperative
/// tiles.
#[test]
fn the_rules_give_ping_pong_tiles_to_a_loss_that_stores_nothing() {
    use coda::cuda::config::LaunchHint;
    let configs = |file: &str, m: i64| -> std::collections::BTreeMap<String, String> {
        let checked = views(file).into_iter().next().unwrap_or_else(|| panic!("{file}: no forward view"));
        let mut options = coda::CompileOptions::default();
        options.codegen.launch = Some(LaunchHint { dims: [("M".to_string(), m)].into(), multiprocessors: 132 });
        let compiled = coda::compile(&checked, &options).unwrap_or_else(|e| panic!("{file}: {e}"));
        gemms(&compiled).into_iter().map(|(file, config, _, _)| (file, config)).collect()
    };
    for m in [333, 1000, 8192] {
        assert_eq!(configs("examples/lm_head_ce.coda", m)["lm_head_ce_gemm_logits.cu"], PPS.name(), "M = {m}");
    }
    let gemma = configs("examples/gemma2_layer.coda", 1000);
    assert_eq!(gemma["gemma2_layer_gemm_attn_w_o.cu"], "Sm90Cfg128x256", "a stored value beside row partials");
}

/// With two regions, a residual's subtile is copied into region 0 at each
/// subtile's first column pair and read there, the second output (the
/// scratch store) written over it and the staged store beside it; nothing
/// is staged before the K loop.
#[test]
fn two_regions_stage_a_residual_subtile_beside_the_outputs() {
    let forward = &views("examples/llama3_block.coda")[0];
    let compiled = compile(forward, Some(PPS2));
    let src = kernel_source(&compiled, "llama3_layer_gemm_x1.cu");
    for call in [
        "coda::sub_load<__nv_bfloat16>(f, t, j, p.x0_staged, p.x0_staged_ld, p.x0_staged_rows, p.x0_staged_cols, smem);",
        "coda::sub_pair<__nv_bfloat16>(f, t, i, j, p.x0_staged,",
        "coda::sub_put<__nv_bfloat16, coda::StagedOwnCols, 0>(f, t, i, j, p.tmp_x1_g_ffn_bf16,",
        "coda::sub_put<__nv_bfloat16, coda::StagedOwnCols, 1>(f, t, i, j, p.tmp_x1_bf16,",
    ] {
        assert!(src.contains(call), "gemm_x1: no `{call}`");
    }
    assert!(
        !src.contains("coda::stage_tile_async<__nv_bfloat16>(f, t, p.x0_staged"),
        "no whole-tile prefetch of the residual"
    );
    // One region: the residual is read from global memory pair by pair.
    let one = compile(forward, Some(PPS));
    assert!(!kernel_source(&one, "llama3_layer_gemm_x1.cu").contains("coda::sub_load<"));
}

/// The cases of `tests/cuda-cases` (size 37) on every staged-subtile
/// configurations (192-column tiles, so partial buffers count other tile
/// columns), emulated against the interpreter.
#[test]
fn staged_subtile_kernels_emulate_like_the_interpreter() {
    emulate_cases(&[PPS, PPS2, PPS3], &[37]);
}

/// `explain` says why a GEMM whose epilogue reads tile operands takes or
/// refuses staged subtiles, at K = 2304: one tile operand read and one
/// output stored (1.78 bytes per output element per 1024 of K) take them,
/// two read and two stored (3.56) keep the cooperative tiles, and the
/// reason names both numbers.
#[test]
fn explain_says_why_tile_operands_take_or_refuse_staged_subtiles() {
    let source = "dim M\ndim D = 2304\ndim F = 9216\n\
        block light(h: bf16[M, D], a: bf16[M, F], w: bf16[F, D]) -> (y: bf16[M, F]) {\n\
            y = bf16((h @ w.T) * a)\n}\n\
        block heavy(h: bf16[M, D], a: bf16[M, F], c: bf16[M, F], w: bf16[F, D]) -> (y: bf16[M, F], z: bf16[M, F]) {\n\
            let t = h @ w.T\n    y = bf16(t * a * c)\n    z = bf16(t + a)\n}\n";
    let checked = coda::check("window.coda", source).unwrap_or_else(|e| panic!("{e}"));
    let json = coda::explain_json(&checked);
    let kernels = json["kernels"].as_array().cloned().unwrap_or_default();
    let reasons: Vec<String> = kernels.iter().filter_map(|k| k["tiles_why"].as_str().map(str::to_string)).collect();
    let [light, heavy] = <[String; 2]>::try_from(reasons.clone()).unwrap_or_else(|_| panic!("{reasons:?}"));
    assert!(
        light.starts_with("Sm90Cfg128x192pps:") && light.contains("1.78 bytes") && light.contains("within 0.5 to 2.5"),
        "{light}"
    );
    assert!(
        heavy.starts_with("Sm90Cfg128x256 rather than Sm90Cfg128x192pps") && heavy.contains("3.56 bytes"),
        "{heavy}"
    );
    assert!(heavy.contains("above 2.5"), "{heavy}");
    let text = coda::explain_text(&checked);
    assert!(text.contains("//      tiles: Sm90Cfg128x256 rather than"), "{text}");
}
