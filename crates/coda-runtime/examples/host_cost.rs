//! Host time of preparing and enqueuing a block: `prepare_with`, `launch`
//! and `launch_planned` (the Python binding's path) of the Llama-3 layer at
//! small widths, timed separately, and one tensor-map encoding. For finding where an eager call from
//! PyTorch spends its host time.
//!
//!     cargo run --release -p coda-runtime --example host_cost
//!
//! It reads `examples/llama3_block.coda` from the working directory when
//! there is one, so a copied binary runs from any checkout's root.

#![allow(unsafe_code)] // prepare_with takes a raw workspace address, as the Python binding does

use coda_runtime::exec::BlockExecutor;
use coda_runtime::{DType, Device, DeviceBuffer, TensorArg};
use std::collections::BTreeMap;
use std::time::Instant;

/// Median host time per call over bursts of 64 calls, with `drain` (a
/// stream synchronization) between bursts, untimed: a burst must not fill
/// CUDA's queue of pending launches, or the host waits for the GPU and the
/// time measured is the kernels', not the host's.
fn per_call_us(mut f: impl FnMut(), drain: &dyn Fn()) -> f64 {
    const CALLS: usize = 64;
    for _ in 0..20 {
        f();
    }
    drain();
    let mut samples: Vec<f64> = (0..101)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..CALLS {
                f();
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / CALLS as f64;
            drain();
            us
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() -> anyhow::Result<()> {
    // The example from the working directory (a copied binary runs from a
    // checkout's root), else from the tree this was built in.
    let relative = std::path::PathBuf::from("examples/llama3_block.coda");
    let path = if relative.is_file() {
        relative
    } else {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/llama3_block.coda")
    };
    let text = std::fs::read_to_string(&path)?;
    let fixed: BTreeMap<String, i64> =
        [("D", 128), ("F", 256), ("HD", 64), ("QH", 1), ("KVH", 1)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let checked = coda::check_with_dims("llama3_block.coda", &text, &fixed)?;
    let device = match Device::open(0) {
        Ok(device) => device,
        Err(e) if e.is_no_gpu() => {
            println!("skipped: no GPU: {e}");
            std::process::exit(2);
        }
        Err(e) => return Err(e.into()),
    };
    let options = coda::CompileOptions::for_arch(device.arch().to_string());
    let compiled = coda::compile(&checked, &options)?;
    let manifest = &compiled.manifest.blocks[0];
    let executor = BlockExecutor::new(&device, manifest, &compiled.kernels)?;
    let block = &checked.module.blocks[0];
    let dims: BTreeMap<String, i64> = [("M".to_string(), 16)].into_iter().collect();
    let mut owned = Vec::new();
    let mut bindings = BTreeMap::new();
    for t in block.params.iter().chain(block.outputs.iter().map(|o| &o.tensor)) {
        let rows = coda::ir::interp::bind_shape(&t.shape, &dims)?;
        let shape = match t.rank {
            0 => vec![],
            1 => vec![rows.0 * rows.1],
            _ => vec![rows.0, rows.1],
        };
        let dtype: DType = t.dtype.to_string().parse()?;
        let buffer = DeviceBuffer::alloc(&device, (rows.0 * rows.1 * dtype.size_bytes()).max(16))?;
        bindings.insert(t.name.clone(), TensorArg::contiguous(dtype, shape, buffer.ptr()));
        owned.push(buffer);
    }
    let region = DeviceBuffer::alloc(&device, 64 << 20)?;
    let prepared = executor.prepare(&device, &dims, &bindings)?;
    let stream = device.stream();
    let drain = || assert!(stream.synchronize().is_ok());
    let prepare_with = per_call_us(
        || {
            // SAFETY: the region is 64 MiB of this device, alive past the runs.
            let p = unsafe { executor.prepare_with(&device, &dims, &bindings, &mut |_| Ok(region.ptr())) };
            assert!(p.is_ok());
        },
        &drain,
    );
    let launch = per_call_us(|| assert!(executor.launch(&prepared, stream).is_ok()), &drain);
    stream.synchronize()?;
    // The same launches as CUDA graphs, as the binding makes them: with the
    // arguments of the last call, with two sets of arguments in turn (two
    // layers of a model, each with a graph of its own), and with more sets
    // in turn than a plan keeps graphs, so that every call fills the plan
    // and sets its graph's arguments. The sets differ in their workspace.
    let (plan, addresses) = executor.plan(&device, &dims, &bindings)?;
    anyhow::ensure!(plan.workspace_bytes() <= 1 << 19, "the layer's workspace outgrew its 512 KiB slots");
    let sets: usize = 65;
    let graph_cycle = |count: usize| {
        let mut next = 0;
        per_call_us(
            || {
                next = (next + 1) % count;
                let base = region.ptr() + ((next as u64) << 19);
                // SAFETY: the 64 MiB region holds 65 workspaces of this
                // small layer, 512 KiB apart, and outlives the runs.
                let launched = unsafe { executor.launch_planned(&plan, &addresses, &mut |_| Ok(base), stream, false) };
                assert!(launched.is_ok());
            },
            &drain,
        )
    };
    let graph_same = graph_cycle(1);
    let graph_two = graph_cycle(2);
    let graph_updated = graph_cycle(sets);
    stream.synchronize()?;
    if let Some(failure) = plan.graph_failure() {
        anyhow::bail!("the block's launches could not run as a CUDA graph: {failure}");
    }
    let capturing = per_call_us(|| assert!(stream.is_capturing().is_ok()), &drain);
    let map = coda_runtime::TiledMap {
        dtype: DType::Bf16,
        address: region.ptr(),
        dims: vec![4096, 8192],
        strides: vec![8192],
        box_dims: vec![64, 64],
    };
    let encode = per_call_us(|| assert!(map.encode().is_ok()), &drain);
    // The floor: one launch of an empty kernel through the same path, with
    // a small argument struct and with one as large as the block's largest.
    let largest =
        executor.manifest().kernels.iter().map(|k| k.args.iter().map(|a| a.size).sum::<usize>()).max().unwrap_or(0);
    let compiler = coda_runtime::Compiler::global()?;
    let source = format!(
        "struct Small {{ long long a[4]; }}; struct Large {{ long long a[{}]; }};\n\
         extern \"C\" __global__ void empty_small(Small s) {{}}\n\
         extern \"C\" __global__ void empty_large(Large l) {{}}\n",
        largest.div_ceil(8).max(1)
    );
    let module = device
        .load(&compiler.compile(&source, &coda_runtime::CompileOptions::new(device.arch()).file_name("empty.cu"))?)?;
    let cfg = coda_runtime::LaunchConfig { grid: (1, 1, 1), block: (32, 1, 1), smem_bytes: 0 };
    let empty_launch = |name: &str, words: usize| -> anyhow::Result<f64> {
        let kernel = module.function(name)?;
        let mut block = coda_runtime::ParamBlock::new();
        for _ in 0..words {
            block.push_u64(0);
        }
        let us = per_call_us(|| assert!(kernel.launch(stream, &cfg, &[&block]).is_ok()), &drain);
        stream.synchronize()?;
        Ok(us)
    };
    let small = empty_launch("empty_small", 4)?;
    let large = empty_launch("empty_large", largest.div_ceil(8).max(1))?;
    println!("device: {}", device.name());
    println!("launches per block: {}", executor.launched(&prepared).len());
    println!("prepare_with: {prepare_with:.1} us");
    println!("launch (all kernels): {launch:.1} us");
    println!("launch_planned (a CUDA graph), one set of arguments: {graph_same:.1} us");
    println!("launch_planned, two sets of arguments in turn: {graph_two:.1} us");
    println!(
        "launch_planned, {sets} sets in turn (every call fills the plan and sets arguments): {graph_updated:.1} us"
    );
    println!("one cuTensorMapEncodeTiled: {encode:.2} us");
    println!("one capture check of the stream: {capturing:.2} us");
    println!("one empty launch, 32-byte argument: {small:.2} us");
    println!("one empty launch, {largest}-byte argument (the block's largest): {large:.2} us");
    Ok(())
}
