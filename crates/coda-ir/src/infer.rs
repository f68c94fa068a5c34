//! Type inference for one instruction: the typing rules of the IR.
//!
//! The lowering reports user-facing shape errors before it builds an
//! instruction, so a [`TypeError`] here means the lowering (or a pass) broke
//! an invariant; the verifier reuses the same rules.

use crate::block::Block;
use crate::dim::Dim;
use crate::inst::{Inst, Value};
use crate::ty::{DType, Shape, Ty};

/// An instruction that breaks a typing rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TypeError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, TypeError> {
    Err(TypeError(message.into()))
}

fn f32_ty(shape: Shape) -> Ty {
    Ty { dtype: DType::F32, shape }
}

/// The type of `inst` in `block`, or why it is ill-typed.
pub fn infer(block: &Block, inst: &Inst) -> Result<Ty, TypeError> {
    let ty = |v: Value| -> Result<&Ty, TypeError> {
        block.types.get(v.index()).ok_or_else(|| TypeError(format!("{v} is not defined yet")))
    };
    match inst {
        Inst::Param(i) => match block.params.get(*i) {
            Some(p) => Ok(p.ty()),
            None => err(format!("parameter {i} does not exist")),
        },
        Inst::Const(_) | Inst::DimValue(_) => Ok(f32_ty(Shape::scalar())),
        Inst::Unary { arg, .. } => {
            let a = ty(*arg)?;
            float_operand(a)?;
            Ok(f32_ty(a.shape.clone()))
        }
        Inst::Binary { op, lhs, rhs } => {
            let (a, b) = (ty(*lhs)?, ty(*rhs)?);
            same_shape(a, b)?;
            if a.dtype == DType::Bool || b.dtype == DType::Bool {
                return err("arithmetic on a bool value");
            }
            let dtype = if op.is_comparison() { DType::Bool } else { DType::F32 };
            Ok(Ty { dtype, shape: a.shape.clone() })
        }
        Inst::Select { cond, on_true, on_false } => {
            let (c, a, b) = (ty(*cond)?, ty(*on_true)?, ty(*on_false)?);
            if c.dtype != DType::Bool {
                return err("select condition is not a bool");
            }
            same_shape(c, a)?;
            same_shape(a, b)?;
            Ok(f32_ty(a.shape.clone()))
        }
        Inst::Cast { to, arg } => Ok(Ty { dtype: *to, shape: ty(*arg)?.shape.clone() }),
        Inst::Broadcast { arg, shape } => {
            let a = ty(*arg)?;
            let fits = |from: &Dim, to: &Dim| from == to || from.is_one();
            if !fits(&a.shape.rows, &shape.rows) || !fits(&a.shape.cols, &shape.cols) {
                return err(format!("cannot broadcast {} to {shape}", a.shape));
            }
            Ok(Ty { dtype: a.dtype, shape: shape.clone() })
        }
        Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, operand_dtype } => {
            let (a, b) = (ty(*lhs)?, ty(*rhs)?);
            let a = if *lhs_transposed { a.shape.transposed() } else { a.shape.clone() };
            let b = if *rhs_transposed { b.shape.transposed() } else { b.shape.clone() };
            if a.cols != b.rows {
                return err(format!("matmul inner dims differ: {a} @ {b}"));
            }
            if !operand_dtype.is_gemm_operand() {
                return err("matmul operands must be read as bf16, f16, e4m3 or e5m2");
            }
            Ok(f32_ty(Shape::new(a.rows, b.cols)))
        }
        Inst::Transpose { arg } => {
            let a = ty(*arg)?;
            Ok(Ty { dtype: a.dtype, shape: a.shape.transposed() })
        }
        Inst::Reduce { axis, arg, .. } => {
            let a = ty(*arg)?;
            float_operand(a)?;
            let shape = match axis {
                crate::inst::Axis::Rows => Shape::new(Dim::constant(1), a.shape.cols.clone()),
                crate::inst::Axis::Cols => Shape::new(a.shape.rows.clone(), Dim::constant(1)),
            };
            Ok(f32_ty(shape))
        }
        Inst::GroupReduce { groups, arg, .. } => {
            let a = ty(*arg)?;
            float_operand(a)?;
            let count = groups.count(&a.shape.cols).map_err(|_| not_heads(*groups, &a.shape.cols))?;
            Ok(f32_ty(Shape::new(a.shape.rows.clone(), count)))
        }
        Inst::GroupExpand { groups, arg, cols } => {
            let a = ty(*arg)?;
            let count = groups.count(cols).map_err(|_| not_heads(*groups, cols))?;
            if a.shape.cols != count {
                return err(format!("{groups} of {cols} columns are {count} groups, not {}", a.shape.cols));
            }
            Ok(Ty { dtype: a.dtype, shape: Shape::new(a.shape.rows.clone(), cols.clone()) })
        }
        Inst::SliceHeads { arg, part } => {
            let a = ty(*arg)?;
            let heads = heads_of(part, &a.shape.cols)?;
            let cols = heads.mul(&Dim::constant(part.width)).map_err(|e| TypeError(e.to_string()))?;
            Ok(Ty { dtype: a.dtype, shape: Shape::new(a.shape.rows.clone(), cols) })
        }
        Inst::PadHeads { arg, part, cols } => {
            let a = ty(*arg)?;
            float_operand(a)?;
            let heads = heads_of(part, cols)?;
            if a.shape.cols != heads.mul(&Dim::constant(part.width)).map_err(|e| TypeError(e.to_string()))? {
                return err(format!("{} columns are not the {part} of {cols} columns", a.shape.cols));
            }
            Ok(f32_ty(Shape::new(a.shape.rows.clone(), cols.clone())))
        }
        Inst::SliceCols { arg, len, step, .. } => {
            let a = ty(*arg)?;
            if *step < 1 {
                return err("slice step must be positive");
            }
            Ok(Ty { dtype: a.dtype, shape: Shape::new(a.shape.rows.clone(), len.clone()) })
        }
        Inst::ConcatCols { parts } => {
            let Some(first) = parts.first() else { return err("concat of nothing") };
            let rows = ty(*first)?.shape.rows.clone();
            let mut cols = Dim::constant(0);
            for part in parts {
                let p = ty(*part)?;
                if p.shape.rows != rows {
                    return err("concat parts have different row counts");
                }
                cols = cols.add(&p.shape.cols).map_err(|e| TypeError(e.to_string()))?;
            }
            Ok(f32_ty(Shape::new(rows, cols)))
        }
        Inst::StackRows { parts } => {
            let Some(first) = parts.first() else { return err("stack of nothing") };
            let first = ty(*first)?;
            let mut rows = Dim::constant(0);
            for part in parts {
                let p = ty(*part)?;
                if p.shape.cols != first.shape.cols || p.dtype != first.dtype {
                    return err(format!(
                        "stacked parts {} {} and {} {} differ",
                        first.dtype, first.shape, p.dtype, p.shape
                    ));
                }
                rows = rows.add(&p.shape.rows).map_err(|e| TypeError(e.to_string()))?;
            }
            Ok(Ty { dtype: first.dtype, shape: Shape::new(rows, first.shape.cols.clone()) })
        }
        Inst::Interleave { even, odd } => {
            let (a, b) = (ty(*even)?, ty(*odd)?);
            same_shape(a, b)?;
            let cols = a.shape.cols.mul(&Dim::constant(2)).map_err(|e| TypeError(e.to_string()))?;
            Ok(f32_ty(Shape::new(a.shape.rows.clone(), cols)))
        }
        Inst::TakeCols { arg, index } => {
            let (a, i) = (ty(*arg)?, ty(*index)?);
            if i.dtype != DType::I32 {
                return err("take index is not i32");
            }
            if i.shape != Shape::new(a.shape.rows.clone(), Dim::constant(1)) {
                return err(format!("take index shape {} does not match rows of {}", i.shape, a.shape));
            }
            Ok(f32_ty(i.shape.clone()))
        }
        Inst::ScatterCols { arg, index, cols } => {
            let (a, i) = (ty(*arg)?, ty(*index)?);
            if i.dtype != DType::I32 {
                return err("scatter index is not i32");
            }
            float_operand(a)?;
            if !a.shape.cols.is_one() || i.shape != a.shape {
                return err(format!("scatter of {} by an index {}: both must be [rows, 1]", a.shape, i.shape));
            }
            Ok(f32_ty(Shape::new(a.shape.rows.clone(), cols.clone())))
        }
        Inst::TopK { arg, k, indices } => {
            let a = ty(*arg)?;
            float_operand(a)?;
            if *k < 1 || a.shape.cols.as_const().is_none_or(|n| n < *k) {
                return err(format!("top {k} of {} columns", a.shape.cols));
            }
            let dtype = if *indices { DType::I32 } else { DType::F32 };
            Ok(Ty { dtype, shape: Shape::new(a.shape.rows.clone(), Dim::constant(*k)) })
        }
        Inst::GatherRows { table, index } => {
            let (t, i) = (ty(*table)?, ty(*index)?);
            if i.dtype != DType::I32 || !i.shape.cols.is_one() {
                return err(format!("gather index {} {} is not i32[M, 1]", i.dtype, i.shape));
            }
            Ok(Ty { dtype: t.dtype, shape: Shape::new(i.shape.rows.clone(), t.shape.cols.clone()) })
        }
        Inst::ScatterAddRows { arg, index, rows } => {
            let (a, i) = (ty(*arg)?, ty(*index)?);
            float_operand(a)?;
            if i.dtype != DType::I32 || i.shape != Shape::new(a.shape.rows.clone(), Dim::constant(1)) {
                return err(format!("scatter index {} {} does not give one row of {} each", i.dtype, i.shape, a.shape));
            }
            Ok(f32_ty(Shape::new(rows.clone(), a.shape.cols.clone())))
        }
        Inst::RopeTable { cols, .. } => Ok(f32_ty(Shape::new(Dim::constant(1), cols.clone()))),
        Inst::RopePartner { arg, .. } => Ok(ty(*arg)?.clone()),
        Inst::PermuteRows { arg, perm } => {
            let a = ty(*arg)?;
            permutable(perm, &a.shape.rows)?;
            Ok(a.clone())
        }
        Inst::UnpermuteCols { arg, perm } => {
            let a = ty(*arg)?;
            permutable(perm, &a.shape.cols)?;
            Ok(a.clone())
        }
        Inst::PermuteCols { arg, perm } => {
            let a = ty(*arg)?;
            if !a.shape.rows.is_one() {
                return err(format!("permute_cols takes a [1, N] vector, got {}", a.shape));
            }
            permutable(perm, &a.shape.cols)?;
            Ok(a.clone())
        }
    }
}

/// A pair permutation must be well formed and stay inside a constant axis.
fn permutable(perm: &crate::inst::PairPerm, axis: &Dim) -> Result<(), TypeError> {
    match axis.as_const() {
        Some(len) if perm.is_valid() && perm.end <= len => Ok(()),
        _ => err(format!("pair permutation ({perm}) does not fit an axis of length {axis}")),
    }
}

/// The number of heads of a part's `cols` columns.
fn heads_of(part: &crate::inst::HeadPart, cols: &Dim) -> Result<Dim, TypeError> {
    if !part.is_valid() {
        return err(format!("{part} is not inside a head"));
    }
    cols.div_exact(&Dim::constant(part.head))
        .map_err(|_| TypeError(format!("{cols} columns are not a whole number of heads of {}", part.head)))
}

fn not_heads(groups: crate::inst::ColGroups, cols: &Dim) -> TypeError {
    TypeError(format!("{cols} columns are not a whole number of heads of {}", groups.width()))
}

fn same_shape(a: &Ty, b: &Ty) -> Result<(), TypeError> {
    if a.shape == b.shape {
        Ok(())
    } else {
        err(format!("operand shapes differ: {} and {}", a.shape, b.shape))
    }
}

fn float_operand(a: &Ty) -> Result<(), TypeError> {
    if a.dtype == DType::Bool {
        err("a bool used as a number")
    } else {
        Ok(())
    }
}
