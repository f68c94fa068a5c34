//! PyTorch's spellings that the language does not have: methods
//! (`x.float()`, `x.pow(2).mean(-1, keepdim=True)`), attributes
//! (`x.shape`, `self.weight`), module prefixes (`torch.tanh(x)`,
//! `F.silu(x)`) and quoted options (`approximate="tanh"`). A user who copies
//! a layer from its modeling code gets one error per spelling, saying what
//! to write instead, rather than a cascade of parse errors.

use crate::block::Lowerer;
use crate::builtins::FUNCTIONS;
use crate::missing::instead_of;
use crate::names::suggest;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::Value;
use coda_syntax::ast::{Arg, ArgValue, Expr, ExprKind, Ident};

/// Names that start a module path in model code, not a tensor.
const MODULES: &[&str] = &["torch", "F", "nn", "functional", "math", "np", "numpy", "jnp", "jax"];

/// Reductions whose PyTorch methods take a dimension (`x.mean(-1, keepdim=True)`).
const REDUCTIONS: &[&str] = &["sum", "mean", "max", "amax", "logsumexp"];

/// Why a row reduction needs no `keepdim` (E0210's and E0208's helps).
pub(crate) const KEEPS_ROW_AXIS: &str =
    "a reduction over each row keeps the row axis (`[M, 1]`, as `keepdim=True` does)";

/// Functions over a row that PyTorch writes with `dim=` and `.coda` with `axis=`.
const ROW_FUNCTIONS: &[&str] = &["softmax", "log_softmax"];

impl Lowerer<'_> {
    /// Reports `base.name` or `base.name(args)` (an [`ExprKind::Member`])
    /// with what to write instead. Nothing inside it is reported again.
    pub(crate) fn member(&mut self, expr: &Expr) -> Option<Value> {
        let ExprKind::Member { base, name, args } = &expr.kind else { return None };
        let diagnostic = if path_root(base) == Some("self") {
            let w = &name.name;
            let help =
                format!("a weight or a setting is a block input: declare `{w}: bf16[…]` in the inputs and write `{w}`");
            Diagnostic::error("E0210", "no `self` in .coda")
                .with_primary(expr.span, "a module's attribute")
                .with_help(help)
        } else {
            match (module_path(base), args) {
                (Some(path), _) if !self.is_bound(&path[0]) => module_function(&path, name, args.as_deref(), expr.span),
                (_, Some(args)) => method(base, name, args, expr.span),
                (_, None) => attribute(name, expr.span),
            }
        };
        self.diagnostics.push(diagnostic);
        None
    }

    /// Reports the quoted string `text` at `span`: an argument of a call of
    /// `callee` (the value of `keyword`, or positional), or an expression
    /// of its own (`callee` `None`).
    pub(crate) fn string(&mut self, text: &str, span: Span, callee: Option<&Ident>, keyword: Option<&Ident>) {
        let help = match (callee.map(|c| c.name.as_str()), keyword.map(|k| k.name.as_str()), text) {
            (Some("gelu"), Some("approximate"), "tanh") => {
                "write `gelu_tanh(x)`: it is PyTorch's `gelu(x, approximate=\"tanh\")`".to_string()
            }
            (Some("gelu"), Some("approximate"), "none") => "write `gelu(x)`: it is the exact GELU".to_string(),
            (_, Some(k @ ("style" | "reduction")), _) if is_word(text) => format!("write `{k}={text}`, without quotes"),
            _ => "arguments are numbers, tensors or bare names, such as `style=half` or `reduction=mean`".to_string(),
        };
        self.diagnostics.push(
            Diagnostic::error("E0211", "no strings in .coda").with_primary(span, "a quoted string").with_help(help),
        );
    }

    /// Reports a Python list (`[a, b]`).
    pub(crate) fn list(&mut self, span: Span) {
        self.diagnostics.push(
            Diagnostic::error("E0210", "no lists in .coda").with_primary(span, "a list").with_help(
                "`concat(a, b, …)` joins tensors' columns; every other function takes its tensors one by one",
            ),
        );
    }

    /// Reports the first argument of `args` that is a quoted string; true if
    /// there was one.
    pub(crate) fn string_argument(&mut self, callee: &Ident, args: &[Arg]) -> bool {
        let found = args.iter().find_map(|arg| match &arg.value {
            ArgValue::Expr(Expr { kind: ExprKind::Str(text), span, .. }) => Some((text, *span, arg.name.as_ref())),
            _ => None,
        });
        match found {
            Some((text, span, keyword)) => {
                self.string(text, span, Some(callee), keyword);
                true
            }
            None => false,
        }
    }

    fn is_bound(&self, name: &str) -> bool {
        self.env.contains_key(name) || self.dims.get(name).is_some()
    }
}

/// `torch.nn.functional.gelu` as its names, if `expr` is a path of names.
fn module_path(expr: &Expr) -> Option<Vec<String>> {
    match &expr.kind {
        ExprKind::Name(ident) => Some(vec![ident.name.clone()]),
        ExprKind::Member { base, name, args: None } => {
            let mut path = module_path(base)?;
            path.push(name.name.clone());
            Some(path)
        }
        _ => None,
    }
}

/// The name a chain of members starts with.
fn path_root(expr: &Expr) -> Option<&str> {
    match &expr.kind {
        ExprKind::Name(ident) => Some(&ident.name),
        ExprKind::Member { base, .. } => path_root(base),
        _ => None,
    }
}

/// `torch.tanh(x)`, `F.silu(x)`: the function by its bare name.
fn module_function(path: &[String], name: &Ident, args: Option<&[Arg]>, span: Span) -> Diagnostic {
    let called = args.is_some();
    let full = format!("{}.{}", path.join("."), name.name);
    let known = MODULES.contains(&path[0].as_str());
    let title = if known { "no module prefixes in .coda" } else { "no attributes in .coda" };
    let diagnostic = Diagnostic::error("E0210", title).with_primary(span, format!("`{full}`"));
    let f = name.name.as_str();
    let joined = match args {
        Some([Arg { value: ArgValue::Expr(Expr { kind: ExprKind::List(items), .. }), .. }, ..])
            if matches!(f, "cat" | "concat" | "concatenate" | "hstack") =>
        {
            items.iter().map(render).collect::<Option<Vec<String>>>().map(|parts| parts.join(", "))
        }
        _ => None,
    };
    let help = if let Some(parts) = joined {
        format!("write `concat({parts})`: it joins columns (the last axis)")
    } else if let Some(cast) = dtype_of(f) {
        format!("`{full}` is the type `{cast}`: a cast is written `{cast}(x)`")
    } else if !called {
        format!("`{full}` is not a value in .coda: a tensor or a setting is a block input, a size a `dim`")
    } else if FUNCTIONS.contains(&f) {
        // `torch.sum(x, dim=-1)` is the method `x.sum(dim=-1)`, whose axis
        // `translate` writes; other functions keep their arguments.
        let as_method = match args {
            Some([Arg { name: None, value: ArgValue::Expr(x), .. }, rest @ ..])
                if REDUCTIONS.contains(&f) || ROW_FUNCTIONS.contains(&f) =>
            {
                translate(x, name, rest)
            }
            _ => None,
        };
        let call = as_method
            .or_else(|| args.and_then(render_args).map(|a| format!("{f}({a})")))
            .unwrap_or_else(|| format!("{f}(…)"));
        format!("write `{call}`: built-in functions are called by their bare name")
    } else if let Some(instead) = instead_of(f) {
        instead.to_string()
    } else {
        match suggest(f, FUNCTIONS.iter().copied()) {
            Some(hint) => format!("there is no `{f}`; did you mean `{hint}(…)`?"),
            None => format!("there is no `{f}`; the built-in functions are listed in docs/language.md §10"),
        }
    };
    diagnostic.with_help(help)
}

/// `x.float()`, `x.pow(2)`, `x.mean(-1, keepdim=True)`: the function form.
fn method(base: &Expr, name: &Ident, args: &[Arg], span: Span) -> Diagnostic {
    let x = match &base.kind {
        ExprKind::Name(ident) => ident.name.as_str(),
        _ => "x",
    };
    let m = name.name.as_str();
    let diagnostic =
        Diagnostic::error("E0210", "no methods in .coda").with_primary(span, format!("the method `.{m}(…)`"));
    if let Some(written) = translate(base, name, args) {
        let why = match m {
            _ if REDUCTIONS.contains(&m) => format!(": {KEEPS_ROW_AXIS}; `axis=0` reduces over rows"),
            _ if ROW_FUNCTIONS.contains(&m) => ": `.coda` names PyTorch's `dim` `axis`".to_string(),
            "float" | "bfloat16" | "half" | "to" | "type" => ": a cast is a call of the type".to_string(),
            "t" | "transpose" => String::new(),
            _ => ": a method `x.f(a)` is the function `f(x, a)`".to_string(),
        };
        return diagnostic.with_help(format!("write `{written}`{why}"));
    }
    let help = match m {
        "to" | "type" => format!("write a cast: `f32({x})`, `bf16({x})` or `f16({x})`"),
        "t" | "transpose" => format!("write `{x}.T`"),
        _ if REDUCTIONS.contains(&m) => format!(
            "write `{}({x}, axis=-1)`: {KEEPS_ROW_AXIS}; `axis=0` reduces over rows",
            if m == "amax" { "max" } else { m }
        ),
        _ if FUNCTIONS.contains(&m) => {
            let rest = if args.is_empty() { "" } else { ", …" };
            format!("write `{m}({x}{rest})`: a method `x.f(a)` is the function `f(x, a)`")
        }
        _ => match instead_of(m) {
            Some(instead) => instead.to_string(),
            None => format!("there is no `{m}`; functions are called as `f(x, …)` (docs/language.md §10)"),
        },
    };
    diagnostic.with_help(help)
}

/// `x.shape`, `x.mT`: what the attribute is in the language.
fn attribute(name: &Ident, span: Span) -> Diagnostic {
    let a = name.name.as_str();
    let help = match a {
        "shape" | "size" => "sizes are named: declare `dim D = 4096` and write `D`".to_string(),
        "dtype" => "every tensor's element type is declared with it: `x: bf16[M, D]`".to_string(),
        "mT" | "H" | "mH" => "write `.T`: it transposes".to_string(),
        _ => format!("`.T` is the one name that may follow an expression (it transposes); there is no `.{a}`"),
    };
    Diagnostic::error("E0210", "no attributes in .coda")
        .with_primary(span, format!("the attribute `.{a}`"))
        .with_help(help)
}

/// The cast of a PyTorch dtype name (`float32` → `f32`).
fn dtype_of(name: &str) -> Option<&'static str> {
    Some(match name {
        "float32" | "float" => "f32",
        "bfloat16" => "bf16",
        "float16" | "half" => "f16",
        "int32" => "i32",
        _ => return None,
    })
}

/// Whether `text` could be written as a bare name.
fn is_word(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The `.coda` form of `base.name(args)`, when the method has one and its
/// operands are simple enough to write back ([`render`]).
fn translate(base: &Expr, name: &Ident, args: &[Arg]) -> Option<String> {
    let x = render(base)?;
    let m = name.name.as_str();
    let positional: Vec<&Expr> = args
        .iter()
        .filter(|a| a.name.is_none())
        .filter_map(|a| match &a.value {
            ArgValue::Expr(e) => Some(e),
            ArgValue::Range(..) => None,
        })
        .collect();
    let keyword = |k: &str| {
        args.iter().find(|a| a.name.as_ref().is_some_and(|n| n.name == k)).and_then(|a| match &a.value {
            ArgValue::Expr(e) => Some(e),
            ArgValue::Range(..) => None,
        })
    };
    Some(match m {
        "float" => format!("f32({x})"),
        "bfloat16" => format!("bf16({x})"),
        "half" => format!("f16({x})"),
        "to" | "type" => format!("{}({x})", positional.first().and_then(|e| dtype_arg_expr(e))?),
        "t" if args.is_empty() => format!("{}.T", operand(base, &x)),
        "sqrt" | "rsqrt" | "exp" | "log" | "tanh" | "sigmoid" | "abs" | "relu" | "square" | "detach"
            if args.is_empty() =>
        {
            format!("{m}({x})")
        }
        "pow" if positional.len() == 1 => format!("pow({x}, {})", render(positional[0])?),
        _ if REDUCTIONS.contains(&m) || ROW_FUNCTIONS.contains(&m) => {
            let f = if m == "amax" { "max" } else { m };
            match positional.first().copied().or_else(|| keyword("dim")) {
                None => format!("{f}({x})"),
                Some(dim) => match render(dim)?.as_str() {
                    "-1" | "1" => format!("{f}({x}, axis=-1)"),
                    "0" => format!("{f}({x}, axis=0)"),
                    _ => return None,
                },
            }
        }
        _ => return None,
    })
}

/// `x` written as an operand of a postfix (`.T`) or a sign: parenthesized
/// unless it is a name, a number or a call.
fn operand(expr: &Expr, written: &str) -> String {
    match expr.kind {
        ExprKind::Name(_) | ExprKind::Number(_) | ExprKind::Call { .. } | ExprKind::Member { .. } => {
            written.to_string()
        }
        _ => format!("({written})"),
    }
}

/// A simple expression written back in `.coda` syntax (names, numbers,
/// operators, calls, `.T`, and the methods [`translate`] knows), or `None`.
fn render(expr: &Expr) -> Option<String> {
    Some(match &expr.kind {
        ExprKind::Name(ident) => ident.name.clone(),
        ExprKind::Number(text) => text.clone(),
        ExprKind::Neg(inner) => format!("-{}", operand(inner, &render(inner)?)),
        ExprKind::Binary { op, lhs, rhs } => {
            let side = |e: &Expr| {
                render(e).map(|r| if matches!(e.kind, ExprKind::Binary { .. }) { format!("({r})") } else { r })
            };
            format!("{} {} {}", side(lhs)?, op.symbol(), side(rhs)?)
        }
        ExprKind::Transpose(inner) => format!("{}.T", operand(inner, &render(inner)?)),
        ExprKind::Call { callee, args } => format!("{}({})", callee.name, render_args(args)?),
        ExprKind::Member { base, name, args: Some(args) } => translate(base, name, args)?,
        _ => return None,
    })
}

/// Call arguments written back, keywords included.
fn render_args(args: &[Arg]) -> Option<String> {
    let written: Option<Vec<String>> = args
        .iter()
        .map(|a| {
            let value = match &a.value {
                ArgValue::Expr(e) => render(e)?,
                ArgValue::Range(lo, hi) => format!("{}:{}", render(lo)?, render(hi)?),
            };
            Some(match &a.name {
                Some(k) => format!("{}={value}", k.name),
                None => value,
            })
        })
        .collect();
    Some(written?.join(", "))
}

/// The cast named by an expression such as `torch.bfloat16`.
fn dtype_arg_expr(expr: &Expr) -> Option<&'static str> {
    match &expr.kind {
        ExprKind::Member { name, args: None, .. } => dtype_of(&name.name),
        ExprKind::Name(ident) => dtype_of(&ident.name),
        _ => None,
    }
}
