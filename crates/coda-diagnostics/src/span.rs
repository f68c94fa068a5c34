//! Byte spans and the source file they point into.

use std::fmt;

/// A half-open byte range `start..end` into one source file.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    /// A span from byte offsets; offsets beyond `u32::MAX` saturate.
    pub fn new(start: usize, end: usize) -> Self {
        let clamp = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        Span { start: clamp(start), end: clamp(end.max(start)) }
    }

    /// The smallest span covering both.
    #[must_use]
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }

    /// The byte range, for slicing source text.
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// A named source text. The name is what the user typed (never made absolute),
/// so rendered output and generated code stay deterministic.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The file name as given on the command line or by the embedder.
    pub name: String,
    /// The whole text.
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    /// Wraps a text with its name.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        SourceFile { name: name.into(), text, line_starts }
    }

    /// One-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: u32) -> (usize, usize) {
        let offset = (offset as usize).min(self.text.len());
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.line_starts[line];
        let column = self.text.get(start..offset).map_or(offset - start, |s| s.chars().count());
        (line + 1, column + 1)
    }

    /// `name:line:col` of a span's start, as used in generated-code comments.
    pub fn location(&self, span: Span) -> String {
        let (line, col) = self.line_col(span.start);
        format!("{}:{line}:{col}", self.name)
    }

    /// The text a span covers (empty when out of range).
    pub fn slice(&self, span: Span) -> &str {
        self.text.get(span.range()).unwrap_or("")
    }
}
