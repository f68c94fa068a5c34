//! Spans, source files and diagnostics shared by every phase of codac.
//!
//! A [`Diagnostic`] is plain data: an error code, a one-line title, labelled
//! byte spans, notes and an optional `help:` line. Phases collect them into a
//! `Vec<Diagnostic>` and keep going; only the edge (the `codac` binary, or a
//! test) renders them, through [`render`], with or without colour.
//!
//! This crate knows nothing about the language itself.

mod render;
mod span;

pub use render::{render, render_to_string, ColorChoice};
pub use span::{SourceFile, Span};

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Something worth knowing that does not stop compilation.
    Warning,
    /// The program is rejected.
    Error,
}

/// A labelled region of the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The bytes this label points at.
    pub span: Span,
    /// What the label says about them (may be empty).
    pub message: String,
    /// The primary label is underlined with `^`, secondary ones with `-`.
    pub primary: bool,
}

/// One user-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable code such as `E0301`, documented in `docs/errors.md`.
    pub code: &'static str,
    /// A one-line title in plain English.
    pub title: String,
    /// The labelled spans, primary first.
    pub labels: Vec<Label>,
    /// Extra explanation lines.
    pub notes: Vec<String>,
    /// What the user could do about it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// An error with a code and a title; add labels with [`Diagnostic::with_primary`].
    pub fn error(code: &'static str, title: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            title: title.into(),
            labels: Vec::new(),
            notes: Vec::new(),
            help: None,
        }
    }

    /// A warning with a code and a title.
    pub fn warning(code: &'static str, title: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, title) }
    }

    /// Adds the primary label.
    #[must_use]
    pub fn with_primary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label { span, message: message.into(), primary: true });
        self
    }

    /// Adds a secondary label.
    #[must_use]
    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label { span, message: message.into(), primary: false });
        self
    }

    /// Adds a note line.
    #[must_use]
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Sets the `help:` line.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Whether this diagnostic rejects the program.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// Whether any of the diagnostics is an error.
pub fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(Diagnostic::is_error)
}
