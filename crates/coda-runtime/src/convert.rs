//! Host-side conversions between `f32` / `i32` values and little-endian
//! device byte buffers of each [`DType`] (bf16 and f16 through the `half`
//! crate, round-to-nearest-even).

use half::{bf16, f16};

use crate::error::{Result, RuntimeError};
use crate::tensor::DType;

/// Encodes `values` as `dtype` bytes (integers are rounded toward zero and
/// saturated for [`DType::I32`]).
pub fn f32_to_bytes(dtype: DType, values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.size_bytes());
    for &v in values {
        match dtype {
            DType::Bf16 => out.extend_from_slice(&bf16::from_f32(v).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16::from_f32(v).to_le_bytes()),
            DType::F32 => out.extend_from_slice(&v.to_le_bytes()),
            DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        }
    }
    out
}

/// Decodes `dtype` bytes to `f32`. Fails if the length is not a multiple of
/// the element size.
pub fn bytes_to_f32(dtype: DType, bytes: &[u8]) -> Result<Vec<f32>> {
    check_len(dtype, bytes.len())?;
    let out = match dtype {
        DType::Bf16 => bytes.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        DType::F16 => bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        DType::I32 => bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32).collect(),
    };
    Ok(out)
}

/// Encodes `i32` values as little-endian bytes.
pub fn i32_to_bytes(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Decodes little-endian `i32` bytes.
pub fn bytes_to_i32(bytes: &[u8]) -> Result<Vec<i32>> {
    check_len(DType::I32, bytes.len())?;
    Ok(bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Shorthand for `f32_to_bytes(DType::Bf16, values)`.
pub fn f32_to_bf16_bytes(values: &[f32]) -> Vec<u8> {
    f32_to_bytes(DType::Bf16, values)
}

/// Shorthand for `bytes_to_f32(DType::Bf16, bytes)`.
pub fn bf16_bytes_to_f32(bytes: &[u8]) -> Result<Vec<f32>> {
    bytes_to_f32(DType::Bf16, bytes)
}

/// Shorthand for `f32_to_bytes(DType::F16, values)`.
pub fn f32_to_f16_bytes(values: &[f32]) -> Vec<u8> {
    f32_to_bytes(DType::F16, values)
}

/// Shorthand for `bytes_to_f32(DType::F16, bytes)`.
pub fn f16_bytes_to_f32(bytes: &[u8]) -> Result<Vec<f32>> {
    bytes_to_f32(DType::F16, bytes)
}

/// The quiet-NaN bit pattern of one element of `dtype`, little-endian, used
/// to poison output buffers. For [`DType::I32`] (no NaN) it is `i32::MIN`.
pub fn nan_pattern(dtype: DType) -> Vec<u8> {
    match dtype {
        DType::Bf16 => bf16::NAN.to_le_bytes().to_vec(),
        DType::F16 => f16::NAN.to_le_bytes().to_vec(),
        DType::F32 => f32::NAN.to_le_bytes().to_vec(),
        DType::I32 => i32::MIN.to_le_bytes().to_vec(),
    }
}

fn check_len(dtype: DType, len: usize) -> Result<()> {
    if len % dtype.size_bytes() != 0 {
        return Err(RuntimeError::InvalidInput(format!(
            "{len} bytes is not a whole number of {dtype} elements ({} bytes each)",
            dtype.size_bytes()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() -> Result<()> {
        let v = [0.0f32, 1.0, -2.5, 3.0e4, 0.333_333_34];
        for dt in [DType::Bf16, DType::F16, DType::F32] {
            let back = bytes_to_f32(dt, &f32_to_bytes(dt, &v))?;
            for (a, b) in v.iter().zip(&back) {
                let tol = match dt {
                    DType::Bf16 => 8e-3 * a.abs(),
                    DType::F16 => 1e-3 * a.abs(),
                    _ => 0.0,
                };
                assert!((a - b).abs() <= tol, "{dt}: {a} vs {b}");
            }
        }
        assert_eq!(f32_to_bf16_bytes(&[1.0]), vec![0x80, 0x3f]);
        assert_eq!(f32_to_f16_bytes(&[1.0]), vec![0x00, 0x3c]);
        assert_eq!(bf16_bytes_to_f32(&[0x80, 0x3f])?, vec![1.0]);
        assert_eq!(f16_bytes_to_f32(&[0x00, 0x3c])?, vec![1.0]);
        assert_eq!(bytes_to_i32(&i32_to_bytes(&[-7, 1 << 20]))?, vec![-7, 1 << 20]);
        assert!(bytes_to_f32(DType::F32, &[0, 1, 2]).is_err());
        Ok(())
    }

    #[test]
    fn nan_patterns_are_nan() -> Result<()> {
        for dt in [DType::Bf16, DType::F16, DType::F32] {
            let p = nan_pattern(dt);
            assert_eq!(p.len(), dt.size_bytes());
            assert!(bytes_to_f32(dt, &p)?[0].is_nan());
        }
        assert_eq!(bytes_to_i32(&nan_pattern(DType::I32))?, vec![i32::MIN]);
        Ok(())
    }
}
