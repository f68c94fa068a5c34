//! Gradients: the backward blocks of a checked program (see `docs/backward.md`).
//!
//! [`check`](crate::check) differentiates the forward block of every `grad`
//! declaration ([`Checked::grads`]); [`grad_view`] turns a checked program
//! into one whose blocks are those backward blocks, so that `explain`,
//! `eval`, `compile` and `run` treat them like any other block.

use crate::{Checked, InternalError};
use coda_diagnostics::Diagnostic;
use coda_grad::{default_spec, differentiate, GradError, GradSpec, Gradient, SavedLayout};
use coda_ir::{Block, BlockKind, Module};
use coda_lower::GradRequest;

/// The gradients of the declared requests, with their diagnostics.
pub(crate) fn build(
    module: &Module,
    requests: &[GradRequest],
) -> Result<(Vec<Gradient>, Vec<Diagnostic>), InternalError> {
    let mut gradients = Vec::new();
    let mut diagnostics = Vec::new();
    for request in requests {
        let Some(forward) = module.block(&request.forward) else { continue };
        let spec = GradSpec {
            name: request.name.clone(),
            wrt: request.wrt.clone(),
            outputs: request.outputs.clone(),
            span: request.span,
        };
        if let Some(gradient) = one(forward, &spec, &mut diagnostics)? {
            gradients.push(gradient);
        }
    }
    Ok((gradients, diagnostics))
}

/// Differentiates one block; a rule that does not apply is a diagnostic.
fn one(forward: &Block, spec: &GradSpec, diagnostics: &mut Vec<Diagnostic>) -> Result<Option<Gradient>, InternalError> {
    // Sibling weights are stacked first, so that the saving forward keeps
    // their product in pair layout, as it keeps a fused weight's.
    let stacked = coda_opt::stack_siblings(forward).map_err(|e| InternalError::Grad(e.to_string()))?;
    let forward = &stacked;
    match differentiate(forward, spec) {
        Ok(gradient) => {
            for &i in &gradient.zero {
                let param = &forward.params[i];
                diagnostics.push(
                    Diagnostic::warning("W0004", format!("the gradient of `{}` is zero", param.name))
                        .with_primary(spec.span, format!("`{}` is differentiated here", param.name))
                        .with_secondary(param.span, "no differentiated output depends on this input"),
                );
            }
            for &amax in &gradient.differentiated_scales {
                diagnostics.push(
                    Diagnostic::warning("W0007", "the scale of an fp8 cast is differentiated")
                        .with_primary(forward.insts.span(amax), "this amax carries a gradient")
                        .with_secondary(spec.span, "differentiated because of this declaration")
                        .with_note(
                            "the scale's gradient terms cancel in exact arithmetic; after rounding they land on \
                             the element that holds the amax",
                        )
                        .with_help(
                            "take the amax of a detached value, as PyTorch's fp8 recipes do: `max(abs(detach(x)))`",
                        ),
                );
            }
            Ok(Some(gradient))
        }
        Err(GradError::NotDifferentiable { value, what, reason }) => {
            diagnostics.push(
                Diagnostic::error("E0506", format!("{what} cannot be differentiated"))
                    .with_primary(forward.insts.span(value), reason)
                    .with_secondary(spec.span, "differentiated because of this declaration"),
            );
            Ok(None)
        }
        Err(error) => Err(InternalError::Grad(error.to_string())),
    }
}

/// The backward blocks as a program of their own: those of the `grad`
/// declarations, or, in a file without any, of every `block` with respect to
/// all its float inputs (named `<block>_grad`). Backward blocks come in
/// declaration order; [`Checked::grads`] holds their gradients.
pub fn grad_view(checked: &Checked) -> Result<Checked, InternalError> {
    let mut diagnostics = checked.diagnostics.clone();
    let grads =
        if checked.grads.is_empty() { defaults(&checked.module, &mut diagnostics)? } else { checked.grads.clone() };
    let blocks = grads.iter().map(|g| g.backward.clone()).collect();
    let module = Module { file_name: checked.module.file_name.clone(), blocks };
    Ok(Checked { source: checked.source.clone(), module, diagnostics, grads })
}

/// The default gradient of every plain block.
fn defaults(module: &Module, diagnostics: &mut Vec<Diagnostic>) -> Result<Vec<Gradient>, InternalError> {
    let mut grads = Vec::new();
    for forward in module.blocks.iter().filter(|b| b.kind == BlockKind::Block) {
        let mut name = format!("{}_grad", forward.name);
        while module.block(&name).is_some() {
            name.push('_');
        }
        let spec = default_spec(forward, name, forward.span);
        if spec.wrt.is_empty() {
            continue;
        }
        if let Some(gradient) = one(forward, &spec, diagnostics)? {
            grads.push(gradient);
        }
    }
    Ok(grads)
}

/// The gradient whose backward block is `name`.
pub fn gradient_of<'a>(checked: &'a Checked, name: &str) -> Option<&'a Gradient> {
    checked.grads.iter().find(|g| g.backward.name == name)
}

/// The `explain` header of a backward block: what it differentiates, what
/// the forward saves for it and what it recomputes.
pub fn grad_header(checked: &Checked, gradient: &Gradient) -> String {
    // The saving forward has the forward's instructions (the view holds no forward block).
    let forward = &gradient.saving_forward;
    let inputs: Vec<&str> = gradient.input_grads.iter().map(|(_, n)| n.as_str()).collect();
    let given: Vec<&str> = gradient
        .output_grads
        .iter()
        .filter(|(_, n)| gradient.backward.param(n).is_some())
        .map(|(_, n)| n.as_str())
        .collect();
    let mut out = crate::report::wrapped(&format!(
        "// backward of block `{}`: computes {} from {}",
        gradient.forward,
        inputs.join(", "),
        if given.is_empty() { "nothing".to_string() } else { given.join(", ") }
    ));
    if gradient.saved.is_empty() {
        out.push_str("// saved by the forward: nothing (the backward needs no matmul result)\n");
    } else {
        out.push_str(&format!(
            "// saved by the forward ({} tensor(s), stored by `{}`):\n",
            gradient.saved.len(),
            gradient.saving_forward.name
        ));
    }
    for s in &gradient.saved {
        let span = forward.insts.span(s.value);
        let head = format!(
            "//   {}: {} = `{}` @ {}",
            s.name,
            s.ty,
            saved_text(checked, forward, s.value),
            checked.source.location(span)
        );
        // The layout note goes on a line of its own when both would be
        // wider than the report's lines.
        let note = layout_note(s);
        match note.strip_prefix(", ") {
            Some(rest) if head.chars().count() + note.chars().count() > crate::report::MAX_LINE => {
                out.push_str(&format!("{head},\n{}{rest}\n", crate::report::CONTINUATION));
            }
            _ => out.push_str(&format!("{head}{note}\n")),
        }
    }
    let (named, unnamed) = recomputed_names(forward, gradient);
    out.push_str(&crate::report::wrapped(&format!(
        "// recomputed in the backward: {}{} other value(s)",
        if named.is_empty() { String::new() } else { format!("{}, and ", named.join(", ")) },
        unnamed
    )));
    out
}

/// The source text of a saved value; a product of stacked weights (made
/// from two matmuls by `coda_opt::stack_siblings`) reads as its left
/// operand's text times the weights stacked, `h @ [w_gate; w_up].T`.
fn saved_text(checked: &Checked, forward: &Block, value: coda_ir::Value) -> String {
    let mut v = value;
    while let coda_ir::Inst::Cast { arg, .. } = forward.inst(v) {
        v = *arg;
    }
    if let coda_ir::Inst::MatMul { lhs, rhs, .. } = forward.inst(v) {
        if let coda_ir::Inst::StackRows { parts } = forward.inst(*rhs) {
            let name = |p: &coda_ir::Value| forward.names.get(p.index()).cloned().flatten().unwrap_or_default();
            let parts: Vec<String> = parts.iter().map(name).collect();
            let lhs = match forward.names.get(lhs.index()).cloned().flatten() {
                Some(name) => name,
                None => checked.source.slice(forward.insts.span(*lhs)).to_string(),
            };
            return format!("{lhs} @ [{}].T", parts.join("; "));
        }
    }
    checked.source.slice(forward.insts.span(value)).to_string()
}

/// How a saved tensor's columns differ from its value's, if they do, and
/// whether it is a forward output already.
fn layout_note(s: &coda_grad::Saved) -> String {
    if s.output.is_some() {
        return ", the forward's output (stored once)".to_string();
    }
    match (s.layout, s.ty.shape.cols.as_const()) {
        (SavedLayout::Plain, _) => String::new(),
        (SavedLayout::PairedHalves, Some(cols)) => {
            format!(", halves interleaved: column 2j holds [:, j], 2j+1 holds [:, {}+j]", cols / 2)
        }
        (SavedLayout::PairedHalves, None) => ", halves interleaved".to_string(),
        (SavedLayout::ShiftedExp { width }, _) => {
            format!(", as exp(value − its maximum over each {width} columns), for the backward's softmax")
        }
        (SavedLayout::GroupMax { width }, _) => format!(", its maximum over each {width} columns"),
    }
}

/// The `let` names of the recomputed values, and how many have none.
fn recomputed_names(forward: &Block, gradient: &Gradient) -> (Vec<String>, usize) {
    let mut named = Vec::new();
    let mut unnamed = 0;
    for v in &gradient.recomputed {
        match forward.names.get(v.index()).cloned().flatten() {
            Some(name) if !named.contains(&name) && forward.param(&name).is_none() => named.push(name),
            Some(_) => {}
            None => unnamed += 1,
        }
    }
    (named, unnamed)
}

/// The `grad` entry of a backward block in `explain --json`.
pub(crate) fn header_json(checked: &Checked, gradient: &Gradient) -> serde_json::Value {
    let forward = &gradient.saving_forward;
    let saved: Vec<serde_json::Value> = gradient
        .saved
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "dtype": s.ty.dtype.name(),
                "shape": [s.ty.shape.rows.to_string(), s.ty.shape.cols.to_string()],
                "layout": match s.layout {
                    SavedLayout::Plain => "plain",
                    SavedLayout::PairedHalves => "paired_halves",
                    SavedLayout::ShiftedExp { .. } => "shifted_exp",
                    SavedLayout::GroupMax { .. } => "group_max",
                },
                "forward_output": s.output.is_some(),
                "source": checked.source.slice(forward.insts.span(s.value)),
                "location": checked.source.location(forward.insts.span(s.value)),
            })
        })
        .collect();
    let (named, unnamed) = recomputed_names(forward, gradient);
    serde_json::json!({
        "forward": gradient.forward,
        "saving_forward": gradient.saving_forward.name,
        "gradients": gradient.input_grads.iter().map(|(i, n)| serde_json::json!({"input": forward.params[*i].name, "output": n})).collect::<Vec<_>>(),
        "given": gradient.output_grads.iter().map(|(j, n)| serde_json::json!({"output": forward.outputs[*j].tensor.name, "input": n, "used": gradient.backward.param(n).is_some()})).collect::<Vec<_>>(),
        "saved": saved,
        "recomputed": { "named": named, "unnamed": unnamed },
    })
}
