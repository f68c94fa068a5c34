//! The bound on recomputation: an inline value is recomputed by every
//! kernel that reads it, from its whole inline closure (the inline values
//! it is built from, and the inputs, partials and stored values they
//! read). Chained reductions make closures grow with the program
//! (`t = t - max(t) + sum(t, axis=0)` repeated: each column sum needs a
//! kernel of its own, and kernel `i` would recompute all `i` earlier steps
//! and take every earlier reduction as a parameter), so kernels, their
//! parameter lists and the manifest would grow quadratically.
//!
//! A value whose closure would pass [`MAX_CLOSURE`] values is not inline:
//! it gets a kernel home like a value that reads another thread's columns,
//! and later kernels load it. The bound is far above the closures of real
//! blocks, so their kernels are unchanged: the largest closure among the
//! examples and their backward blocks holds 31 values, among the test
//! cases, the fuzz seeds and their backward blocks 126 (`f32_rowwise`'s
//! backward).
//!
//! A closure is kept as a sorted list of at most `MAX_CLOSURE + 1` values,
//! so the bookkeeping is linear in the program too.

use coda_ir::Value;

/// The most values an inline value's closure may hold.
pub(crate) const MAX_CLOSURE: usize = 256;

/// The closure of a value with `parts` (the closures of its inline operands,
/// and each other operand on its own) and itself: `None` when it passes
/// [`MAX_CLOSURE`].
pub(crate) fn closure<'a>(value: Value, parts: impl IntoIterator<Item = &'a [Value]>) -> Option<Vec<Value>> {
    let mut set = vec![value];
    for part in parts {
        set = merge(&set, part);
        if set.len() > MAX_CLOSURE {
            return None;
        }
    }
    Some(set)
}

/// The sorted union of two sorted lists, stopping one past [`MAX_CLOSURE`].
fn merge(a: &[Value], b: &[Value]) -> Vec<Value> {
    let mut out = Vec::with_capacity((a.len() + b.len()).min(MAX_CLOSURE + 1));
    let (mut i, mut j) = (0, 0);
    while out.len() <= MAX_CLOSURE && (i < a.len() || j < b.len()) {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                i += 1;
                j += 1;
                *x
            }
            (Some(x), Some(y)) if x < y => {
                i += 1;
                *x
            }
            (Some(x), None) => {
                i += 1;
                *x
            }
            (_, Some(y)) => {
                j += 1;
                *y
            }
            (None, None) => break,
        };
        out.push(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(ids: &[usize]) -> Vec<Value> {
        ids.iter().map(|i| Value::from_index(*i)).collect()
    }

    #[test]
    fn shared_parts_count_once() {
        let a = values(&[1, 3, 5]);
        let b = values(&[2, 3, 6]);
        let got = closure(Value::from_index(7), [a.as_slice(), b.as_slice()]);
        assert_eq!(got, Some(values(&[1, 2, 3, 5, 6, 7])));
    }

    #[test]
    fn a_closure_past_the_bound_is_refused() {
        let big: Vec<Value> = (0..MAX_CLOSURE).map(Value::from_index).collect();
        assert!(closure(Value::from_index(MAX_CLOSURE - 1), [big.as_slice()]).is_some());
        assert!(closure(Value::from_index(MAX_CLOSURE), [big.as_slice()]).is_none());
    }
}
