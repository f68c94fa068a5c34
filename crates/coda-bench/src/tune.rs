//! Tuned GEMM sites. `codac bench --autotune` times every GEMM kernel of
//! a block with each alternative of its configuration
//! ([`TileConfig::alternatives`]), interleaved with the kernel as the rules
//! chose it, and the block with the GEMM unfused ([`UNFUSED`]: its bare
//! GEMM, its epilogue's work done by the kernels after it, as `--unfuse`
//! compiles it) against the block as the rules build it. It files the
//! winners in the tuning store next to the kernel cache ([`TuningStore`]);
//! `codac run` and `codac bench` then compile with the store's winners for
//! their device and dimensions ([`with_tuning`]).
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
//! Unfusing changes the block's kernel list, so its trial times whole
//! blocks, as the check does; it is the fallback that keeps a fused site
//! from ever running slower than its unfused form.

use crate::report::{TuneBlockCheck, TuneReport, TuneTrial, UnfusedTrial};
use crate::rig::{Rig, RigSpec};
use crate::{OrBug, Result, Settings};
use coda::cuda::config::{LaunchHint, TileConfig};
use coda::cuda::manifest::{BlockManifest, KernelSpec};
use coda::{Checked, CompileOptions, Compiled, DimBindings, HostTensor};
use coda_runtime::{Device, TuningKey, TuningStore};
use std::collections::{BTreeMap, BTreeSet};

/// How much faster (time ratio) an alternative must run to replace the
/// rules' configuration.
pub(crate) const MARGIN: f32 = 0.98;

/// The GEMM kernels of a block with their ordinals among its GEMMs
/// (launch order): what [`coda::CompileOptions::tiles`] is keyed by.
fn gemm_kernels(manifest: &BlockManifest) -> impl Iterator<Item = (usize, &KernelSpec)> {
    manifest.kernels.iter().filter(|k| k.kind == "gemm").enumerate()
}

/// Whether two compiles of a block have the same kernels, source for
/// source.
fn same_kernels(a: &Compiled, a_block: &BlockManifest, b: &Compiled, b_block: &BlockManifest) -> Result<bool> {
    if a_block.kernels.len() != b_block.kernels.len() {
        return Ok(false);
    }
    for (x, y) in a_block.kernels.iter().zip(&b_block.kernels) {
        if source_of(a, x)? != source_of(b, y)? {
            return Ok(false);
        }
    }
    Ok(true)
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

/// What the store holds for a GEMM that runs faster unfused, where it
/// holds a configuration's name for the others.
pub const UNFUSED: &str = "unfused";

/// What a GEMM site takes instead of the rules' choice.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Choice {
    Tiles(TileConfig),
    Unfused,
}

impl Choice {
    fn name(self) -> &'static str {
        match self {
            Choice::Tiles(config) => config.name(),
            Choice::Unfused => UNFUSED,
        }
    }
}

/// The choices made for a compile's GEMM sites: tile configurations by
/// block and GEMM ordinal, GEMMs unfused by block.
#[derive(Debug, Default, PartialEq)]
struct Tuned {
    tiles: BTreeMap<String, BTreeMap<usize, TileConfig>>,
    unfused_in: BTreeMap<String, BTreeSet<String>>,
}

impl Tuned {
    fn add(&mut self, block: &str, ordinal: usize, kernel: &str, choice: Choice) {
        match choice {
            Choice::Tiles(config) => {
                self.tiles.entry(block.to_string()).or_default().insert(ordinal, config);
            }
            Choice::Unfused => {
                self.unfused_in.entry(block.to_string()).or_default().insert(kernel.to_string());
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.tiles.is_empty() && self.unfused_in.is_empty()
    }

    /// `options` with these choices in place of any tuned ones.
    fn options(&self, options: &CompileOptions) -> CompileOptions {
        let mut tuned = options.clone();
        tuned.codegen.tiles = self.tiles.clone();
        tuned.codegen.unfused_in = self.unfused_in.clone();
        tuned
    }
}

/// The choices filed for the GEMM sites of `compiled` (compiled with the
/// rules' configurations): `filed(source, dims)` is the entry of a kernel
/// of that source at those dims. An entry that names the rules' own
/// configuration, or nothing known, changes nothing.
fn filed_choices(
    compiled: &Compiled,
    dims: &DimBindings,
    filed: impl Fn(&str, &str) -> Option<String>,
) -> Result<Tuned> {
    let mut tuned = Tuned::default();
    for manifest in &compiled.manifest.blocks {
        let dims = dims_text(manifest, dims);
        for (ordinal, spec) in gemm_kernels(manifest) {
            let choice = match filed(source_of(compiled, spec)?, &dims).as_deref() {
                Some(UNFUSED) => Some(Choice::Unfused),
                Some(name) => {
                    TileConfig::from_name(name).filter(|c| Some(c.name()) != spec.config.as_deref()).map(Choice::Tiles)
                }
                None => None,
            };
            if let Some(choice) = choice {
                tuned.add(&manifest.block, ordinal, &spec.name, choice);
            }
        }
    }
    Ok(tuned)
}

/// `compiled` (compiled with `options`, the rules' configurations) again
/// with the choices of `store` (those filed for this device, program and
/// `dims`), when there are any: the options used and the result.
pub fn with_tuning(
    checked: &Checked,
    options: &CompileOptions,
    compiled: Compiled,
    device: &Device,
    store: &TuningStore,
    dims: &DimBindings,
) -> Result<(CompileOptions, Compiled)> {
    let filed = |source: &str, dims: &str| store.get(&key(device, source, dims)).map(str::to_owned);
    let tuned = filed_choices(&compiled, dims, filed)?;
    if tuned.is_empty() {
        return Ok((options.clone(), compiled));
    }
    let options = tuned.options(options);
    let compiled = coda::compile(checked, &options)?;
    Ok((options, compiled))
}

/// What `with_tuning` changed, for the line `codac run` and `codac bench`
/// print: whether tile configurations were tuned, and the GEMMs that run
/// unfused (`block/gemm`).
pub fn tuning_summary(rules: &CompileOptions, tuned: &CompileOptions) -> (bool, Vec<String>) {
    let unfused = tuned
        .codegen
        .unfused_in
        .iter()
        .flat_map(|(block, gemms)| gemms.iter().map(move |g| format!("{block}/{g}")))
        .collect();
    (tuned.codegen.tiles != rules.codegen.tiles, unfused)
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
    /// Times every GEMM site of `block` (compiled with the rules'
    /// configurations in `compiled`) against its alternatives, then the
    /// block with every site's winner against the block as the rules
    /// build it, and files the winners in `store` if the block ran faster
    /// with them, else the rules' configurations (in memory: the caller
    /// saves it).
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
            let Some((report, winner)) = self.site(&rig, compiled, block, ordinal, kernel)? else { continue };
            if let Some(choice) = winner {
                winners.insert(ordinal, (kernel.name.clone(), choice));
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
    /// each alternative of its configuration, and the block with it
    /// unfused against the block as is: the report and the winner, which
    /// must beat the rules' choice by [`MARGIN`] (between a configuration
    /// and unfusing, the one that saves more milliseconds); `None` when
    /// the site has no alternative.
    fn site(
        &self,
        rig: &Rig,
        compiled: &Compiled,
        block: &TuneBlock<'_>,
        ordinal: usize,
        kernel: &KernelSpec,
    ) -> Result<Option<(TuneReport, Option<Choice>)>> {
        let rules = kernel.config.as_deref().and_then(TileConfig::from_name);
        let alternatives = rules.map(TileConfig::alternatives).unwrap_or_default();
        let (mut trials, mut skipped) = (Vec::new(), Vec::new());
        // The winner, its time against the rules' choice and the
        // milliseconds it saves.
        let mut best: Option<(Choice, f32, f32)> = None;
        for alternative in alternatives.into_iter().skip(1) {
            let Some((ours, theirs)) = self.against(rig, block, ordinal, kernel, alternative)? else {
                skipped.push(alternative.name().to_string());
                continue;
            };
            trials.push(TuneTrial { config: alternative.name().into(), median_ms: theirs, rules_median_ms: ours });
            let ratio = theirs / ours;
            if ratio < MARGIN && best.is_none_or(|(_, r, _)| ratio < r) {
                best = Some((Choice::Tiles(alternative), ratio, ours - theirs));
            }
        }
        let unfused = self.unfused(rig, compiled, block, kernel)?;
        if let Some(u) = &unfused {
            let (ratio, saved) = (u.median_ms / u.fused_median_ms, u.fused_median_ms - u.median_ms);
            if ratio < MARGIN && best.is_none_or(|(_, _, s)| saved > s) {
                best = Some((Choice::Unfused, ratio, saved));
            }
        }
        if trials.is_empty() && skipped.is_empty() && unfused.is_none() {
            return Ok(None);
        }
        let rules = kernel.config.clone().unwrap_or_default();
        let alone = best.map_or(rules.clone(), |(choice, _, _)| choice.name().to_string());
        let report = TuneReport {
            block: block.manifest.block.clone(),
            kernel: kernel.name.clone(),
            rules,
            trials,
            skipped,
            unfused,
            alone: alone.clone(),
            chosen: alone,
        };
        Ok(Some((report, best.map(|(choice, _, _)| choice))))
    }

    /// The block with `kernel` unfused against `rig`'s block (the rules'
    /// form), or `None` where the GEMM's epilogue only stores its
    /// accumulator, so that unfusing it changes no kernel, or where the
    /// code generator refuses the unfused form (a size limit, say).
    fn unfused(
        &self,
        rig: &Rig,
        compiled: &Compiled,
        block: &TuneBlock<'_>,
        kernel: &KernelSpec,
    ) -> Result<Option<UnfusedTrial>> {
        let name = &block.manifest.block;
        let mut tuned = Tuned::default();
        tuned.add(name, 0, &kernel.name, Choice::Unfused);
        let Ok((options, variant)) = self.variant(&tuned, block) else { return Ok(None) };
        let manifest = variant.manifest.blocks.first().or_bug(|| format!("block `{name}` compiled to nothing"))?;
        if same_kernels(compiled, block.manifest, &variant, manifest)? {
            return Ok(None);
        }
        let other = self.variant_rig(&options, &variant, block)?;
        let (fused, unfused) = self.blocks_against(rig, &other)?;
        Ok(Some(UnfusedTrial { median_ms: unfused, fused_median_ms: fused }))
    }

    /// The block with every site's winner (`winners`, by GEMM ordinal)
    /// against `rig`'s block (the rules' configurations).
    fn confirm(
        &self,
        rig: &Rig,
        block: &TuneBlock<'_>,
        winners: &BTreeMap<usize, (String, Choice)>,
    ) -> Result<TuneBlockCheck> {
        let name = &block.manifest.block;
        let mut tuned = Tuned::default();
        for (ordinal, (kernel, choice)) in winners {
            tuned.add(name, *ordinal, kernel, *choice);
        }
        let (options, compiled) = self.variant(&tuned, block)?;
        let with_winners = self.variant_rig(&options, &compiled, block)?;
        let (rules, with_winners) = self.blocks_against(rig, &with_winners)?;
        Ok(TuneBlockCheck {
            block: name.clone(),
            winners: winners.values().map(|(kernel, choice)| format!("{kernel} {}", choice.name())).collect(),
            median_ms: with_winners,
            rules_median_ms: rules,
            kept: with_winners < MARGIN * rules,
        })
    }

    /// `block` compiled with `tuned`: the options and the result.
    fn variant(&self, tuned: &Tuned, block: &TuneBlock<'_>) -> Result<(CompileOptions, Compiled)> {
        let mut options = tuned.options(self.options);
        options.block = Some(block.manifest.block.clone());
        let compiled = coda::compile(self.checked, &options)?;
        Ok((options, compiled))
    }

    /// A rig of a `variant` on `block`'s inputs, filled.
    fn variant_rig(&self, options: &CompileOptions, compiled: &Compiled, block: &TuneBlock<'_>) -> Result<Rig> {
        let name = &block.manifest.block;
        let manifest = compiled.manifest.blocks.first().or_bug(|| format!("block `{name}` compiled to nothing"))?;
        let profiles = coda::profile(self.checked, options, self.dims)?;
        let kernel_bytes: BTreeMap<String, u64> = profiles
            .iter()
            .filter(|p| &p.block == name)
            .flat_map(|p| &p.kernels)
            .map(|k| (k.name.clone(), k.bytes_moved))
            .collect();
        let spec = RigSpec {
            manifest,
            sources: &compiled.kernels,
            dims: self.dims,
            inputs: block.inputs,
            kernel_bytes: &kernel_bytes,
        };
        let rig = Rig::new(self.device, &spec)?;
        rig.fill_and_spin(self.device, 0.0)?;
        Ok(rig)
    }

    /// `rig`'s block and `other`'s: two rounds of each, alternating, each
    /// timed as `codac bench` times a block (back to back; launch-by-launch
    /// interleaving of two whole blocks favoured the second one more).
    /// The two medians (ms).
    fn blocks_against(&self, rig: &Rig, other: &Rig) -> Result<(f32, f32)> {
        let (mut ours, mut theirs) = (0.0f32, 0.0f32);
        for _ in 0..2 {
            ours += rig.time_block(self.device, self.settings.warmup, self.settings.iters)?.median_ms / 2.0;
            theirs += other.time_block(self.device, self.settings.warmup, self.settings.iters)?.median_ms / 2.0;
        }
        Ok((ours, theirs))
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
        let mut tuned = Tuned::default();
        tuned.add(name, ordinal, &kernel.name, Choice::Tiles(alternative));
        let (_, compiled) = self.variant(&tuned, block)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A GEMM whose epilogue reads a residual and applies an activation.
    const FUSED: &str = "dim M\ndim N = 512\ndim K = 256\nblock g(a: bf16[M, K], b: bf16[N, K], c: bf16[M, N]) -> (y: bf16[M, N]) {\n    y = c + silu(a @ b.T)\n}\n";

    fn compiled(options: &CompileOptions) -> (Checked, Compiled) {
        let checked = coda::check("t.coda", FUSED).unwrap_or_else(|e| panic!("{e}"));
        let compiled = coda::compile(&checked, options).unwrap_or_else(|e| panic!("{e}"));
        (checked, compiled)
    }

    fn dims(m: i64) -> DimBindings {
        [("M".to_string(), m)].into_iter().collect()
    }

    /// The store's entry for the block's GEMM at `M=100`, none for anything else.
    fn choices_with(compiled: &Compiled, entry: &str) -> Tuned {
        let manifest = &compiled.manifest.blocks[0];
        let (_, gemm) = gemm_kernels(manifest).next().unwrap_or_else(|| panic!("no GEMM"));
        let source = source_of(compiled, gemm).unwrap_or_else(|e| panic!("{e}")).to_string();
        let filed = |s: &str, d: &str| (s == source && d == "M=100").then(|| entry.to_string());
        filed_choices(compiled, &dims(100), filed).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_gemm_filed_unfused_compiles_as_unfuse_would() {
        let rules = CompileOptions::default();
        let (_, fused) = compiled(&rules);
        let gemm = gemm_kernels(&fused.manifest.blocks[0]).next().map(|(_, k)| k.name.clone()).unwrap_or_default();
        let tuned = choices_with(&fused, UNFUSED);
        let expected = BTreeMap::from([("g".to_string(), BTreeSet::from([gemm.clone()]))]);
        assert_eq!(tuned, Tuned { tiles: BTreeMap::new(), unfused_in: expected });
        let (_, unfused) = compiled(&tuned.options(&rules));
        let mut by_flag = rules.clone();
        by_flag.codegen.unfused.insert(gemm.clone());
        let (_, flagged) = compiled(&by_flag);
        assert_eq!(unfused.kernels, flagged.kernels);
        assert_ne!(unfused.kernels, fused.kernels);
        assert_eq!(tuning_summary(&rules, &tuned.options(&rules)), (false, vec![format!("g/{gemm}")]));
    }

    #[test]
    fn a_filed_configuration_replaces_the_rules_one_and_nothing_else_does() {
        let (_, fused) = compiled(&CompileOptions::default());
        let gemm = gemm_kernels(&fused.manifest.blocks[0]).next().map(|(_, k)| k.clone());
        let rules = gemm.and_then(|k| k.config).and_then(|c| TileConfig::from_name(&c));
        let rules = rules.unwrap_or_else(|| panic!("the GEMM has no Hopper configuration"));
        let other =
            rules.alternatives().into_iter().nth(1).unwrap_or_else(|| panic!("{} has no alternative", rules.name()));
        let tuned = choices_with(&fused, other.name());
        let expected = BTreeMap::from([("g".to_string(), BTreeMap::from([(0, other)]))]);
        assert_eq!(tuned, Tuned { tiles: expected, unfused_in: BTreeMap::new() });
        for ignored in [rules.name(), "no such configuration"] {
            assert!(choices_with(&fused, ignored).is_empty(), "{ignored}");
        }
        let elsewhere = filed_choices(&fused, &dims(101), |_, d| (d == "M=100").then(|| UNFUSED.to_string()));
        assert!(elsewhere.unwrap_or_else(|e| panic!("{e}")).is_empty());
    }
}
