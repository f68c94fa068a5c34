//! Binding a block's buffers for one run: checking the caller's tensors,
//! placing the buffers the host owns, and filling in the launches of the
//! block's [`Plan`] for the bindings' shape.

pub use super::plan::Plan;
use super::plan::{Binding, PlanKey};
use super::{BlockExecutor, Loaded};
use crate::compiler::Compiler;
use crate::device::Device;
use crate::error::{Result, RuntimeError};
use crate::launch::LaunchConfig;
use crate::memory::DeviceBuffer;
use crate::nvrtc::CompileOptions;
use crate::params::ParamBlock;
use crate::tensor::{DType, TensorArg};
use coda_manifest::manifest::{BlockManifest, KernelSpec};
use coda_manifest::size::eval_str;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Everything needed to launch a block's kernels for one set of bindings:
/// the launches and the buffers the runtime allocated (freed on drop).
#[derive(Debug)]
pub struct Prepared {
    pub(super) launches: Vec<Launch>,
    /// Counters in a caller's workspace, zeroed on the stream before the
    /// first kernel: (address, bytes).
    pub(super) zero_first: Vec<(u64, usize)>,
    /// The bindings' addresses, then the workspace's (0: none), that the
    /// launches were filled with: a CUDA graph holding these launches is
    /// found by them without filling the plan again (`graph.rs`).
    pub(super) bound: Vec<u64>,
    _owned: Vec<DeviceBuffer>,
}

/// One kernel launch.
#[derive(Debug)]
pub(super) struct Launch {
    /// Index into the executor's kernels.
    pub(super) kernel: usize,
    pub(super) cfg: LaunchConfig,
    pub(super) params: Vec<ParamBlock>,
}

pub(super) fn invalid(message: String) -> RuntimeError {
    RuntimeError::InvalidInput(message)
}

/// The value of a size expression. Most are a literal or a dim's name,
/// read without parsing.
pub(super) fn size(expr: &str, dims: &BTreeMap<String, i64>) -> Result<i64> {
    if let Ok(v) = expr.parse::<i64>() {
        return Ok(v);
    }
    if let Some(&v) = dims.get(expr) {
        return Ok(v);
    }
    eval_str(expr, dims).map_err(|e| invalid(e.to_string()))
}

pub(super) fn usize_of(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| invalid(format!("{what} is negative ({v})")))
}

/// The staging copy ([`crate::staging`]) of each staging buffer of
/// `manifest`, in manifest order: the executor's kernels after the
/// manifest's, named `copy_<tensor>` after the input or output the buffer
/// stands for. None when the block has no staging buffer; otherwise the
/// copy is compiled (through the kernel cache) and loaded once.
pub(super) fn staging_copies(device: &Device, manifest: &BlockManifest) -> Result<Vec<Loaded>> {
    let staging: Vec<_> = manifest.buffers.iter().filter(|b| b.role == "staging").collect();
    if staging.is_empty() {
        return Ok(Vec::new());
    }
    let options = CompileOptions::new(device.arch()).file_name(crate::staging::FILE);
    let compiled = Compiler::global()?.compile(crate::staging::SOURCE, &options)?;
    let module = device.load(&compiled)?;
    let mut copies = Vec::new();
    for b in staging {
        let entry = crate::staging::entry(b.dtype.parse::<DType>()?)?;
        let tensor = b.staging_of.as_deref().unwrap_or(&b.name);
        let spec = KernelSpec {
            name: format!("copy_{}", tensor.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_")),
            kind: "copy".into(),
            entry: entry.into(),
            file: crate::staging::FILE.into(),
            summary: format!("staging copy of {tensor} (only when it is not aligned)"),
            config: None,
            grid: [b.shape[0].clone(), "1".into(), "1".into()],
            block: [crate::staging::THREADS, 1, 1],
            smem_bytes: 0,
            persistent: false,
            tensor_maps: Vec::new(),
            args: Vec::new(),
        };
        copies.push(Loaded { spec, kernel: module.function(entry)? });
    }
    Ok(copies)
}

/// The addresses that fill a plan's launches: the bindings', then the
/// workspace's.
pub(super) fn bound(addresses: &[u64], base: u64) -> Vec<u64> {
    let mut bound = Vec::with_capacity(addresses.len() + 1);
    bound.extend_from_slice(addresses);
    bound.push(base);
    bound
}

/// Alignment of every buffer in a workspace: TMA needs 16 bytes, and 256
/// keeps each buffer on its own cache-line group as `cudaMalloc` would.
pub const WORKSPACE_ALIGN: usize = 256;

impl BlockExecutor {
    /// Checks the bindings and builds every launch (see the module docs),
    /// allocating the buffers the host owns with [`DeviceBuffer::alloc`].
    pub fn prepare(
        &self,
        device: &Device,
        dims: &BTreeMap<String, i64>,
        bindings: &BTreeMap<String, TensorArg>,
    ) -> Result<Prepared> {
        let (plan, addresses) = self.plan(device, dims, bindings)?;
        let mut owned = Vec::new();
        let mut base = 0;
        if plan.workspace_bytes() > 0 {
            let mut region = DeviceBuffer::alloc(device, plan.workspace_bytes())?;
            // A grid reduction's ticket counter must be 0 before the first
            // launch; each launch leaves it 0 again.
            if !plan.counters.is_empty() {
                region.zero()?;
            }
            base = region.ptr();
            owned.push(region);
        }
        let launches = plan.fill(&addresses, base)?;
        Ok(Prepared { launches, zero_first: Vec::new(), bound: bound(&addresses, base), _owned: owned })
    }

    /// [`Self::prepare`] with the host's buffers (scratch, partials,
    /// counters, and the staging copies of inputs that a GEMM cannot read
    /// in place) in one region that the caller allocates: `alloc(bytes)` is
    /// called once, when the block needs any, and returns the region's
    /// address. A PyTorch binding allocates it from its caching allocator.
    /// Counters are zeroed on the stream by [`Self::launch`], before the
    /// kernels.
    ///
    /// # Safety
    /// The address `alloc` returns must point to at least `bytes` bytes of
    /// device memory of `device`, aligned to [`WORKSPACE_ALIGN`] bytes, that
    /// stay valid and unused by anything else until the launched work has
    /// finished.
    pub unsafe fn prepare_with(
        &self,
        device: &Device,
        dims: &BTreeMap<String, i64>,
        bindings: &BTreeMap<String, TensorArg>,
        alloc: &mut dyn FnMut(usize) -> Result<u64>,
    ) -> Result<Prepared> {
        let (plan, addresses) = self.plan(device, dims, bindings)?;
        // SAFETY: the caller's contract for `alloc` is this method's.
        unsafe { self.prepare_planned(&plan, &addresses, alloc) }
    }

    /// [`Self::prepare_with`] for a plan the caller keeps from an earlier
    /// [`Self::plan`], with the bindings at new `addresses` (manifest
    /// order), which must [fit](Plan::fits) it: a caller that binds tensors
    /// of one shape call after call checks them once.
    ///
    /// # Safety
    /// As for [`Self::prepare_with`]; and each address must point to its
    /// binding's tensor, of the shape and strides the plan was made for.
    pub unsafe fn prepare_planned(
        &self,
        plan: &Plan,
        addresses: &[u64],
        alloc: &mut dyn FnMut(usize) -> Result<u64>,
    ) -> Result<Prepared> {
        // SAFETY: the caller's contract for `alloc` is this method's.
        let base = unsafe { self.workspace(plan, addresses, alloc) }?;
        self.prepared_at(plan, addresses, base)
    }

    /// Checks that `addresses` fit `plan` and returns the address of the
    /// workspace region that `alloc` gives the plan (0: it needs none).
    ///
    /// # Safety
    /// As for [`Self::prepare_with`].
    pub(super) unsafe fn workspace(
        &self,
        plan: &Plan,
        addresses: &[u64],
        alloc: &mut dyn FnMut(usize) -> Result<u64>,
    ) -> Result<u64> {
        if !plan.fits(addresses) {
            return Err(invalid("the tensors' addresses do not fit the plan's alignment".into()));
        }
        if plan.workspace_bytes() == 0 {
            return Ok(0);
        }
        let base = alloc(plan.workspace_bytes())?;
        if base % WORKSPACE_ALIGN as u64 != 0 {
            return Err(invalid(format!("workspace at {base:#x} is not {WORKSPACE_ALIGN}-byte aligned")));
        }
        Ok(base)
    }

    /// The launches of `plan` with the bindings at `addresses` and the
    /// workspace at `base`, whose counters are zeroed before them.
    pub(super) fn prepared_at(&self, plan: &Plan, addresses: &[u64], base: u64) -> Result<Prepared> {
        let launches = plan.fill(addresses, base)?;
        Ok(Prepared { launches, zero_first: plan.counters_at(base), bound: bound(addresses, base), _owned: Vec::new() })
    }

    /// Checks the dims and every binding, and returns the plan for their
    /// shape (built on first use, then cached) with each binding's address
    /// in manifest order.
    pub fn plan(
        &self,
        device: &Device,
        dims: &BTreeMap<String, i64>,
        bindings: &BTreeMap<String, TensorArg>,
    ) -> Result<(Arc<Plan>, Vec<u64>)> {
        let mut key = PlanKey { dims: Vec::with_capacity(self.manifest.dims.len()), bindings: Vec::new() };
        for name in &self.manifest.dims {
            match dims.get(name) {
                Some(v) if *v > 0 => key.dims.push(*v),
                Some(v) => return Err(invalid(format!("dimension `{name}` must be positive, got {v}"))),
                None => return Err(invalid(format!("dimension `{name}` is not bound"))),
            }
        }
        let mut addresses = Vec::new();
        for b in self.manifest.buffers.iter().filter(|b| b.role == "input" || b.role == "output") {
            let arg_err = |message: String| RuntimeError::Argument { name: b.name.clone(), message };
            let t = bindings.get(&b.name).ok_or_else(|| arg_err(format!("missing: expected a {} tensor", b.dtype)))?;
            key.bindings.push(Binding::of(b, t)?);
            addresses.push(t.ptr);
        }
        let plan = self.cached_plan(&key, dims, device.info().multiprocessors)?;
        Ok((plan, addresses))
    }

    /// The cached plan for `key`, built on first use.
    fn cached_plan(&self, key: &PlanKey, dims: &BTreeMap<String, i64>, sms: u32) -> Result<Arc<Plan>> {
        let mut plans = self.plans.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(plan) = plans.get(key) {
            return Ok(plan.clone());
        }
        let plan = Arc::new(Plan::build(&self.manifest, key, dims, sms)?);
        // A training loop binds few shapes; a caller cycling through many
        // rebuilds plans rather than growing the cache without bound.
        if plans.len() >= 32 {
            plans.clear();
        }
        plans.insert(key.clone(), plan.clone());
        Ok(plan)
    }
}
