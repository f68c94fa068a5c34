//! Sums of products: `A₀ @ W₀ + A₁ @ W₁ + …` of one output shape become one
//! product over the concatenated inner dimension. A layer written with
//! separate q/k/v or gate/up weights has such sums in its backward (the
//! gradient of the input they share), and each product would otherwise be
//! a GEMM of its own that stores its tile for the next to add.

use coda_ir::infer::TypeError;
use coda_ir::{BinaryOp, Block, DType, Inst, Shape, Value};

/// `Σ_p A_p @ W_p = [A₀ | A₁ | …] @ [W₀; W₁; …]`: the inner dimension of the
/// product of the column concatenation by the row stack runs through every
/// part in turn. The GEMM's loader reads each part where it is
/// ([`Inst::ConcatCols`] and [`Inst::StackRows`] as one operand pair per
/// part of the K loop); nothing is copied, and the partial sums never leave
/// the accumulator.
///
/// Numerics: each part's product was rounded to its operand type (the
/// gradient of a 16-bit input is 16-bit) before the sum; the one product
/// accumulates every term in fp32 and rounds once, so the result is closer
/// to the exact sum than the block's, by at most those roundings.
pub(crate) const RULE: &str = "summed-products";

/// The most products one sum takes: the GEMM reads at most this many
/// operand pairs in its K loop (`coda::GemmKParts`).
const MAX_PARTS: usize = 3;

/// One term of a sum that is a product `lhs @ weight` (possibly cast).
#[derive(Debug, Clone, Copy)]
struct Product {
    lhs: Value,
    weight: Value,
    dtype: DType,
}

/// Rewrites every sum of at least two products of weights into one product
/// over the concatenated inner dimension. Returns the block and how many
/// sums were.
pub(crate) fn rewrite(block: &Block) -> Result<(Block, usize), TypeError> {
    let users = block.users();
    let outputs: Vec<Value> = block.outputs.iter().map(|o| o.value).collect();
    let only_used_by = |v: Value, by: Value| users[v.index()].iter().all(|u| *u == by) && !outputs.contains(&v);
    crate::rewriter::rebuild(block, |out, map, v| {
        // A root: a sum that is not itself one term of a larger sum.
        if !is_add(block, v) || users[v.index()].iter().any(|u| is_add(block, *u) && only_used_by(v, *u)) {
            return None;
        }
        let (products, rest) = terms(block, v, &only_used_by);
        if products.len() < 2 {
            return None;
        }
        Some(emit(out, map, block, v, &products, &rest))
    })
}

fn is_add(block: &Block, v: Value) -> bool {
    matches!(block.inst(v), Inst::Binary { op: BinaryOp::Add, .. })
}

/// The terms of the sum rooted at `root`: the products of one output shape
/// and operand type that can be read as one (at most [`MAX_PARTS`]), and
/// every other term.
fn terms(block: &Block, root: Value, only_used_by: &dyn Fn(Value, Value) -> bool) -> (Vec<Product>, Vec<Value>) {
    let mut leaves = Vec::new();
    let mut stack = vec![root];
    while let Some(x) = stack.pop() {
        let Inst::Binary { op: BinaryOp::Add, lhs, rhs } = block.inst(x) else { continue };
        for t in [*lhs, *rhs] {
            if is_add(block, t) && only_used_by(t, x) {
                stack.push(t);
            } else {
                leaves.push((t, x));
            }
        }
    }
    // In source order, so that the parts are laid out as the program wrote them.
    leaves.sort_by_key(|(t, _)| t.index());
    let shape: &Shape = &block.ty(root).shape;
    let mut products: Vec<Product> = Vec::new();
    let mut rest = Vec::new();
    for (t, parent) in leaves {
        let fits = product(block, t, parent, only_used_by).filter(|p| {
            products.len() < MAX_PARTS && products.first().is_none_or(|f| f.dtype == p.dtype) && {
                let lhs = &block.ty(p.lhs).shape;
                let w = &block.ty(p.weight).shape;
                lhs.rows == shape.rows && w.cols == shape.cols && w.rows == lhs.cols
            }
        });
        match fits {
            Some(p) => products.push(p),
            None => rest.push(t),
        }
    }
    (products, rest)
}

/// `t` as a product `lhs @ weight` of a block input in the operand type,
/// neither transposed, used only by the sum (directly or through one cast
/// to a float type, the rounding the rule may drop).
fn product(block: &Block, t: Value, parent: Value, only_used_by: &dyn Fn(Value, Value) -> bool) -> Option<Product> {
    if !only_used_by(t, parent) {
        return None;
    }
    let mm = match block.inst(t) {
        Inst::Cast { to: DType::BF16 | DType::F16 | DType::F32, arg } if only_used_by(*arg, t) => *arg,
        Inst::Cast { .. } => return None,
        _ => t,
    };
    let Inst::MatMul { lhs, rhs, lhs_transposed: false, rhs_transposed: false, operand_dtype } = block.inst(mm) else {
        return None;
    };
    let Inst::Param(index) = block.inst(*rhs) else { return None };
    let param = block.params.get(*index)?;
    (param.dtype == *operand_dtype).then_some(Product { lhs: *lhs, weight: *rhs, dtype: *operand_dtype })
}

/// The one product (plus the other terms) that replaces the sum at `root`.
fn emit(
    out: &mut Block,
    map: &[Value],
    block: &Block,
    root: Value,
    products: &[Product],
    rest: &[Value],
) -> Result<Value, TypeError> {
    let span = block.insts.span(root);
    let lhs = out.push(Inst::ConcatCols { parts: products.iter().map(|p| map[p.lhs.index()]).collect() }, span)?;
    let rhs = out.push(Inst::StackRows { parts: products.iter().map(|p| map[p.weight.index()]).collect() }, span)?;
    let product =
        Inst::MatMul { lhs, rhs, lhs_transposed: false, rhs_transposed: false, operand_dtype: products[0].dtype };
    let mut sum = out.push(product, span)?;
    for t in rest {
        sum = out.push(Inst::Binary { op: BinaryOp::Add, lhs: sum, rhs: map[t.index()] }, span)?;
    }
    Ok(sum)
}
