//! The matrix product: operands optionally rounded to the 16-bit operand
//! type, every dot product summed in `f64` in increasing `k` order.
//!
//! Rows of the result are computed on several threads when the product is
//! large; each element is still one sequential sum, so the result does not
//! depend on the thread count.

use super::layout::transpose;
use super::round::round_slice;
use super::tensor::HostTensor;
use super::EvalError;
use crate::ty::DType;
use std::borrow::Cow;

/// Below this many multiply-adds a product runs on one thread.
const PARALLEL_THRESHOLD: u128 = 1 << 22;

/// One operand of a product as a row-major `[outer, k]` array.
struct Operand<'a> {
    data: Cow<'a, [f64]>,
    outer: usize,
    k: usize,
}

/// The elements of scratch copies a product of these operands may make.
pub(super) fn scratch_elements(lhs: &HostTensor, rhs: &HostTensor) -> u128 {
    lhs.data.len() as u128 + rhs.data.len() as u128
}

/// How to multiply: the transposes and the operand rounding.
#[derive(Debug, Clone, Copy)]
pub(super) struct MatMulMode {
    /// Whether `lhs` is used transposed.
    pub(super) lhs_transposed: bool,
    /// Whether `rhs` is used transposed.
    pub(super) rhs_transposed: bool,
    /// The type operands are rounded to first, if any.
    pub(super) round_to: Option<DType>,
}

/// `op(lhs) @ op(rhs)`, `[M, N]`; `block` names the block in errors.
pub(super) fn matmul(
    lhs: &HostTensor,
    rhs: &HostTensor,
    mode: MatMulMode,
    block: &str,
) -> Result<Vec<f64>, EvalError> {
    // The left operand as [M, K]; the right one as [N, K], i.e. op(rhs) transposed.
    let a = operand(lhs, mode.lhs_transposed, mode.round_to)?;
    let b = operand(rhs, !mode.rhs_transposed, mode.round_to)?;
    if a.k != b.k {
        return Err(shape_error(&a, &b, block));
    }
    Ok(product(&a, &b))
}

/// `t` (or its transpose) as `[outer, k]`, rounded if asked.
fn operand(
    t: &HostTensor,
    transposed: bool,
    round_to: Option<DType>,
) -> Result<Operand<'_>, EvalError> {
    let (mut data, outer, k) = if transposed {
        (Cow::Owned(transpose(t)), t.cols, t.rows)
    } else {
        (Cow::Borrowed(t.data.as_slice()), t.rows, t.cols)
    };
    if let Some(dtype) = round_to {
        round_slice(data.to_mut(), dtype)?;
    }
    Ok(Operand { data, outer, k })
}

fn shape_error(a: &Operand<'_>, b: &Operand<'_>, block: &str) -> EvalError {
    EvalError::Malformed {
        block: block.to_string(),
        message: format!("matmul of [{}, {}] by [{}, {}]", a.outer, a.k, b.k, b.outer),
    }
}

/// `a @ b^T` for `a: [M, K]`, `b: [N, K]`.
fn product(a: &Operand<'_>, b: &Operand<'_>) -> Vec<f64> {
    let n = b.outer;
    let mut out = vec![0.0; a.outer.saturating_mul(n)];
    let work = a.outer as u128 * n as u128 * a.k as u128;
    let threads = if work < PARALLEL_THRESHOLD {
        1
    } else {
        std::thread::available_parallelism().map_or(1, usize::from)
    };
    if threads == 1 {
        fill_rows(a, b, 0, &mut out);
        return out;
    }
    let rows_per_chunk = a.outer.div_ceil(threads).max(1);
    let chunk_len = rows_per_chunk.saturating_mul(n).max(1);
    std::thread::scope(|scope| {
        for (chunk, out_rows) in out.chunks_mut(chunk_len).enumerate() {
            let first_row = chunk * rows_per_chunk;
            scope.spawn(move || fill_rows(a, b, first_row, out_rows));
        }
    });
    out
}

/// Fills `out` (whole rows of the result starting at `first_row`).
fn fill_rows(a: &Operand<'_>, b: &Operand<'_>, first_row: usize, out: &mut [f64]) {
    let (k, n) = (a.k.max(1), b.outer.max(1));
    let a_rows = a.data.chunks(k).skip(first_row);
    for (a_row, out_row) in a_rows.zip(out.chunks_mut(n)) {
        for (b_row, slot) in b.data.chunks(k).zip(out_row.iter_mut()) {
            *slot = dot(a_row, b_row);
        }
    }
}

/// `sum_k x[k] y[k]`, in increasing `k`.
fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).fold(0.0, |acc, (p, q)| acc + p * q)
}
