//! Node constructors called by the grammar's actions.

use crate::ast::{Arg, BinOp, Expr, ExprKind, GradDecl, Ident};
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

/// `base.name` or `base.name(args)`: `.T` transposes; anything else is a
/// [`ExprKind::Member`] for the checker to explain.
pub(crate) fn member(
    notes: &mut Vec<Diagnostic>,
    base: Expr,
    name: Ident,
    args: Option<Vec<Arg>>,
    l: usize,
    r: usize,
) -> Expr {
    let kind = match args {
        None if name.name == "T" => ExprKind::Transpose(Box::new(base)),
        args => ExprKind::Member { base: Box::new(base), name, args },
    };
    node(notes, kind, l, r)
}

/// A `grad` declaration, after checking the two words the grammar reads as names.
pub(crate) fn grad_decl(notes: &mut Vec<Diagnostic>, keyword: Ident, wrt: Ident, decl: GradDecl) -> GradDecl {
    if keyword.name != "grad" {
        notes.push(
            Diagnostic::error("E0002", format!("unexpected name `{}`", keyword.name))
                .with_primary(keyword.span, "not expected here")
                .with_help("a top-level item starts with `dim`, `block`, `kernel` or `grad`"),
        );
    } else if wrt.name != "wrt" {
        notes.push(
            Diagnostic::error("E0002", format!("unexpected name `{}`", wrt.name))
                .with_primary(wrt.span, "expected `wrt`")
                .with_help("write `grad NAME = BLOCK wrt (inputs)`, e.g. `grad ffn_grad = ffn wrt (x1, w_gu)`"),
        );
    }
    decl
}
