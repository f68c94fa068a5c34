//! Loading CUBINs as modules and launching their kernels with by-value
//! struct arguments ([`ParamBlock`]).
//!
//! Modules are cached per device by the sha256 of the CUBIN, functions per
//! module by name. A launch asking for more than 48 KiB of dynamic shared
//! memory first raises the function's
//! `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`. Arguments go through
//! `cuLaunchKernel`'s `kernelParams`: one pointer per struct, to its bytes.
//!
//! Launching is a safe function although kernels dereference the raw device
//! pointers inside the structs: the runtime cannot check them. Bad device
//! pointers surface as CUDA errors (e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`) on the
//! next synchronisation, which then poison the context.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUfunction_attribute};
use cudarc::driver::{result, CudaContext, CudaFunction, CudaModule};
use sha2::{Digest, Sha256};

use crate::device::{Device, Stream};
use crate::error::{CudaResultExt, Result, RuntimeError};
use crate::nvrtc::CompiledKernel;
use crate::params::ParamBlock;

/// Dynamic shared memory a kernel may use without opting in.
pub const DEFAULT_MAX_DYNAMIC_SMEM: u32 = 48 * 1024;
/// Largest total size of kernel parameters (Volta+ with CUDA 12.1+).
pub const MAX_PARAM_BYTES: usize = 32764;

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub smem_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D launch of `blocks` blocks of `threads` threads.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        LaunchConfig { grid: (blocks, 1, 1), block: (threads, 1, 1), smem_bytes: 0 }
    }

    /// Sets the dynamic shared memory.
    pub fn with_smem(mut self, bytes: u32) -> Self {
        self.smem_bytes = bytes;
        self
    }
}

/// A loaded CUBIN.
#[derive(Debug)]
pub struct Module {
    inner: Arc<CudaModule>,
    ctx: Arc<CudaContext>,
    max_smem_optin: usize,
    functions: Mutex<HashMap<String, Kernel>>,
}

/// A kernel function of a [`Module`]; cheap to clone.
#[derive(Debug, Clone)]
pub struct Kernel {
    name: Arc<str>,
    func: CudaFunction,
    ctx: Arc<CudaContext>,
    max_smem_optin: usize,
    /// Size in bytes of each kernel parameter, from the driver.
    param_sizes: Arc<[usize]>,
    /// Dynamic smem limit currently set on the function.
    smem_limit: Arc<AtomicU32>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Device {
    /// Loads a compiled kernel's CUBIN (cached by content).
    pub fn load(&self, kernel: &CompiledKernel) -> Result<Arc<Module>> {
        self.load_cubin(&kernel.cubin)
    }

    /// Loads a CUBIN image (cached by content).
    pub fn load_cubin(&self, cubin: &[u8]) -> Result<Arc<Module>> {
        if cubin.is_empty() {
            return Err(RuntimeError::InvalidInput("empty CUBIN".into()));
        }
        let key: [u8; 32] = Sha256::digest(cubin).into();
        if let Some(m) = lock(&self.modules).get(&key) {
            return Ok(m.clone());
        }
        let image = cudarc::nvrtc::Ptx::from_binary(cubin.to_vec());
        let inner = self.ctx.load_module(image).cuda("cuModuleLoadData")?;
        let module = Arc::new(Module {
            inner,
            ctx: self.ctx.clone(),
            max_smem_optin: self.info().max_shared_memory_per_block_optin,
            functions: Mutex::new(HashMap::new()),
        });
        Ok(lock(&self.modules).entry(key).or_insert(module).clone())
    }
}

impl Module {
    /// The kernel called `name` (an `extern "C"` name, or a mangled one).
    pub fn function(&self, name: &str) -> Result<Kernel> {
        if name.is_empty() || name.contains('\0') {
            return Err(RuntimeError::InvalidInput(format!("invalid kernel name {name:?}")));
        }
        if let Some(k) = lock(&self.functions).get(name) {
            return Ok(k.clone());
        }
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        let func = self.inner.load_function(name).cuda("cuModuleGetFunction")?;
        let param_sizes = param_sizes(&func)?;
        let kernel = Kernel {
            name: Arc::from(name),
            param_sizes: param_sizes.into(),
            func,
            ctx: self.ctx.clone(),
            max_smem_optin: self.max_smem_optin,
            smem_limit: Arc::new(AtomicU32::new(DEFAULT_MAX_DYNAMIC_SMEM)),
        };
        Ok(lock(&self.functions).entry(name.to_string()).or_insert(kernel).clone())
    }
}

/// Parameter sizes of `func`: `cuFuncGetParamInfo` for index 0, 1, ...
/// until the driver answers `CUDA_ERROR_INVALID_VALUE` (index past the end).
fn param_sizes(func: &CudaFunction) -> Result<Vec<usize>> {
    let f = func.cu_function();
    let mut sizes = Vec::new();
    // A kernel has at most MAX_PARAM_BYTES / 1 parameters.
    for i in 0..=MAX_PARAM_BYTES {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `f` is a live function handle; both out-pointers are valid
        // for writes; an out-of-range index is reported, not undefined.
        let status = unsafe { sys::cuFuncGetParamInfo(f, i, &mut offset, &mut size) };
        match status {
            sys::CUresult::CUDA_SUCCESS => sizes.push(size),
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Ok(sizes),
            other => return other.result().map(|()| sizes).cuda("cuFuncGetParamInfo"),
        }
    }
    Ok(sizes)
}

impl Kernel {
    /// Size in bytes of each parameter the kernel declares.
    pub fn param_sizes(&self) -> &[usize] {
        &self.param_sizes
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Static shared memory the kernel declares, in bytes.
    pub fn static_smem_bytes(&self) -> Result<usize> {
        self.attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
    }

    /// Registers per thread.
    pub fn num_regs(&self) -> Result<usize> {
        self.attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)
    }

    fn attribute(&self, attr: CUfunction_attribute) -> Result<usize> {
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: the function handle is alive (we hold its module).
        let v = unsafe { result::function::get_function_attribute(self.func.cu_function(), attr) }
            .cuda("cuFuncGetAttribute")?;
        Ok(v.max(0) as usize)
    }

    /// Raises the dynamic shared memory limit when `bytes` exceeds it.
    fn ensure_smem(&self, bytes: u32) -> Result<()> {
        if bytes <= self.smem_limit.load(Ordering::Acquire) {
            return Ok(());
        }
        let static_smem = self.static_smem_bytes()?;
        if bytes as usize + static_smem > self.max_smem_optin {
            return Err(RuntimeError::InvalidInput(format!(
                "kernel `{}` asks for {bytes} bytes of dynamic shared memory (+{static_smem} static) but the device allows at most {} per block",
                self.name, self.max_smem_optin
            )));
        }
        // SAFETY: the function handle is alive; the context is current
        // (bound in `static_smem_bytes`).
        unsafe {
            result::function::set_function_attribute(
                self.func.cu_function(),
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        }
        .cuda("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")?;
        self.smem_limit.fetch_max(bytes, Ordering::AcqRel);
        Ok(())
    }

    /// Launches the kernel on `stream` with one by-value struct argument per
    /// [`ParamBlock`], in order. Asynchronous: errors of the kernel itself
    /// show up at the next synchronisation.
    pub fn launch(&self, stream: &Stream, cfg: &LaunchConfig, params: &[&ParamBlock]) -> Result<()> {
        let mut args = self.arguments(cfg, params)?;
        let mut ptrs = args.pointers();
        let (g, b) = (cfg.grid, cfg.block);
        // SAFETY: the function belongs to a loaded module of this context
        // (current, bound by `arguments`); `ptrs` holds exactly one pointer
        // per kernel parameter (count and sizes checked against the driver),
        // each to `size()` bytes laid out by the documented C struct rules,
        // alive until cuLaunchKernel returns (it copies them). Device
        // pointers inside are the caller's responsibility (module docs).
        unsafe {
            result::launch_kernel(self.func.cu_function(), g, b, cfg.smem_bytes, stream.inner.cu_stream(), &mut ptrs)
        }
        .cuda("cuLaunchKernel")
    }

    /// Checks a launch of the kernel with `params` (a non-empty grid, the
    /// parameter sizes the driver reports, their total), binds the context
    /// and raises the shared memory limit for `cfg`, and returns the
    /// arguments as the driver takes them.
    pub(crate) fn arguments(&self, cfg: &LaunchConfig, params: &[&ParamBlock]) -> Result<Arguments> {
        let (g, b) = (cfg.grid, cfg.block);
        if [g.0, g.1, g.2, b.0, b.1, b.2].contains(&0) {
            return Err(RuntimeError::InvalidInput(format!(
                "launch of `{}` with an empty grid {g:?} or block {b:?}",
                self.name
            )));
        }
        let given: Vec<usize> = params.iter().map(|p| p.size()).collect();
        if given != *self.param_sizes {
            return Err(RuntimeError::InvalidInput(format!(
                "launch of `{}`: the kernel takes parameters of sizes {:?} bytes but the ParamBlocks have sizes {given:?}",
                self.name, self.param_sizes
            )));
        }
        let total: usize = params.iter().map(|p| p.size()).sum();
        if total > MAX_PARAM_BYTES {
            return Err(RuntimeError::InvalidInput(format!(
                "launch of `{}` with {total} bytes of parameters (max {MAX_PARAM_BYTES})",
                self.name
            )));
        }
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")?;
        self.ensure_smem(cfg.smem_bytes)?;
        Ok(Arguments { words: params.iter().map(|p| words(&p.to_bytes())).collect() })
    }

    /// The driver's handle of the kernel.
    pub(crate) fn cu_function(&self) -> sys::CUfunction {
        self.func.cu_function()
    }
}

/// A launch's arguments: each struct's bytes in 8-byte aligned words, as
/// `kernelParams` points to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arguments {
    words: Vec<Vec<u64>>,
}

impl Arguments {
    /// One pointer per parameter, to its words; valid while `self` is
    /// neither moved nor changed.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        self.words.iter_mut().map(|w| w.as_mut_ptr().cast::<c_void>()).collect()
    }
}

/// `bytes` in native-endian 8-byte words, the last one zero-padded.
fn words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(8)
        .map(|chunk| {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            u64::from_ne_bytes(buf)
        })
        .collect()
}
