//! Elementwise functions, reductions and column gathers, on `f64`.

use super::tensor::HostTensor;
use crate::inst::{Axis, BinaryOp, ColGroups, ReduceOp, UnaryOp};

/// Above this, `softplus(x)` is `x` (the correction is below `e^-20`).
const SOFTPLUS_THRESHOLD: f64 = 20.0;

/// `sqrt(2 / pi)`.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// One unary function at one point.
/// One unary op on one value, with the interpreter's exact semantics.
pub fn unary(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Relu => relu(x),
        UnaryOp::GeluTanh => gelu_tanh(x),
        UnaryOp::GeluErf => gelu_erf(x),
        UnaryOp::Ndtr => ndtr(x),
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Softplus => softplus(x),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Detach => x,
    }
}

/// `1 / (1 + e^-x)` without overflow for large `|x|`.
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `max(x, 0)`, NaN staying NaN.
fn relu(x: f64) -> f64 {
    if x > 0.0 || x.is_nan() {
        x
    } else {
        0.0
    }
}

/// The tanh approximation of GELU.
fn gelu_tanh(x: f64) -> f64 {
    let inner = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    0.5 * x * (1.0 + inner.tanh())
}

/// Exact GELU, `0.5 x (1 + erf(x / sqrt 2)) = x Φ(x)`.
fn gelu_erf(x: f64) -> f64 {
    x * ndtr(x)
}

/// The standard normal distribution function, `Φ(x) = 0.5 erfc(-x / sqrt 2)`
/// (the complement keeps its relative precision far in the lower tail).
fn ndtr(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// `log(1 + e^x)`, stable for large `x`.
fn softplus(x: f64) -> f64 {
    if x > SOFTPLUS_THRESHOLD {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// One binary function at one point; comparisons give `1.0` or `0.0`.
/// One binary op on two values, with the interpreter's exact semantics.
pub fn binary(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Min => minimum(a, b),
        BinaryOp::Max => maximum(a, b),
        BinaryOp::Lt => truth(a < b),
        BinaryOp::Le => truth(a <= b),
        BinaryOp::Gt => truth(a > b),
        BinaryOp::Ge => truth(a >= b),
        BinaryOp::Eq => truth(a == b),
        BinaryOp::Ne => truth(a != b),
    }
}

/// IEEE 754-2019 `minimum`: NaN if either is NaN, and `-0 < +0`.
fn minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a < b || (a == b && a.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// IEEE 754-2019 `maximum`: NaN if either is NaN, and `-0 < +0`.
fn maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a > b || (a == b && a.is_sign_positive()) {
        a
    } else {
        b
    }
}

fn truth(holds: bool) -> f64 {
    if holds {
        1.0
    } else {
        0.0
    }
}

/// Reduces `arg` along `axis`; the caller has checked `arg`'s data length.
pub(super) fn reduce(op: ReduceOp, axis: Axis, arg: &HostTensor) -> Vec<f64> {
    let (rows, cols) = (arg.rows, arg.cols);
    match axis {
        Axis::Cols => arg.data.chunks(cols.max(1)).map(|row| reduce_lane(op, row)).collect(),
        Axis::Rows => (0..cols)
            .map(|c| {
                let lane: Vec<f64> = arg.data.iter().skip(c).step_by(cols.max(1)).take(rows).copied().collect();
                reduce_lane(op, &lane)
            })
            .collect(),
    }
}

/// Reduces each group of columns of each row to one of `groups` columns,
/// the columns of a group in index order.
pub(super) fn group_reduce(op: ReduceOp, groups: ColGroups, arg: &HostTensor, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(arg.rows.saturating_mul(count));
    let mut lane = Vec::new();
    for row in arg.data.chunks(arg.cols.max(1)) {
        for g in 0..count {
            lane.clear();
            match groups {
                ColGroups::Heads(w) => {
                    let w = w as usize;
                    lane.extend(row.iter().skip(g * w).take(w));
                }
                ColGroups::Lanes(w) => lane.extend(row.iter().skip(g).step_by(w as usize)),
            }
            out.push(reduce_lane(op, &lane));
        }
    }
    out
}

/// Reduces one row or column, in index order.
pub(super) fn reduce_lane(op: ReduceOp, lane: &[f64]) -> f64 {
    match op {
        ReduceOp::Sum => lane.iter().fold(0.0, |acc, &x| acc + x),
        ReduceOp::Max => lane_max(lane),
        ReduceOp::LogSumExp => log_sum_exp(lane),
    }
}

/// The maximum, NaN if any element is NaN (`-inf` for an empty lane).
fn lane_max(lane: &[f64]) -> f64 {
    let mut m = f64::NEG_INFINITY;
    for &x in lane {
        if x.is_nan() {
            return x;
        }
        if x > m {
            m = x;
        }
    }
    m
}

/// `m + ln sum exp(x - m)`, `m` the maximum; NaN, `-inf` and `+inf` as documented.
fn log_sum_exp(lane: &[f64]) -> f64 {
    let m = lane_max(lane);
    if !m.is_finite() {
        return m;
    }
    let sum = lane.iter().fold(0.0, |acc, &x| acc + (x - m).exp());
    m + sum.ln()
}

/// `out[r] = arg[r, index[r]]`, or 0 where the index is not an integer in
/// `0..cols`; the caller has checked both data lengths.
pub(super) fn take_cols(arg: &HostTensor, index: &HostTensor) -> Vec<f64> {
    index
        .data
        .iter()
        .enumerate()
        .map(|(r, &i)| match column_index(i, arg.cols) {
            Some(c) => arg.try_get(r, c).unwrap_or(0.0),
            None => 0.0,
        })
        .collect()
}

/// The `k` largest elements of each row, decreasing, NaN above every
/// number and ties to the lower column; or their columns (the kernels'
/// emulator shares this order).
pub fn top_k(arg: &HostTensor, k: usize, indices: bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(arg.rows.saturating_mul(k));
    let mut order: Vec<usize> = Vec::new();
    for row in arg.data.chunks(arg.cols.max(1)) {
        order.clear();
        order.extend(0..row.len());
        order.sort_by(|&a, &b| {
            let (x, y) = (row[a], row[b]);
            match (x.is_nan(), y.is_nan()) {
                (true, false) => std::cmp::Ordering::Less,
                (false, true) => std::cmp::Ordering::Greater,
                (true, true) => a.cmp(&b),
                (false, false) => y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b)),
            }
        });
        out.extend(order.iter().take(k).map(|&c| if indices { c as f64 } else { row[c] }));
    }
    out
}

/// `out[m, :] = table[index[m], :]`, zeros where the index is not an integer
/// in `0..rows`.
pub(super) fn gather_rows(table: &HostTensor, index: &HostTensor) -> Vec<f64> {
    let mut out = Vec::with_capacity(index.data.len().saturating_mul(table.cols));
    for &i in &index.data {
        match column_index(i, table.rows).and_then(|r| table.row(r)) {
            Some(row) => out.extend_from_slice(row),
            None => out.extend(std::iter::repeat_n(0.0, table.cols)),
        }
    }
    out
}

/// `out[v, :] = Σ arg[m, :]` over `index[m] = v` in increasing `m`; rows
/// whose index is not an integer in `0..rows` add nowhere.
pub(super) fn scatter_add_rows(arg: &HostTensor, index: &HostTensor, rows: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows * arg.cols];
    for (m, &i) in index.data.iter().enumerate() {
        let (Some(v), Some(row)) = (column_index(i, rows), arg.row(m)) else { continue };
        for (o, x) in out[v * arg.cols..(v + 1) * arg.cols].iter_mut().zip(row) {
            *o += x;
        }
    }
    out
}

/// `out[r, index[r]] = arg[r]`, 0 elsewhere (nothing where the index is not
/// an integer in `0..cols`); the caller has checked both data lengths.
pub(super) fn scatter_cols(arg: &HostTensor, index: &HostTensor, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; arg.rows * cols];
    for (r, (&x, &i)) in arg.data.iter().zip(&index.data).enumerate() {
        if let Some(c) = column_index(i, cols) {
            out[r * cols + c] = x;
        }
    }
    out
}

/// `i` as a column of a `cols`-wide tensor, if it is one.
fn column_index(i: f64, cols: usize) -> Option<usize> {
    if i.fract() != 0.0 || i < 0.0 || i >= cols as f64 {
        return None;
    }
    // An integer in 0..cols, so the cast is exact.
    Some(i as usize)
}
