//! Device round trips. Need a GPU; without one (no libcuda, or no device)
//! they print "skipped: no GPU" to stderr and check that the failure was a
//! typed error rather than a panic.

use coda_runtime::{convert, CompileOptions, Compiler, DType, Device, LaunchConfig, ParamBlock, RuntimeError};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn open() -> Result<Option<Device>, RuntimeError> {
    match Device::open(0) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.is_no_gpu() => {
            if let RuntimeError::NoDriver { .. } = e {
                assert!(e.to_string().starts_with("no CUDA driver found: tried "));
            }
            eprintln!("skipped: no GPU ({e})");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[test]
fn buffer_round_trip_fill_and_poison() -> TestResult {
    let Some(dev) = open()? else { return Ok(()) };
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut b = dev.upload(&data)?;
    assert_eq!(b.download()?, data);
    b.fill_bytes(0xab)?;
    assert!(b.download()?.iter().all(|&x| x == 0xab));
    for dt in DType::ALL {
        b.poison_nan(dt)?;
        let back = b.download()?;
        assert_eq!(&back[..dt.size_bytes()], &convert::nan_pattern(dt)[..]);
    }
    assert!(b.upload(&data[..10]).is_err());
    assert!(dev.alloc(0)?.download()?.is_empty());
    Ok(())
}

#[test]
fn launch_twice_bf16() -> TestResult {
    let Some(dev) = open()? else { return Ok(()) };
    let src = r#"
#include <cuda_bf16.h>
struct Args { const __nv_bfloat16* x; __nv_bfloat16* y; int n; };
extern "C" __global__ void twice(Args a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.y[i] = __float2bfloat16(2.0f * __bfloat162float(a.x[i]));
}
"#;
    let k = Compiler::global()?.compile(src, &CompileOptions::new(dev.arch()))?;
    let f = dev.load(&k)?.function("twice")?;
    assert_eq!(f.param_sizes(), &[24]);
    let n = 1000usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let x = dev.upload(&convert::f32_to_bf16_bytes(&xs))?;
    let mut y = dev.alloc(n * 2)?;
    y.poison_nan(DType::Bf16)?;
    let mut p = ParamBlock::new();
    p.push_ptr(x.ptr()).push_ptr(y.ptr()).push_i32(n as i32);
    f.launch(dev.stream(), &LaunchConfig::linear(4, 256), &[&p])?;
    dev.stream().synchronize()?;
    let got = convert::bf16_bytes_to_f32(&y.download()?)?;
    let want = convert::bf16_bytes_to_f32(&convert::f32_to_bf16_bytes(&xs))?;
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(*g, 2.0 * w);
    }
    Ok(())
}
