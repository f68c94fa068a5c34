//! Shared helpers of the test suite: reading a case file's header and
//! turning a pipeline run into a self-describing snapshot (source first,
//! then each stage's output).
//!
//! A case file starts with comment lines of the form `// key: value`:
//! - `// stage: parse | check | ir | grad | eval` — how far the pipeline runs and what the snapshot shows
//!   (`grad`: the backward blocks, each with what the forward saves for it; `eval`: each block
//!   evaluated by the interpreter on random inputs, its outputs' shapes or its located error);
//! - `// expect: ok | error` — whether the case must be accepted or rejected;
//! - `// checks: …` — one line saying what the case is about (required);
//! - `// dims: M=2, N=8` — with `stage: eval`, the run-time dims;
//! - `// memory: BYTES` — with `stage: eval`, the interpreter's memory limit (default its own).

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
    /// Run-time dims of an `eval` case.
    pub dims: coda::DimBindings,
    /// The interpreter's memory limit of an `eval` case.
    pub memory: Option<u64>,
}

/// Reads the `// key: value` header lines at the top of a case.
pub fn header(text: &str) -> Result<Header, String> {
    let mut stage = None;
    let mut expect = None;
    let mut checks = None;
    let mut dims = coda::DimBindings::new();
    let mut memory = None;
    for line in text.lines().take_while(|l| l.starts_with("//")) {
        let Some((key, value)) = line.trim_start_matches('/').split_once(':') else { continue };
        let value = value.trim().to_string();
        match key.trim() {
            "stage" => stage = Some(value),
            "expect" => expect = Some(value),
            "checks" => checks = Some(value),
            "dims" => dims = parse_dims(&value)?,
            "memory" => memory = Some(value.parse().map_err(|_| format!("bad `// memory: {value}`"))?),
            _ => {}
        }
    }
    let stage = stage.ok_or("missing `// stage:` header")?;
    if !["parse", "check", "ir", "grad", "eval"].contains(&stage.as_str()) {
        return Err(format!("unknown stage `{stage}`"));
    }
    let expect_error = match expect.as_deref() {
        Some("ok") => false,
        Some("error") => true,
        _ => return Err("missing `// expect: ok|error` header".into()),
    };
    let checks = checks.filter(|c| !c.is_empty()).ok_or("missing `// checks:` header")?;
    Ok(Header { stage, expect_error, checks, dims, memory })
}

/// `M=2, N=8` as bindings.
fn parse_dims(text: &str) -> Result<coda::DimBindings, String> {
    let mut dims = coda::DimBindings::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, value) = item.split_once('=').ok_or(format!("bad dim `{item}` in `// dims:`"))?;
        let value = value.trim().parse().map_err(|_| format!("bad value in `{item}`"))?;
        dims.insert(name.trim().to_string(), value);
    }
    Ok(dims)
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
    if header.stage == "eval" {
        out.push_str(&evaluation(&header, &checked));
    }
    Ok(out)
}

/// Every block evaluated on random inputs (seed 0): its outputs' shapes,
/// or its error rendered as the CLI renders it.
fn evaluation(header: &Header, checked: &Checked) -> String {
    use coda::ir::interp::{eval_with, MEMORY_LIMIT_BYTES};
    let mut out = String::from("----- EVAL\n");
    let limit = header.memory.unwrap_or(MEMORY_LIMIT_BYTES);
    let options = coda::EvalOptions::default();
    for block in &checked.module.blocks {
        let dims = &header.dims;
        let result = coda::random_inputs(block, dims, 0)
            .and_then(|inputs| eval_with(block, dims, &inputs, &options, limit, &mut |_| {}));
        match result {
            Ok(outputs) => {
                out.push_str(&format!("block {}: ok\n", block.name));
                for (name, tensor) in &outputs {
                    out.push_str(&format!("  {name}: {}[{}, {}]\n", tensor.dtype, tensor.rows, tensor.cols));
                }
            }
            Err(error) => {
                let diagnostic = error.diagnostic(block);
                out.push_str(&coda::render_to_string(&checked.source, std::slice::from_ref(&diagnostic)));
            }
        }
    }
    out
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
