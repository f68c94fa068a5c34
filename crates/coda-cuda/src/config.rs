//! GEMM tile configurations (the predefined `coda::Cfg*` of
//! `coda_gemm_sm80.cuh`) and the choice of one per kernel.
//!
//! The choice looks at the accumulator width `N` (a constant in practice;
//! `M` is the token count, bound at run time) and at how heavy the epilogue
//! is:
//!
//! * `N <= 64`, or `M` a constant `<= 64`: `Cfg64x64` (small tiles, 4 CTAs/SM);
//! * a heavy epilogue (row or column reductions, pair ops, or more than
//!   [`HEAVY_NODES`] register values): `Cfg128x128w4` (64×64 warp tiles,
//!   up to 255 registers, 2 CTAs/SM), which keeps the reduction arrays out
//!   of local memory where a 128-register config would spill;
//! * `N >= 2048` with a light epilogue: `Cfg128x256` (the fastest config);
//! * otherwise `Cfg128x128`.

use coda_ir::Dim;

/// Register values above which an epilogue counts as heavy.
pub const HEAVY_NODES: usize = 12;

/// One of the predefined tile configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileConfig {
    /// 64×64×32, 4 warps, 3 stages.
    Cfg64x64,
    /// 128×128×32, 8 warps, 4 stages.
    Cfg128x128,
    /// 128×128×32, 4 warps, 4 stages.
    Cfg128x128w4,
    /// 128×256×64, 8 warps, 3 stages.
    Cfg128x256,
}

impl TileConfig {
    /// The C++ type name (without namespace).
    pub fn name(self) -> &'static str {
        match self {
            TileConfig::Cfg64x64 => "Cfg64x64",
            TileConfig::Cfg128x128 => "Cfg128x128",
            TileConfig::Cfg128x128w4 => "Cfg128x128w4",
            TileConfig::Cfg128x256 => "Cfg128x256",
        }
    }

    /// `(BM, BN, BK)`.
    pub fn tile(self) -> (i64, i64, i64) {
        match self {
            TileConfig::Cfg64x64 => (64, 64, 32),
            TileConfig::Cfg128x128 | TileConfig::Cfg128x128w4 => (128, 128, 32),
            TileConfig::Cfg128x256 => (128, 256, 64),
        }
    }

    /// Threads per CTA.
    pub fn threads(self) -> u32 {
        match self {
            TileConfig::Cfg64x64 | TileConfig::Cfg128x128w4 => 128,
            TileConfig::Cfg128x128 | TileConfig::Cfg128x256 => 256,
        }
    }

    /// Pipeline stages.
    pub fn stages(self) -> i64 {
        match self {
            TileConfig::Cfg64x64 | TileConfig::Cfg128x256 => 3,
            TileConfig::Cfg128x128 | TileConfig::Cfg128x128w4 => 4,
        }
    }

    /// The mainloop's dynamic shared memory, `stages * (BM + BN) * BK * 2`
    /// bytes (the epilogues codac emits need no more: `kSmemFloats = 0`).
    pub fn smem_bytes(self) -> u32 {
        let (bm, bn, bk) = self.tile();
        u32::try_from(self.stages() * (bm + bn) * bk * 2).unwrap_or(u32::MAX)
    }
}

/// Picks the configuration for an `m × n` accumulator (see the module docs).
pub fn choose(m: &Dim, n: &Dim, heavy: bool) -> TileConfig {
    let small = |d: &Dim| d.as_const().is_some_and(|v| v <= 64);
    if small(n) || small(m) {
        TileConfig::Cfg64x64
    } else if heavy {
        TileConfig::Cfg128x128w4
    } else if n.as_const().is_some_and(|v| v >= 2048) {
        TileConfig::Cfg128x256
    } else {
        TileConfig::Cfg128x128
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_and_smem() {
        let m = Dim::symbol("M");
        assert_eq!(choose(&m, &Dim::constant(32), false), TileConfig::Cfg64x64);
        assert_eq!(choose(&m, &Dim::constant(4096), false), TileConfig::Cfg128x256);
        assert_eq!(choose(&m, &Dim::constant(4096), true), TileConfig::Cfg128x128w4);
        assert_eq!(choose(&m, &Dim::constant(768), false), TileConfig::Cfg128x128);
        assert_eq!(TileConfig::Cfg128x128.smem_bytes(), 65536);
        assert_eq!(TileConfig::Cfg128x256.smem_bytes(), 147_456);
        assert_eq!(TileConfig::Cfg64x64.smem_bytes(), 24576);
    }
}
