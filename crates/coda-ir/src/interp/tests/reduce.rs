//! Reductions along both axes and column gathers.

use super::*;
use crate::inst::{Axis, ReduceOp};

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

/// `op` over `axis` of the `[rows, cols]` tensor `data`.
fn reduce(op: ReduceOp, axis: Axis, rows: usize, cols: usize, data: &[f64]) -> TestResult<Vec<f64>> {
    let mut b = Builder::new();
    let x = b.f32_param("x", rows as i64, cols as i64)?;
    let r = b.push(Inst::Reduce { op, axis, arg: x })?;
    b.output("r", DType::F32, r, false);
    let results = run(&b.block, &bind(&[]), &inputs(vec![("x", host(DType::F32, rows, cols, data)?)]), false)?;
    let expected_shape = match axis {
        Axis::Cols => (rows, 1),
        Axis::Rows => (1, cols),
    };
    assert_eq!(results.get("r").map(HostTensor::shape), Some(expected_shape));
    out(&results, "r")
}

#[test]
fn sums_and_maxima_along_each_axis() -> TestResult {
    let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    assert_eq!(reduce(ReduceOp::Sum, Axis::Cols, 2, 3, &x)?, [6.0, 15.0]);
    assert_eq!(reduce(ReduceOp::Sum, Axis::Rows, 2, 3, &x)?, [5.0, 7.0, 9.0]);
    assert_eq!(reduce(ReduceOp::Max, Axis::Cols, 2, 3, &x)?, [3.0, 6.0]);
    assert_eq!(reduce(ReduceOp::Max, Axis::Rows, 2, 2, &[1.0, -INF, 0.5, -7.0])?, [1.0, -7.0]);
    assert_bits(&reduce(ReduceOp::Max, Axis::Cols, 2, 2, &[NAN, 1.0, 2.0, NAN])?, &[NAN, NAN]);
    Ok(())
}

#[test]
fn sums_run_in_index_order() -> TestResult {
    // (1e16 + 1) + 1 loses both ones; summing in another order would not.
    let got = reduce(ReduceOp::Sum, Axis::Cols, 1, 3, &[1e16, 1.0, 1.0])?;
    assert_bits(&got, &[1e16]);
    let got = reduce(ReduceOp::Sum, Axis::Rows, 3, 1, &[1.0, 1.0, 1e16])?;
    assert_bits(&got, &[1e16 + 2.0]);
    Ok(())
}

#[test]
fn log_sum_exp_with_infinities_and_nan() -> TestResult {
    let x = [1.0, 2.0, 3.0, 1000.0, 1000.0, -1000.0];
    let first = 3.0 + ((-2.0f64).exp() + (-1.0f64).exp() + 1.0).ln();
    let second = 1000.0 + std::f64::consts::LN_2;
    assert_close(&reduce(ReduceOp::LogSumExp, Axis::Cols, 2, 3, &x)?, &[first, second], 1e-15);
    let special = [-INF, 0.0, -INF, -INF, 1.0, INF, NAN, INF];
    let got = reduce(ReduceOp::LogSumExp, Axis::Cols, 4, 2, &special)?;
    assert_bits(&got, &[0.0, -INF, INF, NAN]);
    Ok(())
}

#[test]
fn take_gathers_one_column_per_row_and_zero_out_of_range() -> TestResult {
    let mut b = Builder::new();
    let table = b.f32_param("t", 4, 3)?;
    let index = b.param("i", DType::I32, (c(4), c(1)), 1)?;
    let taken = b.push(Inst::TakeCols { arg: table, index })?;
    b.output("v", DType::F32, taken, false);
    let t: Vec<f64> = (0..4).flat_map(|r| (0..3).map(move |c| f64::from(10 * (r + 1) + c))).collect();
    let given =
        inputs(vec![("t", host(DType::F32, 4, 3, &t)?), ("i", host(DType::I32, 4, 1, &[2.0, -1.0, 3.0, 0.0])?)]);
    assert_eq!(out(&run(&b.block, &bind(&[]), &given, false)?, "v")?, [12.0, 0.0, 0.0, 40.0]);
    Ok(())
}
