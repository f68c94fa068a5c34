//! The results of `codac bench`: what is measured and derived for each
//! kernel and block, the JSON document (`--json`, schema in
//! `docs/benchmarks.md`) and the text table. Nothing here touches a GPU.

use coda_runtime::BenchStats;
use serde::Serialize;
use std::collections::BTreeMap;

/// The JSON schema version.
pub const SCHEMA: u32 = 2;

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema: u32,
    pub tool: &'static str,
    pub codac_version: &'static str,
    /// The `.coda` file as given.
    pub file: String,
    pub device: DeviceReport,
    /// Untimed runs before each timing loop.
    pub warmup: usize,
    /// Timed runs of each kernel and block.
    pub iters: usize,
    /// The vendor reference the bare GEMMs were timed against
    /// (`cuBLAS 13.1.0 (…)`), or why they were not (`not measured: …`).
    pub vendor: String,
    pub blocks: Vec<BlockReport>,
    /// With `--grad`: each training step (saving forward plus backward).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepReport>,
    /// With `--autotune`: what was timed for each GEMM kernel and kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub autotune: Vec<TuneReport>,
    /// With `--autotune`: each block whose kernels had winners, timed
    /// with all of them against the rules' configurations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub autotune_blocks: Vec<TuneBlockCheck>,
}

/// The autotuner's measurements for one GEMM kernel (`--autotune`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneReport {
    pub block: String,
    pub kernel: String,
    /// The configuration the rules gave it.
    pub rules: String,
    /// Each alternative, timed interleaved with the rules' configuration.
    pub trials: Vec<TuneTrial>,
    /// Alternatives not timed because they change the block's kernel list.
    pub skipped: Vec<String>,
    /// The block with this GEMM unfused against the block as the rules
    /// build it, when its epilogue is not bare.
    pub unfused: Option<UnfusedTrial>,
    /// What won alone (by `tune::MARGIN`): the fastest configuration of
    /// the kernel timed alone, or `unfused` where the block ran faster
    /// with the GEMM unfused and that saved more time.
    pub alone: String,
    /// What was filed for it: `alone`, unless the block ran no faster with
    /// the winners ([`TuneBlockCheck`]).
    pub chosen: String,
}

/// A GEMM's site unfused (its bare GEMM, and its epilogue's work in the
/// kernels after it) against fused: the block's medians both ways (ms),
/// two rounds of each, alternating, as the block check times them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnfusedTrial {
    pub median_ms: f32,
    pub fused_median_ms: f32,
}

/// A block timed with every kernel's winner against the rules'
/// configurations (`--autotune`): the winners are filed only if the block
/// runs at least 2% faster with them (`tune::MARGIN`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneBlockCheck {
    pub block: String,
    /// `kernel config` of each winner.
    pub winners: Vec<String>,
    /// Medians of the block with the winners and with the rules' configurations (ms).
    pub median_ms: f32,
    pub rules_median_ms: f32,
    /// Whether the winners were filed.
    pub kept: bool,
}

impl TuneBlockCheck {
    /// The progress line printed on standard error.
    pub fn line(&self) -> String {
        let verb = if self.kept { "keeps them" } else { "drops them (the rules' configurations stay)" };
        format!(
            "autotune {}: the block with {} {:.3} ms against {:.3} ms with the rules' configurations: {verb}",
            self.block,
            self.winners.join(", "),
            self.median_ms,
            self.rules_median_ms
        )
    }
}

/// One alternative against the rules' configuration: both medians (ms).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneTrial {
    pub config: String,
    pub median_ms: f32,
    pub rules_median_ms: f32,
}

impl TuneReport {
    /// The progress line printed on standard error.
    pub fn line(&self) -> String {
        let mut line = format!("autotune {} {} ({})", self.block, self.kernel, self.rules);
        for t in &self.trials {
            line += &format!(", {:.3} ms against {} {:.3} ms", t.rules_median_ms, t.config, t.median_ms);
        }
        for s in &self.skipped {
            line += &format!(", {s} skipped (it changes the kernel list)");
        }
        if let Some(u) = &self.unfused {
            line += &format!(", the block {:.3} ms against {:.3} ms with it unfused", u.fused_median_ms, u.median_ms);
        }
        if self.chosen == self.rules && self.alone != self.rules {
            return line + &format!(": {} wins alone, not in the block: keeps {}", self.alone, self.chosen);
        }
        let verb = if self.chosen == self.rules { "keeps" } else { "takes" };
        line + &format!(": {verb} {}", self.chosen)
    }
}

/// A training step: the saving forward block then the backward block, as
/// two back-to-back block timings added up, against their bare GEMMs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    pub forward: String,
    pub backward: String,
    /// Sum of the two blocks' medians.
    pub time_ms: f64,
    /// Sum of the bare GEMMs of both blocks.
    pub bare_gemms_ms: f64,
    /// `time_ms / bare_gemms_ms`.
    pub ratio: f64,
    /// Sum of cuBLAS's GEMMs of both blocks, when every one was timed.
    pub cublas_gemms_ms: Option<f64>,
    /// Sum of codac's bare GEMMs of both blocks as timed alternating with
    /// cuBLAS's (the sum to compare `cublas_gemms_ms` with).
    pub vendor_bare_ms: Option<f64>,
}

impl StepReport {
    /// The step of `forward` and `backward`, if both were benchmarked.
    pub fn of(blocks: &[BlockReport], forward: &str, backward: &str) -> Option<StepReport> {
        let f = blocks.iter().find(|b| b.block == forward)?;
        let b = blocks.iter().find(|b| b.block == backward)?;
        let time_ms = f.time.median_ms + b.time.median_ms;
        let bare_gemms_ms = f.sum_bare_gemms_ms + b.sum_bare_gemms_ms;
        let ratio = if bare_gemms_ms > 0.0 { time_ms / bare_gemms_ms } else { 0.0 };
        let cublas_gemms_ms = f.sum_cublas_gemms_ms.zip(b.sum_cublas_gemms_ms).map(|(x, y)| x + y);
        let vendor_bare_ms = f.sum_vendor_bare_ms.zip(b.sum_vendor_bare_ms).map(|(x, y)| x + y);
        Some(StepReport {
            forward: forward.into(),
            backward: backward.into(),
            time_ms,
            bare_gemms_ms,
            ratio,
            cublas_gemms_ms,
            vendor_bare_ms,
        })
    }
}

/// The GPU.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    pub name: String,
    pub arch: String,
    pub multiprocessors: u32,
    pub memory_bytes: u64,
    pub driver_version: i32,
    /// `major.minor` of the NVRTC that compiled the kernels.
    pub nvrtc: String,
}

/// Statistics of one timing loop, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
    pub mean_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
    pub samples: usize,
}

impl Timing {
    pub fn of(stats: &BenchStats) -> Timing {
        Timing {
            median_ms: f64::from(stats.median_ms),
            min_ms: f64::from(stats.min_ms),
            mean_ms: f64::from(stats.mean_ms),
            p10_ms: f64::from(stats.quantile(0.1)),
            p90_ms: f64::from(stats.quantile(0.9)),
            samples: stats.samples_ms.len(),
        }
    }
}

/// How long one kernel took to compile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CompileReport {
    /// NVRTC with the cache bypassed.
    pub cold_ms: f64,
    /// Served by the kernel cache.
    pub hit_ms: f64,
    /// Whether the hit read the cache's disk entry (else its memory).
    pub hit_from_disk: bool,
    /// Whether NVRTC's own cache was bypassed for `cold_ms` (`--no-cache`).
    pub nvrtc_cache_bypassed: bool,
    /// Registers per thread.
    pub registers: usize,
}

/// The GEMM of a kernel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmReport {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    /// `MxK` or `KxM`.
    pub a_layout: &'static str,
    /// `NxK` (an `nn.Linear` weight) or `KxN`.
    pub b_layout: &'static str,
    pub dtype: String,
    /// The weight is read in pair order.
    pub pair_rows: bool,
    pub flops: f64,
}

/// The same GEMM with an empty epilogue, timed in the same run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BareReport {
    /// Whether its runs alternated with the fused kernel's (so both ran at
    /// the same clocks); `codac bench` always does this since schema 2.
    pub interleaved: bool,
    pub config: Option<String>,
    pub time: Timing,
    pub tflops: f64,
    pub copies: usize,
    pub compile: CompileReport,
}

/// A GEMM's shape and layouts as reported.
pub fn gemm_report(g: &coda::GemmProfile) -> GemmReport {
    GemmReport {
        m: g.m.value,
        n: g.n.value,
        k: g.k.value,
        a_layout: if g.a_row_major { "MxK" } else { "KxM" },
        b_layout: if g.b_n_by_k { "NxK" } else { "KxN" },
        dtype: g.dtype.to_string(),
        pair_rows: g.pair_rows,
        flops: g.flops(),
    }
}

/// A bare GEMM timed against cuBLAS's GEMM of the same shape, layouts and
/// dtype, alternating launches on the same copies of the data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VendorReport {
    pub gemm: GemmReport,
    /// The bare GEMM's tile configuration.
    pub config: Option<String>,
    pub bare: Timing,
    pub cublas: Timing,
    pub bare_tflops: f64,
    pub cublas_tflops: f64,
    /// cuBLAS's median over the bare GEMM's: codac's GEMM's speed as a
    /// multiple of cuBLAS's (above 1: faster).
    pub speed: f64,
    /// The largest difference between the two products of the same data,
    /// relative to the largest value (checked before timing).
    pub difference: f64,
}

impl VendorReport {
    /// Whether this measures the GEMM of kernel `k`.
    fn measures(&self, k: &KernelReport) -> bool {
        k.gemm.as_ref().is_some_and(|g| {
            let v = &self.gemm;
            (g.m, g.n, g.k, g.a_layout, g.b_layout, &g.dtype) == (v.m, v.n, v.k, v.a_layout, v.b_layout, &v.dtype)
        })
    }
}

/// One launched kernel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelReport {
    pub name: String,
    /// `gemm`, `row` or `colreduce`.
    pub kind: String,
    pub summary: String,
    pub config: Option<String>,
    pub gemm: Option<GemmReport>,
    pub time: Timing,
    /// GEMM kernels: `2 m n k` over the median time.
    pub tflops: Option<f64>,
    /// Every buffer the kernel touches, each counted once.
    pub bytes_moved: u64,
    /// `bytes_moved` less the GEMM operands.
    pub epilogue_bytes: u64,
    /// `epilogue_bytes` over the median time.
    pub epilogue_gbps: f64,
    pub bare_gemm: Option<BareReport>,
    /// Median time over the bare GEMM's median time.
    pub epilogue_cost: Option<f64>,
    pub compile: CompileReport,
    /// The kernel inside back-to-back runs of the whole block (events
    /// recorded between the launches), beside `time`, which is the kernel
    /// alone.
    pub in_block: Option<Timing>,
}

/// One block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockReport {
    pub block: String,
    pub dims: BTreeMap<String, i64>,
    /// Copies of every buffer cycled through by the timing loops.
    pub copies: usize,
    pub bytes_per_copy: u64,
    pub kernels: Vec<KernelReport>,
    /// Every kernel back to back, as `codac run` launches them.
    pub time: Timing,
    pub flops: f64,
    pub tflops: f64,
    /// Sum of the kernels' medians.
    pub sum_kernels_ms: f64,
    /// Sum of the bare GEMMs' medians.
    pub sum_bare_gemms_ms: f64,
    /// Each distinct bare GEMM against cuBLAS (empty when cuBLAS was not
    /// measured).
    pub vendor: Vec<VendorReport>,
    /// Sum over the GEMM kernels of cuBLAS's time for their GEMM, when
    /// every one was measured.
    pub sum_cublas_gemms_ms: Option<f64>,
    /// The same sum of codac's bare GEMMs as timed alternating with cuBLAS
    /// (at other clocks than `sum_bare_gemms_ms`, timed alternating with
    /// the fused kernels; only this one compares with cuBLAS's sum).
    pub sum_vendor_bare_ms: Option<f64>,
}

/// `flops` over `ms`, in TFLOP/s.
pub fn tflops(flops: f64, ms: f64) -> f64 {
    if ms > 0.0 {
        flops / ms / 1e9
    } else {
        0.0
    }
}

/// `bytes` over `ms`, in GB/s.
pub fn gbps(bytes: u64, ms: f64) -> f64 {
    if ms > 0.0 {
        bytes as f64 / ms / 1e6
    } else {
        0.0
    }
}

impl BlockReport {
    /// Fills the block totals from its kernels.
    pub fn totals(
        block: String,
        dims: BTreeMap<String, i64>,
        copies: usize,
        bytes_per_copy: u64,
        kernels: Vec<KernelReport>,
        (time, vendor): (Timing, Vec<VendorReport>),
    ) -> BlockReport {
        let sum_of = |time: fn(&VendorReport) -> f64| {
            let gemms = kernels.iter().filter(|k| k.gemm.is_some());
            let each = gemms.map(|k| vendor.iter().find(|v| v.measures(k)).map(time));
            each.sum::<Option<f64>>().filter(|_| !vendor.is_empty())
        };
        let sum_cublas_gemms_ms = sum_of(|v| v.cublas.median_ms);
        let sum_vendor_bare_ms = sum_of(|v| v.bare.median_ms);
        let flops = kernels.iter().filter_map(|k| k.gemm.as_ref()).map(|g| g.flops).sum();
        let sum_kernels_ms = kernels.iter().map(|k| k.time.median_ms).sum();
        let sum_bare_gemms_ms = kernels.iter().filter_map(|k| k.bare_gemm.as_ref()).map(|b| b.time.median_ms).sum();
        let tflops = tflops(flops, time.median_ms);
        BlockReport {
            block,
            dims,
            copies,
            bytes_per_copy,
            kernels,
            time,
            flops,
            tflops,
            sum_kernels_ms,
            sum_bare_gemms_ms,
            vendor,
            sum_cublas_gemms_ms,
            sum_vendor_bare_ms,
        }
    }
}

/// Left-aligned columns separated by two spaces.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().enumerate().map(|(c, s)| format!("{s:<w$}", w = width[c])).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn ms(v: f64) -> String {
    format!("{v:.3}")
}

fn compile_time(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{ms:.1} ms")
    }
}

fn kernel_row(k: &KernelReport) -> Vec<String> {
    let dash = || "-".to_string();
    let bare = k.bare_gemm.as_ref();
    vec![
        k.name.clone(),
        k.kind.clone(),
        k.config.clone().unwrap_or_else(dash),
        k.gemm.as_ref().map_or_else(dash, |g| format!("{}×{}×{}", g.m, g.n, g.k)),
        ms(k.time.median_ms),
        k.tflops.map_or_else(dash, |t| format!("{t:.0}")),
        format!("{:.0}", k.epilogue_gbps),
        bare.map_or_else(dash, |b| ms(b.time.median_ms)),
        bare.and_then(|b| b.config.clone()).unwrap_or_else(dash),
        k.epilogue_cost.map_or_else(dash, |c| format!("{c:.2}×")),
        compile_time(k.compile.cold_ms),
        compile_time(k.compile.hit_ms),
        k.compile.registers.to_string(),
    ]
}

/// The text form: one table per block, then the block totals.
pub fn render_text(r: &Report) -> String {
    let d = &r.device;
    let mut out = format!(
        "device: {} ({}, {} SMs, driver {}, NVRTC {})\n",
        d.name, d.arch, d.multiprocessors, d.driver_version, d.nvrtc
    );
    for b in &r.blocks {
        let dims: Vec<String> = b.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!(
            "\nblock {} at {}: {} kernel(s); times in ms, median of {} runs after {} warm-up, cycling through {} copies of {:.1} MB\n",
            b.block,
            if dims.is_empty() { "its constant dims".to_string() } else { dims.join(", ") },
            b.kernels.len(),
            r.iters,
            r.warmup,
            b.copies,
            b.bytes_per_copy as f64 / 1e6,
        ));
        let header = [
            "kernel",
            "kind",
            "config",
            "M×N×K",
            "time",
            "TFLOP/s",
            "epi GB/s",
            "bare",
            "bare config",
            "epi cost",
            "cold compile",
            "cache hit",
            "regs",
        ];
        let mut rows = vec![header.iter().map(ToString::to_string).collect::<Vec<_>>()];
        rows.extend(b.kernels.iter().map(kernel_row));
        out.push_str(&table(&rows));
        out.push_str(&format!(
            "block: {} ms, {:.0} TFLOP/s ({} launches back to back; kernels alone sum to {} ms)\n",
            ms(b.time.median_ms),
            b.tflops,
            b.kernels.len(),
            ms(b.sum_kernels_ms)
        ));
        let inside: Vec<String> = b
            .kernels
            .iter()
            .filter_map(|k| k.in_block.as_ref().map(|t| format!("{} {}", k.name, ms(t.median_ms))))
            .collect();
        if !inside.is_empty() {
            let sum: f64 = b.kernels.iter().filter_map(|k| k.in_block.as_ref()).map(|t| t.median_ms).sum();
            out.push_str(&format!(
                "inside the block (events between its launches): {} ms; sum {} ms\n",
                inside.join(", "),
                ms(sum)
            ));
        }
        if b.sum_bare_gemms_ms > 0.0 {
            out.push_str(&format!(
                "bare GEMMs: {} ms; the block takes {:.2}× that\n",
                ms(b.sum_bare_gemms_ms),
                b.time.median_ms / b.sum_bare_gemms_ms
            ));
        }
        if b.kernels.iter().any(|k| k.bare_gemm.as_ref().is_some_and(|g| g.interleaved)) {
            out.push_str("(each bare GEMM timed alternating with its kernel, at the same clocks)\n");
        }
        out.push_str(&vendor_text(&r.vendor, b));
    }
    for step in &r.steps {
        out.push_str(&format!(
            "\ntraining step {} + {}: {} ms; bare GEMMs {} ms; the step takes {:.2}× that",
            step.forward,
            step.backward,
            ms(step.time_ms),
            ms(step.bare_gemms_ms),
            step.ratio
        ));
        out.push('\n');
        if let Some((c, ours)) = step.cublas_gemms_ms.zip(step.vendor_bare_ms) {
            out.push_str(&format!("the step's GEMMs: {}\n", against_cublas(c, ours)));
        }
    }
    out
}

/// The bare GEMMs of block `b` against cuBLAS (`vendor` says which), with
/// the sum of cuBLAS's GEMMs for the block's kernels.
fn vendor_text(vendor: &str, b: &BlockReport) -> String {
    if b.vendor.is_empty() {
        return if b.sum_bare_gemms_ms > 0.0 {
            format!("bare GEMMs against cuBLAS: {vendor}\n")
        } else {
            String::new()
        };
    }
    let mut out = format!("bare GEMMs against {vendor}, alternating launches on the same data:\n");
    let header = ["GEMM", "layouts", "config", "codac", "TFLOP/s", "cuBLAS", "TFLOP/s", "codac's speed"];
    let mut rows = vec![header.iter().map(ToString::to_string).collect::<Vec<_>>()];
    rows.extend(b.vendor.iter().map(|v| {
        let g = &v.gemm;
        vec![
            format!("{}×{}×{}", g.m, g.n, g.k),
            format!("{} {} {}", g.a_layout, g.b_layout, g.dtype),
            v.config.clone().unwrap_or_else(|| "-".into()),
            ms(v.bare.median_ms),
            format!("{:.0}", v.bare_tflops),
            ms(v.cublas.median_ms),
            format!("{:.0}", v.cublas_tflops),
            format!("{:.2}× cuBLAS", v.speed),
        ]
    }));
    out.push_str(&table(&rows));
    if let Some((c, ours)) = b.sum_cublas_gemms_ms.zip(b.sum_vendor_bare_ms) {
        out.push_str(&format!("the block's GEMMs: {}\n", against_cublas(c, ours)));
    }
    out
}

/// "cuBLAS 4.985 ms, codac's bare GEMMs alternating with them 4.860 ms
/// (1.03× cuBLAS's speed)".
fn against_cublas(cublas_ms: f64, ours_ms: f64) -> String {
    let speed = if ours_ms > 0.0 { cublas_ms / ours_ms } else { 0.0 };
    format!(
        "cuBLAS {} ms, codac's bare GEMMs alternating with them {} ms ({speed:.2}× cuBLAS's speed)",
        ms(cublas_ms),
        ms(ours_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(median_ms: f64) -> Timing {
        Timing {
            median_ms,
            min_ms: median_ms * 0.9,
            mean_ms: median_ms,
            p10_ms: median_ms,
            p90_ms: median_ms,
            samples: 100,
        }
    }

    fn compile() -> CompileReport {
        CompileReport { cold_ms: 2500.0, hit_ms: 1.25, hit_from_disk: true, nvrtc_cache_bypassed: true, registers: 168 }
    }

    fn gemm_kernel(median_ms: f64, bare_ms: f64) -> KernelReport {
        let flops = 2.0 * 8192.0 * 4096.0 * 4096.0;
        KernelReport {
            name: "gemm_x1".into(),
            kind: "gemm".into(),
            summary: "acc = attn @ w_o.T".into(),
            config: Some("Cfg128x128w4".into()),
            gemm: Some(GemmReport {
                m: 8192,
                n: 4096,
                k: 4096,
                a_layout: "MxK",
                b_layout: "NxK",
                dtype: "bf16".into(),
                pair_rows: false,
                flops,
            }),
            time: timing(median_ms),
            tflops: Some(tflops(flops, median_ms)),
            bytes_moved: 3 << 26,
            epilogue_bytes: 1 << 27,
            epilogue_gbps: gbps(1 << 27, median_ms),
            bare_gemm: Some(BareReport {
                interleaved: true,
                config: Some("Cfg128x256".into()),
                time: timing(bare_ms),
                tflops: tflops(flops, bare_ms),
                copies: 6,
                compile: compile(),
            }),
            epilogue_cost: Some(median_ms / bare_ms),
            compile: compile(),
            in_block: Some(timing(median_ms + 0.01)),
        }
    }

    fn report() -> Report {
        let kernels = vec![gemm_kernel(0.5, 0.4)];
        let block = BlockReport::totals(
            "llama3_layer".into(),
            [("M".to_string(), 8192)].into(),
            3,
            1 << 30,
            kernels,
            (timing(0.52), Vec::new()),
        );
        Report {
            schema: SCHEMA,
            tool: "codac bench",
            codac_version: "0.1.0",
            file: "examples/llama3_block.coda".into(),
            device: DeviceReport {
                name: "NVIDIA H100 80GB HBM3".into(),
                arch: "sm_90a".into(),
                multiprocessors: 132,
                memory_bytes: 80 << 30,
                driver_version: 13000,
                nvrtc: "13.0".into(),
            },
            warmup: 10,
            iters: 200,
            vendor: "not measured: no cuBLAS library found".into(),
            blocks: vec![block],
            steps: Vec::new(),
            autotune: Vec::new(),
            autotune_blocks: Vec::new(),
        }
    }

    #[test]
    fn autotune_reports_read_as_their_progress_lines_and_json() {
        let trial = |config: &str, ms: f32| TuneTrial { config: config.into(), median_ms: ms, rules_median_ms: 0.101 };
        let tuned = TuneReport {
            block: "llama3_layer".into(),
            kernel: "gemm_x_out".into(),
            rules: "Sm90Cfg128x256".into(),
            trials: vec![trial("Sm90Cfg128x128", 0.084), trial("Sm90Cfg128x128pp", 0.089)],
            skipped: Vec::new(),
            unfused: None,
            alone: "Sm90Cfg128x128".into(),
            chosen: "Sm90Cfg128x128".into(),
        };
        assert_eq!(
            tuned.line(),
            "autotune llama3_layer gemm_x_out (Sm90Cfg128x256), 0.101 ms against Sm90Cfg128x128 0.084 ms, \
             0.101 ms against Sm90Cfg128x128pp 0.089 ms: takes Sm90Cfg128x128"
        );
        let kept = TuneReport {
            trials: Vec::new(),
            skipped: vec!["Sm90Cfg128x128pp".into()],
            alone: "Sm90Cfg128x256".into(),
            chosen: "Sm90Cfg128x256".into(),
            ..tuned.clone()
        };
        assert!(kept.line().ends_with("Sm90Cfg128x128pp skipped (it changes the kernel list): keeps Sm90Cfg128x256"));
        let dropped = TuneReport { chosen: "Sm90Cfg128x256".into(), ..tuned.clone() };
        assert!(dropped.line().ends_with(": Sm90Cfg128x128 wins alone, not in the block: keeps Sm90Cfg128x256"));
        let unfused = TuneReport {
            trials: Vec::new(),
            unfused: Some(UnfusedTrial { median_ms: 1.5, fused_median_ms: 1.625 }),
            alone: "unfused".into(),
            chosen: "unfused".into(),
            ..tuned.clone()
        };
        assert_eq!(
            unfused.line(),
            "autotune llama3_layer gemm_x_out (Sm90Cfg128x256), the block 1.625 ms against 1.500 ms with it unfused: takes unfused"
        );
        let json = serde_json::to_value(&unfused).unwrap_or_default();
        assert_eq!(json["unfused"]["fused_median_ms"], 1.625);
        let check = TuneBlockCheck {
            block: "llama3_layer".into(),
            winners: vec!["gemm_x1 Sm90Cfg128x128pp".into(), "gemm_z Sm90Cfg128x128pp".into()],
            median_ms: 1.693,
            rules_median_ms: 1.616,
            kept: false,
        };
        assert_eq!(
            check.line(),
            "autotune llama3_layer: the block with gemm_x1 Sm90Cfg128x128pp, gemm_z Sm90Cfg128x128pp 1.693 ms against 1.616 ms \
             with the rules' configurations: drops them (the rules' configurations stay)"
        );
        let mut r = report();
        assert!(
            serde_json::to_value(&r).unwrap_or_default().get("autotune").is_none(),
            "no autotune without --autotune"
        );
        r.autotune = vec![tuned];
        let json = serde_json::to_value(&r).unwrap_or_default();
        assert_eq!(json["autotune"][0]["chosen"], "Sm90Cfg128x128");
        assert_eq!(json["autotune"][0]["trials"][1]["config"], "Sm90Cfg128x128pp");
        assert!(json.get("autotune_blocks").is_none(), "no block check without winners");
        r.autotune_blocks = vec![check];
        let json = serde_json::to_value(&r).unwrap_or_default();
        assert_eq!(json["autotune_blocks"][0]["kept"], false);
    }

    #[test]
    fn training_step_adds_both_blocks() {
        let block = |name: &str, ms: f64, bare: f64| {
            BlockReport::totals(
                name.into(),
                BTreeMap::new(),
                1,
                1,
                vec![gemm_kernel(ms, bare)],
                (timing(ms), Vec::new()),
            )
        };
        let mut r = report();
        r.blocks = vec![block("f_saving", 2.0, 1.5), block("f_grad", 4.0, 3.5)];
        let step = StepReport::of(&r.blocks, "f_saving", "f_grad").unwrap_or_else(|| panic!("no step"));
        assert_eq!((step.time_ms, step.bare_gemms_ms, step.ratio), (6.0, 5.0, 1.2));
        assert!(StepReport::of(&r.blocks, "f_saving", "missing").is_none());
        r.steps = vec![step];
        let text = render_text(&r);
        assert!(
            text.contains("training step f_saving + f_grad: 6.000 ms; bare GEMMs 5.000 ms; the step takes 1.20× that"),
            "{text}"
        );
        let json = serde_json::to_value(&r).unwrap_or_default();
        assert_eq!(json["steps"][0]["ratio"], 1.2);
        assert!(serde_json::to_value(report()).unwrap_or_default().get("steps").is_none(), "no steps without --grad");
    }

    #[test]
    fn rates() {
        assert!((tflops(2.0 * 8192.0 * 4096.0 * 4096.0, 0.5) - 549.755_813_888).abs() < 1e-6);
        assert_eq!(gbps(2_000_000, 1.0), 2.0);
        assert_eq!(tflops(1.0, 0.0), 0.0);
        assert_eq!(gbps(1, 0.0), 0.0);
    }

    #[test]
    fn timing_from_samples() -> coda_runtime::Result<()> {
        let samples: Vec<f32> = (1..=101).map(|i| i as f32 / 100.0).collect();
        let t = Timing::of(&BenchStats::from_samples(samples)?);
        assert_eq!((t.median_ms, t.min_ms, t.samples), (f64::from(0.51f32), f64::from(0.01f32), 101));
        assert!((t.p10_ms - 0.11).abs() < 1e-6 && (t.p90_ms - 0.91).abs() < 1e-6, "{t:?}");
        Ok(())
    }

    #[test]
    fn block_totals() {
        let r = report();
        let b = &r.blocks[0];
        assert_eq!(b.sum_kernels_ms, 0.5);
        assert_eq!(b.sum_bare_gemms_ms, 0.4);
        assert_eq!(b.flops, 2.0 * 8192.0 * 4096.0 * 4096.0);
        assert!((b.tflops - tflops(b.flops, 0.52)).abs() < 1e-9);
    }

    #[test]
    fn json_fields() -> Result<(), serde_json::Error> {
        let json = serde_json::to_value(report())?;
        assert_eq!(json["schema"], SCHEMA);
        assert_eq!(json["device"]["arch"], "sm_90a");
        let k = &json["blocks"][0]["kernels"][0];
        assert_eq!(k["gemm"]["n"], 4096);
        assert_eq!(k["bare_gemm"]["config"], "Cfg128x256");
        assert_eq!(k["bare_gemm"]["interleaved"], true);
        assert_eq!(k["epilogue_cost"], 1.25);
        assert_eq!(k["compile"]["cold_ms"], 2500.0);
        assert_eq!(json["blocks"][0]["time"]["median_ms"], 0.52);
        assert_eq!(json["blocks"][0]["dims"]["M"], 8192);
        Ok(())
    }

    #[test]
    fn text_table() {
        let text = render_text(&report());
        assert!(text.starts_with("device: NVIDIA H100 80GB HBM3 (sm_90a, 132 SMs"), "{text}");
        assert!(text.contains("block llama3_layer at M=8192: 1 kernel(s)"), "{text}");
        assert!(text.contains("cycling through 3 copies of 1073.7 MB"), "{text}");
        let row = text.lines().find(|l| l.starts_with("gemm_x1 ")).unwrap_or_else(|| panic!("{text}"));
        let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(
            cells,
            [
                "gemm_x1",
                "gemm",
                "Cfg128x128w4",
                "8192×4096×4096",
                "0.500",
                "550",
                "268",
                "0.400",
                "Cfg128x256",
                "1.25×",
                "2.50 s",
                "1.2 ms",
                "168"
            ]
        );
        assert!(text.contains("block: 0.520 ms, 529 TFLOP/s (1 launches back to back; kernels alone sum to 0.500 ms)"));
        assert!(
            text.contains("inside the block (events between its launches): gemm_x1 0.510 ms; sum 0.510 ms"),
            "{text}"
        );
        assert!(text.contains("bare GEMMs: 0.400 ms; the block takes 1.30× that"), "{text}");
        assert!(text.contains("(each bare GEMM timed alternating with its kernel, at the same clocks)"), "{text}");
        assert!(text.contains("bare GEMMs against cuBLAS: not measured: no cuBLAS library found\n"), "{text}");
    }

    fn vendor_of(kernel: &KernelReport, bare_ms: f64, cublas_ms: f64) -> VendorReport {
        let gemm = kernel.gemm.clone().unwrap_or_else(|| panic!("not a GEMM kernel"));
        VendorReport {
            bare_tflops: tflops(gemm.flops, bare_ms),
            cublas_tflops: tflops(gemm.flops, cublas_ms),
            gemm,
            config: Some("Cfg128x256".into()),
            bare: timing(bare_ms),
            cublas: timing(cublas_ms),
            speed: cublas_ms / bare_ms,
            difference: 0.004,
        }
    }

    /// The cuBLAS comparison: a row per bare GEMM, the block against the
    /// sum of cuBLAS's GEMMs for its kernels (a kernel per measured GEMM,
    /// counted as often as the block launches it), and the training step.
    #[test]
    fn vendor_rows_and_sums() {
        let kernel = gemm_kernel(0.5, 0.4);
        let vendor = vec![vendor_of(&kernel, 0.4, 0.44)];
        let kernels = vec![kernel.clone(), KernelReport { name: "gemm_z".into(), ..kernel.clone() }];
        let mut r = report();
        let block = |name: &str, v: Vec<VendorReport>| {
            BlockReport::totals(name.into(), BTreeMap::new(), 1, 1, kernels.clone(), (timing(1.1), v))
        };
        r.blocks = vec![block("f_saving", vendor.clone()), block("f_grad", vendor)];
        assert_eq!(r.blocks[0].sum_cublas_gemms_ms, Some(0.88));
        r.vendor = "cuBLAS 13.1.0 (cublasGemmEx)".into();
        r.steps = StepReport::of(&r.blocks, "f_saving", "f_grad").into_iter().collect();
        let text = render_text(&r);
        assert!(text.contains("bare GEMMs against cuBLAS 13.1.0 (cublasGemmEx), alternating launches"), "{text}");
        let row = text.lines().find(|l| l.starts_with("8192×4096×4096 ")).unwrap_or_else(|| panic!("{text}"));
        let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(
            cells,
            ["8192×4096×4096", "MxK NxK bf16", "Cfg128x256", "0.400", "687", "0.440", "625", "1.10× cuBLAS"]
        );
        let block_line = "the block's GEMMs: cuBLAS 0.880 ms, codac's bare GEMMs alternating with them 0.800 ms";
        assert!(text.contains(&format!("{block_line} (1.10× cuBLAS's speed)\n")), "{text}");
        let step_line = "the step's GEMMs: cuBLAS 1.760 ms, codac's bare GEMMs alternating with them 1.600 ms";
        assert!(text.contains(&format!("the step takes 1.38× that\n{step_line} (1.10× cuBLAS's speed)\n")), "{text}");
        let json = serde_json::to_value(&r).unwrap_or_default();
        assert_eq!(json["blocks"][0]["vendor"][0]["speed"], 0.44 / 0.4);
        assert_eq!(json["steps"][0]["cublas_gemms_ms"], 1.76);
        assert_eq!(json["steps"][0]["vendor_bare_ms"], 1.6);
        let unmatched = BlockReport::totals("b".into(), BTreeMap::new(), 1, 1, kernels, (timing(1.0), Vec::new()));
        assert_eq!(unmatched.sum_cublas_gemms_ms, None, "no cuBLAS sum without cuBLAS");
    }
}
