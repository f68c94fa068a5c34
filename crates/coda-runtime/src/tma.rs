//! TMA tensor maps for the Hopper mainloop: `cuTensorMapEncodeTiled` on a
//! 16-bit buffer, with the fixed modes `coda_gemm_sm90.cuh` expects (no
//! interleave, 128-byte swizzle, 256-byte L2 promotion, zero fill out of
//! bounds). The 128 opaque bytes become one kernel parameter.

use cudarc::driver::sys;

use crate::error::{CudaResultExt, Result, RuntimeError};
use crate::params::ParamBlock;
use crate::tensor::DType;

/// A tiled tensor map request (see `coda_manifest::manifest::TensorMapSpec`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiledMap {
    /// Element type (bf16 or f16).
    pub dtype: DType,
    /// Device address of the first element (16-byte aligned).
    pub address: u64,
    /// Extents in elements, innermost first (rank 1 to 5).
    pub dims: Vec<u64>,
    /// Byte strides of `dims[1..]` (multiples of 16).
    pub strides: Vec<u64>,
    /// Box extents, innermost first.
    pub box_dims: Vec<u32>,
}

impl TiledMap {
    /// Checks the request against the driver's documented limits, so that a
    /// bad binding is a readable error rather than `CUDA_ERROR_INVALID_VALUE`.
    fn validate(&self) -> Result<()> {
        let rank = self.dims.len();
        let bad = |why: String| Err(RuntimeError::InvalidInput(format!("tensor map {self:?}: {why}")));
        if !(1..=5).contains(&rank) || self.strides.len() + 1 != rank || self.box_dims.len() != rank {
            return bad("rank, strides and box do not agree".into());
        }
        if self.address % 16 != 0 {
            return bad("the address is not 16-byte aligned".into());
        }
        if let Some(s) = self.strides.iter().find(|s| **s % 16 != 0 || **s >= 1 << 40) {
            return bad(format!("stride {s} is not a multiple of 16 below 2^40"));
        }
        if self.dims.iter().any(|d| *d == 0 || *d > 1 << 32) {
            return bad("every extent must be in 1..=2^32".into());
        }
        if self.box_dims.iter().any(|b| *b == 0 || *b > 256) {
            return bad("every box extent must be in 1..=256".into());
        }
        Ok(())
    }

    /// Encodes the map and returns it as a kernel parameter (128 bytes).
    pub fn encode(&self) -> Result<ParamBlock> {
        self.validate()?;
        let data_type = match self.dtype {
            DType::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            DType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            other => {
                return Err(RuntimeError::InvalidInput(format!("tensor maps are for 16-bit operands, not {other}")))
            }
        };
        let element_strides = vec![1u32; self.dims.len()];
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        // SAFETY: every pointer is valid for the rank read by the driver
        // (lengths checked in `validate`); `map` is a 128-byte aligned
        // CUtensorMap written by the call; the global address is only
        // recorded, not dereferenced.
        let status = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                data_type,
                self.dims.len() as u32,
                self.address as *mut std::ffi::c_void,
                self.dims.as_ptr(),
                self.strides.as_ptr(),
                self.box_dims.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        status.result().cuda("cuTensorMapEncodeTiled")?;
        let mut block = ParamBlock::new();
        for word in map.opaque {
            block.push_u64(word);
        }
        Ok(block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> TiledMap {
        TiledMap {
            dtype: DType::Bf16,
            address: 1 << 20,
            dims: vec![4096, 8192],
            strides: vec![8192],
            box_dims: vec![64, 64],
        }
    }

    #[test]
    fn validation_catches_bad_requests() {
        assert!(map().validate().is_ok());
        let misaligned = TiledMap { address: (1 << 20) + 8, ..map() };
        assert!(misaligned.validate().is_err());
        let stride = TiledMap { strides: vec![8200], ..map() };
        assert!(stride.validate().is_err());
        let rank = TiledMap { box_dims: vec![64], ..map() };
        assert!(rank.validate().is_err());
        let empty = TiledMap { dims: vec![0, 8192], ..map() };
        assert!(empty.validate().is_err());
    }

    #[test]
    fn f32_is_refused() {
        let f32_map = TiledMap { dtype: DType::F32, ..map() };
        assert!(f32_map.encode().is_err());
    }
}
