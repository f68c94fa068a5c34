//! What a host needs to run codac's generated kernels, and nothing of the
//! code generator: the manifest ([`manifest`]: buffers, launch order,
//! argument structs and tensor maps with symbolic sizes), the evaluation of
//! those sizes for concrete dims ([`size::eval_str`]), and the generated
//! sources ([`KernelSource`]).
//!
//! `coda-cuda` writes these; `coda-runtime` reads them. Keeping them in a
//! crate of their own lets the runtime, and what builds on it, depend on
//! the contract instead of on the whole code generator.

pub mod manifest;
pub mod size;

pub use manifest::{BlockManifest, Manifest};

/// One generated `.cu` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSource {
    /// The `extern "C"` entry point.
    pub name: String,
    /// The file name (`<block>_<kernel>.cu`).
    pub file_name: String,
    /// The whole self-contained source.
    pub source: String,
}
