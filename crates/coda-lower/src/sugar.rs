//! Sugar: model-level functions expanded into IR primitives, so that every
//! later pass sees through them. The expansions (also in `docs/language.md`):
//!
//! - `rmsnorm(x, g, eps=1e-6)   = x · rsqrt(sum(x·x, axis=-1)/N + eps) · g`
//! - `layernorm(x, g, b, eps=1e-5) = (x − μ) · rsqrt(σ² + eps) · g + b`, with
//!   `μ = sum(x)/N` and the biased variance `σ² = sum((x − μ)²)/N`
//! - a norm's gain `g` and bias `b` may be left out: no product, no sum
//! - `head_dim=W` normalizes each head of `W` columns instead of the row
//!   ([`crate::heads`])
//! - `swiglu(z) = silu(z[:, :F]) · z[:, F:]` for `z: [M, 2F]`; `swiglu(gate, up) = silu(gate) · up`
//! - `geglu` likewise with the erf form of `gelu`
//! - `rope(x, pos, head_dim=, base=10000, cols=a:b, style=half|interleaved, rotary_dim=head_dim)
//!    = x · cos(pos·freq) + partner(x) · sign · sin(pos·freq)` per column
//! - `cross_entropy(logits, targets, ignore_index=-100, reduction=mean|sum|none)`:
//!   per row `logsumexp(logits) − logits[target]`, 0 for ignored rows; `mean`
//!   divides the sum by the number of rows that are not ignored.
//! - `fp8_linear(x, w, recipe=tensorwise|rowwise)`: in [`crate::fp8`]

use crate::args::{kw, literal, match_args, opt, req, word, Formal, Matched};
use crate::block::Lowerer;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Axis, BinaryOp, ColGroups, Dim, Inst, ReduceOp, RopeSpec, RopeStyle, RopeTable, UnaryOp, Value};
use coda_syntax::ast::{Arg, ArgValue};

impl Lowerer<'_> {
    /// Expands one sugar call.
    pub(crate) fn sugar(&mut self, name: &str, args: &[Arg], span: Span) -> Option<Value> {
        match name {
            "rmsnorm" => self.rmsnorm(args, span),
            "layernorm" => self.layernorm(args, span),
            "swiglu" => self.gated(name, UnaryOp::Silu, args, span),
            "geglu" => self.gated(name, UnaryOp::GeluErf, args, span),
            "rope" => self.rope(args, span),
            _ => self.cross_entropy(args, span),
        }
    }

    /// A literal number argument, or its default.
    fn number_arg(&mut self, m: &Matched<'_>, slot: usize, default: f64, what: &str) -> Option<f64> {
        if !m.given(slot) {
            return Some(default);
        }
        match m.expr(slot).and_then(literal) {
            Some(v) => Some(v),
            None => {
                self.diagnostics.push(
                    Diagnostic::error("E0208", format!("`{what}` must be a number"))
                        .with_primary(m.spans[slot], "expected a literal such as 1e-5"),
                );
                None
            }
        }
    }

    /// The value of the bare word given for keyword `slot` among `choices`,
    /// the first one's when the keyword is left out; another word, or an
    /// expression, is the diagnostic `unknown` makes at the argument.
    pub(crate) fn word_choice<T: Copy>(
        &mut self,
        m: &Matched<'_>,
        slot: usize,
        choices: &[(&str, T)],
        unknown: impl FnOnce(Span) -> Diagnostic,
    ) -> Option<T> {
        let Some(expr) = m.expr(slot) else { return choices.first().map(|(_, v)| *v) };
        match word(expr).and_then(|w| choices.iter().find(|(name, _)| *name == w)) {
            Some((_, v)) => Some(*v),
            None => {
                self.diagnostics.push(unknown(m.spans[slot]));
                None
            }
        }
    }

    /// A tensor argument that must be a float.
    pub(crate) fn tensor_arg(&mut self, m: &Matched<'_>, slot: usize) -> Option<Value> {
        self.tensor_expr(m.expr(slot)?, m.spans[slot])
    }

    /// A float tensor given as an expression.
    pub(crate) fn tensor_expr(&mut self, e: &coda_syntax::ast::Expr, span: Span) -> Option<Value> {
        let v = self.lower_expr(e)?;
        self.numeric(v, span)?;
        Some(v)
    }

    /// `x · rsqrt(mean(x·x) + eps)` along each row's columns, or each
    /// head's: the normalization shared by both norms.
    fn normalize(&mut self, centered: Value, eps: f64, heads: Option<ColGroups>, span: Span) -> Option<Value> {
        let cols = self.block.ty(centered).shape.cols.clone();
        let square = self.binary(BinaryOp::Mul, centered, centered, span, span, span)?;
        let mean_square = self.mean_over(square, heads, span)?;
        let eps = self.constant(eps, span)?;
        let shifted = self.binary(BinaryOp::Add, mean_square, eps, span, span, span)?;
        let scale = self.apply(UnaryOp::Rsqrt, shifted, span)?;
        let scale = self.spread(scale, heads, &cols, span)?;
        self.binary(BinaryOp::Mul, centered, scale, span, span, span)
    }

    fn rmsnorm(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 4] = [req("x"), opt("g"), opt("eps"), kw("head_dim")];
        let m = match_args("rmsnorm", span, args, &FORMALS, self.diagnostics)?;
        self.warn_gain_like_eps("rmsnorm", &m, 1, 2);
        let x = self.tensor_arg(&m, 0);
        let g = self.optional_tensor_arg(&m, 1, 1.0);
        let eps = self.number_arg(&m, 2, 1e-6, "eps")?;
        let (x, g) = (x?, g?);
        let cols = self.block.ty(x).shape.cols.clone();
        let heads = self.head_groups(&m, 3, &cols, "rmsnorm")?;
        let normalized = self.normalize(x, eps, heads, span)?;
        let g = match g {
            Some(g) => Some((self.over_heads(g, heads, &cols, m.spans[1])?, m.spans[1])),
            None => None,
        };
        self.affine(normalized, g, None, span)
    }

    fn layernorm(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 5] = [req("x"), opt("g"), opt("b"), opt("eps"), kw("head_dim")];
        let m = match_args("layernorm", span, args, &FORMALS, self.diagnostics)?;
        self.warn_gain_like_eps("layernorm", &m, 1, 3);
        let x = self.tensor_arg(&m, 0);
        let g = self.optional_tensor_arg(&m, 1, 1.0);
        let b = self.optional_tensor_arg(&m, 2, 0.0);
        let eps = self.number_arg(&m, 3, 1e-5, "eps")?;
        let (x, g, b) = (x?, g?, b?);
        let cols = self.block.ty(x).shape.cols.clone();
        let heads = self.head_groups(&m, 4, &cols, "layernorm")?;
        let mean = self.mean_over(x, heads, span)?;
        let mean = self.spread(mean, heads, &cols, span)?;
        let centered = self.binary(BinaryOp::Sub, x, mean, span, span, span)?;
        let normalized = self.normalize(centered, eps, heads, span)?;
        let g = match g {
            Some(g) => Some((self.over_heads(g, heads, &cols, m.spans[1])?, m.spans[1])),
            None => None,
        };
        let b = match b {
            Some(b) => Some((self.over_heads(b, heads, &cols, m.spans[2])?, m.spans[2])),
            None => None,
        };
        self.affine(normalized, g, b, span)
    }

    /// `Some(tensor)` for a given argument, `Some(None)` for one left out
    /// or equal to the literal `identity` (a gain of `1.0`, a bias of
    /// `0.0`: `x · 1 = x` and `x + 0 = x` exactly, and a norm without them
    /// defers through the next matmul, which a product by a constant would
    /// stop), `None` after an error.
    fn optional_tensor_arg(&mut self, m: &Matched<'_>, slot: usize, identity: f64) -> Option<Option<Value>> {
        if !m.given(slot) || m.expr(slot).and_then(literal) == Some(identity) {
            return Some(None);
        }
        self.tensor_arg(m, slot).map(Some)
    }

    /// `x · g + b`, each part only when given: a norm without learned
    /// parameters (OLMo's LayerNorm) lowers to the normalization alone.
    fn affine(&mut self, x: Value, g: Option<(Value, Span)>, b: Option<(Value, Span)>, span: Span) -> Option<Value> {
        let scaled = match g {
            Some((g, g_span)) => self.binary(BinaryOp::Mul, x, g, span, g_span, span)?,
            None => x,
        };
        match b {
            Some((b, b_span)) => self.binary(BinaryOp::Add, scaled, b, span, b_span, span),
            None => Some(scaled),
        }
    }

    /// W0005: a norm's gain given as a tiny number literal is almost always
    /// an `eps` in the gain's position (`rmsnorm(x, 1e-6)`), which scales
    /// the output by it instead.
    fn warn_gain_like_eps(&mut self, function: &str, m: &Matched<'_>, gain: usize, eps: usize) {
        let Some(value) = m.given(gain).then(|| m.expr(gain).and_then(literal)).flatten() else { return };
        if value == 0.0 || value.abs() >= 1e-2 {
            return;
        }
        let position = if eps == 2 { "third" } else { "fourth" };
        self.diagnostics.push(
            Diagnostic::warning("W0005", format!("the gain of `{function}` is {value:e}"))
                .with_primary(m.spans[gain], "this is the gain `g`, which scales every output")
                .with_help(format!(
                    "`eps` is the {position} argument; write `{function}(x, eps={value:e})` to normalize without a gain"
                )),
        );
    }

    /// `act(gate) · up`, from two tensors or from the two halves of one.
    fn gated(&mut self, name: &str, act: UnaryOp, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 2] = [req("z"), opt("up")];
        let m = match_args(name, span, args, &FORMALS, self.diagnostics)?;
        let (gate, up) = if m.given(1) {
            let gate = self.tensor_arg(&m, 0);
            let up = self.tensor_arg(&m, 1);
            (gate?, up?)
        } else {
            let z = self.tensor_arg(&m, 0)?;
            let cols = self.block.ty(z).shape.cols.clone();
            let Ok(half) = cols.div_exact(&Dim::constant(2)) else {
                self.diagnostics.push(
                    Diagnostic::error("E0302", format!("`{name}` needs an even number of columns"))
                        .with_primary(m.spans[0], format!("this has {cols} columns"))
                        .with_help(format!("`{name}(z)` splits z into [gate | up] halves; or call `{name}(gate, up)`")),
                );
                return None;
            };
            let gate = self.slice_cols(z, Dim::constant(0), half.clone(), span)?;
            let up = self.slice_cols(z, half, cols, span)?;
            (gate, up)
        };
        let activated = self.apply(act, gate, span)?;
        self.binary(BinaryOp::Mul, activated, up, span, span, span)
    }

    fn rope(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 7] =
            [req("x"), req("pos"), kw("head_dim"), kw("base"), kw("cols"), kw("style"), kw("rotary_dim")];
        let m = match_args("rope", span, args, &FORMALS, self.diagnostics)?;
        let x = self.tensor_arg(&m, 0);
        let pos = self.tensor_arg(&m, 1);
        let (x, pos) = (x?, pos?);
        let spec = self.rope_spec(&m, x, span)?;
        let cols = self.block.ty(x).shape.cols.clone();
        let rows = self.block.ty(x).shape.rows.clone();
        let pos = self.per_row(pos, &rows, m.spans[1])?;
        let freq =
            self.emit(Inst::RopeTable { spec: spec.clone(), table: RopeTable::Freq, cols: cols.clone() }, span)?;
        let sign = self.emit(Inst::RopeTable { spec: spec.clone(), table: RopeTable::Sign, cols }, span)?;
        let angle = self.binary(BinaryOp::Mul, pos, freq, m.spans[1], span, span)?;
        let cos = self.apply(UnaryOp::Cos, angle, span)?;
        let sin = self.apply(UnaryOp::Sin, angle, span)?;
        let partner = self.emit(Inst::RopePartner { spec, arg: x }, span)?;
        let direct = self.binary(BinaryOp::Mul, x, cos, span, span, span)?;
        let signed = self.binary(BinaryOp::Mul, partner, sign, span, span, span)?;
        let rotated = self.binary(BinaryOp::Mul, signed, sin, span, span, span)?;
        self.binary(BinaryOp::Add, direct, rotated, span, span, span)
    }

    fn rope_spec(&mut self, m: &Matched<'_>, x: Value, span: Span) -> Option<RopeSpec> {
        let cols = self.block.ty(x).shape.cols.clone();
        let head_dim = match m.expr(2) {
            Some(e) => self.dims.eval(e, self.diagnostics)?.as_const(),
            None => None,
        };
        let Some(head_dim) = head_dim.filter(|h| *h > 0 && h % 2 == 0) else {
            self.diagnostics.push(
                Diagnostic::error("E0306", "`rope` needs `head_dim`, a positive even constant")
                    .with_primary(if m.given(2) { m.spans[2] } else { span }, "head_dim missing or invalid")
                    .with_help("for example `rope(q, pos, head_dim=128)`"),
            );
            return None;
        };
        let rotary_dim = match m.expr(6) {
            Some(e) => self.dims.eval(e, self.diagnostics)?.as_const(),
            None => Some(head_dim),
        };
        let Some(rotary_dim) = rotary_dim.filter(|r| *r > 0 && r % 2 == 0 && *r <= head_dim) else {
            self.diagnostics.push(
                Diagnostic::error("E0306", "`rotary_dim` must be a positive even constant up to `head_dim`")
                    .with_primary(m.spans[6], format!("head_dim is {head_dim}"))
                    .with_help(
                        "the first rotary_dim features of each head turn, the rest pass through: GPT-NeoX's \
                         `rotary_pct = 0.25` on heads of 128 is `rotary_dim=32`",
                    ),
            );
            return None;
        };
        let base = self.number_arg(m, 3, 10000.0, "base")?;
        let (start, end) = match m.slots.get(4).copied().flatten() {
            Some(ArgValue::Range(a, b)) => {
                let a = self.dims.eval(a, self.diagnostics);
                let b = self.dims.eval(b, self.diagnostics);
                (a?, b?)
            }
            Some(ArgValue::Expr(_)) => {
                self.diagnostics.push(
                    Diagnostic::error("E0306", "`cols` takes a column range")
                        .with_primary(m.spans[4], "write `cols=a:b`"),
                );
                return None;
            }
            None => (Dim::constant(0), cols.clone()),
        };
        let styles = [("half", RopeStyle::Half), ("interleaved", RopeStyle::Interleaved)];
        let style = self.word_choice(m, 5, &styles, |span| {
            Diagnostic::error("E0306", "unknown rope style")
                .with_primary(span, "expected `half` or `interleaved`")
                .with_help(
                    "`half` pairs feature i with i + head_dim/2 (Llama); `interleaved` pairs 2i with 2i+1 (GPT-J)",
                )
        })?;
        let width = end.sub(&start).ok();
        let whole_heads = width.as_ref().is_some_and(|w| w.as_const().is_none_or(|w| w > 0 && w % head_dim == 0));
        let inside = match (end.as_const(), cols.as_const()) {
            (Some(e), Some(c)) => e <= c,
            _ => true,
        };
        if !whole_heads || !inside || start.as_const().is_some_and(|s| s < 0) {
            self.diagnostics.push(
                Diagnostic::error(
                    "E0306",
                    format!("rope columns {start}..{end} are not whole heads inside the tensor"),
                )
                .with_primary(
                    if m.given(4) { m.spans[4] } else { span },
                    format!("head_dim is {head_dim}, the tensor has {cols} columns"),
                )
                .with_help("the rotated range must be a whole number of heads within the columns"),
            );
            return None;
        }
        Some(RopeSpec { head_dim, rotary_dim, base, start, end, style })
    }

    /// A per-row vector `[M, 1]` from a length-M vector given either way.
    fn per_row(&mut self, v: Value, rows: &Dim, span: Span) -> Option<Value> {
        let shape = self.block.ty(v).shape.clone();
        if shape.rows == *rows && shape.cols.is_one() {
            return Some(v);
        }
        if shape.cols == *rows && shape.rows.is_one() {
            return self.emit(Inst::Transpose { arg: v }, span);
        }
        self.diagnostics.push(
            Diagnostic::error("E0302", "one value per row is needed")
                .with_primary(span, format!("this is {}", self.show_shape(&shape)))
                .with_help(format!("pass a vector of length {rows}")),
        );
        None
    }

    fn cross_entropy(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 4] = [req("logits"), req("targets"), kw("ignore_index"), kw("reduction")];
        let m = match_args("cross_entropy", span, args, &FORMALS, self.diagnostics)?;
        let logits = self.tensor_arg(&m, 0);
        let targets = self.lower_expr(m.expr(1)?);
        let ignore = self.number_arg(&m, 2, -100.0, "ignore_index")?;
        let reductions = [("mean", "mean"), ("sum", "sum"), ("none", "none")];
        let reduction = self.word_choice(&m, 3, &reductions, |span| {
            Diagnostic::error("E0208", "unknown reduction").with_primary(span, "expected `mean`, `sum` or `none`")
        })?;
        let (logits, targets) = (logits?, targets?);
        let picked = self.take_values(logits, targets, m.spans[1], span)?;
        let targets = self.block.inst(picked).operands()[1];
        let lse = self.emit(Inst::Reduce { op: ReduceOp::LogSumExp, axis: Axis::Cols, arg: logits }, span)?;
        let loss = self.binary(BinaryOp::Sub, lse, picked, span, span, span)?;
        let ignore = self.constant(ignore, span)?;
        let valid = self.broadcast_pair(targets, ignore, span, span, span)?;
        let valid = self.emit(Inst::Binary { op: BinaryOp::Ne, lhs: valid.0, rhs: valid.1 }, span)?;
        let zero = self.constant(0.0, span)?;
        let per_row = self.select(valid, loss, zero, [span; 3], span)?;
        if reduction == "none" {
            return Some(per_row);
        }
        let total = self.emit(Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Rows, arg: per_row }, span)?;
        if reduction == "sum" {
            return Some(total);
        }
        let one = self.constant(1.0, span)?;
        let zero = self.constant(0.0, span)?;
        let counted = self.select(valid, one, zero, [span; 3], span)?;
        let count = self.emit(Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Rows, arg: counted }, span)?;
        self.binary(BinaryOp::Div, total, count, span, span, span)
    }
}
