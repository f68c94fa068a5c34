//! `Executor`: one block's kernels on one device, launched on the caller's
//! stream with every buffer in memory the caller allocated.
//!
//! The Python layer allocates outputs with `torch.empty` and, through the
//! `alloc` callback of [`Executor::run`], the one workspace region that
//! holds scratch, partial, counter and staging buffers, so all memory comes
//! from PyTorch's caching allocator and is ordered on its current stream.
//! Nothing here synchronizes: launches are enqueued on the stream handle
//! the caller passes (PyTorch's current stream), in the device's primary
//! context, which PyTorch shares.

use crate::errors::{internal, runtime};
use coda::{Checked, CompileOptions};
use coda_runtime::exec::{BlockExecutor, Plan};
use coda_runtime::{DType, Device, Stream, TensorArg};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Devices opened so far, by ordinal; each retains the primary context once.
fn device(ordinal: usize) -> PyResult<Arc<Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<Device>>>> = OnceLock::new();
    let devices = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut devices = devices.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(d) = devices.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Arc::new(Device::open(ordinal).map_err(runtime)?);
    devices.insert(ordinal, d.clone());
    Ok(d)
}

/// The number of CUDA devices the driver sees (an error without a driver).
#[pyfunction]
pub(crate) fn device_count() -> PyResult<usize> {
    Device::count().map_err(runtime)
}

/// One input or output the caller binds, in signature order.
#[derive(Debug)]
struct Binding {
    name: String,
    dtype: DType,
}

/// A block compiled and loaded on one device.
#[pyclass(frozen, module = "codac._native")]
pub(crate) struct Executor {
    device: Arc<Device>,
    executor: BlockExecutor,
    bindings: Vec<Binding>,
    compile_seconds: f64,
    compiled: usize,
}

impl Executor {
    /// Generates, compiles and loads the one block of `program`.
    pub(crate) fn build(py: Python<'_>, program: Checked, ordinal: usize) -> PyResult<Executor> {
        let device = device(ordinal)?;
        let block = program.module.blocks.first().ok_or_else(|| internal("an empty program"))?;
        let mut bindings = Vec::new();
        for t in block.params.iter().chain(block.outputs.iter().map(|o| &o.tensor)) {
            let dtype: DType = t.dtype.to_string().parse().map_err(runtime)?;
            bindings.push(Binding { name: t.name.clone(), dtype });
        }
        let arch = device.arch().to_string();
        let start = Instant::now();
        let (executor, compiled) = py.detach(|| -> PyResult<(BlockExecutor, usize)> {
            let options = CompileOptions::for_arch(arch);
            let generated = coda::compile(&program, &options).map_err(|e| PyValueError::new_err(e.to_string()))?;
            let manifest = generated.manifest.blocks.first().ok_or_else(|| internal("no manifest entry"))?;
            let executor = BlockExecutor::new(&device, manifest, &generated.kernels).map_err(runtime)?;
            let compiled = executor.compile_report().iter().filter(|k| !k.cache_hit).count();
            Ok((executor, compiled))
        })?;
        let compile_seconds = start.elapsed().as_secs_f64();
        Ok(Executor { device, executor, bindings, compile_seconds, compiled })
    }
}

#[pymethods]
impl Executor {
    /// Seconds spent generating, compiling and loading the kernels.
    #[getter]
    fn compile_seconds(&self) -> f64 {
        self.compile_seconds
    }

    /// How many kernels NVRTC compiled (the rest came from the disk cache).
    #[getter]
    fn compiled_kernels(&self) -> usize {
        self.compiled
    }

    /// The kernels' short names and summaries, in launch order.
    fn kernels(&self) -> Vec<(String, String)> {
        self.executor.manifest().kernels.iter().map(|k| (k.name.clone(), k.summary.clone())).collect()
    }

    /// Checks a layout of the block's tensors and returns it, ready for
    /// [`Self::launch`]: `ptrs`, `shapes` and `strides` describe the inputs
    /// then the outputs, in signature order, as PyTorch does (strides in
    /// elements), for one call; later calls with tensors of the same
    /// dtypes, shapes and strides launch with that layout and their own
    /// addresses, checked no further.
    fn layout(
        &self,
        dims: BTreeMap<String, i64>,
        ptrs: Vec<u64>,
        shapes: Vec<Vec<usize>>,
        strides: Vec<Vec<isize>>,
    ) -> PyResult<Layout> {
        let n = self.bindings.len();
        if ptrs.len() != n || shapes.len() != n || strides.len() != n {
            return Err(PyValueError::new_err(format!(
                "expected {n} tensors (inputs then outputs), got {} pointers, {} shapes and {} strides",
                ptrs.len(),
                shapes.len(),
                strides.len()
            )));
        }
        let mut args = BTreeMap::new();
        for ((b, ptr), (shape, strides)) in self.bindings.iter().zip(ptrs).zip(shapes.into_iter().zip(strides)) {
            args.insert(b.name.clone(), TensorArg::new(b.dtype, shape, strides, ptr).map_err(runtime)?);
        }
        let (plan, _) = self.executor.plan(&self.device, &dims, &args).map_err(runtime)?;
        Ok(Layout { dims, args, plan: Mutex::new(plan) })
    }

    /// Launches the block on `stream` (a raw `CUstream`, PyTorch's current
    /// stream of this device) with its tensors at `ptrs` (inputs then
    /// outputs, in signature order), laid out as `layout` says, as one
    /// CUDA graph launch (kernel by kernel while the stream is captured).
    ///
    /// When the block needs host buffers, they go in one workspace region:
    /// the `kept` one (`(address, bytes)`, from an earlier call on this
    /// stream) if it is large enough and the stream is not being captured,
    /// else one that `alloc(nbytes, reusable)` returns: its device address,
    /// aligned to `WORKSPACE_ALIGN`, of memory kept alive until the work
    /// enqueued on `stream` has run (PyTorch's caching allocator does so
    /// for memory freed after the launch). `reusable` says whether the
    /// region may be passed as `kept` to later launches on this stream: not
    /// while the stream is captured, since a captured graph may be replayed
    /// on another stream, concurrently with them.
    #[pyo3(signature = (layout, ptrs, stream, alloc, kept = (0, 0)))]
    fn launch(
        &self,
        layout: &Layout,
        ptrs: Vec<u64>,
        stream: u64,
        alloc: Bound<'_, PyAny>,
        kept: (u64, usize),
    ) -> PyResult<()> {
        let plan = layout.plan_for(self, &ptrs)?;
        // SAFETY: `stream` is the caller's live stream of this device's
        // primary context; the wrapper does not own or destroy it.
        let stream = unsafe { Stream::from_raw_handle(&self.device, stream) };
        let capturing = stream.is_capturing().map_err(runtime)?;
        let mut callback_error = None;
        let mut alloc = |bytes: usize| -> coda_runtime::Result<u64> {
            if !capturing && kept.0 != 0 && bytes <= kept.1 {
                return Ok(kept.0);
            }
            match alloc.call1((bytes, !capturing)).and_then(|ptr| ptr.extract::<u64>()) {
                Ok(ptr) => Ok(ptr),
                Err(e) => {
                    callback_error = Some(e);
                    Err(coda_runtime::RuntimeError::InvalidInput("the workspace allocation failed".into()))
                }
            }
        };
        // SAFETY: `alloc` returns the address of a region of the requested
        // size on this device, kept alive by the caller until the stream
        // has run this work (the caller keeps a `kept` region alive as
        // long as it passes it), and `ptrs` are the addresses of tensors
        // of the layout's shapes and strides (the method's contract).
        let launched = unsafe { self.executor.launch_planned(&plan, &ptrs, &mut alloc, &stream, capturing) };
        if let Some(e) = callback_error {
            return Err(e);
        }
        launched.map_err(runtime)
    }
}

/// The dims, dtypes, shapes and strides of one call's tensors, checked, with
/// the launch plan for them.
#[pyclass(frozen, module = "codac._native")]
pub(crate) struct Layout {
    dims: BTreeMap<String, i64>,
    /// The first call's tensors, by name.
    args: BTreeMap<String, TensorArg>,
    /// The plan for the latest call's alignment of addresses.
    plan: Mutex<Arc<Plan>>,
}

#[pymethods]
impl Layout {
    /// Why the driver could not launch this layout's kernels as one CUDA
    /// graph, if it could not (they are then launched one by one).
    #[getter]
    fn graph_failure(&self) -> Option<String> {
        self.plan.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).graph_failure()
    }
}

impl Layout {
    /// The plan for tensors at `ptrs`: the last one when the addresses fit
    /// it, else the executor's plan for their alignment (a tensor that was
    /// 16-byte aligned and no longer is needs its staging copy).
    fn plan_for(&self, executor: &Executor, ptrs: &[u64]) -> PyResult<Arc<Plan>> {
        let mut plan = self.plan.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if plan.fits(ptrs) {
            return Ok(plan.clone());
        }
        if ptrs.len() != executor.bindings.len() {
            return Err(PyValueError::new_err(format!(
                "expected {} pointers (inputs then outputs), got {}",
                executor.bindings.len(),
                ptrs.len()
            )));
        }
        let mut args = self.args.clone();
        for (b, &ptr) in executor.bindings.iter().zip(ptrs) {
            if let Some(arg) = args.get_mut(&b.name) {
                arg.ptr = ptr;
            }
        }
        let (fresh, _) = executor.executor.plan(&executor.device, &self.dims, &args).map_err(runtime)?;
        *plan = fresh.clone();
        Ok(fresh)
    }
}
