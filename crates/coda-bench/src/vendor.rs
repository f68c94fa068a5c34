//! `codac bench`'s vendor reference: every distinct bare GEMM of a block
//! timed against cuBLAS's GEMM of the same shape, layouts and dtype
//! ([`coda_runtime::VendorGemm`]), alternating launch by launch on the bare
//! GEMM's own copies of the data, so that both run at the same clocks. This
//! is how the "bare GEMM at least 0.95× cuBLAS" target is measured: a
//! cuBLAS GEMM timed by another process a minute later ran up to 17% faster
//! or slower than in the run before (`docs/benchmarks.md`, `bench/compare.py`).
//! Before timing, both compute the product once on the same data and must
//! agree, so the reference is the same GEMM, not one of another layout.

use crate::report::{gemm_report, tflops, Timing, VendorReport};
use crate::rig::Rig;
use crate::{bug, OrBug, Result};
use coda::GemmProfile;
use coda_runtime::{convert, DType, Device, GemmShape, VendorGemm};

/// cuBLAS, if it loaded, and what the report says about it.
pub(crate) struct Vendor {
    gemm: Option<VendorGemm>,
    /// `cuBLAS 13.1.0 (…)` or `not measured: <why>`.
    pub(crate) note: String,
}

impl Vendor {
    /// Loads cuBLAS on `device`'s stream; its absence is noted, not fatal.
    pub(crate) fn open(device: &Device) -> Vendor {
        match VendorGemm::open(device, device.stream()) {
            Ok(gemm) => {
                let v = gemm.version();
                let note = format!(
                    "cuBLAS {}.{}.{} (cublasGemmEx, f32 accumulation, default algorithm, 32 MiB workspace)",
                    v / 10000,
                    v / 100 % 100,
                    v % 100
                );
                Vendor { gemm: Some(gemm), note }
            }
            Err(e) => Vendor { gemm: None, note: format!("not measured: {e}") },
        }
    }

    /// Times kernel `kernel` of `rig` (the bare GEMM of `g`, on `config`)
    /// interleaved with cuBLAS on the same copies of `a`, `b` and `y`;
    /// `None` when cuBLAS is absent (GEMM operands are 16-bit, which is
    /// what `VendorGemm` takes).
    pub(crate) fn compare(
        &self,
        device: &Device,
        (rig, kernel, config): (&Rig, &str, Option<String>),
        g: &GemmProfile,
        (warmup, iters): (usize, usize),
    ) -> Result<Option<VendorReport>> {
        let Some(gemm) = &self.gemm else { return Ok(None) };
        let dtype: DType = g.dtype.to_string().parse()?;
        let size = |e: i64| usize::try_from(e).or_bug(|| "a negative GEMM extent".to_string());
        let shape = GemmShape {
            m: size(g.m.value)?,
            n: size(g.n.value)?,
            k: size(g.k.value)?,
            a_row_major: g.a_row_major,
            b_n_by_k: g.b_n_by_k,
            dtype,
        };
        let (a, b, y) = (rig.bindings_of("a")?, rig.bindings_of("b")?, rig.bindings_of("y")?);
        let difference = agreement(device, rig, kernel, |c| gemm.gemm(&shape, a[c], b[c], y[c]), dtype)?;
        if difference > MAX_DIFFERENCE {
            bug!(
                "cuBLAS's {} GEMM differs from codac's bare GEMM by {difference:.2e} of its largest value \
                 (the two do not compute the same product)",
                g.shape()
            );
        }
        let mut cublas = |c: usize| gemm.gemm(&shape, a[c], b[c], y[c]);
        let (ours, theirs) = rig.time_against_fn(device, kernel, (a.len(), &mut cublas), warmup, iters)?;
        let (bare, cublas) = (Timing::of(&ours), Timing::of(&theirs));
        Ok(Some(VendorReport {
            gemm: gemm_report(g),
            config,
            bare_tflops: tflops(g.flops(), bare.median_ms),
            cublas_tflops: tflops(g.flops(), cublas.median_ms),
            speed: if bare.median_ms > 0.0 { cublas.median_ms / bare.median_ms } else { 0.0 },
            bare,
            cublas,
            difference,
        }))
    }
}

/// The largest difference between two results of the same 16-bit GEMM
/// (the same products summed in another order, each rounded once) relative
/// to its largest value: a few units in the last place of bf16 at most.
const MAX_DIFFERENCE: f64 = 1.0 / 32.0;

/// Runs codac's bare GEMM `kernel` and then `cublas` on copy 0 and returns
/// the largest difference of their outputs `y` over the largest `|y|`.
fn agreement(
    device: &Device,
    rig: &Rig,
    kernel: &str,
    cublas: impl Fn(usize) -> coda_runtime::Result<()>,
    dtype: DType,
) -> Result<f64> {
    rig.run_kernel(device, kernel, 0)?;
    let ours = convert::bytes_to_f32(dtype, &rig.download("y", 0)?)?;
    cublas(0)?;
    device.stream().synchronize()?;
    let theirs = convert::bytes_to_f32(dtype, &rig.download("y", 0)?)?;
    Ok(relative_difference(&ours, &theirs))
}

/// `max |a - b| / max |a|` (infinite when a value is not finite).
fn relative_difference(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let mut scale = 0.0f64;
    let mut worst = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        if !x.is_finite() || !y.is_finite() {
            return f64::INFINITY;
        }
        scale = scale.max(f64::from(x).abs());
        worst = worst.max(f64::from(x - y).abs());
    }
    if scale > 0.0 {
        worst / scale
    } else {
        worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences() {
        assert_eq!(relative_difference(&[2.0, -4.0], &[2.0, -4.0]), 0.0);
        assert_eq!(relative_difference(&[2.0, -4.0], &[2.5, -4.0]), 0.125);
        assert_eq!(relative_difference(&[1.0, f32::NAN], &[1.0, f32::NAN]), f64::INFINITY);
        assert_eq!(relative_difference(&[1.0, 2.0], &[1.0]), f64::INFINITY);
    }
}
