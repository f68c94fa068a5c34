//! Block signatures as plain Python data, for the Python layer's argument
//! checks, shape inference and fake (meta) implementations.
//!
//! A signature is a dict:
//!
//! ```text
//! { "name": str, "kind": "block" | "kernel", "dims": [str],        # run-time dims
//!   "inputs":  [{"name", "dtype", "rank", "shape": [poly, poly]}],
//!   "outputs": [{... , "accumulate": bool}] }
//! ```
//!
//! `shape` is the canonical `[rows, cols]` (a rank-1 tensor of `n`
//! elements is `[n, 1]` or `[1, n]`, a scalar `[1, 1]`). Each axis is a
//! polynomial over the run-time dims, as a list of `(coefficient, [names])`
//! monomials (a name repeated for a power, `[]` for the constant term), so
//! Python can evaluate it on integers and on PyTorch's symbolic sizes alike.

use coda::ir::{Block, BlockKind, Dim, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// One axis as `[(coefficient, [names])]`.
fn polynomial<'py>(py: Python<'py>, dim: &Dim) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for (names, coefficient) in dim.monomials() {
        list.append((coefficient, names.to_vec()))?;
    }
    Ok(list)
}

fn tensor<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &t.name)?;
    d.set_item("dtype", t.dtype.to_string())?;
    d.set_item("rank", t.rank)?;
    d.set_item("shape", (polynomial(py, &t.shape.rows)?, polynomial(py, &t.shape.cols)?))?;
    Ok(d)
}

/// The signature of `block` (see the module docs).
pub(crate) fn of<'py>(py: Python<'py>, block: &Block) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &block.name)?;
    d.set_item("kind", if block.kind == BlockKind::Kernel { "kernel" } else { "block" })?;
    let dims: Vec<&str> = block.dims.iter().filter(|d| d.value.is_none()).map(|d| d.name.as_str()).collect();
    d.set_item("dims", dims)?;
    let inputs = PyList::empty(py);
    for p in &block.params {
        inputs.append(tensor(py, p)?)?;
    }
    d.set_item("inputs", inputs)?;
    let outputs = PyList::empty(py);
    for o in &block.outputs {
        let t = tensor(py, &o.tensor)?;
        t.set_item("accumulate", o.accumulate)?;
        outputs.append(t)?;
    }
    d.set_item("outputs", outputs)?;
    Ok(d)
}
