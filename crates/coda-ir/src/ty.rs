//! Element types, canonical two-axis shapes and value types.
//!
//! Every IR value is two-dimensional: a scalar is `[1, 1]`, a per-row vector
//! (one value per token) is `[M, 1]`, a per-column vector is `[1, N]` and a
//! tile is `[M, N]`. These four classes are exactly the epilogue operand
//! kinds (scalar, row vector, column vector, full tile), so the shape of a
//! value says how a GEMM epilogue would load it.

use crate::dim::Dim;
use std::fmt;

/// An amax below this counts as this where a quantization scale is formed
/// (`max_finite / max(amax, AMAX_FLOOR)`), so that a tensor of zeros gets a
/// finite scale and stays zero (torchao's `EPS`).
pub const AMAX_FLOOR: f64 = 1e-12;

/// Element types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// bfloat16 storage; arithmetic in fp32.
    BF16,
    /// IEEE half storage; arithmetic in fp32.
    F16,
    /// IEEE single.
    F32,
    /// 32-bit signed integer (indices such as targets).
    I32,
    /// The result of a comparison; never stored.
    Bool,
    /// fp8 e4m3 (`float8_e4m3fn`: saturating at ±448, no infinity).
    E4M3,
    /// fp8 e5m2 (`float8_e5m2`: overflowing to infinity).
    E5M2,
}

impl DType {
    /// The name used in source and in the printed IR.
    pub fn name(self) -> &'static str {
        match self {
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::Bool => "bool",
            DType::E4M3 => "e4m3",
            DType::E5M2 => "e5m2",
        }
    }

    /// Parses a source type name (`bool` is internal and not accepted).
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "bf16" => DType::BF16,
            "f16" => DType::F16,
            "f32" => DType::F32,
            "i32" => DType::I32,
            "e4m3" => DType::E4M3,
            "e5m2" => DType::E5M2,
            _ => return None,
        })
    }

    /// Whether values of this type are floating point.
    pub fn is_float(self) -> bool {
        matches!(self, DType::BF16 | DType::F16 | DType::F32 | DType::E4M3 | DType::E5M2)
    }

    /// Whether this is a 16-bit float, the operand type of the GEMM mainloop.
    pub fn is_half(self) -> bool {
        matches!(self, DType::BF16 | DType::F16)
    }

    /// Whether this is an 8-bit float.
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::E4M3 | DType::E5M2)
    }

    /// Whether a matrix product can read its operands in this type: a
    /// 16-bit float, or an fp8 one (whose products the interpreter defines;
    /// the code generator has no fp8 mainloop yet).
    pub fn is_gemm_operand(self) -> bool {
        self.is_half() || self.is_fp8()
    }

    /// The largest finite value of an fp8 type (`None` for the others):
    /// what a quantization scale maps a tensor's amax to.
    pub fn max_finite(self) -> Option<f64> {
        match self {
            DType::E4M3 => Some(448.0),
            DType::E5M2 => Some(57344.0),
            _ => None,
        }
    }

    /// Bytes per element in memory.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::BF16 | DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::Bool | DType::E4M3 | DType::E5M2 => 1,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A two-axis shape `[rows, cols]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    /// Number of rows (tokens), or 1.
    pub rows: Dim,
    /// Number of columns (features), or 1.
    pub cols: Dim,
}

/// What kind of epilogue operand a shape is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeClass {
    /// `[1, 1]`.
    Scalar,
    /// `[M, 1]`: one value per row.
    RowVector,
    /// `[1, N]`: one value per column.
    ColVector,
    /// `[M, N]`.
    Tile,
}

impl Shape {
    /// `[rows, cols]`.
    pub fn new(rows: Dim, cols: Dim) -> Shape {
        Shape { rows, cols }
    }

    /// `[1, 1]`.
    pub fn scalar() -> Shape {
        Shape::new(Dim::constant(1), Dim::constant(1))
    }

    /// The operand class of this shape.
    pub fn class(&self) -> ShapeClass {
        match (self.rows.is_one(), self.cols.is_one()) {
            (true, true) => ShapeClass::Scalar,
            (false, true) => ShapeClass::RowVector,
            (true, false) => ShapeClass::ColVector,
            (false, false) => ShapeClass::Tile,
        }
    }

    /// `[cols, rows]`.
    #[must_use]
    pub fn transposed(&self) -> Shape {
        Shape::new(self.cols.clone(), self.rows.clone())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}]", self.rows, self.cols)
    }
}

/// The type of an IR value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ty {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Shape,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
