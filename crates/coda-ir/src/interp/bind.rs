//! Binding symbolic dimensions to run-time values.

use super::error::EvalError;
use crate::block::Block;
use crate::dim::{Dim, DimError};
use crate::ty::Shape;
use std::collections::BTreeMap;

/// Run-time values of symbolic dimensions, by name.
pub type DimBindings = BTreeMap<String, i64>;

/// The most elements one value may have (2^31).
pub const MAX_ELEMENTS: u128 = 1 << 31;

/// The concrete `(rows, cols)` of `shape`: both must be positive and the
/// element count at most [`MAX_ELEMENTS`].
pub fn bind_shape(shape: &Shape, dims: &DimBindings) -> Result<(usize, usize), EvalError> {
    let rows = bind_extent(&shape.rows, dims)?;
    let cols = bind_extent(&shape.cols, dims)?;
    let elements = rows as u128 * cols as u128;
    if elements > MAX_ELEMENTS {
        let what = format!("a value of shape {}", describe_shape(shape, dims));
        return Err(EvalError::TooLarge { what, elements });
    }
    Ok((rows, cols))
}

/// The value of `dim` (any sign) under `dims`.
pub(super) fn eval_dim(dim: &Dim, dims: &DimBindings) -> Result<i64, EvalError> {
    dim.eval(&|name| dims.get(name).copied()).map_err(|e| match e {
        DimError::Unbound(name) => EvalError::UnboundDim { name },
        DimError::Overflow | DimError::Inexact(..) | DimError::TooComplex => {
            EvalError::DimOverflow { dim: dim.to_string() }
        }
    })
}

/// The value of `dim`, which must be positive.
fn bind_extent(dim: &Dim, dims: &DimBindings) -> Result<usize, EvalError> {
    let value = eval_dim(dim, dims)?;
    if value <= 0 {
        let bindings = describe_bindings(&dim.symbols(), dims);
        return Err(EvalError::NonPositiveDim { dim: dim.to_string(), value, bindings });
    }
    usize::try_from(value).map_err(|_| EvalError::DimOverflow { dim: dim.to_string() })
}

/// `[128, 4096] (M = 128)`: the shape with bound axes evaluated, followed
/// by the bindings of the symbols it mentions.
pub(super) fn describe_shape(shape: &Shape, dims: &DimBindings) -> String {
    let axis = |d: &Dim| match eval_dim(d, dims) {
        Ok(v) => v.to_string(),
        Err(_) => d.to_string(),
    };
    let mut symbols = shape.rows.symbols();
    symbols.extend(shape.cols.symbols());
    symbols.sort();
    symbols.dedup();
    format!("[{}, {}]{}", axis(&shape.rows), axis(&shape.cols), describe_bindings(&symbols, dims))
}

/// ` (M = 128, N = 64)` for the bound names among `symbols`, or empty.
fn describe_bindings(symbols: &[String], dims: &DimBindings) -> String {
    let bound: Vec<String> = symbols.iter().filter_map(|s| dims.get(s).map(|v| format!("{s} = {v}"))).collect();
    if bound.is_empty() {
        String::new()
    } else {
        format!(" ({})", bound.join(", "))
    }
}

/// The user's bindings plus the block's named constants. Fails when a
/// binding contradicts a constant or a symbolic dim is bound to a value
/// that is not positive.
pub(super) fn resolve_bindings(block: &Block, dims: &DimBindings) -> Result<DimBindings, EvalError> {
    let mut resolved = dims.clone();
    for def in &block.dims {
        let bound = dims.get(&def.name).copied();
        match (def.value, bound) {
            (Some(constant), Some(bound)) if constant != bound => {
                let name = def.name.clone();
                return Err(EvalError::ConflictingDim { name, constant, bound });
            }
            (Some(constant), _) => {
                resolved.insert(def.name.clone(), constant);
            }
            (None, Some(value)) if value <= 0 => {
                let (dim, bindings) = (def.name.clone(), String::new());
                return Err(EvalError::NonPositiveDim { dim, value, bindings });
            }
            (None, _) => {}
        }
    }
    Ok(resolved)
}
