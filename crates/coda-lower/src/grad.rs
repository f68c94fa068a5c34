//! `grad` declarations: resolves the forward block and the names of the
//! inputs and outputs, and checks that each is a float (only floats have
//! gradients). The backward block itself is built by `coda-grad` from the
//! lowered forward block.

use crate::names::suggest;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Block, Module, Tensor};
use coda_syntax::ast;

/// A checked `grad` declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GradRequest {
    /// The backward block's name.
    pub name: String,
    /// The forward block's name.
    pub forward: String,
    /// Indices of the forward's params whose gradients are wanted, in the order written.
    pub wrt: Vec<usize>,
    /// Indices of the forward's outputs whose gradients are given.
    pub outputs: Vec<usize>,
    /// The whole declaration.
    pub span: Span,
}

/// Checks every `grad` declaration of a file against the lowered module.
/// `ast_blocks` are all blocks of the file, including those with errors,
/// whose grad declarations are skipped without a second report.
pub(crate) fn lower_grads(
    decls: &[&ast::GradDecl],
    ast_blocks: &[&ast::Ident],
    module: &Module,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<GradRequest> {
    let mut requests: Vec<GradRequest> = Vec::new();
    let mut names: Vec<&ast::Ident> = Vec::new();
    for decl in decls {
        let clash = ast_blocks.iter().chain(names.iter()).find(|b| b.name == decl.name.name);
        if let Some(previous) = clash {
            diagnostics.push(
                Diagnostic::error("E0502", format!("`{}` is already defined", decl.name.name))
                    .with_primary(decl.name.span, "the backward block is named here")
                    .with_secondary(previous.span, "first defined here")
                    .with_help("a backward block needs a name of its own, e.g. `<block>_grad`"),
            );
            continue;
        }
        names.push(&decl.name);
        let Some(forward) = module.block(&decl.forward.name) else {
            if !ast_blocks.iter().any(|b| b.name == decl.forward.name) {
                diagnostics.push(unknown_block(decl, ast_blocks));
            }
            continue;
        };
        if let Some(request) = lower_one(decl, forward, diagnostics) {
            requests.push(request);
        }
    }
    requests
}

fn unknown_block(decl: &ast::GradDecl, ast_blocks: &[&ast::Ident]) -> Diagnostic {
    let hint = suggest(&decl.forward.name, ast_blocks.iter().map(|b| b.name.as_str()));
    let diagnostic = Diagnostic::error("E0501", format!("no block named `{}`", decl.forward.name))
        .with_primary(decl.forward.span, "differentiated here");
    match hint {
        Some(h) => diagnostic.with_help(format!("did you mean `{h}`?")),
        None => diagnostic.with_help("`grad NAME = BLOCK wrt (inputs)` names a block defined in the same file"),
    }
}

fn lower_one(decl: &ast::GradDecl, forward: &Block, diagnostics: &mut Vec<Diagnostic>) -> Option<GradRequest> {
    let before = diagnostics.len();
    if decl.inputs.is_empty() {
        diagnostics.push(
            Diagnostic::error("E0505", "no input to differentiate with respect to")
                .with_primary(decl.span, "`wrt ()` is empty")
                .with_help("list the inputs whose gradients you want, e.g. `wrt (x, w)`"),
        );
    }
    let params: Vec<&Tensor> = forward.params.iter().collect();
    let wrt = resolve(&decl.inputs, &params, "input", forward, diagnostics);
    let declared: Vec<&Tensor> = forward.outputs.iter().map(|o| &o.tensor).collect();
    let outputs = match &decl.outputs {
        Some(listed) => resolve(listed, &declared, "output", forward, diagnostics),
        None => declared.iter().enumerate().filter(|(_, t)| t.dtype.is_float()).map(|(i, _)| i).collect(),
    };
    if diagnostics.len() > before {
        return None;
    }
    Some(GradRequest { name: decl.name.name.clone(), forward: forward.name.clone(), wrt, outputs, span: decl.span })
}

/// The index of each listed tensor, reporting unknown, repeated and non-float ones.
fn resolve(
    listed: &[ast::Ident],
    tensors: &[&Tensor],
    what: &str,
    forward: &Block,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<usize> {
    let mut indices = Vec::new();
    for (k, ident) in listed.iter().enumerate() {
        if let Some(first) = listed[..k].iter().find(|i| i.name == ident.name) {
            diagnostics.push(
                Diagnostic::error("E0505", format!("`{}` is listed twice", ident.name))
                    .with_primary(ident.span, "listed again here")
                    .with_secondary(first.span, "first listed here"),
            );
            continue;
        }
        let Some(index) = tensors.iter().position(|t| t.name == ident.name) else {
            let hint = suggest(&ident.name, tensors.iter().map(|t| t.name.as_str()));
            let all: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
            let help = match hint {
                Some(h) => format!("did you mean `{h}`?"),
                None => format!("the {what}s of `{}` are: {}", forward.name, all.join(", ")),
            };
            diagnostics.push(
                Diagnostic::error("E0503", format!("`{}` is not an {what} of block `{}`", ident.name, forward.name))
                    .with_primary(ident.span, format!("no such {what}"))
                    .with_help(help),
            );
            continue;
        };
        let tensor = tensors[index];
        if !tensor.dtype.is_float() {
            diagnostics.push(
                Diagnostic::error("E0504", format!("`{}` has no gradient: it is an integer tensor", ident.name))
                    .with_primary(ident.span, format!("this {what} is {}", tensor.dtype))
                    .with_secondary(tensor.span, "declared here")
                    .with_help("only float inputs and outputs are differentiable; leave it out of the list"),
            );
            continue;
        }
        indices.push(index);
    }
    indices
}
