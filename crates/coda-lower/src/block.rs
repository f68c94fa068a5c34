//! Lowering of one block: parameters, statements and outputs.

use crate::dims::DimScope;
use crate::names::suggest;
use coda_diagnostics::{Diagnostic, SourceFile, Span};
use coda_ir::{Block, BlockKind, DType, Dim, Inst, Output, Shape, Tensor, Value};
use coda_syntax::ast;
use std::collections::HashMap;

/// What a name in a body refers to.
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub(crate) value: Value,
    pub(crate) span: Span,
    pub(crate) is_param: bool,
    pub(crate) used: bool,
}

/// Source text of a parameter, for messages that name the dims that disagree.
#[derive(Debug, Clone)]
pub(crate) struct ParamText {
    /// `x: bf16[M, K]`
    pub(crate) decl: String,
    /// The text of the row and column dims (`"1"` for a missing axis).
    pub(crate) rows: String,
    pub(crate) cols: String,
}

/// A declared output and whether it has been assigned.
#[derive(Debug, Clone)]
pub(crate) struct DeclaredOutput {
    pub(crate) tensor: Tensor,
    pub(crate) assigned: Option<Span>,
}

/// State while lowering one block.
pub(crate) struct Lowerer<'a> {
    pub(crate) source: &'a SourceFile,
    pub(crate) dims: DimScope,
    pub(crate) block: Block,
    pub(crate) env: HashMap<String, Binding>,
    pub(crate) param_texts: Vec<ParamText>,
    pub(crate) outputs: Vec<DeclaredOutput>,
    pub(crate) diagnostics: &'a mut Vec<Diagnostic>,
    /// In a `kernel`, whether a parameter may be named right now (inside a
    /// load primitive or as a GEMM operand).
    pub(crate) param_use_allowed: bool,
    /// Inputs and outputs whose declaration failed; their uses are not reported again.
    pub(crate) poisoned: std::collections::HashSet<String>,
}

/// Lowers a block; errors go to `diagnostics` (the caller drops a block with errors).
pub(crate) fn lower_block(
    ast_block: &ast::Block,
    file_dims: &DimScope,
    source: &SourceFile,
    diagnostics: &mut Vec<Diagnostic>,
) -> Block {
    let kind = match ast_block.kind {
        ast::BlockKind::Block => BlockKind::Block,
        ast::BlockKind::Kernel => BlockKind::Kernel,
    };
    let mut dims = file_dims.clone();
    for stmt in &ast_block.body {
        if let ast::Stmt::Dim(decl) = stmt {
            dims.declare(decl, diagnostics);
        }
    }
    let mut lowerer = Lowerer {
        source,
        block: Block::new(ast_block.name.name.clone(), kind, ast_block.span),
        dims,
        env: HashMap::new(),
        param_texts: Vec::new(),
        outputs: Vec::new(),
        diagnostics,
        param_use_allowed: kind == BlockKind::Block,
        poisoned: std::collections::HashSet::new(),
    };
    lowerer.block.dims = lowerer.dims.defs();
    lowerer.declare_params(&ast_block.params);
    lowerer.declare_outputs(&ast_block.outputs);
    for stmt in &ast_block.body {
        lowerer.lower_stmt(stmt);
    }
    lowerer.finish(ast_block);
    lowerer.block
}

impl Lowerer<'_> {
    /// Resolves a declared type into a dtype and a canonical shape.
    fn tensor_type(&mut self, ty: &ast::TypeExpr) -> Option<(DType, Shape, u8, Vec<String>)> {
        let dtype = match DType::from_name(&ty.dtype.name) {
            Some(dtype) => dtype,
            None => {
                let hint = suggest(&ty.dtype.name, ["bf16", "f16", "f32", "i32", "e4m3", "e5m2"].into_iter());
                let help = match hint {
                    Some(h) => format!("did you mean `{h}`? element types are bf16, f16, f32, i32, e4m3 and e5m2"),
                    None => "element types are bf16, f16, f32, i32, e4m3 and e5m2".to_string(),
                };
                self.diagnostics.push(
                    Diagnostic::error("E0101", format!("unknown element type `{}`", ty.dtype.name))
                        .with_primary(ty.dtype.span, "not a type")
                        .with_help(help),
                );
                return None;
            }
        };
        let mut dims = Vec::new();
        for expr in &ty.dims {
            dims.push(self.dims.eval(expr, self.diagnostics));
        }
        let texts: Vec<String> = ty.dims.iter().map(|e| self.source.slice(e.span).to_string()).collect();
        let dims: Option<Vec<Dim>> = dims.into_iter().collect();
        let dims = dims?;
        for (dim, expr) in dims.iter().zip(&ty.dims) {
            if let Some(value) = dim.as_const().filter(|v| *v <= 0) {
                self.diagnostics.push(
                    Diagnostic::error("E0105", "a tensor dimension must be positive")
                        .with_primary(expr.span, format!("this is {value}")),
                );
                return None;
            }
        }
        let one = || Dim::constant(1);
        let shape = match dims.as_slice() {
            [] => Shape::scalar(),
            [n] => Shape::new(one(), n.clone()),
            [m, n] => Shape::new(m.clone(), n.clone()),
            _ => {
                self.diagnostics.push(
                    Diagnostic::error("E0104", format!("tensors have at most 2 axes, this one has {}", dims.len()))
                        .with_primary(ty.span, "too many axes")
                        .with_help("flatten leading axes into the token axis: `[B*T, D]` becomes `[M, D]`"),
                );
                return None;
            }
        };
        let rank = u8::try_from(dims.len()).unwrap_or(2);
        Some((dtype, shape, rank, texts))
    }

    fn declare_params(&mut self, params: &[ast::Param]) {
        for param in params {
            if self.check_fresh(&param.name) {
                continue;
            }
            let Some((dtype, shape, rank, texts)) = self.tensor_type(&param.ty) else {
                self.poisoned.insert(param.name.name.clone());
                continue;
            };
            let index = self.block.params.len();
            self.block.params.push(Tensor { name: param.name.name.clone(), dtype, shape, rank, span: param.span });
            let (rows, cols) = match texts.as_slice() {
                [] => ("1".to_string(), "1".to_string()),
                [n] => ("1".to_string(), n.clone()),
                [m, n, ..] => (m.clone(), n.clone()),
            };
            self.param_texts.push(ParamText { decl: self.source.slice(param.span).to_string(), rows, cols });
            let value = self.emit(Inst::Param(index), param.span);
            if let Some(value) = value {
                self.block.set_name(value, &param.name.name);
                self.env.insert(
                    param.name.name.clone(),
                    Binding { value, span: param.name.span, is_param: true, used: false },
                );
            }
        }
    }

    fn declare_outputs(&mut self, outputs: &[ast::Param]) {
        for output in outputs {
            if self.check_fresh(&output.name) {
                continue;
            }
            let Some((dtype, shape, rank, _)) = self.tensor_type(&output.ty) else {
                self.poisoned.insert(output.name.name.clone());
                continue;
            };
            let tensor = Tensor { name: output.name.name.clone(), dtype, shape, rank, span: output.span };
            self.outputs.push(DeclaredOutput { tensor, assigned: None });
        }
    }

    /// Reports a name that is already taken; returns true if it was.
    pub(crate) fn check_fresh(&mut self, name: &ast::Ident) -> bool {
        let previous = self
            .env
            .get(&name.name)
            .map(|b| b.span)
            .or_else(|| self.outputs.iter().find(|o| o.tensor.name == name.name).map(|o| o.tensor.span))
            .or_else(|| self.dims.get(&name.name).map(|d| d.span));
        match previous {
            Some(span) => {
                self.diagnostics.push(
                    Diagnostic::error("E0206", format!("`{}` is already defined", name.name))
                        .with_primary(name.span, "defined again here")
                        .with_secondary(span, "first defined here")
                        .with_help("every name in a block is defined once; pick a new name"),
                );
                true
            }
            None => false,
        }
    }

    fn lower_stmt(&mut self, stmt: &ast::Stmt) {
        match stmt {
            ast::Stmt::Let { name, value, .. } => {
                let lowered = self.lower_expr(value);
                if lowered.is_none() {
                    self.mark_used(value);
                }
                if self.check_fresh(name) {
                    return;
                }
                match lowered {
                    Some(v) => {
                        self.block.set_name(v, &name.name);
                        self.env.insert(
                            name.name.clone(),
                            Binding { value: v, span: name.span, is_param: false, used: false },
                        );
                    }
                    // The value's error is reported; the binding's uses
                    // would only repeat it as unknown names.
                    None => {
                        self.poisoned.insert(name.name.clone());
                    }
                }
            }
            ast::Stmt::Assign { name, value, accumulate, span } => {
                let lowered = self.lower_expr(value);
                if lowered.is_none() {
                    self.mark_used(value);
                }
                self.assign_output(name, lowered, *accumulate, *span, value.span);
            }
            ast::Stmt::Dim(_) | ast::Stmt::Error(_) => {}
        }
    }

    /// Counts every name an expression mentions as used. An expression
    /// that failed to check may stop before it looks at its arguments
    /// (an unknown function), and its inputs are then not unused: the
    /// error is the one thing to fix.
    fn mark_used(&mut self, expr: &ast::Expr) {
        let mut stack = vec![expr];
        while let Some(expr) = stack.pop() {
            match &expr.kind {
                ast::ExprKind::Name(ident) => {
                    if let Some(binding) = self.env.get_mut(&ident.name) {
                        binding.used = true;
                    }
                }
                ast::ExprKind::Binary { lhs, rhs, .. } => stack.extend([&**lhs, &**rhs]),
                ast::ExprKind::Neg(inner) | ast::ExprKind::Transpose(inner) => stack.push(inner),
                ast::ExprKind::Call { args, .. } => {
                    for arg in args {
                        match &arg.value {
                            ast::ArgValue::Expr(e) => stack.push(e),
                            ast::ArgValue::Range(a, b) => stack.extend([a, b]),
                        }
                    }
                }
                ast::ExprKind::Index { base, items } => {
                    stack.push(base);
                    for item in items {
                        match item {
                            ast::IndexItem::Slice { start, end, .. } => stack.extend(start.iter().chain(end)),
                            ast::IndexItem::Single(e) => stack.push(e),
                            ast::IndexItem::NewAxis(_) => {}
                        }
                    }
                }
                ast::ExprKind::Member { base, args, .. } => {
                    stack.push(base);
                    for arg in args.iter().flatten() {
                        match &arg.value {
                            ast::ArgValue::Expr(e) => stack.push(e),
                            ast::ArgValue::Range(a, b) => stack.extend([a, b]),
                        }
                    }
                }
                ast::ExprKind::List(items) => stack.extend(items),
                ast::ExprKind::Number(_) | ast::ExprKind::Str(_) | ast::ExprKind::Error => {}
            }
        }
    }

    fn assign_output(
        &mut self,
        name: &ast::Ident,
        value: Option<Value>,
        accumulate: bool,
        span: Span,
        value_span: Span,
    ) {
        let Some(index) = self.outputs.iter().position(|o| o.tensor.name == name.name) else {
            if self.poisoned.contains(&name.name) {
                return;
            }
            let is_let = self.env.contains_key(&name.name);
            let mut diagnostic = Diagnostic::error("E0204", format!("`{}` is not an output of this block", name.name))
                .with_primary(name.span, "assigned here");
            diagnostic = if is_let {
                diagnostic.with_help("bindings are immutable; use a new `let` name")
            } else {
                diagnostic.with_help(format!(
                    "bind a value with `let {} = …`, or declare `{}` after `->`",
                    name.name, name.name
                ))
            };
            self.diagnostics.push(diagnostic);
            // Its later uses read what the author meant to bind: reporting
            // them as unknown names would only repeat this error.
            if !is_let {
                self.poisoned.insert(name.name.clone());
            }
            return;
        };
        if let Some(previous) = self.outputs[index].assigned {
            self.diagnostics.push(
                Diagnostic::error("E0204", format!("output `{}` is assigned twice", name.name))
                    .with_primary(name.span, "assigned again here")
                    .with_secondary(previous, "first assigned here"),
            );
            return;
        }
        self.outputs[index].assigned = Some(span);
        let Some(value) = value else { return };
        let declared = self.outputs[index].tensor.clone();
        let got = self.block.ty(value).shape.clone();
        let fits_vector = declared.rank == 1 && got.transposed() == declared.shape;
        let value = if got == declared.shape {
            Some(value)
        } else if fits_vector || (declared.rank == 0 && got == Shape::scalar()) {
            // A length-M vector output stores a per-row vector `[M, 1]` as a flat array.
            self.outputs[index].tensor.shape = got.clone();
            Some(value)
        } else {
            self.diagnostics.push(
                Diagnostic::error("E0304", format!("output `{}` has the wrong shape", name.name))
                    .with_primary(value_span, format!("this value is {}", self.show_shape(&got)))
                    .with_secondary(declared.span, format!("declared as {}", self.show_shape(&declared.shape))),
            );
            None
        };
        if let Some(value) = value {
            if self.block.ty(value).dtype == DType::Bool {
                self.diagnostics.push(
                    Diagnostic::error("E0303", "a comparison result cannot be stored")
                        .with_primary(value_span, "this is a bool")
                        .with_help("convert it with `where(cond, 1.0, 0.0)`"),
                );
                return;
            }
            let tensor = self.outputs[index].tensor.clone();
            self.block.outputs.push(Output { tensor, value, accumulate, span });
        }
    }

    fn finish(&mut self, ast_block: &ast::Block) {
        for output in &self.outputs {
            if output.assigned.is_none() {
                self.diagnostics.push(
                    Diagnostic::error("E0203", format!("output `{}` is never assigned", output.tensor.name))
                        .with_primary(output.tensor.span, "declared here")
                        .with_help(format!("assign it in the body: `{} = …`", output.tensor.name)),
                );
            }
        }
        // Keep outputs in declaration order whatever the order of assignment.
        let order: Vec<&str> = self.outputs.iter().map(|o| o.tensor.name.as_str()).collect();
        self.block.outputs.sort_by_key(|o| order.iter().position(|n| *n == o.tensor.name));
        let mut unused: Vec<(&String, &Binding)> = self.env.iter().filter(|(_, b)| !b.used).collect();
        unused.sort_by_key(|(_, b)| b.span);
        for (name, binding) in unused {
            let (code, what) = if binding.is_param { ("W0002", "input") } else { ("W0001", "binding") };
            self.diagnostics.push(
                Diagnostic::warning(code, format!("unused {what} `{name}`")).with_primary(binding.span, "never used"),
            );
        }
        if ast_block.kind == ast::BlockKind::Kernel {
            crate::kernel::check_kernel_block(self, ast_block);
        }
    }

    /// Appends an instruction; a typing failure here is a compiler bug, reported as such.
    pub(crate) fn emit(&mut self, inst: Inst, span: Span) -> Option<Value> {
        match self.block.push(inst, span) {
            Ok(v) => Some(v),
            Err(err) => {
                self.diagnostics.push(
                    Diagnostic::error("E9000", "internal compiler error: this is a bug in codac")
                        .with_primary(span, format!("the lowering built an ill-typed instruction: {err}")),
                );
                None
            }
        }
    }

    /// A shape as the user would write it: `[M, 4096]`, `[4096]` for a column vector.
    pub(crate) fn show_shape(&self, shape: &Shape) -> String {
        match shape.class() {
            coda_ir::ShapeClass::Scalar => "a scalar".to_string(),
            coda_ir::ShapeClass::ColVector => format!("a per-column vector [{}]", shape.cols),
            coda_ir::ShapeClass::RowVector => format!("a per-row vector [{}, 1]", shape.rows),
            coda_ir::ShapeClass::Tile => format!("[{}, {}]", shape.rows, shape.cols),
        }
    }

    /// Describes one axis of a value for messages: `` `K = 4096` in `x: bf16[M, K]` ``.
    pub(crate) fn describe_axis(&self, value: Value, cols: bool) -> String {
        let mut value = value;
        let mut cols = cols;
        loop {
            match self.block.inst(value) {
                Inst::Transpose { arg } => {
                    value = *arg;
                    cols = !cols;
                }
                Inst::Cast { arg, .. } => value = *arg,
                _ => break,
            }
        }
        let shape = &self.block.ty(value).shape;
        let dim = if cols { &shape.cols } else { &shape.rows };
        if let Inst::Param(i) = self.block.inst(value) {
            if let Some(text) = self.param_texts.get(*i) {
                let written = if cols { &text.cols } else { &text.rows };
                let shown =
                    if *written == dim.to_string() { format!("`{dim}`") } else { format!("`{written} = {dim}`") };
                return format!("{shown} in `{}`", text.decl);
            }
        }
        format!("`{dim}`")
    }
}
