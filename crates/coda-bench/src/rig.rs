//! The device side of `codac bench`: several copies of every buffer of a
//! block, and executors that launch the whole block or one kernel of it on
//! any copy.
//!
//! The runtime's executor allocates scratch, partial and staging buffers
//! itself, separately for each binding; a benchmark needs them shared, so
//! that a kernel timed alone reads what the kernels before it wrote. The
//! *open manifest* ([`open_manifest`]) therefore turns every buffer the
//! runtime would allocate into an input that the rig binds: scratch and
//! partial buffers get an allocation of their own (`rows × ld`); a staging
//! buffer aliases its tensor when the runtime would (the tensor is 16-byte
//! aligned with a row stride that is a multiple of 8 elements; the rig's
//! allocations are contiguous, so that is a column count that is a multiple
//! of 8); otherwise it gets an allocation, which the rig fills once with
//! the padded rows of its input (the runtime's staging copy, which `codac
//! run` launches for such tensors, is not timed).

use crate::{bug, BenchError, OrBug, Result};
use coda::cuda::manifest::{BlockManifest, BufferSpec};
use coda::cuda::symexpr::eval_str;
use coda::cuda::KernelSource;
use coda::{DimBindings, HostTensor};
use coda_runtime::exec::{BlockExecutor, Prepared};
use coda_runtime::{
    bench_cycle, bench_cycle_marked, bench_interleaved, convert, BenchStats, DType, Device, DeviceBuffer, TensorArg,
};
use std::collections::BTreeMap;

/// Copies of the data cycled through by every timing loop, at least.
pub(crate) const MIN_COPIES: usize = 3;
/// At most this many copies.
pub(crate) const MAX_COPIES: usize = 256;
/// The bytes each timed kernel should touch over all copies: four times
/// the 50 MB L2 cache of an H100 (60 MB on an H200), rounded up.
pub(crate) const ROTATION_BYTES: u64 = 256 << 20;
/// The share of free device memory the copies may take.
const MEMORY_SHARE: f64 = 0.7;

/// How the rig provides one buffer of the open manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Provision {
    /// A block input or output, bound as declared (`rank` axes).
    Declared,
    /// An allocation of `rows × ld` elements, bound as `[rows, cols]`.
    Owned,
    /// The allocation of another buffer (a staging buffer aliasing its input).
    Alias(String),
}

/// A block manifest whose every buffer the rig binds (see the module docs),
/// and how each buffer is provided.
pub(crate) fn open_manifest(
    manifest: &BlockManifest,
    dims: &DimBindings,
) -> Result<(BlockManifest, BTreeMap<String, Provision>)> {
    let mut open = manifest.clone();
    let mut provisions = BTreeMap::new();
    for b in &mut open.buffers {
        let provision = match b.role.as_str() {
            "input" | "output" => Provision::Declared,
            "staging" => {
                let source = b.staging_of.clone().or_bug(|| format!("staging buffer `{}` has no input", b.name))?;
                let cols = eval_str(&b.shape[1], dims).or_bug(|| format!("columns of buffer `{}`", b.name))?;
                if cols % 8 == 0 {
                    Provision::Alias(source)
                } else {
                    Provision::Owned
                }
            }
            _ => Provision::Owned,
        };
        if b.role != "output" {
            b.role = "input".into();
        }
        provisions.insert(b.name.clone(), provision);
    }
    Ok((open, provisions))
}

/// The open manifest reduced to its kernel `index` (all buffers kept).
fn single_kernel(open: &BlockManifest, index: usize) -> BlockManifest {
    let mut one = open.clone();
    one.kernels = open.kernels.get(index).cloned().into_iter().collect();
    one
}

/// `[rows, cols]` and the leading dimension of a buffer at `dims`.
fn extent(b: &BufferSpec, dims: &DimBindings) -> Result<(usize, usize, usize)> {
    let get = |e: &str| -> Result<usize> {
        let v = eval_str(e, dims).or_bug(|| format!("size of buffer `{}`", b.name))?;
        usize::try_from(v).or_bug(|| format!("buffer `{}` has a negative size", b.name))
    };
    let (rows, cols) = (get(&b.shape[0])?, get(&b.shape[1])?);
    let ld = match &b.ld {
        Some(ld) => get(ld)?,
        None => cols,
    };
    Ok((rows, cols, ld))
}

/// Bytes of one copy of every buffer the rig allocates.
pub(crate) fn copy_bytes(
    open: &BlockManifest,
    provisions: &BTreeMap<String, Provision>,
    dims: &DimBindings,
) -> Result<u64> {
    let mut total = 0u64;
    for b in &open.buffers {
        if matches!(provisions.get(&b.name), Some(Provision::Alias(_))) {
            continue;
        }
        let (rows, _, ld) = extent(b, dims)?;
        total += (rows * ld * b.dtype.parse::<DType>()?.size_bytes()) as u64;
    }
    Ok(total)
}

/// How many copies: enough that `smallest_kernel_bytes` (the least any
/// timed kernel touches in one copy) times the copies reaches
/// [`ROTATION_BYTES`], at least [`MIN_COPIES`], at most [`MAX_COPIES`] and
/// what fits in `memory_budget` (at least one).
pub(crate) fn copies_needed(smallest_kernel_bytes: u64, bytes_per_copy: u64, memory_budget: u64) -> usize {
    let wanted = ROTATION_BYTES.div_ceil(smallest_kernel_bytes.max(1)) as usize;
    let wanted = wanted.clamp(MIN_COPIES, MAX_COPIES);
    let fit = (memory_budget / bytes_per_copy.max(1)) as usize;
    wanted.min(fit).max(1)
}

/// The device bytes of a host tensor stored as `dtype`.
fn host_bytes(dtype: DType, host: &HostTensor) -> Vec<u8> {
    match dtype {
        DType::I32 => convert::i32_to_bytes(&host.data.iter().map(|v| *v as i32).collect::<Vec<_>>()),
        _ => convert::f32_to_bytes(dtype, &host.data.iter().map(|v| *v as f32).collect::<Vec<_>>()),
    }
}

/// `bytes`, rows of `cols` elements of `elem` bytes, with each row
/// starting `ld` elements after the last (zeros between them).
fn padded(bytes: &[u8], (rows, cols, ld): (usize, usize, usize), elem: usize) -> Vec<u8> {
    let mut out = vec![0u8; rows * ld * elem];
    if cols > 0 {
        for (m, row) in bytes.chunks(cols * elem).take(rows).enumerate() {
            out[m * ld * elem..][..row.len()].copy_from_slice(row);
        }
    }
    out
}

/// One copy of every buffer and its bindings.
struct Copy {
    /// The allocations, by buffer name (aliases have none).
    buffers: BTreeMap<String, DeviceBuffer>,
    bindings: BTreeMap<String, TensorArg>,
}

/// Allocates one copy: inputs (and the previous content of `+=` outputs)
/// from `data`, other outputs zeroed, owned buffers zeroed (the block's
/// first run fills them), aliases bound to their source.
fn make_copy(
    device: &Device,
    open: &BlockManifest,
    provisions: &BTreeMap<String, Provision>,
    dims: &DimBindings,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Copy> {
    let mut buffers = BTreeMap::new();
    let mut bindings = BTreeMap::new();
    let mut pointers: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    for b in &open.buffers {
        let dtype: DType = b.dtype.parse()?;
        let (rows, cols, ld) = extent(b, dims)?;
        let provision = provisions.get(&b.name).cloned().unwrap_or(Provision::Owned);
        let (ptr, stride) = match &provision {
            Provision::Alias(source) => {
                *pointers.get(source).or_bug(|| format!("`{}` aliases unknown buffer `{source}`", b.name))?
            }
            _ => {
                let bytes = rows * ld * dtype.size_bytes();
                let buffer = match data.get(&b.name) {
                    Some(host) if host.len() == bytes => DeviceBuffer::from_bytes(device, host)?,
                    Some(host) => bug!("input `{}` has {} bytes, expected {bytes}", b.name, host.len()),
                    None => {
                        let mut buffer = DeviceBuffer::alloc(device, bytes.max(16))?;
                        buffer.zero()?;
                        buffer
                    }
                };
                let ptr = buffer.ptr();
                buffers.insert(b.name.clone(), buffer);
                (ptr, ld)
            }
        };
        pointers.insert(b.name.clone(), (ptr, stride));
        let arg = match (provision, b.rank) {
            (Provision::Declared, 0) => TensorArg::contiguous(dtype, vec![], ptr),
            (Provision::Declared, 1) => TensorArg::contiguous(dtype, vec![rows * cols], ptr),
            _ => TensorArg::new(dtype, vec![rows, cols], vec![stride as isize, 1], ptr)?,
        };
        bindings.insert(b.name.clone(), arg);
    }
    Ok(Copy { buffers, bindings })
}

/// An executor with one prepared launch list per copy.
struct Runner {
    name: String,
    executor: BlockExecutor,
    prepared: Vec<Prepared>,
}

impl Runner {
    fn new(
        device: &Device,
        name: &str,
        manifest: &BlockManifest,
        sources: &[KernelSource],
        copies: &[Copy],
        dims: &DimBindings,
    ) -> Result<Runner> {
        let executor = BlockExecutor::new(device, manifest, sources)?;
        let prepared =
            copies.iter().map(|c| executor.prepare(device, dims, &c.bindings)).collect::<Result<Vec<_>, _>>()?;
        Ok(Runner { name: name.to_string(), executor, prepared })
    }

    fn time(&self, device: &Device, warmup: usize, iters: usize) -> Result<BenchStats> {
        let stream = device.stream();
        let copies = self.prepared.len();
        Ok(bench_cycle(device, stream, warmup, iters, copies, |c| self.executor.launch(&self.prepared[c], stream))?)
    }

    /// Each launch's time inside back-to-back runs (events between the
    /// launches), in launch order.
    fn time_split(&self, device: &Device, warmup: usize, iters: usize) -> Result<Vec<BenchStats>> {
        let stream = device.stream();
        let copies = self.prepared.len();
        let marks = self.prepared.first().map_or(0, |p| self.executor.launched(p).len()) + 1;
        Ok(bench_cycle_marked(device, stream, (warmup, iters, copies), marks, |c, mark| {
            self.executor.launch_marked(&self.prepared[c], stream, mark)
        })?)
    }
}

/// Registers per thread of each kernel, by short name.
pub(crate) type Registers = BTreeMap<String, usize>;

/// Copies of a block's data with runners for the block and each kernel.
pub(crate) struct Rig {
    /// Copies cycled through.
    pub(crate) copies: usize,
    /// Bytes of one copy.
    pub(crate) bytes_per_copy: u64,
    block: Runner,
    kernels: Vec<Runner>,
    data: Vec<Copy>,
}

/// What a rig is built from.
pub(crate) struct RigSpec<'a> {
    pub(crate) manifest: &'a BlockManifest,
    pub(crate) sources: &'a [KernelSource],
    pub(crate) dims: &'a DimBindings,
    /// Input (and `+=` output) contents by buffer name, already in device layout.
    pub(crate) inputs: &'a BTreeMap<String, HostTensor>,
    /// Bytes each kernel touches in one copy, by short name.
    pub(crate) kernel_bytes: &'a BTreeMap<String, u64>,
}

impl Rig {
    /// Uploads the copies and compiles (through the cache) and prepares
    /// every runner.
    pub(crate) fn new(device: &Device, spec: &RigSpec<'_>) -> Result<Rig> {
        let (open, provisions) = open_manifest(spec.manifest, spec.dims)?;
        let bytes_per_copy = copy_bytes(&open, &provisions, spec.dims)?;
        let smallest = open.kernels.iter().filter_map(|k| spec.kernel_bytes.get(&k.name)).copied().min().unwrap_or(0);
        let (free, _) = device.memory_info()?;
        let copies = copies_needed(smallest, bytes_per_copy, (free as f64 * MEMORY_SHARE) as u64);
        if (copies as u64) * bytes_per_copy > free as u64 {
            return Err(BenchError::DeviceMemory {
                block: spec.manifest.block.clone(),
                needed: bytes_per_copy,
                free: free as u64,
            });
        }
        let mut data = BTreeMap::new();
        for b in &open.buffers {
            if let Some(host) = spec.inputs.get(&b.name) {
                data.insert(b.name.clone(), host_bytes(b.dtype.parse()?, host));
            }
        }
        // A staging buffer of its own holds its input's rows, padded.
        for b in open.buffers.iter().filter(|b| provisions.get(&b.name) == Some(&Provision::Owned)) {
            let Some(host) = b.staging_of.as_ref().and_then(|s| spec.inputs.get(s)) else { continue };
            let dtype: DType = b.dtype.parse()?;
            let rows = padded(&host_bytes(dtype, host), extent(b, spec.dims)?, dtype.size_bytes());
            data.insert(b.name.clone(), rows);
        }
        let made =
            (0..copies).map(|_| make_copy(device, &open, &provisions, spec.dims, &data)).collect::<Result<Vec<_>>>()?;
        let block = Runner::new(device, "block", &open, spec.sources, &made, spec.dims)?;
        let mut kernels = Vec::new();
        for (index, k) in open.kernels.iter().enumerate() {
            kernels.push(Runner::new(device, &k.name, &single_kernel(&open, index), spec.sources, &made, spec.dims)?);
        }
        Ok(Rig { copies, bytes_per_copy, block, kernels, data: made })
    }

    /// Registers per thread of each launched kernel.
    pub(crate) fn registers(&self) -> Registers {
        self.block.executor.compile_report().iter().map(|c| (c.name.clone(), c.registers)).collect()
    }

    /// Runs the block once on every copy (filling the intermediate buffers),
    /// then keeps running it until `min_ms` have passed, so that the GPU is
    /// at its working clocks before anything is timed.
    pub(crate) fn fill_and_spin(&self, device: &Device, min_ms: f64) -> Result<()> {
        let stream = device.stream();
        let start = std::time::Instant::now();
        loop {
            for prepared in &self.block.prepared {
                self.block.executor.launch(prepared, stream)?;
            }
            stream.synchronize()?;
            if start.elapsed().as_secs_f64() * 1e3 >= min_ms {
                return Ok(());
            }
        }
    }

    /// The short names of the launched kernels, in launch order.
    pub(crate) fn kernel_names(&self) -> Vec<String> {
        self.kernels.iter().map(|r| r.name.clone()).collect()
    }

    /// Times kernel `name` alone.
    pub(crate) fn time_kernel(&self, device: &Device, name: &str, warmup: usize, iters: usize) -> Result<BenchStats> {
        self.runner(name)?.time(device, warmup, iters)
    }

    /// Times kernel `name` and kernel `other_name` of `other` interleaved
    /// (see [`bench_interleaved`]): both at the same clocks.
    pub(crate) fn time_against(
        &self,
        device: &Device,
        name: &str,
        (other, other_name): (&Rig, &str),
        warmup: usize,
        iters: usize,
    ) -> Result<(BenchStats, BenchStats)> {
        let b = other.runner(other_name)?;
        let stream = device.stream();
        let mut launch_b = |c: usize| b.executor.launch(&b.prepared[c], stream);
        self.time_against_fn(device, name, (b.prepared.len(), &mut launch_b), warmup, iters)
    }

    /// Times kernel `name` interleaved with `other`, a workload over
    /// `other_copies` copies of its own data (see [`bench_interleaved`]).
    pub(crate) fn time_against_fn(
        &self,
        device: &Device,
        name: &str,
        (other_copies, other): (usize, &mut dyn FnMut(usize) -> coda_runtime::Result<()>),
        warmup: usize,
        iters: usize,
    ) -> Result<(BenchStats, BenchStats)> {
        let a = self.runner(name)?;
        let stream = device.stream();
        let copies = (a.prepared.len(), other_copies);
        Ok(bench_interleaved(
            device,
            stream,
            warmup,
            iters,
            copies,
            |c| a.executor.launch(&a.prepared[c], stream),
            other,
        )?)
    }

    /// Launches kernel `name` once on copy `copy` and waits for it.
    pub(crate) fn run_kernel(&self, device: &Device, name: &str, copy: usize) -> Result<()> {
        let runner = self.runner(name)?;
        let prepared = runner.prepared.get(copy).or_bug(|| format!("no copy {copy}"))?;
        runner.executor.launch(prepared, device.stream())?;
        Ok(device.stream().synchronize()?)
    }

    /// The contents of buffer `name` in copy `copy` (after the stream's work).
    pub(crate) fn download(&self, name: &str, copy: usize) -> Result<Vec<u8>> {
        let buffer = self.data.get(copy).and_then(|c| c.buffers.get(name));
        Ok(buffer.or_bug(|| format!("no allocation of `{name}` in copy {copy}"))?.download()?)
    }

    /// The binding of buffer `name` in each copy, in copy order.
    pub(crate) fn bindings_of(&self, name: &str) -> Result<Vec<&TensorArg>> {
        self.data.iter().map(|c| c.bindings.get(name).or_bug(|| format!("no buffer `{name}` in the rig"))).collect()
    }

    fn runner(&self, name: &str) -> Result<&Runner> {
        self.kernels.iter().find(|r| r.name == name).or_bug(|| format!("no kernel {name} in the rig"))
    }

    /// Times the whole block: every kernel back to back, as `codac run` launches them.
    pub(crate) fn time_block(&self, device: &Device, warmup: usize, iters: usize) -> Result<BenchStats> {
        self.block.time(device, warmup, iters)
    }

    /// Times each kernel inside back-to-back block runs (events recorded
    /// between the launches), in launch order ([`Self::kernel_names`]).
    pub(crate) fn time_in_block(&self, device: &Device, warmup: usize, iters: usize) -> Result<Vec<BenchStats>> {
        self.block.time_split(device, warmup, iters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_of(text: &str) -> BlockManifest {
        let checked = coda::check("t.coda", text).unwrap_or_else(|e| panic!("{e}"));
        let compiled = coda::compile(&checked, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        compiled.manifest.blocks.into_iter().next().unwrap_or_else(|| panic!("no block"))
    }

    const BARE: &str = "dim M\ndim N = 64\ndim K = 32\nblock g(a: bf16[M, K], b: bf16[N, K]) -> (y: bf16[M, N]) {\n    y = a @ b.T\n}\n";

    fn dims(m: i64) -> DimBindings {
        [("M".to_string(), m)].into_iter().collect()
    }

    /// An aligned staging buffer aliases its input.
    #[test]
    fn aligned_staging_aliases() -> Result<()> {
        let manifest = manifest_of(BARE);
        assert!(manifest.buffers.iter().any(|b| b.role == "staging"), "expected a staging buffer: {manifest:?}");
        let (open, provisions) = open_manifest(&manifest, &dims(100))?;
        assert!(open.kernels.iter().all(|k| k.kind == "gemm"), "{:?}", open.kernels);
        assert!(open.buffers.iter().all(|b| b.role == "input" || b.name == "y"));
        assert!(provisions.values().any(|p| matches!(p, Provision::Alias(_))));
        assert_eq!(provisions.get("a"), Some(&Provision::Declared));
        Ok(())
    }

    /// Staging an input with a column count that is not a multiple of 8
    /// owns its buffer, which holds the input's rows padded.
    #[test]
    fn misaligned_staging_copies() -> Result<()> {
        let text =
            "dim M\ndim N = 64\nblock g(a: bf16[M, 12], b: bf16[N, 12]) -> (y: bf16[M, N]) {\n    y = a @ b.T\n}\n";
        let manifest = manifest_of(text);
        let (open, provisions) = open_manifest(&manifest, &dims(100))?;
        assert!(open.kernels.iter().all(|k| k.kind == "gemm"), "{:?}", open.kernels);
        assert!(provisions.values().filter(|p| **p == Provision::Owned).count() >= 1);
        let rows: Vec<u8> = (1..=6).collect();
        assert_eq!(padded(&rows, (2, 3, 4), 1), [1, 2, 3, 0, 4, 5, 6, 0]);
        let bytes = copy_bytes(&open, &provisions, &dims(100))?;
        assert!(bytes > 2 * (100 * 12 + 64 * 12 + 100 * 64), "staging copies count: {bytes}");
        Ok(())
    }

    #[test]
    fn copy_counts() {
        let mb = 1u64 << 20;
        assert_eq!(copies_needed(200 * mb, 1000 * mb, 80_000 * mb), MIN_COPIES);
        assert_eq!(copies_needed(16 * mb, 20 * mb, 80_000 * mb), 16);
        assert_eq!(copies_needed(1, 1, u64::MAX), MAX_COPIES);
        assert_eq!(copies_needed(200 * mb, 30_000 * mb, 70_000 * mb), 2, "memory caps the copies");
        assert_eq!(copies_needed(200 * mb, 90_000 * mb, 70_000 * mb), 1, "at least one");
    }
}
