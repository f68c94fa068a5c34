//! GEMM tile configurations (the predefined `coda::Cfg*` of
//! `coda_gemm_sm80.cuh` and `coda::Sm90Cfg*` of `coda_gemm_sm90.cuh`) and
//! the choice of one per kernel.
//!
//! The portable choice ([`choose`]) looks at the accumulator width `N` (a constant in practice;
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
//!
//! On `sm_90a` ([`Target::Sm90a`]) a GEMM whose portable choice is not the
//! small-tile one moves to the Hopper mainloop ([`for_target`]): TMA loads,
//! wgmma, a persistent grid. `Sm90Cfg128x256` (the fastest: 0.96–0.99× of
//! cuBLAS, `docs/decisions/hopper-mainloop.md`) unless the epilogue reads
//! per-column vectors beside per-row values finished from partials (a
//! deferred LayerNorm's consumer, whose registers spill beside 128
//! accumulators) or `N` is a constant below 256; then `Sm90Cfg128x128`.
//! Column partials do not count: they are reduced pair by pair
//! (`coda::col_keep`), so they keep `CJ / 4` registers, not `2 × CJ`. A B operand read in pair order stays on the portable
//! mainloop unless its permuted range is a multiple of 64 rows and its
//! groups of 32 (the TMA boxes of the pair-order view: 64 rows, or 32 for
//! groups such as Phi-3's 96-wide heads).
//!
//! Once a GEMM's epilogue is built, one the rules gave `Sm90Cfg128x256`
//! moves to ping-pong tiles with staged subtiles ([`subtiles_pay`]:
//! `Sm90Cfg128x192pps`, `Sm90Cfg128x192pps2` for two outputs, `Sm90Cfg128x192pps3` for three) when that
//! epilogue has no partials, its tile operands are tensors in pair layout
//! read a quad per column pair or its traffic hides behind the K loop
//! ([`tile_operands_hide`]), and `N` fills a 192-column grid.
//!
//! These rules know `N` but not the run-time `M`; `codac bench --autotune`
//! measures a Hopper choice's [`TileConfig::alternatives`] for one `M` and
//! files the winner, which `CodegenOptions::tiles` then applies. The rules
//! never choose the ping-pong `Sm90Cfg128x128pp`: its GEMMs run about 10%
//! slower, though it won single kernels in autotune trials
//! (`docs/decisions/ping-pong.md`). The epilogue warpgroup, thread-block
//! clusters and full-tile ping-pong tiles of 192 accumulators per thread
//! lost everywhere and are not offered (`docs/decisions/`).
//! `--tile-config` (`CodegenOptions::tile_config`) asks for one
//! configuration by name for every GEMM that can take it.

use coda_ir::Dim;

/// Register values above which an epilogue counts as heavy.
pub const HEAVY_NODES: usize = 12;

/// The dynamic shared memory one CTA may have on Hopper (227 KiB).
pub const SM90_MAX_SMEM: u32 = 232_448;

/// The code-generation target: which mainloops exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Any sm_80+ GPU: the portable mma.sync mainloop only.
    Portable,
    /// Hopper (`sm_90a`): the TMA + wgmma mainloop where it applies.
    Sm90a,
}

impl Target {
    /// The target of an arch name: `sm_90a` is Hopper with its
    /// architecture-specific instructions; every other arch (`sm_80`,
    /// `sm_90` without `a`, later families without wgmma) is portable.
    pub fn from_arch(arch: &str) -> Target {
        if arch == "sm_90a" {
            Target::Sm90a
        } else {
            Target::Portable
        }
    }
}

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
    /// Hopper: 128×256×64, two cooperative consumer warpgroups, 3 stages.
    Sm90Cfg128x256,
    /// Hopper: 128×128×64, two cooperative consumer warpgroups, 5 stages.
    Sm90Cfg128x128,
    /// Hopper: 128×128×64, ping-pong (each consumer warpgroup owns whole
    /// tiles, one's epilogue overlapping the other's K loop), 4 stages.
    Sm90Cfg128x128pp,
    /// Hopper: 128×192×64 ping-pong whose epilogue stages 64 columns at a
    /// time (`coda::sub_put`), so two small scratches leave room for a
    /// 4-stage ring.
    Sm90Cfg128x192pps,
    /// Hopper: 128×192×64 ping-pong with two regions of 32-column staged
    /// subtiles (a staged operand's subtile beside an output's, or two
    /// outputs') and a 4-stage ring.
    Sm90Cfg128x192pps2,
    /// Hopper: 128×192×64 ping-pong with three regions of 32-column staged
    /// subtiles (three outputs) and a 4-stage ring.
    Sm90Cfg128x192pps3,
}

/// Which GEMM mainloop a configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mainloop {
    /// mma.sync + cp.async (`coda_gemm_sm80.cuh`), any sm_80+ GPU.
    Portable,
    /// Hopper TMA + wgmma, two consumer warpgroups sharing each tile.
    Cooperative,
    /// Hopper TMA + wgmma, each consumer warpgroup owning whole tiles, one's
    /// epilogue overlapping the other's K loop (two tiles in flight).
    PingPong,
}

/// Everything the generator knows about one configuration: one row of
/// [`TileConfig::SPECS`], mirroring the C++ struct of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigSpec {
    /// The configuration this row describes.
    pub config: TileConfig,
    /// The C++ type name (without namespace).
    pub name: &'static str,
    /// `(BM, BN, BK)`.
    pub tile: (i64, i64, i64),
    /// Threads per CTA.
    pub threads: u32,
    /// Pipeline stages.
    pub stages: i64,
    /// The mainloop.
    pub mainloop: Mainloop,
    /// Columns the epilogue stages through shared memory at a time, when
    /// fewer than the tile's ([`TileConfig::stage_cols`]).
    pub stage_cols: Option<i64>,
    /// Regions of staged subtiles in the scratch ([`TileConfig::stage_regions`]).
    pub stage_regions: i64,
}

impl TileConfig {
    /// Every configuration, in the order of the enum.
    #[rustfmt::skip]
    pub const SPECS: [ConfigSpec; 10] = {
        use Mainloop::{Cooperative, PingPong, Portable};
        use TileConfig::*;
        const fn row(
            config: TileConfig, name: &'static str, tile: (i64, i64, i64), threads: u32, stages: i64,
            mainloop: Mainloop, (stage_cols, stage_regions): (Option<i64>, i64),
        ) -> ConfigSpec {
            ConfigSpec { config, name, tile, threads, stages, mainloop, stage_cols, stage_regions }
        }
        [
            //   configuration         name                   (BM, BN, BK)    threads stages mainloop     (staged cols, regions)
            row(Cfg64x64,           "Cfg64x64",           (64, 64, 32),   128, 3, Portable,    (None,     1)),
            row(Cfg128x128,         "Cfg128x128",         (128, 128, 32), 256, 4, Portable,    (None,     1)),
            row(Cfg128x128w4,       "Cfg128x128w4",       (128, 128, 32), 128, 4, Portable,    (None,     1)),
            row(Cfg128x256,         "Cfg128x256",         (128, 256, 64), 256, 3, Portable,    (None,     1)),
            row(Sm90Cfg128x256,     "Sm90Cfg128x256",     (128, 256, 64), 384, 3, Cooperative, (None,     1)),
            row(Sm90Cfg128x128,     "Sm90Cfg128x128",     (128, 128, 64), 384, 5, Cooperative, (None,     1)),
            row(Sm90Cfg128x128pp,   "Sm90Cfg128x128pp",   (128, 128, 64), 384, 4, PingPong,    (None,     1)),
            row(Sm90Cfg128x192pps,  "Sm90Cfg128x192pps",  (128, 192, 64), 384, 4, PingPong,    (Some(64), 1)),
            row(Sm90Cfg128x192pps2, "Sm90Cfg128x192pps2", (128, 192, 64), 384, 4, PingPong,    (Some(32), 2)),
            row(Sm90Cfg128x192pps3, "Sm90Cfg128x192pps3", (128, 192, 64), 384, 4, PingPong,    (Some(32), 3)),
        ]
    };

    /// Every configuration, for lookups by name.
    pub const ALL: [TileConfig; 10] = {
        let mut all = [TileConfig::Cfg64x64; 10];
        let mut i = 0;
        while i < all.len() {
            all[i] = TileConfig::SPECS[i].config;
            i += 1;
        }
        all
    };

    /// This configuration's row of [`TileConfig::SPECS`].
    pub fn spec(self) -> &'static ConfigSpec {
        &TileConfig::SPECS[self as usize]
    }

    /// The C++ type name (without namespace).
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Runs on the Hopper mainloop (`gemm_sm90`).
    pub fn is_sm90(self) -> bool {
        self.spec().mainloop != Mainloop::Portable
    }

    /// The configuration of a C++ type name ([`TileConfig::name`]).
    pub fn from_name(name: &str) -> Option<TileConfig> {
        TileConfig::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The configurations a GEMM given this one by the rules may run with
    /// instead, itself first: what `codac bench --autotune` times. A Hopper
    /// configuration has the other Hopper ones (same mainloop family, same
    /// epilogue code, so any of them is correct); one with more
    /// accumulators per thread (`Sm90Cfg128x256` and the ping-pong
    /// `Sm90Cfg128x128pp`: 128, against 64 for `Sm90Cfg128x128`) may spill
    /// registers where the rules avoided it (a wide epilogue), which the
    /// measurement then shows. Portable configurations have none.
    pub fn alternatives(self) -> Vec<TileConfig> {
        if !self.is_sm90() {
            return vec![self];
        }
        let hopper = TileConfig::ALL.into_iter().filter(|c| c.is_sm90() && *c != self);
        std::iter::once(self).chain(hopper).collect()
    }

    /// The ping-pong Hopper mainloop (two tiles in flight).
    pub fn is_ping_pong(self) -> bool {
        self.spec().mainloop == Mainloop::PingPong
    }

    /// Columns the epilogue stages through shared memory at a time, when
    /// fewer than the tile's: then the scratch holds
    /// [`TileConfig::stage_regions`] regions of that many columns
    /// (`coda::sub_put`), and nothing that needs a whole tile (streamed
    /// quads) goes through it.
    pub fn stage_cols(self) -> Option<i64> {
        self.spec().stage_cols
    }

    /// Regions of staged subtiles in the scratch: with one, a subtile holds
    /// one output (a staged operand or a second output would need another;
    /// they are read and written in global memory then).
    pub fn stage_regions(self) -> i64 {
        self.spec().stage_regions
    }

    /// Whether the mainloop takes a fused row prelude: the cooperative ones
    /// do, the ping-pong ones do not.
    pub fn takes_row_prelude(self) -> bool {
        !self.is_ping_pong()
    }

    /// Tiles a CTA works on at once (each with its own epilogue scratch).
    pub fn tiles_in_flight(self) -> i64 {
        if self.is_ping_pong() {
            2
        } else {
            1
        }
    }

    /// `(BM, BN, BK)`.
    pub fn tile(self) -> (i64, i64, i64) {
        self.spec().tile
    }

    /// Columns of the tile that one warp holds (`Frag::CJ * 8`): the whole
    /// tile on the Hopper mainloops, whose warps split rows; a warp tile's
    /// on the portable one (`kWarpsN` of `coda_gemm_sm80.cuh`: 2 or 4).
    pub fn warp_cols(self) -> i64 {
        match self {
            TileConfig::Cfg64x64 | TileConfig::Cfg128x128 => 32,
            TileConfig::Cfg128x128w4 | TileConfig::Cfg128x256 => 64,
            _ => self.tile().1,
        }
    }

    /// Whether every warp holds whole heads of `width` columns, so that an
    /// epilogue reduces a head within one quad of lanes.
    pub fn holds_heads(self, width: i64) -> bool {
        width % 8 == 0 && width > 0 && self.warp_cols() % width == 0
    }

    /// Threads per CTA.
    pub fn threads(self) -> u32 {
        self.spec().threads
    }

    /// Pipeline stages.
    pub fn stages(self) -> i64 {
        self.spec().stages
    }

    /// The kernel's dynamic shared memory (the epilogues codac emits need no
    /// scratch of their own: `kSmemFloats = 0`). Portable:
    /// `stages * (BM + BN) * BK * 2` bytes. Hopper (`gemm_sm90_smem_bytes`):
    /// 1024 bytes of alignment slack, the TMA ring, one epilogue scratch of
    /// `BM * (BN + 8) * 2` bytes (the staged store) rounded to 128, and the
    /// mbarriers. The emitted kernel `static_assert`s that this matches the header's own formula.
    pub fn smem_bytes(self) -> u32 {
        self.smem_bytes_with(0)
    }

    /// [`TileConfig::smem_bytes`] of a Hopper epilogue that stages
    /// `col_vecs` column vectors per tile (`kColVecs`): `BN * 4` bytes more
    /// per vector and tile in flight. The portable mainloop stages none.
    pub fn smem_bytes_with(self, col_vecs: usize) -> u32 {
        let (bm, bn, bk) = self.tile();
        let ring = self.stages() * (bm + bn) * bk * 2;
        // The staged store of the functor's tile, rounded to 128 bytes.
        let staging = match self.stage_cols() {
            Some(cols) => self.stage_regions() * bm * (cols + 8) * 2,
            None => (bm * (bn + 8) * 2 + 127) / 128 * 128,
        };
        let bytes = if self.is_sm90() {
            // One scratch per tile in flight: two for ping-pong.
            let vecs = i64::try_from(col_vecs).unwrap_or(i64::MAX / 4096);
            let scratch = staging + vecs * bn * 4;
            1024 + ring + self.tiles_in_flight() * scratch + 16 * self.stages() + 16
        } else {
            ring
        };
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }
}

/// Whether some configuration holds whole heads of `width` columns in each
/// warp ([`TileConfig::holds_heads`]): a per-head reduction of that width
/// may then live in a GEMM epilogue, and the tile choice keeps to such a
/// configuration (`tiles.rs`).
pub fn whole_heads(width: i64) -> bool {
    TileConfig::ALL.iter().any(|c| c.holds_heads(width))
}

/// `chosen` if it holds whole heads of every width in `widths`, else the
/// first of its mainloop's two full-width configurations (BN 256, then
/// 128) that does; `None` where neither does.
pub fn holding_heads(chosen: TileConfig, widths: &[i64]) -> Option<TileConfig> {
    let holds = |c: &TileConfig| widths.iter().all(|w| c.holds_heads(*w));
    let candidates = match chosen.is_sm90() {
        true => [TileConfig::Sm90Cfg128x256, TileConfig::Sm90Cfg128x128],
        false => [TileConfig::Cfg128x256, TileConfig::Cfg128x128w4],
    };
    std::iter::once(chosen).chain(candidates).find(holds)
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

/// What is known at compile time about where the kernels will run, when the
/// caller knows it (`codac run` and `codac bench` do): the run-time
/// dimensions and the GPU's multiprocessor count. Only the choice of tile
/// configuration uses it ([`for_shape`]); the code stays correct for any
/// shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchHint {
    /// Run-time dimensions by name (`M`).
    pub dims: std::collections::BTreeMap<String, i64>,
    /// Streaming multiprocessors of the GPU (132 on an H100 SXM).
    pub multiprocessors: u32,
}

/// Throughput of `Sm90Cfg128x128` per output element relative to
/// `Sm90Cfg128x256`'s, when both fill the GPU: 0.90–0.94 in interleaved
/// timings of the 8B block's four GEMMs (`docs/benchmarks.md`).
pub const SM90_128X128_EFFICIENCY: f64 = 0.92;

/// The tile-count model: the persistent grid runs `ceil(tiles / SMs)` waves
/// of tiles, each as long as its tile's work over the configuration's
/// efficiency. Whether `Sm90Cfg128x128` tiles are then predicted faster
/// than `Sm90Cfg128x256` ones for an `m × n` product: with few row tiles
/// (a small `m`) the big tiles leave SMs idle (1000 × 768 with 128×256
/// tiles is 24 tiles on 132 SMs).
pub fn smaller_tiles_pay(m: i64, n: i64, multiprocessors: u32) -> bool {
    let sms = i64::from(multiprocessors.max(1));
    let waves = |bm: i64, bn: i64| ((m + bm - 1) / bm * ((n + bn - 1) / bn) + sms - 1) / sms;
    let big = waves(128, 256) as f64 * (128.0 * 256.0);
    let small = waves(128, 128) as f64 * (128.0 * 128.0) / SM90_128X128_EFFICIENCY;
    m > 0 && n > 0 && small < big
}

/// [`for_target`]'s choice at a known shape: `Sm90Cfg128x256` becomes
/// `Sm90Cfg128x128` where [`smaller_tiles_pay`].
pub fn for_shape(chosen: TileConfig, m: Option<i64>, n: Option<i64>, multiprocessors: u32) -> TileConfig {
    match (chosen, m, n) {
        (TileConfig::Sm90Cfg128x256, Some(m), Some(n)) if smaller_tiles_pay(m, n, multiprocessors) => {
            TileConfig::Sm90Cfg128x128
        }
        _ => chosen,
    }
}

/// The staged-subtile configuration a GEMM the rules gave `chosen` runs
/// faster on, if any: a `Sm90Cfg128x256` GEMM whose epilogue needs
/// `regions` regions (one per stored value, no partials, tile operands
/// only as [`tile_operands_hide`] allows: see `tiles`) and whose constant `N` leaves
/// at most 1% of a 192-column tile grid empty; `Sm90Cfg128x192pps` for none or one region,
/// `Sm90Cfg128x192pps2` for two, `Sm90Cfg128x192pps3` for three (the gated
/// backward GEMMs, which store the two gradients of the gated pair and the
/// recomputed product; on the H200 at M = 8192, `codac bench --grad
/// --block`, one call: the Llama-3 1B dSwiGLU 0.564 ms against 0.651 on
/// `Sm90Cfg128x192pps2`, which stores the third value straight to global
/// memory, and 0.880 on `Sm90Cfg128x256`; Gemma-2's dGeGLU 0.736 against
/// 0.809; Qwen3's dSwiGLU 1.426 against 1.517).
/// Measured on the H100
/// (M = 8192): the Llama-3 8B gate/up
/// GEMM with its SwiGLU 2.690 / 2.867 ms against 2.895 / 2.895 with
/// 32-column subtiles and 2.95–3.08 on `Sm90Cfg128x256`; the saving
/// forward's (which also stores the pre-activation) 2.880 / 2.887 against
/// 3.235 / 3.159 on `Sm90Cfg128x192pps2`; the QKV GEMM with RMSNorm and
/// RoPE, its rotated output put back from pair order a subtile at a time,
/// 0.611 / 0.609 against 0.697 / 0.699; the dSwiGLU backward,
/// two concatenation parts and its saved pre-activation read a quad per
/// pair, 1.796 against 1.835; but the 4096-column out-projection's bare
/// GEMM, whose last column tile is a third full, 0.412 against 0.387, and
/// the epilogues that read a residual (the down projection) 1.507 against
/// 1.399. An epilogue that stores no tile and keeps only per-row partials
/// (`regions` 0) stages nothing, but its partials hide behind the other
/// tile's K loop: the Llama-3 LM head's loss (log-sum-exp and target pick,
/// 8192×128256×4096) 12.440 ms on `Sm90Cfg128x192pps` against 13.600 on
/// `Sm90Cfg128x256`, on the H200.
pub fn subtiles_pay(chosen: TileConfig, n: &Dim, regions: Option<i64>) -> Option<TileConfig> {
    let (_, bn, _) = TileConfig::Sm90Cfg128x192pps.tile();
    let little_waste = n.as_const().is_some_and(|n| n >= bn && (bn - n % bn) % bn * 100 <= n);
    if chosen != TileConfig::Sm90Cfg128x256 || !little_waste {
        return None;
    }
    match regions {
        Some(0 | 1) => Some(TileConfig::Sm90Cfg128x192pps),
        Some(2) => Some(TileConfig::Sm90Cfg128x192pps2),
        Some(3) => Some(TileConfig::Sm90Cfg128x192pps3),
        _ => None,
    }
}

/// Whether an epilogue that reads tile operands (other than pair-layout
/// quads) hides behind the ping-pong mainloop of staged subtiles: its
/// traffic, bytes read and stored per output element per 1024 of the
/// GEMM's constant K ([`traffic_per_1024`]), within [`HIDDEN_TRAFFIC`]. A
/// ping-pong tile's epilogue runs on one warpgroup while the other runs
/// its K loop: a light epilogue gains less than the 128×256 cooperative
/// mainloop's few percent, a heavy one outlasts that K loop and, on half
/// the threads, takes longer than on the cooperative tile. Measured on the
/// H100 at M = 8192, 128×192 staged subtiles against 128×256 (`codac
/// bench`, one run each way):
///
/// | GEMM | bytes per 1024 of K | staged | 128×256 |
/// |---|---|---|---|
/// | Gemma MLP down projection with its residual, K = 24576 | 0.25 | 1.799 ms | 1.747 |
/// | Qwen3 up-projection with SwiGLU, K = 4096 | 1.00 | 1.396 | 1.460 |
/// | Mistral saving up-projection (SwiGLU, stores the product and the up half), K = 4096 | 1.50 | 1.498 | 1.815 |
/// | Qwen3 saving up-projection, K = 4096 | 1.50 | 1.330 | 1.567 |
/// | Gemma-2 up-projection with GeGLU, K = 2304 | 1.78 | 0.646 | 0.677 |
/// | OLMo-2 up-projection with SwiGLU, K = 2048 (timed after the window was set) | 2.00 | 0.446 | 0.539 |
/// | Qwen3 dSwiGLU, K = 4096 | 2.50 | 1.829 | 1.982 |
/// | Mistral dSwiGLU (reads gate and up, three stores), K = 4096 | 2.50 | 2.046 | 2.225 |
/// | Gemma-2 saving up-projection, K = 2304 | 2.67 | 1.089 | 0.718 |
/// | Gemma-2 dGeGLU, K = 2304 | 4.44 | 1.557 | 0.990 |
pub fn tile_operands_hide(per_1024: f64) -> bool {
    HIDDEN_TRAFFIC.0 <= per_1024 && per_1024 <= HIDDEN_TRAFFIC.1
}

/// `bytes` per output element per 1024 of a constant K (`None` for a
/// run-time K).
pub fn traffic_per_1024(bytes: usize, k: &Dim) -> Option<f64> {
    let k = k.as_const().filter(|&k| k > 0)?;
    Some(bytes as f64 * 1024.0 / k as f64)
}

/// The window of [`tile_operands_hide`], bytes per output element per
/// 1024 of K.
pub const HIDDEN_TRAFFIC: (f64, f64) = (0.5, 2.5);

/// The rows of one TMA box of the pair-order view of a B operand read in
/// pair order `p` (`coda::Sm90PairRows::kBoxRows`): 64 where its groups are
/// multiples of 64, 32 where they are multiples of 32 (Phi-3's 96-wide
/// heads), so that no box straddles a group; `None` where the Hopper
/// mainloop cannot read `p` (a group of neither, or a permuted range that
/// a 64-row chunk of B would straddle).
pub fn pair_box_rows(p: coda_ir::PairPerm) -> Option<i64> {
    if p.start % 64 != 0 || p.end % 64 != 0 {
        return None;
    }
    [64, 32].into_iter().find(|rows| p.group % rows == 0)
}

/// Whether a store put back from pair order (groups of `group` columns
/// from `start`) can go through the staged subtiles of every configuration
/// [`subtiles_pay`] picks: each group holds whole subtiles of the widest
/// kind ([`groups_hold_subtiles`]).
pub fn subtiles_unpermute(start: i64, group: i64) -> bool {
    let widest = [TileConfig::Sm90Cfg128x192pps, TileConfig::Sm90Cfg128x192pps2, TileConfig::Sm90Cfg128x192pps3]
        .into_iter()
        .filter_map(TileConfig::stage_cols)
        .max()
        .unwrap_or(1);
    group > 0 && start % group == 0 && groups_hold_subtiles(group, widest)
}

/// Whether rotary groups of `group` columns hold whole subtiles of
/// `stage_cols` columns: `coda::SubRuns` writes such a subtile as two runs,
/// one per half of its group.
pub fn groups_hold_subtiles(group: i64, stage_cols: i64) -> bool {
    group % stage_cols == 0
}

/// Columns of a 16-byte chunk of 16-bit elements: a concatenation part
/// shifted by a multiple of them keeps every chunk of a staged or packed
/// store aligned.
pub const CHUNK_COLS: i64 = 8;

/// The configuration of a GEMM on `target` (see the module docs):
/// `portable` is [`choose`]'s answer, `wide` whether the epilogue reads
/// per-column vectors beside per-row values (`wide_epilogue`), `b_pairs` the B operand's pair order if
/// any, `b_k_contiguous` whether B is `B_NxK`.
pub fn for_target(
    target: Target,
    portable: TileConfig,
    n: &Dim,
    wide: bool,
    b_pairs: Option<coda_ir::PairPerm>,
    b_k_contiguous: bool,
) -> TileConfig {
    if target != Target::Sm90a || portable == TileConfig::Cfg64x64 {
        return portable;
    }
    let tma_pairs = |p: coda_ir::PairPerm| b_k_contiguous && pair_box_rows(p).is_some();
    if b_pairs.is_some_and(|p| !tma_pairs(p)) {
        return portable;
    }
    let narrow = n.as_const().is_some_and(|v| v < 256);
    if wide || narrow {
        TileConfig::Sm90Cfg128x128
    } else {
        TileConfig::Sm90Cfg128x256
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
        assert_eq!(TileConfig::Sm90Cfg128x256.smem_bytes(), 216_128);
        // Staged column vectors: BN * 4 bytes each on Hopper, none on the
        // portable mainloop (its epilogue reads them from global memory).
        assert_eq!(TileConfig::Sm90Cfg128x256.smem_bytes_with(1), 216_128 + 1024);
        assert_eq!(TileConfig::Sm90Cfg128x128.smem_bytes_with(4), TileConfig::Sm90Cfg128x128.smem_bytes() + 2048);
        assert_eq!(TileConfig::Cfg128x256.smem_bytes_with(3), 147_456);
        // Four vectors (the emitter's limit) still fit the 227 KiB of a CTA.
        assert!(TileConfig::Sm90Cfg128x256.smem_bytes_with(4) <= 232_448);
    }

    #[test]
    fn the_table_has_one_row_per_configuration_in_enum_order() {
        for (i, spec) in TileConfig::SPECS.iter().enumerate() {
            assert_eq!(spec.config as usize, i, "{} is row {i}", spec.name);
            assert_eq!(format!("{:?}", spec.config), spec.name);
        }
    }

    #[test]
    fn names_and_alternatives() {
        for c in TileConfig::ALL {
            assert_eq!(TileConfig::from_name(c.name()), Some(c));
            let alternatives = c.alternatives();
            assert_eq!(alternatives[0], c, "a configuration is its own first alternative");
            assert!(alternatives.iter().all(|a| a.is_sm90() == c.is_sm90()), "{c:?}: the mainloop family is kept");
        }
        assert_eq!(TileConfig::from_name("Sm90Cfg64x64"), None);
        assert_eq!(TileConfig::Sm90Cfg128x256.alternatives().len(), 6);
        assert!(TileConfig::Sm90Cfg128x256.takes_row_prelude() && !TileConfig::Sm90Cfg128x128pp.takes_row_prelude());
        assert_eq!(TileConfig::Sm90Cfg128x128.alternatives()[1], TileConfig::Sm90Cfg128x256);
        assert_eq!(TileConfig::Cfg128x256.alternatives(), vec![TileConfig::Cfg128x256]);
        assert_eq!(TileConfig::Sm90Cfg128x128pp.tiles_in_flight(), 2);
        // Two scratches of 128 x 136 bf16, a 4-stage ring: the header's formula.
        assert_eq!(TileConfig::Sm90Cfg128x128pp.smem_bytes(), 1024 + 4 * 256 * 64 * 2 + 2 * 34_816 + 16 * 4 + 16);
        // Staged subtiles: one region of 128 x (64 + 8) bf16 per tile in
        // flight beside a 4-stage ring, with room for four staged column
        // vectors (the emitter's limit).
        let pps = TileConfig::Sm90Cfg128x192pps;
        assert_eq!((pps.stages(), pps.stage_cols(), pps.tiles_in_flight()), (4, Some(64), 2));
        assert_eq!(pps.smem_bytes(), 1024 + 4 * 320 * 64 * 2 + 2 * (128 * 72 * 2) + 16 * 4 + 16);
        assert!(pps.smem_bytes_with(4) <= SM90_MAX_SMEM);
        assert_eq!(TileConfig::Sm90Cfg128x256.stage_cols(), None);
    }

    #[test]
    fn the_tile_count_model_prefers_small_tiles_only_when_big_ones_idle_sms() {
        // Measured winners on an H100 (132 SMs).
        assert!(smaller_tiles_pay(1000, 768, 132)); // a gpt2 GEMM of 768 columns: 0.026 against 0.055 ms
        assert!(smaller_tiles_pay(1000, 6144, 132)); // llama3 QKV at M = 1000: 0.084 against 0.101 ms
        assert!(!smaller_tiles_pay(1000, 4096, 132)); // llama3 out-proj at M = 1000: 0.060 against 0.057 ms
        assert!(!smaller_tiles_pay(1000, 28672, 132)); // llama3 gate/up at M = 1000: 0.359 against 0.344 ms
        for n in [4096, 6144, 14336, 28672] {
            assert!(!smaller_tiles_pay(8192, n, 132), "N = {n}: the 8B shapes keep 128x256");
        }
        assert!(!smaller_tiles_pay(0, 4096, 132));
        let t = TileConfig::Sm90Cfg128x256;
        assert_eq!(for_shape(t, Some(1000), Some(768), 132), TileConfig::Sm90Cfg128x128);
        assert_eq!(for_shape(t, None, Some(768), 132), t);
        assert_eq!(for_shape(TileConfig::Cfg128x256, Some(1000), Some(768), 132), TileConfig::Cfg128x256);
    }

    #[test]
    fn subtiles_where_the_192_column_grid_is_nearly_full() {
        let t = TileConfig::Sm90Cfg128x256;
        let pps = Some(TileConfig::Sm90Cfg128x192pps);
        assert_eq!(subtiles_pay(t, &Dim::constant(28672), Some(1)), pps); // 149.3 tiles: 0.4% empty
        assert_eq!(subtiles_pay(t, &Dim::constant(28672), Some(2)), Some(TileConfig::Sm90Cfg128x192pps2));
        assert_eq!(subtiles_pay(t, &Dim::constant(14336), Some(1)), pps);
        assert_eq!(subtiles_pay(t, &Dim::constant(6144), Some(1)), pps); // 32 whole tiles
        assert_eq!(subtiles_pay(t, &Dim::constant(4096), Some(1)), None); // 21.3 tiles: 4.9% empty
        assert_eq!(subtiles_pay(t, &Dim::constant(28672), None), None);
        assert_eq!(subtiles_pay(t, &Dim::constant(28672), Some(3)), Some(TileConfig::Sm90Cfg128x192pps3));
        assert_eq!(subtiles_pay(t, &Dim::constant(28672), Some(4)), None);
        assert_eq!(subtiles_pay(t, &Dim::constant(128256), Some(0)), pps); // a loss: 668 whole tiles
        assert_eq!(subtiles_pay(t, &Dim::constant(1000), Some(0)), None); // 5.2 tiles: 15% empty
        assert_eq!(subtiles_pay(t, &Dim::symbol("N"), Some(1)), None);
        assert_eq!(subtiles_pay(TileConfig::Sm90Cfg128x128, &Dim::constant(28672), Some(1)), None);
        let pps2 = TileConfig::Sm90Cfg128x192pps2;
        assert_eq!((pps2.stages(), pps2.stage_cols(), pps2.stage_regions()), (4, Some(32), 2));
        assert_eq!(pps2.smem_bytes(), 1024 + 4 * 320 * 64 * 2 + 2 * (2 * 128 * 40 * 2) + 16 * 4 + 16);
        let pps3 = TileConfig::Sm90Cfg128x192pps3;
        assert_eq!((pps3.stages(), pps3.stage_cols(), pps3.stage_regions()), (4, Some(32), 3));
        assert_eq!(pps3.smem_bytes(), 1024 + 4 * 320 * 64 * 2 + 2 * (3 * 128 * 40 * 2) + 16 * 4 + 16);
        assert!(pps3.smem_bytes() <= SM90_MAX_SMEM);
    }

    #[test]
    fn hopper_choice() {
        let n = Dim::constant(4096);
        let sm90 = |portable, cols, pairs| for_target(Target::Sm90a, portable, &n, cols, pairs, true);
        assert_eq!(sm90(TileConfig::Cfg128x256, false, None), TileConfig::Sm90Cfg128x256);
        assert_eq!(sm90(TileConfig::Cfg128x128w4, true, None), TileConfig::Sm90Cfg128x128);
        assert_eq!(sm90(TileConfig::Cfg64x64, false, None), TileConfig::Cfg64x64);
        let rope = coda_ir::PairPerm { start: 0, end: 5120, group: 128 };
        assert_eq!(sm90(TileConfig::Cfg128x256, false, Some(rope)), TileConfig::Sm90Cfg128x256);
        // Phi-3's 96-wide heads: boxes of 32 pair-order rows.
        let heads96 = coda_ir::PairPerm { start: 0, end: 6144, group: 96 };
        assert_eq!(sm90(TileConfig::Cfg128x256, false, Some(heads96)), TileConfig::Sm90Cfg128x256);
        let odd = coda_ir::PairPerm { start: 0, end: 96, group: 32 };
        assert_eq!(sm90(TileConfig::Cfg128x256, false, Some(odd)), TileConfig::Cfg128x256);
        let heads48 = coda_ir::PairPerm { start: 0, end: 3072, group: 48 };
        assert_eq!(sm90(TileConfig::Cfg128x256, false, Some(heads48)), TileConfig::Cfg128x256);
        let portable = for_target(Target::Portable, TileConfig::Cfg128x256, &n, false, None, true);
        assert_eq!(portable, TileConfig::Cfg128x256);
        assert_eq!(Target::from_arch("sm_90a"), Target::Sm90a);
        assert_eq!(Target::from_arch("sm_100a"), Target::Portable);
    }

    #[test]
    fn tile_operands_hide_where_they_were_measured_to() {
        let k = |k: i64| Dim::constant(k);
        let tile_operands_hide = |bytes: usize, k: &Dim| traffic_per_1024(bytes, k).is_some_and(tile_operands_hide);
        // Gemma MLP's residual at K = 24576, Gemma-2's saving up-projection
        // and dGeGLU at K = 2304: faster on the cooperative tiles.
        assert!(!tile_operands_hide(6, &k(24576)));
        assert!(!tile_operands_hide(6, &k(2304)));
        assert!(!tile_operands_hide(10, &k(2304)));
        // Gemma-2's up-projection; Qwen3's up-projection, saving
        // up-projection and dSwiGLU: faster on staged subtiles.
        assert!(tile_operands_hide(4, &k(2304)));
        assert!(tile_operands_hide(4, &k(4096)));
        assert!(tile_operands_hide(6, &k(4096)));
        assert!(tile_operands_hide(10, &k(4096)));
        // A run-time K says nothing.
        assert!(!tile_operands_hide(4, &Dim::symbol("K")));
    }
}
