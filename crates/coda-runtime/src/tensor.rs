//! Element types and the non-owning [`TensorArg`] (dtype + shape + strides +
//! device pointer) that kernels receive, with argument checks that produce
//! clear messages such as
//! ``argument `x`: expected bf16[128, 4096], got f32[128, 4096]``.

use std::fmt;
use std::str::FromStr;

use crate::error::{Result, RuntimeError};

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// bfloat16 (`__nv_bfloat16`).
    Bf16,
    /// IEEE half (`__half`).
    F16,
    /// IEEE single (`float`).
    F32,
    /// 32-bit signed integer (`int`).
    I32,
}

impl DType {
    /// All supported dtypes.
    pub const ALL: [DType; 4] = [DType::Bf16, DType::F16, DType::F32, DType::I32];

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bf16 | DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
        }
    }

    /// Short name: `bf16`, `f16`, `f32`, `i32`.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::I32 => "i32",
        }
    }

    /// The CUDA C++ type name.
    pub fn c_type(self) -> &'static str {
        match self {
            DType::Bf16 => "__nv_bfloat16",
            DType::F16 => "__half",
            DType::F32 => "float",
            DType::I32 => "int",
        }
    }

    /// True for floating-point dtypes.
    pub fn is_float(self) -> bool {
        !matches!(self, DType::I32)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<DType> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "f16" | "fp16" | "half" | "float16" => Ok(DType::F16),
            "f32" | "fp32" | "float" | "float32" => Ok(DType::F32),
            "i32" | "int32" | "int" => Ok(DType::I32),
            other => {
                Err(RuntimeError::InvalidInput(format!("unknown dtype `{other}` (expected bf16, f16, f32 or i32)")))
            }
        }
    }
}

/// Formats `bf16[128, 4096]`.
pub fn describe(dtype: DType, shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{dtype}[{}]", dims.join(", "))
}

/// Row-major (C-contiguous) strides in elements for `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc: isize = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(d.max(1) as isize);
    }
    strides
}

/// A tensor the runtime does not own: a device pointer plus its description.
/// Strides are in elements (like PyTorch), not bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorArg {
    /// Element type.
    pub dtype: DType,
    /// Extent of each dimension.
    pub shape: Vec<usize>,
    /// Stride of each dimension, in elements.
    pub strides: Vec<isize>,
    /// Device address of element `[0, 0, ...]`.
    pub ptr: u64,
}

impl TensorArg {
    /// A tensor with explicit strides. Fails if `strides.len() != shape.len()`.
    pub fn new(dtype: DType, shape: Vec<usize>, strides: Vec<isize>, ptr: u64) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(RuntimeError::InvalidInput(format!(
                "tensor has {} dimension(s) but {} stride(s)",
                shape.len(),
                strides.len()
            )));
        }
        Ok(TensorArg { dtype, shape, strides, ptr })
    }

    /// A row-major contiguous tensor.
    pub fn contiguous(dtype: DType, shape: Vec<usize>, ptr: u64) -> Self {
        let strides = contiguous_strides(&shape);
        TensorArg { dtype, shape, strides, ptr }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// True when the strides are the row-major strides of the shape
    /// (dimensions of extent 1 may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let expected = contiguous_strides(&self.shape);
        self.shape.iter().zip(self.strides.iter().zip(expected.iter())).all(|(&d, (&s, &e))| d <= 1 || s == e)
    }

    /// Bytes spanned from the lowest to one past the highest addressed
    /// element (0 for an empty tensor). Negative strides count by magnitude.
    pub fn span_bytes(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        let last: usize =
            self.shape.iter().zip(&self.strides).map(|(&d, &s)| (d - 1).saturating_mul(s.unsigned_abs())).sum();
        (last + 1) * self.dtype.size_bytes()
    }

    /// `bf16[128, 4096]`.
    pub fn describe(&self) -> String {
        describe(self.dtype, &self.shape)
    }

    fn arg_err(name: &str, message: String) -> RuntimeError {
        RuntimeError::Argument { name: name.to_string(), message }
    }

    /// Checks dtype and shape:
    /// ``argument `x`: expected bf16[128, 4096], got f32[128, 4096]``.
    pub fn expect(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<()> {
        if self.dtype != dtype || self.shape != shape {
            return Err(Self::arg_err(name, format!("expected {}, got {}", describe(dtype, shape), self.describe())));
        }
        Ok(())
    }

    /// Checks the dtype only.
    pub fn expect_dtype(&self, name: &str, dtype: DType) -> Result<()> {
        if self.dtype != dtype {
            return Err(Self::arg_err(name, format!("expected dtype {dtype}, got {}", self.describe())));
        }
        Ok(())
    }

    /// Checks that the tensor is row-major contiguous.
    pub fn expect_contiguous(&self, name: &str) -> Result<()> {
        if !self.is_contiguous() {
            return Err(Self::arg_err(
                name,
                format!(
                    "expected a contiguous tensor, got {} with strides {:?} (contiguous would be {:?})",
                    self.describe(),
                    self.strides,
                    contiguous_strides(&self.shape)
                ),
            ));
        }
        Ok(())
    }

    /// Checks that the pointer is a non-null multiple of `align` bytes.
    pub fn expect_aligned(&self, name: &str, align: u64) -> Result<()> {
        if self.ptr == 0 && self.numel() > 0 {
            return Err(Self::arg_err(name, "null device pointer".to_string()));
        }
        if align > 1 && self.ptr % align != 0 {
            return Err(Self::arg_err(name, format!("device pointer {:#x} is not {align}-byte aligned", self.ptr)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expect_reports_dtype_and_shape() {
        let t = TensorArg::contiguous(DType::F32, vec![128, 4096], 0x1000);
        assert!(t.expect("x", DType::F32, &[128, 4096]).is_ok());
        let msg = t.expect("x", DType::Bf16, &[128, 4096]).err().map(|e| e.to_string());
        assert_eq!(msg.as_deref(), Some("argument `x`: expected bf16[128, 4096], got f32[128, 4096]"));
        let msg = t.expect("w", DType::F32, &[4096, 128]).err().map(|e| e.to_string());
        assert_eq!(msg.as_deref(), Some("argument `w`: expected f32[4096, 128], got f32[128, 4096]"));
    }

    #[test]
    fn strides_and_contiguity() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        let t = TensorArg::contiguous(DType::Bf16, vec![2, 3, 4], 256);
        assert!(t.is_contiguous());
        assert_eq!(t.span_bytes(), 2 * 3 * 4 * 2);
        let tr = TensorArg::new(DType::Bf16, vec![4, 3], vec![1, 4], 256);
        let tr = tr.ok();
        assert!(tr.as_ref().is_some_and(|t| !t.is_contiguous()));
        assert!(tr.is_some_and(|t| t.expect_contiguous("b").is_err()));
        assert!(TensorArg::new(DType::F32, vec![1, 2], vec![1], 0).is_err());
    }

    #[test]
    fn alignment_and_dtype_parsing() {
        let t = TensorArg::contiguous(DType::F16, vec![8], 0x1002);
        assert!(t.expect_aligned("a", 2).is_ok());
        assert!(t.expect_aligned("a", 16).is_err());
        assert!(t.expect_dtype("a", DType::F16).is_ok());
        assert_eq!("bf16".parse::<DType>().ok(), Some(DType::Bf16));
        assert_eq!("float32".parse::<DType>().ok(), Some(DType::F32));
        assert!("f64".parse::<DType>().is_err());
    }
}
