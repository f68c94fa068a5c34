//! The subcommands `check`, `explain` and `eval`, and the dispatch to
//! `compile` and `run`.

use crate::cli::{Cli, ColorArg, Command, EvalArgs};
use crate::interp;
use crate::npy;
use anyhow::{bail, Context, Result};
use coda::{Checked, ColorChoice, DimBindings, EvalOptions, HostTensor};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// How a command ended when it did not fail outright.
pub(crate) enum Outcome {
    /// Everything worked.
    Success,
    /// The user's program has errors; diagnostics were printed.
    UserError,
}

/// Diagnostics printed at most per run, so a pathological file stays readable.
const MAX_DIAGNOSTICS: usize = 50;

pub(crate) fn run(cli: Cli) -> Result<Outcome> {
    let color = match cli.color {
        ColorArg::Auto => ColorChoice::Auto,
        ColorArg::Never => ColorChoice::Never,
    };
    match cli.command {
        Command::Check(args) => {
            let checked = load(&args.file, color)?;
            if checked.has_errors() {
                return Ok(Outcome::UserError);
            }
            let blocks = checked.module.blocks.len();
            println!("{}: ok ({blocks} block{})", checked.source.name, if blocks == 1 { "" } else { "s" });
            Ok(Outcome::Success)
        }
        Command::Explain(args) => {
            let checked = load(&args.file, color)?;
            if checked.has_errors() {
                return Ok(Outcome::UserError);
            }
            let checked = crate::grad_cmd::view(checked, args.grad)?;
            let launch = crate::compile_cmd::launch_hint(&args.dims, args.multiprocessors, &checked, None)?;
            let options = args.kernels.explain_options(launch);
            if args.json {
                let text = serde_json::to_string_pretty(&coda::explain_json_with(&checked, &options))?;
                println!("{text}");
            } else {
                print!("{}", coda::explain_text_with(&checked, &options));
            }
            Ok(Outcome::Success)
        }
        Command::Eval(args) if args.grad => crate::grad_cmd::eval(&args, color),
        Command::Eval(args) => eval(&args, color),
        Command::Compile(args) => crate::compile_cmd::compile(&args, color),
        Command::Run(args) => crate::run_cmd::run(&args, color),
        Command::Bench(args) => crate::bench_cmd::bench(&args, color),
    }
}

/// Largest `.coda` file read: the biggest real programs are a few KB and
/// the front end handles 100,000 `let`s (about 3 MB) well.
const MAX_SOURCE_BYTES: u64 = 256 << 20;

/// Reads a source file, pipes included (`codac check <(gen)`), but never
/// more than [`MAX_SOURCE_BYTES`]: `/dev/zero` would otherwise be read until
/// memory runs out.
fn read_source(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(MAX_SOURCE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_SOURCE_BYTES {
        anyhow::bail!("larger than {} MiB", MAX_SOURCE_BYTES >> 20);
    }
    Ok(bytes)
}

/// Reads, checks and prints the diagnostics of a file.
pub(crate) fn load(path: &Path, color: ColorChoice) -> Result<Checked> {
    let bytes = read_source(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let checked = coda::check_bytes(&path.display().to_string(), &bytes)?;
    let shown = checked.diagnostics.len().min(MAX_DIAGNOSTICS);
    coda::render(&checked.source, &checked.diagnostics[..shown], color);
    let errors = checked.diagnostics.iter().filter(|d| d.is_error()).count();
    if checked.diagnostics.len() > shown {
        eprintln!("... and {} more diagnostics", checked.diagnostics.len() - shown);
    }
    if errors > 0 {
        eprintln!(
            "error: {} could not be compiled: {errors} error{}",
            checked.source.name,
            if errors == 1 { "" } else { "s" }
        );
    }
    Ok(checked)
}

/// Parses `NAME=VALUE` dimension bindings.
pub(crate) fn parse_dims(items: &[String]) -> Result<DimBindings> {
    let mut dims = DimBindings::new();
    for item in items.iter().filter(|s| !s.trim().is_empty()) {
        let Some((name, value)) = item.split_once('=') else {
            bail!("invalid --dims entry `{item}`: expected NAME=VALUE, e.g. M=256");
        };
        let value: i64 = value
            .trim()
            .parse()
            .ok()
            .filter(|v| *v > 0)
            .with_context(|| format!("invalid value in --dims `{item}`: expected a positive integer"))?;
        dims.insert(name.trim().to_string(), value);
    }
    Ok(dims)
}

fn eval(args: &EvalArgs, color: ColorChoice) -> Result<Outcome> {
    let checked = load(&args.file, color)?;
    if checked.has_errors() {
        return Ok(Outcome::UserError);
    }
    let dims = parse_dims(&args.input.dims)?;
    let options = EvalOptions { round_to_storage: args.bf16_rounding };
    let blocks = selected_blocks(&checked, args.block.as_deref())?;
    let limit = interp::MemoryLimit::new(args.max_memory);
    let source = &checked.source;
    let mut stdout = std::io::stdout().lock();
    for block in blocks {
        check_dims_known(block, &dims)?;
        interp::check_memory(source, &[block], &dims, limit.as_ref())?;
        let inputs = inputs_of(source, block, &dims, &args.input)?;
        let outputs = interp::evaluate(source, block, &dims, &inputs, &options, limit.as_ref())?;
        writeln!(stdout, "block {}:", block.name)?;
        for output in &block.outputs {
            let Some(tensor) = outputs.get(&output.tensor.name) else { continue };
            writeln!(stdout, "  {}", summary(&output.tensor, tensor))?;
            if let Some(dir) = &args.out {
                npy::write_output(dir, &output.tensor, tensor)?;
            }
        }
    }
    Ok(Outcome::Success)
}

/// The inputs of `block`: read from `--inputs`, or random, the errors of
/// the latter located in `source`.
pub(crate) fn inputs_of(
    source: &coda::SourceFile,
    block: &coda::ir::Block,
    dims: &DimBindings,
    input: &crate::cli::InputArgs,
) -> Result<BTreeMap<String, HostTensor>> {
    match &input.inputs {
        Some(dir) => npy::read_inputs(block, dims, dir),
        None => {
            let _line = interp::InputsLine::new(block, dims);
            coda::random_inputs(block, dims, input.seed).map_err(|e| interp::located(source, block, &e))
        }
    }
}

/// The blocks `--block` names (every block without it).
pub(crate) fn selected_blocks<'a>(checked: &'a Checked, block: Option<&str>) -> Result<Vec<&'a coda::ir::Block>> {
    Ok(match block {
        Some(name) => match checked.module.block(name) {
            Some(block) => vec![block],
            None => bail!("no block named `{name}` in {}", checked.source.name),
        },
        None => checked.module.blocks.iter().collect(),
    })
}

/// Every symbolic dim must be bound, and every binding must name one.
pub(crate) fn check_dims_known(block: &coda::ir::Block, dims: &DimBindings) -> Result<()> {
    let symbolic: Vec<&str> = block.symbolic_dims().collect();
    for name in dims.keys() {
        if !symbolic.contains(&name.as_str()) {
            bail!(
                "--dims binds `{name}`, which is not a run-time dimension of block `{}` (run-time dims: {})",
                block.name,
                if symbolic.is_empty() { "none".to_string() } else { symbolic.join(", ") }
            );
        }
    }
    for name in &symbolic {
        if !dims.contains_key(*name) {
            bail!("block `{}` needs a value for `{name}`: pass --dims {name}=…", block.name);
        }
    }
    Ok(())
}

/// `name: dtype[shape]  mean … max|x| …`.
pub(crate) fn summary(tensor: &coda::ir::Tensor, value: &HostTensor) -> String {
    let n = value.data.len().max(1) as f64;
    let mean = value.data.iter().sum::<f64>() / n;
    let max_abs =
        value.data.iter().fold(0.0f64, |m, x| if x.is_nan() || m.is_nan() { f64::NAN } else { m.max(x.abs()) });
    let shape = npy::shape_of(tensor, value);
    let shape: Vec<String> = shape.iter().map(ToString::to_string).collect();
    format!("{}: {}[{}]  mean {:.6e}  max|x| {:.6e}", tensor.name, tensor.dtype, shape.join(", "), mean, max_abs)
}

/// For the tests of this module and others: results by name.
#[allow(dead_code)]
pub(crate) type Results = BTreeMap<String, HostTensor>;
