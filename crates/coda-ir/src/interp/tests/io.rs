//! Inputs, outputs, dimension bindings and resource limits.

use super::*;
use crate::block::DimDef;
use crate::inst::UnaryOp;
use crate::interp::eval::eval_with_limit;
use crate::interp::{bind_shape, MAX_ELEMENTS};

/// `y = exp(x)` with `x: f32[M, 4]`.
fn exp_block() -> TestResult<Builder> {
    let mut b = Builder::new();
    b.block.dims.push(DimDef { name: "M".into(), value: None });
    let x = b.param("x", DType::F32, (sym("M"), c(4)), 2)?;
    let y = b.push(Inst::Unary { op: UnaryOp::Exp, arg: x })?;
    b.output("y", DType::F32, y, false);
    Ok(b)
}

fn error_of(result: Result<BTreeMap<String, HostTensor>, EvalError>) -> TestResult<EvalError> {
    match result {
        Ok(_) => Err("evaluation succeeded".into()),
        Err(e) => Ok(e),
    }
}

#[test]
fn a_missing_input_is_named() -> TestResult {
    let b = exp_block()?;
    let e = error_of(run(&b.block, &bind(&[("M", 3)]), &inputs(vec![]), false))?;
    assert_eq!(e.to_string(), "missing input `x`: expected [3, 4] (M = 3)");
    Ok(())
}

#[test]
fn a_wrong_shape_names_tensor_and_both_shapes() -> TestResult {
    let b = exp_block()?;
    let given = inputs(vec![("x", host(DType::F32, 3, 5, &[0.0; 15])?)]);
    let e = error_of(run(&b.block, &bind(&[("M", 3)]), &given, false))?;
    assert_eq!(e.to_string(), "input `x`: expected [3, 4] (M = 3), got [3, 5]");
    // A rank-2 input may not be given transposed.
    let given = inputs(vec![("x", host(DType::F32, 4, 3, &[0.0; 12])?)]);
    let e = error_of(run(&b.block, &bind(&[("M", 3)]), &given, false))?;
    assert!(matches!(e.cause(), EvalError::InputShape { .. }), "{e}");
    Ok(())
}

#[test]
fn inconsistent_tensors_are_errors_not_panics() -> TestResult {
    let b = exp_block()?;
    let bad = HostTensor { dtype: DType::F32, rows: 3, cols: 4, data: vec![1.0; 5] };
    let e = error_of(run(&b.block, &bind(&[("M", 3)]), &inputs(vec![("x", bad)]), false))?;
    assert_eq!(e.to_string(), "input `x`: expected [3, 4] (M = 3), got [3, 4] with 5 elements of data");
    let e = HostTensor::new(DType::F32, 2, 2, vec![0.0; 3]).err().ok_or("accepted")?;
    assert_eq!(e.to_string(), "tensor data holds 3 elements but the shape [2, 2] needs 4");
    Ok(())
}

#[test]
fn dims_must_be_bound_positive_and_consistent() -> TestResult {
    let mut b = exp_block()?;
    let given = inputs(vec![("x", host(DType::F32, 1, 4, &[0.0; 4])?)]);
    let e = error_of(run(&b.block, &bind(&[]), &given, false))?;
    assert!(matches!(e.cause(), EvalError::UnboundDim { name } if name == "M"), "{e}");
    let e = error_of(run(&b.block, &bind(&[("M", 0)]), &given, false))?;
    assert!(matches!(e.cause(), EvalError::NonPositiveDim { value: 0, .. }), "{e}");
    b.block.dims.push(DimDef { name: "D".into(), value: Some(8) });
    let e = error_of(run(&b.block, &bind(&[("M", 1), ("D", 4)]), &given, false))?;
    assert!(matches!(e.cause(), EvalError::ConflictingDim { constant: 8, bound: 4, .. }), "{e}");
    // Bindings for dims the block does not use are ignored.
    assert!(run(&b.block, &bind(&[("M", 1), ("D", 8), ("Z", -1)]), &given, false).is_ok());
    Ok(())
}

#[test]
fn bind_shape_evaluates_and_limits() -> TestResult {
    let shape = Shape::new(sym("M").mul(&c(2))?, sym("N").sub(&c(1))?);
    assert_eq!(bind_shape(&shape, &bind(&[("M", 3), ("N", 5)]))?, (6, 4));
    let e = bind_shape(&shape, &bind(&[("M", 3), ("N", 1)])).err().ok_or("accepted")?;
    assert_eq!(e.to_string(), "dimension `N - 1` evaluates to 0 (N = 1); dimensions must be positive");
    let big = bind_shape(&shape, &bind(&[("M", 1 << 20), ("N", 4097)])).err().ok_or("accepted")?;
    assert!(matches!(big, EvalError::TooLarge { elements, .. } if elements > MAX_ELEMENTS), "{big}");
    Ok(())
}

#[test]
fn a_too_large_input_fails_before_allocating() -> TestResult {
    let b = exp_block()?;
    let e = error_of(run(&b.block, &bind(&[("M", 1 << 40)]), &inputs(vec![]), false))?;
    assert!(matches!(e.cause(), EvalError::TooLarge { .. }), "{e}");
    Ok(())
}

#[test]
fn memory_limit_counts_live_values_only() -> TestResult {
    // x -> exp -> neg -> abs: two [1, 1000] values live at a time.
    let mut b = Builder::new();
    let x = b.f32_param("x", 1, 1000)?;
    let e = b.push(Inst::Unary { op: UnaryOp::Exp, arg: x })?;
    let n = b.push(Inst::Unary { op: UnaryOp::Neg, arg: e })?;
    let a = b.push(Inst::Unary { op: UnaryOp::Abs, arg: n })?;
    b.output("y", DType::F32, a, false);
    let given = inputs(vec![("x", host(DType::F32, 1, 1000, &[0.5; 1000])?)]);
    let opts = EvalOptions::default();
    assert!(eval_with_limit(&b.block, &bind(&[]), &given, &opts, 2 * 8000).is_ok());
    let e = eval_with_limit(&b.block, &bind(&[]), &given, &opts, 8000 + 7999).err().ok_or("ran")?;
    assert!(matches!(e.cause(), EvalError::OutOfMemory { needed: 16000, limit: 15999, .. }), "{e}");
    Ok(())
}

/// The estimate is the interpreter's own count: an evaluation with exactly
/// the estimated peak as its limit runs, one byte less stops it.
#[test]
fn the_estimate_is_the_peak_the_interpreter_reaches() -> TestResult {
    let mut b = Builder::new();
    b.block.dims.push(DimDef { name: "M".into(), value: None });
    let x = b.param("x", DType::BF16, (sym("M"), c(16)), 2)?;
    let w = b.param("w", DType::BF16, (c(8), c(16)), 2)?;
    let operand_dtype = DType::BF16;
    let h = b.push(Inst::MatMul { lhs: x, rhs: w, lhs_transposed: false, rhs_transposed: true, operand_dtype })?;
    let e = b.push(Inst::Unary { op: UnaryOp::Exp, arg: h })?;
    let n = b.push(Inst::Unary { op: UnaryOp::Neg, arg: e })?;
    b.output("y", DType::F32, n, false);
    b.output("x_again", DType::BF16, x, false);
    let dims = bind(&[("M", 5)]);
    let estimate = crate::interp::estimate(&b.block, &dims)?;
    assert_eq!(estimate.input_bytes, (5 * 16 + 8 * 16) * 8);
    // The matmul holds copies of both operands and its result beside the result.
    assert_eq!(estimate.peak_bytes, (5 * 8 + 5 * 16 + 8 * 16 + 5 * 8) * 8);
    assert_eq!(estimate.macs, 5 * 8 * 16);
    assert_eq!(estimate.work, 5 * 8 * 16 + 5 * 16 + 8 * 16 + 3 * 5 * 8);
    let given = crate::interp::random_inputs(&b.block, &dims, 0)?;
    let opts = EvalOptions::default();
    let peak = estimate.peak_bytes;
    assert!(eval_with_limit(&b.block, &dims, &given, &opts, peak).is_ok());
    let e = eval_with_limit(&b.block, &dims, &given, &opts, peak - 1).err().ok_or("ran")?;
    assert!(matches!(e.cause(), EvalError::OutOfMemory { .. }), "{e}");
    Ok(())
}

/// Progress is reported before every instruction and at the end, and adds
/// up to the estimate's work.
#[test]
fn progress_counts_the_estimated_work() -> TestResult {
    let mut b = Builder::new();
    let x = b.f32_param("x", 3, 4)?;
    let e = b.push(Inst::Unary { op: UnaryOp::Exp, arg: x })?;
    b.output("y", DType::F32, e, false);
    let given = inputs(vec![("x", host(DType::F32, 3, 4, &[0.5; 12])?)]);
    let mut seen = Vec::new();
    let opts = EvalOptions::default();
    crate::interp::eval_with(&b.block, &bind(&[]), &given, &opts, 1 << 20, &mut |p| seen.push((p.done, p.total)))?;
    let total = crate::interp::estimate(&b.block, &bind(&[]))?.work;
    assert_eq!(seen, [(0, total), (12, total), (total, total)]);
    Ok(())
}

#[test]
fn flat_vectors_are_accepted_either_way() -> TestResult {
    let mut b = Builder::new();
    b.block.dims.push(DimDef { name: "M".into(), value: None });
    let g = b.param("g", DType::F32, (c(1), c(3)), 1)?;
    let r = b.param("r", DType::F32, (sym("M"), c(1)), 1)?;
    let s = b.param("s", DType::F32, (c(1), c(1)), 0)?;
    b.output("g2", DType::F32, g, false);
    let r2 = b.push(Inst::Binary { op: crate::inst::BinaryOp::Mul, lhs: r, rhs: r })?;
    b.output_with(tensor("r2", DType::F32, (sym("M"), c(1)), 1), r2, false);
    b.output("s2", DType::F32, s, false);
    let given = inputs(vec![
        ("g", host(DType::F32, 3, 1, &[1.0, 2.0, 3.0])?),
        ("r", host(DType::F32, 1, 2, &[3.0, 4.0])?),
        ("s", host(DType::F32, 1, 1, &[7.0])?),
    ]);
    let results = run(&b.block, &bind(&[("M", 2)]), &given, false)?;
    let g2 = results.get("g2").ok_or("g2")?;
    assert_eq!((g2.shape(), g2.data.as_slice()), ((1, 3), [1.0, 2.0, 3.0].as_slice()));
    let r2 = results.get("r2").ok_or("r2")?;
    assert_eq!((r2.shape(), r2.data.as_slice()), ((2, 1), [9.0, 16.0].as_slice()));
    assert_eq!(out(&results, "s2")?, [7.0]);
    Ok(())
}

#[test]
fn integer_inputs_must_be_integers() -> TestResult {
    let mut b = Builder::new();
    let i = b.param("i", DType::I32, (c(1), c(2)), 1)?;
    let f = b.push(Inst::Cast { to: DType::F32, arg: i })?;
    b.output("f", DType::F32, f, false);
    let not_int = HostTensor { dtype: DType::F32, rows: 1, cols: 2, data: vec![1.0, 1.5] };
    let e = error_of(run(&b.block, &bind(&[]), &inputs(vec![("i", not_int)]), false))?;
    assert_eq!(e.to_string(), "input `i`: element 1 is 1.5, which is not an i32 integer");
    assert!(HostTensor::new(DType::I32, 1, 1, vec![3e9]).is_err());
    let ok = inputs(vec![("i", host(DType::I32, 1, 2, &[-4.0, 7.0])?)]);
    assert_eq!(out(&run(&b.block, &bind(&[]), &ok, false)?, "f")?, [-4.0, 7.0]);
    Ok(())
}

#[test]
fn accumulate_adds_the_previous_content() -> TestResult {
    let mut b = Builder::new();
    let x = b.f32_param("x", 1, 2)?;
    b.output("acc", DType::BF16, x, true);
    b.output("plain", DType::I32, x, false);
    let tiny = 2f64.powi(-8);
    let mut given = inputs(vec![("x", host(DType::F32, 1, 2, &[tiny, 2.7])?)]);
    let e = error_of(run(&b.block, &bind(&[]), &given, false))?;
    assert_eq!(e.to_string(), "missing input `acc`: expected [1, 2]");
    given.insert("acc".into(), host(DType::BF16, 1, 2, &[1.0, 1.0])?);
    let exact = run(&b.block, &bind(&[]), &given, false)?;
    assert_eq!(out(&exact, "acc")?, [1.0 + tiny, 3.7]);
    assert_eq!(exact.get("acc").map(|t| t.dtype), Some(DType::BF16));
    // i32 outputs truncate even without rounding.
    assert_eq!(out(&exact, "plain")?, [0.0, 2.0]);
    // Rounded: 1 + 2^-8 is a tie between two bf16 values and goes to even.
    let rounded = run(&b.block, &bind(&[]), &given, true)?;
    assert_eq!(out(&rounded, "acc")?, [1.0, 3.703_125]);
    Ok(())
}

#[test]
fn dim_values_and_constants() -> TestResult {
    let mut b = Builder::new();
    b.block.dims.push(DimDef { name: "N".into(), value: None });
    let d = b.push(Inst::DimValue(sym("N").mul(&c(3))?))?;
    let k = b.push(Inst::Const(-0.25))?;
    let s = b.push(Inst::Binary { op: crate::inst::BinaryOp::Add, lhs: d, rhs: k })?;
    b.output("s", DType::F32, s, false);
    assert_eq!(out(&run(&b.block, &bind(&[("N", 7)]), &inputs(vec![]), false)?, "s")?, [20.75]);
    Ok(())
}

#[test]
fn host_tensor_accessors_do_not_panic() -> TestResult {
    let t = HostTensor::from_fn(DType::F32, 2, 3, |r, c| (10 * r + c) as f64)?;
    assert_eq!((t.get(1, 2), t.try_get(2, 0), t.len(), t.is_empty()), (12.0, None, 6, false));
    assert!(t.get(0, 3).is_nan());
    assert_eq!(t.row(1), Some([10.0, 11.0, 12.0].as_slice()));
    assert_eq!(t.row(2), None);
    assert_eq!(HostTensor::scalar(DType::F32, 2.0).shape(), (1, 1));
    Ok(())
}
