//! Dimension scopes and the evaluation of dimension expressions.
//!
//! `dim M` declares a symbolic dimension bound at run time; `dim D = 4096`
//! a named constant, substituted wherever it is used. Dimension expressions
//! allow integers, dimension names, `+ - *`, exact `/` by a constant and
//! parentheses.

use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Dim, DimDef};
use coda_syntax::ast::{BinOp, DimDecl, Expr, ExprKind};

/// One declared dimension.
#[derive(Debug, Clone)]
pub(crate) struct DimEntry {
    pub(crate) name: String,
    /// The constant value, or the symbol itself.
    pub(crate) value: Dim,
    pub(crate) constant: Option<i64>,
    pub(crate) span: Span,
}

/// The dimensions visible at one point, in declaration order.
#[derive(Debug, Clone, Default)]
pub(crate) struct DimScope {
    entries: Vec<DimEntry>,
    /// Position of each name in `entries`, so lookups stay O(1) in huge files.
    index: std::collections::HashMap<String, usize>,
    /// Names whose declaration failed: uses are silently skipped, since the
    /// declaration's error already explains them.
    poisoned: std::collections::HashSet<String>,
    /// Values the embedder fixes for declared dims ([`crate::lower_with`]):
    /// each replaces its declaration's value, and later dims defined from it
    /// follow.
    overrides: std::sync::Arc<std::collections::BTreeMap<String, i64>>,
}

impl DimScope {
    /// An empty scope in which the dims named in `overrides` take those values.
    pub(crate) fn with_overrides(overrides: std::collections::BTreeMap<String, i64>) -> DimScope {
        DimScope { overrides: std::sync::Arc::new(overrides), ..DimScope::default() }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&DimEntry> {
        self.index.get(name).and_then(|&i| self.entries.get(i))
    }

    fn insert(&mut self, entry: DimEntry) {
        self.index.insert(entry.name.clone(), self.entries.len());
        self.entries.push(entry);
    }

    /// The dims in the IR's form, for a block's header.
    pub(crate) fn defs(&self) -> Vec<DimDef> {
        // An alias of an expression over symbols (`dim Q = 2*M`) is substituted
        // where it is used and is not a run-time binding of its own.
        self.entries
            .iter()
            .filter(|e| e.constant.is_some() || e.value == Dim::symbol(&e.name))
            .map(|e| DimDef { name: e.name.clone(), value: e.constant })
            .collect()
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    /// Declares `dim NAME [= value]`, reporting redefinitions and bad values.
    pub(crate) fn declare(&mut self, decl: &DimDecl, diagnostics: &mut Vec<Diagnostic>) {
        let name = &decl.name.name;
        if let Some(previous) = self.get(name) {
            diagnostics.push(
                Diagnostic::error("E0106", format!("dimension `{name}` is declared twice"))
                    .with_primary(decl.name.span, "declared again here")
                    .with_secondary(previous.span, "first declared here"),
            );
            return;
        }
        let (value, constant) = match (self.overrides.get(name), &decl.value) {
            // Positive by `lower_with`'s check.
            (Some(&fixed), _) => (Dim::constant(fixed), Some(fixed)),
            (None, None) => (Dim::symbol(name), None),
            (None, Some(expr)) => {
                let Some(dim) = self.eval(expr, diagnostics) else {
                    self.poisoned.insert(name.clone());
                    return;
                };
                match dim.as_const() {
                    Some(c) if c > 0 => (dim, Some(c)),
                    Some(c) => {
                        diagnostics.push(
                            Diagnostic::error("E0105", format!("dimension `{name}` must be positive"))
                                .with_primary(expr.span, format!("this is {c}")),
                        );
                        self.poisoned.insert(name.clone());
                        return;
                    }
                    // `dim Q = 2*M` names an expression over symbols: keep it symbolic.
                    None => (dim, None),
                }
            }
        };
        // A dim defined as an expression over symbols (`dim Q = 2*M`) is
        // substituted like a constant and has `constant: None`.
        self.insert(DimEntry { name: name.clone(), value, constant, span: decl.name.span });
    }

    /// Evaluates a dimension expression, reporting what is not one.
    pub(crate) fn eval(&self, expr: &Expr, diagnostics: &mut Vec<Diagnostic>) -> Option<Dim> {
        match &expr.kind {
            ExprKind::Number(text) => match text.parse::<i64>() {
                Ok(v) if v >= 0 => Some(Dim::constant(v)),
                _ => {
                    diagnostics.push(
                        Diagnostic::error("E0105", format!("`{text}` is not a valid dimension"))
                            .with_primary(expr.span, "dimensions are non-negative integers below 2^63"),
                    );
                    None
                }
            },
            ExprKind::Name(ident) => match self.get(&ident.name) {
                Some(entry) => Some(entry.value.clone()),
                None if self.poisoned.contains(&ident.name) => None,
                None => {
                    diagnostics.push(unknown_dim(&ident.name, ident.span));
                    None
                }
            },
            ExprKind::Binary { op, lhs, rhs } => {
                let a = self.eval(lhs, diagnostics);
                let b = self.eval(rhs, diagnostics);
                let (a, b) = (a?, b?);
                let result = match op {
                    BinOp::Add => a.add(&b),
                    BinOp::Sub => a.sub(&b),
                    BinOp::Mul => a.mul(&b),
                    BinOp::Div => a.div_exact(&b),
                    _ => {
                        diagnostics.push(not_a_dim(expr.span));
                        return None;
                    }
                };
                match result {
                    Ok(d) => Some(d),
                    Err(err) => {
                        diagnostics.push(
                            Diagnostic::error("E0105", "invalid dimension arithmetic")
                                .with_primary(expr.span, err.to_string()),
                        );
                        None
                    }
                }
            }
            ExprKind::Error => None,
            _ => {
                diagnostics.push(not_a_dim(expr.span));
                None
            }
        }
    }
}

fn not_a_dim(span: Span) -> Diagnostic {
    Diagnostic::error("E0105", "not a dimension expression")
        .with_primary(span, "expected integers and dimension names combined with + - * /")
}

/// The diagnostic for a name used as a dimension without a `dim` declaration.
pub(crate) fn unknown_dim(name: &str, span: Span) -> Diagnostic {
    Diagnostic::error("E0103", format!("unknown dimension `{name}`"))
        .with_primary(span, "not declared")
        .with_help(format!("declare it before use: `dim {name}` (bound at run time) or `dim {name} = 4096`"))
}
