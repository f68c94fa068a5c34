//! Symbolic dimensions: integer polynomials over run-time dimension names.
//!
//! A [`Dim`] is kept in a normal form (a sum of monomials with non-zero
//! coefficients, ordered), so two dims are equal exactly when their normal
//! forms are. Named constants (`dim D = 4096`) are substituted by the checker,
//! so only symbolic dims (`dim M`) remain as variables. Division is allowed
//! only when it is exact by a constant (`HD/2`), which keeps the normal form.

use std::collections::BTreeMap;
use std::fmt;

/// The most monomials a dim may have; bounds the cost of dim arithmetic.
pub const MAX_TERMS: usize = 64;
/// The highest degree of a monomial.
pub const MAX_DEGREE: usize = 8;

/// A symbolic, non-negative-valued integer expression in normal form.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Dim {
    /// Monomial (sorted variable names, with repetition) → coefficient; no zero coefficients.
    terms: BTreeMap<Vec<String>, i64>,
}

/// Why a dimension computation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DimError {
    /// A constant overflowed 64 bits.
    #[error("dimension arithmetic overflows 64-bit integers")]
    Overflow,
    /// `a / b` where b is not a constant or does not divide a.
    #[error("`{0}` is not exactly divisible by `{1}`")]
    Inexact(String, String),
    /// A product with too many terms or too high a degree to be a sensible shape.
    #[error("dimension expression is too complex (more than {MAX_TERMS} terms or degree above {MAX_DEGREE})")]
    TooComplex,
    /// A symbolic dim without a binding.
    #[error("dimension `{0}` is not bound")]
    Unbound(String),
}

impl Dim {
    /// A constant.
    pub fn constant(value: i64) -> Dim {
        let mut terms = BTreeMap::new();
        if value != 0 {
            terms.insert(Vec::new(), value);
        }
        Dim { terms }
    }

    /// A symbolic dimension bound at run time.
    pub fn symbol(name: &str) -> Dim {
        Dim { terms: BTreeMap::from([(vec![name.to_string()], 1)]) }
    }

    /// The monomials with their coefficients: each a sorted list of
    /// variable names (a name repeated for a power; empty for the constant
    /// term) and a non-zero coefficient, in normal-form order.
    pub fn monomials(&self) -> impl Iterator<Item = (&[String], i64)> {
        self.terms.iter().map(|(mono, &coeff)| (mono.as_slice(), coeff))
    }

    /// The value, when the dim is a constant.
    pub fn as_const(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    /// Whether this dim is the constant 1 (a broadcastable axis).
    pub fn is_one(&self) -> bool {
        self.as_const() == Some(1)
    }

    /// Symbolic names this dim mentions, sorted and deduplicated.
    pub fn symbols(&self) -> Vec<String> {
        let mut names: Vec<String> = self.terms.keys().flatten().cloned().collect();
        names.sort();
        names.dedup();
        names
    }

    /// `self + other`.
    pub fn add(&self, other: &Dim) -> Result<Dim, DimError> {
        let mut terms = self.terms.clone();
        for (mono, coeff) in &other.terms {
            let entry = terms.entry(mono.clone()).or_insert(0);
            *entry = entry.checked_add(*coeff).ok_or(DimError::Overflow)?;
        }
        terms.retain(|_, c| *c != 0);
        Ok(Dim { terms })
    }

    /// `self - other`.
    pub fn sub(&self, other: &Dim) -> Result<Dim, DimError> {
        self.add(&other.scale(-1)?)
    }

    fn scale(&self, factor: i64) -> Result<Dim, DimError> {
        let mut terms = BTreeMap::new();
        for (mono, coeff) in &self.terms {
            let c = coeff.checked_mul(factor).ok_or(DimError::Overflow)?;
            if c != 0 {
                terms.insert(mono.clone(), c);
            }
        }
        Ok(Dim { terms })
    }

    /// `self * other`.
    pub fn mul(&self, other: &Dim) -> Result<Dim, DimError> {
        let mut result = Dim::default();
        for (m1, c1) in &self.terms {
            for (m2, c2) in &other.terms {
                if m1.len() + m2.len() > MAX_DEGREE {
                    return Err(DimError::TooComplex);
                }
                let mut mono: Vec<String> = m1.iter().chain(m2).cloned().collect();
                mono.sort();
                let coeff = c1.checked_mul(*c2).ok_or(DimError::Overflow)?;
                result = result.add(&Dim { terms: BTreeMap::from([(mono, coeff)]) })?;
                if result.terms.len() > MAX_TERMS {
                    return Err(DimError::TooComplex);
                }
            }
        }
        Ok(result)
    }

    /// `self / other`, only when `other` is a non-zero constant dividing every coefficient.
    pub fn div_exact(&self, other: &Dim) -> Result<Dim, DimError> {
        let inexact = || DimError::Inexact(self.to_string(), other.to_string());
        let divisor = other.as_const().filter(|d| *d != 0).ok_or_else(inexact)?;
        if self.terms.values().any(|c| c % divisor != 0) {
            return Err(inexact());
        }
        let terms = self.terms.iter().map(|(m, c)| (m.clone(), c / divisor)).collect();
        Ok(Dim { terms })
    }

    /// The value under run-time bindings of the symbolic names.
    pub fn eval(&self, bindings: &dyn Fn(&str) -> Option<i64>) -> Result<i64, DimError> {
        let mut total: i64 = 0;
        for (mono, coeff) in &self.terms {
            let mut term = *coeff;
            for name in mono {
                let value = bindings(name).ok_or_else(|| DimError::Unbound(name.clone()))?;
                term = term.checked_mul(value).ok_or(DimError::Overflow)?;
            }
            total = total.checked_add(term).ok_or(DimError::Overflow)?;
        }
        Ok(total)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return write!(f, "0");
        }
        // Highest-degree monomials first, constants last: `2*M + 1`.
        let mut terms: Vec<_> = self.terms.iter().collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        for (i, (mono, coeff)) in terms.into_iter().enumerate() {
            let magnitude = coeff.unsigned_abs();
            if i == 0 {
                if *coeff < 0 {
                    write!(f, "-")?;
                }
            } else {
                write!(f, " {} ", if *coeff < 0 { "-" } else { "+" })?;
            }
            let names = mono.join("*");
            match (mono.is_empty(), magnitude) {
                (true, m) => write!(f, "{m}")?,
                (false, 1) => write!(f, "{names}")?,
                (false, m) => write!(f, "{m}*{names}")?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dim({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_form_makes_equal_expressions_equal() -> Result<(), DimError> {
        let m = Dim::symbol("M");
        let two = Dim::constant(2);
        let a = m.mul(&two)?.add(&Dim::constant(3))?;
        let b = Dim::constant(3).add(&m)?.add(&m)?;
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "2*M + 3");
        Ok(())
    }

    #[test]
    fn division_must_be_exact() {
        let hd = Dim::constant(128);
        assert_eq!(hd.div_exact(&Dim::constant(2)), Ok(Dim::constant(64)));
        assert!(Dim::symbol("M").div_exact(&Dim::constant(2)).is_err());
        assert!(hd.div_exact(&Dim::constant(0)).is_err());
    }

    #[test]
    fn polynomial_blowup_is_an_error() -> Result<(), DimError> {
        let mut p = Dim::default();
        for name in ["A", "B", "C", "D", "E", "F", "G", "H", "I", "J"] {
            p = p.add(&Dim::symbol(name))?;
        }
        let mut q = p.clone();
        let mut failed = false;
        for _ in 0..7 {
            match q.mul(&p) {
                Ok(next) => q = next,
                Err(e) => {
                    assert_eq!(e, DimError::TooComplex);
                    failed = true;
                    break;
                }
            }
        }
        assert!(failed, "a 10-variable polynomial to the 8th power was accepted");
        Ok(())
    }

    #[test]
    fn overflow_is_an_error() {
        let big = Dim::constant(i64::MAX);
        assert_eq!(big.add(&Dim::constant(1)), Err(DimError::Overflow));
    }
}
