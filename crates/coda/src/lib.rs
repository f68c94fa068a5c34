//! The embedding API of codac.
//!
//! [`check`] runs the front end (parse, name and shape checking, lowering to
//! the block IR, verification) on one source text; [`explain`] describes the
//! result as text or JSON; [`eval`] runs the reference interpreter;
//! [`compile()`] generates the CUDA kernels and their manifest. Errors in
//! the user's program are [`Diagnostic`]s inside [`Checked`]; a
//! [`InternalError`] means codac itself is wrong.
//!
//! This crate and everything below it build and run without CUDA.

#![deny(missing_docs)]

mod compile;
mod explain;
mod gradient;
mod profile;
mod report;

pub use coda_cuda as cuda;
pub use coda_diagnostics::{has_errors, render, render_to_string, ColorChoice, Diagnostic, Severity, SourceFile, Span};
pub use coda_grad as grad;
pub use coda_ir as ir;
pub use coda_ir::interp::{eval, random_inputs, DimBindings, EvalError, EvalOptions, HostTensor};
pub use coda_opt as opt;
pub use compile::{compile, CompileError, CompileOptions, Compiled};
pub use explain::{explain_json, explain_json_with, explain_text, explain_text_with};
pub use gradient::{grad_header, grad_view, gradient_of};
pub use profile::{profile, BareGemm, BlockProfile, Extent, GemmProfile, KernelProfile};
pub use report::ExplainOptions;

/// A bug in codac, as opposed to an error in the user's program.
#[derive(Debug, thiserror::Error)]
pub enum InternalError {
    /// The IR broke an invariant after lowering.
    #[error(transparent)]
    Verify(#[from] coda_ir::verify::VerifyError),
    /// The lowering built an ill-typed instruction.
    #[error("the lowering built an ill-typed instruction: {0}")]
    Lowering(String),
    /// The differentiator built an invalid backward block.
    #[error("{0}")]
    Grad(String),
}

/// The result of checking one source text.
#[derive(Debug)]
pub struct Checked {
    /// The source, kept for rendering diagnostics and locations.
    pub source: SourceFile,
    /// The blocks that checked without errors.
    pub module: ir::Module,
    /// Every error and warning.
    pub diagnostics: Vec<Diagnostic>,
    /// The gradient of every `grad` declaration that checked, in source order
    /// (its backward block is not in [`Checked::module`]; see [`grad_view`]).
    pub grads: Vec<coda_grad::Gradient>,
}

impl Checked {
    /// Whether the program was rejected.
    pub fn has_errors(&self) -> bool {
        has_errors(&self.diagnostics)
    }

    /// The diagnostics rendered without colour.
    pub fn render_diagnostics(&self) -> String {
        render_to_string(&self.source, &self.diagnostics)
    }
}

/// Checks a source text: parse, resolve, check shapes, lower and verify.
pub fn check(file_name: &str, text: &str) -> Result<Checked, InternalError> {
    check_with_dims(file_name, text, &std::collections::BTreeMap::new())
}

/// [`check`] with dims fixed from outside: each `dims[name]` replaces the
/// value of the file's `dim name` declaration (a symbolic dim becomes that
/// constant, a constant takes the new value, and dims defined from it
/// follow); see [`coda_lower::lower_with`]. This is how an embedder
/// specializes a file written for one model size to another.
pub fn check_with_dims(
    file_name: &str,
    text: &str,
    dims: &std::collections::BTreeMap<String, i64>,
) -> Result<Checked, InternalError> {
    let source = SourceFile::new(file_name, text);
    let parsed = coda_syntax::parse(&source);
    let mut diagnostics = parsed.diagnostics;
    let syntax_ok = !has_errors(&diagnostics);
    let lowered = coda_lower::lower_with(&parsed.file, &source, dims);
    // Name and shape errors in a file that did not parse are mostly echoes of
    // the syntax error; report the syntax errors alone.
    if syntax_ok {
        diagnostics.extend(lowered.diagnostics);
    }
    let (module, requests) = if syntax_ok {
        (lowered.module, lowered.grads)
    } else {
        (ir::Module { file_name: file_name.to_string(), blocks: Vec::new() }, Vec::new())
    };
    if let Some(bug) = diagnostics.iter().find(|d| d.code == "E9000") {
        let detail = bug.labels.first().map(|l| l.message.clone()).unwrap_or_default();
        return Err(InternalError::Lowering(format!(
            "{} ({})",
            detail,
            source.location(bug.labels.first().map(|l| l.span).unwrap_or_default())
        )));
    }
    for block in &module.blocks {
        coda_ir::verify::verify(block)?;
    }
    let module = without_kernel_form_errors(module, &source, &mut diagnostics);
    let (grads, grad_diagnostics) = gradient::build(&module, &requests)?;
    diagnostics.extend(grad_diagnostics);
    diagnostics.sort_by_key(|d| d.labels.first().map(|l| l.span));
    Ok(Checked { source, module, diagnostics, grads })
}

/// Applies the epilogue rules of the `kernel` form, which the partitioner
/// decides, and leaves out of the module each kernel that breaks them (a
/// block with errors is never compiled or evaluated).
fn without_kernel_form_errors(
    mut module: ir::Module,
    source: &SourceFile,
    diagnostics: &mut Vec<Diagnostic>,
) -> ir::Module {
    module.blocks.retain(|block| {
        let errors = coda_cuda::kernel_form_errors(block, source);
        let ok = errors.is_empty();
        diagnostics.extend(errors);
        ok
    });
    module
}

/// Checks raw bytes, reporting invalid UTF-8 as a located diagnostic.
pub fn check_bytes(file_name: &str, bytes: &[u8]) -> Result<Checked, InternalError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => check(file_name, text),
        Err(err) => {
            let offset = err.valid_up_to();
            let text = String::from_utf8_lossy(bytes).into_owned();
            let source = SourceFile::new(file_name, text);
            let diagnostic = Diagnostic::error("E0000", "the file is not valid UTF-8")
                .with_primary(Span::new(offset, offset + 1), format!("invalid byte at offset {offset}"))
                .with_help(".coda files are UTF-8 text");
            Ok(Checked {
                source,
                module: ir::Module { file_name: file_name.to_string(), blocks: Vec::new() },
                diagnostics: vec![diagnostic],
                grads: Vec::new(),
            })
        }
    }
}
