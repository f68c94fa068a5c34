//! Pair layouts: which matmuls read their weight rows interleaved, and how
//! values computed in that layout are used.
//!
//! With `W' = permute_rows(W, P)` (row `p` of `W'` is row `P.source(p)` of
//! `W`), `(h @ W'ᵀ)[:, p] = (h @ Wᵀ)[:, P.source(p)]`: the accumulator holds
//! the same columns, in pair order. Values keep that order through
//! elementwise work; the rules below consume it.

use crate::Options;
use coda_ir::{Block, Inst, PairPerm, RopeStyle, Value};
use std::collections::{BTreeMap, BTreeSet};

/// `[gate | up]` halves of `Y = h @ Wᵀ` (`W: [2F, K]`) as even/odd columns:
/// `Y[:, :F] = Y'[:, 0::2]`, `Y[:, F:] = Y'[:, 1::2]` with `Y' = h @ permute_rows(W, pairs 0..2F group 2F)ᵀ`.
pub(crate) const RULE_GATED: &str = "gated-pair-layout";

/// Rotate-half RoPE on `Y = h @ Wᵀ` as interleaved RoPE on `Y'` whose weight
/// rows are interleaved per head: column `i` and `i + d/2` of a head become
/// neighbours, with the same angle, so
/// `rope_half(Y) = unpermute(rope_interleaved(Y'))`.
pub(crate) const RULE_ROPE: &str = "rope-pair-layout";

/// A per-column vector combined with a value in pair layout is read in that
/// layout: `(Y + 1 ⊗ b)' = Y' + 1 ⊗ b'` with `b'[p] = b[P.source(p)]`, since
/// a permutation of columns commutes with adding a per-column vector (a
/// bias between a projection and its RoPE, as in Qwen2 or GPT-NeoX).
pub(crate) const RULE_PERMUTE_VECTOR: &str = "permuted-column-vector";

/// A per-head reduction of a value in pair layout, and a per-head value
/// expanded over its heads, are the same in pair order: every pair group
/// lies inside one head, so the permutation only reorders columns within
/// heads, `group_reduce(Y')[:, h] = group_reduce(Y)[:, h]` and
/// `group_expand(s)' = group_expand(s)`. QK-norm between a projection and
/// its RoPE (Qwen3, Gemma-3, Persimmon) then keeps the RoPE pair layout.
pub(crate) const RULE_HEAD_STATISTICS: &str = "per-head-statistics-in-pair-layout";

/// A value in pair layout that leaves the block is stored in original column
/// order by its store: `out[:, P.source(p)] = Y'[:, p]`.
pub(crate) const RULE_UNPERMUTE_STORE: &str = "unpermute-in-store";

/// `interleave(Y'[:, 0::2], Y'[:, 1::2]) = Y'`: the even and odd halves of
/// a value put back together. A value saved for the backward in pair layout
/// (`interleave(z[:, :F], z[:, F:])`) is then the pair-layout accumulator
/// itself, stored as it is.
pub(crate) const RULE_INTERLEAVE_HALVES: &str = "interleave-of-halves";

/// A matmul's pair layout and the rule that wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The permutation of the weight rows (and accumulator columns).
    pub(crate) perm: PairPerm,
    /// [`RULE_GATED`] or [`RULE_ROPE`].
    pub(crate) rule: &'static str,
}

/// Whether every pair group of `perm` lies inside one head of `width`
/// columns (see [`RULE_HEAD_STATISTICS`]).
pub(crate) fn within_heads(perm: PairPerm, width: i64) -> bool {
    width > 0 && width % perm.group == 0 && perm.start % width == 0
}

/// Chooses a pair permutation for each matmul whose result (through
/// elementwise work) is split into halves or rotated by rotate-half RoPE,
/// and whose right operand is a weight read transposed (`x @ w.T`, the
/// layout whose rows the GEMM loader can gather). `excluded` matmuls keep
/// their layout.
pub(crate) fn choose(block: &Block, options: &Options, excluded: &BTreeSet<Value>) -> BTreeMap<Value, Choice> {
    let mut chosen = BTreeMap::new();
    if !options.pair_layouts {
        return chosen;
    }
    let users = block.users();
    for (v, inst) in block.insts.iter() {
        let Inst::MatMul { rhs, rhs_transposed: true, .. } = inst else { continue };
        if excluded.contains(&v) || !is_weight(block, *rhs) {
            continue;
        }
        let Some(n) = block.ty(v).shape.cols.as_const() else { continue };
        if let Some(perm) = wanted_perm(block, &users, v, n) {
            chosen.insert(v, perm);
        }
    }
    chosen
}

/// A block input, or block inputs stacked ([`crate::siblings`]): rows the
/// GEMM's loader can gather.
fn is_weight(block: &Block, v: Value) -> bool {
    match block.inst(v) {
        Inst::Param(_) => true,
        Inst::StackRows { parts } => parts.iter().all(|p| matches!(block.inst(*p), Inst::Param(_))),
        _ => false,
    }
}

/// The permutation the users of matmul `v` (with `n` columns) want, looking
/// through elementwise work and column slices: the gated layout when its
/// two halves meet in element-wise work, else the RoPE layout of the
/// rotate-half RoPEs on its columns (several slices' RoPEs, such as those
/// of q and k stacked in one product, join when their column ranges
/// follow each other; the first such run is taken).
fn wanted_perm(block: &Block, users: &[Vec<Value>], v: Value, n: i64) -> Option<Choice> {
    let (gated, mut ropes) = column_uses(block, users, v, n);
    if gated {
        return Some(Choice { perm: PairPerm { start: 0, end: n, group: n }, rule: RULE_GATED });
    }
    ropes.sort_by_key(|p| (p.start, p.end));
    ropes.dedup();
    let mut ropes = ropes.into_iter();
    let mut run = ropes.next()?;
    for next in ropes {
        if next.start == run.end && next.group == run.group {
            run.end = next.end;
        }
    }
    Some(Choice { perm: run, rule: RULE_ROPE })
}

/// Whether the `[gate | up]` halves of matmul `v` (with `n` columns) meet
/// in element-wise work: a product the gated layout wants whole.
pub(crate) fn gated(block: &Block, users: &[Vec<Value>], v: Value, n: i64) -> bool {
    column_uses(block, users, v, n).0
}

/// What the users of matmul `v` (with `n` columns) do with its columns,
/// through elementwise work and column slices: whether its two halves meet
/// in element-wise work, and the column ranges of its rotate-half RoPEs as
/// pair layouts.
fn column_uses(block: &Block, users: &[Vec<Value>], v: Value, n: i64) -> (bool, Vec<PairPerm>) {
    // (value, its first column in v's columns)
    let mut stack = vec![(v, 0)];
    let mut seen = BTreeSet::new();
    let mut halves: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
    let mut ropes = Vec::new();
    while let Some((x, offset)) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        for &u in &users[x.index()] {
            match block.inst(u) {
                Inst::SliceCols { start, len, step: 1, .. } => {
                    let (Some(s), l) = (start.as_const(), len.as_const()) else { continue };
                    if offset == 0 && n % 2 == 0 && l == Some(n / 2) && (s == 0 || s == n / 2) {
                        halves[usize::from(s != 0)].push(u);
                    }
                    stack.push((u, offset + s));
                }
                // Partial rotary pairs only part of each head: no one
                // permutation group per head.
                Inst::RopePartner { spec, .. } if spec.style == RopeStyle::Half && spec.rotary_dim == spec.head_dim => {
                    let (Some(start), Some(end)) = (spec.start.as_const(), spec.end.as_const()) else { continue };
                    let perm = PairPerm { start: offset + start, end: offset + end, group: spec.head_dim };
                    if perm.is_valid() && perm.end <= n {
                        ropes.push(perm);
                    }
                }
                Inst::Unary { .. } | Inst::Cast { .. } | Inst::Binary { .. } | Inst::Select { .. } => {
                    stack.push((u, offset))
                }
                _ => {}
            }
        }
    }
    // What each half's slices reach element-wise, and the interleaves they
    // feed (a pair-layout save of both halves).
    let reach = |side: &[Value]| -> BTreeSet<Value> {
        let mut all = BTreeSet::new();
        for &h in side {
            all.extend(crate::siblings::elementwise_reach(block, users, h));
            all.extend(users[h.index()].iter().filter(|u| matches!(block.inst(**u), Inst::Interleave { .. })));
        }
        all
    };
    let gated = !reach(&halves[0]).is_disjoint(&reach(&halves[1]));
    (gated, ropes)
}
