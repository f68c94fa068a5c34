//! The matrix product: operands optionally rounded to the 16-bit operand
//! type, every dot product summed in `f64` in increasing `k` order.
//!
//! Blocks of rows of the result are computed on several threads when the
//! product is large; each element is still one sequential sum, so the result
//! does not depend on the thread count.

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

/// The elements of scratch copies a product of these operands, with
/// `output` elements, may make: operand copies and per-thread row blocks.
pub(super) fn scratch_elements(lhs: &HostTensor, rhs: &HostTensor, output: u128) -> u128 {
    lhs.data.len() as u128 + rhs.data.len() as u128 + output
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
    let work = a.outer as u128 * b.outer as u128 * a.k as u128;
    let threads = if work < PARALLEL_THRESHOLD {
        1
    } else {
        std::thread::available_parallelism().map_or(1, usize::from)
    };
    if threads == 1 {
        return rows_of(a, b, 0, a.outer);
    }
    let rows_per_chunk = a.outer.div_ceil(threads).max(1);
    let chunks: Vec<(usize, usize)> = (0..a.outer)
        .step_by(rows_per_chunk)
        .map(|first| (first, (first + rows_per_chunk).min(a.outer)))
        .collect();
    std::thread::scope(|scope| {
        let spawn = |(first, end)| {
            let worker = std::thread::Builder::new();
            (
                first,
                end,
                worker.spawn_scoped(scope, move || rows_of(a, b, first, end)),
            )
        };
        let workers: Vec<_> = chunks.into_iter().map(spawn).collect();
        let mut out = Vec::with_capacity(a.outer.saturating_mul(b.outer));
        for (first, end, worker) in workers {
            // A thread that could not start (or failed) is redone here.
            match worker.map(|handle| handle.join()) {
                Ok(Ok(rows)) => out.extend(rows),
                _ => out.extend(rows_of(a, b, first, end)),
            }
        }
        out
    })
}

/// Rows `first..end` of `a @ b^T`.
fn rows_of(a: &Operand<'_>, b: &Operand<'_>, first: usize, end: usize) -> Vec<f64> {
    let k = a.k.max(1);
    let a_rows = a.data.chunks(k).skip(first).take(end.saturating_sub(first));
    a_rows
        .flat_map(|a_row| b.data.chunks(k).map(move |b_row| dot(a_row, b_row)))
        .collect()
}

/// `sum_k x[k] y[k]`, in increasing `k`.
fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).fold(0.0, |acc, (p, q)| acc + p * q)
}
