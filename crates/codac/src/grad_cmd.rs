//! `--grad`: the backward blocks instead of the forward ones.
//!
//! `explain`, `compile` and `run` work on [`coda::grad_view`], whose blocks
//! are the backward blocks (ordinary blocks; with `run --random` their saved
//! inputs are random like every other input). `eval --grad` chains the
//! interpreter: the forward inputs (random or read), the saved tensors from
//! the saving forward, the output gradients (random, or `d<output>.npy`),
//! then the backward block.

use crate::cli::EvalArgs;
use crate::commands::{check_dims_known, inputs_of, load, parse_dims, summary, Outcome};
use crate::interp::{self, MemoryLimit};
use crate::npy;
use anyhow::{bail, Result};
use coda::grad::Gradient;
use coda::{Checked, ColorChoice, DimBindings, EvalOptions, HostTensor, SourceFile};
use std::collections::BTreeMap;
use std::io::Write;

/// The program itself, or with `grad` its backward blocks.
pub(crate) fn view(checked: Checked, grad: bool) -> Result<Checked> {
    if !grad {
        return Ok(checked);
    }
    let view = coda::grad_view(&checked)?;
    if view.module.blocks.is_empty() {
        bail!("{} has no block to differentiate (only explicit kernels, or no float inputs)", checked.source.name);
    }
    Ok(view)
}

/// The blocks of training steps: for each gradient, its saving forward and
/// then its backward block (`bench --grad`).
pub(crate) fn training_view(checked: Checked) -> Result<Checked> {
    let view = view(checked, true)?;
    let blocks = view.grads.iter().flat_map(|g| [g.saving_forward.clone(), g.backward.clone()]).collect();
    let module = coda::ir::Module { file_name: view.module.file_name.clone(), blocks };
    Ok(Checked { module, ..view })
}

/// The training view narrowed to `--block NAME`, and the block name to
/// hand to the compiler. Besides a block of the view (a saving forward or
/// a backward), NAME may be the forward block the user wrote: that selects
/// its whole training step, both blocks. Without NAME, every step.
pub(crate) fn training_step(checked: Checked, block: Option<&str>) -> Result<(Checked, Option<String>)> {
    let view = training_view(checked)?;
    let Some(name) = block else { return Ok((view, None)) };
    if view.module.block(name).is_some() {
        return Ok((view, Some(name.to_owned())));
    }
    let step: Vec<String> = view
        .grads
        .iter()
        .filter(|g| g.forward == name)
        .flat_map(|g| [g.saving_forward.name.clone(), g.backward.name.clone()])
        .collect();
    if step.is_empty() {
        let forwards: Vec<&str> = view.grads.iter().map(|g| g.forward.as_str()).collect();
        let blocks: Vec<&str> = view.module.blocks.iter().map(|b| b.name.as_str()).collect();
        bail!(
            "no training step for `{name}` in {}: with --grad, --block takes a forward block ({}) or a block of its training step ({})",
            view.source.name,
            if forwards.is_empty() { "none".to_owned() } else { forwards.join(", ") },
            blocks.join(", ")
        );
    }
    let mut view = view;
    view.module.blocks.retain(|b| step.contains(&b.name));
    Ok((view, None))
}

/// Seed offset of the random output gradients, so they differ from the inputs.
const GRADIENT_SEED: u64 = 0x6772_6164;

/// `codac eval --grad`.
pub(crate) fn eval(args: &EvalArgs, color: ColorChoice) -> Result<Outcome> {
    let checked = load(&args.file, color)?;
    if checked.has_errors() {
        return Ok(Outcome::UserError);
    }
    let view = view(checked, true)?;
    let dims = parse_dims(&args.input.dims)?;
    let options = EvalOptions { round_to_storage: args.bf16_rounding };
    let grads: Vec<&Gradient> = match &args.block {
        Some(name) => match coda::gradient_of(&view, name) {
            Some(g) => vec![g],
            None => bail!("no backward block named `{name}` in {}", view.source.name),
        },
        None => view.grads.iter().collect(),
    };
    let limit = MemoryLimit::new(args.max_memory);
    let source = &view.source;
    let mut stdout = std::io::stdout().lock();
    for gradient in grads {
        check_dims_known(&gradient.backward, &dims)?;
        interp::check_memory(source, &[&gradient.saving_forward, &gradient.backward], &dims, limit.as_ref())?;
        let inputs = backward_inputs(args, source, gradient, &dims, &options, limit.as_ref())?;
        let outputs = interp::evaluate(source, &gradient.backward, &dims, &inputs, &options, limit.as_ref())?;
        writeln!(stdout, "block {} (backward of {}):", gradient.backward.name, gradient.forward)?;
        for output in &gradient.backward.outputs {
            let Some(tensor) = outputs.get(&output.tensor.name) else { continue };
            writeln!(stdout, "  {}", summary(&output.tensor, tensor))?;
            if let Some(dir) = &args.out {
                npy::write_output(dir, &output.tensor, tensor)?;
            }
        }
    }
    Ok(Outcome::Success)
}

/// Every input of the backward block: forward inputs, saved tensors (from
/// the saving forward on those inputs) and output gradients.
fn backward_inputs(
    args: &EvalArgs,
    source: &SourceFile,
    gradient: &Gradient,
    dims: &DimBindings,
    options: &EvalOptions,
    limit: Option<&MemoryLimit>,
) -> Result<BTreeMap<String, HostTensor>> {
    let forward = &gradient.saving_forward;
    let mut inputs = inputs_of(source, forward, dims, &args.input)?;
    let saved = interp::evaluate(source, forward, dims, &inputs, options, limit)?;
    for s in &gradient.saved {
        if let Some(t) = saved.get(&s.name) {
            inputs.insert(s.name.clone(), t.clone());
        }
    }
    // A block whose only inputs are the output gradients, to read or draw them.
    let mut given = gradient.backward.clone();
    given.params.retain(|p| gradient.output_grads.iter().any(|(_, n)| *n == p.name));
    given.outputs.clear();
    let output_grads = match &args.input.inputs {
        Some(dir) => npy::read_inputs(&given, dims, dir)?,
        None => coda::random_inputs(&given, dims, args.input.seed ^ GRADIENT_SEED)
            .map_err(|e| interp::located(source, &given, &e))?,
    };
    inputs.extend(output_grads);
    inputs.retain(|name, _| gradient.backward.param(name).is_some());
    Ok(inputs)
}
