//! Loading `libcuda` and `libnvrtc` without ever letting cudarc panic.
//!
//! cudarc 0.19 (feature `dynamic-loading`) loads each library lazily, on the
//! first API call, by `dlopen`-ing a fixed list of *bare* file names
//! (`cudarc::get_lib_name_candidates`, e.g. `libnvrtc.so`, `libnvrtc.so.13`,
//! `libcuda.so.1`) and panics when none loads. It has no environment variable
//! or API to point it at an absolute path; the only knob it reads is
//! `LD_LIBRARY_PATH` through the dynamic loader.
//!
//! We therefore:
//!
//! 1. **Preload** the toolkit's NVRTC by absolute path (found by
//!    [`crate::toolkit`], e.g. `$CUDA_HOME/lib/libnvrtc.so.13`) and keep the
//!    handle alive for the whole process. glibc's `dlopen` matches a bare name
//!    against the `DT_SONAME` of already loaded objects, so cudarc's candidate
//!    `libnvrtc.so.13` then resolves to *that* library without any
//!    `LD_LIBRARY_PATH`. The matching `libnvrtc-builtins.so.<maj>.<min>` next
//!    to it is preloaded the same way; NVRTC `dlopen`s it by bare name at
//!    compile time and would not find it otherwise.
//! 2. Ask cudarc's non-panicking `is_culib_present()` whether its own search
//!    now succeeds; only then call anything that reaches `culib()`.
//! 3. Compare the address of `nvrtcVersion` in our handle and cudarc's to
//!    tell whether cudarc really uses the requested library (it may not when an
//!    earlier candidate such as `libnvrtc.so` is on `LD_LIBRARY_PATH`).
//!
//! The driver is checked the same way; when cudarc's names fail, a few
//! well-known absolute locations of `libcuda.so.1` are preloaded.
//!
//! cudarc also resolves each *symbol* lazily, on its first call, and panics
//! when `dlsym` fails. So once a library is found, every entry point the
//! runtime reaches (directly or through cudarc's safe API) is looked up in
//! it, and a missing one is [`RuntimeError::MissingSymbols`] before anything
//! is called through it.

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use libloading::Library;

use crate::error::{Result, RuntimeError};
use crate::toolkit::Toolkit;

/// CUDA major version this crate is built against (cudarc feature `cuda-13000`).
pub(crate) const CUDA_MAJOR: u32 = 13;
/// Oldest driver (as `cuDriverGetVersion` reports it) that can run our cubins.
const MIN_DRIVER_VERSION: i32 = 13000;

/// Absolute locations of `libcuda.so.1` tried when the loader's search fails.
const DRIVER_FALLBACK_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
    "/usr/local/cuda/compat/libcuda.so.1",
];

/// Driver entry points the runtime reaches: its own `sys` calls and those
/// behind the parts of cudarc's safe API it uses (context, stream, event,
/// module, memory, launch, occupancy, error names). All exist in every
/// driver since CUDA 13.0 ([`MIN_DRIVER_VERSION`]); versioned names are the
/// ones cudarc's `cuda-13000` bindings call.
const DRIVER_SYMBOLS: &[&str] = &[
    "cuDriverGetVersion",
    "cuInit",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuFuncGetParamInfo",
    "cuLaunchKernel",
    "cuOccupancyMaxActiveClusters",
    "cuTensorMapEncodeTiled",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemGetInfo_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
];

/// NVRTC entry points the compiler calls (see `crate::nvrtc`).
const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcDestroyProgram",
];

/// cuBLAS entry points [`crate::VendorGemm`] reaches through cudarc.
const CUBLAS_SYMBOLS: &[&str] = &[
    "cublasCreate_v2",
    "cublasDestroy_v2",
    "cublasSetStream_v2",
    "cublasSetWorkspace_v2",
    "cublasGetVersion_v2",
    "cublasGemmEx",
];

/// Libraries we loaded by absolute path; never unloaded.
static PRELOADED: Mutex<Vec<Library>> = Mutex::new(Vec::new());
/// Serialises loading so that two threads do not race through the checks.
static LOAD_LOCK: Mutex<()> = Mutex::new(());
static NVRTC: OnceLock<NvrtcLibrary> = OnceLock::new();
static DRIVER: OnceLock<DriverLibrary> = OnceLock::new();
static CUBLAS: OnceLock<()> = OnceLock::new();

/// Facts about the NVRTC library cudarc ended up using.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvrtcLibrary {
    /// The absolute path we asked for (from the toolkit), if any.
    pub requested: Option<PathBuf>,
    /// `Some(true)` when cudarc uses exactly the requested library,
    /// `Some(false)` when it resolved another one first, `None` when nothing
    /// was requested.
    pub same_as_requested: Option<bool>,
    /// `nvrtcVersion()` as (major, minor).
    pub version: (i32, i32),
}

/// Facts about the loaded CUDA driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverLibrary {
    /// `cuDriverGetVersion()`, e.g. 13000 for CUDA 13.0.
    pub version: i32,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Loads a library by path and keeps it loaded forever.
fn preload(path: &Path) -> std::result::Result<(), String> {
    // SAFETY: loading a shared library runs its initialisers; we only load
    // NVIDIA's libnvrtc / libnvrtc-builtins / libcuda from paths chosen by
    // toolkit discovery, which is exactly what cudarc itself would load.
    let lib = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
    lock(&PRELOADED).push(lib);
    Ok(())
}

/// Address of `symbol` in `lib`, if present.
fn symbol_address(lib: &Library, symbol: &str) -> Option<usize> {
    // SAFETY: we only read the symbol's address and never call through it
    // with this type.
    let sym = unsafe { lib.get::<unsafe extern "C" fn()>(symbol) }.ok()?;
    Some(*sym as usize)
}

/// The subset of `symbols` that `lib` does not export, comma separated;
/// `None` when all are there.
fn missing_symbols(lib: &Library, symbols: &[&str]) -> Option<String> {
    let missing: Vec<&str> = symbols.iter().copied().filter(|s| symbol_address(lib, s).is_none()).collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// Where the loaded `lib<name>.so*` lives, for messages: the first such file
/// mapped into this process (Linux's `/proc/self/maps`), else a description
/// of the loader's search.
fn loaded_path(name: &str) -> String {
    let prefix = format!("lib{name}.so");
    std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| {
            maps.lines()
                .filter_map(|line| line.split_whitespace().nth(5))
                .find(|path| {
                    Path::new(path).file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with(&prefix))
                })
                .map(str::to_owned)
        })
        .unwrap_or_else(|| loader_search(name))
}

fn preloaded_symbol_address(symbol: &str) -> Option<usize> {
    lock(&PRELOADED).iter().rev().find_map(|lib| symbol_address(lib, symbol))
}

/// `nvrtcVersion()` called through the library we preloaded ourselves.
fn preloaded_nvrtc_version() -> Option<(i32, i32)> {
    type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
    let libs = lock(&PRELOADED);
    let lib = libs.last()?;
    // SAFETY: `nvrtcVersion` has this C signature in every NVRTC release.
    let f = unsafe { lib.get::<VersionFn>("nvrtcVersion") }.ok()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both out-pointers are valid for writes; the library stays
    // loaded (held in PRELOADED) for the duration of the call.
    let status = unsafe { f(&mut major, &mut minor) };
    (status == 0).then_some((major, minor))
}

/// Preloads `libnvrtc-builtins.so.<major>.<minor>` from the directory of
/// `nvrtc`. Required: NVRTC `dlopen`s its builtins by bare name, which the
/// loader would otherwise only find through `LD_LIBRARY_PATH`. Failure is
/// left for NVRTC to report at compile time.
fn preload_builtins_next_to(nvrtc: &Path) {
    let (Some(dir), Some((major, minor))) = (nvrtc.parent(), preloaded_nvrtc_version()) else {
        return;
    };
    let builtins = dir.join(format!("libnvrtc-builtins.so.{major}.{minor}"));
    if builtins.is_file() {
        let _ = preload(&builtins);
    }
}

/// "the loader's search (LD_LIBRARY_PATH, ld.so cache) for libX.so, …":
/// cudarc's candidate names, de-duplicated.
fn loader_search(lib: &str) -> String {
    let mut names: Vec<String> = Vec::new();
    for n in cudarc::get_lib_name_candidates(lib) {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    format!("the loader's search (LD_LIBRARY_PATH, ld.so cache) for {}", names.join(" / "))
}

/// Makes sure cudarc can load NVRTC — preferring `toolkit.nvrtc_library` —
/// and returns which library it uses. Cached after the first success.
pub fn load_nvrtc(toolkit: &Toolkit) -> Result<NvrtcLibrary> {
    let _guard = lock(&LOAD_LOCK);
    if let Some(lib) = NVRTC.get() {
        return Ok(lib.clone());
    }
    let mut tried: Vec<String> = Vec::new();
    let mut requested = None;
    if let Some(path) = &toolkit.nvrtc_library {
        match preload(path) {
            Ok(()) => {
                preload_builtins_next_to(path);
                requested = Some(path.clone());
                tried.push(path.display().to_string());
            }
            Err(e) => tried.push(format!("{} ({e})", path.display())),
        }
    } else {
        tried.extend(toolkit.searched_lib_dirs.iter().map(|p| format!("{}/libnvrtc.so*", p.display())));
    }
    // SAFETY: `is_culib_present` only dlopen()s cudarc's candidate names and
    // closes them again; it does not panic.
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    if !present {
        tried.push(loader_search("nvrtc"));
        return Err(RuntimeError::NoNvrtc { tried: tried.join(", ") });
    }
    // SAFETY: `is_culib_present()` just succeeded, so `culib()` finds a
    // library and does not reach its panic path.
    let cudarc_lib = unsafe { cudarc::nvrtc::sys::culib() };
    if let Some(missing) = missing_symbols(cudarc_lib, NVRTC_SYMBOLS) {
        return Err(RuntimeError::MissingSymbols { library: "libnvrtc", found: loaded_path("nvrtc"), missing });
    }
    let Some(cudarc_addr) = symbol_address(cudarc_lib, "nvrtcVersion") else {
        return Err(RuntimeError::NoNvrtc {
            tried: format!("{} (a library was found but it has no nvrtcVersion symbol)", tried.join(", ")),
        });
    };
    let same_as_requested = requested.as_ref().map(|_| preloaded_symbol_address("nvrtcVersion") == Some(cudarc_addr));
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the symbol exists (checked above) and both out-pointers are
    // valid for writes.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    status.result().map_err(|e| RuntimeError::nvrtc_api("nvrtcVersion", e))?;
    let info = NvrtcLibrary { requested, same_as_requested, version: (major, minor) };
    Ok(NVRTC.get_or_init(|| info).clone())
}

/// Makes sure cudarc can load `libcuda` and that the driver is new enough.
/// Cached after the first success.
pub fn load_driver() -> Result<DriverLibrary> {
    let _guard = lock(&LOAD_LOCK);
    if let Some(d) = DRIVER.get() {
        return Ok(*d);
    }
    // SAFETY: see `load_nvrtc`; this only probes cudarc's candidate names.
    let mut present = unsafe { cudarc::driver::sys::is_culib_present() };
    let mut tried: Vec<String> = vec![loader_search("cuda")];
    if !present {
        for path in DRIVER_FALLBACK_PATHS {
            let p = Path::new(path);
            if p.is_file() && preload(p).is_ok() {
                // SAFETY: as above.
                present = unsafe { cudarc::driver::sys::is_culib_present() };
                if present {
                    break;
                }
            }
            tried.push((*path).to_string());
        }
    }
    if !present {
        return Err(RuntimeError::NoDriver { tried: tried.join(", ") });
    }
    // SAFETY: `is_culib_present()` just succeeded, so `culib()` finds a
    // library and does not reach its panic path.
    let cudarc_lib = unsafe { cudarc::driver::sys::culib() };
    if let Some(missing) = missing_symbols(cudarc_lib, DRIVER_SYMBOLS) {
        return Err(RuntimeError::MissingSymbols { library: "libcuda", found: loaded_path("cuda"), missing });
    }
    let mut version = 0;
    // SAFETY: the driver library is present (checked above), so cudarc's
    // symbol loader finds it; `version` is valid for writes.
    let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    status.result().map_err(|e| RuntimeError::cuda("cuDriverGetVersion", e))?;
    if version < MIN_DRIVER_VERSION {
        return Err(RuntimeError::DriverTooOld {
            found: format!("{}.{}", version / 1000, (version % 1000) / 10),
            required: format!("{}.{}", MIN_DRIVER_VERSION / 1000, (MIN_DRIVER_VERSION % 1000) / 10),
        });
    }
    let info = DriverLibrary { version };
    Ok(*DRIVER.get_or_init(|| info))
}

/// Makes sure cudarc can load cuBLAS (for [`crate::VendorGemm`], the
/// reference `codac bench` times its GEMMs against): the loader's own
/// search first, then `libcublasLt.so.<major>` and `libcublas.so.<major>`
/// preloaded from the toolkit's library directories (`Toolkit::lib_dirs`).
/// Cached after the first success.
pub fn load_cublas(toolkit: &Toolkit) -> Result<()> {
    let _guard = lock(&LOAD_LOCK);
    if CUBLAS.get().is_some() {
        return Ok(());
    }
    // SAFETY: see `load_nvrtc`; this only probes cudarc's candidate names.
    let mut present = unsafe { cudarc::cublas::sys::is_culib_present() };
    let mut tried: Vec<String> = vec![loader_search("cublas")];
    if !present {
        for dir in toolkit.lib_dirs() {
            let (lt, blas) =
                (dir.join(format!("libcublasLt.so.{CUDA_MAJOR}")), dir.join(format!("libcublas.so.{CUDA_MAJOR}")));
            tried.push(blas.display().to_string());
            if !blas.is_file() {
                continue;
            }
            // libcublas needs libcublasLt (DT_NEEDED by bare name): load it first.
            if lt.is_file() {
                let _ = preload(&lt);
            }
            if preload(&blas).is_ok() {
                // SAFETY: as above.
                present = unsafe { cudarc::cublas::sys::is_culib_present() };
                if present {
                    break;
                }
            }
        }
    }
    if !present {
        return Err(RuntimeError::NoCublas { tried: tried.join(", ") });
    }
    // SAFETY: as for the driver in `load_driver`.
    let cudarc_lib = unsafe { cudarc::cublas::sys::culib() };
    if let Some(missing) = missing_symbols(cudarc_lib, CUBLAS_SYMBOLS) {
        return Err(RuntimeError::MissingSymbols { library: "libcublas", found: loaded_path("cublas"), missing });
    }
    CUBLAS.get_or_init(|| ());
    Ok(())
}

/// Info about NVRTC if it has already been loaded in this process.
pub fn loaded_nvrtc() -> Option<NvrtcLibrary> {
    NVRTC.get().cloned()
}
