//! Runtime for codac kernels: NVRTC compilation with an on-disk kernel
//! cache, CUDA device memory, and launches with by-value struct arguments.
//!
//! This is the only crate of the workspace that links cudarc or contains
//! `unsafe`. It builds without any CUDA installed; at run time it checks for
//! `libcuda` / `libnvrtc` itself before cudarc could panic, and returns typed
//! errors ([`RuntimeError`]) instead.
//!
//! * [`toolkit`] — find the CUDA toolkit (`CUDA_HOME`, `CUDA_PATH`,
//!   `/usr/local/cuda`) and its NVRTC; [`loader`] makes cudarc use it.
//! * [`Compiler`] / [`compile`] — source → CUBIN for an exact [`Arch`],
//!   through the content-addressed [`cache`].
//! * [`Device`], [`Stream`], [`DeviceBuffer`], [`TensorArg`] — devices,
//!   memory and non-owning tensor descriptions.
//! * [`ParamBlock`], [`Module`], [`Kernel`], [`LaunchConfig`] — launches.
//! * [`timing`] — CUDA-event timing; [`convert`] — host dtype conversions.
//! * [`exec`] — running the kernels of a block compiled by `coda-cuda`
//!   from its manifest; [`staging`] — the copy that fills or empties a
//!   block's staging buffers for misaligned tensors.
//! * [`VendorGemm`] — cuBLAS's GEMM on the same buffers and stream, the
//!   reference `codac bench` times codac's GEMMs against.
//!
//! # Environment
//!
//! | variable | effect |
//! |---|---|
//! | `CUDA_HOME`, `CUDA_PATH` | toolkit root (headers and `lib*/libnvrtc.so*`) |
//! | `CODAC_CACHE_DIR` | kernel cache directory (else `$XDG_CACHE_HOME/codac`, else `~/.cache/codac`) |
//! | `LD_LIBRARY_PATH` | not needed: NVRTC (and cuBLAS, for benchmarks) are preloaded from the toolkit by absolute path |

#![allow(unsafe_code)]

mod arch;
pub mod cache;
mod compiler;
pub mod convert;
mod device;
mod error;
pub mod exec;
pub mod files;
mod launch;
pub mod loader;
mod memory;
mod nvrtc;
mod params;
pub mod staging;
mod tensor;
pub mod timing;
mod tma;
pub mod toolkit;
mod tuning;
mod vendor;

pub use arch::{Arch, ArchSuffix};
pub use cache::{CacheKey, CacheStats, KernelCache};
pub use compiler::{compile, nvrtc_version, Compiler};
pub use device::{Device, DeviceInfo, Stream};
pub use error::{Result, RuntimeError};
pub use launch::{Kernel, LaunchConfig, Module, DEFAULT_MAX_DYNAMIC_SMEM, MAX_PARAM_BYTES};
pub use memory::DeviceBuffer;
pub use nvrtc::{CompileOptions, CompiledKernel, SOURCE_ROOT};
pub use params::{layout, FieldKind, ParamBlock, StructLayout};
pub use tensor::{contiguous_strides, describe, DType, TensorArg};
pub use timing::{
    bench, bench_cycle, bench_cycle_marked, bench_interleaved, compile_latency, time_ms, BenchStats, CompileLatency,
    EventTimer,
};
pub use tma::TiledMap;
pub use toolkit::Toolkit;
pub use tuning::{TuningKey, TuningStore, TUNING_FILE};
pub use vendor::{ColumnMajorCall, GemmShape, VendorGemm, VENDOR_WORKSPACE_BYTES};

#[cfg(test)]
mod tests {
    fn send_sync<T: Send + Sync>() {}

    /// The Python binding shares these across threads.
    #[test]
    fn handles_are_send_and_sync() {
        send_sync::<crate::Device>();
        send_sync::<crate::DeviceBuffer>();
        send_sync::<crate::Module>();
        send_sync::<crate::Kernel>();
        send_sync::<crate::Stream>();
        send_sync::<crate::Compiler>();
        send_sync::<crate::KernelCache>();
        send_sync::<crate::EventTimer>();
    }
}
