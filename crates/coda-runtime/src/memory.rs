//! Owned device memory: [`DeviceBuffer`].
//!
//! Buffer operations are synchronous and safe to mix with work on any
//! stream: each one first waits for the whole context (so kernels launched
//! on other streams, e.g. PyTorch's, have finished), then runs on the
//! device's stream and waits for it.

use std::sync::Arc;

use cudarc::driver::sys::CUstream;
use cudarc::driver::{result, sys, CudaContext, CudaStream};

use crate::convert;
use crate::device::Device;
use crate::error::{CudaResultExt, Result, RuntimeError};
use crate::tensor::{DType, TensorArg};

/// An owned allocation of device memory, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: u64,
    bytes: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

impl DeviceBuffer {
    /// Allocates `bytes` bytes (contents undefined). Zero bytes gives a null
    /// pointer and no allocation.
    pub fn alloc(device: &Device, bytes: usize) -> Result<DeviceBuffer> {
        device.bind()?;
        let ptr = if bytes == 0 {
            0
        } else {
            // SAFETY: the device's context is current; the allocation is
            // owned by the returned value and freed exactly once in Drop.
            unsafe { result::malloc_sync(bytes) }.cuda("cuMemAlloc")?
        };
        Ok(DeviceBuffer { ptr, bytes, ctx: device.ctx.clone(), stream: device.stream().inner.clone() })
    }

    /// Allocates and uploads `data`.
    pub fn from_bytes(device: &Device, data: &[u8]) -> Result<DeviceBuffer> {
        let mut b = Self::alloc(device, data.len())?;
        b.upload(data)?;
        Ok(b)
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// True for a zero-byte buffer.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// A contiguous [`TensorArg`] view of this buffer; fails if the shape
    /// needs more bytes than the buffer has.
    pub fn as_tensor(&self, dtype: DType, shape: &[usize]) -> Result<TensorArg> {
        let t = TensorArg::contiguous(dtype, shape.to_vec(), self.ptr);
        if t.span_bytes() > self.bytes {
            return Err(RuntimeError::InvalidInput(format!(
                "{} needs {} bytes but the buffer has {}",
                t.describe(),
                t.span_bytes(),
                self.bytes
            )));
        }
        Ok(t)
    }

    fn begin(&self) -> Result<CUstream> {
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        self.ctx.synchronize().cuda("cuCtxSynchronize")?;
        Ok(self.stream.cu_stream())
    }

    fn finish(&self) -> Result<()> {
        self.stream.synchronize().cuda("cuStreamSynchronize")
    }

    fn check_len(&self, what: &str, len: usize) -> Result<()> {
        if len != self.bytes {
            return Err(RuntimeError::InvalidInput(format!(
                "{what} of {len} bytes into a buffer of {} bytes",
                self.bytes
            )));
        }
        Ok(())
    }

    /// Copies `data` (exactly [`Self::len_bytes`] bytes) to the device.
    pub fn upload(&mut self, data: &[u8]) -> Result<()> {
        self.check_len("upload", data.len())?;
        if self.bytes == 0 {
            return Ok(());
        }
        let stream = self.begin()?;
        // SAFETY: `self.ptr` is a live allocation of `data.len()` bytes;
        // `data` stays borrowed until `finish()` waits for the copy.
        unsafe { result::memcpy_htod_async(self.ptr, data, stream) }.cuda("cuMemcpyHtoDAsync")?;
        self.finish()
    }

    /// Copies the whole buffer to the host.
    pub fn download(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.bytes];
        if self.bytes == 0 {
            return Ok(out);
        }
        let stream = self.begin()?;
        // SAFETY: `out` has `self.bytes` bytes and stays alive (and is not
        // read) until `finish()` waits for the copy.
        unsafe { result::memcpy_dtoh_async(&mut out, self.ptr, stream) }.cuda("cuMemcpyDtoHAsync")?;
        self.finish()?;
        Ok(out)
    }

    /// Sets every byte to `value` (`cuMemsetD8`).
    pub fn fill_bytes(&mut self, value: u8) -> Result<()> {
        if self.bytes == 0 {
            return Ok(());
        }
        let stream = self.begin()?;
        // SAFETY: `self.ptr` is a live allocation of `self.bytes` bytes.
        unsafe { result::memset_d8_async(self.ptr, value, self.bytes, stream) }.cuda("cuMemsetD8Async")?;
        self.finish()
    }

    /// Sets every byte to zero.
    pub fn zero(&mut self) -> Result<()> {
        self.fill_bytes(0)
    }

    /// Fills the buffer with the NaN pattern of `dtype`
    /// ([`convert::nan_pattern`]; `i32::MIN` for `i32`) so that elements a
    /// kernel forgets to write are easy to spot. The size must be a multiple
    /// of the element size.
    pub fn poison_nan(&mut self, dtype: DType) -> Result<()> {
        let elem = dtype.size_bytes();
        if self.bytes % elem != 0 {
            return Err(RuntimeError::InvalidInput(format!(
                "buffer of {} bytes is not a whole number of {dtype} elements",
                self.bytes
            )));
        }
        if self.bytes == 0 {
            return Ok(());
        }
        let p = convert::nan_pattern(dtype);
        let stream = self.begin()?;
        let n = self.bytes / elem;
        let status = if elem == 2 {
            // SAFETY: live allocation of `n` 2-byte elements; cuMemAlloc
            // returns 256-byte aligned pointers.
            unsafe { sys::cuMemsetD16Async(self.ptr, u16::from_le_bytes([p[0], p[1]]), n, stream) }
        } else {
            let v = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            // SAFETY: live allocation of `n` 4-byte elements, 256-byte aligned.
            unsafe { sys::cuMemsetD32Async(self.ptr, v, n, stream) }
        };
        status.result().cuda("cuMemsetD16/D32Async")?;
        self.finish()
    }
}

impl Device {
    /// Allocates `bytes` bytes on this device (see [`DeviceBuffer::alloc`]).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        DeviceBuffer::alloc(self, bytes)
    }

    /// Allocates and uploads `data`.
    pub fn upload(&self, data: &[u8]) -> Result<DeviceBuffer> {
        DeviceBuffer::from_bytes(self, data)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        // Errors cannot be reported from Drop; a failing context already
        // reported them to whoever synchronised it last.
        let _ = self.ctx.bind_to_thread();
        let _ = self.ctx.synchronize();
        // SAFETY: `self.ptr` came from cuMemAlloc in `alloc`, is freed only
        // here, and all work that might use it has finished (synchronised
        // above).
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}
