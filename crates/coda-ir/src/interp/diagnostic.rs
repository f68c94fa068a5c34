//! An evaluation error as a located diagnostic (`E07xx`), like the
//! checker's: a plain-English title, a label at the expression, input or
//! output concerned, and help. Codes: `E0701` a dimension without a valid
//! value, `E0702` a value or an evaluation too large, `E0703` a column slice
//! outside its operand, `E0704` a rotary embedding outside its operand,
//! `E0705` an input that does not match its declaration, `E9001` a bug in
//! the interpreter.

use super::error::EvalError;
use crate::block::Block;
use coda_diagnostics::{Diagnostic, Span};

impl EvalError {
    /// This error as a diagnostic on `block`'s source: labelled at the
    /// error's span, or at the block's header when it has none.
    pub fn diagnostic(&self, block: &Block) -> Diagnostic {
        let span = self.span().unwrap_or_else(|| header_span(block));
        let (code, title, label, help) = describe(self.cause());
        let diagnostic = Diagnostic::error(code, title).with_primary(span, label);
        match help {
            Some(help) => diagnostic.with_help(help),
            None => diagnostic,
        }
    }
}

/// The block's header: from its start to the end of its last declared
/// input or output.
pub(super) fn header_span(block: &Block) -> Span {
    let declared = block.params.iter().chain(block.outputs.iter().map(|o| &o.tensor));
    let end = declared.map(|t| t.span.end).filter(|end| *end <= block.span.end).max();
    match end {
        Some(end) if end > block.span.start => Span::new(block.span.start as usize, end as usize),
        _ => block.span,
    }
}

/// Code, title, label and help of an unlocated error.
fn describe(error: &EvalError) -> (&'static str, String, String, Option<String>) {
    const SMALLER_DIMS: &str = "evaluate with smaller dims";
    match error {
        EvalError::UnboundDim { name } => (
            "E0701",
            format!("dimension `{name}` has no value"),
            format!("`{name}` is used here"),
            Some(format!("bind it, e.g. `{name}=128`")),
        ),
        EvalError::NonPositiveDim { dim, value, bindings } => (
            "E0701",
            "a dimension is not positive".into(),
            format!("`{dim}` evaluates to {value}{bindings}"),
            Some("bind the run-time dims to values that make every dimension positive".into()),
        ),
        EvalError::ConflictingDim { name, constant, bound } => (
            "E0701",
            format!("dimension `{name}` is a constant"),
            format!("`{name}` is {constant} in this block but was bound to {bound}"),
            Some(format!("leave `{name}` out of the bindings")),
        ),
        EvalError::DimOverflow { dim } => (
            "E0701",
            "a dimension overflows 64-bit integers".into(),
            format!("`{dim}` overflows"),
            Some(SMALLER_DIMS.into()),
        ),
        EvalError::TooLarge { what, elements } => (
            "E0702",
            "a value too large for the interpreter".into(),
            format!("{what} would have {elements} elements, more than 2^31"),
            Some(SMALLER_DIMS.into()),
        ),
        EvalError::OutOfMemory { what, needed, limit } => (
            "E0702",
            "the evaluation would need more memory than allowed".into(),
            format!(
                "{what} would need {} live, more than the limit of {}",
                describe_bytes(*needed),
                describe_bytes(*limit)
            ),
            Some(format!("{SMALLER_DIMS}: the memory grows with them")),
        ),
        EvalError::SliceOutOfRange { what, start, len, step, cols } => {
            let taken = if *step == 1 {
                format!("columns {start}..{}", start.saturating_add(*len as i64))
            } else {
                format!("columns {start} + {step}k for k < {len}")
            };
            (
                "E0703",
                "a column slice reaches outside its operand".into(),
                format!("{what} takes {taken} of a value with {cols} columns"),
                Some("the slice's bounds depend on the run-time dims: bind them so that the slice fits".into()),
            )
        }
        EvalError::BadRope { what, message } => (
            "E0704",
            "a rotary embedding reaches outside its operand".into(),
            format!("{what}: {message}"),
            Some("`cols=` must lie within the operand's columns and hold whole heads of `head_dim` columns".into()),
        ),
        EvalError::MissingInput { name, expected } => {
            ("E0705", format!("input `{name}` is missing"), format!("expected {expected}"), None)
        }
        EvalError::InputShape { name, expected, got } => (
            "E0705",
            format!("input `{name}` does not have its declared shape"),
            format!("expected {expected}, got {got}"),
            None,
        ),
        EvalError::NotInteger { tensor, index, value } => (
            "E0705",
            format!("{tensor} holds a value that is not an i32"),
            format!("element {index} is {value}"),
            Some("integer inputs must hold whole numbers in the i32 range".into()),
        ),
        EvalError::DataLength { .. } => {
            ("E0705", "tensor data does not match its shape".into(), error.to_string(), None)
        }
        EvalError::Malformed { message, .. } => (
            "E9001",
            "internal error in the interpreter".into(),
            message.clone(),
            Some("this is a bug in codac, not in the program; please report it with the file".into()),
        ),
        EvalError::At { error, .. } => describe(error),
    }
}

/// `1.7 GiB`, `512 MiB`, `300 bytes`: a byte count for messages.
pub fn describe_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        if bytes >= 1 << shift {
            return format!("{:.1} {unit}", bytes as f64 / f64::from(1u32 << (shift - 10)) / 1024.0);
        }
    }
    format!("{bytes} bytes")
}
