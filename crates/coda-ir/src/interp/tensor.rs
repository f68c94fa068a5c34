//! [`HostTensor`]: a row-major two-axis array of `f64` with a storage dtype.

use super::error::EvalError;
use crate::ty::DType;

/// A dense row-major `[rows, cols]` tensor on the host.
///
/// Values are `f64` whatever the dtype: `i32` values are held exactly,
/// `bool` values are `1.0`/`0.0`, and 16-bit floats are held as the `f64`
/// they denote. The dtype says what the data is stored as.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Storage type.
    pub dtype: DType,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// `rows * cols` values, row-major.
    pub data: Vec<f64>,
}

impl HostTensor {
    /// A tensor, checking that `data` has `rows * cols` elements and, for
    /// `i32`, that every element is an integer in the `i32` range.
    pub fn new(dtype: DType, rows: usize, cols: usize, data: Vec<f64>) -> Result<Self, EvalError> {
        let expected = rows as u128 * cols as u128;
        if data.len() as u128 != expected {
            return Err(EvalError::DataLength { rows, cols, expected, len: data.len() });
        }
        let tensor = HostTensor { dtype, rows, cols, data };
        if dtype == DType::I32 {
            tensor.check_integers("an i32 tensor")?;
        }
        Ok(tensor)
    }

    /// A tensor whose element `(r, c)` is `f(r, c)`.
    pub fn from_fn(
        dtype: DType,
        rows: usize,
        cols: usize,
        mut f: impl FnMut(usize, usize) -> f64,
    ) -> Result<Self, EvalError> {
        let mut data = Vec::new();
        for r in 0..rows {
            for c in 0..cols {
                data.push(f(r, c));
            }
        }
        HostTensor::new(dtype, rows, cols, data)
    }

    /// A `[1, 1]` tensor.
    pub fn scalar(dtype: DType, value: f64) -> Self {
        HostTensor { dtype, rows: 1, cols: 1, data: vec![value] }
    }

    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Element `(r, c)`, or NaN when out of range.
    pub fn get(&self, r: usize, c: usize) -> f64 {
        self.try_get(r, c).unwrap_or(f64::NAN)
    }

    /// Element `(r, c)`, if in range.
    pub fn try_get(&self, r: usize, c: usize) -> Option<f64> {
        if r >= self.rows || c >= self.cols {
            return None;
        }
        self.data.get(r.checked_mul(self.cols)?.checked_add(c)?).copied()
    }

    /// Row `r`, if in range.
    pub fn row(&self, r: usize) -> Option<&[f64]> {
        let start = r.checked_mul(self.cols)?;
        self.data.get(start..start.checked_add(self.cols)?)
    }

    /// Whether `data` really has `rows * cols` elements.
    pub(crate) fn is_consistent(&self) -> bool {
        self.data.len() as u128 == self.rows as u128 * self.cols as u128
    }

    /// Fails on the first element that is not an integer in the `i32` range;
    /// `tensor` names the tensor in the error.
    pub(crate) fn check_integers(&self, tensor: &str) -> Result<(), EvalError> {
        let bad = self.data.iter().position(|&x| !is_i32(x));
        match bad {
            None => Ok(()),
            Some(index) => Err(EvalError::NotInteger {
                tensor: tensor.to_string(),
                index,
                value: self.data.get(index).copied().unwrap_or(f64::NAN),
            }),
        }
    }
}

/// Whether `x` is an integer that an `i32` can hold.
fn is_i32(x: f64) -> bool {
    x.fract() == 0.0 && x >= f64::from(i32::MIN) && x <= f64::from(i32::MAX)
}
