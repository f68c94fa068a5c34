//! CUDA devices and streams.
//!
//! [`Device::open`] first checks that `libcuda` can be loaded (see
//! [`crate::loader`]), then retains the device's *primary* context — the
//! one PyTorch and the CUDA runtime use, so device pointers from those
//! libraries are valid here — and creates a non-blocking stream for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUdevice_attribute};
use cudarc::driver::{result, CudaContext, CudaStream};

use crate::arch::Arch;
use crate::error::{CudaResultExt, Result, RuntimeError};
use crate::launch::Module;
use crate::loader;

/// Static facts about a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Arch to compile for ([`Arch::from_compute_capability`]).
    pub arch: Arch,
    /// Total global memory in bytes.
    pub total_memory: usize,
    /// Number of SMs.
    pub multiprocessors: u32,
    /// Largest dynamic + static shared memory a block may opt in to.
    pub max_shared_memory_per_block_optin: usize,
    /// `cuDriverGetVersion()`, e.g. 13000.
    pub driver_version: i32,
}

/// A stream on a device. Work on it is asynchronous to the host.
#[derive(Debug, Clone)]
pub struct Stream {
    pub(crate) inner: Arc<CudaStream>,
}

impl Stream {
    /// Blocks until all work on the stream has finished; reports errors of
    /// earlier asynchronous work (e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`).
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize().cuda("cuStreamSynchronize")
    }

    /// The raw `CUstream` handle as an integer (0 is the legacy default stream).
    pub fn raw_handle(&self) -> u64 {
        self.inner.cu_stream() as u64
    }

    /// Enqueues `bytes` zero bytes at device address `ptr`
    /// (`cuMemsetD8Async`).
    ///
    /// # Safety
    /// `[ptr, ptr + bytes)` must be device memory of this stream's context
    /// that nothing else uses until the memset has run.
    pub(crate) unsafe fn zero_async(&self, ptr: u64, bytes: usize) -> Result<()> {
        self.inner.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: forwarded to the caller (see the function's contract).
        unsafe { result::memset_d8_async(ptr, 0, bytes, self.inner.cu_stream()) }.cuda("cuMemsetD8Async")
    }

    /// Whether the stream is being captured into a CUDA graph (work
    /// enqueued on it is then recorded, not run).
    pub fn is_capturing(&self) -> Result<bool> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the stream is live (we hold it); `status` is a valid
        // out-pointer.
        unsafe { sys::cuStreamIsCapturing(self.inner.cu_stream(), &mut status) }
            .result()
            .cuda("cuStreamIsCapturing")?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Wraps a stream owned by someone else (e.g. PyTorch's current stream).
    /// Dropping the wrapper does not destroy the stream.
    ///
    /// # Safety
    /// `handle` must be a valid `CUstream` of `device`'s primary context (or 0
    /// for the legacy default stream) and must outlive the returned value and
    /// all work launched on it through this crate.
    pub unsafe fn from_raw_handle(device: &Device, handle: u64) -> Stream {
        // SAFETY: forwarded to the caller (see the function's contract).
        let inner = unsafe { device.ctx.wrap_borrowed_stream(handle as _) };
        Stream { inner }
    }
}

/// An opened CUDA device: primary context, a stream, and loaded modules.
#[derive(Debug)]
pub struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    stream: Stream,
    info: DeviceInfo,
    pub(crate) modules: Mutex<HashMap<[u8; 32], Arc<Module>>>,
}

fn attribute(ctx: &CudaContext, attr: CUdevice_attribute, op: &'static str) -> Result<i32> {
    ctx.attribute(attr).cuda(op)
}

impl Device {
    /// Number of visible CUDA devices (0 is an error-free answer only when
    /// a driver is present; without one this returns [`RuntimeError::NoDriver`]).
    pub fn count() -> Result<usize> {
        loader::load_driver()?;
        result::init().cuda("cuInit")?;
        let n = result::device::get_count().cuda("cuDeviceGetCount")?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Opens device `ordinal`: checks for the driver, retains the primary
    /// context, creates a stream and reads the device's properties.
    pub fn open(ordinal: usize) -> Result<Device> {
        let driver = loader::load_driver()?;
        let count = Self::count()?;
        if ordinal >= count {
            return Err(RuntimeError::NoSuchDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).cuda("cuDevicePrimaryCtxRetain")?;
        // SAFETY: event tracking orders cudarc's own `CudaSlice`s across
        // streams; this crate allocates none (its buffers are raw device
        // pointers with explicit streams). Without it, creating the first
        // stream does not synchronize the context, which a caller sharing
        // it (PyTorch) must not see.
        unsafe { ctx.disable_event_tracking() };
        let stream = Stream { inner: ctx.new_stream().cuda("cuStreamCreate")? };
        let (major, minor) = ctx.compute_capability().cuda("cuDeviceGetAttribute")?;
        let (major, minor) = (major.max(0) as u32, minor.max(0) as u32);
        let sms = attribute(
            &ctx,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
        )?;
        let smem = attribute(
            &ctx,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
        )?;
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().cuda("cuDeviceGetName")?,
            compute_capability: (major, minor),
            arch: Arch::from_compute_capability(major, minor),
            total_memory: ctx.total_mem().cuda("cuDeviceTotalMem")?,
            multiprocessors: sms.max(0) as u32,
            max_shared_memory_per_block_optin: smem.max(0) as usize,
            driver_version: driver.version,
        };
        Ok(Device { ctx, stream, info, modules: Mutex::new(HashMap::new()) })
    }

    /// Static facts about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Device ordinal.
    pub fn ordinal(&self) -> usize {
        self.info.ordinal
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (u32, u32) {
        self.info.compute_capability
    }

    /// The arch kernels for this device are compiled for (9.0 → `sm_90a`).
    pub fn arch(&self) -> Arch {
        self.info.arch
    }

    /// The device's own stream, used by buffer operations.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Creates another non-blocking stream.
    pub fn new_stream(&self) -> Result<Stream> {
        Ok(Stream { inner: self.ctx.new_stream().cuda("cuStreamCreate")? })
    }

    /// Blocks until all work on the device (all streams of the context) has
    /// finished.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.synchronize().cuda("cuCtxSynchronize")
    }

    /// Free and total device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.ctx.mem_get_info().cuda("cuMemGetInfo")
    }

    /// Makes the device's context current on the calling thread.
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")
    }
}
