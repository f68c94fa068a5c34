//! Shorthands that model code writes, expanded into IR primitives like the
//! rest of the sugar (also in `docs/language.md`):
//!
//! - `square(x) = x · x`
//! - `pow(x, p)` for a literal `p`: an integer `p` as a product of `x`s
//!   (by repeated squaring; a negative `p` its reciprocal), `±0.5` as
//!   `sqrt` / `rsqrt`, any other `p` as `exp(p · log(x))`, so a
//!   fractional power of a negative `x` is NaN, as in `torch.pow`
//! - `clamp(x, min, max) = min(max(x, min), max)`, either bound optional
//! - `softmax(x, axis=-1) = exp(x − logsumexp(x, axis))`
//! - `log_softmax(x, axis=-1) = x − logsumexp(x, axis)`
//!
//! The softmaxes subtract the stable row (or column) `logsumexp`, so they
//! never overflow, and autodiff sees through them like any other sugar.

use crate::args::{kw, literal, match_args, opt, req, Formal};
use crate::block::Lowerer;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Axis, BinaryOp, UnaryOp, Value};
use coda_syntax::ast::Arg;

/// The shorthands' names.
pub(crate) const SHORTHANDS: [&str; 5] = ["square", "pow", "clamp", "softmax", "log_softmax"];

/// The largest integer exponent `pow` writes as products; a larger one is
/// `exp(p · log(x))` like any other.
const MAX_PRODUCT_EXPONENT: f64 = 64.0;

impl Lowerer<'_> {
    /// Expands one shorthand call (`name` is one of [`SHORTHANDS`]).
    pub(crate) fn shorthand(&mut self, name: &str, args: &[Arg], span: Span) -> Option<Value> {
        match name {
            "square" => {
                let m = match_args(name, span, args, &[req("x")], self.diagnostics)?;
                let x = self.lower_expr(m.expr(0)?)?;
                self.binary(BinaryOp::Mul, x, x, m.spans[0], m.spans[0], span)
            }
            "pow" => self.power(args, span),
            "clamp" => self.clamp(args, span),
            _ => self.softmax(name, args, span),
        }
    }

    fn power(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 2] = [req("x"), req("exponent")];
        let m = match_args("pow", span, args, &FORMALS, self.diagnostics)?;
        let Some(p) = m.expr(1).and_then(literal) else {
            self.diagnostics.push(
                Diagnostic::error("E0208", "`pow` needs a number as its exponent")
                    .with_primary(m.spans[1], "expected a literal such as 2 or -0.5")
                    .with_help("for a tensor exponent `e` and a positive `x`, write `exp(e * log(x))`"),
            );
            return None;
        };
        if p == 0.0 {
            self.diagnostics.push(
                Diagnostic::error("E0208", "`pow(x, 0)` is 1 for every `x`")
                    .with_primary(m.spans[1], "a zero exponent")
                    .with_help("write the constant `1.0` instead"),
            );
            return None;
        }
        let x = self.tensor_arg(&m, 0)?;
        if p == 0.5 || p == -0.5 {
            return self.apply(if p > 0.0 { UnaryOp::Sqrt } else { UnaryOp::Rsqrt }, x, span);
        }
        if p.fract() != 0.0 || p.abs() > MAX_PRODUCT_EXPONENT {
            let log = self.apply(UnaryOp::Log, x, span)?;
            let p = self.constant(p, m.spans[1])?;
            let scaled = self.binary(BinaryOp::Mul, p, log, m.spans[1], span, span)?;
            return self.apply(UnaryOp::Exp, scaled, span);
        }
        // x^n by squaring: for each bit of n from the lowest, multiply the
        // result by the current square when the bit is set.
        let (mut n, mut square, mut product) = (p.abs() as u64, x, None);
        while n > 0 {
            if n & 1 == 1 {
                product = Some(match product {
                    None => square,
                    Some(so_far) => self.binary(BinaryOp::Mul, so_far, square, span, span, span)?,
                });
            }
            n >>= 1;
            if n > 0 {
                square = self.binary(BinaryOp::Mul, square, square, span, span, span)?;
            }
        }
        let product = product?;
        if p > 0.0 {
            return Some(product);
        }
        let one = self.constant(1.0, m.spans[1])?;
        self.binary(BinaryOp::Div, one, product, m.spans[1], span, span)
    }

    fn clamp(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 3] = [req("x"), opt("min"), opt("max")];
        let m = match_args("clamp", span, args, &FORMALS, self.diagnostics)?;
        if !m.given(1) && !m.given(2) {
            self.diagnostics.push(
                Diagnostic::error("E0208", "`clamp` needs a bound")
                    .with_primary(span, "neither `min` nor `max` is given")
                    .with_help("write `clamp(x, lo, hi)`, `clamp(x, min=lo)` or `clamp(x, max=hi)`"),
            );
            return None;
        }
        let mut v = self.lower_expr(m.expr(0)?)?;
        let mut at = m.spans[0];
        for (slot, op) in [(1, BinaryOp::Max), (2, BinaryOp::Min)] {
            if m.given(slot) {
                let bound = self.lower_expr(m.expr(slot)?)?;
                v = self.binary(op, v, bound, at, m.spans[slot], span)?;
                at = span;
            }
        }
        Some(v)
    }

    fn softmax(&mut self, name: &str, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 2] = [req("x"), kw("axis")];
        let m = match_args(name, span, args, &FORMALS, self.diagnostics)?;
        let x = self.lower_expr(m.expr(0)?)?;
        self.numeric(x, m.spans[0])?;
        let axis = if m.given(1) { self.axis(&m, 1)? } else { Axis::Cols };
        let lse = self.reduce("logsumexp", x, axis, span)?;
        let log_p = self.binary(BinaryOp::Sub, x, lse, m.spans[0], span, span)?;
        if name == "log_softmax" {
            return Some(log_p);
        }
        self.apply(UnaryOp::Exp, log_p, span)
    }
}
