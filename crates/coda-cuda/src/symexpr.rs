//! Symbolic sizes in the manifest: integer expressions over the block's
//! run-time dimensions, written as text (`M`, `4096`, `2*M + 3`,
//! `ceil(M/128)`, `ceil(333/8)*8`).
//!
//! The code generator builds them from IR [`Dim`]s ([`SymExpr`]) and prints
//! them; a host parses and evaluates them for concrete bindings with
//! [`eval_str`], which lives with the manifest types in `coda-manifest`
//! (its grammar is documented there).

use coda_ir::Dim;
pub use coda_manifest::size::{eval_str, SymError};
use std::collections::BTreeMap;
use std::fmt;

/// A symbolic size: a [`Dim`] polynomial, a ceiling division by a constant,
/// or a product of those.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SymExpr {
    /// A polynomial over run-time dims.
    Dim(Dim),
    /// `ceil(e / d)` for a positive constant `d`.
    CeilDiv(Box<SymExpr>, i64),
    /// `a * b`.
    Mul(Box<SymExpr>, Box<SymExpr>),
}

impl SymExpr {
    /// A constant.
    pub fn constant(value: i64) -> SymExpr {
        SymExpr::Dim(Dim::constant(value))
    }

    /// The value when the expression is a constant.
    pub fn as_const(&self) -> Option<i64> {
        match self {
            SymExpr::Dim(d) => d.as_const(),
            SymExpr::CeilDiv(e, d) => {
                let v = e.as_const()?;
                (*d > 0).then(|| v.div_euclid(*d) + i64::from(v.rem_euclid(*d) != 0))
            }
            SymExpr::Mul(a, b) => a.as_const()?.checked_mul(b.as_const()?),
        }
    }

    /// `ceil(self / d)`, folded when constant.
    pub fn ceil_div(self, d: i64) -> SymExpr {
        if d == 1 {
            return self;
        }
        let e = SymExpr::CeilDiv(Box::new(self), d);
        match e.as_const() {
            Some(v) => SymExpr::constant(v),
            None => e,
        }
    }

    /// `self * other`, folded when constant.
    pub fn times(self, other: SymExpr) -> SymExpr {
        if let (SymExpr::Dim(a), SymExpr::Dim(b)) = (&self, &other) {
            if let Ok(p) = a.mul(b) {
                return SymExpr::Dim(p);
            }
        }
        let e = SymExpr::Mul(Box::new(self), Box::new(other));
        match e.as_const() {
            Some(v) => SymExpr::constant(v),
            None => e,
        }
    }

    /// `self` rounded up to a multiple of `d`.
    pub fn round_up(self, d: i64) -> SymExpr {
        self.ceil_div(d).times(SymExpr::constant(d))
    }

    /// The value under `bindings`.
    pub fn eval(&self, bindings: &BTreeMap<String, i64>) -> Result<i64, SymError> {
        eval_str(&self.to_string(), bindings)
    }
}

impl From<Dim> for SymExpr {
    fn from(d: Dim) -> SymExpr {
        SymExpr::Dim(d)
    }
}

impl From<&Dim> for SymExpr {
    fn from(d: &Dim) -> SymExpr {
        SymExpr::Dim(d.clone())
    }
}

impl SymExpr {
    /// Whether the printed form needs parentheses as an operand of `*` or `/`.
    fn is_compound(&self) -> bool {
        match self {
            SymExpr::Dim(d) => {
                let text = d.to_string();
                text.contains(' ') || text.starts_with('-')
            }
            SymExpr::CeilDiv(..) | SymExpr::Mul(..) => false,
        }
    }

    /// The printed form, parenthesized when compound.
    fn operand_text(&self) -> String {
        if self.is_compound() {
            format!("({self})")
        } else {
            self.to_string()
        }
    }
}

impl fmt::Display for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymExpr::Dim(d) => write!(f, "{d}"),
            SymExpr::CeilDiv(e, d) => write!(f, "ceil({}/{d})", e.operand_text()),
            SymExpr::Mul(a, b) => write!(f, "{}*{}", a.operand_text(), b.operand_text()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn prints_and_evaluates() -> Result<(), SymError> {
        let m = SymExpr::Dim(Dim::symbol("M"));
        let tiles = m.clone().ceil_div(128);
        assert_eq!(tiles.to_string(), "ceil(M/128)");
        let grid = tiles.times(SymExpr::constant(4096).ceil_div(128));
        assert_eq!(grid.to_string(), "ceil(M/128)*32");
        assert_eq!(grid.eval(&bind(&[("M", 1000)]))?, 8 * 32);
        assert_eq!(SymExpr::constant(333).round_up(8).to_string(), "336");
        let two_m = Dim::symbol("M").mul(&Dim::constant(2)).and_then(|d| d.add(&Dim::constant(3)));
        let two_m = SymExpr::Dim(two_m.map_err(|_| SymError::Arithmetic { text: String::new() })?);
        let padded = two_m.round_up(8);
        assert_eq!(padded.to_string(), "ceil((2*M + 3)/8)*8");
        assert_eq!(padded.eval(&bind(&[("M", 3)]))?, 16);
        Ok(())
    }

    #[test]
    fn rejects_bad_text() {
        let b = bind(&[("M", 4)]);
        assert!(eval_str("M +", &b).is_err());
        assert!(eval_str("ceil(M/0)", &b).is_err());
        assert!(matches!(eval_str("N", &b), Err(SymError::Unbound { .. })));
        assert!(eval_str("9223372036854775807 + 1", &b).is_err());
        assert_eq!(eval_str(" ( M - 1 ) * 2 ", &b), Ok(6));
    }
}
