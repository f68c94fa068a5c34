//! `codac._native`: the extension module under the `codac` Python package.
//!
//! It exposes three things and leaves everything PyTorch-specific to the
//! pure-Python layer (`python/codac/`), which talks to this module only in
//! integers, strings and bytes — device pointers, shapes, strides, dtypes
//! and the raw handle of PyTorch's current stream — so that the wheel does
//! not link libtorch and works with any PyTorch version:
//!
//! * [`program::Program`]: a checked `.coda` program (with dims fixed by the
//!   caller), its `explain` text, each block's signature with symbolic
//!   shapes, and the exact reference interpreter for CPU tensors;
//! * [`executor::Executor`]: one block's kernels compiled and loaded on one
//!   device, launched on a caller's stream with every buffer in memory the
//!   caller allocated;
//! * `CodacError`, the exception of a program with errors, carrying the
//!   rendered diagnostics.
//!
//! `unsafe` is allowed here for the FFI boundary only: wrapping the
//! caller's stream handle and workspace pointer (see `executor.rs`).

#![allow(unsafe_code)]

mod errors;
mod executor;
mod program;
mod signature;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<program::Program>()?;
    m.add_class::<executor::Executor>()?;
    m.add_class::<executor::Layout>()?;
    m.add("CodacError", m.py().get_type::<errors::CodacError>())?;
    m.add_function(wrap_pyfunction!(executor::device_count, m)?)?;
    m.add("WORKSPACE_ALIGN", coda_runtime::exec::WORKSPACE_ALIGN)?;
    Ok(())
}
