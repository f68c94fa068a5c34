//! Per-kernel facts for benchmarks (`codac bench`): each kernel's GEMM
//! shape, operand layouts and tile configuration, its floating-point work,
//! the bytes it moves, and the `.coda` source of the same GEMM with an empty
//! epilogue (compiled through [`compile()`](crate::compile()) like any block,
//! so it gets the same mainloop and configuration rules).
//!
//! Bytes follow `coda_cuda::traffic` (every buffer a kernel touches counted
//! once). A GEMM kernel's *epilogue bytes* are those of every buffer except
//! its two operands: what the fused epilogue adds to a bare GEMM's operand
//! reads (its own loads, its stores, its partial sums).

use crate::compile::{rewritten_module, CompileError, CompileOptions};
use crate::Checked;
use coda_cuda::kir::{BlockIr, Kernel, KernelKind, Layout};
use coda_cuda::traffic;
use coda_ir::interp::DimBindings;
use coda_ir::{DType, Dim};
use std::fmt::Write as _;

/// The kernels of one block, in launch order.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockProfile {
    /// The block's name.
    pub block: String,
    /// One entry per kernel of the manifest, in the same order.
    pub kernels: Vec<KernelProfile>,
}

/// What one kernel computes and moves at the given dims.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelProfile {
    /// Name (`gemm_x1`), as in the manifest.
    pub name: String,
    /// `gemm`, `row` or `colreduce`, as in the manifest.
    pub kind: &'static str,
    /// The GEMM of a GEMM kernel.
    pub gemm: Option<GemmProfile>,
    /// Bytes of every buffer the kernel reads or writes.
    pub bytes_moved: u64,
    /// `bytes_moved` less the GEMM operands (all of it for other kernels).
    pub epilogue_bytes: u64,
}

/// A GEMM dimension: its value at the bound dims, and whether it is a
/// run-time dim (symbolic) or a constant of the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// The value at the bound dims.
    pub value: i64,
    /// Whether it depends on a run-time dim.
    pub run_time: bool,
}

/// The GEMM of a GEMM kernel: `acc[m, n] = sum_k A[m, k] B[k, n]`.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmProfile {
    /// Rows of the accumulator.
    pub m: Extent,
    /// Columns of the accumulator.
    pub n: Extent,
    /// The contracted dimension.
    pub k: Extent,
    /// `A` stored `[m, k]` (false: `[k, m]`).
    pub a_row_major: bool,
    /// `B` stored `[n, k]` like an `nn.Linear` weight (false: `[k, n]`).
    pub b_n_by_k: bool,
    /// Operand element type (bf16 or f16).
    pub dtype: DType,
    /// The tile configuration (`Cfg128x256`, …).
    pub config: String,
    /// Whether the weight is read in pair order (a permuted row loader).
    pub pair_rows: bool,
}

impl GemmProfile {
    /// Floating-point operations: `2 m n k`.
    pub fn flops(&self) -> f64 {
        2.0 * self.m.value as f64 * self.n.value as f64 * self.k.value as f64
    }

    /// `M×N×K`, e.g. `8192×4096×4096`.
    pub fn shape(&self) -> String {
        format!("{}×{}×{}", self.m.value, self.n.value, self.k.value)
    }

    /// The same GEMM with an empty epilogue, as a `.coda` block named
    /// `bare_gemm` with inputs `a`, `b` (same layouts and dtype) and output
    /// `y` (the operand dtype), plus the run-time dims to bind. A run-time
    /// extent stays a run-time dim so the configuration rules see the same
    /// program shape.
    pub fn bare_gemm(&self) -> BareGemm {
        let mut source = String::from("// The GEMM of a fused kernel with an empty epilogue (codac bench).\n");
        let mut dims = DimBindings::new();
        for (name, e) in [("GM", self.m), ("GN", self.n), ("GK", self.k)] {
            if e.run_time {
                let _ = writeln!(source, "dim {name}");
                dims.insert(name.to_string(), e.value);
            } else {
                let _ = writeln!(source, "dim {name} = {}", e.value);
            }
        }
        let t = self.dtype;
        let (a_decl, a_use) = if self.a_row_major { ("[GM, GK]", "a") } else { ("[GK, GM]", "a.T") };
        let (b_decl, b_use) = if self.b_n_by_k { ("[GN, GK]", "b.T") } else { ("[GK, GN]", "b") };
        let _ = writeln!(source, "block bare_gemm(a: {t}{a_decl}, b: {t}{b_decl}) -> (y: {t}[GM, GN]) {{");
        let _ = writeln!(source, "    y = {a_use} @ {b_use}");
        source.push_str("}\n");
        BareGemm { source, dims }
    }
}

/// A bare GEMM block and the dims to run it at.
#[derive(Debug, Clone, PartialEq)]
pub struct BareGemm {
    /// The `.coda` source.
    pub source: String,
    /// Its run-time dims.
    pub dims: DimBindings,
}

/// Profiles the kernels [`compile()`](crate::compile()) makes with
/// `options`, at `dims` (dims a block does not use are ignored; an unbound
/// run-time dim counts as 0).
pub fn profile(
    checked: &Checked,
    options: &CompileOptions,
    dims: &DimBindings,
) -> Result<Vec<BlockProfile>, CompileError> {
    let module = rewritten_module(checked, options)?;
    let mut blocks = Vec::new();
    for block in &module.blocks {
        let compiled = coda_cuda::compile_block(block, &checked.source, &options.codegen)?;
        let kernels = compiled.ir.kernels.iter().map(|k| kernel_profile(&compiled.ir, k, dims)).collect();
        blocks.push(BlockProfile { block: block.name.clone(), kernels });
    }
    Ok(blocks)
}

fn kernel_profile(ir: &BlockIr, kernel: &Kernel, dims: &DimBindings) -> KernelProfile {
    let bytes_moved = traffic::kernel_bytes(ir, kernel, dims);
    let (kind, gemm, operand_bytes) = match &kernel.kind {
        KernelKind::Gemm(g) => {
            let extent = |d: &Dim| Extent {
                value: d.eval(&|name: &str| dims.get(name).copied()).unwrap_or(0),
                run_time: d.as_const().is_none(),
            };
            let profile = GemmProfile {
                m: extent(&g.m),
                n: extent(&g.n),
                k: extent(&g.k),
                a_row_major: g.a.layout == Layout::AMxK,
                b_n_by_k: g.b.layout == Layout::BNxK,
                dtype: g.elem,
                config: g.config.name().to_string(),
                pair_rows: g.b.row_perm.is_some(),
            };
            let operand_bytes = g.operand_bufs().map(|b| buffer_bytes(ir, b, dims)).sum::<u64>();
            ("gemm", Some(profile), operand_bytes)
        }
        KernelKind::Row { .. } => ("row", None, 0),
        KernelKind::Col { .. } => ("colreduce", None, 0),
    };
    KernelProfile {
        name: kernel.name.clone(),
        kind,
        gemm,
        bytes_moved,
        epilogue_bytes: bytes_moved.saturating_sub(operand_bytes),
    }
}

/// Bytes of one buffer at `dims` (0 when its size cannot be evaluated).
fn buffer_bytes(ir: &BlockIr, id: usize, dims: &DimBindings) -> u64 {
    let Some(b) = ir.buffers.get(id) else { return 0 };
    let size = b.rows.clone().times(b.cols.clone()).eval(dims).unwrap_or(0).max(0) as u64;
    size * b.dtype.size_bytes() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile_of(text: &str, dims: &[(&str, i64)]) -> Vec<KernelProfile> {
        let checked = crate::check("t.coda", text).unwrap_or_else(|e| panic!("{e}"));
        assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
        let dims: DimBindings = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let blocks = profile(&checked, &CompileOptions::default(), &dims).unwrap_or_else(|e| panic!("{e}"));
        blocks.into_iter().next().map(|b| b.kernels).unwrap_or_default()
    }

    /// The out-projection with a residual: flops, operand and epilogue bytes.
    #[test]
    fn gemm_with_residual() {
        let text = "dim M\ndim D = 256\nblock b(x: bf16[M, D], r: bf16[M, D], w: bf16[D, D]) -> (y: bf16[M, D]) {\n    y = r + x @ w.T\n}\n";
        let kernels = profile_of(text, &[("M", 64)]);
        let gemm = kernels.iter().find(|k| k.kind == "gemm").unwrap_or_else(|| panic!("no gemm: {kernels:?}"));
        let g = gemm.gemm.as_ref().unwrap_or_else(|| panic!("no gemm profile"));
        assert_eq!((g.m.value, g.n.value, g.k.value), (64, 256, 256));
        assert!(g.m.run_time && !g.n.run_time && !g.k.run_time);
        assert!(g.a_row_major && g.b_n_by_k);
        assert_eq!(g.flops(), 2.0 * 64.0 * 256.0 * 256.0);
        // x (64×256) and w (256×256) are operands; r and y (64×256 each) are epilogue traffic.
        assert_eq!(gemm.bytes_moved, 2 * (64 * 256 * 3 + 256 * 256));
        assert_eq!(gemm.epilogue_bytes, 2 * (64 * 256 * 2));
    }

    /// The bare GEMM keeps layouts, dtype and which extents are run-time dims, and checks.
    #[test]
    fn bare_gemm_source_checks() {
        let g = GemmProfile {
            m: Extent { value: 300, run_time: true },
            n: Extent { value: 512, run_time: false },
            k: Extent { value: 128, run_time: false },
            a_row_major: false,
            b_n_by_k: false,
            dtype: DType::F16,
            config: "Cfg128x128".into(),
            pair_rows: false,
        };
        let bare = g.bare_gemm();
        assert!(bare.source.contains("a: f16[GK, GM], b: f16[GK, GN]"), "{}", bare.source);
        assert!(bare.source.contains("y = a.T @ b"), "{}", bare.source);
        assert_eq!(bare.dims.get("GM"), Some(&300));
        let dims: Vec<(&str, i64)> = bare.dims.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let kernels = profile_of(&bare.source, &dims);
        let again = kernels.iter().find_map(|k| k.gemm.clone()).unwrap_or_else(|| panic!("no gemm"));
        assert_eq!((again.m, again.n, again.k), (g.m, g.n, g.k));
        assert_eq!((again.a_row_major, again.b_n_by_k, again.dtype), (false, false, DType::F16));
        let gemm = kernels.iter().find(|k| k.kind == "gemm").unwrap_or_else(|| panic!("no gemm"));
        assert_eq!(gemm.epilogue_bytes, 300 * 512 * 2, "only the store of y");
    }
}
