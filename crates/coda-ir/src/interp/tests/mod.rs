//! Tests of the reference interpreter, on small blocks built by hand and
//! checked against values computed independently.

mod elementwise;
mod io;
mod layout;
mod matmul;
mod random;
mod reduce;
mod rope;
mod rounding;

use super::{eval, DimBindings, EvalError, EvalOptions, HostTensor};
use crate::block::{Block, BlockKind, Output, Tensor};
use crate::dim::Dim;
use crate::inst::{Inst, Value};
use crate::ty::{DType, Shape};
use coda_diagnostics::Span;
use std::collections::BTreeMap;

/// What a test returns: `?` works on every error.
type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// A block under construction.
struct Builder {
    block: Block,
}

impl Builder {
    fn new() -> Builder {
        Builder { block: Block::new("test", BlockKind::Block, Span::default()) }
    }

    /// Declares a param and reads it.
    fn param(&mut self, name: &str, dtype: DType, shape: (Dim, Dim), rank: u8) -> TestResult<Value> {
        let index = self.block.params.len();
        self.block.params.push(tensor(name, dtype, shape, rank));
        self.push(Inst::Param(index))
    }

    /// A rank-2 f32 param of constant shape.
    fn f32_param(&mut self, name: &str, rows: i64, cols: i64) -> TestResult<Value> {
        self.param(name, DType::F32, (c(rows), c(cols)), 2)
    }

    fn push(&mut self, inst: Inst) -> TestResult<Value> {
        Ok(self.block.push(inst, Span::default())?)
    }

    /// Stores `value` into a rank-2 output of its shape.
    fn output(&mut self, name: &str, dtype: DType, value: Value, accumulate: bool) {
        let shape = self.block.ty(value).shape.clone();
        self.output_with(tensor(name, dtype, (shape.rows, shape.cols), 2), value, accumulate);
    }

    fn output_with(&mut self, tensor: Tensor, value: Value, accumulate: bool) {
        self.block.outputs.push(Output { tensor, value, accumulate, span: Span::default() });
    }
}

fn tensor(name: &str, dtype: DType, (rows, cols): (Dim, Dim), rank: u8) -> Tensor {
    Tensor { name: name.into(), dtype, shape: Shape::new(rows, cols), rank, span: Span::default() }
}

fn c(value: i64) -> Dim {
    Dim::constant(value)
}

fn sym(name: &str) -> Dim {
    Dim::symbol(name)
}

fn bind(pairs: &[(&str, i64)]) -> DimBindings {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn host(dtype: DType, rows: usize, cols: usize, data: &[f64]) -> TestResult<HostTensor> {
    Ok(HostTensor::new(dtype, rows, cols, data.to_vec())?)
}

fn inputs(pairs: Vec<(&str, HostTensor)>) -> BTreeMap<String, HostTensor> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn run(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
    round: bool,
) -> Result<BTreeMap<String, HostTensor>, EvalError> {
    eval(block, dims, inputs, &EvalOptions { round_to_storage: round })
}

/// The data of output `name`.
fn out(results: &BTreeMap<String, HostTensor>, name: &str) -> TestResult<Vec<f64>> {
    Ok(results.get(name).ok_or_else(|| format!("no output `{name}`"))?.data.clone())
}

/// Equal within `rel` relative error (NaN equals NaN, infinities exactly).
fn close(actual: f64, expected: f64, rel: f64) -> bool {
    if expected.is_nan() {
        return actual.is_nan();
    }
    if expected.is_infinite() || expected == 0.0 {
        return actual == expected;
    }
    ((actual - expected) / expected).abs() <= rel
}

#[track_caller]
fn assert_close(actual: &[f64], expected: &[f64], rel: f64) {
    assert_eq!(actual.len(), expected.len(), "lengths of {actual:?} and {expected:?}");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        assert!(close(a, e, rel), "element {i}: got {a:e}, expected {e:e} (all: {actual:?})");
    }
}

/// Bitwise equality, so that NaN and signed zeros count.
#[track_caller]
fn assert_bits(actual: &[f64], expected: &[f64]) {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(actual), bits(expected), "got {actual:?}, expected {expected:?}");
}
