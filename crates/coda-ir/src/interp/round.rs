//! Rounding an `f64` to a storage type, in one round-to-nearest-even step.

use crate::ty::DType;

/// A binary floating-point format with subnormals.
struct Format {
    /// Stored mantissa bits (precision minus one).
    mant_bits: i32,
    /// Exponent of the smallest normal number.
    emin: i32,
    /// The largest finite value.
    max_finite: f64,
}

/// bfloat16: 8 exponent bits, 7 mantissa bits.
const BF16: Format = Format { mant_bits: 7, emin: -126, max_finite: 3.389_531_389_251_535_5e38 };

/// IEEE binary16: 5 exponent bits, 10 mantissa bits.
const F16: Format = Format { mant_bits: 10, emin: -14, max_finite: 65504.0 };

/// fp8 e4m3 (`float8_e4m3fn`): 4 exponent bits, 3 mantissa bits, no
/// infinities (the all-ones pattern is NaN), so the largest value is 448.
const E4M3: Format = Format { mant_bits: 3, emin: -6, max_finite: 448.0 };

/// fp8 e5m2: 5 exponent bits, 2 mantissa bits, with infinities.
const E5M2: Format = Format { mant_bits: 2, emin: -14, max_finite: 57344.0 };

/// `x` rounded to `dtype` as a store or cast with rounding on would: floats
/// to nearest even, overflowing to infinity, except e4m3, which has none
/// and saturates at ±448 (infinities too; NaN stays NaN), as PyTorch's
/// conversion to `float8_e4m3fn` does; `i32` toward zero with saturation
/// (NaN → 0); `bool` to `x != 0`.
#[inline]
pub fn round_to_dtype(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f64::from(x as f32),
        DType::BF16 => round_float(x, &BF16),
        DType::F16 => round_float(x, &F16),
        DType::E4M3 => saturate(round_float(x, &E4M3), E4M3.max_finite),
        DType::E5M2 => round_float(x, &E5M2),
        DType::I32 => truncate_i32(x),
        DType::Bool => to_bool(x),
    }
}

/// An infinity as the largest finite value of its sign.
fn saturate(x: f64, max_finite: f64) -> f64 {
    if x.is_infinite() {
        max_finite.copysign(x)
    } else {
        x
    }
}

/// Rounds every element of `data` to `dtype` in place.
pub(super) fn round_slice(data: &mut [f64], dtype: DType) {
    for x in data {
        *x = round_to_dtype(*x, dtype);
    }
}

/// What a cast does to `x`: with rounding off only integer and bool
/// targets change the value.
pub(super) fn cast(x: f64, to: DType, round: bool) -> f64 {
    match to {
        DType::I32 => truncate_i32(x),
        DType::Bool => to_bool(x),
        _ if round => round_to_dtype(x, to),
        _ => x,
    }
}

/// Truncation toward zero, saturating at the `i32` range, NaN → 0.
pub(super) fn truncate_i32(x: f64) -> f64 {
    f64::from(x as i32)
}

/// `1.0` where `x != 0` (NaN included), else `0.0`.
fn to_bool(x: f64) -> f64 {
    if x != 0.0 {
        1.0
    } else {
        0.0
    }
}

/// `x` rounded to nearest even in `format`, straight from the `f64`.
#[inline]
fn round_float(x: f64, format: &Format) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let binade = binade(x);
    let rounded = if binade >= format.emin {
        round_mantissa(x, format.mant_bits)
    } else {
        // Below the normal range the quantum is the subnormal one; both
        // scalings are exact: they only change the exponent.
        let quantum = pow2(format.emin - format.mant_bits);
        (x / quantum).round_ties_even() * quantum
    };
    if rounded.abs() > format.max_finite {
        f64::INFINITY.copysign(x)
    } else {
        rounded
    }
}

/// A finite `x` rounded to nearest even with `mant_bits` stored mantissa
/// bits, by integer arithmetic on its bits: the same value as scaling by
/// the quantum of its binade and rounding to an integer, without the
/// library call `round_ties_even` costs on x86-64 without SSE4.1. A carry
/// out of the mantissa steps the exponent up, as it should; the sign bit
/// is never reached, because the exponent field of a finite `f64` is at
/// most 0x7fe.
#[inline]
fn round_mantissa(x: f64, mant_bits: i32) -> f64 {
    let dropped = 52 - mant_bits.clamp(0, 52) as u32;
    if dropped == 0 {
        return x;
    }
    let bits = x.to_bits();
    let kept_lsb = (bits >> dropped) & 1;
    let half_minus_one = (1u64 << (dropped - 1)) - 1;
    f64::from_bits((bits + half_minus_one + kept_lsb) & !((1u64 << dropped) - 1))
}

/// `floor(log2 |x|)` for a normal `f64`; below the normal range (where every
/// format here rounds to zero) it is -1023.
fn binade(x: f64) -> i32 {
    let biased = (x.to_bits() >> 52) & 0x7ff;
    // The mask keeps 11 bits, so the cast cannot truncate.
    biased as i32 - 1023
}

/// `2^e` for `-1022 <= e <= 1023`.
fn pow2(e: i32) -> f64 {
    let biased = (e + 1023).clamp(1, 2046);
    f64::from_bits((biased as u64) << 52)
}
