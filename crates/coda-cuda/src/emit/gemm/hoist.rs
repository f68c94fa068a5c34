//! Which lines of the pair loop's body stay in it: index locals nothing
//! reads are dropped, and definitions that depend on the column only move
//! out of the row loop. Both decisions read the facts each line recorded
//! when it was written (`code::Line`).

use crate::emit::code::Line;
use std::collections::BTreeSet;

/// The body without the index locals (`const int`) no line reads: a
/// slot's column is defined when an operand asks for it, and the value
/// evaluated there may not depend on it (a per-row value) or be stored
/// through a pair.
pub(super) fn without_unread_indices(body: Vec<Line>) -> Vec<Line> {
    let read: BTreeSet<String> = body.iter().flat_map(|line| line.reads.iter().cloned()).collect();
    body.into_iter()
        .filter(|line| !line.index || line.defines.as_ref().is_some_and(|name| read.contains(name)))
        .collect()
}

/// Splits the per-pair body into the definitions that depend on the column
/// only (no row index, row predicate, accumulator, scratch or per-row
/// local, directly or through another definition), in order, and the rest.
pub(super) fn column_invariants(body: Vec<Line>) -> (Vec<Line>, Vec<Line>) {
    let mut row_dependent: BTreeSet<String> = ["i", "m", "row_ok", "f", "smem"].map(String::from).into();
    let (mut hoisted, mut rest) = (Vec::new(), Vec::new());
    for line in body {
        match &line.defines {
            Some(_) if line.reads.is_disjoint(&row_dependent) => hoisted.push(line),
            _ => {
                row_dependent.extend(line.defines.clone());
                rest.push(line);
            }
        }
    }
    (hoisted, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line of the pair loop's body defining `name` (an index when
    /// `index`), or none, reading `reads`.
    fn line(name: Option<&str>, index: bool, reads: &[&str]) -> Line {
        Line {
            indent: 4,
            text: name.unwrap_or("store").to_string(),
            defines: name.map(String::from),
            index,
            reads: reads.iter().map(|r| r.to_string()).collect(),
        }
    }

    fn names(lines: &[Line]) -> Vec<&str> {
        lines.iter().map(|l| l.text.as_str()).collect()
    }

    #[test]
    fn column_only_definitions_leave_the_row_loop() {
        let body = vec![
            line(Some("c"), true, &["n"]),
            line(Some("x"), false, &["m", "c"]),
            line(Some("g"), false, &["c"]),
            line(Some("y"), false, &["x", "g"]),
            line(Some("a"), false, &["f", "i", "j"]),
            line(None, false, &["y", "m", "c"]),
        ];
        let (hoisted, rest) = column_invariants(body);
        assert_eq!(names(&hoisted), ["c", "g"]);
        assert_eq!(names(&rest), ["x", "y", "a", "store"]);
    }

    #[test]
    fn only_unread_index_locals_are_dropped() {
        let body = vec![
            line(Some("c"), true, &["n"]),
            line(Some("c1"), true, &["n"]),
            line(Some("kc"), true, &["c"]),
            line(Some("v"), false, &["m"]),
        ];
        // `c` stays: the unread `kc` reads it.
        assert_eq!(names(&without_unread_indices(body)), ["c", "v"]);
    }
}
