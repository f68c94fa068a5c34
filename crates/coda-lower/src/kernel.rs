//! The explicit `kernel` form: one GEMM plus an epilogue written with the
//! epilogue primitives directly.
//!
//! Primitives (each lowers to ordinary IR instructions):
//! - loads: `tile(x)` (a full `[M, N]` operand), `row(v)` (a length-M vector,
//!   one value per row), `col(v)` (a length-N vector, one per column),
//!   `scalar(s)`;
//! - pair operations on adjacent columns: `even(t)`, `odd(t)` (columns 2j and
//!   2j+1, half width) and `interleave(a, b)`;
//! - reductions to per-row / per-column results, which the GPU computes as
//!   deterministic per-tile partials: `row_sum`, `row_sumsq`, `row_max`,
//!   `row_lse`, `row_pick(t, index)` and `col_sum`.
//!
//! Rules checked here: exactly one matmul, whose operands are parameters;
//! every other parameter is read through a load primitive.

use crate::args::{match_args, req};
use crate::block::Lowerer;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Axis, BinaryOp, BlockKind, Dim, Inst, ReduceOp, ShapeClass, Value};
use coda_syntax::ast::{self, Arg, Ident};

const LOADS: [&str; 4] = ["tile", "row", "col", "scalar"];
const OTHERS: [&str; 9] =
    ["even", "odd", "interleave", "row_sum", "row_sumsq", "row_max", "row_lse", "row_pick", "col_sum"];

/// Whether `name` is a kernel primitive.
pub(crate) fn is_primitive(name: &str) -> bool {
    LOADS.contains(&name) || OTHERS.contains(&name)
}

/// The error for a parameter named directly inside a kernel's epilogue.
pub(crate) fn implicit_load(name: &str, span: Span) -> Diagnostic {
    Diagnostic::error("E0401", format!("in a kernel, `{name}` must be loaded explicitly"))
        .with_primary(span, "read without a load primitive")
        .with_help(format!(
            "say how the epilogue reads it: `tile({name})`, `row({name})`, `col({name})` or `scalar({name})`"
        ))
}

impl Lowerer<'_> {
    /// Lowers a kernel primitive call.
    pub(crate) fn kernel_primitive(&mut self, callee: &Ident, args: &[Arg], span: Span) -> Option<Value> {
        let name = callee.name.as_str();
        if self.block.kind != BlockKind::Kernel {
            self.diagnostics.push(
                Diagnostic::error("E0404", format!("`{name}` is a kernel primitive"))
                    .with_primary(callee.span, "only allowed in a `kernel` body")
                    .with_help("in a `block`, use tensors directly and let the compiler place the work"),
            );
            return None;
        }
        if LOADS.contains(&name) {
            return self.load(name, args, span);
        }
        if name == "interleave" {
            let m = match_args(name, span, args, &[req("even"), req("odd")], self.diagnostics)?;
            let a = self.lower_expr(m.expr(0)?);
            let b = self.lower_expr(m.expr(1)?);
            let (a, b) = self.broadcast_pair(a?, b?, m.spans[0], m.spans[1], span)?;
            return self.emit(Inst::Interleave { even: a, odd: b }, span);
        }
        if name == "row_pick" {
            let m = match_args(name, span, args, &[req("t"), req("index")], self.diagnostics)?;
            let t = self.lower_expr(m.expr(0)?);
            let saved = std::mem::replace(&mut self.param_use_allowed, true);
            let index = self.lower_expr(m.expr(1)?);
            self.param_use_allowed = saved;
            return self.take_values(t?, index?, m.spans[1], span);
        }
        let m = match_args(name, span, args, &[req("t")], self.diagnostics)?;
        let t = self.lower_expr(m.expr(0)?)?;
        self.numeric(t, m.spans[0])?;
        match name {
            "even" | "odd" => self.pair_half(t, name == "odd", m.spans[0], span),
            "row_sumsq" => {
                let square = self.binary(BinaryOp::Mul, t, t, span, span, span)?;
                self.emit(Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Cols, arg: square }, span)
            }
            "col_sum" => self.emit(Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Rows, arg: t }, span),
            _ => {
                let op = match name {
                    "row_max" => ReduceOp::Max,
                    "row_lse" => ReduceOp::LogSumExp,
                    _ => ReduceOp::Sum,
                };
                self.emit(Inst::Reduce { op, axis: Axis::Cols, arg: t }, span)
            }
        }
    }

    fn load(&mut self, name: &str, args: &[Arg], span: Span) -> Option<Value> {
        let m = match_args(name, span, args, &[req("x")], self.diagnostics)?;
        let saved = std::mem::replace(&mut self.param_use_allowed, true);
        let x = self.lower_expr(m.expr(0)?);
        self.param_use_allowed = saved;
        let x = x?;
        let shape = self.block.ty(x).shape.clone();
        let class = shape.class();
        let ok = match name {
            "tile" => class == ShapeClass::Tile,
            "scalar" => class == ShapeClass::Scalar,
            _ => matches!(class, ShapeClass::ColVector | ShapeClass::RowVector),
        };
        if !ok {
            let wanted = match name {
                "tile" => "a [M, N] tensor",
                "scalar" => "a scalar",
                _ => "a vector",
            };
            self.diagnostics.push(
                Diagnostic::error("E0403", format!("`{name}` loads {wanted}"))
                    .with_primary(m.spans[0], format!("this is {}", self.show_shape(&shape))),
            );
            return None;
        }
        match (name, class) {
            ("row", ShapeClass::ColVector) | ("col", ShapeClass::RowVector) => {
                self.emit(Inst::Transpose { arg: x }, span)
            }
            _ => Some(x),
        }
    }

    /// Columns 2j (`odd = false`) or 2j+1 of a tile: one member of each adjacent pair.
    fn pair_half(&mut self, t: Value, odd: bool, arg_span: Span, span: Span) -> Option<Value> {
        let cols = self.block.ty(t).shape.cols.clone();
        let Ok(half) = cols.div_exact(&Dim::constant(2)) else {
            self.diagnostics.push(
                Diagnostic::error("E0302", "pair operations need an even number of columns")
                    .with_primary(arg_span, format!("this has {cols} columns")),
            );
            return None;
        };
        let start = Dim::constant(i64::from(odd));
        self.emit(Inst::SliceCols { arg: t, start, len: half, step: 2 }, span)
    }
}

/// Checks the rules of the kernel form once the body is lowered.
pub(crate) fn check_kernel_block(lowerer: &mut Lowerer<'_>, ast_block: &ast::Block) {
    let matmuls: Vec<(Value, Span)> = lowerer
        .block
        .insts
        .iter()
        .filter(|(_, inst)| matches!(inst, Inst::MatMul { .. }))
        .map(|(v, _)| (v, lowerer.block.insts.span(v)))
        .collect();
    if matmuls.len() != 1 {
        let mut diagnostic =
            Diagnostic::error("E0402", format!("a kernel has exactly one matmul, this one has {}", matmuls.len()))
                .with_primary(ast_block.name.span, "in this kernel")
                .with_help("split the work into several kernels, or write a `block` and let the compiler partition it");
        for (_, span) in matmuls.iter().skip(1) {
            diagnostic = diagnostic.with_secondary(*span, "another matmul");
        }
        lowerer.diagnostics.push(diagnostic);
        return;
    }
    let (matmul, span) = matmuls[0];
    for operand in lowerer.block.inst(matmul).operands() {
        if !matches!(lowerer.block.inst(operand), Inst::Param(_)) {
            lowerer.diagnostics.push(
                Diagnostic::error("E0402", "a kernel's matmul operands must be inputs")
                    .with_primary(span, "an operand is computed")
                    .with_help("the mainloop reads A and B from memory; compute the operand in an earlier kernel"),
            );
        }
    }
}
