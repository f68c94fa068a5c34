//! Code generation for codac: from a verified block to CUDA sources.
//!
//! 1. [`plan`] partitions the block greedily into GEMM kernels (one per
//!    matmul, with an epilogue), row kernels and column-reduction kernels;
//! 2. [`tiles`] chooses every GEMM's tile configuration ([`config`]);
//! 3. [`kir`] builds each kernel's node DAG, stores and partial buffers
//!    (the epilogue IR), and fuses light row kernels into the Hopper GEMMs
//!    after them;
//! 4. [`emit`] writes one self-contained `.cu` file per kernel (the CUDA
//!    template headers embedded verbatim) and a [`Manifest`] entry telling a
//!    host how to allocate buffers and launch the kernels for any binding of
//!    the run-time dims ([`symexpr`] evaluates its sizes).
//!
//! [`emulate`] runs the kernel IR on the CPU, for tests without a GPU.
//! Nothing here needs CUDA; compiling the sources with NVRTC and running
//! them is `coda-runtime`'s job. See `docs/codegen.md`.

pub mod config;
mod emit;
pub mod emulate;
pub mod error;
mod kernel_form;
pub mod kir;
pub mod limits;
pub use coda_manifest::manifest;
mod plan;
pub mod symexpr;
mod tiles;
pub mod traffic;

pub use emit::{HEADERS, PRELUDE};
pub use error::CodegenError;
pub use kernel_form::kernel_form_errors;
pub use manifest::{BlockManifest, Manifest};

use coda_diagnostics::SourceFile;
use coda_ir::{Block, Module, Value};
use std::collections::{BTreeMap, BTreeSet};

pub use coda_manifest::KernelSource;

/// Options of code generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodegenOptions {
    /// The target architecture (`sm_90a`, `sm_80`, …), recorded in the
    /// manifest: on `sm_90a` GEMMs use the Hopper mainloop where it applies
    /// ([`config::for_target`]); every other arch gets the portable one.
    pub arch: String,
    /// Fuse a light row kernel into the Hopper GEMM right after it when the
    /// GEMM reads its outputs only at its own rows ([`kir::RowPrelude`]):
    /// the GEMM computes each row block's rows before its first tile of
    /// that row block needs them. On by default; off gives the two kernels.
    pub row_preludes: bool,
    /// Tile configurations chosen by measurement (`codac bench --autotune`)
    /// instead of the rules of [`config`]: block name → (the GEMM's ordinal
    /// among the block's GEMMs in launch order → configuration). One that
    /// is not among the rules' choice's [`config::TileConfig::alternatives`]
    /// is ignored.
    pub tiles: BTreeMap<String, BTreeMap<usize, config::TileConfig>>,
    /// One Hopper configuration asked for by name (`--tile-config`): every
    /// GEMM whose rules' choice has it among its
    /// [`config::TileConfig::alternatives`], and whose mainloop work it
    /// supports, takes it (before `tiles`).
    pub tile_config: Option<config::TileConfig>,
    /// The run-time dimensions and GPU, when known: a GEMM whose shape they
    /// fix gets the configuration of the tile-count model
    /// ([`config::for_shape`]) instead of the rules' shape-blind one.
    pub launch: Option<config::LaunchHint>,
    /// GEMM kernels, by the names the default partition gives them, that
    /// run unfused: the GEMM stores its accumulator and what its epilogue
    /// would compute goes to the kernels after it (`--unfuse`), the form
    /// a fused site is measured against. A name no block has is an error
    /// of [`compile_module`].
    pub unfused: BTreeSet<String>,
    /// GEMM kernels that run unfused in one block only: block name → the
    /// GEMMs' names in its default partition (what `codac bench
    /// --autotune` files for a site it measured faster unfused). A name
    /// the block does not have is ignored, as a tuned tile configuration
    /// is.
    pub unfused_in: BTreeMap<String, BTreeSet<String>>,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions {
            arch: "sm_90a".into(),
            row_preludes: true,
            tiles: BTreeMap::new(),
            tile_config: None,
            launch: None,
            unfused: BTreeSet::new(),
            unfused_in: BTreeMap::new(),
        }
    }
}

/// The kernels of one block.
#[derive(Debug, Clone)]
pub struct CompiledBlock {
    /// Sources in launch order.
    pub kernels: Vec<KernelSource>,
    /// Buffers and launches.
    pub manifest: BlockManifest,
    /// The kernel IR the sources were emitted from.
    pub ir: kir::BlockIr,
    /// The GEMMs of this block that run unfused, named in
    /// [`CodegenOptions::unfused`] or [`CodegenOptions::unfused_in`] (by
    /// their names in the default partition).
    pub unfused: BTreeSet<String>,
}

/// Partitions and emits one verified block, stage by stage: the limits on
/// dims, the partition into kernels ([`plan`]), every GEMM's tile
/// configuration ([`tiles`]), the kernel IR ([`kir`]), row kernels fused
/// into the GEMMs after them, kernel names, the CUDA text and manifest
/// ([`emit`]), and the limit on kernel parameters.
pub fn compile_block(
    block: &Block,
    source: &SourceFile,
    options: &CodegenOptions,
) -> Result<CompiledBlock, CodegenError> {
    limits::check_dims(block, source)?;
    limits::check_supported(block, source)?;
    if let Some(bug) = kernel_form::unreachable_error(block, source) {
        return Err(bug);
    }
    let (ir, unfused) = kernel_ir_unfused(block, options)?;
    let (kernels, manifest) = emit::emit_block(&ir, block, source)?;
    limits::check_params(block, &ir, &manifest, source)?;
    Ok(CompiledBlock { kernels, manifest, ir, unfused })
}

/// The named kernels of `block`, the GEMMs of `unfused` with bare
/// epilogues: the partition, every GEMM's tile configuration, the kernel
/// IR, row kernels fused into the GEMMs after them, kernel names.
fn kernel_ir(block: &Block, options: &CodegenOptions, unfused: &BTreeSet<Value>) -> Result<kir::BlockIr, CodegenError> {
    let mut plan = plan::partition(block, unfused, &BTreeSet::new());
    let mut tiles = tiles::choose(block, &plan, options);
    // Per-head reductions go to row kernels where no tile of their GEMM
    // holds whole heads.
    if !tiles.split_heads().is_empty() {
        plan = plan::partition(block, unfused, tiles.split_heads());
        tiles = tiles::choose(block, &plan, options);
    }
    let mut ir = kir::build::build(block, &plan, &tiles)?;
    if options.row_preludes {
        kir::prelude::fuse_row_preludes(&mut ir, &crate::traffic::default_dims(block));
    }
    ir.name_kernels(block);
    Ok(ir)
}

/// The kernel IR of `block` with the GEMMs that [`CodegenOptions::unfused`]
/// names in its default partition unfused, and those names. The default
/// partition's IR serves as is when it has none of them.
fn kernel_ir_unfused(
    block: &Block,
    options: &CodegenOptions,
) -> Result<(kir::BlockIr, BTreeSet<String>), CodegenError> {
    let fused = kernel_ir(block, options, &BTreeSet::new())?;
    let only_here = options.unfused_in.get(&block.name);
    let wanted = |name: &String| options.unfused.contains(name) || only_here.is_some_and(|n| n.contains(name));
    if (options.unfused.is_empty() && only_here.is_none()) || block.kind == coda_ir::BlockKind::Kernel {
        return Ok((fused, BTreeSet::new()));
    }
    let mut matmuls = BTreeSet::new();
    let mut names = BTreeSet::new();
    for k in &fused.kernels {
        if let (kir::KernelKind::Gemm(g), true) = (&k.kind, wanted(&k.name)) {
            matmuls.insert(g.matmul);
            names.insert(k.name.clone());
        }
    }
    if matmuls.is_empty() {
        return Ok((fused, names));
    }
    Ok((kernel_ir(block, options, &matmuls)?, names))
}

/// The GEMM kernels of `block`'s default partition, by name.
fn gemm_names(block: &Block, options: &CodegenOptions) -> Result<Vec<String>, CodegenError> {
    let ir = kernel_ir(block, options, &BTreeSet::new())?;
    Ok(ir.kernels.iter().filter(|k| matches!(k.kind, kir::KernelKind::Gemm(_))).map(|k| k.name.clone()).collect())
}

/// Compiles every block of a module.
pub fn compile_module(
    module: &Module,
    source: &SourceFile,
    options: &CodegenOptions,
) -> Result<(Vec<KernelSource>, Manifest), CodegenError> {
    let mut kernels = Vec::new();
    let mut blocks = Vec::new();
    let mut unfused = BTreeSet::new();
    for block in &module.blocks {
        let compiled = compile_block(block, source, options)?;
        kernels.extend(compiled.kernels);
        blocks.push(compiled.manifest);
        unfused.extend(compiled.unfused);
    }
    if let Some(name) = options.unfused.difference(&unfused).next() {
        let mut known = Vec::new();
        for block in module.blocks.iter().filter(|b| b.kind != coda_ir::BlockKind::Kernel) {
            known.extend(gemm_names(block, options)?);
        }
        return Err(CodegenError::UnknownGemm { name: name.clone(), known: known.join(", ") });
    }
    let manifest = Manifest { schema: 3, source: source.name.clone(), arch: options.arch.clone(), blocks };
    Ok((kernels, manifest))
}
