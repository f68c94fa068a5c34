//! Sibling weights: two products of one left operand whose results are
//! combined element-wise (`silu(h @ w_gateᵀ) * (h @ w_upᵀ)`, the layout of
//! every Hugging Face checkpoint) become one product with the weights'
//! rows stacked, which the gated pair layout then takes as it takes a fused
//! `[gate; up]` weight.

use crate::rewriter::{compact, copy_inst, copy_outputs, empty_like};
use coda_ir::infer::TypeError;
use coda_ir::{Block, DType, Dim, Inst, Value};
use std::collections::BTreeSet;

/// `[x @ W₀ᵀ | x @ W₁ᵀ] = x @ [W₀; W₁]ᵀ`: column block `i` of the product
/// with stacked rows is the product with part `i`, so
/// `x @ Wᵢᵀ = (x @ [W₀; W₁]ᵀ)[:, offsetᵢ ..]`, and a cast of both halves
/// to one type is the halves of the cast. The GEMM's loader reads each
/// part where it is ([`Inst::StackRows`]); nothing is copied.
///
/// Numerics: every output element is the same dot product, accumulated in
/// fp32 over the same K; only the kernel that computes it changes.
pub(crate) const RULE: &str = "stacked-sibling-weights";

/// `x @ [W₀; W₁]ᵀ = [x @ W₀ᵀ | x @ W₁ᵀ]`: a stacked product that kept no
/// pair layout is computed as its parts again (the halves it was read
/// through become the parts' own products).
pub(crate) const RULE_UNSTACK: &str = "unstacked-sibling-weights";

/// One pair of sibling matmuls of the original block: `lhs @ weights[i]ᵀ`.
#[derive(Debug, Clone, Copy)]
struct Siblings {
    first: Value,
    second: Value,
    lhs: Value,
    weights: [Value; 2],
    dtype: DType,
}

/// Stacks every pair of sibling matmuls whose results meet in element-wise
/// work. Returns the block and the number of pairs stacked.
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
        match pairs.iter().find(|p| p.first == v) {
            Some(pair) => emit_stacked(block, &users, &mut new, &mut map, *pair)?,
            None => map[v.index()] = Some(copy_inst(&mut new, block, v, &map)?),
        }
    }
    copy_outputs(&mut new, block, &map)?;
    Ok((compact(&new)?, pairs.len()))
}

/// The stacked product of `pair`, emitted where its first matmul was, with
/// the halves that replace both matmuls (or their casts).
fn emit_stacked(
    old: &Block,
    users: &[Vec<Value>],
    new: &mut Block,
    map: &mut [Option<Value>],
    pair: Siblings,
) -> Result<(), TypeError> {
    let span = old.insts.span(pair.first);
    let new_of = |v: Value| map[v.index()].ok_or_else(|| TypeError("a sibling's operand comes after it".into()));
    let parts = vec![new_of(pair.weights[0])?, new_of(pair.weights[1])?];
    let rows = old.ty(pair.first).shape.cols.clone();
    let stacked = new.push(Inst::StackRows { parts }, span)?;
    let product = Inst::MatMul {
        lhs: new_of(pair.lhs)?,
        rhs: stacked,
        lhs_transposed: false,
        rhs_transposed: true,
        operand_dtype: pair.dtype,
    };
    let mut whole = new.push(product, span)?;
    // Both results only cast to one type: the halves of one cast.
    let cast = common_cast(old, users, pair);
    if let Some(to) = cast {
        whole = new.push(Inst::Cast { to, arg: whole }, span)?;
    }
    let name = |v: Value| old.names.get(v.index()).cloned().flatten();
    let named = |v: Value| match cast {
        Some(_) => users[v.index()].first().and_then(|u| name(*u)),
        None => name(v),
    };
    if let (Some(a), Some(b)) = (named(pair.first), named(pair.second)) {
        new.set_name(whole, &format!("{a}_{b}"));
    }
    for (k, sibling) in [pair.first, pair.second].into_iter().enumerate() {
        let start = if k == 0 { Dim::constant(0) } else { rows.clone() };
        let half = new.push(Inst::SliceCols { arg: whole, start, len: rows.clone(), step: 1 }, span)?;
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

/// The type both siblings are cast to when every use of each is that cast.
fn common_cast(block: &Block, users: &[Vec<Value>], pair: Siblings) -> Option<DType> {
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
    if out(pair.first) || out(pair.second) {
        return None;
    }
    match (cast_of(pair.first), cast_of(pair.second)) {
        (Some(a), Some(b)) if a == b => Some(a),
        _ => None,
    }
}

/// The sibling pairs: matmuls `x @ Wᵀ` of one left operand, reading weights
/// (block inputs in the operand type) of one constant shape, whose results
/// meet in element-wise work; each matmul in at most one pair.
fn find(block: &Block) -> Vec<Siblings> {
    let users = block.users();
    let candidates: Vec<(Value, WeightProduct)> =
        block.insts.iter().filter_map(|(v, _)| Some((v, weight_product(block, v)?))).collect();
    let mut taken = BTreeSet::new();
    let mut pairs = Vec::new();
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
            pairs.push(Siblings { first: *a, second: *b, lhs, weights: [pa.weight, pb.weight], dtype });
            break;
        }
    }
    pairs
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
fn elementwise_reach(block: &Block, users: &[Vec<Value>], v: Value) -> BTreeSet<Value> {
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
                    Inst::StackRows { parts } => {
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
