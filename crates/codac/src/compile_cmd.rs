//! `codac compile`: writes one `.cu` file per kernel and `manifest.json`,
//! and, through NVRTC (no GPU needed), `.ptx` and `.cubin` files.

use crate::cli::CompileArgs;
use crate::commands::{check_dims_known, load, parse_dims, Outcome};
use anyhow::{bail, Context, Result};
use coda::cuda::config::LaunchHint;
use coda::ColorChoice;
use coda_runtime::{
    Arch, CompileOptions as NvrtcOptions, CompiledKernel, Compiler, KernelCache, RuntimeError, Toolkit,
};
use std::path::Path;

/// Runs `codac compile`.
pub(crate) fn compile(args: &CompileArgs, color: ColorChoice) -> Result<Outcome> {
    let arch = supported_arch(&args.arch)?;
    let checked = load(&args.file, color)?;
    if checked.has_errors() {
        return Ok(Outcome::UserError);
    }
    let (checked, block) = if args.grad {
        crate::grad_cmd::training_step(checked, args.block.as_deref())?
    } else {
        (checked, args.block.clone())
    };
    let (cu, ptx, cubin) = parse_emit(&args.emit)?;
    let launch = launch_hint(&args.dims, args.multiprocessors, &checked, block.as_deref())?;
    let options = args.kernels.compile_options(arch.to_string(), block, launch);
    let compiled = match coda::compile(&checked, &options) {
        // A located diagnostic: shown like the checker's, with the source.
        Err(coda::CompileError::Codegen(coda::cuda::CodegenError::Limit { diagnostic, .. })) => {
            coda::render(&checked.source, std::slice::from_ref(&*diagnostic), color);
            return Ok(Outcome::UserError);
        }
        other => other?,
    };
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    remove_earlier_outputs(&args.out)?;
    let jobs: Vec<_> = compiled
        .kernels
        .iter()
        .map(|k| (k.source.as_str(), NvrtcOptions::new(arch).file_name(&k.file_name).emit_ptx(ptx)))
        .collect();
    let outputs = if args.time {
        timed_compiles(&jobs)?
    } else if ptx || cubin {
        nvrtc()?.compile_many(&jobs)
    } else {
        Vec::new()
    };
    let mut times = Vec::new();
    let mut outputs = outputs.into_iter();
    for kernel in &compiled.kernels {
        if cu {
            write(&args.out.join(&kernel.file_name), kernel.source.as_bytes())?;
        }
        if let Some(out) = outputs.next() {
            let out = out?;
            if out.has_warnings() {
                eprintln!("warning: NVRTC warnings for {}:\n{}", kernel.file_name, out.log);
            }
            let stem = kernel.file_name.trim_end_matches(".cu");
            times.push((stem, out.compile_ms));
            if cubin {
                write(&args.out.join(format!("{stem}.{}.cubin", arch)), &out.cubin)?;
            }
            if let (true, Some(text)) = (ptx, &out.ptx) {
                write(&args.out.join(format!("{stem}.{}.ptx", arch)), text.as_bytes())?;
            }
        }
    }
    write(&args.out.join("manifest.json"), compiled.manifest.to_json().as_bytes())?;
    print_kernels(&compiled.manifest, cu);
    if args.time {
        print_compile_times(times);
    }
    if !cu && !ptx && !cubin {
        println!("wrote {} only (--emit names no kind of file)", args.out.join("manifest.json").display());
    }
    Ok(Outcome::Success)
}

/// Removes what an earlier `codac compile` wrote to `dir`, as its
/// `manifest.json` lists it: each kernel's `.cu` file and the `.ptx` and
/// `.cubin` files named after it (`<stem>.<arch>.ptx`). A compile with
/// fewer kernels or fewer `--emit` kinds would otherwise leave files that
/// belong to no manifest. Files codac did not write are kept; without a
/// manifest (or with one that is not codac's), nothing is removed.
fn remove_earlier_outputs(dir: &Path) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(dir.join("manifest.json")) else { return Ok(()) };
    let Ok(manifest) = serde_json::from_str::<serde_json::Value>(&text) else { return Ok(()) };
    let blocks = manifest["blocks"].as_array().into_iter().flatten();
    let stems: Vec<&str> = blocks
        .flat_map(|b| b["kernels"].as_array().into_iter().flatten())
        .filter_map(|k| k["file"].as_str())
        // A manifest could be edited by hand: only plain names, never a path.
        .filter(|f| Path::new(f).file_name().is_some_and(|n| n == std::ffi::OsStr::new(f)))
        .filter_map(|f| f.strip_suffix(".cu"))
        .collect();
    if stems.is_empty() {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = stems.iter().any(|stem| {
            name.strip_prefix(stem).is_some_and(|rest| {
                rest == ".cu"
                    || (rest.starts_with('.')
                        && (rest.ends_with(".ptx") || rest.ends_with(".cubin"))
                        && rest.matches('.').count() == 2)
            })
        });
        if ours {
            let path = entry.path();
            std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    Ok(())
}

/// The architectures the generated kernels are written for: the portable
/// mainloop needs `cp.async` and bf16 `mma.sync` (sm_80 on), the Hopper one
/// sm_90a; newer ones are not tested.
const SUPPORTED_ARCHS: [Arch; 6] = [
    Arch::SM_80,
    Arch::SM_86,
    Arch::new(8, 7, coda_runtime::ArchSuffix::None),
    Arch::SM_89,
    Arch::new(9, 0, coda_runtime::ArchSuffix::None),
    Arch::SM_90A,
];

/// `--arch`, refused before anything is read or written unless it is one
/// of [`SUPPORTED_ARCHS`] (an sm_75 kernel failed in ptxas with hundreds of
/// lines of `cp.async requires sm_80`, after the `.cu` files were written).
fn supported_arch(text: &str) -> Result<Arch> {
    let arch: Arch = text.parse()?;
    if !SUPPORTED_ARCHS.contains(&arch) {
        let names: Vec<String> = SUPPORTED_ARCHS.iter().map(Arch::to_string).collect();
        bail!("unsupported --arch `{text}`: the generated kernels support {}", names.join(", "));
    }
    Ok(arch)
}

/// `--dims` and `--multiprocessors` of `compile` and `explain`, checked
/// against the blocks (all, or `block`; each must bind exactly their
/// run-time dims); none without `--dims`.
pub(crate) fn launch_hint(
    dims: &[String],
    multiprocessors: u32,
    checked: &coda::Checked,
    block: Option<&str>,
) -> Result<Option<LaunchHint>> {
    if dims.is_empty() {
        return Ok(None);
    }
    let dims = parse_dims(dims)?;
    for b in &checked.module.blocks {
        if block.is_none_or(|name| name == b.name) {
            check_dims_known(b, &dims)?;
        }
    }
    Ok(Some(LaunchHint { dims, multiprocessors }))
}

/// `(cu, ptx, cubin)` from `--emit`.
fn parse_emit(items: &[String]) -> Result<(bool, bool, bool)> {
    let (mut cu, mut ptx, mut cubin) = (false, false, false);
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        match item {
            "cu" => cu = true,
            "ptx" => ptx = true,
            "cubin" => cubin = true,
            other => bail!("unknown --emit kind `{other}`: expected cu, ptx or cubin"),
        }
    }
    Ok((cu, ptx, cubin))
}

/// The process-wide NVRTC, with a clear message when it is missing.
fn nvrtc() -> Result<&'static Compiler> {
    match Compiler::global() {
        Ok(c) => Ok(c),
        Err(e @ (RuntimeError::NoNvrtc { .. } | RuntimeError::NoToolkit { .. })) => {
            bail!("--emit ptx/cubin needs NVRTC: {e}")
        }
        Err(e) => Err(e.into()),
    }
}

/// `--time`: every kernel compiled alone, one after another, by an NVRTC
/// with a cache in memory only, so each figure is that kernel's cold
/// compile on one thread (what a first run pays for it where it is the
/// slowest of its block: a block's kernels compile in parallel).
fn timed_compiles(jobs: &[(&str, NvrtcOptions)]) -> Result<Vec<coda_runtime::Result<CompiledKernel>>> {
    let compiler = match Compiler::new(Toolkit::discover(), KernelCache::new(None)) {
        Ok(c) => c,
        Err(e @ (RuntimeError::NoNvrtc { .. } | RuntimeError::NoToolkit { .. })) => {
            bail!("--time needs NVRTC: {e}")
        }
        Err(e) => return Err(e.into()),
    };
    Ok(jobs.iter().map(|(source, opts)| compiler.compile(source, opts)).collect())
}

/// The `--time` table: each kernel's cold compile (ms), slowest first,
/// and the sum (ties keep the kernels' order, so the table is stable).
fn print_compile_times(mut rows: Vec<(&str, f64)>) {
    let total: f64 = rows.iter().map(|r| r.1).sum();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!(
        "NVRTC cold compile per kernel (one thread, no cache): {} kernels, {:.2} s in all",
        rows.len(),
        total / 1e3
    );
    for (name, ms) in rows {
        println!("  {:>7.2} s  {name}", ms / 1e3);
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// The kernel list, one line per kernel; with `files`, each kernel's `.cu`
/// file (not when none was written).
pub(crate) fn print_kernels(manifest: &coda::cuda::Manifest, files: bool) {
    for block in &manifest.blocks {
        let n = block.kernels.len();
        println!("block {} ({}): {n} kernel{}", block.block, block.kind, if n == 1 { "" } else { "s" });
        for k in &block.kernels {
            let config = k.config.as_deref().map(|c| format!(" {c}")).unwrap_or_default();
            let file = if files { k.file.as_str() } else { "" };
            println!("  {:<4} {:<9} {file}{config}", k.name, k.kind);
            println!("       {}", k.summary);
        }
    }
}
