//! One block's benchmark: compile latency of every kernel, every kernel
//! timed alone or interleaved with its bare GEMM, the whole block, and the
//! bare GEMMs against cuBLAS.

use crate::report::{gbps, gemm_report, tflops, BareReport, BlockReport, CompileReport, KernelReport, Timing};
use crate::rig::{Rig, RigSpec};
use crate::vendor::Vendor;
use crate::{bug, tune, OrBug, Result, Settings};
use coda::cuda::manifest::BlockManifest;
use coda::cuda::KernelSource;
use coda::{DimBindings, GemmProfile, KernelProfile};
use coda_runtime::{compile_latency, CompileOptions, Compiler, Device};
use std::collections::BTreeMap;

/// Milliseconds each rig keeps the GPU busy before timing.
const SPIN_UP_MS: f64 = 300.0;

/// The settings shared by every measurement.
pub(crate) struct Bench<'a> {
    pub(crate) device: &'a Device,
    pub(crate) compiler: &'a Compiler,
    pub(crate) vendor: &'a Vendor,
    pub(crate) settings: &'a Settings<'a>,
}

/// A bare GEMM's measurements, keyed by its shape and layouts.
type BareKey = (i64, i64, i64, bool, bool, String);

impl Bench<'_> {
    /// Cold and cached compile latency of every kernel of `manifest` (with
    /// the options `BlockExecutor` uses, so it then finds them in the cache).
    fn compile_all(
        &self,
        manifest: &BlockManifest,
        sources: &[KernelSource],
    ) -> Result<BTreeMap<String, CompileReport>> {
        let mut out = BTreeMap::new();
        for spec in &manifest.kernels {
            let source =
                sources.iter().find(|s| s.file_name == spec.file).or_bug(|| format!("no source {}", spec.file))?;
            (self.settings.progress)(&format!("compiling {} {} ({})", manifest.block, spec.name, spec.file));
            let opts = CompileOptions::new(self.device.arch()).file_name(&spec.file);
            let l = compile_latency(self.compiler, &source.source, &opts)?;
            let report = CompileReport {
                cold_ms: l.cold_ms,
                hit_ms: l.hit_ms,
                hit_from_disk: l.hit_from_disk,
                nvrtc_cache_bypassed: l.nvrtc_cache_bypassed,
                registers: 0,
            };
            out.insert(spec.name.clone(), report);
        }
        Ok(out)
    }

    /// Benchmarks one block and the bare GEMMs of its GEMM kernels: every
    /// GEMM kernel is timed interleaved with its bare GEMM (alternating
    /// launches), so that the two are compared at the same clocks.
    pub(crate) fn block(
        &self,
        block: &coda::ir::Block,
        manifest: &BlockManifest,
        sources: &[KernelSource],
        profiles: &[KernelProfile],
        dims: &DimBindings,
        inputs: &BTreeMap<String, coda::HostTensor>,
    ) -> Result<BlockReport> {
        let mut compiles = self.compile_all(manifest, sources)?;
        let kernel_bytes: BTreeMap<String, u64> = profiles.iter().map(|p| (p.name.clone(), p.bytes_moved)).collect();
        let spec = RigSpec { manifest, sources, dims, inputs, kernel_bytes: &kernel_bytes };
        let rig = Rig::new(self.device, &spec)?;
        for (name, regs) in rig.registers() {
            if let Some(c) = compiles.get_mut(&name) {
                c.registers = regs;
            }
        }
        let mut bares: BTreeMap<BareKey, BareRig> = BTreeMap::new();
        for g in profiles.iter().filter_map(|p| p.gemm.as_ref()) {
            if let std::collections::btree_map::Entry::Vacant(slot) = bares.entry(bare_key(g)) {
                slot.insert(self.bare_rig(g)?);
            }
        }
        (self.settings.progress)(&format!(
            "timing block {} ({} copies of {:.1} MB)",
            block.name,
            rig.copies,
            rig.bytes_per_copy as f64 / 1e6
        ));
        for bare in bares.values() {
            bare.rig.fill_and_spin(self.device, 0.0)?;
        }
        rig.fill_and_spin(self.device, SPIN_UP_MS)?;
        let mut kernels = Vec::new();
        for name in rig.kernel_names() {
            let spec = manifest.kernels.iter().find(|k| k.name == name).or_bug(|| format!("no kernel {name}"))?;
            let profile = profiles.iter().find(|p| p.name == name).or_bug(|| format!("no profile of {name}"))?;
            let (time, bare) = match profile.gemm.as_ref().and_then(|g| bares.get(&bare_key(g)).map(|b| (g, b))) {
                Some((g, bare)) => {
                    let against = (&bare.rig, bare.gemm.as_str());
                    let (fused, alone) =
                        rig.time_against(self.device, &name, against, self.settings.warmup, self.settings.iters)?;
                    (Timing::of(&fused), Some(bare.report(g, Timing::of(&alone))))
                }
                None => {
                    (Timing::of(&rig.time_kernel(self.device, &name, self.settings.warmup, self.settings.iters)?), None)
                }
            };
            let compile = compiles.get(&name).copied().or_bug(|| format!("no compile record of {name}"))?;
            kernels.push(kernel_report(spec, profile, time, bare, compile));
        }
        let block_time = Timing::of(&rig.time_block(self.device, self.settings.warmup, self.settings.iters)?);
        let inside = rig.time_in_block(self.device, self.settings.warmup, self.settings.iters)?;
        if inside.len() != kernels.len() {
            bug!("the block launches {} kernels, its rig times {}", inside.len(), kernels.len());
        }
        for (kernel, stats) in kernels.iter_mut().zip(&inside) {
            kernel.in_block = Some(Timing::of(stats));
        }
        let mut vendor = Vec::new();
        for bare in bares.values() {
            let measured = (&bare.rig, bare.gemm.as_str(), bare.config.clone());
            vendor.extend(self.vendor.compare(
                self.device,
                measured,
                &bare.profile,
                (self.settings.warmup, self.settings.iters),
            )?);
        }
        let dims = block.symbolic_dims().filter_map(|d| dims.get(d).map(|v| (d.to_string(), *v))).collect();
        let times = (block_time, vendor);
        Ok(BlockReport::totals(block.name.clone(), dims, rig.copies, rig.bytes_per_copy, kernels, times))
    }

    /// Compiles the GEMM of `g` with an empty epilogue and uploads its data.
    fn bare_rig(&self, g: &GemmProfile) -> Result<BareRig> {
        let bare = g.bare_gemm();
        let checked = coda::check("bare_gemm.coda", &bare.source)?;
        if checked.has_errors() {
            bug!("the bare GEMM of {} does not check:\n{}", g.shape(), checked.render_diagnostics());
        }
        let mut options = coda::CompileOptions::for_arch(self.device.arch().to_string());
        options.codegen.launch = Some(tune::launch_hint(self.device, &bare.dims));
        let compiled = coda::compile(&checked, &options)?;
        let profiles = coda::profile(&checked, &options, &bare.dims)?;
        let (Some(manifest), Some(profile), Some(block)) =
            (compiled.manifest.blocks.first(), profiles.first(), checked.module.blocks.first())
        else {
            bug!("the bare GEMM of {} compiled to nothing", g.shape());
        };
        let gemm = profile
            .kernels
            .iter()
            .find(|k| k.gemm.is_some())
            .or_bug(|| "the bare GEMM has no GEMM kernel".to_string())?;
        let config = gemm.gemm.as_ref().map(|p| p.config.clone());
        let mut compile = self.compile_all(manifest, &compiled.kernels)?;
        let inputs = coda::random_inputs(block, &bare.dims, 1)?;
        let kernel_bytes: BTreeMap<String, u64> =
            profile.kernels.iter().map(|p| (p.name.clone(), p.bytes_moved)).collect();
        let spec = RigSpec {
            manifest,
            sources: &compiled.kernels,
            dims: &bare.dims,
            inputs: &inputs,
            kernel_bytes: &kernel_bytes,
        };
        let rig = Rig::new(self.device, &spec)?;
        (self.settings.progress)(&format!("prepared the bare GEMM {} ({} copies)", g.shape(), rig.copies));
        let mut compile = compile.remove(&gemm.name).or_bug(|| "no compile record of the bare GEMM".to_string())?;
        compile.registers = rig.registers().get(&gemm.name).copied().unwrap_or(0);
        Ok(BareRig { rig, gemm: gemm.name.clone(), config, compile, profile: g.clone() })
    }
}

/// The shape and layouts of a GEMM: kernels with equal keys share a bare GEMM.
fn bare_key(g: &GemmProfile) -> BareKey {
    (g.m.value, g.n.value, g.k.value, g.a_row_major, g.b_n_by_k, g.dtype.to_string())
}

/// A bare GEMM ready to be timed: its rig, its GEMM kernel's short name,
/// configuration and compile record, and the GEMM it stands for.
struct BareRig {
    rig: Rig,
    gemm: String,
    config: Option<String>,
    compile: CompileReport,
    profile: GemmProfile,
}

impl BareRig {
    /// The report of one timing of this bare GEMM (against kernel `g`).
    fn report(&self, g: &GemmProfile, time: Timing) -> BareReport {
        let (config, compile) = (self.config.clone(), self.compile);
        let tflops = tflops(g.flops(), time.median_ms);
        BareReport { interleaved: true, config, time, tflops, copies: self.rig.copies, compile }
    }
}

/// Combines the measurements of one kernel.
fn kernel_report(
    spec: &coda::cuda::manifest::KernelSpec,
    profile: &KernelProfile,
    time: Timing,
    bare: Option<BareReport>,
    compile: CompileReport,
) -> KernelReport {
    let gemm = profile.gemm.as_ref().map(gemm_report);
    let epilogue_cost = bare.as_ref().filter(|b| b.time.median_ms > 0.0).map(|b| time.median_ms / b.time.median_ms);
    KernelReport {
        name: spec.name.clone(),
        kind: spec.kind.clone(),
        summary: spec.summary.clone(),
        config: spec.config.clone(),
        tflops: gemm.as_ref().map(|g| tflops(g.flops, time.median_ms)),
        gemm,
        time,
        bytes_moved: profile.bytes_moved,
        epilogue_bytes: profile.epilogue_bytes,
        epilogue_gbps: gbps(profile.epilogue_bytes, time.median_ms),
        bare_gemm: bare,
        epilogue_cost,
        compile,
        in_block: None,
    }
}
