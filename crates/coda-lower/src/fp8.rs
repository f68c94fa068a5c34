//! `fp8_linear(x, w, recipe=tensorwise|rowwise)`: `x @ wᵀ` with both
//! operands cast to e4m3 under dynamic scales, as torchao's float8
//! training computes a linear layer. The expansion (also in
//! `docs/language.md`), with every scale taken from detached values so that
//! the backward treats it as a constant:
//!
//! ```text
//! s(t)  = 448 / max(amax(|detach(t)|), 1e-12)   over all of t (tensorwise)
//!                                               or each row of t (rowwise)
//! y     = (e4m3(x · s(x)) @ e4m3(w · s(w))ᵀ) / (s(x) · s(w)ᵀ)
//! ```
//!
//! A row of `w` is an output column of `y`, so `s(w)ᵀ` scales `y`'s
//! columns. The backward reads its gradient in e4m3 too
//! (`coda-grad/src/fp8.rs`).

use crate::args::{kw, match_args, req, Formal};
use crate::block::Lowerer;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Axis, BinaryOp, DType, Inst, ReduceOp, UnaryOp, Value, AMAX_FLOOR};
use coda_syntax::ast::Arg;

/// Where a recipe takes its scales.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Recipe {
    /// One scale for each operand.
    Tensorwise,
    /// One scale per row of `x` and per row of `w` (an output column).
    Rowwise,
}

impl Lowerer<'_> {
    /// Expands `fp8_linear(x, w, recipe=…)`.
    pub(crate) fn fp8_linear(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 3] = [req("x"), req("w"), kw("recipe")];
        let m = match_args("fp8_linear", span, args, &FORMALS, self.diagnostics)?;
        let x = self.tensor_arg(&m, 0);
        let w = self.tensor_arg(&m, 1);
        let recipes = [("tensorwise", Recipe::Tensorwise), ("rowwise", Recipe::Rowwise)];
        let recipe = self.word_choice(&m, 2, &recipes, |span| {
            Diagnostic::error("E0208", "unknown fp8 recipe").with_primary(span, "expected `tensorwise` or `rowwise`")
        })?;
        let (x, w) = (x?, w?);
        let (kx, kw_) = (self.block.ty(x).shape.cols.clone(), self.block.ty(w).shape.cols.clone());
        if kx != kw_ {
            let left = self.describe_axis(x, true);
            let right = self.describe_axis(w, true);
            self.diagnostics.push(
                Diagnostic::error("E0301", format!("fp8_linear's inner dimensions differ: {left} meets {right}"))
                    .with_primary(m.spans[1], format!("contracts over {right}"))
                    .with_secondary(m.spans[0], format!("contracts over {left}"))
                    .with_help("`fp8_linear(x, w)` is `x @ w.T`: w is [out, in], as an nn.Linear weight"),
            );
            return None;
        }
        let (sx, qx) = self.quantized(x, recipe, m.spans[0])?;
        let (sw, qw) = self.quantized(w, recipe, m.spans[1])?;
        let product =
            Inst::MatMul { lhs: qx, rhs: qw, lhs_transposed: false, rhs_transposed: true, operand_dtype: DType::E4M3 };
        let product = self.emit(product, span)?;
        let sw = match recipe {
            Recipe::Tensorwise => sw,
            Recipe::Rowwise => self.emit(Inst::Transpose { arg: sw }, m.spans[1])?,
        };
        let scales = self.binary(BinaryOp::Mul, sx, sw, m.spans[0], m.spans[1], span)?;
        self.binary(BinaryOp::Div, product, scales, span, span, span)
    }

    /// `(s(t), e4m3(t · s(t)))` for one operand.
    fn quantized(&mut self, t: Value, recipe: Recipe, span: Span) -> Option<(Value, Value)> {
        let detached = self.apply(UnaryOp::Detach, t, span)?;
        let magnitude = self.apply(UnaryOp::Abs, detached, span)?;
        let amax = self.emit(Inst::Reduce { op: ReduceOp::Max, axis: Axis::Cols, arg: magnitude }, span)?;
        let amax = match recipe {
            Recipe::Tensorwise => self.emit(Inst::Reduce { op: ReduceOp::Max, axis: Axis::Rows, arg: amax }, span)?,
            Recipe::Rowwise => amax,
        };
        let floor = self.constant(AMAX_FLOOR, span)?;
        let amax = self.binary(BinaryOp::Max, amax, floor, span, span, span)?;
        let top = self.constant(DType::E4M3.max_finite()?, span)?;
        let scale = self.binary(BinaryOp::Div, top, amax, span, span, span)?;
        let scaled = self.binary(BinaryOp::Mul, t, scale, span, span, span)?;
        let q = self.emit(Inst::Cast { to: DType::E4M3, arg: scaled }, span)?;
        Some((scale, q))
    }
}
