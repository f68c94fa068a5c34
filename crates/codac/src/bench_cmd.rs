//! `codac bench`: times every kernel of a block on the GPU, the whole block,
//! and for each GEMM kernel the same GEMM with an empty epilogue, plus the
//! compile latency of every kernel (see `docs/benchmarks.md`).
//!
//! Protocol: random inputs scaled like real activations and weights
//! (`coda::random_inputs`, never zeros); several copies of every buffer,
//! cycled so that each timed kernel touches at least 256 MiB over the
//! copies (about five times the L2 cache); the block runs on every copy
//! first (filling the intermediate buffers a kernel timed alone reads) and
//! keeps running for a short spin-up so the clocks settle. Then each GEMM
//! kernel is timed interleaved with its bare GEMM (alternating launches,
//! each between its own events), other kernels alone, and finally the whole
//! block (every kernel back to back, as `codac run` launches them): each
//! `--warmup` untimed runs and `--iters` timed runs; the median is
//! reported. Interleaving matters on an H100: sustained GEMMs reach its
//! 700 W power cap within about a second and the clock drops from 1980 MHz
//! to about 1400-1500 MHz (measured with `nvidia-smi`), so a kernel and its
//! bare GEMM timed one after the other run at different clocks. The bare
//! GEMM is a block `y = a @ b.T` (the kernel's operand layouts, dtype and
//! M, N, K) compiled through `coda::compile`, so it gets the same mainloop
//! and configuration rules. Last, each distinct bare GEMM is timed
//! interleaved with cuBLAS's GEMM on the same data (`bench_vendor`).

use crate::bench_report::{
    gbps, gemm_report, render_text, tflops, BareReport, BlockReport, CompileReport, DeviceReport, KernelReport, Report,
    StepReport, Timing, TuneBlockCheck, TuneReport, SCHEMA,
};
use crate::bench_rig::{Rig, RigSpec};
use crate::bench_vendor::Vendor;
use crate::cli::KernelFlags;
use crate::commands::{check_dims_known, load, parse_dims, selected_blocks, Outcome};
use crate::tune;
use anyhow::{bail, Context, Result};
use clap::Args;
use coda::cuda::manifest::BlockManifest;
use coda::cuda::KernelSource;
use coda::{ColorChoice, DimBindings, GemmProfile, KernelProfile};
use coda_runtime::{compile_latency, CompileOptions, Compiler, Device, RuntimeError, TuningStore};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Arguments of `codac bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The .coda file.
    pub(crate) file: PathBuf,
    /// Run-time dimensions, e.g. `M=8192`; may be repeated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) dims: Vec<String>,
    /// Benchmark only this block (default: every block in the file).
    #[arg(long)]
    pub(crate) block: Option<String>,
    /// Timed runs of each kernel and block (the median is reported).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(100..))]
    pub(crate) iters: u32,
    /// Untimed runs before each timing loop.
    #[arg(long, default_value_t = 10)]
    pub(crate) warmup: u32,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Benchmark training steps instead: each backward block and the saving
    /// forward it needs (saved tensors and output gradients random), with
    /// the step's total against its bare GEMMs.
    #[arg(long)]
    pub(crate) grad: bool,
    /// Print the results as JSON on standard output (the table goes to standard error).
    #[arg(long)]
    pub(crate) json: bool,
    /// First time every GEMM kernel with each alternative tile configuration
    /// (interleaved with the rules' choice) and file the fastest next to the
    /// kernel cache, where `codac run` and `codac bench` find it for this
    /// device, program and dimensions; then benchmark with the winners.
    #[arg(long)]
    pub(crate) autotune: bool,
    #[command(flatten)]
    pub(crate) kernels: KernelFlags,
}

/// Milliseconds each rig keeps the GPU busy before timing.
const SPIN_UP_MS: f64 = 300.0;

/// Runs `codac bench`.
pub(crate) fn bench(args: &BenchArgs, color: ColorChoice) -> Result<Outcome> {
    let checked = load(&args.file, color)?;
    if checked.has_errors() {
        return Ok(Outcome::UserError);
    }
    let (checked, block) = if args.grad {
        crate::grad_cmd::training_step(checked, args.block.as_deref())?
    } else {
        (checked, args.block.clone())
    };
    let dims = parse_dims(&args.dims)?;
    // The user's mistakes first, so that they are found without a GPU.
    for block in selected_blocks(&checked, block.as_deref())? {
        check_dims_known(block, &dims)?;
    }
    let device = open_device()?;
    let compiler = Compiler::global()?;
    let launch = Some(tune::launch_hint(&device, &dims));
    let options = args.kernels.compile_options(device.arch().to_string(), block, launch);
    let compiled = coda::compile(&checked, &options)?;
    let mut store = TuningStore::from_env();
    let (tuned, tuned_blocks) = if args.autotune {
        autotune(args, &checked, &options, &compiled, &device, &dims, &mut store)?
    } else {
        (Vec::new(), Vec::new())
    };
    let (options, mut compiled) = tune::with_tuning(&checked, &options, compiled, &device, &store, &dims)?;
    crate::overrides::apply(&mut compiled)?;
    let profiles = coda::profile(&checked, &options, &dims)?;
    warm_up_nvrtc(compiler, &device)?;
    let (major, minor) = compiler.nvrtc_version();
    let info = device.info();
    let vendor = Vendor::open(&device);
    let mut report = Report {
        schema: SCHEMA,
        tool: "codac bench",
        codac_version: env!("CARGO_PKG_VERSION"),
        file: checked.source.name.clone(),
        device: DeviceReport {
            name: info.name.clone(),
            arch: info.arch.to_string(),
            multiprocessors: info.multiprocessors,
            memory_bytes: info.total_memory as u64,
            driver_version: info.driver_version,
            nvrtc: format!("{major}.{minor}"),
        },
        warmup: args.warmup as usize,
        iters: args.iters as usize,
        vendor: vendor.note.clone(),
        blocks: Vec::new(),
        steps: Vec::new(),
        autotune: tuned,
        autotune_blocks: tuned_blocks,
    };
    let bench =
        Bench { device: &device, compiler, vendor: &vendor, warmup: args.warmup as usize, iters: args.iters as usize };
    for manifest in &compiled.manifest.blocks {
        let Some(block) = checked.module.block(&manifest.block) else { continue };
        check_dims_known(block, &dims)?;
        let kernels = profiles.iter().find(|p| p.block == manifest.block).map(|p| p.kernels.as_slice());
        let kernels = kernels.with_context(|| format!("no profile of block `{}`", manifest.block))?;
        let inputs = coda::random_inputs(block, &dims, args.seed)?;
        report.blocks.push(bench.block(block, manifest, &compiled.kernels, kernels, &dims, &inputs)?);
    }
    for g in &checked.grads {
        report.steps.extend(StepReport::of(&report.blocks, &g.saving_forward.name, &g.backward.name));
    }
    let text = render_text(&report);
    if args.json {
        eprint!("{text}");
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{text}");
    }
    Ok(Outcome::Success)
}

/// `--autotune`: tunes every block of the file (`compiled` with the rules'
/// configurations, from `options`) and saves the winners (a store that
/// cannot be written only loses them for later runs): each kernel's
/// measurements and each block's check of its winners together.
fn autotune(
    args: &BenchArgs,
    checked: &coda::Checked,
    options: &coda::CompileOptions,
    compiled: &coda::Compiled,
    device: &Device,
    dims: &DimBindings,
    store: &mut TuningStore,
) -> Result<(Vec<TuneReport>, Vec<TuneBlockCheck>)> {
    let profiles = coda::profile(checked, options, dims)?;
    let (warmup, iters) = (args.warmup as usize, args.iters as usize);
    let tuner = tune::Autotune { device, checked, options, dims, warmup, iters };
    let (mut reports, mut checks) = (Vec::new(), Vec::new());
    for manifest in &compiled.manifest.blocks {
        let Some(block) = checked.module.block(&manifest.block) else { continue };
        check_dims_known(block, dims)?;
        let inputs = coda::random_inputs(block, dims, args.seed)?;
        let profile = profiles.iter().find(|p| p.block == manifest.block);
        let kernel_bytes = profile.iter().flat_map(|p| &p.kernels).map(|k| (k.name.clone(), k.bytes_moved)).collect();
        let block = tune::TuneBlock { manifest, inputs: &inputs, kernel_bytes: &kernel_bytes };
        let (kernels, check) = tuner.block(compiled, &block, store)?;
        reports.extend(kernels);
        checks.extend(check);
    }
    match store.save() {
        Ok(()) => eprintln!(
            "autotune: {} entries in {}",
            store.len(),
            store.path().map_or("memory".into(), |p| p.display().to_string())
        ),
        Err(e) => eprintln!("warning: the tuning results were not saved: {e}"),
    }
    Ok((reports, checks))
}

/// Opens device 0; every way of finding no usable GPU is a "no GPU" error.
fn open_device() -> Result<Device> {
    match Device::open(0) {
        Ok(d) => Ok(d),
        Err(e) if e.is_no_gpu() => bail!("no GPU: codac bench needs an NVIDIA GPU and its driver ({e})"),
        Err(e @ RuntimeError::NoDriver { .. }) => bail!("no GPU: {e}"),
        Err(e) => Err(e).context("cannot open CUDA device 0"),
    }
}

/// Compiles a trivial kernel once, so that the first measured cold compile
/// does not include NVRTC's own start-up.
fn warm_up_nvrtc(compiler: &Compiler, device: &Device) -> Result<()> {
    let source = "extern \"C\" __global__ void codac_bench_warm_up(int* p) { if (p) *p = 1; }\n";
    compiler.compile(source, &CompileOptions::new(device.arch()).file_name("codac_bench_warm_up.cu"))?;
    Ok(())
}

/// The settings shared by every measurement.
struct Bench<'a> {
    device: &'a Device,
    compiler: &'a Compiler,
    vendor: &'a Vendor,
    warmup: usize,
    iters: usize,
}

/// A bare GEMM's measurements, keyed by its shape and layouts.
type BareKey = (i64, i64, i64, bool, bool, String);

impl Bench<'_> {
    /// Cold and cached compile latency of every kernel of `manifest` (with
    /// the options `BlockExecutor` uses, so it then finds them in the cache).
    fn compile_all(
        &self,
        manifest: &BlockManifest,
        sources: &[KernelSource],
    ) -> Result<BTreeMap<String, CompileReport>> {
        let mut out = BTreeMap::new();
        for spec in &manifest.kernels {
            let source = sources
                .iter()
                .find(|s| s.file_name == spec.file)
                .with_context(|| format!("no source {}", spec.file))?;
            eprintln!("compiling {} {} ({})", manifest.block, spec.name, spec.file);
            let opts = CompileOptions::new(self.device.arch()).file_name(&spec.file);
            let l = compile_latency(self.compiler, &source.source, &opts)?;
            let report = CompileReport {
                cold_ms: l.cold_ms,
                hit_ms: l.hit_ms,
                hit_from_disk: l.hit_from_disk,
                nvrtc_cache_bypassed: l.nvrtc_cache_bypassed,
                registers: 0,
            };
            out.insert(spec.name.clone(), report);
        }
        Ok(out)
    }

    /// Benchmarks one block and the bare GEMMs of its GEMM kernels: every
    /// GEMM kernel is timed interleaved with its bare GEMM (alternating
    /// launches), so that the two are compared at the same clocks.
    fn block(
        &self,
        block: &coda::ir::Block,
        manifest: &BlockManifest,
        sources: &[KernelSource],
        profiles: &[KernelProfile],
        dims: &DimBindings,
        inputs: &BTreeMap<String, coda::HostTensor>,
    ) -> Result<BlockReport> {
        let mut compiles = self.compile_all(manifest, sources)?;
        let kernel_bytes: BTreeMap<String, u64> = profiles.iter().map(|p| (p.name.clone(), p.bytes_moved)).collect();
        let spec = RigSpec { manifest, sources, dims, inputs, kernel_bytes: &kernel_bytes };
        let rig = Rig::new(self.device, &spec)?;
        for (name, regs) in rig.registers() {
            if let Some(c) = compiles.get_mut(&name) {
                c.registers = regs;
            }
        }
        let mut bares: BTreeMap<BareKey, BareRig> = BTreeMap::new();
        for g in profiles.iter().filter_map(|p| p.gemm.as_ref()) {
            if let std::collections::btree_map::Entry::Vacant(slot) = bares.entry(bare_key(g)) {
                slot.insert(self.bare_rig(g)?);
            }
        }
        eprintln!("timing block {} ({} copies of {:.1} MB)", block.name, rig.copies, rig.bytes_per_copy as f64 / 1e6);
        for bare in bares.values() {
            bare.rig.fill_and_spin(self.device, 0.0)?;
        }
        rig.fill_and_spin(self.device, SPIN_UP_MS)?;
        let mut kernels = Vec::new();
        for name in rig.kernel_names() {
            let spec = manifest.kernels.iter().find(|k| k.name == name).with_context(|| format!("no kernel {name}"))?;
            let profile = profiles.iter().find(|p| p.name == name).with_context(|| format!("no profile of {name}"))?;
            let (time, bare) = match profile.gemm.as_ref().and_then(|g| bares.get(&bare_key(g)).map(|b| (g, b))) {
                Some((g, bare)) => {
                    let against = (&bare.rig, bare.gemm.as_str());
                    let (fused, alone) = rig.time_against(self.device, &name, against, self.warmup, self.iters)?;
                    (Timing::of(&fused), Some(bare.report(g, Timing::of(&alone))))
                }
                None => (Timing::of(&rig.time_kernel(self.device, &name, self.warmup, self.iters)?), None),
            };
            let compile = compiles.get(&name).copied().with_context(|| format!("no compile record of {name}"))?;
            kernels.push(kernel_report(spec, profile, time, bare, compile));
        }
        let block_time = Timing::of(&rig.time_block(self.device, self.warmup, self.iters)?);
        let inside = rig.time_in_block(self.device, self.warmup, self.iters)?;
        if inside.len() != kernels.len() {
            bail!("the block launches {} kernels, its rig times {} (a bug)", inside.len(), kernels.len());
        }
        for (kernel, stats) in kernels.iter_mut().zip(&inside) {
            kernel.in_block = Some(Timing::of(stats));
        }
        let mut vendor = Vec::new();
        for bare in bares.values() {
            let measured = (&bare.rig, bare.gemm.as_str(), bare.config.clone());
            vendor.extend(self.vendor.compare(self.device, measured, &bare.profile, (self.warmup, self.iters))?);
        }
        let dims = block.symbolic_dims().filter_map(|d| dims.get(d).map(|v| (d.to_string(), *v))).collect();
        let times = (block_time, vendor);
        Ok(BlockReport::totals(block.name.clone(), dims, rig.copies, rig.bytes_per_copy, kernels, times))
    }

    /// Compiles the GEMM of `g` with an empty epilogue and uploads its data.
    fn bare_rig(&self, g: &GemmProfile) -> Result<BareRig> {
        let bare = g.bare_gemm();
        let checked = coda::check("bare_gemm.coda", &bare.source)?;
        if checked.has_errors() {
            bail!("the bare GEMM of {} does not check (a bug):\n{}", g.shape(), checked.render_diagnostics());
        }
        let options = coda::CompileOptions {
            arch: self.device.arch().to_string(),
            launch: Some(tune::launch_hint(self.device, &bare.dims)),
            ..Default::default()
        };
        let compiled = coda::compile(&checked, &options)?;
        let profiles = coda::profile(&checked, &options, &bare.dims)?;
        let (Some(manifest), Some(profile), Some(block)) =
            (compiled.manifest.blocks.first(), profiles.first(), checked.module.blocks.first())
        else {
            bail!("the bare GEMM of {} compiled to nothing (a bug)", g.shape());
        };
        let gemm = profile.kernels.iter().find(|k| k.gemm.is_some()).context("the bare GEMM has no GEMM kernel")?;
        let config = gemm.gemm.as_ref().map(|p| p.config.clone());
        let mut compile = self.compile_all(manifest, &compiled.kernels)?;
        let inputs = coda::random_inputs(block, &bare.dims, 1)?;
        let kernel_bytes: BTreeMap<String, u64> =
            profile.kernels.iter().map(|p| (p.name.clone(), p.bytes_moved)).collect();
        let spec = RigSpec {
            manifest,
            sources: &compiled.kernels,
            dims: &bare.dims,
            inputs: &inputs,
            kernel_bytes: &kernel_bytes,
        };
        let rig = Rig::new(self.device, &spec)?;
        eprintln!("prepared the bare GEMM {} ({} copies)", g.shape(), rig.copies);
        let mut compile = compile.remove(&gemm.name).context("no compile record of the bare GEMM")?;
        compile.registers = rig.registers().get(&gemm.name).copied().unwrap_or(0);
        Ok(BareRig { rig, gemm: gemm.name.clone(), config, compile, profile: g.clone() })
    }
}

/// The shape and layouts of a GEMM: kernels with equal keys share a bare GEMM.
fn bare_key(g: &GemmProfile) -> BareKey {
    (g.m.value, g.n.value, g.k.value, g.a_row_major, g.b_n_by_k, g.dtype.to_string())
}

/// A bare GEMM ready to be timed: its rig, its GEMM kernel's short name,
/// configuration and compile record, and the GEMM it stands for.
struct BareRig {
    rig: Rig,
    gemm: String,
    config: Option<String>,
    compile: CompileReport,
    profile: GemmProfile,
}

impl BareRig {
    /// The report of one timing of this bare GEMM (against kernel `g`).
    fn report(&self, g: &GemmProfile, time: Timing) -> BareReport {
        let (config, compile) = (self.config.clone(), self.compile);
        let tflops = tflops(g.flops(), time.median_ms);
        BareReport { interleaved: true, config, time, tflops, copies: self.rig.copies, compile }
    }
}

/// Combines the measurements of one kernel.
fn kernel_report(
    spec: &coda::cuda::manifest::KernelSpec,
    profile: &KernelProfile,
    time: Timing,
    bare: Option<BareReport>,
    compile: CompileReport,
) -> KernelReport {
    let gemm = profile.gemm.as_ref().map(gemm_report);
    let epilogue_cost = bare.as_ref().filter(|b| b.time.median_ms > 0.0).map(|b| time.median_ms / b.time.median_ms);
    KernelReport {
        name: spec.name.clone(),
        kind: spec.kind.clone(),
        summary: spec.summary.clone(),
        config: spec.config.clone(),
        tflops: gemm.as_ref().map(|g| tflops(g.flops, time.median_ms)),
        gemm,
        time,
        bytes_moved: profile.bytes_moved,
        epilogue_bytes: profile.epilogue_bytes,
        epilogue_gbps: gbps(profile.epilogue_bytes, time.median_ms),
        bare_gemm: bare,
        epilogue_cost,
        compile,
        in_block: None,
    }
}
