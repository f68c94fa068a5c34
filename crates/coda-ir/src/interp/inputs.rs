//! Checking and normalizing the inputs of an evaluation.
//!
//! Every param, and the previous content of every `+=` output, must be given
//! with its bound shape; rank-0 and rank-1 tensors may come as `[1, n]` or
//! `[n, 1]` (their data is the same flat vector either way). `i32` tensors
//! must hold integers in range.

use super::bind::{bind_shape, describe_shape, DimBindings};
use super::error::EvalError;
use super::tensor::HostTensor;
use crate::block::{Block, Tensor};
use crate::ty::DType;
use std::collections::BTreeMap;

/// Checks every param and every `+=` output's previous content up front.
pub(super) fn check_all_inputs(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
) -> Result<(), EvalError> {
    let accumulated = block.outputs.iter().filter(|o| o.accumulate).map(|o| &o.tensor);
    for decl in block.params.iter().chain(accumulated) {
        input(inputs, decl, dims).map_err(|e| e.at(decl.span))?;
    }
    Ok(())
}

/// The input for `decl`, checked: present, of the bound shape (a flat
/// vector either way for rank 0 and 1), holding integers for `i32`.
pub(super) fn input<'a>(
    inputs: &'a BTreeMap<String, HostTensor>,
    decl: &Tensor,
    dims: &DimBindings,
) -> Result<&'a HostTensor, EvalError> {
    let (rows, cols) = bind_shape(&decl.shape, dims)?;
    let name = decl.name.clone();
    let expected = || expected_input(decl, rows, cols, dims);
    let Some(given) = inputs.get(&decl.name) else {
        return Err(EvalError::MissingInput { name, expected: expected() });
    };
    let flat = decl.rank < 2 && (given.rows == 1 || given.cols == 1);
    let fits = given.shape() == (rows, cols) || (flat && given.len() as u128 == rows as u128 * cols as u128);
    if !given.is_consistent() || !fits {
        return Err(EvalError::InputShape { name, expected: expected(), got: describe_given(given) });
    }
    if decl.dtype == DType::I32 {
        given.check_integers(&format!("input `{}`", decl.name))?;
    }
    Ok(given)
}

/// The shape an input should have, for messages.
fn expected_input(decl: &Tensor, rows: usize, cols: usize, dims: &DimBindings) -> String {
    let shape = describe_shape(&decl.shape, dims);
    if decl.rank < 2 {
        format!("a vector of {} elements, {shape}", rows.saturating_mul(cols))
    } else {
        shape
    }
}

/// A given tensor's shape, for messages.
fn describe_given(given: &HostTensor) -> String {
    if given.is_consistent() {
        format!("[{}, {}]", given.rows, given.cols)
    } else {
        format!("[{}, {}] with {} elements of data", given.rows, given.cols, given.len())
    }
}
