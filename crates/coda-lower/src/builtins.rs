//! Built-in functions: elementwise math, casts, `where`, reductions,
//! `concat` and `take`. Sugar lives in [`crate::sugar`] and the explicit
//! kernel primitives in [`crate::kernel`].

use crate::args::{kw, literal, match_args, req, Formal, Matched};
use crate::block::Lowerer;
use crate::names::suggest;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Axis, BinaryOp, DType, Inst, ReduceOp, Shape, UnaryOp, Value};
use coda_syntax::ast::{Arg, ArgValue, Ident};

/// Every function name the language knows, for suggestions and docs.
pub(crate) const FUNCTIONS: &[&str] = &[
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "gelu_tanh",
    "silu",
    "softplus",
    "abs",
    "sin",
    "cos",
    "detach",
    "min",
    "max",
    "where",
    "bf16",
    "f16",
    "f32",
    "i32",
    "sum",
    "mean",
    "logsumexp",
    "square",
    "pow",
    "clamp",
    "softmax",
    "log_softmax",
    "concat",
    "take",
    "embedding",
    "topk",
    "topk_indices",
    "expand_heads",
    "head_slice",
    "head_concat",
    "rmsnorm",
    "layernorm",
    "swiglu",
    "geglu",
    "rope",
    "cross_entropy",
    "fp8_linear",
    "tile",
    "row",
    "col",
    "scalar",
    "even",
    "odd",
    "interleave",
    "row_sum",
    "row_sumsq",
    "row_max",
    "row_lse",
    "row_pick",
    "col_sum",
];

/// The reduction a reducing function computes (`mean` is a sum, divided
/// afterwards).
pub(crate) fn reduce_op(name: &str) -> ReduceOp {
    match name {
        "max" => ReduceOp::Max,
        "logsumexp" => ReduceOp::LogSumExp,
        _ => ReduceOp::Sum,
    }
}

fn unary_op(name: &str) -> Option<UnaryOp> {
    UnaryOp::ALL.into_iter().find(|op| op.name() == name && *op != UnaryOp::Neg)
}

impl Lowerer<'_> {
    /// Lowers `callee(args)`.
    pub(crate) fn call(&mut self, callee: &Ident, args: &[Arg], span: Span) -> Option<Value> {
        let name = callee.name.as_str();
        if self.string_argument(callee, args) {
            return None;
        }
        if let Some(op) = unary_op(name) {
            let m = match_args(name, span, args, &[req("x")], self.diagnostics)?;
            return self.unary(op, m.expr(0)?, span);
        }
        if let Some(dtype) = DType::from_name(name) {
            let m = match_args(name, span, args, &[req("x")], self.diagnostics)?;
            let x = self.lower_expr(m.expr(0)?)?;
            return self.emit(Inst::Cast { to: dtype, arg: x }, span);
        }
        match name {
            "min" | "max" if args.len() == 2 && args.iter().all(|a| a.name.is_none()) => {
                let m = match_args(name, span, args, &[req("a"), req("b")], self.diagnostics)?;
                let op = if name == "min" { BinaryOp::Min } else { BinaryOp::Max };
                let a = self.lower_expr(m.expr(0)?);
                let b = self.lower_expr(m.expr(1)?);
                self.binary(op, a?, b?, m.spans[0], m.spans[1], span)
            }
            "max" | "sum" | "mean" | "logsumexp" => self.reduction(name, args, span),
            "min" => {
                self.diagnostics.push(
                    Diagnostic::error("E0208", "`min` takes two arguments")
                        .with_primary(span, "there is no `min` reduction")
                        .with_help("`min(a, b)` is elementwise; for a row minimum write `-max(-x, axis=-1)`"),
                );
                None
            }
            "where" => self.where_(args, span),
            "concat" => self.concat(args, span),
            "take" => self.take(args, span),
            "embedding" => self.embedding(args, span),
            "topk" | "topk_indices" => self.top_k(name, args, span),
            "expand_heads" => self.expand_heads(args, span),
            "head_slice" => self.head_slice(args, span),
            "head_concat" => self.head_concat(args, span),
            "fp8_linear" => self.fp8_linear(args, span),
            "rmsnorm" | "layernorm" | "swiglu" | "geglu" | "rope" | "cross_entropy" => self.sugar(name, args, span),
            _ if crate::shorthand::SHORTHANDS.contains(&name) => self.shorthand(name, args, span),
            _ if crate::kernel::is_primitive(name) => self.kernel_primitive(callee, args, span),
            _ => {
                let mut diagnostic = Diagnostic::error("E0207", format!("unknown function `{name}`"))
                    .with_primary(callee.span, "not a built-in function");
                if let Some(instead) = crate::missing::instead_of(name) {
                    diagnostic = diagnostic.with_help(instead);
                } else if let Some(hint) = suggest(name, FUNCTIONS.iter().copied()) {
                    diagnostic = diagnostic.with_help(format!("did you mean `{hint}`?"));
                }
                self.diagnostics.push(diagnostic);
                None
            }
        }
    }

    fn unary(&mut self, op: UnaryOp, arg: &coda_syntax::ast::Expr, span: Span) -> Option<Value> {
        let x = self.lower_expr(arg)?;
        self.numeric(x, arg.span)?;
        self.emit(Inst::Unary { op, arg: x }, span)
    }

    /// Applies a unary op to a lowered value (used by sugar).
    pub(crate) fn apply(&mut self, op: UnaryOp, x: Value, span: Span) -> Option<Value> {
        self.emit(Inst::Unary { op, arg: x }, span)
    }

    fn reduction(&mut self, name: &str, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 3] = [req("x"), kw("axis"), kw("head_dim")];
        let m = match_args(name, span, args, &FORMALS, self.diagnostics)?;
        let x = self.lower_expr(m.expr(0)?)?;
        self.numeric(x, m.spans[0])?;
        let axes: Vec<Axis> = if m.given(1) { vec![self.axis(&m, 1)?] } else { vec![Axis::Cols, Axis::Rows] };
        if m.given(2) {
            if axes != [Axis::Cols] {
                self.diagnostics.push(
                    Diagnostic::error("E0208", format!("`{name}` over heads needs `axis=-1`"))
                        .with_primary(m.spans[2], "heads are groups of columns")
                        .with_help(format!("`{name}(x, axis=-1, head_dim=W)` gives one value per head of each row")),
                );
                return None;
            }
            let cols = self.block.ty(x).shape.cols.clone();
            let groups = self.head_groups(&m, 2, &cols, name)??;
            return self.group_reduce(name, x, groups, span);
        }
        let mut v = x;
        for axis in axes {
            v = self.reduce(name, v, axis, span)?;
        }
        Some(v)
    }

    /// One reduction along `axis`; `mean` divides the sum by the reduced length.
    pub(crate) fn reduce(&mut self, name: &str, x: Value, axis: Axis, span: Span) -> Option<Value> {
        let reduced = self.emit(Inst::Reduce { op: reduce_op(name), axis, arg: x }, span)?;
        if name != "mean" {
            return Some(reduced);
        }
        let shape = &self.block.ty(x).shape;
        let n = match axis {
            Axis::Cols => shape.cols.clone(),
            Axis::Rows => shape.rows.clone(),
        };
        let n = self.emit(Inst::DimValue(n), span)?;
        self.binary(BinaryOp::Div, reduced, n, span, span, span)
    }

    pub(crate) fn axis(&mut self, m: &Matched<'_>, slot: usize) -> Option<Axis> {
        match m.expr(slot).and_then(literal) {
            Some(0.0) => Some(Axis::Rows),
            Some(v) if v == 1.0 || v == -1.0 => Some(Axis::Cols),
            _ => {
                self.diagnostics.push(
                    Diagnostic::error("E0208", "invalid axis")
                        .with_primary(m.spans[slot], "expected 0, 1 or -1")
                        .with_help(
                        "axis=-1 (or 1) reduces each row over its columns; axis=0 reduces each column over the rows",
                    ),
                );
                None
            }
        }
    }

    fn where_(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        let m = match_args("where", span, args, &[req("cond"), req("a"), req("b")], self.diagnostics)?;
        let c = self.lower_expr(m.expr(0)?);
        let a = self.lower_expr(m.expr(1)?);
        let b = self.lower_expr(m.expr(2)?);
        let (c, a, b) = (c?, a?, b?);
        if self.block.ty(c).dtype != DType::Bool {
            self.diagnostics.push(
                Diagnostic::error("E0303", "the condition of `where` is not a comparison")
                    .with_primary(m.spans[0], "expected a comparison such as `x > 0`"),
            );
            return None;
        }
        self.numeric(a, m.spans[1])?;
        self.numeric(b, m.spans[2])?;
        self.select(c, a, b, [m.spans[0], m.spans[1], m.spans[2]], span)
    }

    /// `where(c, a, b)` on lowered values, broadcasting all three.
    pub(crate) fn select(&mut self, c: Value, a: Value, b: Value, spans: [Span; 3], span: Span) -> Option<Value> {
        let shape = self.common_shape(&[(c, spans[0]), (a, spans[1]), (b, spans[2])], span)?;
        let c = self.broadcast_to(c, &shape, span)?;
        let a = self.broadcast_to(a, &shape, span)?;
        let b = self.broadcast_to(b, &shape, span)?;
        self.emit(Inst::Select { cond: c, on_true: a, on_false: b }, span)
    }

    fn concat(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        let mut parts = Vec::new();
        let mut ok = true;
        for arg in args {
            match (&arg.name, &arg.value) {
                (None, ArgValue::Expr(e)) => match self.lower_expr(e) {
                    Some(v) => parts.push((v, arg.span)),
                    None => ok = false,
                },
                (Some(n), ArgValue::Expr(e))
                    if n.name == "axis" && matches!(literal(e), Some(v) if v == 1.0 || v == -1.0) => {}
                _ => {
                    self.diagnostics.push(
                        Diagnostic::error("E0208", "invalid argument to `concat`")
                            .with_primary(arg.span, "only column concatenation is supported")
                            .with_help("write `concat(a, b, …)` or `concat(a, b, axis=-1)`"),
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        if parts.len() < 2 {
            self.diagnostics.push(
                Diagnostic::error("E0208", "`concat` needs at least two parts").with_primary(span, "too few arguments"),
            );
            return None;
        }
        let rows = self.block.ty(parts[0].0).shape.rows.clone();
        for &(v, s) in &parts[1..] {
            if self.block.ty(v).shape.rows != rows {
                let left = self.describe_axis(parts[0].0, false);
                let right = self.describe_axis(v, false);
                self.diagnostics.push(
                    Diagnostic::error("E0302", "concatenated parts have different row counts")
                        .with_primary(s, format!("{right} rows"))
                        .with_secondary(parts[0].1, format!("{left} rows")),
                );
                return None;
            }
        }
        self.emit(Inst::ConcatCols { parts: parts.into_iter().map(|(v, _)| v).collect() }, span)
    }

    fn take(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        let m = match_args("take", span, args, &[req("x"), req("index")], self.diagnostics)?;
        let x = self.lower_expr(m.expr(0)?);
        let idx = self.lower_expr(m.expr(1)?);
        self.take_values(x?, idx?, m.spans[1], span)
    }

    /// `x[m, index[m]]` per row; `index` is a length-M i32 vector.
    pub(crate) fn take_values(&mut self, x: Value, idx: Value, idx_span: Span, span: Span) -> Option<Value> {
        let rows = self.block.ty(x).shape.rows.clone();
        let idx_ty = self.block.ty(idx).clone();
        if idx_ty.dtype != DType::I32 {
            self.diagnostics.push(
                Diagnostic::error("E0303", "indices must be i32")
                    .with_primary(idx_span, format!("this is {}", idx_ty.dtype)),
            );
            return None;
        }
        let as_rows = Shape::new(rows.clone(), coda_ir::Dim::constant(1));
        let idx = if idx_ty.shape == as_rows {
            idx
        } else if idx_ty.shape.transposed() == as_rows {
            self.emit(Inst::Transpose { arg: idx }, idx_span)?
        } else {
            let expected = self.describe_axis(x, false);
            self.diagnostics.push(
                Diagnostic::error("E0302", "one index per row is needed")
                    .with_primary(idx_span, format!("this is {}", self.show_shape(&idx_ty.shape)))
                    .with_note(format!("the indexed tensor has {expected} rows"))
                    .with_help("`take(x, index)` picks one column per row of `x`; `embedding(ids, table)` picks one row of a table per id"),
            );
            return None;
        };
        self.emit(Inst::TakeCols { arg: x, index: idx }, span)
    }

    /// `embedding(ids, table)`: the rows of `table` that `ids` name, as
    /// `F.embedding(ids, weight)`; an id outside the table gives zeros.
    fn embedding(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        let m = match_args("embedding", span, args, &[req("ids"), req("table")], self.diagnostics)?;
        let ids = self.lower_expr(m.expr(0)?);
        let table = self.lower_expr(m.expr(1)?);
        let (ids, table) = (ids?, table?);
        self.numeric(table, m.spans[1])?;
        let ty = self.block.ty(ids).clone();
        let index = match (ty.dtype, ty.shape.cols.is_one(), ty.shape.rows.is_one()) {
            (DType::I32, true, _) => ids,
            (DType::I32, false, true) => self.emit(Inst::Transpose { arg: ids }, m.spans[0])?,
            _ => {
                self.diagnostics.push(
                    Diagnostic::error("E0303", "`embedding` takes i32 token ids, one per row")
                        .with_primary(m.spans[0], format!("this is {} {}", ty.dtype, self.show_shape(&ty.shape)))
                        .with_help("declare the ids `i32[M]`: `embedding(ids, table)` gives row `ids[m]` of the table"),
                );
                return None;
            }
        };
        self.emit(Inst::GatherRows { table, index }, span)
    }

    /// `topk(x, k)`, the `k` largest elements of each row in decreasing
    /// order, and `topk_indices(x, k)`, their columns (`torch.topk`'s two
    /// results along the last axis).
    fn top_k(&mut self, name: &str, args: &[Arg], span: Span) -> Option<Value> {
        let m = match_args(name, span, args, &[req("x"), req("k")], self.diagnostics)?;
        let x = self.lower_expr(m.expr(0)?)?;
        self.numeric(x, m.spans[0])?;
        let cols = self.block.ty(x).shape.cols.clone();
        let k = self.dims.eval(m.expr(1)?, self.diagnostics)?.as_const();
        let Some(k) = k.filter(|k| *k >= 1 && cols.as_const().is_some_and(|n| *k <= n)) else {
            self.diagnostics.push(
                Diagnostic::error("E0208", format!("`{name}` needs a constant `k` from 1 to the number of columns"))
                    .with_primary(m.spans[1], format!("the tensor has {cols} columns"))
                    .with_help("a router's choice of 2 experts of 8 is `topk(probs, 2)` and `topk_indices(probs, 2)`"),
            );
            return None;
        };
        self.emit(Inst::TopK { arg: x, k, indices: name == "topk_indices" }, span)
    }

    /// A scalar constant.
    pub(crate) fn constant(&mut self, value: f64, span: Span) -> Option<Value> {
        self.emit(Inst::Const(value), span)
    }
}
