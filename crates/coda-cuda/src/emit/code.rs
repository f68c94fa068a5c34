//! Code as the emitter writes it: C text together with the variables it
//! reads and the constant it defines. Decisions about code already written
//! (whether a local is read, which declarations depend on the column only)
//! are made on these facts, recorded while the code is written, never by
//! reading the text back.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Deref;

/// A piece of C code (an expression or a statement) and the variables it
/// reads: the locals the emitter declared, the loop and index variables
/// (`i`, `j`, `m`, `n`, `k`, …) and the functor's arguments (`f`, `t`,
/// `smem`). Parameters (`p.x`) and literals read nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Code {
    pub(crate) text: String,
    pub(crate) reads: BTreeSet<String>,
}

impl Code {
    /// Code that reads no variable: a literal, an expression of parameters.
    pub(crate) fn lit(text: impl Into<String>) -> Code {
        Code { text: text.into(), reads: BTreeSet::new() }
    }

    /// A variable, read by its use.
    pub(crate) fn local(name: impl Into<String>) -> Code {
        let name = name.into();
        Code { reads: BTreeSet::from([name.clone()]), text: name }
    }

    /// An index as the emitter passes them around: a variable, or an
    /// integer literal, which reads nothing.
    pub(crate) fn index(text: &str) -> Code {
        match text.starts_with(|c: char| c.is_ascii_digit()) {
            true => Code::lit(text),
            false => Code::local(text),
        }
    }

    /// `text` written from `parts`: it reads what they read.
    pub(crate) fn of<'a>(text: impl Into<String>, parts: impl IntoIterator<Item = &'a Code>) -> Code {
        let reads = parts.into_iter().flat_map(|p| p.reads.iter().cloned()).collect();
        Code { text: text.into(), reads }
    }

    /// The same code, also reading the variables `names`.
    pub(crate) fn reading(mut self, names: &[&str]) -> Code {
        self.reads.extend(names.iter().map(|n| n.to_string()));
        self
    }
}

impl Deref for Code {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One line of a kernel body as written: rendered only when the body is
/// assembled, so that a line can still be moved or dropped on its facts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Line {
    /// Indentation level, four spaces each.
    pub(crate) indent: usize,
    /// The text, without indentation.
    pub(crate) text: String,
    /// The constant the line defines (`const T name = …;`), if any.
    pub(crate) defines: Option<String>,
    /// Whether that constant is an index (`const int`, written where an
    /// expression needs it and unused when the value it indexes ignores it).
    pub(crate) index: bool,
    /// The variables the line reads (for a definition, its initializer's).
    pub(crate) reads: BTreeSet<String>,
}

impl Line {
    /// A line of text at `indent` that reads no variable the emitter
    /// decides anything about.
    pub(crate) fn plain(indent: usize, text: impl Into<String>) -> Line {
        Line { indent, text: text.into(), ..Line::default() }
    }

    /// A line of `code`.
    pub(crate) fn of(indent: usize, code: Code) -> Line {
        Line { indent, text: code.text, reads: code.reads, ..Line::default() }
    }

    /// Whether the line reads variable `name`.
    pub(crate) fn reads(&self, name: &str) -> bool {
        self.reads.contains(name)
    }

    /// The line as C text.
    pub(crate) fn render(&self) -> String {
        format!("{}{}", "    ".repeat(self.indent), self.text)
    }
}
