//! Node constructors called by the grammar's actions.

use crate::ast::{BinOp, Expr, ExprKind};
use coda_diagnostics::{Diagnostic, Span};

/// The deepest expression tree the parser builds; deeper ones become an error node.
pub(crate) const MAX_DEPTH: u32 = 200;

/// A span from lalrpop's byte locations.
pub(crate) fn sp(l: usize, r: usize) -> Span {
    Span::new(l, r)
}

/// Builds a node, replacing it by [`ExprKind::Error`] when it would be too deep.
pub(crate) fn node(notes: &mut Vec<Diagnostic>, kind: ExprKind, l: usize, r: usize) -> Expr {
    let expr = Expr::new(kind, sp(l, r));
    if expr.depth <= MAX_DEPTH {
        return expr;
    }
    let already_reported = notes.last().is_some_and(|d| d.code == "E0004");
    if !already_reported {
        notes.push(
            Diagnostic::error("E0004", "expression nested too deeply")
                .with_primary(expr.span, format!("more than {MAX_DEPTH} levels deep"))
                .with_help("split the expression with `let` bindings"),
        );
    }
    Expr::new(ExprKind::Error, expr.span)
}

/// Builds `lhs op rhs`.
pub(crate) fn binary(notes: &mut Vec<Diagnostic>, op: BinOp, lhs: Expr, rhs: Expr, l: usize, r: usize) -> Expr {
    node(notes, ExprKind::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) }, l, r)
}
