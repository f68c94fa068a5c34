//! Tuned tile configurations. `codac bench --autotune` times every GEMM
//! kernel of a block with each alternative of its configuration
//! ([`TileConfig::alternatives`]), interleaved with the kernel as the rules
//! chose it, and files the fastest in the tuning store next to the kernel
//! cache ([`TuningStore`]); `codac run` and `codac bench` then compile with
//! the store's winners for their device and dimensions ([`with_tuning`]).
//!
//! A kernel is filed under its device, its architecture, its source as the
//! rules configure it and the block's run-time dimensions, so an entry is
//! found again only for the same program, compiler and shape. An
//! alternative must beat the rules' choice by [`MARGIN`] to be kept, so
//! that run-to-run noise does not flip configurations, and the block must
//! then run faster by [`MARGIN`] with all its kernels' winners than with
//! the rules' configurations ([`TuneBlockCheck`]), or none is kept: a
//! kernel can win alone and still not speed up, or slow, the block
//! (`docs/decisions/ping-pong.md`: per-kernel ping-pong wins of 3–7% at the
//! Llama-3 1B shapes made the block slower). The check is no proof either:
//! it can favour the tuned block by a few percent that separately timed
//! blocks do not confirm, which is why the margin applies to it too.

use crate::report::{TuneBlockCheck, TuneReport, TuneTrial};
use crate::rig::{Rig, RigSpec};
use crate::{OrBug, Result, Settings};
use coda::cuda::config::{LaunchHint, TileConfig};
use coda::cuda::manifest::{BlockManifest, KernelSpec};
use coda::{Checked, CompileOptions, Compiled, DimBindings, HostTensor};
use coda_runtime::{Device, TuningKey, TuningStore};
use std::collections::BTreeMap;

/// How much faster (time ratio) an alternative must run to replace the
/// rules' configuration.
pub(crate) const MARGIN: f32 = 0.98;

/// The GEMM kernels of a block with their ordinals among its GEMMs
/// (launch order): what [`coda::CompileOptions::tiles`] is keyed by.
fn gemm_kernels(manifest: &BlockManifest) -> impl Iterator<Item = (usize, &KernelSpec)> {
    manifest.kernels.iter().filter(|k| k.kind == "gemm").enumerate()
}

/// The block's run-time dimensions as text, `M=8192`.
fn dims_text(manifest: &BlockManifest, dims: &DimBindings) -> String {
    let mut parts: Vec<String> = manifest.dims.iter().filter_map(|d| dims.get(d).map(|v| format!("{d}={v}"))).collect();
    parts.sort();
    parts.join(",")
}

/// What the result for one kernel is filed under.
fn key(device: &Device, source: &str, dims: &str) -> TuningKey {
    let arch = device.arch().to_string();
    TuningKey::from_parts(&[device.info().name.as_bytes(), arch.as_bytes(), source.as_bytes(), dims.as_bytes()])
}

fn source_of<'a>(compiled: &'a Compiled, spec: &KernelSpec) -> Result<&'a str> {
    compiled.source(&spec.file).or_bug(|| format!("no source {}", spec.file))
}

/// The run-time dimensions and this device's multiprocessors, for the
/// choice of tile configurations (`CompileOptions::launch`).
pub fn launch_hint(device: &Device, dims: &DimBindings) -> LaunchHint {
    LaunchHint { dims: dims.clone(), multiprocessors: device.info().multiprocessors }
}

/// `compiled` (compiled with `options`, the rules' configurations) again
/// with the tuned configurations of `store` (those filed for this device,
/// program and `dims`), when there are any: the options used and the result.
pub fn with_tuning(
    checked: &Checked,
    options: &CompileOptions,
    compiled: Compiled,
    device: &Device,
    store: &TuningStore,
    dims: &DimBindings,
) -> Result<(CompileOptions, Compiled)> {
    let mut tiles: BTreeMap<String, BTreeMap<usize, TileConfig>> = BTreeMap::new();
    for manifest in &compiled.manifest.blocks {
        let dims = dims_text(manifest, dims);
        for (ordinal, spec) in gemm_kernels(manifest) {
            let tuned = store.get(&key(device, source_of(&compiled, spec)?, &dims));
            if let Some(config) =
                tuned.and_then(TileConfig::from_name).filter(|c| Some(c.name()) != spec.config.as_deref())
            {
                tiles.entry(manifest.block.clone()).or_default().insert(ordinal, config);
            }
        }
    }
    if tiles.is_empty() {
        return Ok((options.clone(), compiled));
    }
    let mut tuned = options.clone();
    tuned.codegen.tiles = tiles;
    let compiled = coda::compile(checked, &tuned)?;
    Ok((tuned, compiled))
}

/// One block's data for the autotuner.
pub(crate) struct TuneBlock<'a> {
    pub(crate) manifest: &'a BlockManifest,
    pub(crate) inputs: &'a BTreeMap<String, HostTensor>,
    pub(crate) kernel_bytes: &'a BTreeMap<String, u64>,
}

/// The autotuner's settings.
pub(crate) struct Autotune<'a> {
    pub(crate) device: &'a Device,
    pub(crate) checked: &'a Checked,
    /// The options without tuned configurations.
    pub(crate) options: &'a CompileOptions,
    pub(crate) dims: &'a DimBindings,
    pub(crate) settings: &'a Settings<'a>,
}

impl Autotune<'_> {
    /// Times every GEMM kernel of `block` (compiled with the rules'
    /// configurations in `compiled`) against its alternatives, then the
    /// block with every kernel's winner against the block as the rules
    /// configure it, and files the winners in `store` if the block ran
    /// faster with them, else the rules' configurations (in memory: the
    /// caller saves it).
    pub(crate) fn block(
        &self,
        compiled: &Compiled,
        block: &TuneBlock<'_>,
        store: &mut TuningStore,
    ) -> Result<(Vec<TuneReport>, Option<TuneBlockCheck>)> {
        let manifest = block.manifest;
        let rig = self.rig(manifest, compiled, block)?;
        rig.fill_and_spin(self.device, 300.0)?;
        let dims = dims_text(manifest, self.dims);
        let (mut reports, mut winners, mut keys) = (Vec::new(), BTreeMap::new(), Vec::new());
        for (ordinal, kernel) in gemm_kernels(manifest) {
            let Some((report, best)) = self.kernel(&rig, block, ordinal, kernel)? else { continue };
            if report.alone != report.rules {
                winners.insert(ordinal, (kernel.name.clone(), best));
            }
            keys.push(key(self.device, source_of(compiled, kernel)?, &dims));
            reports.push(report);
        }
        let check = match winners.is_empty() {
            true => None,
            false => Some(self.confirm(&rig, block, &winners)?),
        };
        for report in &mut reports {
            if check.as_ref().is_some_and(|c| !c.kept) {
                report.chosen = report.rules.clone();
            }
            (self.settings.progress)(&report.line());
        }
        if let Some(c) = &check {
            (self.settings.progress)(&c.line());
        }
        for (key, report) in keys.iter().zip(&reports) {
            store.set(key, &report.chosen);
        }
        Ok((reports, check))
    }

    /// GEMM kernel `kernel` (the `ordinal`-th of the block) timed against
    /// each alternative of its configuration, with the fastest; `None` when
    /// it has none.
    fn kernel(
        &self,
        rig: &Rig,
        block: &TuneBlock<'_>,
        ordinal: usize,
        kernel: &KernelSpec,
    ) -> Result<Option<(TuneReport, TileConfig)>> {
        let Some(rules) = kernel.config.as_deref().and_then(TileConfig::from_name) else { return Ok(None) };
        let alternatives = rules.alternatives();
        if alternatives.len() < 2 {
            return Ok(None);
        }
        let (mut trials, mut skipped) = (Vec::new(), Vec::new());
        let mut best = (rules, 1.0f32);
        for alternative in alternatives.into_iter().skip(1) {
            let Some((ours, theirs)) = self.against(rig, block, ordinal, kernel, alternative)? else {
                skipped.push(alternative.name().to_string());
                continue;
            };
            trials.push(TuneTrial { config: alternative.name().into(), median_ms: theirs, rules_median_ms: ours });
            let ratio = theirs / ours;
            if ratio < MARGIN && ratio < best.1 {
                best = (alternative, ratio);
            }
        }
        let report = TuneReport {
            block: block.manifest.block.clone(),
            kernel: kernel.name.clone(),
            rules: rules.name().into(),
            trials,
            skipped,
            alone: best.0.name().into(),
            chosen: best.0.name().into(),
        };
        Ok(Some((report, best.0)))
    }

    /// The block with every kernel's winner (`winners`, by GEMM ordinal)
    /// against `rig`'s block (the rules' configurations): two rounds of
    /// each, alternating.
    fn confirm(
        &self,
        rig: &Rig,
        block: &TuneBlock<'_>,
        winners: &BTreeMap<usize, (String, TileConfig)>,
    ) -> Result<TuneBlockCheck> {
        let name = &block.manifest.block;
        let chosen = winners.iter().map(|(ordinal, (_, config))| (*ordinal, *config)).collect();
        let tiles = BTreeMap::from([(name.clone(), chosen)]);
        let mut options = self.options.clone();
        options.block = Some(name.clone());
        options.codegen.tiles = tiles;
        let compiled = coda::compile(self.checked, &options)?;
        let manifest = compiled.manifest.blocks.first().or_bug(|| format!("block `{name}` compiled to nothing"))?;
        let tuned = self.rig(manifest, &compiled, block)?;
        tuned.fill_and_spin(self.device, 0.0)?;
        // Two rounds of each, alternating, each timed as `codac bench` times
        // a block (back to back): launch-by-launch interleaving of two
        // whole blocks favoured the second one more.
        let (mut rules, mut with_winners) = (0.0f32, 0.0f32);
        for _ in 0..2 {
            rules += rig.time_block(self.device, self.settings.warmup, self.settings.iters)?.median_ms / 2.0;
            with_winners += tuned.time_block(self.device, self.settings.warmup, self.settings.iters)?.median_ms / 2.0;
        }
        Ok(TuneBlockCheck {
            block: name.clone(),
            winners: winners.values().map(|(kernel, config)| format!("{kernel} {}", config.name())).collect(),
            median_ms: with_winners,
            rules_median_ms: rules,
            kept: with_winners < MARGIN * rules,
        })
    }

    /// The block's data (`block`'s inputs) for the kernels of `manifest`.
    fn rig(&self, manifest: &BlockManifest, compiled: &Compiled, block: &TuneBlock<'_>) -> Result<Rig> {
        let spec = RigSpec {
            manifest,
            sources: &compiled.kernels,
            dims: self.dims,
            inputs: block.inputs,
            kernel_bytes: block.kernel_bytes,
        };
        Rig::new(self.device, &spec)
    }

    /// Medians of `kernel` and of the same GEMM with `alternative`, timed
    /// interleaved; `None` when the alternative changes the block's kernel
    /// list (a row kernel no longer fused, say), which a kernel's time
    /// alone would not show.
    fn against(
        &self,
        rig: &Rig,
        block: &TuneBlock<'_>,
        ordinal: usize,
        kernel: &KernelSpec,
        alternative: TileConfig,
    ) -> Result<Option<(f32, f32)>> {
        let name = &block.manifest.block;
        let tiles = BTreeMap::from([(name.clone(), BTreeMap::from([(ordinal, alternative)]))]);
        let mut options = self.options.clone();
        options.block = Some(name.clone());
        options.codegen.tiles = tiles;
        let compiled = coda::compile(self.checked, &options)?;
        let manifest = compiled.manifest.blocks.first().or_bug(|| format!("block `{name}` compiled to nothing"))?;
        let same_list = manifest.kernels.len() == block.manifest.kernels.len();
        let Some((_, spec)) = gemm_kernels(manifest).nth(ordinal).filter(|_| same_list) else { return Ok(None) };
        if spec.config.as_deref() != Some(alternative.name()) {
            return Ok(None);
        }
        let other = self.rig(manifest, &compiled, block)?;
        other.fill_and_spin(self.device, 0.0)?;
        let (ours, theirs) = rig.time_against(
            self.device,
            &kernel.name,
            (&other, &spec.name),
            self.settings.warmup,
            self.settings.iters,
        )?;
        Ok(Some((ours.median_ms, theirs.median_ms)))
    }
}
