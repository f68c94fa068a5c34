//! Instructions that only move values: transpose, broadcast, column slices,
//! concatenation, interleaving and column gathers.
//!
//! Operands are consistent tensors (`data.len() == rows * cols`); a shape
//! that breaks an instruction's typing rule is reported as a message, which
//! the caller turns into [`EvalError::Malformed`](super::EvalError::Malformed).

use super::tensor::HostTensor;

/// `arg` with its axes swapped.
pub(super) fn transpose(arg: &HostTensor) -> Vec<f64> {
    let mut out = Vec::with_capacity(arg.data.len());
    for c in 0..arg.cols {
        out.extend(arg.data.iter().skip(c).step_by(arg.cols.max(1)).take(arg.rows));
    }
    out
}

/// `arg` widened to `[rows, cols]` along its axes of length 1.
pub(super) fn broadcast(arg: &HostTensor, rows: usize, cols: usize) -> Result<Vec<f64>, String> {
    let fits = |from: usize, to: usize| from == to || from == 1;
    if !fits(arg.rows, rows) || !fits(arg.cols, cols) {
        return Err(format!("cannot broadcast [{}, {}] to [{rows}, {cols}]", arg.rows, arg.cols));
    }
    let mut out = Vec::with_capacity(rows.saturating_mul(cols));
    for r in 0..rows {
        let source = arg.row(if arg.rows == 1 { 0 } else { r }).unwrap_or_default();
        match source {
            [single] if cols != 1 => out.extend(std::iter::repeat_n(*single, cols)),
            _ => out.extend_from_slice(source),
        }
    }
    Ok(out)
}

/// The columns `start + k * step` for `k < len`, or `None` when one of them
/// is outside `0..cols`.
pub(super) fn slice_columns(start: i64, len: usize, step: i64, cols: usize) -> Option<Vec<usize>> {
    let last = i128::from(start) + (len as i128 - 1) * i128::from(step);
    if start < 0 || step < 1 || last >= cols as i128 {
        return None;
    }
    // start >= 0 and every column is below `cols`, so the casts are exact.
    Some((0..len).map(|k| start as usize + k * step as usize).collect())
}

/// `out[:, n] = arg[:, columns[n]]`; fails on a column outside `arg`.
pub(super) fn gather_cols(arg: &HostTensor, columns: &[usize]) -> Result<Vec<f64>, String> {
    if let Some(bad) = columns.iter().find(|&&c| c >= arg.cols) {
        return Err(format!("column {bad} of a tensor with {} columns", arg.cols));
    }
    let mut out = Vec::with_capacity(arg.rows.saturating_mul(columns.len()));
    for r in 0..arg.rows {
        let row = arg.row(r).unwrap_or_default();
        out.extend(columns.iter().map(|&c| row.get(c).copied().unwrap_or(f64::NAN)));
    }
    Ok(out)
}

/// `out[r, :] = arg[rows[r], :]`; fails on a row outside `arg`.
pub(super) fn gather_rows(arg: &HostTensor, rows: &[usize]) -> Result<Vec<f64>, String> {
    let mut out = Vec::with_capacity(rows.len().saturating_mul(arg.cols));
    for &r in rows {
        let row = arg.row(r).ok_or_else(|| format!("row {r} of a tensor with {} rows", arg.rows))?;
        out.extend_from_slice(row);
    }
    Ok(out)
}

/// The parts side by side; all must have `rows` rows.
pub(super) fn concat_cols(parts: &[&HostTensor], rows: usize) -> Result<Vec<f64>, String> {
    if let Some(bad) = parts.iter().find(|p| p.rows != rows) {
        return Err(format!("concatenating a part of {} rows into {rows} rows", bad.rows));
    }
    let width: usize = parts.iter().map(|p| p.cols).sum();
    let mut out = Vec::with_capacity(rows.saturating_mul(width));
    for r in 0..rows {
        for part in parts {
            out.extend_from_slice(part.row(r).unwrap_or_default());
        }
    }
    Ok(out)
}

/// The parts' rows one after another (equal column counts).
pub(super) fn stack_rows(parts: &[&HostTensor], cols: usize) -> Result<Vec<f64>, String> {
    if let Some(bad) = parts.iter().find(|p| p.cols != cols) {
        return Err(format!("stacking a part of {} columns into {cols} columns", bad.cols));
    }
    Ok(parts.iter().flat_map(|p| p.data.iter().copied()).collect())
}

/// `out[:, 2j] = even[:, j]`, `out[:, 2j+1] = odd[:, j]`.
pub(super) fn interleave(even: &HostTensor, odd: &HostTensor) -> Result<Vec<f64>, String> {
    if even.shape() != odd.shape() {
        let (e, o) = (even.shape(), odd.shape());
        return Err(format!("interleaving {e:?} with {o:?}"));
    }
    let mut out = Vec::with_capacity(even.data.len().saturating_mul(2));
    for (a, b) in even.data.iter().zip(&odd.data) {
        out.push(*a);
        out.push(*b);
    }
    Ok(out)
}
