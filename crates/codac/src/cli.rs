//! The command-line interface (clap derive). The commands and flags here are
//! a contract that scripts and later tooling rely on.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// codac compiles .coda blocks (plain Transformer math) into fused GEMM-plus-epilogue kernels.
#[derive(Debug, Parser)]
#[command(name = "codac", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// When to colour diagnostics.
    #[arg(long, value_enum, default_value = "auto", global = true)]
    pub(crate) color: ColorArg,
}

/// Colour choice for diagnostics.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ColorArg {
    /// Colour when standard error is a terminal.
    Auto,
    /// Never colour.
    Never,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Parse and type/shape-check a file; print its diagnostics.
    #[command(after_help = "Example:\n  codac check examples/llama3_block.coda")]
    Check(FileArg),
    /// Show the checked IR of every block (or, with --json, a stable machine-readable form).
    #[command(
        after_help = "Examples:\n  codac explain examples/llama3_block.coda\n  codac explain examples/lm_head_ce.coda --json"
    )]
    Explain(ExplainArgs),
    /// Evaluate blocks with the exact CPU reference interpreter.
    #[command(
        after_help = "Examples:\n  codac eval examples/llama3_block.coda --dims M=128 --random\n  codac eval examples/gpt2_block.coda --dims M=64 --random --seed 7 --out out/\n  codac eval block.coda --dims M=256 --inputs inputs/ --bf16-rounding\n\nLimits:\n  Every value is held as f64, 8 bytes an element, and has at most 2^31 elements.\n  Before it starts, eval estimates the memory it needs (inputs plus the values\n  live at once) and refuses a block that would need more than --max-memory,\n  by default the memory available now. On a terminal, an evaluation that runs\n  longer than a second shows its progress on standard error. See docs/interpreter.md."
    )]
    Eval(EvalArgs),
    /// Generate CUDA: one .cu file per kernel plus manifest.json (PTX / CUBIN through NVRTC, no GPU needed).
    #[command(
        after_help = "Examples:\n  codac compile examples/llama3_block.coda -o out/llama3\n  codac compile examples/lm_head_ce.coda -o out/lm --arch sm_80 --emit cu,ptx,cubin"
    )]
    Compile(CompileArgs),
    /// Compile, run on the GPU, and optionally check against the interpreter and time each kernel.
    #[command(
        after_help = "Examples:\n  codac run examples/llama3_block.coda --dims M=4096 --random --check --time\n  codac run block.coda --dims M=256 --inputs inputs/ --out outputs/"
    )]
    Run(RunArgs),
    /// Time every kernel of a block on the GPU, the block, and each GEMM without its epilogue.
    #[command(
        after_help = "Examples:\n  codac bench examples/llama3_block.coda --dims M=8192\n  codac bench examples/llama3_block.coda --dims M=8192 --json > bench.json"
    )]
    Bench(crate::bench_cmd::BenchArgs),
}

#[derive(Debug, Args)]
pub(crate) struct FileArg {
    /// The .coda file.
    pub(crate) file: PathBuf,
}

/// How block norms and row kernels meet the GEMMs (shared by `compile`,
/// `explain`, `run` and `bench`).
#[derive(Debug, Clone, Args)]
pub(crate) struct KernelFlags {
    /// Keep a row kernel separate from the Hopper GEMM after it, instead of having the GEMM compute its rows on demand (docs/codegen.md, "Row preludes").
    #[arg(long)]
    pub(crate) no_row_prelude: bool,
    /// In backward blocks, read the RMSNorm backward's row term from the forward's saved product in the epilogue that makes the gradient, instead of recomputing it after the dgrad GEMM (the `zdz` rule): fewer kernels, but slower on the H100 (docs/decisions/zdz-rule.md).
    #[arg(long)]
    pub(crate) saved_products: bool,
    /// Give every Hopper GEMM that can take it this tile configuration instead of the rules' (or the autotuner's) choice, e.g. `Sm90Cfg128x128pp` (ping-pong: one tile's epilogue overlaps the other's K loop); the names are in docs/cli.md.
    #[arg(long, value_name = "CONFIG", value_parser = parse_tile_config)]
    pub(crate) tile_config: Option<coda::cuda::config::TileConfig>,
    /// Run this GEMM kernel unfused (repeatable; its name as `codac explain` lists it): the GEMM stores its accumulator and what its epilogue would compute goes to the kernels after it, the form a fused site is measured against.
    #[arg(long, value_name = "GEMM")]
    pub(crate) unfuse: Vec<String>,
}

/// A Hopper tile configuration by its C++ name.
fn parse_tile_config(name: &str) -> Result<coda::cuda::config::TileConfig, String> {
    match coda::cuda::config::TileConfig::from_name(name) {
        Some(c) if c.is_sm90() => Ok(c),
        _ => {
            let names: Vec<&str> =
                coda::cuda::config::TileConfig::ALL.iter().filter(|c| c.is_sm90()).map(|c| c.name()).collect();
            Err(format!("not a Hopper tile configuration; one of {}", names.join(", ")))
        }
    }
}

impl KernelFlags {
    /// The reparameterizer's options these flags ask for.
    fn rewrite(&self) -> coda::opt::Options {
        coda::opt::Options { saved_products: self.saved_products, ..coda::opt::Options::default() }
    }

    /// The compile options of `compile`, `run` and `bench`: these flags, for
    /// `arch`, the blocks `block` names (all without it) and `launch`.
    pub(crate) fn compile_options(
        &self,
        arch: String,
        block: Option<String>,
        launch: Option<coda::cuda::config::LaunchHint>,
    ) -> coda::CompileOptions {
        coda::CompileOptions { block, rewrite: self.rewrite(), codegen: self.codegen(arch, launch) }
    }

    /// The code generator's options: these flags, for `arch` and `launch`.
    fn codegen(&self, arch: String, launch: Option<coda::cuda::config::LaunchHint>) -> coda::cuda::CodegenOptions {
        coda::cuda::CodegenOptions {
            arch,
            row_preludes: !self.no_row_prelude,
            tiles: Default::default(),
            tile_config: self.tile_config,
            launch,
            unfused: self.unfuse.iter().cloned().collect(),
            unfused_in: Default::default(),
        }
    }

    /// The options of `explain`: these flags, and `launch` (its dims are
    /// the traffic figures' too).
    pub(crate) fn explain_options(&self, launch: Option<coda::cuda::config::LaunchHint>) -> coda::ExplainOptions {
        let arch = coda::cuda::CodegenOptions::default().arch;
        let dims = launch.as_ref().map(|l| l.dims.clone()).unwrap_or_default();
        coda::ExplainOptions { dims, rewrite: self.rewrite(), codegen: self.codegen(arch, launch) }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ExplainArgs {
    /// The .coda file.
    pub(crate) file: PathBuf,
    /// Print JSON (schema in docs/explain-json.md).
    #[arg(long)]
    pub(crate) json: bool,
    /// Work on the backward blocks (the `grad` declarations, or every block w.r.t. all float inputs); see docs/backward.md.
    #[arg(long)]
    pub(crate) grad: bool,
    /// Run-time dimensions, e.g. `M=1000`: the traffic figures are for
    /// them (default 8192) and tile configurations are chosen for them as
    /// `codac run` would.
    #[arg(long, value_delimiter = ',')]
    pub(crate) dims: Vec<String>,
    /// Streaming multiprocessors of the GPU, with `--dims` (132: an H100 SXM).
    #[arg(long, default_value_t = 132, value_parser = clap::value_parser!(u32).range(1..), requires = "dims")]
    pub(crate) multiprocessors: u32,
    #[command(flatten)]
    pub(crate) kernels: KernelFlags,
}

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// The .coda file.
    pub(crate) file: PathBuf,
    /// Dimensions and where the inputs come from.
    #[command(flatten)]
    pub(crate) input: InputArgs,
    /// Write outputs to DIR/NAME.npy.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Round each value to its storage type where the program stores it (bf16/f16 GEMM operands, casts, fp8 casts included, outputs).
    #[arg(long)]
    pub(crate) bf16_rounding: bool,
    /// Evaluate only this block (default: every block in the file).
    #[arg(long)]
    pub(crate) block: Option<String>,
    /// Evaluate the backward blocks: forward inputs, saved tensors from the saving forward, output gradients (random, or DIR/d<output>.npy); see docs/backward.md.
    #[arg(long)]
    pub(crate) grad: bool,
    /// The most memory the evaluation may use, e.g. `512M` or `64G` (default: the memory available now). An evaluation whose estimate is larger is refused before it starts; give a larger SIZE to go ahead anyway.
    #[arg(long, value_name = "SIZE", value_parser = crate::interp::parse_size)]
    pub(crate) max_memory: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct CompileArgs {
    /// The .coda file.
    pub(crate) file: PathBuf,
    /// Output directory (created if needed).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// Target architecture.
    #[arg(long, default_value = "sm_90a")]
    pub(crate) arch: String,
    /// What to write besides manifest.json: any of cu, ptx, cubin.
    #[arg(long, value_delimiter = ',', default_value = "cu")]
    pub(crate) emit: Vec<String>,
    /// Compile only this block (default: every block in the file); with --grad, a forward block (its saving forward and backward) or either of those.
    #[arg(long)]
    pub(crate) block: Option<String>,
    /// Compile training steps: each saving forward (the forward that also stores the saved tensors) and its backward block (the `grad` declarations, or every block w.r.t. all float inputs); see docs/backward.md.
    #[arg(long)]
    pub(crate) grad: bool,
    /// Run-time dimensions the kernels will mostly run at, e.g. `M=1000`:
    /// tile configurations are then chosen for them as `codac run` would
    /// (the kernels stay correct for any value).
    #[arg(long, value_delimiter = ',')]
    pub(crate) dims: Vec<String>,
    /// Streaming multiprocessors of the GPU the kernels are for, with
    /// `--dims` (132: an H100 SXM).
    #[arg(long, default_value_t = 132, value_parser = clap::value_parser!(u32).range(1..), requires = "dims")]
    pub(crate) multiprocessors: u32,
    /// Compile every kernel with NVRTC, one at a time and bypassing the
    /// kernel cache, and print each one's cold compile time, slowest first
    /// (with any --emit; with `--emit ptx` the time includes the PTX pass,
    /// which a run does not make; no GPU needed).
    #[arg(long)]
    pub(crate) time: bool,
    #[command(flatten)]
    pub(crate) kernels: KernelFlags,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The .coda file.
    pub(crate) file: PathBuf,
    /// Dimensions and where the inputs come from.
    #[command(flatten)]
    pub(crate) input: InputArgs,
    /// Poison outputs with NaN, then compare every output with the interpreter (rounding on).
    #[arg(long)]
    pub(crate) check: bool,
    /// Write the GPU outputs to DIR/NAME.npy.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Time each kernel: median of 20 runs after warm-up, with CUDA events.
    #[arg(long)]
    pub(crate) time: bool,
    /// Run only this block (default: every block in the file).
    #[arg(long)]
    pub(crate) block: Option<String>,
    /// Work on training steps: each saving forward (the forward that also stores the saved tensors) and its backward block (the `grad` declarations, or every block w.r.t. all float inputs), each on its own random inputs; see docs/backward.md.
    #[arg(long)]
    pub(crate) grad: bool,
    #[command(flatten)]
    pub(crate) kernels: KernelFlags,
}

/// The run-time dims and the inputs, shared by `eval` and `run`.
#[derive(Debug, Args)]
pub(crate) struct InputArgs {
    /// Run-time dimensions, e.g. `M=256` or `M=256,T=8`; may be repeated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) dims: Vec<String>,
    /// Generate deterministic random inputs (documented in docs/interpreter.md).
    #[arg(long, conflicts_with = "inputs", required_unless_present = "inputs")]
    pub(crate) random: bool,
    /// Seed for --random.
    #[arg(long, default_value_t = 0, requires = "random")]
    pub(crate) seed: u64,
    /// Read inputs from DIR/NAME.npy, one file per block input.
    #[arg(long, value_name = "DIR")]
    pub(crate) inputs: Option<PathBuf>,
}
