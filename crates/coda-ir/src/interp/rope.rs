//! Rotary embeddings: the per-column frequency and sign tables and the
//! partner permutation of a [`RopeSpec`].

use super::bind::{eval_dim, DimBindings};
use super::error::EvalError;
use crate::inst::{RopeSpec, RopeStyle, RopeTable};

/// A [`RopeSpec`] with its dims evaluated.
pub(super) struct Rope {
    head_dim: i64,
    rotary_dim: i64,
    base: f64,
    start: i64,
    end: i64,
    style: RopeStyle,
}

/// What a rope says about one column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RopeColumn {
    /// `base^(-2i/rd)` (`rd` the rotary width), or 0 where nothing turns.
    pub(super) freq: f64,
    /// -1 (first member of a pair), +1 (second) or 0 (outside the range).
    pub(super) sign: f64,
    /// The other member of the pair, or the column itself outside the range.
    pub(super) partner: i64,
}

/// Evaluates the spec's dims; the head dim must be positive and even.
pub(super) fn bind_rope(spec: &RopeSpec, dims: &DimBindings, what: &str) -> Result<Rope, EvalError> {
    if spec.head_dim <= 0 || spec.head_dim % 2 != 0 {
        let message = format!("rope head_dim {} is not a positive even number", spec.head_dim);
        return Err(EvalError::BadRope { what: what.to_string(), message });
    }
    if spec.rotary_dim <= 0 || spec.rotary_dim % 2 != 0 || spec.rotary_dim > spec.head_dim {
        let message = format!("rope rotary_dim {} is not a positive even number up to the head_dim", spec.rotary_dim);
        return Err(EvalError::BadRope { what: what.to_string(), message });
    }
    Ok(Rope {
        head_dim: spec.head_dim,
        rotary_dim: spec.rotary_dim,
        base: spec.base,
        start: eval_dim(&spec.start, dims)?,
        end: eval_dim(&spec.end, dims)?,
        style: spec.style,
    })
}

impl Rope {
    /// Frequency, sign and partner of column `n`.
    pub(super) fn column(&self, n: i64) -> RopeColumn {
        if n < self.start || n >= self.end {
            return RopeColumn { freq: 0.0, sign: 0.0, partner: n };
        }
        let j = (n - self.start) % self.head_dim;
        if j >= self.rotary_dim {
            return RopeColumn { freq: 0.0, sign: 0.0, partner: n };
        }
        let half = self.rotary_dim / 2;
        let (pair, first, offset) = match self.style {
            RopeStyle::Half => (j % half, j < half, half),
            RopeStyle::Interleaved => (j / 2, j % 2 == 0, 1),
        };
        let exponent = -((2 * pair) as f64) / self.rotary_dim as f64;
        RopeColumn {
            freq: self.base.powf(exponent),
            sign: if first { -1.0 } else { 1.0 },
            partner: if first { n + offset } else { n - offset },
        }
    }

    /// The `table` row over `cols` columns.
    pub(super) fn table(&self, table: RopeTable, cols: usize) -> Vec<f64> {
        (0..cols)
            .map(|n| {
                let column = self.column(n as i64);
                match table {
                    RopeTable::Freq => column.freq,
                    RopeTable::Sign => column.sign,
                }
            })
            .collect()
    }

    /// The partner of every column of a `cols`-wide tensor; fails when a
    /// partner is outside `0..cols`.
    pub(super) fn partners(&self, cols: usize, what: &str) -> Result<Vec<usize>, EvalError> {
        (0..cols)
            .map(|n| {
                let partner = self.column(n as i64).partner;
                usize::try_from(partner).ok().filter(|&p| p < cols).ok_or_else(|| {
                    let message = format!(
                        "rope pairs column {n} with column {partner}, outside 0..{cols} \
                         (rotated range {}..{}, head_dim {})",
                        self.start, self.end, self.head_dim
                    );
                    EvalError::BadRope { what: what.to_string(), message }
                })
            })
            .collect()
    }
}
