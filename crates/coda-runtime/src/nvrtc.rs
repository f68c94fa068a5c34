//! Thin, panic-free wrapper over NVRTC (through cudarc's `sys` layer):
//! compile options, the compiled-kernel type, and one raw compilation that
//! returns a CUBIN for an exact arch (`nvrtcGetCUBIN`) and optionally PTX.
//!
//! Callers must have loaded NVRTC through [`crate::loader::load_nvrtc`]
//! first; [`crate::Compiler`] does that.

use std::ffi::{c_char, c_int, CString};

use cudarc::nvrtc::result::NvrtcError;
use cudarc::nvrtc::sys;

use crate::arch::Arch;
use crate::error::{NvrtcResultExt, Result, RuntimeError};

/// Options of one compilation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Target architecture; the CUBIN is for exactly this arch.
    pub arch: Arch,
    /// Extra NVRTC flags appended after the defaults (e.g. `-DTILE=128`).
    pub extra_flags: Vec<String>,
    /// Name NVRTC uses for the source in diagnostics and line info; a
    /// relative name is recorded under [`SOURCE_ROOT`].
    pub file_name_hint: String,
    /// Adds `--use_fast_math`.
    pub fast_math: bool,
    /// Also produce PTX (`CompiledKernel::ptx`).
    pub emit_ptx: bool,
}

impl CompileOptions {
    /// Defaults for `arch`: no extra flags, no fast math, no PTX,
    /// file name `codac_kernel.cu`.
    pub fn new(arch: Arch) -> Self {
        CompileOptions {
            arch,
            extra_flags: Vec::new(),
            file_name_hint: "codac_kernel.cu".to_string(),
            fast_math: false,
            emit_ptx: false,
        }
    }

    /// Sets [`Self::fast_math`].
    pub fn fast_math(mut self, on: bool) -> Self {
        self.fast_math = on;
        self
    }

    /// Sets [`Self::emit_ptx`].
    pub fn emit_ptx(mut self, on: bool) -> Self {
        self.emit_ptx = on;
        self
    }

    /// Appends an extra flag.
    pub fn flag(mut self, flag: impl Into<String>) -> Self {
        self.extra_flags.push(flag.into());
        self
    }

    /// Sets [`Self::file_name_hint`].
    pub fn file_name(mut self, name: impl Into<String>) -> Self {
        self.file_name_hint = name.into();
        self
    }
}

/// A compiled kernel module.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledKernel {
    /// CUBIN for [`Self::arch`].
    pub cubin: Vec<u8>,
    /// PTX, when [`CompileOptions::emit_ptx`] was set.
    pub ptx: Option<String>,
    /// NVRTC log (empty when there was nothing to say).
    pub log: String,
    /// Milliseconds this request took: the NVRTC compile on a miss, the
    /// lookup (and, for a disk hit, read + verification) on a hit.
    pub compile_ms: f64,
    /// True when served from the in-process or on-disk cache.
    pub cache_hit: bool,
    /// Target architecture.
    pub arch: Arch,
    /// Hex cache key of this compilation.
    pub key: String,
}

impl CompiledKernel {
    /// True when the NVRTC log contains a warning.
    pub fn has_warnings(&self) -> bool {
        self.log.to_ascii_lowercase().contains("warning")
    }
}

/// Result of one raw NVRTC run.
pub(crate) enum RawOutcome {
    /// Compiled; CUBIN / PTX as requested, plus the log.
    Ok { cubin: Option<Vec<u8>>, ptx: Option<String>, log: String },
    /// NVRTC rejected the program; the log says why.
    Rejected { log: String },
}

/// Owns an `nvrtcProgram` and destroys it on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from a successful nvrtcCreateProgram and is
        // destroyed exactly once, here.
        let _ = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| RuntimeError::InvalidInput(format!("{what} contains a NUL byte")))
}

/// Reads a size-then-data NVRTC output (`nvrtcGetXxxSize` + `nvrtcGetXxx`).
fn read_output(
    prog: &Program,
    size_fn: unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult,
    data_fn: unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult,
    call: &'static str,
) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: `prog.0` is a live program; `size` is valid for writes.
    unsafe { size_fn(prog.0, &mut size) }.result().nvrtc(call)?;
    let mut buf = vec![0u8; size];
    if size > 0 {
        // SAFETY: `buf` has exactly the `size` bytes NVRTC asked for.
        unsafe { data_fn(prog.0, buf.as_mut_ptr().cast()) }.result().nvrtc(call)?;
    }
    Ok(buf)
}

/// Text output without its trailing NULs.
fn to_text(mut bytes: Vec<u8>) -> String {
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Where a relative file-name hint is placed for NVRTC. NVRTC makes a
/// relative name absolute with the working directory before recording it
/// (`.file 1 "/home/me/proj/k0.cu"` in PTX under `-lineinfo`, and in the
/// CUBIN), which made the output depend on where codac ran and let a cache
/// hit (whose key has no directory) return another directory's path. An
/// absolute name is recorded verbatim, so a fixed root keeps the bytes a
/// function of the source, the options and the hint only.
pub const SOURCE_ROOT: &str = "/codac";

/// The name NVRTC records for a source with file-name hint `hint`.
pub(crate) fn recorded_name(hint: &str) -> String {
    if hint.starts_with('/') {
        hint.to_owned()
    } else {
        format!("{SOURCE_ROOT}/{hint}")
    }
}

/// Compiles `source` once with exactly `options`, then fetches the CUBIN
/// and/or PTX. A failing `nvrtcCompileProgram` is [`RawOutcome::Rejected`];
/// other API failures are errors.
pub(crate) fn compile_raw(
    source: &str,
    name: &str,
    options: &[String],
    want_cubin: bool,
    want_ptx: bool,
) -> Result<RawOutcome> {
    let c_src = cstring("kernel source", source)?;
    let c_name = cstring("file name hint", &recorded_name(name))?;
    let c_opts = options.iter().map(|o| cstring("NVRTC option", o)).collect::<Result<Vec<_>>>()?;
    let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let n_opts =
        c_int::try_from(opt_ptrs.len()).map_err(|_| RuntimeError::InvalidInput("too many NVRTC options".into()))?;

    let mut raw = std::ptr::null_mut();
    // SAFETY: `raw` is valid for writes; source and name are NUL-terminated
    // and outlive the program (dropped at the end of this function, after
    // `Program`); no headers are passed (count 0, null arrays).
    unsafe {
        sys::nvrtcCreateProgram(&mut raw, c_src.as_ptr(), c_name.as_ptr(), 0, std::ptr::null(), std::ptr::null())
    }
    .result()
    .nvrtc("nvrtcCreateProgram")?;
    let prog = Program(raw);

    // SAFETY: `prog.0` is live; `opt_ptrs` holds `n_opts` pointers to
    // NUL-terminated strings kept alive by `c_opts`.
    let status = unsafe { sys::nvrtcCompileProgram(prog.0, n_opts, opt_ptrs.as_ptr()) };
    let log = to_text(read_output(&prog, sys::nvrtcGetProgramLogSize, sys::nvrtcGetProgramLog, "nvrtcGetProgramLog")?);
    match status {
        sys::nvrtcResult::NVRTC_SUCCESS => {}
        sys::nvrtcResult::NVRTC_ERROR_COMPILATION | sys::nvrtcResult::NVRTC_ERROR_INVALID_OPTION => {
            return Ok(RawOutcome::Rejected { log });
        }
        other => return Err(RuntimeError::nvrtc_api("nvrtcCompileProgram", NvrtcError(other))),
    }
    let cubin = if want_cubin {
        Some(read_output(&prog, sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN, "nvrtcGetCUBIN")?)
    } else {
        None
    };
    let ptx = if want_ptx {
        // PTX is not produced for every target; absence is not an error.
        read_output(&prog, sys::nvrtcGetPTXSize, sys::nvrtcGetPTX, "nvrtcGetPTX")
            .ok()
            .map(to_text)
            .filter(|p| !p.is_empty())
    } else {
        None
    };
    Ok(RawOutcome::Ok { cubin, ptx, log })
}

/// `nvrtcVersion()` of the loaded library. NVRTC must be loaded.
pub(crate) fn version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: callers load NVRTC first, so cudarc's symbol lookup succeeds;
    // both out-pointers are valid.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result().nvrtc("nvrtcVersion")?;
    Ok((major, minor))
}
