//! Running a block compiled by `coda-cuda`: its manifest entry plus the
//! generated sources.
//!
//! [`BlockExecutor::new`] compiles every kernel with NVRTC for the device's
//! exact arch (through the kernel cache) and loads it, recording compile
//! times and cache hits. [`BlockExecutor::prepare`] takes the run-time dim
//! bindings and non-owning [`TensorArg`]s for the block's inputs and
//! outputs (a PyTorch binding passes its tensors' pointers here), checks
//! every binding's dtype, shape and layout (``argument `x`: expected
//! bf16[128, 4096], got …``), allocates scratch, partial and staging
//! buffers, and builds every launch; [`BlockExecutor::launch`] enqueues the
//! kernels in order on a stream, [`BlockExecutor::launch_graph`] enqueues
//! them as one CUDA graph (`graph.rs`), and [`BlockExecutor::time`]
//! measures each kernel with CUDA events. [`BlockExecutor::prepare_with`] is `prepare`
//! for a caller that owns all memory (the PyTorch binding): the buffers the
//! host would allocate are laid out in one region that the caller's
//! allocator provides, and grid-reduction counters in it are zeroed on the
//! stream before each launch of the block.
//!
//! Layout rules for bindings: a rank-2 tensor needs a unit column stride
//! (its row stride is the leading dimension); rank-0 and rank-1 tensors
//! must be contiguous. A 16-bit input that a GEMM reads in place must also
//! be 16-byte aligned with a row stride that is a multiple of 8 elements;
//! otherwise the runtime's staging copy ([`crate::staging`]) fills a padded
//! staging buffer first.

mod bind;
mod graph;
mod launch;
mod plan;

use crate::compiler::Compiler;
use crate::device::Device;
use crate::error::{Result, RuntimeError};
use crate::launch::Kernel;
use crate::nvrtc::CompileOptions;
use coda_manifest::manifest::{BlockManifest, KernelSpec};
use coda_manifest::KernelSource;

pub use bind::{Plan, Prepared, WORKSPACE_ALIGN};
pub use launch::KernelTiming;

/// How one kernel was compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelCompile {
    /// Kernel name (`gemm_x1`).
    pub name: String,
    /// Source file name.
    pub file: String,
    /// Milliseconds spent (NVRTC on a miss, the lookup on a hit).
    pub compile_ms: f64,
    /// Served from the kernel cache.
    pub cache_hit: bool,
    /// Registers per thread.
    pub registers: usize,
    /// NVRTC warnings, if any.
    pub warnings: String,
}

/// A loaded kernel with its launch description.
#[derive(Debug)]
struct Loaded {
    spec: KernelSpec,
    kernel: Kernel,
}

/// The compiled kernels of one block, ready to run on one device.
#[derive(Debug)]
pub struct BlockExecutor {
    manifest: BlockManifest,
    kernels: Vec<Loaded>,
    report: Vec<KernelCompile>,
    /// Launch plans by the shape of their bindings (`plan.rs`).
    plans: std::sync::Mutex<std::collections::HashMap<plan::PlanKey, std::sync::Arc<plan::Plan>>>,
}

impl BlockExecutor {
    /// Compiles (through the cache) and loads every kernel of `manifest`,
    /// whose sources are among `sources` (matched by file name).
    pub fn new(device: &Device, manifest: &BlockManifest, sources: &[KernelSource]) -> Result<BlockExecutor> {
        let compiler = Compiler::global()?;
        let mut jobs = Vec::new();
        for spec in &manifest.kernels {
            let source = sources.iter().find(|s| s.file_name == spec.file).ok_or_else(|| {
                RuntimeError::InvalidInput(format!("no source for kernel `{}` ({})", spec.name, spec.file))
            })?;
            jobs.push((source.source.as_str(), CompileOptions::new(device.arch()).file_name(&spec.file)));
        }
        let mut kernels = Vec::new();
        let mut report = Vec::new();
        for (spec, compiled) in manifest.kernels.iter().zip(compiler.compile_many(&jobs)) {
            let compiled = compiled?;
            let module = device.load(&compiled)?;
            let kernel = module.function(&spec.entry)?;
            report.push(KernelCompile {
                name: spec.name.clone(),
                file: spec.file.clone(),
                compile_ms: compiled.compile_ms,
                cache_hit: compiled.cache_hit,
                registers: kernel.num_regs().unwrap_or(0),
                warnings: if compiled.has_warnings() { compiled.log.clone() } else { String::new() },
            });
            kernels.push(Loaded { spec: spec.clone(), kernel });
        }
        kernels.extend(bind::staging_copies(device, manifest)?);
        Ok(BlockExecutor { manifest: manifest.clone(), kernels, report, plans: Default::default() })
    }

    /// How each kernel was compiled, in launch order.
    pub fn compile_report(&self) -> &[KernelCompile] {
        &self.report
    }

    /// The manifest entry.
    pub fn manifest(&self) -> &BlockManifest {
        &self.manifest
    }
}
