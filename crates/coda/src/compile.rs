//! [`compile()`]: the checked program to CUDA sources and a manifest, with
//! no CUDA needed (see `docs/codegen.md`).

use crate::Checked;
use coda_cuda::{CodegenError, CodegenOptions, KernelSource, Manifest};

/// Options of [`compile()`], one part per stage that takes any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// Compile only this block (default: every block).
    pub block: Option<String>,
    /// Which rewrites the reparameterizer applies before partitioning.
    pub rewrite: coda_opt::Options,
    /// The code generator's: target architecture, tile configurations, row
    /// preludes.
    pub codegen: CodegenOptions,
}

impl CompileOptions {
    /// The default options for target architecture `arch` (`sm_90a`, `sm_80`, …).
    pub fn for_arch(arch: impl Into<String>) -> Self {
        CompileOptions { codegen: CodegenOptions { arch: arch.into(), ..CodegenOptions::default() }, ..Self::default() }
    }
}

/// The generated kernels of a file.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// One source per kernel, blocks in source order, kernels in launch order.
    pub kernels: Vec<KernelSource>,
    /// Buffers and launches of every block.
    pub manifest: Manifest,
}

impl Compiled {
    /// The source of a kernel by file name.
    pub fn source(&self, file_name: &str) -> Option<&str> {
        self.kernels.iter().find(|k| k.file_name == file_name).map(|k| k.source.as_str())
    }
}

/// Why [`compile()`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The program has errors (see [`Checked::diagnostics`]).
    #[error("{0} has errors; nothing was compiled")]
    HasErrors(String),
    /// `CompileOptions::block` names no block.
    #[error("no block named `{block}` in {file}")]
    NoSuchBlock {
        /// The name asked for.
        block: String,
        /// The file.
        file: String,
    },
    /// A rewrite rule misfired (a bug in codac).
    #[error(transparent)]
    Rewrite(#[from] coda_opt::RewriteError),
    /// Code generation rejected a block (or failed).
    #[error(transparent)]
    Codegen(#[from] CodegenError),
}

/// Generates the CUDA kernels of every block of a checked program.
pub fn compile(checked: &Checked, options: &CompileOptions) -> Result<Compiled, CompileError> {
    let module = rewritten_module(checked, options)?;
    let (kernels, manifest) = coda_cuda::compile_module(&module, &checked.source, &options.codegen)?;
    Ok(Compiled { kernels, manifest })
}

/// The blocks [`compile()`] partitions: the one asked for (or all), each
/// `block` reparameterized.
pub(crate) fn rewritten_module(checked: &Checked, options: &CompileOptions) -> Result<coda_ir::Module, CompileError> {
    if checked.has_errors() {
        return Err(CompileError::HasErrors(checked.source.name.clone()));
    }
    let mut module = checked.module.clone();
    if let Some(name) = &options.block {
        module.blocks.retain(|b| &b.name == name);
        if module.blocks.is_empty() {
            return Err(CompileError::NoSuchBlock { block: name.clone(), file: checked.source.name.clone() });
        }
    }
    for block in &mut module.blocks {
        if block.kind == coda_ir::BlockKind::Block {
            *block = coda_opt::reparameterize(block, &options.rewrite)?.block;
        }
    }
    Ok(module)
}
