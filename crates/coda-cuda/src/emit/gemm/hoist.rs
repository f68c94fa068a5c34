//! Text passes over the pair loop's body: unused column-index locals are
//! dropped, and declarations that depend on the column only are hoisted
//! out of the row loop.

use super::super::ops::uses;
use std::collections::BTreeSet;

/// The body without `const int` column-index locals nothing reads (a slot's
/// column is computed on demand and may end up unused, e.g. when its value
/// is stored through a pair).
pub(super) fn drop_unused_indices(body: Vec<String>) -> Vec<String> {
    body.iter()
        .filter(|line| {
            let Some(rest) = line.trim_start().strip_prefix("const int ") else { return true };
            let name = rest.split(' ').next().unwrap_or_default();
            // Read somewhere besides its own declaration.
            let others: String =
                body.iter().filter(|l| !std::ptr::eq(*l, *line)).cloned().collect::<Vec<_>>().join("\n");
            uses(&others, name)
        })
        .cloned()
        .collect()
}

/// Splits the per-pair body into the declarations that depend on the column
/// only (no row index, row predicate, accumulator, scratch or per-row
/// local, directly or through another declaration), in order, and the rest.
pub(super) fn hoist_column_invariants(body: Vec<String>) -> (Vec<String>, Vec<String>) {
    let mut row_dependent: BTreeSet<String> = ["i", "m", "row_ok", "f", "smem"].map(String::from).into();
    let (mut hoisted, mut rest) = (Vec::new(), Vec::new());
    for line in body {
        let code = line.split("  //").next().unwrap_or_default();
        let declared = code
            .trim_start()
            .strip_prefix("const ")
            .and_then(|d| d.split_once(" = "))
            .and_then(|(lhs, _)| lhs.split_whitespace().nth(1))
            .map(String::from);
        let free = identifiers(code.split_once(" = ").map_or(code, |(_, rhs)| rhs));
        match declared {
            Some(_) if free.iter().all(|id| !row_dependent.contains(id)) => hoisted.push(line),
            _ => {
                row_dependent.extend(declared);
                rest.push(line);
            }
        }
    }
    (hoisted, rest)
}

/// The identifiers `text` reads as variables: not members (`.x`, `p.bias`)
/// and not qualified names (`cg::load`).
fn identifiers(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let qualified = start > 0 && matches!(bytes[start - 1], b'.' | b':');
            let namespace = text[i..].starts_with("::");
            if !qualified && !namespace {
                out.push(text[start..i].to_string());
            }
        } else if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}
