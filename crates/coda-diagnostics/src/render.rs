//! Rendering diagnostics with codespan-reporting, to a string or a terminal.

use crate::{Diagnostic, Severity, SourceFile};
use codespan_reporting::diagnostic as cs;
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, termcolor};

/// Whether rendered output uses colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorChoice {
    /// Colour when standard error is a terminal.
    Auto,
    /// Never colour.
    Never,
}

fn convert(diagnostic: &Diagnostic, text_len: usize) -> cs::Diagnostic<()> {
    let severity = match diagnostic.severity {
        Severity::Error => cs::Severity::Error,
        Severity::Warning => cs::Severity::Warning,
    };
    let labels = diagnostic
        .labels
        .iter()
        .map(|label| {
            let range = label.span.range();
            let range = range.start.min(text_len)..range.end.min(text_len);
            let style = if label.primary { cs::LabelStyle::Primary } else { cs::LabelStyle::Secondary };
            cs::Label::new(style, (), range).with_message(&label.message)
        })
        .collect();
    let mut notes = diagnostic.notes.clone();
    if let Some(help) = &diagnostic.help {
        notes.push(format!("help: {help}"));
    }
    cs::Diagnostic::new(severity)
        .with_code(diagnostic.code)
        .with_message(&diagnostic.title)
        .with_labels(labels)
        .with_notes(notes)
}

/// Renders diagnostics without colour into a string (used by tests and snapshots).
pub fn render_to_string(file: &SourceFile, diagnostics: &[Diagnostic]) -> String {
    let mut writer = termcolor::NoColor::new(Vec::new());
    emit_all(&mut writer, file, diagnostics);
    String::from_utf8_lossy(&writer.into_inner()).into_owned()
}

/// Renders diagnostics to standard error.
pub fn render(file: &SourceFile, diagnostics: &[Diagnostic], color: ColorChoice) {
    let choice = match color {
        ColorChoice::Auto if std::io::IsTerminal::is_terminal(&std::io::stderr()) => termcolor::ColorChoice::Auto,
        _ => termcolor::ColorChoice::Never,
    };
    let mut stream = termcolor::BufferedStandardStream::stderr(choice);
    emit_all(&mut stream, file, diagnostics);
    // A failed flush means standard error is gone; nothing else can be reported.
    let _ = std::io::Write::flush(&mut stream);
}

fn emit_all(writer: &mut dyn termcolor::WriteColor, file: &SourceFile, diagnostics: &[Diagnostic]) {
    let files = SimpleFile::new(file.name.as_str(), file.text.as_str());
    let config = term::Config::default();
    for diagnostic in diagnostics {
        let converted = convert(diagnostic, file.text.len());
        // Rendering only fails on a broken writer (a closed pipe); there is
        // nothing better to do with the error than to stop writing.
        if term::emit(writer, &config, &files, &converted).is_err() {
            return;
        }
    }
}
