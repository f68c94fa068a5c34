//! Real NVRTC compiles. Runs wherever NVRTC can be loaded (e.g. with
//! `CUDA_HOME` pointing at a toolkit or the PyPI `nvidia/cu13` directory);
//! elsewhere prints "skipped: no NVRTC" to stderr.

use coda_runtime::{Arch, CompileOptions, Compiler, KernelCache, RuntimeError, Toolkit};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const BF16_KERNEL: &str = r#"
#include <cuda_bf16.h>
struct Args { const __nv_bfloat16* x; __nv_bfloat16* y; long long n; };
extern "C" __global__ void twice(Args a) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.y[i] = __float2bfloat16(2.0f * __bfloat162float(a.x[i]));
}
"#;

/// A compiler with a private cache directory, or `None` (after printing
/// the skip message) when this machine has no NVRTC at all.
fn compiler(cache_dir: &std::path::Path) -> Result<Option<Compiler>, RuntimeError> {
    let toolkit = Toolkit::discover();
    let has_toolkit_nvrtc = toolkit.nvrtc_library.is_some();
    match Compiler::new(toolkit, KernelCache::new(Some(cache_dir.to_path_buf()))) {
        Ok(c) => Ok(Some(c)),
        // A toolkit with libnvrtc on disk that cannot be loaded is a failure.
        Err(e @ RuntimeError::NoNvrtc { .. }) if !has_toolkit_nvrtc => {
            eprintln!("skipped: no NVRTC ({e})");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn is_elf(b: &[u8]) -> bool {
    b.starts_with(b"\x7fELF")
}

#[test]
fn compiles_bf16_kernel_for_sm80_and_sm90a_and_caches() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let Some(c) = compiler(tmp.path())? else {
        return Ok(());
    };
    let (major, _) = c.nvrtc_version();
    assert!(major >= 12, "unexpected NVRTC version {:?}", c.nvrtc_version());
    eprintln!("NVRTC {:?} from {:?}", c.nvrtc_version(), c.nvrtc_library());

    for arch in ["sm_80", "sm_90a"] {
        let arch: Arch = arch.parse()?;
        let opts = CompileOptions::new(arch).file_name("twice.cu");
        let k = c.compile(BF16_KERNEL, &opts)?;
        assert!(!k.cubin.is_empty() && is_elf(&k.cubin), "{arch}: no cubin");
        assert!(!k.cache_hit);
        assert!(!k.has_warnings(), "{arch}: {}", k.log);
        assert_eq!(k.arch, arch);
        let again = c.compile(BF16_KERNEL, &opts)?;
        assert!(again.cache_hit);
        assert_eq!(again.cubin, k.cubin);
    }
    // A second compiler on the same directory hits the disk cache.
    let c2 = Compiler::new(Toolkit::discover(), KernelCache::new(Some(tmp.path().into())))?;
    let k = c2.compile(BF16_KERNEL, &CompileOptions::new(Arch::SM_90A).file_name("twice.cu"))?;
    assert!(k.cache_hit);
    assert_eq!(c2.cache().stats().disk_hits, 1);
    Ok(())
}

#[test]
fn ptx_fast_math_and_options() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let Some(c) = compiler(tmp.path())? else {
        return Ok(());
    };
    let opts = CompileOptions::new(Arch::SM_90A).emit_ptx(true).fast_math(true);
    let o = c.nvrtc_options(&opts);
    for flag in ["-arch=sm_90a", "-std=c++17", "-default-device", "-lineinfo", "--use_fast_math"] {
        assert!(o.iter().any(|x| x == flag), "{flag} missing from {o:?}");
    }
    assert!(!c.nvrtc_options(&CompileOptions::new(Arch::SM_80)).contains(&"--use_fast_math".to_string()));
    let k = c.compile(BF16_KERNEL, &opts)?;
    let ptx = k.ptx.as_deref().unwrap_or("");
    assert!(ptx.contains(".version") && ptx.contains("twice"), "no PTX: {ptx:.200}");
    assert!(is_elf(&k.cubin));
    // Different options, different key.
    assert_ne!(c.cache_key(BF16_KERNEL, &opts), c.cache_key(BF16_KERNEL, &opts.clone().fast_math(false)));
    Ok(())
}

#[test]
fn warnings_are_reported() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let Some(c) = compiler(tmp.path())? else {
        return Ok(());
    };
    let src = "extern \"C\" __global__ void k(int* p) { int unused_variable; p[0] = 1; }";
    let k = c.compile(src, &CompileOptions::new(Arch::SM_80))?;
    assert!(k.has_warnings(), "log: {:?}", k.log);
    assert!(k.log.contains("unused_variable"));
    Ok(())
}

#[test]
fn rejection_dumps_the_source() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let Some(c) = compiler(tmp.path())? else {
        return Ok(());
    };
    let src = "extern \"C\" __global__ void k() { this is not cuda; }";
    match c.compile(src, &CompileOptions::new(Arch::SM_80).file_name("broken.cu")) {
        Err(RuntimeError::Nvrtc { log, dumped_source }) => {
            assert!(log.contains("error"), "log: {log}");
            assert!(dumped_source.starts_with(tmp.path()));
            assert_eq!(std::fs::read_to_string(&dumped_source)?, src);
        }
        other => panic!("expected an NVRTC rejection, got {other:?}"),
    }
    // A bad option is a rejection too, not a panic.
    let bad = CompileOptions::new(Arch::SM_80).flag("--no-such-option");
    assert!(matches!(c.compile("__global__ void k() {}", &bad), Err(RuntimeError::Nvrtc { .. })));
    // Interior NUL bytes are refused cleanly.
    assert!(matches!(c.compile("a\0b", &CompileOptions::new(Arch::SM_80)), Err(RuntimeError::InvalidInput(_))));
    Ok(())
}
