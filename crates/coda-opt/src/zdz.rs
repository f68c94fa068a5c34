//! Row dot products read from a saved product (CODA's `zdz` trick): the
//! RMSNorm backward's row term, computed from the gradient of the norm's
//! matmul and its saved result instead of after the dgrad GEMM.

use crate::rowscale::{flatten, product, row_vector};
use coda_diagnostics::Span;
use coda_ir::infer::TypeError;
use coda_ir::{Axis, BinaryOp, Block, DType, Inst, ReduceOp, SavedProduct, Value};

/// `Σ_j (D @ R)_j P_j = Σ_k D_k (P @ Rᵀ)_k` per row (both are
/// `Σ_j Σ_k D_k R_kj P_j`). With a saved product `S = P @ Rᵀ`
/// ([`SavedProduct`]) and `P = Q ⊙ c` for per-row factors `c`, a row sum
/// `Σ_j A_j Q_j` over the dgrad `A = D @ R` becomes `(Σ_k D̃_k S_k) / c`,
/// `D̃` being `D` rounded to the operand type as the dgrad GEMM reads it.
///
/// In a norm's backward, `D` is the gradient of the norm's matmul (`dz`)
/// and `S` the matmul's saved result (`z`): the row term, which needed the
/// whole row of the dgrad GEMM's result (a row kernel after it), becomes a
/// row reduction of the epilogue that produces `dz`, one GEMM earlier, and
/// the dgrad GEMM's epilogue can finish the norm's backward.
///
/// Numerics: the forward rounded `P` (or, with the norm deferred, `P / c`)
/// to the operand type before its GEMM, so the new sum reads `P` rounded,
/// where the original reads it exact: a relative error of the 16-bit
/// type's half ulp per term, like the forward's own rounding.
pub(crate) const RULE: &str = "row-dot-from-saved-product";

/// A row sum the rule rewrites.
struct RowDot<'a> {
    /// The product it reads.
    fact: &'a SavedProduct,
    /// `D`'s column parts, one per part of the saved product.
    columns: Vec<Value>,
    /// Per-row factors (`[M, 1]`) of `P` missing from the summand: divisors.
    divisors: Vec<Value>,
    /// Per-row factors of the summand missing from `P`: multipliers.
    multipliers: Vec<Value>,
}

/// Rewrites every row sum the rule matches; returns the block and the count.
pub(crate) fn rewrite(block: &Block) -> Result<(Block, usize), TypeError> {
    crate::rewriter::rebuild(block, |out, map, v| {
        let dot = row_dot(block, v)?;
        Some(from_saved(out, map, &dot, block.insts.span(v)))
    })
}

/// `v` as `Σ_j A_j Q_j` over a dgrad `A` with a saved product, when the rule applies.
fn row_dot(block: &Block, v: Value) -> Option<RowDot<'_>> {
    let Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Cols, arg } = block.inst(v) else { return None };
    let rows = block.ty(v).shape.rows.clone();
    let mut summand = Vec::new();
    flatten(block, *arg, &mut summand);
    // The dgrad, or the dgrad rounded to 16 bits (a gradient stored in its
    // tensor's type): the rewritten sum reads it exact.
    let dgrad_of = |f: Value| match block.inst(f) {
        Inst::MatMul { .. } => Some(f),
        Inst::Cast { to, arg } if to.is_half() && matches!(block.inst(*arg), Inst::MatMul { .. }) => Some(*arg),
        _ => None,
    };
    let mut matmuls = summand.iter().filter(|f| dgrad_of(**f).is_some());
    let (Some(&factor), None) = (matmuls.next(), matmuls.next()) else { return None };
    let dgrad = dgrad_of(factor)?;
    let Inst::MatMul { lhs, rhs, lhs_transposed: false, rhs_transposed, operand_dtype } = block.inst(dgrad) else {
        return None;
    };
    let fact = block
        .saved_products
        .iter()
        .find(|f| f.rhs == *rhs && f.rhs_transposed != *rhs_transposed && f.operand_dtype == *operand_dtype)?;
    let mut operand = Vec::new();
    flatten(block, uncast(block, fact.lhs, fact.operand_dtype), &mut operand);
    let mut multipliers = Vec::new();
    for f in summand.into_iter().filter(|f| *f != factor) {
        match operand.iter().position(|p| *p == f) {
            Some(i) => {
                operand.remove(i);
            }
            None => multipliers.push(row_vector(block, f, &rows)?),
        }
    }
    let divisors = operand.iter().map(|f| row_vector(block, *f, &rows)).collect::<Option<Vec<_>>>()?;
    let columns = split_columns(block, *lhs, fact)?;
    Some(RowDot { fact, columns, divisors, multipliers })
}

/// `v` without casts to `dtype` (the matmul rounds its operand anyway).
fn uncast(block: &Block, mut v: Value, dtype: DType) -> Value {
    while let Inst::Cast { to, arg } = block.inst(v) {
        if *to != dtype {
            break;
        }
        v = *arg;
    }
    v
}

/// `D`'s columns as the saved product's parts line them up: the parts of a
/// concatenation of the same widths, or `D` itself for a single part. (A
/// `D` of several parts that is not such a concatenation would need column
/// slices of it; no backward block makes one, so the rule leaves it.)
fn split_columns(block: &Block, d: Value, fact: &SavedProduct) -> Option<Vec<Value>> {
    if fact.parts.len() == 1 {
        return Some(vec![d]);
    }
    let Inst::ConcatCols { parts } = block.inst(d) else { return None };
    let same = parts.len() == fact.parts.len()
        && parts.iter().zip(&fact.parts).all(|(p, f)| block.ty(*p).shape.cols == block.ty(*f).shape.cols);
    same.then(|| parts.clone())
}

/// `(Σ_k D̃_k S_k) ⊙ multipliers / divisors` in `out`.
fn from_saved(out: &mut Block, map: &[Value], dot: &RowDot, span: Span) -> Result<Value, TypeError> {
    let dtype = dot.fact.operand_dtype;
    let pieces: Vec<Value> = dot.columns.iter().map(|p| map[p.index()]).collect();
    let mut terms = Vec::new();
    for (piece, part) in pieces.into_iter().zip(&dot.fact.parts) {
        let rounded = match out.ty(piece).dtype == dtype {
            true => piece,
            false => out.push(Inst::Cast { to: dtype, arg: piece }, span)?,
        };
        terms.push(out.push(Inst::Binary { op: BinaryOp::Mul, lhs: rounded, rhs: map[part.index()] }, span)?);
    }
    let mut sum = row_sum(out, &terms, span)?;
    if !dot.multipliers.is_empty() {
        let scale: Vec<Value> = dot.multipliers.iter().map(|m| map[m.index()]).collect();
        let scale = product(out, &scale, span)?;
        sum = out.push(Inst::Binary { op: BinaryOp::Mul, lhs: sum, rhs: scale }, span)?;
    }
    if !dot.divisors.is_empty() {
        let scale: Vec<Value> = dot.divisors.iter().map(|m| map[m.index()]).collect();
        let scale = product(out, &scale, span)?;
        sum = out.push(Inst::Binary { op: BinaryOp::Div, lhs: sum, rhs: scale }, span)?;
    }
    Ok(sum)
}

/// The row sum of all `terms`: one reduction of their elementwise sum when
/// their shapes agree (one pass over the columns of the epilogue that makes
/// them), else a reduction each.
fn row_sum(out: &mut Block, terms: &[Value], span: Span) -> Result<Value, TypeError> {
    let reduce =
        |out: &mut Block, arg: Value| out.push(Inst::Reduce { op: ReduceOp::Sum, axis: Axis::Cols, arg }, span);
    let same_shape = terms.windows(2).all(|w| out.ty(w[0]).shape == out.ty(w[1]).shape);
    let add = |out: &mut Block, lhs: Value, rhs: Value| out.push(Inst::Binary { op: BinaryOp::Add, lhs, rhs }, span);
    let Some((&first, others)) = terms.split_first() else {
        return Err(TypeError("a saved product without parts".into()));
    };
    if same_shape {
        let mut acc = first;
        for &t in others {
            acc = add(out, acc, t)?;
        }
        return reduce(out, acc);
    }
    let mut acc = reduce(out, first)?;
    for &t in others {
        let r = reduce(out, t)?;
        acc = add(out, acc, r)?;
    }
    Ok(acc)
}
