//! Benchmarking and autotuning of codac's kernels on the GPU: the engine of
//! `codac bench`, callable from any front end (the CLI, the Python package).
//!
//! [`benchmark`] times every kernel of a block, the whole block, and for
//! each GEMM kernel the same GEMM with an empty epilogue, plus the compile
//! latency of every kernel (`docs/benchmarks.md`). [`autotune`] times each
//! GEMM kernel's alternative tile configurations and files the winners in
//! the tuning store, where [`tune::with_tuning`] finds them.
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
//! `warmup` untimed runs and `iters` timed runs; the median is reported.
//! Interleaving matters on an H100: sustained GEMMs reach its 700 W power
//! cap within about a second and the clock drops from 1980 MHz to about
//! 1400-1500 MHz (measured with `nvidia-smi`), so a kernel and its bare GEMM
//! timed one after the other run at different clocks. The bare GEMM is a
//! block `y = a @ b.T` (the kernel's operand layouts, dtype and M, N, K)
//! compiled through `coda::compile`, so it gets the same mainloop and
//! configuration rules. Last, each distinct bare GEMM is timed interleaved
//! with cuBLAS's GEMM on the same data ([`vendor`]).

mod block;
pub mod report;
mod rig;
pub mod tune;
mod vendor;

use block::Bench;
use coda::{Checked, CompileOptions, Compiled, DimBindings};
use coda_runtime::{CompileOptions as NvrtcOptions, Compiler, Device, RuntimeError, TuningStore};
use report::{DeviceReport, Report, StepReport, TuneBlockCheck, TuneReport, SCHEMA};

/// What can stop a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// No usable GPU or driver.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// The block's buffers do not fit the device's memory.
    #[error("one copy of block `{block}` needs {needed} bytes; {free} are free on the device")]
    DeviceMemory { block: String, needed: u64, free: u64 },
    /// The runtime failed (compiling, allocating, launching, timing).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The program did not compile at the benchmark's dimensions.
    #[error(transparent)]
    Compile(#[from] coda::CompileError),
    /// The random inputs could not be made.
    #[error(transparent)]
    Inputs(#[from] coda::EvalError),
    /// A broken invariant: a bug in codac.
    #[error(transparent)]
    Internal(#[from] coda::InternalError),
    /// A broken invariant of the benchmark itself: a bug in codac.
    #[error("{0} (a bug in codac)")]
    Bug(String),
}

impl BenchError {
    /// Whether this is a bug in codac rather than a property of the
    /// program, the device or the environment.
    pub fn is_bug(&self) -> bool {
        matches!(self, BenchError::Bug(_) | BenchError::Internal(_))
    }
}

/// The result type of this crate.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// A value that must be there unless codac has a bug.
pub(crate) trait OrBug<T> {
    fn or_bug(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> OrBug<T> for Option<T> {
    fn or_bug(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| BenchError::Bug(what()))
    }
}

impl<T, E: std::fmt::Display> OrBug<T> for std::result::Result<T, E> {
    fn or_bug(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| BenchError::Bug(format!("{}: {e}", what())))
    }
}

/// Returns [`BenchError::Bug`] with a formatted message.
macro_rules! bug {
    ($($arg:tt)*) => { return Err($crate::BenchError::Bug(format!($($arg)*))) };
}
pub(crate) use bug;

/// The measurement settings.
pub struct Settings<'a> {
    /// Untimed runs before each timing loop.
    pub warmup: usize,
    /// Timed runs of each kernel and block (the median is reported).
    pub iters: usize,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Receives one line per step of progress (compiling, timing).
    pub progress: &'a dyn Fn(&str),
}

/// Opens device 0; every way of finding no usable GPU is [`BenchError::NoGpu`].
pub fn open_device() -> Result<Device> {
    match Device::open(0) {
        Ok(d) => Ok(d),
        Err(e) if e.is_no_gpu() => {
            Err(BenchError::NoGpu(format!("benchmarks need an NVIDIA GPU and its driver ({e})")))
        }
        Err(e @ RuntimeError::NoDriver { .. }) => Err(BenchError::NoGpu(e.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// What to measure: the blocks of `compiled` (compiled from `checked` with
/// `options`) at `dims` on `device`.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    /// The checked program.
    pub checked: &'a Checked,
    /// The options `compiled` was compiled with.
    pub options: &'a CompileOptions,
    /// The kernels to measure.
    pub compiled: &'a Compiled,
    /// The GPU.
    pub device: &'a Device,
    /// The run-time dimensions.
    pub dims: &'a DimBindings,
}

/// Benchmarks every block of the job, and each training step of its
/// program's `grad` declarations whose blocks were benchmarked.
pub fn benchmark(job: &Job<'_>, settings: &Settings<'_>) -> Result<Report> {
    let Job { checked, options, compiled, device, dims } = *job;
    let compiler = Compiler::global()?;
    let profiles = coda::profile(checked, options, dims)?;
    warm_up_nvrtc(compiler, device)?;
    let (major, minor) = compiler.nvrtc_version();
    let info = device.info();
    let vendor = vendor::Vendor::open(device);
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
        warmup: settings.warmup,
        iters: settings.iters,
        vendor: vendor.note.clone(),
        blocks: Vec::new(),
        steps: Vec::new(),
        autotune: Vec::new(),
        autotune_blocks: Vec::new(),
    };
    let bench = Bench { device, compiler, vendor: &vendor, settings };
    for manifest in &compiled.manifest.blocks {
        let Some(block) = checked.module.block(&manifest.block) else { continue };
        let kernels = profiles.iter().find(|p| p.block == manifest.block).map(|p| p.kernels.as_slice());
        let kernels = kernels.or_bug(|| format!("no profile of block `{}`", manifest.block))?;
        let inputs = coda::random_inputs(block, dims, settings.seed)?;
        report.blocks.push(bench.block(block, manifest, &compiled.kernels, kernels, dims, &inputs)?);
    }
    for g in &checked.grads {
        report.steps.extend(StepReport::of(&report.blocks, &g.saving_forward.name, &g.backward.name));
    }
    Ok(report)
}

/// Tunes every block of the job (compiled with the rules' configurations)
/// and files the winners in `store` (in memory: the caller saves it): each
/// kernel's measurements and each block's check of its winners together.
pub fn autotune(
    job: &Job<'_>,
    settings: &Settings<'_>,
    store: &mut TuningStore,
) -> Result<(Vec<TuneReport>, Vec<TuneBlockCheck>)> {
    let Job { checked, options, compiled, device, dims } = *job;
    let profiles = coda::profile(checked, options, dims)?;
    let tuner = tune::Autotune { device, checked, options, dims, settings };
    let (mut reports, mut checks) = (Vec::new(), Vec::new());
    for manifest in &compiled.manifest.blocks {
        let Some(block) = checked.module.block(&manifest.block) else { continue };
        let inputs = coda::random_inputs(block, dims, settings.seed)?;
        let profile = profiles.iter().find(|p| p.block == manifest.block);
        let kernel_bytes = profile.iter().flat_map(|p| &p.kernels).map(|k| (k.name.clone(), k.bytes_moved)).collect();
        let block = tune::TuneBlock { manifest, inputs: &inputs, kernel_bytes: &kernel_bytes };
        let (kernels, check) = tuner.block(compiled, &block, store)?;
        reports.extend(kernels);
        checks.extend(check);
    }
    Ok((reports, checks))
}

/// Compiles a trivial kernel once, so that the first measured cold compile
/// does not include NVRTC's own start-up.
fn warm_up_nvrtc(compiler: &Compiler, device: &Device) -> Result<()> {
    let source = "extern \"C\" __global__ void codac_bench_warm_up(int* p) { if (p) *p = 1; }\n";
    compiler.compile(source, &NvrtcOptions::new(device.arch()).file_name("codac_bench_warm_up.cu"))?;
    Ok(())
}
