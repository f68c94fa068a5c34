//! The CUDA code generator: snapshots of the emitted kernels and manifests
//! for the examples and `tests/cuda-cases/*.coda` (header `// stage: cuda`),
//! properties of the emitted files, and an NVRTC compile of every kernel
//! that fails on any error or warning: the sources emitted for sm_90a
//! (Hopper mainloop where it applies) compiled for sm_90a, and the sources
//! emitted for sm_80 (portable mainloop) compiled for sm_80 and sm_90a.
//!
//! Without NVRTC the compile test prints `skipped: no NVRTC`, unless
//! `CODAC_REQUIRE_NVRTC=1` is set (CI), which makes that a failure.

use coda::cuda::config::TileConfig;
use coda_runtime::{Arch, CompileOptions, Compiler};
use std::path::{Path, PathBuf};

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `examples/*.coda` and `tests/cuda-cases/*.coda`, sorted.
pub(crate) fn inputs() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["examples", "tests/cuda-cases"] {
        let Ok(entries) = std::fs::read_dir(workspace().join(dir)) else { continue };
        files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "coda")));
    }
    files.sort();
    files
}

/// The name a file is compiled under (relative, so outputs are stable).
pub(crate) fn display_name(path: &Path) -> String {
    let dir = path.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if dir == "examples" {
        format!("examples/{file}")
    } else {
        file
    }
}

/// Whether a case expects an error (`// expect: error`); cases must say `// stage: cuda`.
pub(crate) fn expects_error(path: &Path, text: &str) -> bool {
    if display_name(path).starts_with("examples/") {
        return false;
    }
    let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("//")).collect();
    let has = |k: &str, v: &str| header.iter().any(|l| l.trim_start_matches('/').trim() == format!("{k}: {v}"));
    assert!(has("stage", "cuda"), "{}: missing `// stage: cuda`", path.display());
    assert!(header.iter().any(|l| l.contains("checks:")), "{}: missing `// checks:`", path.display());
    assert!(has("expect", "ok") || has("expect", "error"), "{}: missing `// expect:`", path.display());
    has("expect", "error")
}

fn compile(path: &Path) -> (String, Result<coda::Compiled, coda::CompileError>) {
    compile_for(path, "sm_90a")
}

fn compile_for(path: &Path, arch: &str) -> (String, Result<coda::Compiled, coda::CompileError>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let checked = coda::check(&display_name(path), &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!checked.has_errors(), "{}:\n{}", path.display(), checked.render_diagnostics());
    let options = coda::CompileOptions::for_arch(arch);
    (text, coda::compile(&checked, &options))
}

/// Source, kernel list, the generated part of each file, and the manifest.
fn snapshot(path: &Path) -> String {
    let (text, compiled) = compile(path);
    let expect_error = expects_error(path, &text);
    let mut out = String::new();
    if !display_name(path).starts_with("examples/") {
        out.push_str(&format!("----- SOURCE\n{text}"));
    }
    let compiled = match compiled {
        Err(e) => {
            assert!(expect_error, "{}: {e}", path.display());
            return format!("{out}----- ERROR\n{e}\n");
        }
        Ok(c) => c,
    };
    assert!(!expect_error, "{}: expected an error", path.display());
    out.push_str("----- KERNELS\n");
    for k in &compiled.manifest.blocks.iter().flat_map(|b| b.kernels.iter()).collect::<Vec<_>>() {
        out.push_str(&format!("{} {} {}: {}\n", k.name, k.kind, k.file, k.summary));
    }
    for k in &compiled.kernels {
        let head: Vec<&str> = k.source.lines().take(2).collect();
        let body = k.source.split("// ---- generated kernel ----\n").nth(1).unwrap_or_default();
        out.push_str(&format!("----- {}\n{}\n{}", k.file_name, head.join("\n"), body));
    }
    out.push_str("----- MANIFEST\n");
    out.push_str(&compact(&compiled.manifest));
    out
}

/// A manifest with one buffer or kernel per line (each as JSON), so that a
/// change shows as the buffers and kernels it touches.
fn compact(manifest: &coda::cuda::Manifest) -> String {
    let coda::cuda::Manifest { schema, source, arch, blocks } = manifest;
    let mut out = format!("schema {schema}, source {source}, arch {arch}\n");
    for b in blocks {
        let coda::cuda::BlockManifest { block, kind, dims, buffers, kernels } = b;
        out.push_str(&format!("{kind} {block}, dims [{}]\n", dims.join(", ")));
        for buffer in buffers {
            let line = serde_json::to_string(buffer).unwrap_or_else(|e| panic!("{block}: {e}"));
            out.push_str(&format!("  buffer {line}\n"));
        }
        for kernel in kernels {
            let line = serde_json::to_string(kernel).unwrap_or_else(|e| panic!("{block}: {e}"));
            out.push_str(&format!("  kernel {line}\n"));
        }
    }
    out
}

#[test]
fn example_kernels() {
    insta::glob!("../../examples", "*.coda", |path: &Path| {
        insta::assert_snapshot!(snapshot(path));
    });
}

#[test]
fn case_kernels() {
    insta::glob!("../cuda-cases", "*.coda", |path: &Path| {
        insta::assert_snapshot!(snapshot(path));
    });
}

#[test]
fn emitted_files_are_self_contained_and_deterministic() {
    let [common, epilogue, portable, hopper] = coda::cuda::HEADERS.map(|(_, text)| text);
    for path in inputs() {
        let (_, first) = compile(&path);
        let (_, second) = compile(&path);
        let (Ok(first), Ok(second)) = (first, second) else { continue };
        assert_eq!(first.manifest.to_json(), second.manifest.to_json(), "{}", path.display());
        for (a, b) in first.kernels.iter().zip(&second.kernels) {
            assert_eq!(a.source, b.source, "{} is not deterministic", a.file_name);
            let spec = first.manifest.blocks.iter().flat_map(|b| &b.kernels).find(|k| k.file == a.file_name);
            let Some(spec) = spec else { panic!("{}: not in the manifest", a.file_name) };
            let gemm = spec.kind == "gemm";
            let sm90 = spec.config.as_deref().and_then(TileConfig::from_name).is_some_and(TileConfig::is_sm90);
            assert_eq!(sm90, a.source.contains("coda::gemm_sm90_rows<"), "{}: mainloop", a.file_name);
            let headers = format!("{common}{epilogue}");
            assert!(a.source.contains(&headers), "{}: headers not embedded verbatim", a.file_name);
            assert_eq!(a.source.contains(portable), gemm, "{}: portable mainloop embedded iff a GEMM", a.file_name);
            assert_eq!(a.source.contains(hopper), sm90, "{}: Hopper header embedded iff used", a.file_name);
            assert!(a.source.contains(coda::cuda::PRELUDE), "{}: prelude missing", a.file_name);
            assert!(!a.source.contains("#include \""), "{}: includes a file", a.file_name);
            let root = workspace().canonicalize().unwrap_or_default();
            assert!(!a.source.contains(&*root.to_string_lossy()), "{}: absolute path", a.file_name);
            assert!(a.source.contains("\"C\" __global__"), "{}: no entry", a.file_name);
        }
        for block in &first.manifest.blocks {
            for k in &block.kernels {
                for s in &k.args {
                    let sizes: usize = s.fields.iter().map(|f| coda::cuda::manifest::field_size(&f.kind)).sum();
                    assert!(s.size >= sizes, "{}: struct {} too small", k.file, s.name);
                }
            }
        }
    }
}

/// Spilled bytes reported by ptxas (`-Xptxas -v`) in an NVRTC log.
fn spills(log: &str) -> usize {
    log.lines()
        .filter_map(|l| l.split("bytes spill stores").next().filter(|_| l.contains("bytes spill stores")))
        .filter_map(|s| s.rsplit(',').next().and_then(|n| n.trim().parse::<usize>().ok()))
        .sum()
}

/// NVRTC, or `None` after printing `skipped …: no NVRTC` (`what` names the
/// part skipped); with `CODAC_REQUIRE_NVRTC=1` (CI) a missing NVRTC fails.
pub(crate) fn nvrtc(what: &str) -> Option<&'static Compiler> {
    match Compiler::global() {
        Ok(c) => Some(c),
        Err(e) => {
            assert!(
                std::env::var("CODAC_REQUIRE_NVRTC").as_deref() != Ok("1"),
                "CODAC_REQUIRE_NVRTC=1 but NVRTC is not available: {e}"
            );
            println!("skipped {what}: no NVRTC ({e})");
            None
        }
    }
}

/// Compiles every (kernel, architecture) job with NVRTC, in parallel by the
/// runtime's own `compile_many` (what `codac run` and `codac compile --emit
/// cubin` use), with `ptxas -v`; fails on any error or warning and notes
/// register spills.
pub(crate) fn assert_nvrtc_compiles(compiler: &Compiler, jobs: &[(coda::cuda::KernelSource, Arch)]) {
    let requests: Vec<_> = jobs
        .iter()
        .map(|(k, arch)| {
            (k.source.as_str(), CompileOptions::new(*arch).file_name(&k.file_name).flag("-Xptxas").flag("-v"))
        })
        .collect();
    let mut failures = Vec::new();
    for ((k, arch), result) in jobs.iter().zip(compiler.compile_many(&requests)) {
        match result {
            Err(e) => failures.push(format!("{} ({arch}): {e}", k.file_name)),
            Ok(out) if out.has_warnings() => failures.push(format!("{} ({arch}): warnings:\n{}", k.file_name, out.log)),
            Ok(out) if spills(&out.log) > 0 => {
                println!("note: {} ({arch}) spills {} bytes", k.file_name, spills(&out.log))
            }
            Ok(_) => {}
        }
    }
    assert!(failures.is_empty(), "{} NVRTC failures:\n{}", failures.len(), failures.join("\n"));
    println!("compiled {} kernel sources", jobs.len());
}

#[test]
fn nvrtc_compiles_every_kernel() {
    let Some(compiler) = nvrtc("the compile check") else { return };
    let mut jobs = Vec::new();
    for path in inputs() {
        if let (_, Ok(compiled)) = compile_for(&path, "sm_90a") {
            jobs.extend(compiled.kernels.into_iter().map(|k| (k, Arch::SM_90A)));
        }
        if let (_, Ok(compiled)) = compile_for(&path, "sm_80") {
            for k in compiled.kernels {
                assert!(!k.source.contains("gemm_sm90"), "{}: Hopper mainloop emitted for sm_80", k.file_name);
                for arch in [Arch::SM_80, Arch::SM_90A] {
                    jobs.push((k.clone(), arch));
                }
            }
        }
    }
    assert_nvrtc_compiles(compiler, &jobs);
}

/// Dims for emulation: every run-time dim bound to `m`.
fn small_dims(block: &coda::ir::Block, m: i64) -> coda::DimBindings {
    block.symbolic_dims().map(|d| (d.to_string(), m)).collect()
}

/// The rel-L2 tolerance `codac run --check` uses.
fn tolerance(block: &coda::ir::Block, output: &coda::ir::Output) -> f64 {
    let mut stack = vec![output.value];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(v) = stack.pop() {
        if seen.insert(v) {
            if matches!(block.inst(v), coda::ir::Inst::MatMul { .. }) {
                return 5e-3;
            }
            stack.extend(block.inst(v).operands());
        }
    }
    if output.tensor.dtype == coda::ir::DType::F32 {
        1e-5
    } else {
        5e-3
    }
}

/// Every block of the CUDA cases (not the examples) that compile,
/// reparameterized as `codac compile` does, with its case's name and source.
pub(crate) fn case_blocks() -> Vec<(String, coda::ir::Block, coda::SourceFile)> {
    let mut blocks = Vec::new();
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
            blocks.push((name.clone(), block, checked.source.clone()));
        }
    }
    blocks
}

/// Emulates the kernels of a block on the CPU and compares with the interpreter.
pub(crate) fn emulate_block(name: &str, block: &coda::ir::Block, source: &coda::SourceFile, m: i64) {
    emulate_block_with(name, block, source, m, &coda::cuda::CodegenOptions::default());
}

/// [`emulate_block`] of the kernels `options` give: every GEMM that can
/// take it on `tile_config` (partial buffers follow its epilogue tile),
/// GEMMs run unfused, and so on.
pub(crate) fn emulate_block_with(
    name: &str,
    block: &coda::ir::Block,
    source: &coda::SourceFile,
    m: i64,
    options: &coda::cuda::CodegenOptions,
) {
    let compiled = coda::cuda::compile_block(block, source, options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let dims = small_dims(block, m);
    let inputs = coda::random_inputs(block, &dims, 3).unwrap_or_else(|e| panic!("{name}: {e}"));
    let want = coda::eval(block, &dims, &inputs, &coda::EvalOptions { round_to_storage: true })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut host = std::collections::BTreeMap::new();
    for (key, t) in &inputs {
        let dtype = block
            .param(key)
            .map(|(_, p)| p.dtype)
            .or_else(|| block.outputs.iter().find(|o| &o.tensor.name == key).map(|o| o.tensor.dtype));
        let dtype = dtype.unwrap_or(coda::ir::DType::F32);
        let data = t.data.iter().map(|v| coda::ir::interp::round_to_dtype(*v, dtype) as f32).collect();
        host.insert(key.clone(), data);
    }
    let got = coda::cuda::emulate::emulate(&compiled.ir, block, &dims, &host).unwrap_or_else(|e| panic!("{name}: {e}"));
    for output in &block.outputs {
        let (g, w) = (&got[&output.tensor.name], &want[&output.tensor.name].data);
        assert!(g.iter().all(|x| !x.is_nan()), "{name}: output {} has unwritten elements", output.tensor.name);
        let diff: f64 = g.iter().zip(w).map(|(a, b)| (f64::from(*a) - b).powi(2)).sum();
        let norm: f64 = w.iter().map(|b| b * b).sum();
        let rel = (diff / norm.max(f64::MIN_POSITIVE)).sqrt();
        let tol = tolerance(block, output);
        assert!(rel <= tol, "{name} (M = {m}): output {} rel-L2 {rel:.3e} > {tol:.0e}", output.tensor.name);
    }
}

#[test]
fn emulated_kernels_match_the_interpreter() {
    for path in inputs() {
        let name = display_name(&path);
        // Minutes in a debug build; covered by `codac run --check` on the GPU
        // (`mistral_layer` is `qwen2_layer`'s partition without the biases).
        if ["examples/llama3_block.coda", "examples/lm_head_ce.coda", "examples/mistral_layer.coda"]
            .contains(&name.as_str())
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if expects_error(&path, &text) {
            continue;
        }
        let checked = coda::check(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let sizes: &[i64] = if name.starts_with("examples/") { &[3] } else { &[1, 37] };
        for block in &checked.module.blocks {
            // The kernels `codac compile` makes: of the reparameterized block
            // (which `rewrites.rs` checks against the block as written).
            let block = if block.kind == coda::ir::BlockKind::Block {
                let options = coda::opt::Options::default();
                coda::opt::reparameterize(block, &options).unwrap_or_else(|e| panic!("{name}: {e}")).block
            } else {
                block.clone()
            };
            for &m in sizes {
                emulate_block(&name, &block, &checked.source, m);
            }
        }
    }
}

/// `CompileOptions::tiles` (what `codac bench --autotune` files): a tuned
/// configuration replaces the rules' choice only when it is among that
/// choice's alternatives, and the ping-pong kernels it gives compile with
/// NVRTC (when NVRTC is here) without warnings.
#[test]
fn tuned_tile_configurations_replace_only_alternatives() {
    use coda::cuda::config::TileConfig;
    let path = workspace().join("examples/llama3_block.coda");
    let text = std::fs::read_to_string(&path).expect("llama3_block.coda");
    let checked = coda::check("llama3_block.coda", &text).expect("check");
    let tuned = std::collections::BTreeMap::from([
        (0, TileConfig::Sm90Cfg128x128pp),
        (1, TileConfig::Sm90Cfg128x128),
        (2, TileConfig::Cfg64x64), // not an alternative of a Hopper configuration: ignored
    ]);
    let mut options = coda::CompileOptions::default();
    options.codegen.tiles = std::collections::BTreeMap::from([("llama3_layer".to_string(), tuned)]);
    let compiled = coda::compile(&checked, &options).expect("compile");
    let block = &compiled.manifest.blocks[0];
    let configs: Vec<_> = block.kernels.iter().filter(|k| k.kind == "gemm").map(|k| k.config.clone()).collect();
    // The QKV GEMM (ordinal 3) keeps the rules' choice: staged subtiles.
    let expected = ["Sm90Cfg128x128pp", "Sm90Cfg128x128", "Sm90Cfg128x256", "Sm90Cfg128x192pps"];
    assert_eq!(configs, expected.map(|c| Some(c.to_string())));
    let pp =
        block.kernels.iter().find(|k| k.config.as_deref() == Some("Sm90Cfg128x128pp")).expect("a ping-pong kernel");
    assert_eq!(pp.smem_bytes, TileConfig::Sm90Cfg128x128pp.smem_bytes_with(1), "{}: one column vector staged", pp.name);
    let source = compiled.source(&pp.file).expect("source");
    assert!(source.contains("coda::Sm90Cfg128x128pp"), "{}", pp.file);
    let Some(compiler) = nvrtc("the NVRTC part") else { return };
    let options = CompileOptions::new(Arch::SM_90A).file_name(&pp.file);
    let out = compiler.compile(source, &options).expect("NVRTC compiles the ping-pong kernel");
    assert!(!out.has_warnings(), "{}", out.log);
}

/// Every Hopper tile configuration, asked for by name (`--tile-config`),
/// fits the 227 KiB of shared memory of a Hopper CTA in every GEMM of
/// every example and GPU case, forward and backward: the emitter stages no
/// more column vectors than fit beside the configuration's ring and
/// scratches.
#[test]
fn every_tile_configuration_fits_shared_memory() {
    use coda::cuda::config::{TileConfig, SM90_MAX_SMEM};
    for path in inputs() {
        let text = std::fs::read_to_string(&path).expect("input");
        let name = display_name(&path);
        if expects_error(&path, &text) {
            continue;
        }
        let checked = coda::check(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let backward = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{name}: {e}"));
        for view in [&checked, &backward] {
            for config in TileConfig::ALL.into_iter().filter(|c| c.is_sm90()) {
                let mut options = coda::CompileOptions::default();
                options.codegen.tile_config = Some(config);
                let compiled = coda::compile(view, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
                for k in compiled.manifest.blocks.iter().flat_map(|b| &b.kernels) {
                    assert!(
                        k.smem_bytes <= SM90_MAX_SMEM,
                        "{name} {} with {}: {} bytes",
                        k.name,
                        config.name(),
                        k.smem_bytes
                    );
                }
            }
        }
    }
}

/// `CompileOptions::launch`: with the run-time dimensions known, the
/// tile-count model (`config::for_shape`) gives the QKV GEMM of the 8B block
/// 128×128 tiles at 1000 tokens (measured 0.084 against 0.101 ms on the
/// H100) and changes nothing at 8192 tokens; the gate/up GEMM, whose
/// epilogue is light, takes staged subtiles (`config::subtiles_pay`) either way.
#[test]
fn known_dimensions_pick_tiles_by_the_tile_count_model() {
    use coda::cuda::config::LaunchHint;
    let text = std::fs::read_to_string(workspace().join("examples/llama3_block.coda")).expect("llama3_block.coda");
    let checked = coda::check("llama3_block.coda", &text).expect("check");
    let at = |m: Option<i64>| {
        let launch = m.map(|m| LaunchHint { dims: [("M".to_string(), m)].into(), multiprocessors: 132 });
        let mut options = coda::CompileOptions::default();
        options.codegen.launch = launch;
        coda::compile(&checked, &options).expect("compile")
    };
    let configs = |c: &coda::Compiled| -> Vec<Option<String>> {
        c.manifest.blocks[0].kernels.iter().filter(|k| k.kind == "gemm").map(|k| k.config.clone()).collect()
    };
    let blind = at(None);
    assert_eq!(at(Some(8192)).kernels, blind.kernels, "8192 tokens: the rules' configurations");
    let small = configs(&at(Some(1000)));
    let expected = ["Sm90Cfg128x256", "Sm90Cfg128x192pps", "Sm90Cfg128x256", "Sm90Cfg128x128"];
    assert_eq!(small, expected.map(|c| Some(c.to_string())));
}

/// A CTA-per-row kernel reads its row once per layer of dependent
/// statistics (`emit/row_passes.rs`): Gemma-2's backward recomputes four
/// RMSNorm statistics in `row_hn`, those of its two GEMM outputs and of
/// the saved layer output `x2` in one pass, and that of the residual
/// stream `x1`, which needs the first GEMM output's, in a second. Its
/// 2304 columns run on 288 threads, one chunk of 8 each
/// (`kir::row_cta_threads`).
#[test]
fn gemma2_backward_reads_its_rows_once_per_layer_of_statistics() {
    let path = workspace().join("examples/gemma2_layer.coda");
    let text = std::fs::read_to_string(&path).expect("example");
    let checked = coda::check("gemma2_layer.coda", &text).expect("checks");
    let backward = coda::grad_view(&checked).expect("differentiates");
    let compiled = coda::compile(&backward, &coda::CompileOptions::default()).expect("compiles");
    let source = compiled.source("gemma2_layer_grad_row_hn.cu").expect("row_hn");
    let body = source.split("__launch_bounds__(288)").nth(1).expect("288 threads per row");
    let loops: Vec<&str> = body.split("for (int kv").skip(1).collect();
    let passes: Vec<usize> = loops.iter().map(|l| l.matches("_acc += ").count()).filter(|&n| n > 0).collect();
    assert_eq!(passes, [3, 1], "statistics accumulated per whole-row pass:\n{body}");
}

/// Qwen3 writes q, k, v, gate and up as separate weights: the gradients of
/// `hn` (three products) and of `h` (two) are one GEMM each over the
/// concatenated K, whose Hopper entry reads every part through its own
/// tensor maps, and no kernel stores a partial sum for another to add.
#[test]
fn qwen3_backward_sums_its_separate_weights_products_in_one_gemm_each() {
    let path = workspace().join("examples/qwen3_layer.coda");
    let text = std::fs::read_to_string(&path).expect("example");
    let checked = coda::check("qwen3_layer.coda", &text).expect("checks");
    let backward = coda::grad_view(&checked).expect("differentiates");
    let compiled = coda::compile(&backward, &coda::CompileOptions::default()).expect("compiles");
    let gemms: Vec<&str> = compiled
        .kernels
        .iter()
        .filter(|k| k.file_name.starts_with("qwen3_layer_grad_gemm"))
        .map(|k| k.file_name.as_str())
        .collect();
    assert_eq!(gemms.len(), 11, "one GEMM per matmul group: {gemms:?}");
    for (file, parts) in [("qwen3_layer_grad_gemm_dhn.cu", 3), ("qwen3_layer_grad_gemm_dh.cu", 2)] {
        let source = compiled.source(file).unwrap_or_else(|| panic!("{file}"));
        assert!(source.contains(&format!("coda::Sm90KParts<{parts}> parts")), "{file}: {parts} K parts");
        assert!(
            source.contains(&format!("coda::TmaDesc tb{}, coda::GemmArgs", parts - 1)),
            "{file}: a tensor map per part"
        );
    }
}

/// The generated part of kernel `file` of an example's backward block.
fn backward_kernel(example: &str, file: &str) -> String {
    let path = workspace().join("examples").join(example);
    let text = std::fs::read_to_string(&path).expect("example");
    let checked = coda::check(example, &text).expect("checks");
    let backward = coda::grad_view(&checked).expect("differentiates");
    let compiled = coda::compile(&backward, &coda::CompileOptions::default()).expect("compiles");
    let source = compiled.source(file).unwrap_or_else(|| panic!("{file}"));
    source[source.find("---- generated kernel").expect("kernel")..].to_string()
}

/// A CTA-per-row kernel that rotates by the token's position forms each of
/// the row's rotary angles once, in a shared table, rather than in every
/// column of every pass: Qwen3's QK-norm backward reads its 64 angles for
/// q's 32 heads and k's 8, and GPT-NeoX's partial rotary (32 of each
/// head's 128 features) its 16.
#[test]
fn row_kernels_form_each_rotary_angle_once_per_row() {
    for (example, file, pairs) in [
        ("qwen3_layer.coda", "qwen3_layer_grad_row_hn.cu", 64),
        ("gptneox_layer.coda", "gptneox_layer_grad_row_dqkv.cu", 16),
    ] {
        let kernel = backward_kernel(example, file);
        assert_eq!(kernel.matches("__shared__ float2 rope_cs").count(), 1, "{file}: one table");
        assert!(kernel.contains(&format!("rope_cs[{pairs}];")), "{file}: {pairs} pairs");
        assert!(kernel.contains("cg::rope_cs_tab("), "{file}: columns read the table");
        for per_column in ["cg::sin_angle(", "cg::cos_angle("] {
            assert!(!kernel.contains(per_column), "{file}: no {per_column} per column");
        }
    }
}

/// The gated backward GEMM recomputes the gated product (for the down
/// projection's weight gradient) and forms the activation's derivative:
/// both from one sigmoid (SiLU) or one `tanh` (GeLU) per element, since
/// the backward recomputes the activation from the primitives its
/// derivative shares (`docs/backward.md`).
#[test]
fn gated_backward_epilogues_form_one_activation_per_element() {
    for (example, file, once, atomic) in [
        ("qwen3_layer.coda", "qwen3_layer_grad_gemm_dup.cu", "coda::sigmoid(", "coda::silu("),
        ("gemma2_layer.coda", "gemma2_layer_grad_gemm_dup.cu", "coda::tanh_fast(", "coda::gelu_tanh("),
    ] {
        let kernel = backward_kernel(example, file);
        // One per slot of the pair.
        assert_eq!(kernel.matches(once).count(), 2, "{file}: {once} once per element");
        assert!(!kernel.contains(atomic), "{file}: no {atomic} beside its derivative");
    }
}

/// A staged-subtile epilogue holds its 16-bit quads one column pair ahead
/// in registers: pair `j` loads pair `j + 1`'s quads before its own
/// arithmetic and reads its own from the ring, so no quad load waits where
/// it is used (`docs/codegen.md`, "held ahead").
#[test]
fn staged_subtile_epilogues_hold_their_quads_one_pair_ahead() {
    for (example, file) in
        [("qwen3_layer.coda", "qwen3_layer_grad_gemm_dup.cu"), ("gemma2_layer.coda", "gemma2_layer_grad_gemm_dup.cu")]
    {
        let kernel = backward_kernel(example, file);
        assert!(kernel.contains("Sm90Cfg128x192pps3"), "{file}: staged subtiles");
        let ahead =
            kernel.find("qh0[(j + 1) % 2][i] = cg::quad_bits<").unwrap_or_else(|| panic!("{file}: loads ahead"));
        let read =
            kernel.find("cg::quad_floats<__nv_bfloat16>(qh0[j % 2][i])").unwrap_or_else(|| panic!("{file}: reads"));
        assert!(ahead < read, "{file}: the next pair's loads come first");
        assert!(!kernel.contains("cg::load4"), "{file}: no quad loaded where it is read");
    }
}

/// The gated backward GEMMs of separate gate and up weights store three
/// values (the two gradients and the recomputed product), each through a
/// region of its own on `Sm90Cfg128x192pps3`, none with pair stores.
#[test]
fn gated_backward_epilogues_stage_each_of_their_three_outputs() {
    for (example, file) in
        [("qwen3_layer.coda", "qwen3_layer_grad_gemm_dup.cu"), ("gemma2_layer.coda", "gemma2_layer_grad_gemm_dup.cu")]
    {
        let kernel = backward_kernel(example, file);
        for region in 0..3 {
            let put = format!("coda::StagedOwnCols, {region}>(f, t, i, j, p.tmp_");
            assert_eq!(kernel.matches(&put).count(), 1, "{file}: one output through region {region}");
        }
        assert!(!kernel.contains("cg::st2"), "{file}: an output stored pair by pair");
    }
}

/// A column-reduction kernel whose stores share no reduction runs each
/// store's CTAs side by side: OLMo-2's two QK-norm gain gradients (2048
/// columns each) take 128 CTAs instead of 64, each CTA one of them, while
/// GPT-NeoX's two bias gradients of one column sum stay one group.
#[test]
fn column_reductions_of_independent_stores_take_their_own_ctas() {
    for (example, kernel, groups) in [("olmo2_layer.coda", "col_dg_q", 2), ("gptneox_layer.coda", "col_db_o", 1)] {
        let path = workspace().join("examples").join(example);
        let text = std::fs::read_to_string(&path).expect("example");
        let checked = coda::check(example, &text).expect("checks");
        let backward = coda::grad_view(&checked).expect("differentiates");
        let compiled = coda::compile(&backward, &coda::CompileOptions::default()).expect("compiles");
        let spec = (compiled.manifest.blocks.iter().flat_map(|b| &b.kernels))
            .find(|k| k.name == kernel)
            .unwrap_or_else(|| panic!("{example}: {kernel}"));
        assert_eq!(spec.grid[0], (64 * groups).to_string(), "{example}: {kernel}'s grid");
        let source = compiled.source(&spec.file).expect("source");
        assert_eq!(source.contains("if (group == 1)"), groups > 1, "{example}: {kernel} split by group");
    }
}

/// A CTA-per-row kernel that reads a row stream three times or more per
/// row copies row `m` of every row stream into shared memory once and
/// reads the copies: Qwen3's QK-norm backward (`dq` and `dk` four times,
/// two passes with their rotary partners). One whose streams are read
/// twice loads them from global memory in each pass (Gemma-2's `row_dx1`).
#[test]
fn row_kernels_stage_the_rows_they_read_three_times() {
    let staged = backward_kernel("qwen3_layer.coda", "qwen3_layer_grad_row_hn.cu");
    for (stream, width) in [("dq", 4096), ("dk", 1024), ("mm3", 4096), ("x2", 4096)] {
        let copy = format!("cg::stage_row<256, {width}>({stream}_row, p.{stream}, ");
        assert!(staged.contains(&copy), "row_hn stages {stream}");
        let global = format!("p.{stream}, p.{stream}_ld, m, ");
        assert_eq!(staged.matches(&global).count(), 1, "row_hn reads {stream} only from shared memory");
    }
    assert_eq!(staged.matches("cg::stage_wait();").count(), 1, "row_hn waits for its copies once");
    let plain = backward_kernel("gemma2_layer.coda", "gemma2_layer_grad_row_dx1.cu");
    assert!(!plain.contains("cg::stage_row<"), "row_dx1 reads each stream twice and stages none");
}
