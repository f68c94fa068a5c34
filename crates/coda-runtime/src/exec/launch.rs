//! Enqueuing the prepared launches, and timing them with CUDA events.

use super::graph::zero_counters;
use super::{BlockExecutor, Prepared};
use crate::device::{Device, Stream};
use crate::error::Result;
use crate::timing::{bench, BenchStats};

/// The timing of one kernel (or of the whole block, named `total`).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTiming {
    /// Short kernel name, or `total`.
    pub name: String,
    /// Samples and their statistics, in milliseconds.
    pub stats: BenchStats,
}

impl BlockExecutor {
    /// Enqueues every kernel of `prepared` on `stream`, in launch order.
    pub fn launch(&self, prepared: &Prepared, stream: &Stream) -> Result<()> {
        self.launch_marked(prepared, stream, &mut |_| Ok(()))
    }

    /// [`Self::launch`] with `mark(i)` called before launch `i` and
    /// `mark(n)` after the last of the `n` launches (to record events
    /// between the kernels of a block run).
    pub fn launch_marked(
        &self,
        prepared: &Prepared,
        stream: &Stream,
        mark: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        zero_counters(stream, &prepared.zero_first)?;
        for (i, l) in prepared.launches.iter().enumerate() {
            mark(i)?;
            let params: Vec<_> = l.params.iter().collect();
            self.kernels[l.kernel].kernel.launch(stream, &l.cfg, &params)?;
        }
        mark(prepared.launches.len())
    }

    /// Runs the block once and waits for it.
    pub fn run(&self, device: &Device, prepared: &Prepared) -> Result<()> {
        self.launch(prepared, device.stream())?;
        device.stream().synchronize()
    }

    /// Times each kernel separately (`warmup` launches, then `iters` timed
    /// ones), then the whole block. Outputs with `+=` keep accumulating.
    pub fn time(&self, device: &Device, prepared: &Prepared, warmup: usize, iters: usize) -> Result<Vec<KernelTiming>> {
        let stream = device.stream();
        let mut out = Vec::new();
        for l in &prepared.launches {
            let loaded = &self.kernels[l.kernel];
            let params: Vec<_> = l.params.iter().collect();
            let stats = bench(device, stream, warmup, iters, || loaded.kernel.launch(stream, &l.cfg, &params))?;
            out.push(KernelTiming { name: loaded.spec.name.clone(), stats });
        }
        let stats = bench(device, stream, warmup, iters, || self.launch(prepared, stream))?;
        out.push(KernelTiming { name: "total".into(), stats });
        Ok(out)
    }

    /// The short names of the kernels `prepared` launches, in order.
    pub fn launched(&self, prepared: &Prepared) -> Vec<String> {
        prepared.launches.iter().map(|l| self.kernels[l.kernel].spec.name.clone()).collect()
    }
}
