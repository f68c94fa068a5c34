//! Lowering of expressions, with the broadcasting and matmul rules.
//!
//! Broadcasting (documented in `docs/language.md`): two operands of shapes
//! `[r1, c1]` and `[r2, c2]` combine when, on each axis, the dims are equal
//! or one of them is 1. A rank-1 tensor `[N]` is a per-column vector `[1, N]`
//! (NumPy's rule); a length-M vector is used per row by writing `v[:, None]`.

use crate::block::Lowerer;
use crate::names::suggest;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{BinaryOp, DType, Dim, Inst, Shape, UnaryOp, Value};
use coda_syntax::ast::{BinOp, Expr, ExprKind, IndexItem};

impl Lowerer<'_> {
    /// Lowers an expression; `None` means an error was reported.
    pub(crate) fn lower_expr(&mut self, expr: &Expr) -> Option<Value> {
        match &expr.kind {
            ExprKind::Number(text) => self.number(text, expr.span),
            ExprKind::Name(ident) => self.name(&ident.name, expr.span),
            ExprKind::Neg(inner) => {
                let v = self.lower_expr(inner)?;
                self.numeric(v, inner.span)?;
                self.emit(Inst::Unary { op: UnaryOp::Neg, arg: v }, expr.span)
            }
            ExprKind::Binary { op: BinOp::MatMul, lhs, rhs } => self.matmul(lhs, rhs, expr.span),
            ExprKind::Binary { op, lhs, rhs } => {
                let a = self.lower_expr(lhs);
                let b = self.lower_expr(rhs);
                self.binary(binary_op(*op), a?, b?, lhs.span, rhs.span, expr.span)
            }
            ExprKind::Call { callee, args } => self.call(callee, args, expr.span),
            ExprKind::Index { base, items } => {
                let v = self.lower_expr(base)?;
                self.index(v, items, base.span, expr.span)
            }
            ExprKind::Transpose(inner) => {
                let v = self.lower_expr(inner)?;
                self.emit(Inst::Transpose { arg: v }, expr.span)
            }
            ExprKind::Member { .. } => self.member(expr),
            ExprKind::List(_) => {
                self.list(expr.span);
                None
            }
            ExprKind::Str(text) => {
                self.string(text, expr.span, None, None);
                None
            }
            ExprKind::Error => None,
        }
    }

    fn number(&mut self, text: &str, span: Span) -> Option<Value> {
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => self.emit(Inst::Const(v), span),
            _ => {
                self.diagnostics.push(
                    Diagnostic::error("E0209", format!("`{text}` is not a representable number"))
                        .with_primary(span, "out of range for a 64-bit float"),
                );
                None
            }
        }
    }

    fn name(&mut self, name: &str, span: Span) -> Option<Value> {
        if let Some(binding) = self.env.get_mut(name) {
            binding.used = true;
            let (value, is_param) = (binding.value, binding.is_param);
            if is_param && !self.param_use_allowed {
                self.diagnostics.push(crate::kernel::implicit_load(name, span));
                return None;
            }
            return Some(value);
        }
        if let Some(entry) = self.dims.get(name) {
            let dim = entry.value.clone();
            return self.emit(Inst::DimValue(dim), span);
        }
        if self.poisoned.contains(name) {
            return None;
        }
        if self.outputs.iter().any(|o| o.tensor.name == name) {
            self.diagnostics.push(
                Diagnostic::error("E0202", format!("output `{name}` cannot be read"))
                    .with_primary(span, "outputs are write-only")
                    .with_help(format!(
                        "bind the value with `let`, use it, then store it: `let v = …` and `{name} = v`"
                    )),
            );
            return None;
        }
        let candidates: Vec<String> = self.env.keys().cloned().chain(self.dims.names().map(String::from)).collect();
        let mut diagnostic =
            Diagnostic::error("E0201", format!("unknown name `{name}`")).with_primary(span, "not defined");
        if let Some(hint) = suggest(name, candidates.iter().map(String::as_str)) {
            diagnostic = diagnostic.with_help(format!("did you mean `{hint}`?"));
        }
        self.diagnostics.push(diagnostic);
        None
    }

    /// Rejects bool operands of arithmetic.
    pub(crate) fn numeric(&mut self, v: Value, span: Span) -> Option<()> {
        if self.block.ty(v).dtype == DType::Bool {
            self.diagnostics.push(
                Diagnostic::error("E0303", "a comparison result is used as a number")
                    .with_primary(span, "this is a bool")
                    .with_help("select numbers with `where(cond, a, b)`"),
            );
            return None;
        }
        Some(())
    }

    /// `op(a, b)` with broadcasting.
    pub(crate) fn binary(&mut self, op: BinaryOp, a: Value, b: Value, sa: Span, sb: Span, span: Span) -> Option<Value> {
        self.numeric(a, sa)?;
        self.numeric(b, sb)?;
        let (a, b) = self.broadcast_pair(a, b, sa, sb, span)?;
        self.emit(Inst::Binary { op, lhs: a, rhs: b }, span)
    }

    /// Broadcasts two values to their common shape.
    pub(crate) fn broadcast_pair(
        &mut self,
        a: Value,
        b: Value,
        sa: Span,
        sb: Span,
        span: Span,
    ) -> Option<(Value, Value)> {
        let shape = self.common_shape(&[(a, sa), (b, sb)], span)?;
        Some((self.broadcast_to(a, &shape, span)?, self.broadcast_to(b, &shape, span)?))
    }

    /// The broadcast shape of several values, or a located error naming the dims that disagree.
    pub(crate) fn common_shape(&mut self, values: &[(Value, Span)], span: Span) -> Option<Shape> {
        let mut shape = Shape::scalar();
        let mut origin: [Option<(Value, Span)>; 2] = [None, None];
        for &(v, s) in values {
            let vs = self.block.ty(v).shape.clone();
            for (axis, cols) in [(0usize, false), (1usize, true)] {
                let (have, new) = if cols { (&mut shape.cols, &vs.cols) } else { (&mut shape.rows, &vs.rows) };
                if new.is_one() || have == new {
                    continue;
                }
                if have.is_one() {
                    *have = new.clone();
                    origin[axis] = Some((v, s));
                    continue;
                }
                self.broadcast_error(origin[axis], (v, s), cols, span);
                return None;
            }
        }
        Some(shape)
    }

    fn broadcast_error(&mut self, first: Option<(Value, Span)>, second: (Value, Span), cols: bool, span: Span) {
        let axis = if cols { "columns" } else { "rows" };
        let (v2, s2) = second;
        let mut diagnostic = Diagnostic::error("E0302", format!("shapes do not broadcast: the {axis} differ"))
            .with_primary(s2, format!("{} {axis} here", self.describe_axis(v2, cols)));
        if let Some((v1, s1)) = first {
            diagnostic = diagnostic.with_secondary(s1, format!("{} {axis} here", self.describe_axis(v1, cols)));
        } else {
            diagnostic = diagnostic.with_secondary(span, "in this expression");
        }
        let vector_hint = self.block.ty(v2).shape.class() == coda_ir::ShapeClass::ColVector
            || first.is_some_and(|(v, _)| self.block.ty(v).shape.class() == coda_ir::ShapeClass::ColVector);
        if vector_hint {
            diagnostic = diagnostic.with_help(
                "a vector `v: f32[L]` is applied per column; to apply a length-M vector per row, write `v[:, None]`",
            );
        }
        self.diagnostics.push(diagnostic);
    }

    /// Widens a value to `shape` (a no-op when it already has it).
    pub(crate) fn broadcast_to(&mut self, v: Value, shape: &Shape, span: Span) -> Option<Value> {
        if &self.block.ty(v).shape == shape {
            return Some(v);
        }
        self.emit(Inst::Broadcast { arg: v, shape: shape.clone() }, span)
    }

    /// `lhs @ rhs`, folding `.T` on either side into the matmul.
    fn matmul(&mut self, lhs: &Expr, rhs: &Expr, span: Span) -> Option<Value> {
        let (a, ta) = self.matmul_operand(lhs);
        let (b, tb) = self.matmul_operand(rhs);
        let (a, b) = (a?, b?);
        let ka = if ta { self.block.ty(a).shape.rows.clone() } else { self.block.ty(a).shape.cols.clone() };
        let kb = if tb { self.block.ty(b).shape.cols.clone() } else { self.block.ty(b).shape.rows.clone() };
        if ka != kb {
            let left = self.describe_axis(a, !ta);
            let right = self.describe_axis(b, tb);
            self.diagnostics.push(
                Diagnostic::error("E0301", format!("matmul inner dimensions differ: {left} meets {right}"))
                    .with_primary(rhs.span, format!("contracts over {right}"))
                    .with_secondary(lhs.span, format!("contracts over {left}"))
                    .with_note(format!("in `{}`", self.source.slice(span)))
                    .with_help("`a @ b` contracts the columns of a with the rows of b; nn.Linear weights are [out, in], so write `x @ w.T`"),
            );
            return None;
        }
        let operand_dtype = self.matmul_dtype(a, b, lhs.span, rhs.span)?;
        self.emit(Inst::MatMul { lhs: a, rhs: b, lhs_transposed: ta, rhs_transposed: tb, operand_dtype }, span)
    }

    fn matmul_operand(&mut self, expr: &Expr) -> (Option<Value>, bool) {
        let kernel = self.block.kind == coda_ir::BlockKind::Kernel;
        let saved = self.param_use_allowed;
        self.param_use_allowed |= kernel;
        let result = match &expr.kind {
            ExprKind::Transpose(inner) => (self.lower_expr(inner), true),
            _ => (self.lower_expr(expr), false),
        };
        self.param_use_allowed = saved;
        result
    }

    /// The 16-bit or fp8 type the GEMM reads both operands in: that of the
    /// operand that has one (the other is rounded to it); two different
    /// ones are an error.
    fn matmul_dtype(&mut self, a: Value, b: Value, sa: Span, sb: Span) -> Option<DType> {
        let (da, db) = (self.block.ty(a).dtype, self.block.ty(b).dtype);
        for (d, s) in [(da, sa), (db, sb)] {
            if matches!(d, DType::Bool | DType::I32) {
                self.diagnostics.push(
                    Diagnostic::error("E0303", format!("a matmul operand is {d}"))
                        .with_primary(s, "not a floating-point tensor"),
                );
                return None;
            }
        }
        match (da.is_gemm_operand(), db.is_gemm_operand()) {
            (true, true) if da != db => {
                self.diagnostics.push(
                    Diagnostic::error("E0303", format!("matmul operands are {da} and {db}"))
                        .with_primary(sb, format!("this is {db}"))
                        .with_secondary(sa, format!("this is {da}"))
                        .with_help(format!("cast one side: `{da}(…)`")),
                );
                None
            }
            (true, _) => Some(da),
            (false, true) => Some(db),
            (false, false) => {
                self.diagnostics.push(
                    Diagnostic::error("E0303", "a matmul needs a bf16, f16, e4m3 or e5m2 operand")
                        .with_primary(sa.to(sb), "both operands are f32")
                        .with_help("the GEMM reads 16-bit (or fp8) operands; cast one: `bf16(x) @ w`"),
                );
                None
            }
        }
    }

    /// `x[:, a:b]` column slices and `v[:, None]` turning a vector into a per-row vector.
    fn index(&mut self, v: Value, items: &[IndexItem], base_span: Span, span: Span) -> Option<Value> {
        let shape = self.block.ty(v).shape.clone();
        match items {
            [IndexItem::Slice { start: None, end: None, .. }, IndexItem::NewAxis(_)]
                if shape.class() == coda_ir::ShapeClass::ColVector =>
            {
                self.emit(Inst::Transpose { arg: v }, span)
            }
            [IndexItem::Slice { start: None, end: None, .. }, IndexItem::Slice { start, end, span: item_span }] => {
                let start_dim = match start {
                    Some(e) => self.dims.eval(e, self.diagnostics)?,
                    None => Dim::constant(0),
                };
                let end_dim = match end {
                    Some(e) => self.dims.eval(e, self.diagnostics)?,
                    None => shape.cols.clone(),
                };
                self.slice_cols(v, start_dim, end_dim, *item_span)
            }
            _ => {
                self.diagnostics.push(
                    Diagnostic::error("E0205", "unsupported indexing")
                        .with_primary(span, "only column slices and `[:, None]` are supported")
                        .with_secondary(base_span, format!("this is {}", self.show_shape(&shape)))
                        .with_help(
                            "write `x[:, a:b]` for columns a..b, or `v[:, None]` to use a length-M vector per row",
                        ),
                );
                None
            }
        }
    }

    /// Columns `start..end` of `v`, checked against its width where both are known.
    pub(crate) fn slice_cols(&mut self, v: Value, start: Dim, end: Dim, span: Span) -> Option<Value> {
        let cols = self.block.ty(v).shape.cols.clone();
        let len = match end.sub(&start) {
            Ok(len) => len,
            Err(err) => {
                self.diagnostics.push(Diagnostic::error("E0305", "invalid slice").with_primary(span, err.to_string()));
                return None;
            }
        };
        let in_range = match (start.as_const(), end.as_const(), cols.as_const()) {
            (Some(s), Some(e), Some(c)) => 0 <= s && s < e && e <= c,
            (Some(s), Some(e), None) => 0 <= s && s < e,
            _ => len.as_const().is_none_or(|l| l > 0),
        };
        let symbolic_overflow = end != cols && cols.sub(&end).ok().and_then(|d| d.as_const()).is_some_and(|d| d < 0);
        if !in_range || symbolic_overflow {
            self.diagnostics.push(
                Diagnostic::error("E0305", format!("column slice {start}..{end} is out of range"))
                    .with_primary(span, format!("the tensor has {cols} columns"))
                    .with_help("a slice `a:b` needs 0 <= a < b <= the number of columns"),
            );
            return None;
        }
        self.emit(Inst::SliceCols { arg: v, start, len, step: 1 }, span)
    }
}

fn binary_op(op: BinOp) -> BinaryOp {
    match op {
        BinOp::Add => BinaryOp::Add,
        BinOp::Sub => BinaryOp::Sub,
        BinOp::Mul | BinOp::MatMul => BinaryOp::Mul,
        BinOp::Div => BinaryOp::Div,
        BinOp::Lt => BinaryOp::Lt,
        BinOp::Le => BinaryOp::Le,
        BinOp::Gt => BinaryOp::Gt,
        BinOp::Ge => BinaryOp::Ge,
        BinOp::Eq => BinaryOp::Eq,
        BinOp::Ne => BinaryOp::Ne,
    }
}
