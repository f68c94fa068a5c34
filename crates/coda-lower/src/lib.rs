//! Name resolution, type and shape checking, and lowering of the `.coda` AST
//! into the block IR.
//!
//! Every user error is a [`Diagnostic`]; lowering keeps going after an error
//! and reports all it finds. Sugar (`rmsnorm`, `swiglu`, `rope`,
//! `cross_entropy`, …) is expanded here into IR primitives so that every later
//! pass sees through it; the expansions are documented in `docs/language.md`
//! and in [`sugar`]. The explicit `kernel` form is lowered to the same IR with
//! its extra rules checked in [`kernel`].

mod args;
mod block;
mod builtins;
mod dims;
mod expr;
mod fp8;
mod grad;
mod heads;
mod kernel;
mod missing;
mod names;
mod pytorch;
mod shorthand;
mod sugar;

use coda_diagnostics::{Diagnostic, SourceFile};
use coda_ir::Module;
use coda_syntax::ast;
use std::collections::BTreeMap;

pub use grad::GradRequest;

/// The result of lowering one file.
#[derive(Debug)]
pub struct Lowered {
    /// Every block that lowered without errors.
    pub module: Module,
    /// Errors and warnings, in source order.
    pub diagnostics: Vec<Diagnostic>,
    /// The `grad` declarations that checked without errors, in source order.
    pub grads: Vec<GradRequest>,
}

/// Checks and lowers a parsed file. Blocks with errors are left out of the module.
pub fn lower(file: &ast::File, source: &SourceFile) -> Lowered {
    lower_with(file, source, &BTreeMap::new())
}

/// [`lower`] with some dims fixed from outside: `dims[name]` replaces the
/// value of every declaration of the dim `name` (a symbolic `dim M` becomes
/// a constant; a constant takes the new value, and dims defined from it
/// follow). A name that no `dim` declares, or a value that is not positive,
/// is an error.
pub fn lower_with(file: &ast::File, source: &SourceFile, dims: &BTreeMap<String, i64>) -> Lowered {
    let mut diagnostics = Vec::new();
    if !dims.is_empty() {
        check_fixed_dims(file, source, dims, &mut diagnostics);
    }
    if coda_diagnostics::has_errors(&diagnostics) {
        let module = Module { file_name: source.name.clone(), blocks: Vec::new() };
        return Lowered { module, diagnostics, grads: Vec::new() };
    }
    let mut module = Module { file_name: source.name.clone(), blocks: Vec::new() };
    let mut file_dims = dims::DimScope::with_overrides(dims.clone());
    let mut seen_blocks: Vec<&ast::Ident> = Vec::new();
    let mut grad_decls: Vec<&ast::GradDecl> = Vec::new();
    for item in &file.items {
        match item {
            ast::Item::Grad(decl) => grad_decls.push(decl),
            ast::Item::Dim(decl) => file_dims.declare(decl, &mut diagnostics),
            ast::Item::Block(block) => {
                if let Some(previous) = seen_blocks.iter().find(|b| b.name == block.name.name) {
                    diagnostics.push(
                        Diagnostic::error("E0106", format!("block `{}` is defined twice", block.name.name))
                            .with_primary(block.name.span, "defined again here")
                            .with_secondary(previous.span, "first defined here"),
                    );
                    continue;
                }
                seen_blocks.push(&block.name);
                let before = diagnostics.iter().filter(|d| d.is_error()).count();
                let lowered = block::lower_block(block, &file_dims, source, &mut diagnostics);
                let after = diagnostics.iter().filter(|d| d.is_error()).count();
                if after == before {
                    module.blocks.push(lowered);
                }
            }
        }
    }
    let grads = grad::lower_grads(&grad_decls, &seen_blocks, &module, &mut diagnostics);
    if file.items.iter().all(|i| !matches!(i, ast::Item::Block(_))) && !coda_diagnostics::has_errors(&diagnostics) {
        diagnostics.push(
            Diagnostic::warning("W0003", "the file defines no block")
                .with_help("a file holds one or more `block name(inputs) -> (outputs) { … }`"),
        );
    }
    diagnostics.sort_by_key(|d| d.labels.first().map(|l| l.span));
    Lowered { module, diagnostics, grads }
}

/// Reports each fixed dim that no `dim` of the file declares, and each
/// value that is not positive.
fn check_fixed_dims(file: &ast::File, source: &SourceFile, dims: &BTreeMap<String, i64>, out: &mut Vec<Diagnostic>) {
    let declared = declared_dims(file);
    for (name, &value) in dims {
        if !declared.contains(name.as_str()) {
            let mut known: Vec<&str> = declared.iter().copied().collect();
            known.sort_unstable();
            let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            out.push(
                Diagnostic::error("E0107", format!("no dimension `{name}` to fix"))
                    .with_note(format!(
                        "the dims given to the compiler name `{name}`, which {} does not declare",
                        source.name
                    ))
                    .with_help(format!("the file declares: {known}")),
            );
        } else if value <= 0 {
            out.push(
                Diagnostic::error("E0107", format!("dimension `{name}` must be positive"))
                    .with_note(format!("the dims given to the compiler fix `{name}` = {value}")),
            );
        }
    }
}

/// The names of every `dim` the file declares, at file level or in a block.
fn declared_dims(file: &ast::File) -> std::collections::HashSet<&str> {
    let mut names = std::collections::HashSet::new();
    for item in &file.items {
        match item {
            ast::Item::Dim(decl) => {
                names.insert(decl.name.name.as_str());
            }
            ast::Item::Block(block) => {
                for stmt in &block.body {
                    if let ast::Stmt::Dim(decl) = stmt {
                        names.insert(decl.name.name.as_str());
                    }
                }
            }
            ast::Item::Grad(_) => {}
        }
    }
    names
}
