//! Shorthands that model code writes, expanded into IR primitives like the
//! rest of the sugar (also in `docs/language.md`):
//!
//! - `square(x) = x · x`
//! - `clamp(x, min, max) = min(max(x, min), max)`, either bound optional
//! - `softmax(x, axis=-1) = exp(x − logsumexp(x, axis))`
//! - `log_softmax(x, axis=-1) = x − logsumexp(x, axis)`
//!
//! The softmaxes subtract the stable row (or column) `logsumexp`, so they
//! never overflow, and autodiff sees through them like any other sugar.

use crate::args::{kw, match_args, opt, req, Formal};
use crate::block::Lowerer;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Axis, BinaryOp, UnaryOp, Value};
use coda_syntax::ast::Arg;

/// The shorthands' names.
pub(crate) const SHORTHANDS: [&str; 4] = ["square", "clamp", "softmax", "log_softmax"];

impl Lowerer<'_> {
    /// Expands one shorthand call (`name` is one of [`SHORTHANDS`]).
    pub(crate) fn shorthand(&mut self, name: &str, args: &[Arg], span: Span) -> Option<Value> {
        match name {
            "square" => {
                let m = match_args(name, span, args, &[req("x")], self.diagnostics)?;
                let x = self.lower_expr(m.expr(0)?)?;
                self.binary(BinaryOp::Mul, x, x, m.spans[0], m.spans[0], span)
            }
            "clamp" => self.clamp(args, span),
            _ => self.softmax(name, args, span),
        }
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
