//! The matrix product: operands optionally rounded to the 16-bit operand
//! type, every dot product summed in `f64` in increasing `k` order.
//!
//! Blocks of columns of the result are computed on several threads when the
//! product is large; each element is still one sequential sum, so the result
//! does not depend on the thread count.

use super::layout::transpose;
use super::parallel::fill_chunks;
use super::round::round_slice;
use super::tensor::HostTensor;
use super::EvalError;
use crate::ty::DType;
use std::borrow::Cow;
use std::ops::Range;

/// Below this many multiply-adds a product runs on one thread.
const PARALLEL_THRESHOLD: u128 = 1 << 22;

/// Length of the `k` tiles (2 KiB of each operand row).
const K_TILE: usize = 256;

/// Columns of the result per chunk of work (their operand rows stay cached).
const N_TILE: usize = 64;

/// One operand of a product as a row-major `[outer, k]` array.
struct Operand<'a> {
    data: Cow<'a, [f64]>,
    outer: usize,
    k: usize,
}

/// The elements of scratch copies a product of these operands, with
/// `output` elements, may make: operand copies and the transposed result.
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
    /// The type `lhs` is rounded to first, if any.
    pub(super) round_lhs: Option<DType>,
    /// The type `rhs` is rounded to first, if any.
    pub(super) round_rhs: Option<DType>,
}

/// `op(lhs) @ op(rhs)`, `[M, N]`; `block` names the block in errors.
pub(super) fn matmul(lhs: &HostTensor, rhs: &HostTensor, mode: MatMulMode, block: &str) -> Result<Vec<f64>, EvalError> {
    // The left operand as [M, K]; the right one as [N, K], i.e. op(rhs) transposed.
    let a = operand(lhs, mode.lhs_transposed, mode.round_lhs)?;
    let b = operand(rhs, !mode.rhs_transposed, mode.round_rhs)?;
    if a.k != b.k {
        return Err(shape_error(&a, &b, block));
    }
    Ok(product(&a, &b))
}

/// `t` (or its transpose) as `[outer, k]`, rounded if asked.
fn operand(t: &HostTensor, transposed: bool, round_to: Option<DType>) -> Result<Operand<'_>, EvalError> {
    let (mut data, outer, k) = if transposed {
        (Cow::Owned(transpose(t)), t.cols, t.rows)
    } else {
        (Cow::Borrowed(t.data.as_slice()), t.rows, t.cols)
    };
    if let Some(dtype) = round_to {
        round_slice(data.to_mut(), dtype);
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
///
/// The result is built transposed, `N_TILE` columns (of `M` values each) at
/// a time, the chunks spread over the cores, then transposed back.
fn product(a: &Operand<'_>, b: &Operand<'_>) -> Vec<f64> {
    let (m, n) = (a.outer, b.outer);
    let work = m as u128 * n as u128 * a.k as u128;
    let cols_per_chunk = if work < PARALLEL_THRESHOLD { n } else { N_TILE };
    let chunk_len = cols_per_chunk.max(1).saturating_mul(m.max(1));
    let mut transposed = vec![0.0; m.saturating_mul(n)];
    fill_chunks(&mut transposed, chunk_len, |index, chunk| {
        columns_into(a, b, index.saturating_mul(cols_per_chunk), chunk);
    });
    let transposed = HostTensor { dtype: DType::F32, rows: n, cols: m, data: transposed };
    transpose(&transposed)
}

/// Fills `chunk` with columns `first..` of `a @ b^T`, each column's `M`
/// values contiguous.
///
/// The loop over `k` is tiled for the caches; each element's partial sum
/// stays in `chunk` between tiles, so it is still one sequential sum in
/// increasing `k`.
fn columns_into(a: &Operand<'_>, b: &Operand<'_>, first: usize, chunk: &mut [f64]) {
    let m = a.outer.max(1);
    let width = chunk.len() / m;
    for k_first in (0..a.k).step_by(K_TILE) {
        let ks = k_first..(k_first + K_TILE).min(a.k);
        for i in 0..a.outer {
            let x = row_part(a, i, &ks);
            let mut j = 0;
            while j < width {
                let group = (width - j).min(4);
                let at = |d: usize| (j + d) * m + i;
                let mut sums = [0, 1, 2, 3].map(|d| chunk.get(at(d)).copied().unwrap_or(0.0));
                if group == 4 {
                    let rows = [0, 1, 2, 3].map(|d| row_part(b, first + j + d, &ks));
                    add_dot4(x, rows, &mut sums);
                } else {
                    sums[0] = add_dot(sums[0], x, row_part(b, first + j, &ks));
                }
                let step = if group == 4 { 4 } else { 1 };
                for (d, sum) in sums.into_iter().enumerate().take(step) {
                    if let Some(slot) = chunk.get_mut(at(d)) {
                        *slot = sum;
                    }
                }
                j += step;
            }
        }
    }
}

/// Columns `ks` of row `i` of an operand.
fn row_part<'o>(t: &'o Operand<'_>, i: usize, ks: &Range<usize>) -> &'o [f64] {
    let start = i.saturating_mul(t.k);
    t.data.get(start + ks.start..start + ks.end).unwrap_or_default()
}

/// `sums[d] += x . y[d]` for four rows, each in increasing `k` exactly as
/// [`add_dot`] (four independent chains run faster).
fn add_dot4(x: &[f64], [y0, y1, y2, y3]: [&[f64]; 4], sums: &mut [f64; 4]) {
    let [mut s0, mut s1, mut s2, mut s3] = *sums;
    for ((((&p, &q0), &q1), &q2), &q3) in x.iter().zip(y0).zip(y1).zip(y2).zip(y3) {
        s0 += p * q0;
        s1 += p * q1;
        s2 += p * q2;
        s3 += p * q3;
    }
    *sums = [s0, s1, s2, s3];
}

/// `start + sum_k x[k] y[k]`, in increasing `k`.
fn add_dot(start: f64, x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).fold(start, |acc, (p, q)| acc + p * q)
}
