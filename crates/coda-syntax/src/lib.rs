//! The front end of codac: the `.coda` lexer (logos), parser (lalrpop, from
//! `grammar/coda.lalrpop`) and spanned AST.
//!
//! The generated parser is private to this crate; the only entry point is
//! [`parse`], which never fails outright: it returns the AST it could build
//! together with every diagnostic it collected. Meaning (names, shapes,
//! sugar) is given by `coda-lower`, not here.

pub mod ast;
mod error;
mod lexer;
mod support;

use coda_diagnostics::{Diagnostic, SourceFile};

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, unreachable_pub, unused_qualifications, missing_docs)]
    grammar,
    "/coda.rs"
);

/// The result of parsing one file.
#[derive(Debug)]
pub struct Parsed {
    /// The AST; statements that failed to parse are [`ast::Stmt::Error`].
    pub file: ast::File,
    /// Lexical and syntax errors, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses a whole source file, recovering from errors at statement level.
pub fn parse(source: &SourceFile) -> Parsed {
    let mut diagnostics = Vec::new();
    let tokens = lexer::lex(&source.text, &mut diagnostics);
    let mut recovered = Vec::new();
    let mut notes = Vec::new();
    let result = grammar::FileParser::new().parse(&mut recovered, &mut notes, tokens.into_iter().map(Ok::<_, ()>));
    let text = source.text.as_str();
    diagnostics.extend(recovered.into_iter().map(|r| error::from_lalrpop(r.error, text)));
    diagnostics.extend(notes);
    let file = match result {
        Ok(file) => file,
        Err(error) => {
            diagnostics.push(error::from_lalrpop(error, text));
            ast::File::default()
        }
    };
    diagnostics.sort_by_key(|d| d.labels.first().map(|l| l.span));
    Parsed { file, diagnostics }
}
