//! Rounding to storage types: single rounding from f64, ties to even,
//! subnormals and overflow, and where the interpreter applies it.

use super::*;
use crate::interp::round_to_dtype;

fn r(x: f64, dtype: DType) -> TestResult<f64> {
    Ok(round_to_dtype(x, dtype))
}

#[test]
fn bf16_ties_go_to_even() -> TestResult {
    let p = |e: i32| 2f64.powi(e);
    assert_eq!(r(1.0 + p(-9), DType::BF16)?, 1.0);
    assert_eq!(r(1.0 + p(-8), DType::BF16)?, 1.0);
    assert_eq!(r(1.0 + 3.0 * p(-8), DType::BF16)?, 1.0 + p(-6));
    assert_eq!(r(-(1.0 + 3.0 * p(-8)), DType::BF16)?, -(1.0 + p(-6)));
    Ok(())
}

#[test]
fn bf16_rounds_once_from_f64() -> TestResult {
    // Through f32 this would round twice (to the tie 1 + 2^-8, then to 1).
    let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
    assert_eq!(f64::from(half::bf16::from_f32(x as f32)), 1.0);
    assert_eq!(r(x, DType::BF16)?, 1.0 + 2f64.powi(-7));
    Ok(())
}

#[test]
fn f16_subnormals_and_overflow() -> TestResult {
    let p = |e: i32| 2f64.powi(e);
    assert_eq!(r(65504.0, DType::F16)?, 65504.0);
    assert_eq!(r(65519.0, DType::F16)?, 65504.0);
    assert_eq!(r(65520.0, DType::F16)?, f64::INFINITY);
    assert_eq!(r(-1e6, DType::F16)?, f64::NEG_INFINITY);
    assert_eq!(r(p(-25), DType::F16)?, 0.0);
    assert_eq!(r(3.0 * p(-26), DType::F16)?, p(-24));
    assert_eq!(r(p(-24) + p(-26), DType::F16)?, p(-24));
    assert_eq!(r(1e-300, DType::BF16)?, 0.0);
    assert!(r(-1e-300, DType::BF16)?.is_sign_negative());
    assert_eq!(r(3.5e38, DType::BF16)?, f64::INFINITY);
    assert_eq!(r(1e39, DType::F32)?, f64::INFINITY);
    assert!(r(f64::NAN, DType::BF16)?.is_nan());
    Ok(())
}

#[test]
fn agrees_with_the_half_crate_on_f32_inputs() -> TestResult {
    // From an f32 one rounding is all there is, so `half` must agree.
    let mut state: u32 = 0x1234_5678;
    for _ in 0..200_000 {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let x = f32::from_bits(state);
        if x.is_nan() {
            continue;
        }
        let (bf, h) = (f64::from(half::bf16::from_f32(x)), f64::from(half::f16::from_f32(x)));
        assert_eq!(r(f64::from(x), DType::BF16)?.to_bits(), bf.to_bits(), "bf16 of {x:e}");
        assert_eq!(r(f64::from(x), DType::F16)?.to_bits(), h.to_bits(), "f16 of {x:e}");
    }
    Ok(())
}

/// The definition the rounding implements: scale by the quantum of the
/// value's binade (the subnormal one below the normal range), round to an
/// integer with ties to even, scale back, overflow to infinity.
fn by_scaling(x: f64, mant_bits: i32, emin: i32, max_finite: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let binade = x.abs().log2().floor() as i32;
    let quantum = 2f64.powi(binade.max(emin) - mant_bits);
    let rounded = (x / quantum).round_ties_even() * quantum;
    if rounded.abs() > max_finite {
        f64::INFINITY.copysign(x)
    } else {
        rounded
    }
}

#[test]
fn rounding_by_bits_agrees_with_rounding_by_scaling() -> TestResult {
    // f64 values of every exponent near the 16-bit ranges, with random
    // mantissas: ties, carries into the next binade and overflow included.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..400_000u64 {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let exponent = 1023 - 160 + (state >> 56) % 300;
        let mantissa = match i % 4 {
            0 => state & ((1 << 52) - 1),
            // A tie or just beside one, for bf16 (45 dropped bits) and f16 (42).
            1 => (state & !((1 << 45) - 1) & ((1 << 52) - 1)) | (1 << 44),
            2 => (state & !((1 << 42) - 1) & ((1 << 52) - 1)) | (1 << 41),
            _ => ((1 << 52) - 1) ^ (state & 0xff),
        };
        let x = f64::from_bits((state & (1 << 63)) | (exponent << 52) | mantissa);
        let bf = by_scaling(x, 7, -126, 3.389_531_389_251_535_5e38);
        let h = by_scaling(x, 10, -14, 65504.0);
        assert_eq!(r(x, DType::BF16)?.to_bits(), bf.to_bits(), "bf16 of {x:e}");
        assert_eq!(r(x, DType::F16)?.to_bits(), h.to_bits(), "f16 of {x:e}");
    }
    Ok(())
}

/// Values PyTorch's `x.to(torch.float8_e4m3fn)` and `x.to(torch.float8_e5m2)`
/// give back as floats (torch 2.11, CPU): ties to even, subnormals down to
/// 2^-9 (e4m3) and 2^-16 (e5m2), e4m3 saturating at 448 (infinities too),
/// e5m2 overflowing to infinity from the midpoint 61440 on.
#[test]
fn fp8_rounding_matches_pytorch() -> TestResult {
    let inf = f64::INFINITY;
    let cases: [(f64, f64, f64); 22] = [
        (447.0, 448.0, 448.0),
        (449.0, 448.0, 448.0),
        (463.9, 448.0, 448.0),
        (464.0, 448.0, 448.0),
        (479.9, 448.0, 448.0),
        (480.0, 448.0, 512.0),
        (500.0, 448.0, 512.0),
        (inf, 448.0, inf),
        (-inf, -448.0, -inf),
        (-464.0, -448.0, -448.0),
        (1e-9, 0.0, 0.0),
        (2f64.powi(-9), 2f64.powi(-9), 2f64.powi(-9)),
        (2f64.powi(-10), 0.0, 2f64.powi(-10)),
        (3.0 * 2f64.powi(-11), 2f64.powi(-9), 1.5 * 2f64.powi(-10)),
        (57344.0, 448.0, 57344.0),
        (61439.0, 448.0, 57344.0),
        (61440.0, 448.0, inf),
        (65536.0, 448.0, inf),
        (0.3, 0.3125, 0.3125),
        (-0.3, -0.3125, -0.3125),
        (1.0625, 1.0, 1.0),
        (1.1875, 1.25, 1.25),
    ];
    for (x, e4m3, e5m2) in cases {
        assert_eq!(round_to_dtype(x, DType::E4M3), e4m3, "e4m3 of {x:e}");
        assert_eq!(round_to_dtype(x, DType::E5M2), e5m2, "e5m2 of {x:e}");
    }
    assert!(round_to_dtype(f64::NAN, DType::E4M3).is_nan());
    assert!(round_to_dtype(f64::NAN, DType::E5M2).is_nan());
    assert_eq!(round_to_dtype(-0.0, DType::E4M3).to_bits(), (-0.0f64).to_bits());
    Ok(())
}

#[test]
fn params_round_on_read_only_when_asked() -> TestResult {
    let mut b = Builder::new();
    let x = b.param("x", DType::BF16, (c(1), c(2)), 1)?;
    let w = b.param("w", DType::F16, (c(1), c(2)), 1)?;
    let s = b.push(Inst::Binary { op: crate::inst::BinaryOp::Add, lhs: x, rhs: w })?;
    b.output("s", DType::F32, s, false);
    let t = 2f64.powi(-12);
    let given =
        inputs(vec![("x", host(DType::F32, 1, 2, &[1.0 + t, 0.1])?), ("w", host(DType::F32, 1, 2, &[t, 0.1])?)]);
    assert_eq!(out(&run(&b.block, &bind(&[]), &given, false)?, "s")?, [1.0 + 2.0 * t, 0.2]);
    let rounded = [1.0 + t, 0.100_097_656_25 + 0.099_975_585_937_5];
    assert_eq!(out(&run(&b.block, &bind(&[]), &given, true)?, "s")?, rounded.map(|v| f64::from(v as f32)));
    Ok(())
}

#[test]
fn inputs_labelled_with_the_dtype_are_still_rounded() -> TestResult {
    // A reader may label unrounded f32 data as bf16: rounding must still happen.
    let mut b = Builder::new();
    let x = b.param("x", DType::BF16, (c(1), c(2)), 2)?;
    let y = b.push(Inst::Unary { op: crate::inst::UnaryOp::Neg, arg: x })?;
    b.output("y", DType::F32, y, false);
    let v = 1.0 + 2f64.powi(-9);
    let given = inputs(vec![("x", host(DType::BF16, 1, 2, &[v, 1.5])?)]);
    assert_eq!(out(&run(&b.block, &bind(&[]), &given, true)?, "y")?, [-1.0, -1.5]);
    assert_eq!(out(&run(&b.block, &bind(&[]), &given, false)?, "y")?, [-v, -1.5]);
    // A param stored straight to an output is copied, not moved out of the inputs.
    let mut b = Builder::new();
    let x = b.param("x", DType::BF16, (c(1), c(2)), 2)?;
    b.output("same", DType::BF16, x, false);
    let exact = inputs(vec![("x", host(DType::BF16, 1, 2, &[1.0, 1.5])?)]);
    assert_eq!(out(&run(&b.block, &bind(&[]), &exact, true)?, "same")?, [1.0, 1.5]);
    assert_eq!(exact.get("x").map(|t| t.data.clone()), Some(vec![1.0, 1.5]));
    Ok(())
}
