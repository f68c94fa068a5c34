//! Host time of preparing and enqueuing a block: `prepare`, `prepare_with`
//! and `launch` of the Llama-3 layer at small widths, timed separately,
//! and one tensor-map encoding. For finding where an eager call from
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

fn per_call_us(n: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..20 {
        f();
    }
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
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
    let n = 2000;
    let prepare_with = per_call_us(n, || {
        // SAFETY: the region is 64 MiB of this device, alive past the runs.
        let p = unsafe { executor.prepare_with(&device, &dims, &bindings, &mut |_| Ok(region.ptr())) };
        assert!(p.is_ok());
    });
    let launch = per_call_us(n, || assert!(executor.launch(&prepared, stream).is_ok()));
    stream.synchronize()?;
    let map = coda_runtime::TiledMap {
        dtype: DType::Bf16,
        address: region.ptr(),
        dims: vec![4096, 8192],
        strides: vec![8192],
        box_dims: vec![64, 64],
    };
    let encode = per_call_us(n, || assert!(map.encode().is_ok()));
    println!("device: {}", device.name());
    println!("launches per block: {}", executor.launched(&prepared).len());
    println!("prepare_with: {prepare_with:.1} us");
    println!("launch (all kernels): {launch:.1} us");
    println!("one cuTensorMapEncodeTiled: {encode:.2} us");
    Ok(())
}
