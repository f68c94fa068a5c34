//! The logos lexer and the adapter that feeds lalrpop `(start, token, end)` triples.
//!
//! Characters that start no token are reported as diagnostics and skipped, so
//! that one stray byte does not hide every later error. Brackets nested more
//! than [`MAX_NESTING`] deep stop the token stream with a diagnostic.

use coda_diagnostics::{Diagnostic, Span};
use logos::Logos;

/// How deep `(` and `[` may nest before the lexer gives up.
pub(crate) const MAX_NESTING: usize = 128;

/// Tokens of the `.coda` language.
#[derive(Logos, Debug, Clone, PartialEq)]
#[logos(skip r"[ \t\r\n\f]+")]
#[logos(skip r"//[^\n]*")]
pub(crate) enum Tok<'s> {
    #[token("block")]
    Block,
    #[token("kernel")]
    Kernel,
    #[token("let")]
    Let,
    #[token("dim")]
    Dim,
    #[token("None")]
    NoneKw,
    #[regex(r"[A-Za-z_][A-Za-z0-9_]*")]
    Ident(&'s str),
    #[regex(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")]
    #[regex(r"\.[0-9]+([eE][+-]?[0-9]+)?")]
    Number(&'s str),
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token(".")]
    Dot,
    /// Not an operator; lexed so that the parser's error can say so once.
    #[token("^")]
    Caret,
    /// A quoted string: not part of the language, lexed whole so that the
    /// checker can say what to write instead (`approximate="tanh"`).
    #[regex(r#""[^"\n]*""#)]
    Str(&'s str),
    #[token("->")]
    Arrow,
    #[token("=")]
    Assign,
    #[token("+=")]
    PlusAssign,
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("@")]
    At,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,
    #[token("==")]
    EqEq,
    #[token("!=")]
    Ne,
}

/// Lexical diagnostics reported at most per file; the rest are counted in one note.
const MAX_LEX_DIAGNOSTICS: usize = 20;

/// Lexes a whole text into triples, collecting lexical diagnostics.
pub(crate) fn lex<'s>(text: &'s str, diagnostics: &mut Vec<Diagnostic>) -> Vec<(usize, Tok<'s>, usize)> {
    let mut tokens = Vec::new();
    let mut depth = 0usize;
    let mut bad_characters = 0usize;
    let mut last_bad_end = usize::MAX;
    let mut lexer = Tok::lexer(text);
    while let Some(result) = lexer.next() {
        let range = lexer.span();
        let span = Span::new(range.start, range.end);
        match result {
            Ok(tok) => {
                match tok {
                    Tok::LParen | Tok::LBracket => depth += 1,
                    Tok::RParen | Tok::RBracket => depth = depth.saturating_sub(1),
                    _ => {}
                }
                if depth > MAX_NESTING {
                    diagnostics.push(
                        Diagnostic::error("E0003", "brackets nested too deeply")
                            .with_primary(span, format!("more than {MAX_NESTING} levels deep"))
                            .with_help("split the expression with `let` bindings"),
                    );
                    break;
                }
                tokens.push((range.start, tok, range.end));
            }
            Err(()) => {
                // A run of stray characters is one error, and a file full of
                // them stops being reported after a while.
                let adjacent = range.start == last_bad_end;
                last_bad_end = range.end;
                if adjacent {
                    if let Some(last) = diagnostics.last_mut().filter(|d| d.code == "E0001") {
                        if let Some(label) = last.labels.first_mut() {
                            label.span = label.span.to(span);
                        }
                        continue;
                    }
                }
                bad_characters += 1;
                floor_division_comments(text, &tokens, diagnostics);
                if bad_characters > MAX_LEX_DIAGNOSTICS {
                    continue;
                }
                diagnostics.push(unexpected_character(lexer.slice(), span));
                // `#` most likely starts a comment in another language: skip
                // the rest of the line instead of reporting every word in it.
                if lexer.slice() == "#" {
                    let rest = lexer.remainder();
                    lexer.bump(rest.find('\n').unwrap_or(rest.len()));
                }
            }
        }
    }
    floor_division_comments(text, &tokens, diagnostics);
    if bad_characters > MAX_LEX_DIAGNOSTICS {
        diagnostics.push(
            Diagnostic::error(
                "E0001",
                format!("{} more runs of unexpected characters", bad_characters - MAX_LEX_DIAGNOSTICS),
            )
            .with_primary(Span::new(text.len(), text.len()), "end of file")
            .with_help("is this a .coda source file?"),
        );
    }
    tokens
}

/// Warns of a comment that reads like Python's floor division: `//` right
/// after an operand (at most one space between), whose text is a number
/// that ends the line or is followed by an operator or a closing bracket
/// (`D // 2`, `D // 2]`, `D // 2 + 1`). The rest of the line is a
/// comment, so `x[:, :D // 2]` fails on a later line, and `let h = D // 2`
/// silently means `D`. A comment that annotates a value (`HD   // 6144, a
/// constant`) does not warn.
fn floor_division_comments(text: &str, tokens: &[(usize, Tok<'_>, usize)], diagnostics: &mut Vec<Diagnostic>) {
    for (i, (_, tok, end)) in tokens.iter().enumerate() {
        let operand = matches!(tok, Tok::Ident(_) | Tok::Number(_) | Tok::RParen | Tok::RBracket);
        let next = tokens.get(i + 1).map_or(text.len(), |(start, _, _)| *start);
        let gap = &text[*end..next];
        let line = &gap[..gap.find('\n').unwrap_or(gap.len())];
        let spaces = line.len() - line.trim_start_matches([' ', '\t']).len();
        let Some(comment) = line[spaces..].strip_prefix("//") else { continue };
        let number = comment.trim_start();
        let after = number.trim_start_matches(|c: char| c.is_ascii_digit()).trim_start();
        let division = number.starts_with(|c: char| c.is_ascii_digit())
            && (after.is_empty() || after.starts_with([')', ']', '+', '-', '*', '/']));
        if !operand || spaces > 1 || !division {
            continue;
        }
        let at = *end + spaces;
        diagnostics.push(
            Diagnostic::warning("W0006", "`//` starts a comment here, not a floor division")
                .with_primary(Span::new(at, at + 2 + comment.len()), "the rest of the line is a comment")
                .with_help("there is no floor division: a dimension divides exactly with `/` (`D / 2`)"),
        );
    }
}

fn unexpected_character(slice: &str, span: Span) -> Diagnostic {
    let shown = slice.chars().next().map_or_else(String::new, |c| c.escape_debug().to_string());
    let help = match shown.as_str() {
        "#" => Some("comments start with `//`"),
        ";" => Some("statements need no `;`: each starts with `let`, `dim` or an output name"),
        _ => None,
    };
    let diagnostic = Diagnostic::error("E0001", format!("unexpected character `{shown}`"))
        .with_primary(span, "not part of any token");
    match help {
        Some(help) => diagnostic.with_help(help),
        None => diagnostic,
    }
}
