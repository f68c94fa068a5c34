//! `codac bench`: the command line of [`coda_bench`], which times every
//! kernel of a block on the GPU, the whole block, and for each GEMM kernel
//! the same GEMM with an empty epilogue, plus the compile latency of every
//! kernel (`docs/benchmarks.md`; the protocol is in `coda_bench`'s docs).

use crate::cli::KernelFlags;
use crate::commands::{check_dims_known, load, parse_dims, selected_blocks, Outcome};
use anyhow::Result;
use clap::Args;
use coda::ColorChoice;
use coda_bench::report::render_text;
use coda_bench::{tune, Settings};
use coda_runtime::TuningStore;
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
    /// (interleaved with the rules' choice), and the block with each fused
    /// GEMM unfused against the block as is, and file the winners next to
    /// the kernel cache, where `codac run` and `codac bench` find them for
    /// this device, program and dimensions; then benchmark with the winners.
    #[arg(long)]
    pub(crate) autotune: bool,
    #[command(flatten)]
    pub(crate) kernels: KernelFlags,
}

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
    let device = coda_bench::open_device()?;
    let launch = Some(tune::launch_hint(&device, &dims));
    let options = args.kernels.compile_options(device.arch().to_string(), block, launch);
    let compiled = coda::compile(&checked, &options)?;
    let progress = |line: &str| eprintln!("{line}");
    let settings =
        Settings { warmup: args.warmup as usize, iters: args.iters as usize, seed: args.seed, progress: &progress };
    let mut store = TuningStore::from_env();
    let (tuned, tuned_blocks) = if args.autotune {
        let job =
            coda_bench::Job { checked: &checked, options: &options, compiled: &compiled, device: &device, dims: &dims };
        let tuned = coda_bench::autotune(&job, &settings, &mut store)?;
        // A store that cannot be written only loses the winners for later runs.
        match store.save() {
            Ok(()) => eprintln!(
                "autotune: {} entries in {}",
                store.len(),
                store.path().map_or("memory".into(), |p| p.display().to_string())
            ),
            Err(e) => eprintln!("warning: the tuning results were not saved: {e}"),
        }
        tuned
    } else {
        (Vec::new(), Vec::new())
    };
    let (tuned_options, mut compiled) = tune::with_tuning(&checked, &options, compiled, &device, &store, &dims)?;
    for line in crate::run_cmd::tuning_lines(&options, &tuned_options, &store) {
        eprintln!("{line}");
    }
    let options = tuned_options;
    crate::overrides::apply(&mut compiled)?;
    let job =
        coda_bench::Job { checked: &checked, options: &options, compiled: &compiled, device: &device, dims: &dims };
    let mut report = coda_bench::benchmark(&job, &settings)?;
    report.autotune = tuned;
    report.autotune_blocks = tuned_blocks;
    let text = render_text(&report);
    if args.json {
        eprint!("{text}");
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{text}");
    }
    Ok(Outcome::Success)
}
