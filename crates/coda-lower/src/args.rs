//! Matching call arguments against a builtin's signature.

use coda_diagnostics::{Diagnostic, Span};
use coda_syntax::ast::{Arg, ArgValue, Expr, ExprKind};

/// One formal parameter of a builtin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Formal {
    pub(crate) name: &'static str,
    pub(crate) required: bool,
    /// Whether it may be given by position (otherwise keyword only).
    pub(crate) positional: bool,
}

/// A required positional parameter.
pub(crate) const fn req(name: &'static str) -> Formal {
    Formal { name, required: true, positional: true }
}

/// An optional parameter that may be given by position.
pub(crate) const fn opt(name: &'static str) -> Formal {
    Formal { name, required: false, positional: true }
}

/// An optional keyword-only parameter.
pub(crate) const fn kw(name: &'static str) -> Formal {
    Formal { name, required: false, positional: false }
}

/// Arguments matched to formals, by formal index.
pub(crate) struct Matched<'a> {
    pub(crate) slots: Vec<Option<&'a ArgValue>>,
    pub(crate) spans: Vec<Span>,
}

impl<'a> Matched<'a> {
    /// The expression in slot `i`, if given as an expression.
    pub(crate) fn expr(&self, i: usize) -> Option<&'a Expr> {
        match self.slots.get(i).copied().flatten() {
            Some(ArgValue::Expr(e)) => Some(e),
            _ => None,
        }
    }

    /// Whether slot `i` was given.
    pub(crate) fn given(&self, i: usize) -> bool {
        self.slots.get(i).copied().flatten().is_some()
    }
}

/// Matches `args` to `formals`, reporting arity and keyword errors.
pub(crate) fn match_args<'a>(
    function: &str,
    call_span: Span,
    args: &'a [Arg],
    formals: &[Formal],
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Matched<'a>> {
    let mut slots: Vec<Option<&'a ArgValue>> = vec![None; formals.len()];
    let mut spans = vec![call_span; formals.len()];
    let mut next_positional = 0;
    let mut ok = true;
    for arg in args {
        let index = match &arg.name {
            None => {
                let index =
                    formals.iter().enumerate().skip(next_positional).find(|(_, f)| f.positional).map(|(i, _)| i);
                match index {
                    Some(i) => {
                        next_positional = i + 1;
                        i
                    }
                    None => {
                        diagnostics.push(too_many(function, arg.span, formals));
                        ok = false;
                        continue;
                    }
                }
            }
            Some(name) => match formals.iter().position(|f| f.name == name.name) {
                Some(i) => i,
                None => {
                    diagnostics.push(unknown_keyword(function, &name.name, name.span, formals));
                    ok = false;
                    continue;
                }
            },
        };
        if slots[index].is_some() {
            diagnostics.push(
                Diagnostic::error("E0208", format!("`{}` is given twice", formals[index].name))
                    .with_primary(arg.span, "given again here"),
            );
            ok = false;
            continue;
        }
        if matches!(arg.value, ArgValue::Range(..)) && formals[index].name != "cols" {
            diagnostics.push(
                Diagnostic::error("E0208", format!("`{}` does not take a range", formals[index].name))
                    .with_primary(arg.span, "a range `a:b` is not allowed here"),
            );
            ok = false;
            continue;
        }
        slots[index] = Some(&arg.value);
        spans[index] = arg.span;
    }
    let missing: Vec<&str> =
        formals.iter().zip(&slots).filter(|(f, slot)| f.required && slot.is_none()).map(|(f, _)| f.name).collect();
    if !missing.is_empty() {
        diagnostics.push(missing_arguments(function, call_span, formals, &missing));
        ok = false;
    }
    ok.then_some(Matched { slots, spans })
}

/// One error for every required argument left out of a call.
fn missing_arguments(function: &str, call_span: Span, formals: &[Formal], missing: &[&str]) -> Diagnostic {
    let names: Vec<String> = missing.iter().map(|name| format!("`{name}`")).collect();
    let (title, label) = match names.as_slice() {
        [one] => (format!("`{function}` needs the argument {one}"), "missing an argument".to_string()),
        [init @ .., last] => (
            format!("`{function}` needs the arguments {} and {last}", init.join(", ")),
            format!("missing {} arguments", names.len()),
        ),
        [] => (format!("`{function}` needs more arguments"), "missing arguments".to_string()),
    };
    let help = format!("the signature is {}", signature(function, formals));
    Diagnostic::error("E0208", title).with_primary(call_span, label).with_help(help)
}

fn too_many(function: &str, span: Span, formals: &[Formal]) -> Diagnostic {
    Diagnostic::error("E0208", format!("too many arguments to `{function}`"))
        .with_primary(span, "this argument has no parameter")
        .with_help(format!("the signature is {}", signature(function, formals)))
}

fn unknown_keyword(function: &str, name: &str, span: Span, formals: &[Formal]) -> Diagnostic {
    let diagnostic = Diagnostic::error("E0208", format!("`{function}` has no parameter `{name}`"))
        .with_primary(span, "unknown keyword");
    let takes_axis = formals.iter().any(|f| f.name == "axis");
    match name {
        "dim" if takes_axis => diagnostic.with_help(format!(
            "`.coda` names PyTorch's `dim` `axis`: write `axis=…`; the signature is {}",
            signature(function, formals)
        )),
        "keepdim" if takes_axis => {
            diagnostic.with_help(format!("{}: leave `keepdim` out", crate::pytorch::KEEPS_ROW_AXIS))
        }
        _ => diagnostic.with_help(format!("the signature is {}", signature(function, formals))),
    }
}

/// `f(x, g, eps=…)` for help messages.
pub(crate) fn signature(function: &str, formals: &[Formal]) -> String {
    let parts: Vec<String> =
        formals.iter().map(|f| if f.required { f.name.to_string() } else { format!("{}=…", f.name) }).collect();
    format!("`{function}({})`", parts.join(", "))
}

/// A literal number, possibly negated.
pub(crate) fn literal(expr: &Expr) -> Option<f64> {
    match &expr.kind {
        ExprKind::Number(text) => text.parse::<f64>().ok().filter(|v| v.is_finite()),
        ExprKind::Neg(inner) => literal(inner).map(|v| -v),
        _ => None,
    }
}

/// A bare name used as a keyword value (`style=half`).
pub(crate) fn word(expr: &Expr) -> Option<&str> {
    match &expr.kind {
        ExprKind::Name(ident) => Some(ident.name.as_str()),
        _ => None,
    }
}
