//! GPU timing with CUDA events, for benchmarks: one event pair per sample,
//! statistics of the samples ([`BenchStats`]), cycling through several
//! copies of the inputs so that the L2 cache does not flatter the result
//! ([`bench_cycle`]), and the latency of compiling a kernel with and
//! without the kernel cache ([`compile_latency`]).

use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;

use crate::cache::{Artifacts, KernelCache};
use crate::compiler::Compiler;
use crate::device::{Device, Stream};
use crate::error::{CudaResultExt, Result, RuntimeError};
use crate::nvrtc::CompileOptions;

/// A pair of timing events.
#[derive(Debug)]
pub struct EventTimer {
    start: CudaEvent,
    end: CudaEvent,
}

impl EventTimer {
    /// Creates the two events on `device`.
    pub fn new(device: &Device) -> Result<EventTimer> {
        let make = || device.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).cuda("cuEventCreate");
        Ok(EventTimer { start: make()?, end: make()? })
    }

    /// Records the start event on `stream`.
    pub fn start(&self, stream: &Stream) -> Result<()> {
        self.start.record(&stream.inner).cuda("cuEventRecord")
    }

    /// Records the end event on `stream`.
    pub fn stop(&self, stream: &Stream) -> Result<()> {
        self.end.record(&stream.inner).cuda("cuEventRecord")
    }

    /// Waits for both events and returns the milliseconds between them.
    pub fn elapsed_ms(&self) -> Result<f32> {
        self.start.elapsed_ms(&self.end).cuda("cuEventElapsedTime")
    }
}

/// Summary of repeated timings, in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchStats {
    /// Every sample, in order.
    pub samples_ms: Vec<f32>,
    /// Smallest sample.
    pub min_ms: f32,
    /// Median sample.
    pub median_ms: f32,
    /// Mean of the samples.
    pub mean_ms: f32,
}

impl BenchStats {
    /// Summarises `samples_ms` (fails when empty).
    pub fn from_samples(samples_ms: Vec<f32>) -> Result<BenchStats> {
        if samples_ms.is_empty() {
            return Err(RuntimeError::InvalidInput("no timing samples".into()));
        }
        let mut sorted = samples_ms.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let n = sorted.len();
        let median_ms = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        Ok(BenchStats { min_ms: sorted[0], median_ms, mean_ms: sorted.iter().sum::<f32>() / n as f32, samples_ms })
    }

    /// The `q`-quantile (`0 <= q <= 1`) of the samples, interpolating
    /// linearly between the two nearest order statistics.
    pub fn quantile(&self, q: f64) -> f32 {
        let mut sorted = self.samples_ms.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let Some(last) = sorted.len().checked_sub(1) else { return f32::NAN };
        let pos = q.clamp(0.0, 1.0) * last as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        let frac = (pos - lo as f64) as f32;
        sorted[lo] + (sorted[hi] - sorted[lo]) * frac
    }
}

/// Times `f` (which should enqueue work on `stream`) once, in milliseconds.
pub fn time_ms(device: &Device, stream: &Stream, mut f: impl FnMut() -> Result<()>) -> Result<f32> {
    let t = EventTimer::new(device)?;
    t.start(stream)?;
    f()?;
    t.stop(stream)?;
    t.elapsed_ms()
}

/// Runs `f` `warmup` times, then times each of `iters` runs separately.
pub fn bench(
    device: &Device,
    stream: &Stream,
    warmup: usize,
    iters: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<BenchStats> {
    for _ in 0..warmup {
        f()?;
    }
    stream.synchronize()?;
    let t = EventTimer::new(device)?;
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        t.start(stream)?;
        f()?;
        t.stop(stream)?;
        samples.push(t.elapsed_ms()?);
    }
    BenchStats::from_samples(samples)
}

/// Times `iters` runs of `f` after `warmup` untimed ones, cycling through
/// `copies` copies of the data: `f` gets the run's index modulo `copies`
/// (warm-up runs included), so that consecutive runs use different copies
/// and, with the copies together larger than the L2 cache, every run reads
/// its operands from device memory as it would in a real model. Unlike
/// [`bench`], every timed run is enqueued before any is waited for, each
/// between its own pair of events: the GPU runs them back to back, so a
/// sample is the GPU time of one run, without the host's launch latency.
pub fn bench_cycle(
    device: &Device,
    stream: &Stream,
    warmup: usize,
    iters: usize,
    copies: usize,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<BenchStats> {
    let mut stats = cycle_interleaved(device, stream, warmup, iters, &mut [(copies, &mut f)])?;
    stats.pop().ok_or_else(|| RuntimeError::InvalidInput("no timing samples".into()))
}

/// [`bench_cycle`] of two workloads interleaved: after `warmup` untimed
/// runs of each, run `i` of `a` and run `i` of `b` alternate (each between
/// its own pair of events), `a` cycling through `copies_a` copies of its
/// data and `b` through `copies_b`. Both then see the same clocks: an H100
/// under sustained GEMMs reaches its power cap within a second and lowers
/// its clock, so two workloads timed one after the other are compared at
/// different clocks, and the ratio of their times says as much about the
/// power state as about the workloads.
pub fn bench_interleaved(
    device: &Device,
    stream: &Stream,
    warmup: usize,
    iters: usize,
    (copies_a, copies_b): (usize, usize),
    mut a: impl FnMut(usize) -> Result<()>,
    mut b: impl FnMut(usize) -> Result<()>,
) -> Result<(BenchStats, BenchStats)> {
    let mut stats = cycle_interleaved(device, stream, warmup, iters, &mut [(copies_a, &mut a), (copies_b, &mut b)])?;
    let (sb, sa) = (stats.pop(), stats.pop());
    sa.zip(sb).ok_or_else(|| RuntimeError::InvalidInput("no timing samples".into()))
}

/// [`bench_cycle`] of a workload that records `marks` events in each run
/// (`f(copy, mark)` calls `mark(j)` for `j` in `0..marks`, in order): the
/// statistics of the time between consecutive marks, `marks - 1` of them.
/// The block benchmark marks the launches of a block run, which gives each
/// kernel's time inside back-to-back block runs.
pub fn bench_cycle_marked(
    device: &Device,
    stream: &Stream,
    (warmup, iters, copies): (usize, usize, usize),
    marks: usize,
    mut f: impl FnMut(usize, &mut dyn FnMut(usize) -> Result<()>) -> Result<()>,
) -> Result<Vec<BenchStats>> {
    let mut ignore = |_: usize| Ok(());
    for run in 0..warmup {
        f(run % copies.max(1), &mut ignore)?;
    }
    stream.synchronize()?;
    let event = || device.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).cuda("cuEventCreate");
    let mut runs: Vec<Vec<CudaEvent>> = Vec::with_capacity(iters);
    for _ in 0..iters {
        runs.push((0..marks).map(|_| event()).collect::<Result<Vec<_>>>()?);
    }
    for (i, events) in runs.iter().enumerate() {
        let mut mark = |j: usize| match events.get(j) {
            Some(e) => e.record(&stream.inner).cuda("cuEventRecord"),
            None => Err(RuntimeError::InvalidInput(format!("mark {j} of {marks}"))),
        };
        f((warmup + i) % copies.max(1), &mut mark)?;
    }
    stream.synchronize()?;
    (1..marks)
        .map(|j| {
            let samples = runs.iter().map(|e| e[j - 1].elapsed_ms(&e[j]).cuda("cuEventElapsedTime"));
            BenchStats::from_samples(samples.collect::<Result<Vec<_>>>()?)
        })
        .collect()
}

/// A workload of [`cycle_interleaved`]: its number of data copies and the
/// launch of run `c` on copy `c`.
type Workload<'a> = (usize, &'a mut dyn FnMut(usize) -> Result<()>);

/// The loop of [`bench_cycle`] and [`bench_interleaved`]: `warmup` untimed
/// rounds, then `iters` rounds, each round running every workload once in
/// order between its own events, all enqueued before any is waited for.
fn cycle_interleaved(
    device: &Device,
    stream: &Stream,
    warmup: usize,
    iters: usize,
    workloads: &mut [Workload<'_>],
) -> Result<Vec<BenchStats>> {
    for run in 0..warmup {
        for (copies, f) in workloads.iter_mut() {
            f(run % (*copies).max(1))?;
        }
    }
    stream.synchronize()?;
    let mut timers = Vec::with_capacity(workloads.len());
    for _ in 0..workloads.len() {
        timers.push((0..iters).map(|_| EventTimer::new(device)).collect::<Result<Vec<_>>>()?);
    }
    for i in 0..iters {
        for ((copies, f), ts) in workloads.iter_mut().zip(&timers) {
            ts[i].start(stream)?;
            f((warmup + i) % (*copies).max(1))?;
            ts[i].stop(stream)?;
        }
    }
    stream.synchronize()?;
    timers
        .iter()
        .map(|ts| BenchStats::from_samples(ts.iter().map(EventTimer::elapsed_ms).collect::<Result<Vec<_>>>()?))
        .collect()
}

/// How long compiling one kernel takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompileLatency {
    /// NVRTC compiling the source, with no cache involved (milliseconds).
    pub cold_ms: f64,
    /// Serving the same kernel from the kernel cache (milliseconds): from
    /// its disk entry when the cache has a directory, else from memory.
    pub hit_ms: f64,
    /// Whether `hit_ms` was a disk lookup.
    pub hit_from_disk: bool,
    /// Whether NVRTC's own cache (CUDA 12.9+) was bypassed too (`--no-cache`);
    /// false when this NVRTC rejected the flag.
    pub nvrtc_cache_bypassed: bool,
}

/// Measures [`CompileLatency`] of `source` with `opts`: compiles it with a
/// fresh memory-only cache (so NVRTC always runs) and NVRTC's `--no-cache`
/// (NVRTC 12.9 and later keep a cache of their own, which would otherwise
/// serve a source compiled earlier on the machine), stores the result in
/// `compiler`'s cache (where a later [`Compiler::compile`] with the same
/// options finds it, so nothing is compiled twice), then drops the
/// in-memory entries of that cache and compiles again to time a hit.
pub fn compile_latency(compiler: &Compiler, source: &str, opts: &CompileOptions) -> Result<CompileLatency> {
    let uncached = Compiler::new(compiler.toolkit().clone(), KernelCache::new(None))?;
    let mut bypass = opts.clone();
    bypass.extra_flags.push("--no-cache".into());
    let (cold, nvrtc_cache_bypassed) = match uncached.compile(source, &bypass) {
        Ok(cold) => (cold, true),
        Err(_) => (uncached.compile(source, opts)?, false),
    };
    let key = compiler.cache_key(source, opts);
    let artifacts = Artifacts { cubin: cold.cubin.clone(), ptx: cold.ptx.clone(), log: cold.log.clone() };
    compiler.cache().get_or_compile(&key, || Ok(artifacts))?;
    compiler.cache().clear_memory();
    let start = Instant::now();
    let hit = compiler.compile(source, opts)?;
    let hit_ms = start.elapsed().as_secs_f64() * 1e3;
    if !hit.cache_hit {
        return Err(RuntimeError::InvalidInput("the kernel cache did not keep a kernel just stored".into()));
    }
    let hit_from_disk = compiler.cache().dir().is_some();
    Ok(CompileLatency { cold_ms: cold.compile_ms, hit_ms, hit_from_disk, nvrtc_cache_bypassed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats() -> Result<()> {
        let s = BenchStats::from_samples(vec![3.0, 1.0, 2.0, 10.0])?;
        assert_eq!((s.min_ms, s.median_ms, s.mean_ms), (1.0, 2.5, 4.0));
        let s = BenchStats::from_samples(vec![5.0, 1.0, 2.0])?;
        assert_eq!(s.median_ms, 2.0);
        assert!(BenchStats::from_samples(vec![]).is_err());
        Ok(())
    }

    #[test]
    fn quantiles() -> Result<()> {
        let s = BenchStats::from_samples(vec![4.0, 1.0, 3.0, 2.0, 5.0])?;
        assert_eq!((s.quantile(0.0), s.quantile(0.5), s.quantile(1.0)), (1.0, 3.0, 5.0));
        assert_eq!(s.quantile(0.1), 1.4);
        assert_eq!(s.quantile(0.9), 4.6);
        assert_eq!(s.quantile(2.0), 5.0, "clamped");
        Ok(())
    }
}
