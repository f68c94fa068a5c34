//! The one place where lalrpop's errors become diagnostics.

use crate::lexer::Tok;
use coda_diagnostics::{Diagnostic, Span};
use lalrpop_util::ParseError;

/// How many expected tokens a message lists before it says "or another".
const MAX_EXPECTED: usize = 6;

/// Converts one lalrpop error into a diagnostic (`text` is the source).
pub(crate) fn from_lalrpop(error: ParseError<usize, Tok<'_>, ()>, text: &str) -> Diagnostic {
    let text_len = text.len();
    match error {
        ParseError::InvalidToken { location } => Diagnostic::error("E0001", "invalid token")
            .with_primary(Span::new(location, location + 1), "not part of any token"),
        ParseError::UnrecognizedEof { location, expected } => {
            let span = Span::new(location.min(text_len), text_len);
            Diagnostic::error("E0002", "unexpected end of file")
                .with_primary(span, "the file ends here")
                .with_help(expected_list(&expected))
        }
        ParseError::UnrecognizedToken { token: (l, Tok::Star, r), .. }
            if text.get(..l).is_some_and(|before| before.ends_with('*')) =>
        {
            power("**", l - 1, r)
        }
        ParseError::UnrecognizedToken { token: (l, Tok::Caret, r), .. } => power("^", l, r),
        ParseError::UnrecognizedToken { token: (l, tok, r), expected } => unexpected(&tok, Span::new(l, r), &expected),
        ParseError::ExtraToken { token: (l, tok, r) } => unexpected(&tok, Span::new(l, r), &[]),
        ParseError::User { error: () } => Diagnostic::error("E0001", "invalid input"),
    }
}

fn unexpected(tok: &Tok<'_>, span: Span, expected: &[String]) -> Diagnostic {
    let diagnostic =
        Diagnostic::error("E0002", format!("unexpected {}", describe(tok))).with_primary(span, "not expected here");
    let diagnostic = match tok {
        Tok::Ident(_) if expected.iter().any(|e| e == "\"=\"") => {
            diagnostic.with_note("two names in a row: a statement may have ended early")
        }
        _ => diagnostic,
    };
    if expected.is_empty() {
        diagnostic
    } else {
        diagnostic.with_help(expected_list(expected))
    }
}

/// `x ** p` (Python) or `x ^ p` (mathematics): there is no power operator.
fn power(written: &str, start: usize, end: usize) -> Diagnostic {
    Diagnostic::error("E0002", format!("there is no power operator `{written}`"))
        .with_primary(Span::new(start, end), "not an operator")
        .with_help("write `pow(x, p)` for a number `p` (`pow(x, 2)` is `x * x`), or `square(x)`")
}

fn describe(tok: &Tok<'_>) -> String {
    match tok {
        Tok::Ident(name) => format!("name `{name}`"),
        Tok::Number(n) => format!("number `{n}`"),
        Tok::Str(text) => format!("string {text}"),
        other => format!("`{}`", symbol(other)),
    }
}

fn symbol(tok: &Tok<'_>) -> &'static str {
    match tok {
        Tok::Block => "block",
        Tok::Kernel => "kernel",
        Tok::Let => "let",
        Tok::Dim => "dim",
        Tok::NoneKw => "None",
        Tok::Ident(_) => "name",
        Tok::Number(_) => "number",
        Tok::LParen => "(",
        Tok::RParen => ")",
        Tok::LBracket => "[",
        Tok::RBracket => "]",
        Tok::LBrace => "{",
        Tok::RBrace => "}",
        Tok::Comma => ",",
        Tok::Colon => ":",
        Tok::Dot => ".",
        Tok::Caret => "^",
        Tok::Str(_) => "string",
        Tok::Arrow => "->",
        Tok::Assign => "=",
        Tok::PlusAssign => "+=",
        Tok::Plus => "+",
        Tok::Minus => "-",
        Tok::Star => "*",
        Tok::Slash => "/",
        Tok::At => "@",
        Tok::Lt => "<",
        Tok::Le => "<=",
        Tok::Gt => ">",
        Tok::Ge => ">=",
        Tok::EqEq => "==",
        Tok::Ne => "!=",
    }
}

/// Rewrites lalrpop's terminal names (`"\"let\""`, `Ident`) into plain English.
fn expected_list(expected: &[String]) -> String {
    // A string is accepted only for the checker to explain that there are none.
    let mut names: Vec<String> = expected
        .iter()
        .filter(|e| e.as_str() != "Str")
        .map(|e| match e.as_str() {
            "Ident" => "a name".to_string(),
            "Number" => "a number".to_string(),
            quoted => format!("`{}`", quoted.trim_matches('"')),
        })
        .collect();
    names.dedup();
    let more = names.len() > MAX_EXPECTED;
    names.truncate(MAX_EXPECTED);
    let mut list = names.join(", ");
    if more {
        list.push_str(" or another token");
    }
    format!("expected {list}")
}
