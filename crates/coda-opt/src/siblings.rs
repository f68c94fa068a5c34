//! Sibling weights: products of one left operand become one product with
//! the weights' rows stacked.
//!
//! * Two whose results are combined element-wise (`silu(h @ w_gateᵀ) *
//!   (h @ w_upᵀ)`, the layout of every Hugging Face checkpoint) are
//!   stacked as a pair, which the gated pair layout then takes as it takes
//!   a fused `[gate; up]` weight.
//! * The others, such as separate `q_proj`, `k_proj` and `v_proj` of
//!   unequal widths, are stacked in groups of up to [`MAX_GROUP`], which
//!   one GEMM computes as it computes a fused `[q; k; v]` weight.

use crate::rewriter::{compact, copy_inst, copy_outputs, empty_like};
use coda_ir::infer::TypeError;
use coda_ir::{Block, DType, Dim, Inst, Value};
use std::collections::BTreeSet;

/// `[x @ W₀ᵀ | x @ W₁ᵀ | …] = x @ [W₀; W₁; …]ᵀ`: column block `i` of the
/// product with stacked rows is the product with part `i`, so
/// `x @ Wᵢᵀ = (x @ [W₀; W₁; …]ᵀ)[:, offsetᵢ ..]`, and a cast of every part
/// to one type is the parts of the cast. The GEMM's loader reads each
/// part where it is ([`Inst::StackRows`]); nothing is copied.
///
/// Numerics: every output element is the same dot product, accumulated in
/// fp32 over the same K; only the kernel that computes it changes.
pub(crate) const RULE: &str = "stacked-sibling-weights";

/// `x @ [W₀; W₁]ᵀ = [x @ W₀ᵀ | x @ W₁ᵀ]`: a stacked product whose parts
/// meet in element-wise work but kept no pair layout is computed as its
/// parts again (the halves it was read through become the parts' own
/// products), so that one part's GEMM reads the other's result in its
/// epilogue rather than a row kernel combining both.
pub(crate) const RULE_UNSTACK: &str = "unstacked-sibling-weights";

/// The most products one stack holds: the GEMM loaders read up to three
/// weights (`coda::GemmArgs`'s `b`, `b2`, `b3`).
pub(crate) const MAX_GROUP: usize = 3;

/// The rows of every weight in a group of more than the gated pair are a
/// multiple of this, so that no 64-row box of the Hopper loader straddles
/// two weights.
const GROUP_ROWS: i64 = 64;

/// Sibling matmuls of the original block, `lhs @ weights[i]ᵀ`, the first
/// of them first in the block.
#[derive(Debug, Clone)]
struct Siblings {
    matmuls: Vec<Value>,
    lhs: Value,
    weights: Vec<Value>,
    dtype: DType,
}

/// Stacks every pair of sibling matmuls whose results meet in element-wise
/// work, then every other group of matmuls of one left operand. Returns
/// the block and the number of stacks.
pub(crate) fn stack(block: &Block) -> Result<(Block, usize), TypeError> {
    let pairs = find(block);
    if pairs.is_empty() {
        return Ok((block.clone(), 0));
    }
    let users = block.users();
    let mut new = empty_like(block);
    let mut map: Vec<Option<Value>> = vec![None; block.insts.len()];
    for (v, _) in block.insts.iter() {
        if map[v.index()].is_some() {
            continue;
        }
        match pairs.iter().find(|p| p.matmuls[0] == v) {
            Some(pair) => emit_stacked(block, &users, &mut new, &mut map, pair)?,
            None => map[v.index()] = Some(copy_inst(&mut new, block, v, &map)?),
        }
    }
    copy_outputs(&mut new, block, &map)?;
    Ok((compact(&new)?, pairs.len()))
}

/// The stacked product of `group`, emitted where its first matmul was,
/// with the parts that replace every matmul (or their casts).
fn emit_stacked(
    old: &Block,
    users: &[Vec<Value>],
    new: &mut Block,
    map: &mut [Option<Value>],
    group: &Siblings,
) -> Result<(), TypeError> {
    let span = old.insts.span(group.matmuls[0]);
    let new_of = |v: Value| map[v.index()].ok_or_else(|| TypeError("a sibling's operand comes after it".into()));
    let parts = group.weights.iter().map(|w| new_of(*w)).collect::<Result<Vec<_>, _>>()?;
    let stacked = new.push(Inst::StackRows { parts }, span)?;
    let product = Inst::MatMul {
        lhs: new_of(group.lhs)?,
        rhs: stacked,
        lhs_transposed: false,
        rhs_transposed: true,
        operand_dtype: group.dtype,
    };
    let mut whole = new.push(product, span)?;
    // Every result only cast to one type: the parts of one cast.
    let cast = common_cast(old, users, group);
    if let Some(to) = cast {
        whole = new.push(Inst::Cast { to, arg: whole }, span)?;
    }
    let name = |v: Value| old.names.get(v.index()).cloned().flatten();
    let named = |v: Value| match cast {
        Some(_) => users[v.index()].first().and_then(|u| name(*u)),
        None => name(v),
    };
    if let Some(names) = group.matmuls.iter().map(|m| named(*m)).collect::<Option<Vec<_>>>() {
        new.set_name(whole, &names.join("_"));
    }
    let mut start = Dim::constant(0);
    for &sibling in &group.matmuls {
        let rows = old.ty(sibling).shape.cols.clone();
        let half = new.push(Inst::SliceCols { arg: whole, start: start.clone(), len: rows.clone(), step: 1 }, span)?;
        start = start.add(&rows).map_err(|e| TypeError(format!("stacked rows: {e}")))?;
        let replaced = if cast.is_some() { users[sibling.index()].clone() } else { vec![sibling] };
        for r in replaced {
            if let Some(n) = name(r) {
                new.set_name(half, &n);
            }
            map[r.index()] = Some(half);
        }
        map[sibling.index()].get_or_insert(half);
    }
    Ok(())
}

/// The type every sibling is cast to when every use of each is that cast.
fn common_cast(block: &Block, users: &[Vec<Value>], group: &Siblings) -> Option<DType> {
    let cast_of = |v: Value| -> Option<DType> {
        let mut to = None;
        for u in &users[v.index()] {
            match block.inst(*u) {
                Inst::Cast { to: t, .. } if to.is_none_or(|x| x == *t) => to = Some(*t),
                _ => return None,
            }
        }
        to
    };
    let out = |v: Value| block.outputs.iter().any(|o| o.value == v);
    if group.matmuls.iter().any(|m| out(*m)) {
        return None;
    }
    let casts: Option<Vec<DType>> = group.matmuls.iter().map(|m| cast_of(*m)).collect();
    match casts?.as_slice() {
        [first, rest @ ..] if rest.iter().all(|t| t == first) => Some(*first),
        _ => None,
    }
}

/// The sibling pairs: matmuls `x @ Wᵀ` of one left operand, reading weights
/// (block inputs in the operand type) of one constant shape, whose results
/// meet in element-wise work; then the groups: up to [`MAX_GROUP`] other
/// matmuls of one left operand and operand type, whose weights' rows are
/// multiples of [`GROUP_ROWS`], in block order. Each matmul is in at most
/// one stack.
fn find(block: &Block) -> Vec<Siblings> {
    let users = block.users();
    let candidates: Vec<(Value, WeightProduct)> =
        block.insts.iter().filter_map(|(v, _)| Some((v, weight_product(block, v)?))).collect();
    let mut taken = BTreeSet::new();
    let mut stacks = Vec::new();
    for (i, (a, pa)) in candidates.iter().enumerate() {
        if taken.contains(a) {
            continue;
        }
        let reach_a = elementwise_reach(block, &users, *a);
        for (b, pb) in &candidates[i + 1..] {
            // The stacked product replaces the first: the second's weight
            // must be defined before it.
            if taken.contains(b) || pa.shared != pb.shared || pb.weight.index() > a.index() {
                continue;
            }
            if elementwise_reach(block, &users, *b).is_disjoint(&reach_a) {
                continue;
            }
            taken.extend([*a, *b]);
            let (lhs, dtype, _) = pa.shared.clone();
            stacks.push(Siblings { matmuls: vec![*a, *b], lhs, weights: vec![pa.weight, pb.weight], dtype });
            break;
        }
    }
    // A fused `[gate; up]` weight's product keeps its own gated layout.
    let stackable = |v: Value, p: &WeightProduct| {
        let rows = p.shared.2.rows.as_const();
        rows.is_some_and(|r| r % GROUP_ROWS == 0 && !crate::pairs::gated(block, &users, v, r))
    };
    for (i, (a, pa)) in candidates.iter().enumerate() {
        if taken.contains(a) || !stackable(*a, pa) {
            continue;
        }
        let (lhs, dtype, _) = pa.shared.clone();
        let mut group = Siblings { matmuls: vec![*a], lhs, weights: vec![pa.weight], dtype };
        for (b, pb) in &candidates[i + 1..] {
            let same = (pb.shared.0, pb.shared.1) == (lhs, dtype);
            let free = !taken.contains(b) && stackable(*b, pb);
            if group.matmuls.len() < MAX_GROUP && same && free && pb.weight.index() < a.index() {
                group.matmuls.push(*b);
                group.weights.push(pb.weight);
            }
        }
        if group.matmuls.len() > 1 {
            taken.extend(group.matmuls.iter().copied());
            stacks.push(group);
        }
    }
    stacks
}

/// A matmul `x @ Wᵀ` of a weight of constant rows: the weight, and what
/// two siblings share (the left operand, the operand type and the
/// weight's shape).
struct WeightProduct {
    weight: Value,
    shared: (Value, DType, coda_ir::Shape),
}

fn weight_product(block: &Block, v: Value) -> Option<WeightProduct> {
    let Inst::MatMul { lhs, rhs, lhs_transposed: false, rhs_transposed: true, operand_dtype } = block.inst(v) else {
        return None;
    };
    let Inst::Param(index) = block.inst(*rhs) else { return None };
    let param = block.params.get(*index)?;
    let shape = &block.ty(*rhs).shape;
    (param.dtype == *operand_dtype && shape.rows.as_const().is_some_and(|r| r > 0))
        .then(|| WeightProduct { weight: *rhs, shared: (*lhs, *operand_dtype, shape.clone()) })
}

/// The values computed element-wise from `v` (through casts, unary,
/// binary and select instructions).
pub(crate) fn elementwise_reach(block: &Block, users: &[Vec<Value>], v: Value) -> BTreeSet<Value> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        for &u in &users[x.index()] {
            let elementwise = matches!(
                block.inst(u),
                Inst::Unary { .. } | Inst::Cast { .. } | Inst::Binary { .. } | Inst::Select { .. }
            );
            if elementwise && seen.insert(u) {
                stack.push(u);
            }
        }
    }
    seen
}

/// Computes every stacked product not read in pair order as its parts
/// again (see [`RULE_UNSTACK`]). Returns the block and how many were.
pub(crate) fn unstack(block: &Block) -> Result<(Block, usize), TypeError> {
    if !block.insts.iter().any(|(_, inst)| matches!(inst, Inst::StackRows { .. })) {
        return Ok((block.clone(), 0));
    }
    let users = block.users();
    let mut new = empty_like(block);
    let mut map: Vec<Value> = Vec::with_capacity(block.insts.len());
    // New value -> the parts' products of a split stacked product (and
    // their casts, by type).
    let mut split: std::collections::HashMap<Value, (Vec<Value>, Option<DType>)> = Default::default();
    let mut count = 0;
    for (v, inst) in block.insts.iter() {
        let span = block.insts.span(v);
        let copy = inst.map_operands(|o| map[o.index()]);
        let nv = match &copy {
            Inst::MatMul { lhs, rhs, lhs_transposed: false, rhs_transposed: true, operand_dtype } => {
                match new.inst(*rhs).clone() {
                    Inst::StackRows { parts } if parts_meet(block, &users, v) => {
                        let mut products = Vec::new();
                        for p in parts {
                            let product = Inst::MatMul {
                                lhs: *lhs,
                                rhs: p,
                                lhs_transposed: false,
                                rhs_transposed: true,
                                operand_dtype: *operand_dtype,
                            };
                            products.push(new.push(product, span)?);
                        }
                        count += 1;
                        let whole = new.push(Inst::ConcatCols { parts: products.clone() }, span)?;
                        split.insert(whole, (products, None));
                        whole
                    }
                    _ => new.push(copy, span)?,
                }
            }
            Inst::Cast { to, arg } if split.get(arg).is_some_and(|(_, c)| c.is_none()) => {
                let (products, _) = split[arg].clone();
                let casts = products
                    .iter()
                    .map(|p| new.push(Inst::Cast { to: *to, arg: *p }, span))
                    .collect::<Result<_, _>>()?;
                let whole = new.push(copy.clone(), span)?;
                split.insert(whole, (casts, Some(*to)));
                whole
            }
            Inst::SliceCols { arg, start, len, step: 1 } => match split.get(arg) {
                Some((parts, _)) => {
                    part_at(&new, parts, start, len).map_or_else(|| new.push(copy.clone(), span), Ok)?
                }
                None => new.push(copy, span)?,
            },
            _ => new.push(copy, span)?,
        };
        if let Some(name) = block.names.get(v.index()).cloned().flatten() {
            new.set_name(nv, &name);
        }
        map.push(nv);
    }
    for o in &block.outputs {
        new.outputs.push(coda_ir::Output { value: map[o.value.index()], ..o.clone() });
    }
    if count == 0 {
        return Ok((block.clone(), 0));
    }
    Ok((compact(&new)?, count))
}

/// Whether two of the column slices that read stacked product `v`
/// (directly or through one cast) meet in element-wise work.
fn parts_meet(block: &Block, users: &[Vec<Value>], v: Value) -> bool {
    let through_casts = |x: Value| -> Vec<Value> {
        let mut out = vec![x];
        out.extend(users[x.index()].iter().copied().filter(|u| matches!(block.inst(*u), Inst::Cast { .. })));
        out
    };
    let slices: Vec<Value> = through_casts(v)
        .into_iter()
        .flat_map(|x| users[x.index()].iter().copied())
        .filter(|u| matches!(block.inst(*u), Inst::SliceCols { .. }))
        .collect();
    let reaches: Vec<BTreeSet<Value>> = slices.iter().map(|s| elementwise_reach(block, users, *s)).collect();
    reaches.iter().enumerate().any(|(i, a)| reaches[i + 1..].iter().any(|b| !a.is_disjoint(b)))
}

/// The part whose columns are exactly `start .. start + len`.
fn part_at(block: &Block, parts: &[Value], start: &Dim, len: &Dim) -> Option<Value> {
    let (start, len) = (start.as_const()?, len.as_const()?);
    let mut offset = 0;
    for &p in parts {
        let cols = block.ty(p).shape.cols.as_const()?;
        if offset == start && cols == len {
            return Some(p);
        }
        offset += cols;
    }
    None
}
