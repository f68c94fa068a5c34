//! GPU timing with CUDA events, for benchmarks.

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;

use crate::device::{Device, Stream};
use crate::error::{CudaResultExt, Result, RuntimeError};

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
}
