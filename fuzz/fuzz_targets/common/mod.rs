//! What the fuzz targets share: which blocks are small enough to evaluate
//! (included with `#[path]` by each target, which is its own crate).

use coda::ir::interp::bind_shape;
use coda::ir::{Block, Inst};
use coda::DimBindings;

/// The value every symbolic dimension is bound to.
pub const SMALL_DIM: i64 = 3;
/// The most elements one parameter or IR value may have for the block to be evaluated.
const MAX_VALUE_ELEMENTS: u128 = 1 << 20;
/// The most elements all IR values together may have.
const MAX_TOTAL_ELEMENTS: u128 = 1 << 23;
/// The most multiply-adds all matmuls together may need.
const MAX_MATMUL_MACS: u128 = 1 << 24;

/// Every symbolic dim of `block` bound to [`SMALL_DIM`].
pub fn small_dims(block: &Block) -> DimBindings {
    block.symbolic_dims().map(|name| (name.to_string(), SMALL_DIM)).collect()
}

/// Whether every parameter and value of `block` binds to a small shape under `dims`.
pub fn small_enough(block: &Block, dims: &DimBindings) -> bool {
    let elements = |shape| match bind_shape(shape, dims) {
        Ok((rows, cols)) => Some(rows as u128 * cols as u128),
        Err(_) => None,
    };
    for param in &block.params {
        match elements(&param.shape) {
            Some(n) if n <= MAX_VALUE_ELEMENTS => {}
            _ => return false,
        }
    }
    let mut total: u128 = 0;
    let mut macs: u128 = 0;
    for (value, inst) in block.insts.iter() {
        let Some(n) = elements(&block.ty(value).shape) else {
            return false;
        };
        if n > MAX_VALUE_ELEMENTS {
            return false;
        }
        total += n;
        if let Inst::MatMul { lhs, lhs_transposed, .. } = inst {
            let lhs_shape = &block.ty(*lhs).shape;
            let inner = if *lhs_transposed { &lhs_shape.rows } else { &lhs_shape.cols };
            let k = match inner.eval(&|name| dims.get(name).copied()) {
                Ok(k) if k > 0 => k as u128,
                _ => return false,
            };
            macs += n * k;
        }
    }
    total <= MAX_TOTAL_ELEMENTS && macs <= MAX_MATMUL_MACS
}
