//! Python exceptions for codac's errors.
//!
//! A program with errors raises `CodacError` (a `ValueError`) whose message
//! is the rendered diagnostics, each pointing at its `.coda` line. Runtime
//! errors map by what the caller can do about them: a bad argument is a
//! `ValueError`, a missing driver, GPU or toolkit and CUDA failures are a
//! `RuntimeError`, and a bug in codac is a `RuntimeError` that says so.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::{create_exception, PyErr};

create_exception!(
    codac,
    CodacError,
    PyValueError,
    "A `.coda` program with errors; the message holds the rendered diagnostics."
);

/// A runtime error as the Python exception the caller can act on.
pub(crate) fn runtime(error: coda_runtime::RuntimeError) -> PyErr {
    use coda_runtime::RuntimeError as E;
    match error {
        E::Argument { .. } | E::InvalidInput(_) => PyValueError::new_err(error.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// A bug in codac.
pub(crate) fn internal(error: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("internal error in codac (please report it): {error}"))
}
