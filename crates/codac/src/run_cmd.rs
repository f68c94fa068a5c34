//! `codac run`: compiles a file, runs its blocks on the GPU, and with
//! `--check` compares every output with the interpreter; with `--time`
//! times each kernel.
//!
//! Check protocol: outputs are poisoned with NaN before the run (`+=`
//! outputs get their previous content instead); a NaN left where the
//! reference is a number means an element was never written. The reference
//! is `coda::eval` with rounding to storage types, on the same inputs.
//! Tolerance on the relative L2 error `||gpu - ref|| / ||ref||`: 5e-3 for
//! bf16, f16 and i32 outputs and for f32 outputs that depend on a matmul
//! (16-bit operands, fp32 accumulation in a different order); 1e-5 for f32
//! outputs computed from data without a matmul. For a row-local block with
//! more than [`FULL_CHECK_ROWS`] rows, the interpreter evaluates a subset of
//! rows (the first and last 64 and 128 spread between; exact for those
//! rows, see `coda::ir::interp::eval_rows`) and only those rows are
//! compared; NaNs are counted over all rows. Machine-readable lines start
//! with `RESULT`.

use crate::cli::RunArgs;
use crate::commands::{check_dims_known, load, parse_dims, selected_blocks, Outcome};
use crate::npy;
use anyhow::{bail, Context, Result};
use coda::ir::{Block, DType, Inst, Tensor, Value};
use coda::{ColorChoice, DimBindings, EvalOptions, HostTensor};
use coda_runtime::exec::BlockExecutor;
use coda_runtime::{convert, DType as RtDType, Device, DeviceBuffer, RuntimeError, TensorArg};
use std::collections::BTreeMap;
use std::time::Instant;

/// Runs `codac run`.
pub(crate) fn run(args: &RunArgs, color: ColorChoice) -> Result<Outcome> {
    let checked = load(&args.file, color)?;
    if checked.has_errors() {
        return Ok(Outcome::UserError);
    }
    let (checked, block) = if args.grad {
        crate::grad_cmd::training_step(checked, args.block.as_deref())?
    } else {
        (checked, args.block.clone())
    };
    let dims = parse_dims(&args.input.dims)?;
    // The user's mistakes first, so that they are found without a GPU.
    for block in selected_blocks(&checked, block.as_deref())? {
        check_dims_known(block, &dims)?;
        if let Some(dir) = &args.input.inputs {
            npy::check_inputs(block, &dims, dir)?;
        }
    }
    let device = open_device()?;
    let info = device.info();
    println!("device: {} ({}, {} SMs)", info.name, info.arch, info.multiprocessors);
    let launch = Some(coda_bench::tune::launch_hint(&device, &dims));
    let options = args.kernels.compile_options(device.arch().to_string(), block, launch);
    let store = coda_runtime::TuningStore::from_env();
    let compiled = coda::compile(&checked, &options)?;
    let (tuned, mut compiled) = coda_bench::tune::with_tuning(&checked, &options, compiled, &device, &store, &dims)?;
    crate::overrides::apply(&mut compiled)?;
    for line in tuning_lines(&options, &tuned, &store) {
        println!("{line}");
    }
    let mut all_ok = true;
    // With `--grad`, training steps: each backward block reads its saving
    // forward's inputs and saved tensors (rules such as `zdz` rely on them
    // being the forward's), not random ones.
    let mut previous: Option<(String, BTreeMap<String, HostTensor>)> = None;
    for manifest in &compiled.manifest.blocks {
        let Some(block) = checked.module.block(&manifest.block) else { continue };
        check_dims_known(block, &dims)?;
        let forward = coda::gradient_of(&checked, &block.name).map(|g| g.saving_forward.name.as_str());
        let step = previous.take().filter(|(name, _)| Some(name.as_str()) == forward).map(|(_, t)| t);
        let (ok, tensors) = run_block(args, &device, block, manifest, &compiled.kernels, &dims, step)
            .map_err(|e| locate_eval_error(&checked.source, block, e))?;
        all_ok &= ok;
        previous = args.grad.then(|| (block.name.clone(), tensors));
    }
    if !all_ok {
        bail!("check failed");
    }
    Ok(Outcome::Success)
}

/// An interpreter error (random inputs, `--check`'s reference) located in
/// the source; any other error as it is.
fn locate_eval_error(source: &coda::SourceFile, block: &Block, error: anyhow::Error) -> anyhow::Error {
    match error.downcast::<coda::EvalError>() {
        Ok(error) => crate::interp::located(source, block, &error),
        Err(error) => error,
    }
}

fn open_device() -> Result<Device> {
    match Device::open(0) {
        Ok(d) => Ok(d),
        Err(e @ RuntimeError::NoDriver { .. }) => Err(e.into()),
        Err(e) if e.is_no_gpu() => bail!("no GPU: {e}"),
        Err(e) => Err(e).context("cannot open CUDA device 0"),
    }
}

/// Runs one block; returns whether its check passed, and its inputs and
/// outputs by name. `step` holds those of the saving forward when the
/// block is its backward: they take the place of inputs of the same name.
fn run_block(
    args: &RunArgs,
    device: &Device,
    block: &Block,
    manifest: &coda::cuda::BlockManifest,
    sources: &[coda::cuda::KernelSource],
    dims: &DimBindings,
    step: Option<BTreeMap<String, HostTensor>>,
) -> Result<(bool, BTreeMap<String, HostTensor>)> {
    println!("block {} ({} kernels)", block.name, manifest.kernels.len());
    let mut inputs = match &args.input.inputs {
        Some(dir) => npy::read_inputs(block, dims, dir)?,
        None => coda::random_inputs(block, dims, args.input.seed)?,
    };
    if let Some(mut step) = step {
        let mut earlier = Vec::new();
        for p in &block.params {
            if let Some(t) = step.remove(&p.name) {
                inputs.insert(p.name.clone(), t);
                earlier.push(p.name.as_str());
            }
        }
        if !earlier.is_empty() {
            println!("  from the forward: {}", earlier.join(", "));
        }
    }
    let executor = BlockExecutor::new(device, manifest, sources)?;
    for (c, spec) in executor.compile_report().iter().zip(&manifest.kernels) {
        let hit = if c.cache_hit { "cache hit" } else { "compiled" };
        println!(
            "  {:<4} {:<9} {:<28} {hit} in {:.1} ms, {} registers",
            c.name, spec.kind, c.file, c.compile_ms, c.registers
        );
        if !c.warnings.is_empty() {
            eprintln!("warning: NVRTC warnings for {}:\n{}", c.file, c.warnings);
        }
    }
    let mut buffers = Buffers::default();
    for p in &block.params {
        let host = inputs.get(&p.name).with_context(|| format!("no input `{}`", p.name))?;
        buffers.upload(device, p, host)?;
    }
    for o in &block.outputs {
        match o.accumulate {
            true => {
                let host = inputs.get(&o.tensor.name).with_context(|| format!("no previous `{}`", o.tensor.name))?;
                buffers.upload(device, &o.tensor, host)?;
            }
            false => buffers.output(device, &o.tensor, dims, args.check)?,
        }
    }
    let prepared = executor.prepare(device, dims, &buffers.args)?;
    println!("  launches: {}", executor.launched(&prepared).join(" "));
    executor.run(device, &prepared)?;
    let mut results = BTreeMap::new();
    for o in &block.outputs {
        results.insert(o.tensor.name.clone(), buffers.download(&o.tensor, dims)?);
    }
    let ok = if args.check { check(block, dims, &inputs, &results)? } else { true };
    if let Some(dir) = &args.out {
        for o in &block.outputs {
            if let Some(t) = results.get(&o.tensor.name) {
                npy::write_output(dir, &o.tensor, t)?;
            }
        }
    }
    if args.time {
        time(&executor, device, &prepared, manifest, block)?;
    }
    let mut tensors = inputs;
    tensors.extend(results);
    Ok((ok, tensors))
}

/// Device copies of inputs and outputs, and their tensor descriptions.
#[derive(Default)]
struct Buffers {
    owned: BTreeMap<String, DeviceBuffer>,
    args: BTreeMap<String, TensorArg>,
}

fn rt_dtype(d: DType) -> Result<RtDType> {
    Ok(match d {
        DType::BF16 => RtDType::Bf16,
        DType::F16 => RtDType::F16,
        DType::F32 => RtDType::F32,
        DType::I32 => RtDType::I32,
        other => bail!("{other} tensors cannot be run on the GPU"),
    })
}

/// The shape a tensor of this declaration has as a binding.
fn arg_shape(t: &Tensor, rows: usize, cols: usize) -> Vec<usize> {
    match t.rank {
        0 => vec![],
        1 => vec![rows * cols],
        _ => vec![rows, cols],
    }
}

impl Buffers {
    fn upload(&mut self, device: &Device, t: &Tensor, host: &HostTensor) -> Result<()> {
        let dtype = rt_dtype(t.dtype)?;
        let bytes = if t.dtype == DType::I32 {
            convert::i32_to_bytes(&host.data.iter().map(|v| *v as i32).collect::<Vec<_>>())
        } else {
            let rounded: Vec<f32> =
                host.data.iter().map(|v| coda::ir::interp::round_to_dtype(*v, t.dtype) as f32).collect();
            convert::f32_to_bytes(dtype, &rounded)
        };
        let buffer = DeviceBuffer::from_bytes(device, &bytes)?;
        let arg = TensorArg::contiguous(dtype, arg_shape(t, host.rows, host.cols), buffer.ptr());
        self.args.insert(t.name.clone(), arg);
        self.owned.insert(t.name.clone(), buffer);
        Ok(())
    }

    fn output(&mut self, device: &Device, t: &Tensor, dims: &DimBindings, poison: bool) -> Result<()> {
        let (rows, cols) = coda::ir::interp::bind_shape(&t.shape, dims)?;
        let dtype = rt_dtype(t.dtype)?;
        let mut buffer = DeviceBuffer::alloc(device, rows * cols * dtype.size_bytes())?;
        if poison {
            buffer.poison_nan(dtype)?;
        } else {
            buffer.zero()?;
        }
        let arg = TensorArg::contiguous(dtype, arg_shape(t, rows, cols), buffer.ptr());
        self.args.insert(t.name.clone(), arg);
        self.owned.insert(t.name.clone(), buffer);
        Ok(())
    }

    fn download(&self, t: &Tensor, dims: &DimBindings) -> Result<HostTensor> {
        let (rows, cols) = coda::ir::interp::bind_shape(&t.shape, dims)?;
        let buffer = self.owned.get(&t.name).with_context(|| format!("no buffer for `{}`", t.name))?;
        let bytes = buffer.download()?;
        let data: Vec<f64> = if t.dtype == DType::I32 {
            convert::bytes_to_i32(&bytes)?.into_iter().map(f64::from).collect()
        } else {
            convert::bytes_to_f32(rt_dtype(t.dtype)?, &bytes)?.into_iter().map(f64::from).collect()
        };
        Ok(HostTensor { dtype: t.dtype, rows, cols, data })
    }
}

/// Above this many rows, a row-local block is checked on a subset of rows.
const FULL_CHECK_ROWS: usize = 1024;

/// The rows checked out of `total`: all, or the first and last 64 and 128 between.
fn checked_rows(total: usize) -> Vec<usize> {
    if total <= FULL_CHECK_ROWS {
        return (0..total).collect();
    }
    let mut rows: Vec<usize> =
        (0..64).chain(total - 64..total).chain((0..128).map(|i| 64 + i * (total - 128) / 128)).collect();
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Tensors by output name.
type Outputs = BTreeMap<String, HostTensor>;

/// The interpreter's outputs, on a subset of rows when the block allows it.
fn reference(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
) -> Result<(Outputs, Option<Vec<usize>>)> {
    let options = EvalOptions { round_to_storage: true };
    let start = Instant::now();
    let token = coda::ir::interp::row_local_dim(block).and_then(|name| dims.get(&name).copied());
    if let Some(total) = token.and_then(|t| usize::try_from(t).ok()).filter(|t| *t > FULL_CHECK_ROWS) {
        let rows = checked_rows(total);
        if let Some(result) = coda::ir::interp::eval_rows(block, dims, inputs, &options, &rows) {
            println!("  interpreter: {:.1} s on {} of {total} rows", start.elapsed().as_secs_f64(), rows.len());
            return Ok((result?, Some(rows)));
        }
    }
    let result = coda::eval(block, dims, inputs, &options)?;
    println!("  interpreter: {:.1} s", start.elapsed().as_secs_f64());
    Ok((result, None))
}

/// The listed rows of a GPU result.
fn select_rows(t: &HostTensor, rows: &[usize]) -> Vec<f64> {
    rows.iter().flat_map(|r| t.row(*r).unwrap_or_default().iter().copied()).collect()
}

/// Compares every output with the interpreter; prints one line each.
fn check(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
    results: &BTreeMap<String, HostTensor>,
) -> Result<bool> {
    let (reference, rows) = reference(block, dims, inputs)?;
    let mut ok = true;
    for o in &block.outputs {
        let name = &o.tensor.name;
        let (Some(gpu), Some(want)) = (results.get(name), reference.get(name)) else { continue };
        let tol = tolerance(block, o.value, o.tensor.dtype);
        let mut e = match &rows {
            Some(rows) => compare(&select_rows(gpu, rows), &want.data),
            None => compare(&gpu.data, &want.data),
        };
        if rows.is_some() {
            e.unwritten = gpu.data.iter().filter(|x| x.is_nan()).count();
        }
        let pass = e.unwritten == 0 && e.rel_l2 <= tol;
        ok &= pass;
        let shape = npy::shape_of(&o.tensor, gpu).iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        let status = if pass { "ok" } else { "FAIL" };
        let unwritten =
            if e.unwritten > 0 { format!(", {} elements never written (NaN)", e.unwritten) } else { String::new() };
        println!(
            "  output {name} {}[{shape}]: max abs {:.3e}, max rel {:.3e}, rel-L2 {:.3e} (tol {tol:.0e}){unwritten} {status}",
            o.tensor.dtype, e.max_abs, e.max_rel, e.rel_l2
        );
        println!(
            "RESULT output block={} name={name} max_rel={:.3e} rel_l2={:.3e} tol={tol:.0e} unwritten={} status={}",
            block.name,
            e.max_rel,
            e.rel_l2,
            e.unwritten,
            if pass { "pass" } else { "fail" }
        );
    }
    Ok(ok)
}

/// Error measures of one output.
struct Errors {
    max_abs: f64,
    max_rel: f64,
    rel_l2: f64,
    unwritten: usize,
}

/// `max_rel` divides by `max(|ref|, 1e-2 * rms(ref))`, so that elements near
/// zero do not dominate it.
fn compare(gpu: &[f64], want: &[f64]) -> Errors {
    let n = want.len().max(1) as f64;
    let norm2: f64 = want.iter().filter(|x| x.is_finite()).map(|x| x * x).sum();
    let floor = 1e-2 * (norm2 / n).sqrt();
    let mut e = Errors { max_abs: 0.0, max_rel: 0.0, rel_l2: 0.0, unwritten: 0 };
    let mut diff2 = 0.0;
    for (g, w) in gpu.iter().zip(want) {
        if g.is_nan() && !w.is_nan() {
            e.unwritten += 1;
            continue;
        }
        if g == w || (g.is_nan() && w.is_nan()) {
            continue;
        }
        let d = (g - w).abs();
        let d = if d.is_nan() { f64::INFINITY } else { d };
        diff2 += d * d;
        e.max_abs = e.max_abs.max(d);
        e.max_rel = e.max_rel.max(d / w.abs().max(floor).max(f64::MIN_POSITIVE));
    }
    e.rel_l2 = if norm2 > 0.0 {
        (diff2 / norm2).sqrt()
    } else if diff2 > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    e
}

/// The rel-L2 tolerance of an output (see the module docs).
/// The rel-L2 tolerance of an output: 1e-5 for an `f32` output computed
/// without a matmul; otherwise 5e-3 for up to two 16-bit roundings on the
/// way from the inputs (the output's own store, a cast to a 16-bit type, a
/// matmul operand that is not an input), and `5e-3 · sqrt(n / 2)` for n of
/// them. Each rounding of a value the GPU computed in another order (or,
/// with a norm deferred, from an operand rounded before the row scale
/// instead of after) can land one unit in the last place away from the
/// interpreter's, an independent error of about half a bf16 unit in
/// relative RMS (2e-3) per rounding, so the expected distance grows with
/// the square root of their number: the Llama-3 SwiGLU output `y` goes
/// through four (`x1`, the gate/up operand, `z`, its store), and measured
/// 4.9e-3 on the H100.
fn tolerance(block: &Block, value: Value, dtype: DType) -> f64 {
    if dtype == DType::F32 && !depends_on_matmul(block, value) {
        return 1e-5;
    }
    let roundings = roundings_on_longest_path(block, value) + usize::from(dtype.is_half());
    5e-3 * (roundings as f64 / 2.0).sqrt().max(1.0)
}

/// The most 16-bit roundings on a path from the inputs to `value`: casts
/// to a 16-bit type, and matmuls reading an operand that is not an input
/// (rounded to the operand type).
fn roundings_on_longest_path(block: &Block, value: Value) -> usize {
    let mut memo: Vec<Option<usize>> = vec![None; block.insts.len()];
    for (v, inst) in block.insts.iter() {
        if v.index() > value.index() {
            break;
        }
        let own = match inst {
            Inst::Cast { to, .. } => usize::from(to.is_half()),
            Inst::MatMul { lhs, rhs, .. } => {
                usize::from([lhs, rhs].iter().any(|o| !matches!(block.inst(**o), Inst::Param(_))))
            }
            _ => 0,
        };
        let deepest = inst.operands().iter().filter_map(|o| memo[o.index()]).max().unwrap_or(0);
        memo[v.index()] = Some(deepest + own);
    }
    memo[value.index()].unwrap_or(0)
}

fn depends_on_matmul(block: &Block, value: Value) -> bool {
    let mut seen = vec![false; block.insts.len()];
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut seen[v.index()], true) {
            continue;
        }
        let inst = block.inst(v);
        if matches!(inst, Inst::MatMul { .. }) {
            return true;
        }
        stack.extend(inst.operands());
    }
    false
}

/// Per-kernel medians of 20 timed runs after 3 warm-up runs.
fn time(
    executor: &BlockExecutor,
    device: &Device,
    prepared: &coda_runtime::exec::Prepared,
    manifest: &coda::cuda::BlockManifest,
    block: &Block,
) -> Result<()> {
    let timings = executor.time(device, prepared, 3, 20)?;
    for t in &timings {
        // Besides the manifest's kernels: the runtime's staging copies, and the whole block.
        let other = if t.name == "total" { "block" } else { "copy" };
        let kind = manifest.kernels.iter().find(|k| k.name == t.name).map_or(other, |k| k.kind.as_str());
        let us = f64::from(t.stats.median_ms) * 1e3;
        println!("  time {:<5} {:<9} median {us:>10.1} us (min {:.1})", t.name, kind, f64::from(t.stats.min_ms) * 1e3);
        println!("RESULT kernel block={} name={} kind={kind} median_us={us:.1}", block.name, t.name);
    }
    Ok(())
}

/// What `codac bench --autotune` changed in a compile, one line each (none
/// where nothing): tuned tile configurations, and the GEMMs that run
/// unfused because their blocks ran faster so.
pub(crate) fn tuning_lines(
    rules: &coda::CompileOptions,
    tuned: &coda::CompileOptions,
    store: &coda_runtime::TuningStore,
) -> Vec<String> {
    let path = store.path().map_or(String::new(), |p| format!(" ({})", p.display()));
    let (tiles, unfused) = coda_bench::tune::tuning_summary(rules, tuned);
    let mut lines = Vec::new();
    if tiles {
        lines.push(format!("tile configurations tuned by `codac bench --autotune`{path}"));
    }
    if !unfused.is_empty() {
        lines.push(format!("unfused, as `codac bench --autotune` measured them faster{path}: {}", unfused.join(", ")));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output_tolerances(source: &str) -> Vec<(String, f64)> {
        let checked = coda::check("t.coda", source).unwrap_or_else(|e| panic!("{e}"));
        let block = &checked.module.blocks[0];
        block.outputs.iter().map(|o| (o.tensor.name.clone(), tolerance(block, o.value, o.tensor.dtype))).collect()
    }

    #[test]
    fn the_tolerance_grows_with_the_roundings_on_the_way() {
        let source = "dim M\ndim D = 8\n\
            block b(x: bf16[M, D], w: bf16[D, D], v: bf16[D, D]) -> (a: bf16[M, D], c: bf16[M, D], e: f32[M, D], s: f32[M, D]) {\n\
            let h = bf16(x @ w.T)\n    a = h\n    let z = bf16(h @ v.T)\n    c = bf16(silu(z) @ v.T)\n    e = z\n    s = x * x\n}\n";
        let tol: BTreeMap<String, f64> = output_tolerances(source).into_iter().collect();
        // a: the cast and its store; c: h, the operand h, z, the operand silu(z), its own cast and store.
        assert_eq!(tol["a"], 5e-3);
        assert!((tol["c"] - 5e-3 * 3f64.sqrt()).abs() < 1e-12, "{tol:?}");
        assert!((tol["e"] - 5e-3 * 1.5f64.sqrt()).abs() < 1e-12, "{tol:?}");
        assert_eq!(tol["s"], 1e-5);
    }
}
