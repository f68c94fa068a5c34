//! Shared helpers of the test suite: reading a case file's header and
//! turning a pipeline run into a self-describing snapshot (source first,
//! then each stage's output).
//!
//! A case file starts with comment lines of the form `// key: value`:
//! - `// stage: parse | check | ir | grad` — how far the pipeline runs and what the snapshot shows
//!   (`grad`: the backward blocks, each with what the forward saves for it);
//! - `// expect: ok | error` — whether the case must be accepted or rejected;
//! - `// checks: …` — one line saying what the case is about (required).

use coda::Checked;
use std::path::Path;

/// The header of a case file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The stage shown in the snapshot.
    pub stage: String,
    /// Whether errors are expected.
    pub expect_error: bool,
    /// What the case checks.
    pub checks: String,
}

/// Reads the `// key: value` header lines at the top of a case.
pub fn header(text: &str) -> Result<Header, String> {
    let mut stage = None;
    let mut expect = None;
    let mut checks = None;
    for line in text.lines().take_while(|l| l.starts_with("//")) {
        let Some((key, value)) = line.trim_start_matches('/').split_once(':') else { continue };
        let value = value.trim().to_string();
        match key.trim() {
            "stage" => stage = Some(value),
            "expect" => expect = Some(value),
            "checks" => checks = Some(value),
            _ => {}
        }
    }
    let stage = stage.ok_or("missing `// stage:` header")?;
    if !["parse", "check", "ir", "grad"].contains(&stage.as_str()) {
        return Err(format!("unknown stage `{stage}`"));
    }
    let expect_error = match expect.as_deref() {
        Some("ok") => false,
        Some("error") => true,
        _ => return Err("missing `// expect: ok|error` header".into()),
    };
    let checks = checks.filter(|c| !c.is_empty()).ok_or("missing `// checks:` header")?;
    Ok(Header { stage, expect_error, checks })
}

/// Runs the front end on a case and renders the snapshot text.
pub fn run_case(path: &Path, text: &str) -> Result<String, String> {
    let header = header(text)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let checked = coda::check(&name, text).map_err(|e| format!("internal error: {e}"))?;
    if checked.has_errors() != header.expect_error {
        return Err(format!(
            "{name}: expected {}, got:\n{}",
            if header.expect_error { "errors" } else { "no errors" },
            checked.render_diagnostics()
        ));
    }
    let mut out = snapshot(&header, text, &checked);
    if header.stage == "grad" {
        out.push_str(&backward(&checked)?);
    }
    Ok(out)
}

/// The backward blocks of a checked case, each after its saved-tensor summary.
fn backward(checked: &Checked) -> Result<String, String> {
    let view = coda::grad_view(checked).map_err(|e| format!("internal error: {e}"))?;
    let mut out = String::from("----- BACKWARD\n");
    for gradient in &view.grads {
        out.push_str(&coda::grad_header(&view, gradient));
        out.push_str(&coda::ir::print::print_block(&gradient.backward, Some(&view.source)));
    }
    Ok(out)
}

fn snapshot(header: &Header, text: &str, checked: &Checked) -> String {
    let mut out = format!("----- SOURCE\n{text}");
    if !text.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("----- DIAGNOSTICS\n");
    out.push_str(&checked.render_diagnostics());
    if header.stage == "ir" {
        out.push_str("----- IR\n");
        out.push_str(&coda::ir::print::print_module(&checked.module, Some(&checked.source)));
    }
    out
}
