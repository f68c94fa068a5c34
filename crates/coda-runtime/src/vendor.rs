//! cuBLAS's GEMM, the vendor reference `codac bench` measures codac's own
//! GEMMs against: launched on the caller's stream, on the caller's device
//! buffers, so that the two can alternate launch by launch on the same data
//! and run at the same clocks (an H100's clock moves by 20% between runs a
//! few seconds apart under its power cap; compared across processes the
//! ratio says little).
//!
//! The call is `cublasGemmEx` with 16-bit operands and output and `f32`
//! accumulation (`CUBLAS_COMPUTE_32F`), the default algorithm choice and a
//! 32 MiB workspace (what PyTorch gives cuBLAS on Hopper), i.e. what
//! `torch.mm` runs. The library is loaded on first use
//! ([`crate::loader::load_cublas`]); a machine without it gets
//! [`RuntimeError::NoCublas`], never a panic.

use std::ffi::{c_int, c_void};

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::{result as blas, CudaBlas};

use crate::device::{Device, Stream};
use crate::error::{Result, RuntimeError};
use crate::memory::DeviceBuffer;
use crate::tensor::{DType, TensorArg};
use crate::toolkit::Toolkit;

/// A row-major GEMM `y[M, N] = A · B` as codac's kernels see it: `A` is
/// stored `[M, K]` (`a_row_major`) or `[K, M]`, `B` is stored `[N, K]`
/// (`b_n_by_k`, an `nn.Linear` weight) or `[K, N]`; every buffer is
/// contiguous and of `dtype` (`bf16` or `f16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Rows of `y`.
    pub m: usize,
    /// Columns of `y`.
    pub n: usize,
    /// The reduced extent.
    pub k: usize,
    /// `A` stored `[M, K]` (else `[K, M]`).
    pub a_row_major: bool,
    /// `B` stored `[N, K]` (else `[K, N]`).
    pub b_n_by_k: bool,
    /// Element type of `A`, `B` and `y`.
    pub dtype: DType,
}

/// The column-major call that computes a [`GemmShape`]: cuBLAS sees the
/// row-major `y[M, N]` as the column-major `yᵀ[N, M] = Bᵀ · Aᵀ`, so its
/// first operand is `B` and its second `A`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnMajorCall {
    /// Whether cuBLAS transposes its first operand (`B`).
    pub transpose_first: bool,
    /// Whether cuBLAS transposes its second operand (`A`).
    pub transpose_second: bool,
    /// cuBLAS's `m`: `N`.
    pub m: usize,
    /// cuBLAS's `n`: `M`.
    pub n: usize,
    /// cuBLAS's `k`: `K`.
    pub k: usize,
    /// Leading dimension of `B` as cuBLAS stores it.
    pub ld_first: usize,
    /// Leading dimension of `A` as cuBLAS stores it.
    pub ld_second: usize,
    /// Leading dimension of `yᵀ` (`N`).
    pub ld_out: usize,
}

impl GemmShape {
    /// The column-major call computing this GEMM.
    pub fn column_major(&self) -> ColumnMajorCall {
        // Stored `[N, K]` row-major is `[K, N]` column-major: transposed to get `Bᵀ [N, K]`.
        let (transpose_first, ld_first) = if self.b_n_by_k { (true, self.k) } else { (false, self.n) };
        // Stored `[M, K]` row-major is `[K, M]` column-major: `Aᵀ` as it is.
        let (transpose_second, ld_second) = if self.a_row_major { (false, self.k) } else { (true, self.m) };
        ColumnMajorCall {
            transpose_first,
            transpose_second,
            m: self.n,
            n: self.m,
            k: self.k,
            ld_first,
            ld_second,
            ld_out: self.n,
        }
    }

    /// `2 M N K`.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// A cuBLAS handle bound to one stream, with its workspace.
#[derive(Debug)]
pub struct VendorGemm {
    blas: CudaBlas,
    _workspace: DeviceBuffer,
    version: i32,
}

/// Bytes of the workspace given to cuBLAS.
pub const VENDOR_WORKSPACE_BYTES: usize = 32 << 20;

fn cublas_error(call: &'static str, e: blas::CublasError) -> RuntimeError {
    RuntimeError::Cublas { call, status: format!("{:?}", e.0) }
}

fn int(v: usize, what: &str) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| RuntimeError::InvalidInput(format!("{what} = {v} does not fit cuBLAS's int")))
}

impl VendorGemm {
    /// Loads cuBLAS and makes a handle that launches on `stream` of `device`.
    pub fn open(device: &Device, stream: &Stream) -> Result<VendorGemm> {
        crate::loader::load_cublas(&Toolkit::discover())?;
        let blas = CudaBlas::new(stream.inner.clone()).map_err(|e| cublas_error("cublasCreate", e))?;
        let workspace = DeviceBuffer::alloc(device, VENDOR_WORKSPACE_BYTES)?;
        // SAFETY: the handle is live; the workspace is a device allocation of
        // the stated size that the returned value keeps alive.
        let status = unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *blas.handle(),
                workspace.ptr() as *mut c_void,
                VENDOR_WORKSPACE_BYTES,
            )
        };
        status.result().map_err(|e| cublas_error("cublasSetWorkspace", e))?;
        let mut version: c_int = 0;
        // SAFETY: the handle is live and `version` is valid for writes.
        let status = unsafe { cudarc::cublas::sys::cublasGetVersion_v2(*blas.handle(), &mut version) };
        status.result().map_err(|e| cublas_error("cublasGetVersion", e))?;
        Ok(VendorGemm { blas, _workspace: workspace, version })
    }

    /// cuBLAS's version, e.g. `130100` for 13.1.0.
    pub fn version(&self) -> i32 {
        self.version
    }

    /// Enqueues `y = A · B` (see [`GemmShape`]) on the handle's stream,
    /// after checking that `a`, `b` and `y` are contiguous tensors of the
    /// shape's dtype and stored shapes (like a kernel launch, the pointers
    /// themselves are the caller's word).
    pub fn gemm(&self, shape: &GemmShape, a: &TensorArg, b: &TensorArg, y: &TensorArg) -> Result<()> {
        let data_type = match shape.dtype {
            DType::Bf16 => cudaDataType::CUDA_R_16BF,
            DType::F16 => cudaDataType::CUDA_R_16F,
            other => {
                return Err(RuntimeError::InvalidInput(format!(
                    "the cuBLAS reference GEMM takes bf16 or f16, not {}",
                    other.name()
                )))
            }
        };
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let a_stored = if shape.a_row_major { [m, k] } else { [k, m] };
        let b_stored = if shape.b_n_by_k { [n, k] } else { [k, n] };
        for (name, t, stored) in [("a", a, a_stored), ("b", b, b_stored), ("y", y, [m, n])] {
            t.expect(name, shape.dtype, &stored)?;
            t.expect_contiguous(name)?;
        }
        let call = shape.column_major();
        let op = |t: bool| if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N };
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: sizes and leading dimensions come from `column_major` and
        // match the contiguous tensors checked above (whose pointers are the
        // caller's word, as for every launch); alpha and beta are f32 host
        // scalars, as CUBLAS_COMPUTE_32F requires.
        unsafe {
            blas::gemm_ex(
                *self.blas.handle(),
                op(call.transpose_first),
                op(call.transpose_second),
                int(call.m, "N")?,
                int(call.n, "M")?,
                int(call.k, "K")?,
                (&alpha as *const f32).cast(),
                b.ptr as *const c_void,
                data_type,
                int(call.ld_first, "the leading dimension of B")?,
                a.ptr as *const c_void,
                data_type,
                int(call.ld_second, "the leading dimension of A")?,
                (&beta as *const f32).cast(),
                y.ptr as *mut c_void,
                data_type,
                int(call.ld_out, "N")?,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| cublas_error("cublasGemmEx", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(a_row_major: bool, b_n_by_k: bool) -> GemmShape {
        GemmShape { m: 300, n: 512, k: 128, a_row_major, b_n_by_k, dtype: DType::Bf16 }
    }

    /// `x @ w.T` with `x [M, K]` and an `nn.Linear` weight `w [N, K]` is
    /// cuBLAS's "TN" call: `yᵀ = wᵀᵀ · xᵀ`, as `torch.mm` makes it.
    #[test]
    fn linear_layer_is_tn() {
        let c = shape(true, true).column_major();
        assert_eq!((c.transpose_first, c.transpose_second), (true, false));
        assert_eq!((c.m, c.n, c.k), (512, 300, 128));
        assert_eq!((c.ld_first, c.ld_second, c.ld_out), (128, 128, 512));
    }

    /// A weight gradient `dyᵀ @ x` reads `A` stored `[K, M]`: cuBLAS
    /// transposes its second operand, whose leading dimension is `M`.
    #[test]
    fn transposed_operands() {
        let c = shape(false, false).column_major();
        assert_eq!((c.transpose_first, c.transpose_second), (false, true));
        assert_eq!((c.ld_first, c.ld_second, c.ld_out), (512, 300, 512));
        let c = shape(false, true).column_major();
        assert_eq!((c.transpose_first, c.transpose_second), (true, true));
        assert_eq!((c.ld_first, c.ld_second), (128, 300));
    }

    /// Every leading dimension is at least the rows of its operand as
    /// cuBLAS reads it (its rule), for every layout.
    #[test]
    fn leading_dimensions_cover_the_rows() {
        for (a, b) in [(true, true), (true, false), (false, true), (false, false)] {
            let c = shape(a, b).column_major();
            let first_rows = if c.transpose_first { c.k } else { c.m };
            let second_rows = if c.transpose_second { c.n } else { c.k };
            assert!(c.ld_first >= first_rows && c.ld_second >= second_rows && c.ld_out >= c.m, "{c:?}");
        }
    }
}
