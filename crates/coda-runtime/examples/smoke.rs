//! GPU smoke test for coda-runtime: opens device 0, compiles two tiny
//! kernels with NVRTC for the device's arch, uploads bf16 / f32 data,
//! launches (one launch with > 48 KiB of dynamic shared memory), downloads
//! and checks the results bit-exactly, and times a launch with CUDA events.
//!
//! ```text
//! CUDA_HOME=/usr/local/cuda cargo run -p coda-runtime --example smoke
//! ```
//!
//! Exits 0 on success, 1 on failure. Without a GPU it prints
//! `skipped: no GPU: …` and exits 2 (or 0 with `--allow-no-gpu`).

use std::process::ExitCode;

use coda_runtime::{bench, convert, CompileOptions, Compiler, DType, Device, LaunchConfig, ParamBlock, RuntimeError};

const SCALE_SRC: &str = r#"
#include <cuda_bf16.h>
struct ScaleArgs {
    const __nv_bfloat16* x;
    __nv_bfloat16* y;
    long long n;
    float alpha;
};
static_assert(sizeof(ScaleArgs) == 32, "ScaleArgs size");
static_assert(alignof(ScaleArgs) == 8, "ScaleArgs alignment");
extern "C" __global__ void scale_bf16(ScaleArgs a) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.y[i] = __float2bfloat16(a.alpha * __bfloat162float(a.x[i]));
}
"#;

const SMEM_SRC: &str = r#"
struct ReverseArgs { const float* x; float* y; int n; };
extern "C" __global__ void smem_reverse(ReverseArgs a) {
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) buf[i] = a.x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) a.y[i] = buf[a.n - 1 - i];
}
"#;

fn fail(msg: String) -> RuntimeError {
    RuntimeError::InvalidInput(msg)
}

fn run() -> Result<(), RuntimeError> {
    let dev = Device::open(0)?;
    let info = dev.info();
    println!(
        "device 0: {} (cc {}.{}, arch {}, {} SMs, driver {}, smem opt-in {} B)",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.arch,
        info.multiprocessors,
        info.driver_version,
        info.max_shared_memory_per_block_optin
    );
    let compiler = Compiler::global()?;
    let (maj, min) = compiler.nvrtc_version();
    println!("NVRTC {maj}.{min}: {:?}", compiler.nvrtc_library());

    // --- y = 2 * x over bf16 ---
    let opts = CompileOptions::new(dev.arch()).file_name("scale_bf16.cu");
    let k = compiler.compile(SCALE_SRC, &opts)?;
    println!(
        "compiled scale_bf16: {} B cubin in {:.1} ms (cache hit: {}){}",
        k.cubin.len(),
        k.compile_ms,
        k.cache_hit,
        if k.has_warnings() { format!("\n{}", k.log) } else { String::new() }
    );
    let n: usize = 100_003;
    let xs: Vec<f32> = (0..n).map(|i| ((i % 2001) as f32 - 1000.0) * 0.37).collect();
    let x_bytes = convert::f32_to_bf16_bytes(&xs);
    let x = dev.upload(&x_bytes)?;
    let mut y = dev.alloc(n * 2)?;
    y.poison_nan(DType::Bf16)?;
    let xt = x.as_tensor(DType::Bf16, &[n])?;
    let yt = y.as_tensor(DType::Bf16, &[n])?;
    xt.expect("x", DType::Bf16, &[n])?;
    let mut p = ParamBlock::new();
    p.push_ptr(xt.ptr).push_ptr(yt.ptr).push_i64(n as i64).push_f32(2.0);
    let module = dev.load(&k)?;
    let scale = module.function("scale_bf16")?;
    let threads = 256u32;
    let cfg = LaunchConfig::linear(n.div_ceil(threads as usize) as u32, threads);
    scale.launch(dev.stream(), &cfg, &[&p])?;
    dev.stream().synchronize()?;
    let got = convert::bf16_bytes_to_f32(&y.download()?)?;
    let want = convert::bf16_bytes_to_f32(&x_bytes)?;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if g.to_bits() != (2.0 * w).to_bits() {
            return Err(fail(format!("scale_bf16: y[{i}] = {g}, expected {}", 2.0 * w)));
        }
    }
    println!("scale_bf16: {n} elements OK");

    // Wrong argument struct is refused before reaching the driver.
    let mut wrong = ParamBlock::new();
    wrong.push_ptr(xt.ptr).push_ptr(yt.ptr);
    if scale.launch(dev.stream(), &cfg, &[&wrong]).is_ok() {
        return Err(fail("a 16-byte struct for a 32-byte parameter was accepted".into()));
    }

    // Same source again: served from the cache.
    let again = compiler.compile(SCALE_SRC, &opts)?;
    if !again.cache_hit {
        return Err(fail("second compile was not a cache hit".into()));
    }

    // --- 64 KiB of dynamic shared memory (needs cuFuncSetAttribute) ---
    let len = 16 * 1024usize;
    if info.max_shared_memory_per_block_optin >= len * 4 {
        let k2 = compiler.compile(SMEM_SRC, &CompileOptions::new(dev.arch()))?;
        let f = dev.load(&k2)?.function("smem_reverse")?;
        let src: Vec<f32> = (0..len).map(|i| i as f32).collect();
        let xb = dev.upload(&convert::f32_to_bytes(DType::F32, &src))?;
        let mut yb = dev.alloc(len * 4)?;
        yb.poison_nan(DType::F32)?;
        let mut p2 = ParamBlock::new();
        p2.push_ptr(xb.ptr()).push_ptr(yb.ptr()).push_i32(len as i32);
        let cfg2 = LaunchConfig::linear(1, 256).with_smem((len * 4) as u32);
        f.launch(dev.stream(), &cfg2, &[&p2])?;
        dev.synchronize()?;
        let out = convert::bytes_to_f32(DType::F32, &yb.download()?)?;
        if out.iter().enumerate().any(|(i, v)| *v != (len - 1 - i) as f32) {
            return Err(fail("smem_reverse produced wrong output".into()));
        }
        println!("smem_reverse with {} B dynamic smem OK", len * 4);
    } else {
        println!("smem_reverse skipped: device allows only {} B", info.max_shared_memory_per_block_optin);
    }

    // --- timing ---
    let stats = bench(&dev, dev.stream(), 3, 20, || scale.launch(dev.stream(), &cfg, &[&p]))?;
    println!("scale_bf16 timing: min {:.4} ms, median {:.4} ms", stats.min_ms, stats.median_ms);
    Ok(())
}

fn main() -> ExitCode {
    let allow_no_gpu = std::env::args().any(|a| a == "--allow-no-gpu");
    match run() {
        Ok(()) => {
            println!("smoke: PASS");
            ExitCode::SUCCESS
        }
        Err(e) if e.is_no_gpu() => {
            eprintln!("skipped: no GPU: {e}");
            ExitCode::from(if allow_no_gpu { 0 } else { 2 })
        }
        Err(e) => {
            eprintln!("smoke: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
