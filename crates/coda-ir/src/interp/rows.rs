//! Evaluating a block on a subset of its token rows.
//!
//! Checking a GPU result at a large shape against the f64 interpreter would
//! cost as much CPU work as the whole GEMM chain; most blocks, though, treat
//! every row (token) independently. For such a *row-local* block, evaluating
//! the chosen rows alone gives exactly the values the full evaluation gives
//! on those rows. A block is row-local in a symbolic dim `T` when no
//! instruction mixes rows: no reduction over rows, no transpose of a value
//! with `T` rows or columns, no matmul contracting over `T`, and no use of
//! `T`'s value (as `mean` over rows would).

use super::{eval, DimBindings, EvalError, EvalOptions, HostTensor};
use crate::block::Block;
use crate::dim::Dim;
use crate::inst::{Axis, Inst};
use std::collections::BTreeMap;

/// The symbolic dim that indexes the rows of every output, when the block is row-local in it.
pub fn row_local_dim(block: &Block) -> Option<String> {
    let first = block.outputs.first()?;
    let rows = &first.tensor.shape.rows;
    let names = rows.symbols();
    let [name] = names.as_slice() else { return None };
    if *rows != Dim::symbol(name) {
        return None;
    }
    let token = Dim::symbol(name);
    let every_output_has_token_rows = block.outputs.iter().all(|o| o.tensor.shape.rows == token);
    let mixes_rows = block.insts.iter().any(|(value, inst)| mixes_rows(block, value, inst, &token));
    (every_output_has_token_rows && !mixes_rows).then(|| name.clone())
}

fn mixes_rows(block: &Block, value: crate::inst::Value, inst: &Inst, token: &Dim) -> bool {
    let ty = |v: crate::inst::Value| &block.ty(v).shape;
    let mentions = |d: &Dim| !d.symbols().is_empty() && d.symbols().iter().any(|s| token.symbols().contains(s));
    match inst {
        Inst::Reduce { axis: Axis::Rows, arg, .. } => ty(*arg).rows == *token || mentions(&ty(*arg).rows),
        // Turning a length-T vector between its two orientations keeps rows apart.
        Inst::Transpose { arg } => {
            let a = ty(*arg);
            let vector = a.rows.is_one() || a.cols.is_one();
            !vector && (mentions(&a.rows) || mentions(&a.cols))
        }
        Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, .. } => {
            let inner = if *lhs_transposed { &ty(*lhs).rows } else { &ty(*lhs).cols };
            let rhs_inner = if *rhs_transposed { &ty(*rhs).cols } else { &ty(*rhs).rows };
            mentions(inner) || mentions(rhs_inner) || mentions(&block.ty(value).shape.cols)
        }
        Inst::DimValue(d) => mentions(d),
        Inst::Param(_) | Inst::RopeTable { .. } => false,
        _ => {
            let shape = &block.ty(value).shape;
            !shape.rows.is_one() && mentions(&shape.cols)
        }
    }
}

/// Evaluates `block` on the listed rows only (in the given order), or `None`
/// when the block is not row-local. Outputs have one row per listed row.
pub fn eval_rows(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
    options: &EvalOptions,
    rows: &[usize],
) -> Option<Result<BTreeMap<String, HostTensor>, EvalError>> {
    let name = row_local_dim(block)?;
    let token = Dim::symbol(&name);
    let mut sliced = BTreeMap::new();
    let accumulated = block.outputs.iter().filter(|o| o.accumulate).map(|o| &o.tensor);
    for tensor in block.params.iter().chain(accumulated) {
        let Some(input) = inputs.get(&tensor.name) else { continue };
        let value = if tensor.shape.rows == token {
            select_rows(input, rows)
        } else if tensor.shape.rows.is_one() && tensor.shape.cols == token {
            // A length-T vector given flat: pick its entries.
            let picked = rows.iter().map(|&r| input.data.get(r).copied().unwrap_or(f64::NAN)).collect();
            HostTensor::new(input.dtype, 1, rows.len(), picked)
        } else {
            Ok(input.clone())
        };
        match value {
            Ok(v) => sliced.insert(tensor.name.clone(), v),
            Err(e) => return Some(Err(e)),
        };
    }
    let mut dims = dims.clone();
    dims.insert(name, i64::try_from(rows.len()).unwrap_or(i64::MAX));
    Some(eval(block, &dims, &sliced, options))
}

fn select_rows(input: &HostTensor, rows: &[usize]) -> Result<HostTensor, EvalError> {
    let mut data = Vec::with_capacity(rows.len() * input.cols);
    for &r in rows {
        match input.row(r) {
            Some(row) => data.extend_from_slice(row),
            None => data.extend(std::iter::repeat_n(f64::NAN, input.cols)),
        }
    }
    HostTensor::new(input.dtype, rows.len(), input.cols, data)
}
