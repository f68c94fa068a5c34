//! Unary and binary functions, select and casts, at hand-checked points.

use super::*;
use crate::inst::{BinaryOp, UnaryOp};

/// `op` applied to each of `xs` (as one `[1, n]` f32 param) by the interpreter.
fn unary_at(op: UnaryOp, xs: &[f64]) -> TestResult<Vec<f64>> {
    let mut b = Builder::new();
    let x = b.f32_param("x", 1, xs.len() as i64)?;
    let y = b.push(Inst::Unary { op, arg: x })?;
    b.output("y", DType::F32, y, false);
    let given = inputs(vec![("x", host(DType::F32, 1, xs.len(), xs)?)]);
    out(&run(&b.block, &bind(&[]), &given, false)?, "y")
}

/// `op(a[i], b[i])` by the interpreter.
fn binary_at(op: BinaryOp, a: &[f64], b: &[f64]) -> TestResult<Vec<f64>> {
    let mut bl = Builder::new();
    let n = a.len() as i64;
    let (x, y) = (bl.f32_param("a", 1, n)?, bl.f32_param("b", 1, n)?);
    let z = bl.push(Inst::Binary { op, lhs: x, rhs: y })?;
    bl.output("z", DType::F32, z, false);
    let given = inputs(vec![("a", host(DType::F32, 1, a.len(), a)?), ("b", host(DType::F32, 1, b.len(), b)?)]);
    out(&run(&bl.block, &bind(&[]), &given, false)?, "z")
}

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

#[test]
fn plain_unary_functions() -> TestResult {
    let e = std::f64::consts::E;
    let cases: [(UnaryOp, &[f64], &[f64]); 8] = [
        (UnaryOp::Neg, &[1.5, -2.0, 0.0], &[-1.5, 2.0, -0.0]),
        (UnaryOp::Exp, &[0.0, 1.0, -INF], &[1.0, e, 0.0]),
        (UnaryOp::Log, &[1.0, e, 0.0, -1.0], &[0.0, 1.0, -INF, NAN]),
        (UnaryOp::Sqrt, &[4.0, 2.0], &[2.0, std::f64::consts::SQRT_2]),
        (UnaryOp::Rsqrt, &[4.0, 0.25, 0.0], &[0.5, 2.0, INF]),
        (UnaryOp::Tanh, &[0.5, -INF], &[0.462_117_157_260_009_74, -1.0]),
        (UnaryOp::Abs, &[-3.0, 2.5], &[3.0, 2.5]),
        (UnaryOp::Sin, &[std::f64::consts::FRAC_PI_2, 0.0], &[1.0, 0.0]),
    ];
    for (op, xs, expected) in cases {
        assert_close(&unary_at(op, xs)?, expected, 1e-15);
    }
    assert_close(&unary_at(UnaryOp::Cos, &[0.0, std::f64::consts::PI])?, &[1.0, -1.0], 1e-15);
    Ok(())
}

#[test]
fn sigmoid_is_stable_at_both_ends() -> TestResult {
    let got = unary_at(UnaryOp::Sigmoid, &[0.0, 2.0, -2.0, -1000.0, 1000.0, NAN])?;
    let (s2, s_2) = (1.0 / (1.0 + (-2.0f64).exp()), 1.0 / (1.0 + 2.0f64.exp()));
    assert_close(&got, &[0.5, s2, s_2, 0.0, 1.0, NAN], 1e-15);
    Ok(())
}

#[test]
fn relu_keeps_nan() -> TestResult {
    assert_close(&unary_at(UnaryOp::Relu, &[-2.0, 3.0, 0.0, NAN, -INF])?, &[0.0, 3.0, 0.0, NAN, 0.0], 0.0);
    Ok(())
}

#[test]
fn gelu_erf_matches_the_normal_cdf() -> TestResult {
    // x * Phi(x), with Phi from tables of the standard normal distribution.
    let got = unary_at(UnaryOp::GeluErf, &[1.0, -1.0, 2.0, -3.0, 0.0])?;
    let expected = [
        0.841_344_746_068_542_9,
        -0.158_655_253_931_457_05,
        2.0 * 0.977_249_868_051_820_8,
        -3.0 * 0.001_349_898_031_630_094_5,
        0.0,
    ];
    assert_close(&got, &expected, 1e-14);
    Ok(())
}

#[test]
fn ndtr_is_the_normal_cdf_to_the_far_lower_tail() -> TestResult {
    // Tables of the standard normal distribution; Phi(-10) keeps its
    // relative precision (1 - Phi(10) would round to 0 in f64).
    let got = unary_at(UnaryOp::Ndtr, &[0.0, 1.0, -3.0, -10.0, INF, -INF, NAN])?;
    let expected =
        [0.5, 0.841_344_746_068_542_9, 0.001_349_898_031_630_094_5, 7.619_853_024_160_527e-24, 1.0, 0.0, NAN];
    for (g, e) in got.iter().zip(&expected) {
        assert!((g - e).abs() <= 1e-14 * e.abs() || (g.is_nan() && e.is_nan()), "ndtr: {g:e} against {e:e}");
    }
    Ok(())
}

#[test]
fn gelu_tanh_is_the_tanh_formula_and_differs_from_erf() -> TestResult {
    let xs = [1.0, -0.5, 3.0];
    let got = unary_at(UnaryOp::GeluTanh, &xs)?;
    let formula = |x: f64| {
        let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
        0.5 * x * (1.0 + inner.tanh())
    };
    assert_close(&got, &xs.map(formula), 1e-15);
    let erf_form = unary_at(UnaryOp::GeluErf, &[1.0])?;
    let gap = got.first().copied().unwrap_or(NAN) - erf_form.first().copied().unwrap_or(NAN);
    assert!((gap + 1.5e-4).abs() < 2e-5, "gelu_tanh(1) - gelu(1) = {gap:e}");
    Ok(())
}

#[test]
fn silu_and_softplus() -> TestResult {
    let silu = unary_at(UnaryOp::Silu, &[1.0, -1000.0, 0.0])?;
    assert_close(&silu, &[0.731_058_578_630_004_9, -0.0, 0.0], 1e-15);
    let xs = [0.0, 1.0, 30.0, 1000.0, -30.0, -1000.0, NAN];
    // log1p(y) = y - y^2/2 + ... for the tiny y = e^-30.
    let tiny = (-30f64).exp();
    let expected = [std::f64::consts::LN_2, 1.313_261_687_518_222_8, 30.0, 1000.0, tiny - tiny * tiny / 2.0, 0.0, NAN];
    assert_close(&unary_at(UnaryOp::Softplus, &xs)?, &expected, 1e-15);
    Ok(())
}

#[test]
fn arithmetic_and_nan_propagating_min_max() -> TestResult {
    let a = [1.0, NAN, 3.0, -0.0];
    let b = [2.0, 1.0, NAN, 0.0];
    assert_bits(&binary_at(BinaryOp::Min, &a, &b)?, &[1.0, NAN, NAN, -0.0]);
    assert_bits(&binary_at(BinaryOp::Max, &a, &b)?, &[2.0, NAN, NAN, 0.0]);
    assert_bits(&binary_at(BinaryOp::Max, &b, &a)?, &[2.0, NAN, NAN, 0.0]);
    let (p, q) = ([6.0, 1.0], [4.0, 0.0]);
    assert_close(&binary_at(BinaryOp::Add, &p, &q)?, &[10.0, 1.0], 0.0);
    assert_close(&binary_at(BinaryOp::Sub, &p, &q)?, &[2.0, 1.0], 0.0);
    assert_close(&binary_at(BinaryOp::Mul, &p, &q)?, &[24.0, 0.0], 0.0);
    assert_close(&binary_at(BinaryOp::Div, &p, &q)?, &[1.5, INF], 0.0);
    Ok(())
}

#[test]
fn comparisons_give_one_or_zero() -> TestResult {
    let a = [1.0, 2.0, 3.0, NAN];
    let b = [2.0, 2.0, 2.0, NAN];
    let table = [
        (BinaryOp::Lt, [1.0, 0.0, 0.0, 0.0]),
        (BinaryOp::Le, [1.0, 1.0, 0.0, 0.0]),
        (BinaryOp::Gt, [0.0, 0.0, 1.0, 0.0]),
        (BinaryOp::Ge, [0.0, 1.0, 1.0, 0.0]),
        (BinaryOp::Eq, [0.0, 1.0, 0.0, 0.0]),
        (BinaryOp::Ne, [1.0, 0.0, 1.0, 1.0]),
    ];
    for (op, expected) in table {
        assert_bits(&binary_at(op, &a, &b)?, &expected);
    }
    Ok(())
}

#[test]
fn select_picks_where_the_condition_holds() -> TestResult {
    let mut b = Builder::new();
    let x = b.f32_param("x", 1, 3)?;
    let y = b.f32_param("y", 1, 3)?;
    let cond = b.push(Inst::Binary { op: BinaryOp::Gt, lhs: x, rhs: y })?;
    let z = b.push(Inst::Select { cond, on_true: x, on_false: y })?;
    b.output("z", DType::F32, z, false);
    let given = inputs(vec![
        ("x", host(DType::F32, 1, 3, &[1.0, 5.0, NAN])?),
        ("y", host(DType::F32, 1, 3, &[2.0, 4.0, 7.0])?),
    ]);
    assert_bits(&out(&run(&b.block, &bind(&[]), &given, false)?, "z")?, &[2.0, 5.0, 7.0]);
    Ok(())
}

/// `x` cast to `to`, with rounding on or off.
fn cast_at(to: DType, xs: &[f64], round: bool) -> TestResult<Vec<f64>> {
    let mut b = Builder::new();
    let x = b.f32_param("x", 1, xs.len() as i64)?;
    let y = b.push(Inst::Cast { to, arg: x })?;
    b.output("y", to, y, false);
    let given = inputs(vec![("x", host(DType::F32, 1, xs.len(), xs)?)]);
    out(&run(&b.block, &bind(&[]), &given, round)?, "y")
}

#[test]
fn casts_to_integers_and_bools_always_convert() -> TestResult {
    let xs = [2.7, -2.7, NAN, 1e10, -1e10, -0.5];
    let ints = [2.0, -2.0, 0.0, 2_147_483_647.0, -2_147_483_648.0, 0.0];
    let bools = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    for round in [false, true] {
        assert_close(&cast_at(DType::I32, &xs, round)?, &ints, 0.0);
        assert_close(&cast_at(DType::Bool, &xs, round)?, &bools, 0.0);
        assert_close(&cast_at(DType::Bool, &[0.0, -0.0], round)?, &[0.0, 0.0], 0.0);
    }
    Ok(())
}

#[test]
fn float_casts_round_only_when_asked() -> TestResult {
    let x = 1.0 + 2f64.powi(-9);
    assert_bits(&cast_at(DType::BF16, &[x, 0.1], false)?, &[x, 0.1]);
    assert_bits(&cast_at(DType::BF16, &[x, 0.1], true)?, &[1.0, 0.100_097_656_25]);
    assert_bits(&cast_at(DType::F16, &[x, 0.1], true)?, &[x, 0.099_975_585_937_5]);
    assert_bits(&cast_at(DType::F32, &[0.1], true)?, &[f64::from(0.1f32)]);
    Ok(())
}

#[test]
fn fp8_casts_are_identities_until_rounding_is_asked() -> TestResult {
    assert_eq!(cast_at(DType::E4M3, &[0.3, 500.0], false)?, [0.3, 500.0]);
    assert_bits(&cast_at(DType::E4M3, &[0.3, 500.0], true)?, &[0.3125, 448.0]);
    assert_bits(&cast_at(DType::E5M2, &[0.3, 500.0], true)?, &[0.3125, 512.0]);
    Ok(())
}
