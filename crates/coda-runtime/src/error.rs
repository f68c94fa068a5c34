//! The crate's typed error, [`RuntimeError`], and helpers that turn cudarc's
//! driver / NVRTC status codes into it.
//!
//! CUDA driver failures keep the driver's own error name (for example
//! `CUDA_ERROR_ILLEGAL_ADDRESS`) so that messages can be searched for.

use std::path::PathBuf;

use cudarc::driver::DriverError;
use cudarc::nvrtc::result::NvrtcError;

/// Result alias used throughout the crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Everything that can go wrong in the runtime. No operation in this crate
/// panics on a missing library, a missing GPU or a failed compile; it returns
/// one of these instead.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// `libcuda` could not be loaded.
    #[error("no CUDA driver found: tried {tried}; install the NVIDIA driver (libcuda.so.1) or add its directory to LD_LIBRARY_PATH")]
    NoDriver {
        /// Every library name / path that was tried, comma separated.
        tried: String,
    },

    /// A CUDA library loaded but lacks entry points the runtime calls (a
    /// stub, a truncated install or a mismatched version). Checked when the
    /// library is loaded, because cudarc resolves each symbol on its first
    /// call and panics when it is missing.
    #[error("{library} at {found} lacks the entry points {missing}; reinstall it (the NVIDIA driver for libcuda, the CUDA toolkit for NVRTC and cuBLAS) or put a complete copy first on LD_LIBRARY_PATH")]
    MissingSymbols {
        /// The library's base name, e.g. `libcuda`.
        library: &'static str,
        /// The library's path when known, else the loader's search.
        found: String,
        /// The missing symbols, comma separated.
        missing: String,
    },

    /// The CUDA driver is older than the CUDA version this crate is built for.
    #[error("CUDA driver too old: it supports CUDA {found}, but codac needs CUDA {required} or newer")]
    DriverTooOld {
        /// Driver's CUDA version as `major.minor`.
        found: String,
        /// Minimum CUDA version as `major.minor`.
        required: String,
    },

    /// `libnvrtc` could not be loaded.
    #[error("no NVRTC library found: tried {tried}; install the CUDA toolkit, or `pip install nvidia-cuda-nvrtc==13.0.* nvidia-cuda-runtime==13.0.* nvidia-cuda-cccl==13.0.*` (NVRTC and the headers the kernels include) and set CUDA_HOME to their `site-packages/nvidia/cu13` directory")]
    NoNvrtc {
        /// Every library name / path that was tried, comma separated.
        tried: String,
    },

    /// `libcublas` could not be loaded (only `codac bench`'s reference
    /// timings need it).
    #[error("no cuBLAS library found: tried {tried}; install the CUDA toolkit's cuBLAS or add the directory of libcublas.so.13 to LD_LIBRARY_PATH")]
    NoCublas {
        /// Every library name / path that was tried, comma separated.
        tried: String,
    },

    /// A cuBLAS call failed.
    #[error("cuBLAS call {call} failed: {status}")]
    Cublas {
        /// The cuBLAS function that failed.
        call: &'static str,
        /// The `cublasStatus_t` name.
        status: String,
    },

    /// NVRTC rejected the source. The source was written to `dumped_source`.
    #[error("NVRTC compilation failed (source dumped to {}):\n{log}", dumped_source.display())]
    Nvrtc {
        /// The NVRTC program log.
        log: String,
        /// Where the offending source was written.
        dumped_source: PathBuf,
    },

    /// An NVRTC API call (other than the compile itself) failed.
    #[error("NVRTC call {call} failed: {code}")]
    NvrtcApi {
        /// The NVRTC function that failed.
        call: &'static str,
        /// The `nvrtcResult` name.
        code: String,
    },

    /// A CUDA driver API call failed.
    #[error("CUDA error in {op}: {name} ({description})")]
    Cuda {
        /// What was being done (usually the driver function).
        op: &'static str,
        /// The `CUresult` name, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: String,
        /// The driver's description of the error.
        description: String,
    },

    /// The device ordinal does not exist.
    #[error("no CUDA device with ordinal {ordinal} ({count} device(s) visible)")]
    NoSuchDevice {
        /// Requested ordinal.
        ordinal: usize,
        /// Number of visible devices.
        count: usize,
    },

    /// A GPU architecture string could not be parsed.
    #[error("invalid GPU architecture `{input}`: {reason} (expected e.g. sm_80, sm_90a)")]
    InvalidArch {
        /// The string given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A tensor argument does not have the expected dtype / shape / layout.
    #[error("argument `{name}`: {message}")]
    Argument {
        /// Argument name as the caller knows it.
        name: String,
        /// What is wrong.
        message: String,
    },

    /// A caller-supplied value is invalid (sizes, launch configuration, ...).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// A file-system operation failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// No CUDA toolkit directory could be found.
    #[error("no CUDA toolkit found: tried {tried}; set CUDA_HOME to the toolkit root (the directory containing include/cuda_bf16.h), or `pip install nvidia-cuda-runtime==13.0.* nvidia-cuda-cccl==13.0.*` for the headers and set CUDA_HOME to their `site-packages/nvidia/cu13` directory")]
    NoToolkit {
        /// Every directory that was tried, comma separated.
        tried: String,
    },
}

impl RuntimeError {
    /// Builds a [`RuntimeError::Cuda`] from a cudarc driver error.
    pub(crate) fn cuda(op: &'static str, err: DriverError) -> Self {
        let description = err
            .error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "no description".to_string());
        RuntimeError::Cuda { op, name: format!("{:?}", err.0), description }
    }

    /// Builds a [`RuntimeError::NvrtcApi`] from a cudarc NVRTC error.
    pub(crate) fn nvrtc_api(call: &'static str, err: NvrtcError) -> Self {
        RuntimeError::NvrtcApi { call, code: format!("{:?}", err.0) }
    }

    /// Builds a [`RuntimeError::Io`].
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RuntimeError::Io { path: path.into(), source }
    }

    /// True when the error means "there is no usable GPU here" (no driver,
    /// no device, or the driver reports no CUDA-capable device), as opposed
    /// to a real failure on a machine that has one.
    pub fn is_no_gpu(&self) -> bool {
        match self {
            RuntimeError::NoDriver { .. } | RuntimeError::NoSuchDevice { .. } => true,
            RuntimeError::Cuda { name, .. } => name == "CUDA_ERROR_NO_DEVICE" || name == "CUDA_ERROR_INVALID_DEVICE",
            _ => false,
        }
    }
}

/// Extension to convert cudarc driver results into [`Result`].
pub(crate) trait CudaResultExt<T> {
    /// Tags the error with the operation that failed.
    fn cuda(self, op: &'static str) -> Result<T>;
}

impl<T> CudaResultExt<T> for std::result::Result<T, DriverError> {
    fn cuda(self, op: &'static str) -> Result<T> {
        self.map_err(|e| RuntimeError::cuda(op, e))
    }
}

/// Extension to convert cudarc NVRTC results into [`Result`].
pub(crate) trait NvrtcResultExt<T> {
    /// Tags the error with the NVRTC call that failed.
    fn nvrtc(self, call: &'static str) -> Result<T>;
}

impl<T> NvrtcResultExt<T> for std::result::Result<T, NvrtcError> {
    fn nvrtc(self, call: &'static str) -> Result<T> {
        self.map_err(|e| RuntimeError::nvrtc_api(call, e))
    }
}

#[cfg(test)]
mod tests {
    use super::RuntimeError;

    /// NVRTC alone compiles nothing: the kernels include the runtime's
    /// headers and CCCL's, so the install hints name every package.
    #[test]
    fn install_hints_name_every_package_the_kernels_need() {
        let no_nvrtc = RuntimeError::NoNvrtc { tried: "libnvrtc.so.13".into() }.to_string();
        for package in ["nvidia-cuda-nvrtc==13.0.*", "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-cccl==13.0.*"] {
            assert!(no_nvrtc.contains(package), "{no_nvrtc}");
        }
        let no_toolkit = RuntimeError::NoToolkit { tried: "/usr/local/cuda".into() }.to_string();
        for package in ["nvidia-cuda-runtime==13.0.*", "nvidia-cuda-cccl==13.0.*"] {
            assert!(no_toolkit.contains(package), "{no_toolkit}");
        }
    }
}
