//! `Program`: a checked `.coda` program, its blocks' signatures and
//! gradients, `explain`, and the reference interpreter for CPU tensors.

use crate::errors::{internal, CodacError};
use crate::executor::Executor;
use crate::signature;
use coda::grad::Gradient;
use coda::ir::{Block, Module};
use coda::{Checked, EvalOptions, HostTensor};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::collections::BTreeMap;

/// Which block of a training step: the plain forward, the forward that
/// also stores the saved tensors, or the backward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    Forward,
    Saving,
    Backward,
}

impl Variant {
    fn parse(text: &str) -> PyResult<Variant> {
        match text {
            "forward" => Ok(Variant::Forward),
            "saving" => Ok(Variant::Saving),
            "backward" => Ok(Variant::Backward),
            other => {
                Err(PyValueError::new_err(format!("variant must be 'forward', 'saving' or 'backward', got {other:?}")))
            }
        }
    }
}

/// A checked program.
#[pyclass(frozen, module = "codac._native")]
pub(crate) struct Program {
    checked: Checked,
    /// The gradients: the `grad` declarations', or in a file without any,
    /// each block's with respect to all its float inputs.
    grads: Vec<Gradient>,
    warnings: String,
}

impl Program {
    /// The block `name` of `variant`.
    pub(crate) fn block(&self, variant: Variant, name: &str) -> PyResult<&Block> {
        let forward = self.checked.module.block(name).ok_or_else(|| {
            let known: Vec<&str> = self.checked.module.blocks.iter().map(|b| b.name.as_str()).collect();
            PyValueError::new_err(format!(
                "no block named '{name}' in {} (blocks: {})",
                self.checked.source.name,
                known.join(", ")
            ))
        })?;
        if variant == Variant::Forward {
            return Ok(forward);
        }
        let gradient = self.gradient(name).ok_or_else(|| {
            PyValueError::new_err(format!(
                "block '{name}' of {} has no `grad` declaration, so it cannot be differentiated",
                self.checked.source.name
            ))
        })?;
        Ok(if variant == Variant::Saving { &gradient.saving_forward } else { &gradient.backward })
    }

    fn gradient(&self, forward: &str) -> Option<&Gradient> {
        self.grads.iter().find(|g| g.forward == forward)
    }

    /// A program holding only `block`, for the code generator.
    pub(crate) fn only(&self, block: &Block) -> Checked {
        let module = Module { file_name: self.checked.module.file_name.clone(), blocks: vec![block.clone()] };
        Checked { source: self.checked.source.clone(), module, diagnostics: Vec::new(), grads: Vec::new() }
    }
}

#[pymethods]
impl Program {
    /// Checks `source` (named `name` in diagnostics) with `dims` fixed;
    /// raises `CodacError` with the rendered diagnostics if it has errors.
    #[new]
    fn new(name: &str, source: &str, dims: BTreeMap<String, i64>) -> PyResult<Program> {
        let checked = coda::check_with_dims(name, source, &dims).map_err(internal)?;
        let rendered = checked.render_diagnostics();
        if checked.has_errors() {
            return Err(CodacError::new_err(rendered));
        }
        let grads = if checked.grads.is_empty() {
            coda::grad_view(&checked).map_err(internal)?.grads
        } else {
            checked.grads.clone()
        };
        Ok(Program { checked, grads, warnings: rendered })
    }

    /// The rendered warnings (empty when there are none).
    #[getter]
    fn warnings(&self) -> &str {
        &self.warnings
    }

    /// The source file's name.
    #[getter]
    fn name(&self) -> &str {
        &self.checked.source.name
    }

    /// The block names, in source order.
    fn blocks(&self) -> Vec<String> {
        self.checked.module.blocks.iter().map(|b| b.name.clone()).collect()
    }

    /// What `codac explain` prints (with `grad`, `codac explain --grad`).
    fn explain(&self, grad: bool) -> PyResult<String> {
        if !grad {
            return Ok(coda::explain_text(&self.checked));
        }
        let view = coda::grad_view(&self.checked).map_err(internal)?;
        Ok(coda::explain_text(&view))
    }

    /// The signature of block `name`'s `variant` (see `signature.rs`).
    fn signature<'py>(&self, py: Python<'py>, variant: &str, name: &str) -> PyResult<Bound<'py, PyDict>> {
        signature::of(py, self.block(Variant::parse(variant)?, name)?)
    }

    /// How block `name` is differentiated, or `None`: `wrt` pairs each
    /// differentiated input with the backward output holding its gradient,
    /// `outputs` each differentiated output with the backward input taking
    /// its gradient (`None` when the backward does not read it), `saved`
    /// names the saved tensors (outputs of the saving forward, inputs of
    /// the backward).
    fn gradient_info<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(g) = self.gradient(name) else { return Ok(None) };
        let forward = self.block(Variant::Forward, name)?;
        let d = PyDict::new(py);
        let wrt = PyList::empty(py);
        for (index, out) in &g.input_grads {
            let input = forward.params.get(*index).map(|p| p.name.clone()).ok_or_else(|| internal("gradient input"))?;
            wrt.append((input, out))?;
        }
        d.set_item("wrt", wrt)?;
        let outputs = PyList::empty(py);
        for (index, given) in &g.output_grads {
            let output = forward
                .outputs
                .get(*index)
                .map(|o| o.tensor.name.clone())
                .ok_or_else(|| internal("gradient output"))?;
            let read = g.backward.param(given).is_some().then(|| given.clone());
            outputs.append((output, read))?;
        }
        d.set_item("outputs", outputs)?;
        let saved: Vec<&str> = g.saved.iter().map(|s| s.name.as_str()).collect();
        d.set_item("saved", saved)?;
        Ok(Some(d))
    }

    /// Runs block `name`'s `variant` in the exact interpreter. `inputs`
    /// maps each input's name to `(rows, cols, data)`, data being the
    /// row-major values as little-endian f64 bytes; returns each output
    /// the same way. `round` rounds to each tensor's storage type where
    /// the program stores it, as the GPU does.
    fn eval<'py>(
        &self,
        py: Python<'py>,
        variant: &str,
        name: &str,
        dims: BTreeMap<String, i64>,
        inputs: BTreeMap<String, (usize, usize, Vec<u8>)>,
        round: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let block = self.block(Variant::parse(variant)?, name)?;
        let mut host = BTreeMap::new();
        for p in &block.params {
            let Some((rows, cols, bytes)) = inputs.get(&p.name) else {
                return Err(PyValueError::new_err(format!("codac block '{name}': input '{}' is missing", p.name)));
            };
            let data: Vec<f64> = bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect();
            let tensor = HostTensor::new(p.dtype, *rows, *cols, data)
                .map_err(|e| PyValueError::new_err(format!("codac block '{name}': input '{}': {e}", p.name)))?;
            host.insert(p.name.clone(), tensor);
        }
        let options = EvalOptions { round_to_storage: round };
        let outputs = py.detach(|| coda::eval(block, &dims, &host, &options)).map_err(|e| {
            // Located like the checker's diagnostics, on the program's source.
            let rendered = coda::render_to_string(&self.checked.source, &[e.diagnostic(block)]);
            if e.is_bug() {
                internal(rendered)
            } else {
                CodacError::new_err(format!("codac block '{name}' at these dims:\n{rendered}"))
            }
        })?;
        let d = PyDict::new(py);
        for (out_name, t) in outputs {
            let bytes: Vec<u8> = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            d.set_item(out_name, (t.rows, t.cols, PyBytes::new(py, &bytes)))?;
        }
        Ok(d)
    }

    /// Compiles (through the kernel cache) and loads block `name`'s
    /// `variant` on CUDA device `ordinal`.
    fn executor(&self, py: Python<'_>, variant: &str, name: &str, ordinal: usize) -> PyResult<Executor> {
        let block = self.block(Variant::parse(variant)?, name)?;
        Executor::build(py, self.only(block), ordinal)
    }
}
