//! Binding a block's buffers for one run: checking the caller's tensors,
//! allocating what the host owns, and building every launch.

use super::BlockExecutor;
use crate::device::Device;
use crate::error::{Result, RuntimeError};
use crate::launch::LaunchConfig;
use crate::memory::DeviceBuffer;
use crate::params::ParamBlock;
use crate::tensor::{DType, TensorArg};
use coda_cuda::manifest::{BufferSpec, FieldValue, KernelSpec, TensorMapSpec};
use coda_cuda::symexpr::eval_str;
use std::collections::{BTreeMap, BTreeSet};

/// Everything needed to launch a block's kernels for one set of bindings:
/// the launches and the buffers the runtime allocated (freed on drop).
#[derive(Debug)]
pub struct Prepared {
    pub(super) launches: Vec<Launch>,
    /// Counters in a caller's workspace, zeroed on the stream before the
    /// first kernel: (address, bytes).
    pub(super) zero_first: Vec<(u64, usize)>,
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

/// Address, leading dimension and element type of a bound buffer.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    ptr: u64,
    ld: i64,
    dtype: DType,
}

fn invalid(message: String) -> RuntimeError {
    RuntimeError::InvalidInput(message)
}

/// The value of a size expression. Most are a literal or a dim's name,
/// read without parsing: a block launch evaluates a hundred of them.
fn size(expr: &str, dims: &BTreeMap<String, i64>) -> Result<i64> {
    if let Ok(v) = expr.parse::<i64>() {
        return Ok(v);
    }
    if let Some(&v) = dims.get(expr) {
        return Ok(v);
    }
    eval_str(expr, dims).map_err(|e| invalid(e.to_string()))
}

fn usize_of(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| invalid(format!("{what} is negative ({v})")))
}

impl BlockExecutor {
    /// Checks the bindings and builds every launch (see the module docs),
    /// allocating the buffers the host owns with [`DeviceBuffer::alloc`].
    pub fn prepare(
        &self,
        device: &Device,
        dims: &BTreeMap<String, i64>,
        bindings: &BTreeMap<String, TensorArg>,
    ) -> Result<Prepared> {
        let mut owned = Vec::new();
        let (resolved, aliased) = self.resolve(dims, bindings, &mut |b, bytes| {
            let mut buffer = DeviceBuffer::alloc(device, bytes.max(16))?;
            // A grid reduction's ticket counter must be 0 before the first
            // launch; each launch leaves it 0 again.
            if b.role == "counter" {
                buffer.zero()?;
            }
            let ptr = buffer.ptr();
            owned.push(buffer);
            Ok(ptr)
        })?;
        let launches = self.build_launches(device, &resolved, &aliased, dims)?;
        Ok(Prepared { launches, zero_first: Vec::new(), _owned: owned })
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
        let mut layout = WorkspaceLayout::default();
        let mut counters = Vec::new();
        // Host buffers resolve to their offsets first, then move to the region.
        let (mut resolved, aliased) = self.resolve(dims, bindings, &mut |b, bytes| {
            let offset = layout.place(b, bytes)?;
            if b.role == "counter" {
                counters.push((offset, bytes));
            }
            Ok(offset as u64)
        })?;
        let mut zero_first = Vec::new();
        if layout.bytes > 0 {
            let base = alloc(layout.bytes)?;
            if base % WORKSPACE_ALIGN as u64 != 0 {
                return Err(invalid(format!("workspace at {base:#x} is not {WORKSPACE_ALIGN}-byte aligned")));
            }
            for (name, _) in &layout.buffers {
                if let Some(r) = resolved.get_mut(name) {
                    r.ptr += base;
                }
            }
            zero_first = counters.into_iter().map(|(offset, bytes)| (base + offset as u64, bytes)).collect();
        }
        let launches = self.build_launches(device, &resolved, &aliased, dims)?;
        Ok(Prepared { launches, zero_first, _owned: Vec::new() })
    }

    /// Resolves every buffer: the caller's tensors for inputs and outputs,
    /// the input itself for a staging buffer it can stand in for, and
    /// `place(buffer, bytes)` for the rest. Returns the resolved buffers and
    /// the staging buffers that alias their inputs.
    fn resolve(
        &self,
        dims: &BTreeMap<String, i64>,
        bindings: &BTreeMap<String, TensorArg>,
        place: &mut dyn FnMut(&BufferSpec, usize) -> Result<u64>,
    ) -> Result<(BTreeMap<String, Resolved>, BTreeSet<String>)> {
        for name in &self.manifest.dims {
            match dims.get(name) {
                Some(v) if *v > 0 => {}
                Some(v) => return Err(invalid(format!("dimension `{name}` must be positive, got {v}"))),
                None => return Err(invalid(format!("dimension `{name}` is not bound"))),
            }
        }
        let mut resolved: BTreeMap<String, Resolved> = BTreeMap::new();
        let mut aliased: BTreeSet<String> = BTreeSet::new();
        for b in &self.manifest.buffers {
            let r = match b.role.as_str() {
                "input" | "output" => bind_tensor(b, bindings, dims)?,
                "staging" => {
                    let src = b.staging_of.as_ref().and_then(|s| resolved.get(s).copied());
                    let src = src.ok_or_else(|| invalid(format!("staging buffer `{}` without its input", b.name)))?;
                    if src.ptr % 16 == 0 && src.ld % 8 == 0 {
                        aliased.insert(b.name.clone());
                        src
                    } else {
                        host_buffer(b, dims, place)?
                    }
                }
                _ => host_buffer(b, dims, place)?,
            };
            resolved.insert(b.name.clone(), r);
        }
        Ok((resolved, aliased))
    }

    /// Every launch, in order, but the copy kernels of staging buffers that
    /// alias their inputs.
    fn build_launches(
        &self,
        device: &Device,
        resolved: &BTreeMap<String, Resolved>,
        aliased: &BTreeSet<String>,
        dims: &BTreeMap<String, i64>,
    ) -> Result<Vec<Launch>> {
        let mut launches = Vec::new();
        for (index, loaded) in self.kernels.iter().enumerate() {
            if loaded.spec.when.as_ref().is_some_and(|w| aliased.contains(w)) {
                continue;
            }
            let sms = device.info().multiprocessors;
            let mut launch = build_launch(index, &loaded.spec, resolved, dims, sms)?;
            if loaded.spec.cluster > 1 {
                launch.cfg.grid.0 = cluster_grid(&loaded.kernel, &loaded.spec, &launch.cfg)?;
            }
            launches.push(launch);
        }
        Ok(launches)
    }
}

/// Alignment of every buffer in a workspace: TMA needs 16 bytes, and 256
/// keeps each buffer on its own cache-line group as `cudaMalloc` would.
pub const WORKSPACE_ALIGN: usize = 256;

/// Where the host-owned buffers of one run go in a single region of
/// memory ([`BlockExecutor::prepare_with`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct WorkspaceLayout {
    /// Bytes the region needs (0: the block needs no host buffer).
    bytes: usize,
    /// Each buffer's name and offset, in manifest order.
    buffers: Vec<(String, usize)>,
}

impl WorkspaceLayout {
    /// Appends a buffer of `bytes` bytes; returns its offset.
    fn place(&mut self, b: &BufferSpec, bytes: usize) -> Result<usize> {
        let offset = self.bytes.next_multiple_of(WORKSPACE_ALIGN);
        self.bytes =
            offset.checked_add(bytes.max(16)).ok_or_else(|| invalid(format!("buffer `{}` is too large", b.name)))?;
        self.buffers.push((b.name.clone(), offset));
        Ok(offset)
    }
}

/// Checks a caller's tensor against an input or output buffer.
fn bind_tensor(
    b: &BufferSpec,
    bindings: &BTreeMap<String, TensorArg>,
    dims: &BTreeMap<String, i64>,
) -> Result<Resolved> {
    let dtype: DType = b.dtype.parse()?;
    let rows = usize_of(size(&b.shape[0], dims)?, "rows")?;
    let cols = usize_of(size(&b.shape[1], dims)?, "columns")?;
    let shape = match b.rank {
        0 => vec![],
        1 => vec![rows * cols],
        _ => vec![rows, cols],
    };
    let arg_err = |message: String| RuntimeError::Argument { name: b.name.clone(), message };
    let t = bindings
        .get(&b.name)
        .ok_or_else(|| arg_err(format!("missing: expected {}", crate::tensor::describe(dtype, &shape))))?;
    t.expect(&b.name, dtype, &shape)?;
    t.expect_aligned(&b.name, dtype.size_bytes() as u64)?;
    let ld = if b.rank < 2 {
        t.expect_contiguous(&b.name)?;
        cols as i64
    } else {
        let (row_stride, col_stride) = (t.strides[0], t.strides[1]);
        if cols > 1 && col_stride != 1 {
            return Err(arg_err(format!("expected a unit column stride, got strides {:?}", t.strides)));
        }
        if rows > 1 && (row_stride < cols as isize || row_stride <= 0) {
            return Err(arg_err(format!("row stride {row_stride} is smaller than the {cols} columns")));
        }
        if rows > 1 {
            row_stride as i64
        } else {
            cols as i64
        }
    };
    Ok(Resolved { ptr: t.ptr, ld, dtype })
}

/// A buffer the host owns (`rows * ld` elements), put where `place` says.
fn host_buffer(
    b: &BufferSpec,
    dims: &BTreeMap<String, i64>,
    place: &mut dyn FnMut(&BufferSpec, usize) -> Result<u64>,
) -> Result<Resolved> {
    let dtype: DType = b.dtype.parse()?;
    let rows = size(&b.shape[0], dims)?;
    let ld = match &b.ld {
        Some(ld) => size(ld, dims)?,
        None => size(&b.shape[1], dims)?,
    };
    let elements = rows.checked_mul(ld).ok_or_else(|| invalid(format!("buffer `{}` is too large", b.name)))?;
    let bytes = usize_of(elements, "buffer size")?
        .checked_mul(dtype.size_bytes())
        .ok_or_else(|| invalid(format!("buffer `{}` is too large", b.name)))?;
    let ptr = place(b, bytes)?;
    Ok(Resolved { ptr, ld, dtype })
}

/// The launch configuration and parameters of one kernel: its tensor maps,
/// then its argument structs; a persistent grid is capped at `sms`.
fn build_launch(
    kernel: usize,
    spec: &KernelSpec,
    resolved: &BTreeMap<String, Resolved>,
    dims: &BTreeMap<String, i64>,
    sms: u32,
) -> Result<Launch> {
    let get = |name: &str| {
        resolved
            .get(name)
            .copied()
            .ok_or_else(|| invalid(format!("kernel `{}` uses unknown buffer `{name}`", spec.name)))
    };
    let mut params = Vec::new();
    for map in &spec.tensor_maps {
        params.push(tensor_map(map, get(&map.buffer)?, dims)?);
    }
    for s in &spec.args {
        let mut block = ParamBlock::new();
        for f in &s.fields {
            let value = match &f.value {
                FieldValue::Ptr(b) => {
                    block.push_ptr(get(b)?.ptr);
                    continue;
                }
                FieldValue::Ld(b) => get(b)?.ld,
                FieldValue::Expr(e) => size(e, dims)?,
            };
            match f.kind.as_str() {
                "i32" => {
                    let v = i32::try_from(value)
                        .map_err(|_| invalid(format!("field `{}` = {value} overflows int", f.name)))?;
                    block.push_i32(v);
                }
                "i64" => {
                    block.push_i64(value);
                }
                other => return Err(invalid(format!("field `{}` has unsupported kind `{other}`", f.name))),
            }
        }
        if block.size() != s.size {
            return Err(invalid(format!(
                "struct `{}` of kernel `{}`: {} bytes built, manifest says {}",
                s.name,
                spec.name,
                block.size(),
                s.size
            )));
        }
        params.push(block);
    }
    let grid = size(&spec.grid[0], dims)?;
    let grid = u32::try_from(grid).map_err(|_| invalid(format!("grid of `{}` is {grid} blocks", spec.name)))?;
    let grid = if spec.persistent { grid.min(sms.max(1)) } else { grid };
    let cfg = LaunchConfig {
        grid: (grid, 1, 1),
        block: (spec.block[0], spec.block[1], spec.block[2]),
        smem_bytes: spec.smem_bytes,
    };
    Ok(Launch { kernel, cfg, params })
}

/// The grid of a kernel launched in thread-block clusters of `spec.cluster`
/// CTAs: a multiple of the cluster size and, when persistent, at most the
/// clusters that run at once (more would run as a second wave).
fn cluster_grid(kernel: &crate::launch::Kernel, spec: &KernelSpec, cfg: &crate::launch::LaunchConfig) -> Result<u32> {
    let cluster = spec.cluster;
    let clusters = cfg.grid.0.div_ceil(cluster);
    let clusters = if spec.persistent { clusters.min(kernel.max_active_clusters(cfg, cluster)?) } else { clusters };
    Ok(clusters * cluster)
}

/// Encodes one tensor map of a kernel over a bound buffer.
fn tensor_map(map: &TensorMapSpec, buffer: Resolved, dims: &BTreeMap<String, i64>) -> Result<ParamBlock> {
    let elem = buffer.dtype.size_bytes() as u64;
    let row_bytes =
        u64::try_from(buffer.ld).map_err(|_| invalid(format!("buffer `{}` has a negative ld", map.buffer)))? * elem;
    let mut extents = Vec::new();
    for d in &map.dims {
        // An empty contraction (K = 0) still needs a valid map: nothing is
        // loaded from it.
        extents.push(u64::try_from(size(d, dims)?.max(1)).unwrap_or(1));
    }
    let base = u64::try_from(map.base_row).map_err(|_| invalid(format!("tensor map base row {}", map.base_row)))?;
    let strides = map.strides.iter().map(|s| u64::try_from(*s).unwrap_or(0) * row_bytes).collect();
    crate::tma::TiledMap {
        dtype: buffer.dtype,
        address: buffer.ptr + base * row_bytes,
        dims: extents,
        strides,
        box_dims: map.box_dims.clone(),
    }
    .encode()
}
