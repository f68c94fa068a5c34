//! The staging copy: the one kernel of the runtime's own, which fills a
//! block's padded staging buffer from an input that a GEMM cannot read in
//! place, or empties one into an output that is not aligned (the manifest's
//! `staging` buffers, `coda_manifest::manifest`).
//!
//! It copies `rows` rows of `cols` elements from `src` (row stride
//! `src_ld` elements) to `dst` (row stride `dst_ld`), a CTA per row with
//! its threads striding over the columns; a grid smaller than the rows
//! walks them in steps of the grid. The copy moves bits, so one entry
//! serves every element type of a size: [`entry`]. Its source is a fixed
//! string, compiled through the kernel cache like the generated kernels,
//! once per architecture.

use crate::error::{Result, RuntimeError};
use crate::launch::LaunchConfig;
use crate::params::ParamBlock;
use crate::tensor::DType;

/// The file name the copy is compiled under.
pub const FILE: &str = "coda_staging_copy.cu";

/// The copy's CUDA source (see the module docs).
pub const SOURCE: &str = r#"// coda_staging_copy.cu -- the staging copy of the codac runtime.
struct CopyArgs {
    const void* src;
    long long src_ld;
    void* dst;
    long long dst_ld;
    long long rows;
    long long cols;
};

template <typename T>
__device__ __forceinline__ void copy_rows(const CopyArgs& a) {
    const T* src = static_cast<const T*>(a.src);
    T* dst = static_cast<T*>(a.dst);
    for (long long m = blockIdx.x; m < a.rows; m += gridDim.x) {
        const T* from = src + m * a.src_ld;
        T* to = dst + m * a.dst_ld;
        for (long long k = threadIdx.x; k < a.cols; k += blockDim.x) {
            to[k] = from[k];
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) coda_staging_copy_2(CopyArgs a) {
    copy_rows<unsigned short>(a);
}

extern "C" __global__ void __launch_bounds__(256) coda_staging_copy_4(CopyArgs a) {
    copy_rows<unsigned int>(a);
}
"#;

/// Threads per CTA.
pub(crate) const THREADS: u32 = 256;

/// The most CTAs a copy launches; each takes every `MAX_CTAS`-th row.
const MAX_CTAS: i64 = 1 << 16;

/// The entry point that copies elements of `dtype`.
pub fn entry(dtype: DType) -> Result<&'static str> {
    match dtype.size_bytes() {
        2 => Ok("coda_staging_copy_2"),
        4 => Ok("coda_staging_copy_4"),
        n => Err(RuntimeError::InvalidInput(format!("no staging copy for {n}-byte elements"))),
    }
}

/// A copy of `rows × cols` elements with row strides `src_ld` and `dst_ld`:
/// its launch configuration and its argument, whose pointer fields
/// ([`SRC_FIELD`], [`DST_FIELD`]) are left 0. `None` when there is nothing
/// to copy.
pub fn launch(rows: i64, cols: i64, src_ld: i64, dst_ld: i64) -> Option<(LaunchConfig, ParamBlock)> {
    if rows <= 0 || cols <= 0 {
        return None;
    }
    let mut args = ParamBlock::new();
    args.push_ptr(0).push_i64(src_ld).push_ptr(0).push_i64(dst_ld).push_i64(rows).push_i64(cols);
    let grid = u32::try_from(rows.min(MAX_CTAS)).unwrap_or(1);
    Some((LaunchConfig { grid: (grid, 1, 1), block: (THREADS, 1, 1), smem_bytes: 0 }, args))
}

/// The field of [`launch`]'s argument holding the source address.
pub const SRC_FIELD: usize = 0;
/// The field of [`launch`]'s argument holding the destination address.
pub const DST_FIELD: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arch, CompileOptions, Compiler};

    #[test]
    fn every_staging_dtype_has_an_entry_and_the_argument_is_the_c_struct() {
        for dtype in [DType::Bf16, DType::F16, DType::F32, DType::I32] {
            let name = entry(dtype).unwrap_or_else(|e| panic!("{e}"));
            assert!(SOURCE.contains(&format!("void __launch_bounds__(256) {name}(CopyArgs a)")), "{name}");
        }
        let Some((cfg, args)) = launch(100_000, 12, 12, 16) else { panic!("an empty copy") };
        assert_eq!(cfg.grid, (65_536, 1, 1));
        // Six 8-byte fields, as `struct CopyArgs`.
        assert_eq!(args.size(), 48);
        assert!(launch(0, 12, 12, 16).is_none() && launch(4, 0, 0, 8).is_none());
    }

    /// The copy compiles with NVRTC for the portable and the Hopper target
    /// without a warning (skipped without NVRTC, unless
    /// `CODAC_REQUIRE_NVRTC=1`).
    #[test]
    fn the_copy_compiles_with_nvrtc() {
        let compiler = match Compiler::global() {
            Ok(c) => c,
            Err(e) => {
                assert!(std::env::var("CODAC_REQUIRE_NVRTC").as_deref() != Ok("1"), "no NVRTC: {e}");
                println!("skipped: no NVRTC ({e})");
                return;
            }
        };
        for arch in [Arch::SM_80, Arch::SM_90A] {
            let out = compiler
                .compile(SOURCE, &CompileOptions::new(arch).file_name(FILE))
                .unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert!(!out.has_warnings(), "{arch}: {}", out.log);
            assert!(!out.cubin.is_empty(), "{arch}: no cubin");
        }
    }
}
