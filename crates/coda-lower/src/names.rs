//! Spelling suggestions for unknown names.

/// The candidate closest to `name` by edit distance, if close enough to be a likely typo.
pub(crate) fn suggest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let length = name.chars().count();
    let limit = (length / 3).max(1);
    // An edit must keep part of the name: `h` is no typo of `D`. Case
    // alone (`d` for `D`) always counts as a typo.
    candidates
        .map(|c| (if c.eq_ignore_ascii_case(name) { 0 } else { edit_distance(name, c) }, c))
        .filter(|(d, _)| *d <= limit && *d < length)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = if ca == *cb { previous } else { 1 + previous.min(row[j]).min(row[j + 1]) };
            previous = current;
        }
    }
    row[b.len()]
}
