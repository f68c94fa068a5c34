//! A block's launches as CUDA graphs: one `cuGraphLaunch` per call instead
//! of one `cuLaunchKernel` per kernel.
//!
//! An eager call from PyTorch launches every kernel of a block, and each
//! launch costs the host a few microseconds, most of a small call's time.
//! A [`Plan`] fixes which kernels a call launches and how; a graph holds
//! them as kernel nodes, each depending on the one before (a block's
//! kernels run in order).
//!
//! A plan keeps a graph per set of arguments (the addresses its kernels
//! read and write), up to [`GRAPHS_PER_STREAM`]: a model calls a block once
//! per layer, each layer with its own weights, and PyTorch's caching
//! allocator gives each layer's activations the same addresses step after
//! step, so each layer's arguments come back every step. Launching a graph
//! whose arguments are in place costs about a microsecond; setting a node's
//! arguments (`cuGraphExecKernelNodeSetParams`, which changes later
//! launches, never those already enqueued) costs about as much as
//! launching its kernel, so when the graphs are all taken the one used
//! longest ago takes the new arguments.
//!
//! A call finds its graph by the addresses that fill the plan (the
//! bindings' and the workspace's) before filling it: a graph that holds
//! them is launched as it is, and only a miss fills the plan's argument
//! structs and compares them with the graphs' nodes.
//!
//! Launches of one executable graph are ordered after each other even
//! across streams, so each stream has its own graphs: two streams that run
//! a block concurrently stay independent. A stream that is being captured
//! into a CUDA graph (PyTorch's `torch.cuda.graph`) gets plain launches,
//! which the capture records as nodes of its own.

use super::bind::Prepared;
use super::plan::Plan;
use super::BlockExecutor;
use crate::device::Stream;
use crate::error::{CudaResultExt, Result, RuntimeError};
use crate::launch::{Arguments, LaunchConfig};
use crate::params::ParamBlock;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::ptr;

/// The graphs a plan keeps per stream, one per set of arguments.
const GRAPHS_PER_STREAM: usize = 64;

/// The streams a plan keeps graphs for; a caller cycling through more
/// starts over.
const STREAMS: usize = 8;

/// The executable graphs of one plan.
#[derive(Debug, Default)]
pub(super) struct Graphs {
    by_stream: Vec<(u64, Vec<Graph>)>,
    /// Counts launches, to find the graph used longest ago.
    clock: u64,
    /// Why the driver could not build a graph of the plan, if it could not:
    /// its calls then launch kernel by kernel, as they would without one.
    pub(super) failure: Option<String>,
}

/// One instantiated graph and the launches its nodes were last given.
#[derive(Debug)]
struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    nodes: Vec<Node>,
    /// [`arguments_key`] of the nodes' launches.
    key: u64,
    /// The addresses the nodes' launches were filled with
    /// ([`Prepared::bound`]).
    bound: Vec<u64>,
    /// The [`Graphs::clock`] of its last launch.
    used: u64,
}

/// A kernel node with what it was last given.
#[derive(Debug)]
struct Node {
    node: sys::CUgraphNode,
    /// Index into the executor's kernels.
    kernel: usize,
    cfg: LaunchConfig,
    params: Vec<ParamBlock>,
}

// SAFETY: the handles are plain driver objects, usable from any thread of
// the process; every use goes through the plan's mutex.
unsafe impl Send for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: both handles were created by `Graph::build` and are
        // destroyed once, here; a graph may be destroyed while launches of
        // it are pending (they complete).
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            sys::cuGraphDestroy(self.graph);
        }
    }
}

/// The driver's description of one kernel node.
fn node_params(
    function: sys::CUfunction,
    cfg: &LaunchConfig,
    args: &mut Arguments,
    pointers: &mut Vec<*mut c_void>,
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    *pointers = args.pointers();
    let (g, b) = (cfg.grid, cfg.block);
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: function,
        gridDimX: g.0,
        gridDimY: g.1,
        gridDimZ: g.2,
        blockDimX: b.0,
        blockDimY: b.1,
        blockDimZ: b.2,
        sharedMemBytes: cfg.smem_bytes,
        kernelParams: pointers.as_mut_ptr(),
        extra: ptr::null_mut(),
        kern: ptr::null_mut(),
        ctx: ptr::null_mut(),
    }
}

impl Graph {
    /// A graph of `prepared`'s launches with their arguments.
    fn build(executor: &BlockExecutor, prepared: &Prepared) -> Result<Graph> {
        let mut graph: sys::CUgraph = ptr::null_mut();
        // SAFETY: `graph` is a valid out-pointer; flags must be 0.
        unsafe { sys::cuGraphCreate(&mut graph, 0) }.result().cuda("cuGraphCreate")?;
        let mut built = Graph { graph, exec: ptr::null_mut(), nodes: Vec::new(), key: 0, bound: Vec::new(), used: 0 };
        let mut pointers = Vec::new();
        for launch in &prepared.launches {
            let kernel = &executor.kernels[launch.kernel].kernel;
            let params: Vec<_> = launch.params.iter().collect();
            // Checks the arguments, binds the context and raises the
            // kernel's shared memory limit, which instantiation needs.
            let mut args = kernel.arguments(&launch.cfg, &params)?;
            let p = node_params(kernel.cu_function(), &launch.cfg, &mut args, &mut pointers);
            let previous: Vec<sys::CUgraphNode> = built.nodes.last().map(|n| n.node).into_iter().collect();
            let mut node: sys::CUgraphNode = ptr::null_mut();
            // SAFETY: `graph` is live; `previous` holds 0 or 1 node of it;
            // `p` points to one pointer per parameter, each to its words,
            // alive for the call (the driver copies them).
            unsafe { sys::cuGraphAddKernelNode_v2(&mut node, graph, previous.as_ptr(), previous.len(), &p) }
                .result()
                .cuda("cuGraphAddKernelNode")?;
            built.nodes.push(Node { node, kernel: launch.kernel, cfg: launch.cfg, params: launch.params.clone() });
        }
        let mut exec: sys::CUgraphExec = ptr::null_mut();
        // SAFETY: `graph` is live and complete; `exec` a valid out-pointer.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }.result().cuda("cuGraphInstantiate")?;
        built.exec = exec;
        Ok(built)
    }

    /// Whether the nodes hold `prepared`'s launches.
    fn holds(&self, prepared: &Prepared) -> bool {
        self.nodes.len() == prepared.launches.len()
            && self
                .nodes
                .iter()
                .zip(&prepared.launches)
                .all(|(n, l)| n.kernel == l.kernel && n.cfg == l.cfg && n.params == l.params)
    }

    /// Gives the nodes `prepared`'s arguments where they differ.
    fn update(&mut self, executor: &BlockExecutor, prepared: &Prepared) -> Result<()> {
        let same_kernels = self.nodes.len() == prepared.launches.len()
            && self.nodes.iter().zip(&prepared.launches).all(|(n, l)| n.kernel == l.kernel);
        if !same_kernels {
            return Err(RuntimeError::InvalidInput("the launches are not those of the plan's graph".into()));
        }
        let mut pointers = Vec::new();
        for (node, launch) in self.nodes.iter_mut().zip(&prepared.launches) {
            if launch.params == node.params && launch.cfg == node.cfg {
                continue;
            }
            let kernel = &executor.kernels[launch.kernel].kernel;
            let params: Vec<_> = launch.params.iter().collect();
            let mut args = kernel.arguments(&launch.cfg, &params)?;
            let p = node_params(kernel.cu_function(), &launch.cfg, &mut args, &mut pointers);
            // SAFETY: `node` belongs to the graph `exec` was instantiated
            // from, and keeps its function; `p` points to the new
            // arguments, alive for the call (the driver copies them).
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec, node.node, &p) }
                .result()
                .cuda("cuGraphExecKernelNodeSetParams")?;
            node.cfg = launch.cfg;
            node.params.clone_from(&launch.params);
        }
        self.bound.clone_from(&prepared.bound);
        Ok(())
    }

    /// Whether the nodes were filled with the bindings at `addresses` and
    /// the workspace at `base`.
    fn bound_to(&self, addresses: &[u64], base: u64) -> bool {
        self.bound.split_last().is_some_and(|(&b, a)| b == base && a == addresses)
    }

    /// Launches the graph on `stream`.
    fn launch(&self, stream: &Stream) -> Result<()> {
        stream.inner.context().bind_to_thread().cuda("cuCtxSetCurrent")?;
        // SAFETY: `exec` is live; `stream` is a live stream of the context
        // the kernels were loaded in.
        unsafe { sys::cuGraphLaunch(self.exec, stream.inner.cu_stream()) }.result().cuda("cuGraphLaunch")
    }
}

/// A hash of the kernels, launch shapes and argument bytes of `prepared`,
/// to find the graph that holds them.
fn arguments_key(prepared: &Prepared) -> u64 {
    // FNV-1a over 8-byte words: a few hundred bytes per call, where a
    // collision only costs the comparison that follows every match.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |word: u64| hash = (hash ^ word).wrapping_mul(0x0000_0100_0000_01b3);
    for l in &prepared.launches {
        mix(l.kernel as u64);
        mix(u64::from(l.cfg.grid.0) << 32 | u64::from(l.cfg.smem_bytes));
        for block in &l.params {
            for chunk in block.bytes().chunks(8) {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                mix(u64::from_ne_bytes(word));
            }
        }
    }
    hash
}

impl Graphs {
    /// This stream's graphs, made room for when the stream is new.
    fn of_stream(&mut self, handle: u64) -> &mut Vec<Graph> {
        let slot = match self.by_stream.iter().position(|(s, _)| *s == handle) {
            Some(slot) => slot,
            None => {
                if self.by_stream.len() >= STREAMS {
                    self.by_stream.clear();
                }
                self.by_stream.push((handle, Vec::new()));
                self.by_stream.len() - 1
            }
        };
        &mut self.by_stream[slot].1
    }
}

/// Zeroes a workspace's counters on `stream`, before a block's launches.
pub(super) fn zero_counters(stream: &Stream, counters: &[(u64, usize)]) -> Result<()> {
    for &(ptr, bytes) in counters {
        // SAFETY: the caller of `prepare_with`, `prepare_planned` or
        // `launch_planned` vouched that the workspace holding this counter
        // is valid device memory of the stream's context.
        unsafe { stream.zero_async(ptr, bytes)? };
    }
    Ok(())
}

impl BlockExecutor {
    /// Launches `plan`'s kernels on `stream`, with the bindings at
    /// `addresses` (manifest order) and the workspace region that `alloc`
    /// gives (see [`Self::prepare_with`]), as one CUDA graph launch (see
    /// the module docs): the same work as [`Self::launch`] of
    /// [`Self::prepare_planned`]'s launches, for less host time. While the
    /// stream is `capturing` (the caller asked [`Stream::is_capturing`]),
    /// the kernels are launched one by one, for the capture to record.
    ///
    /// # Safety
    /// As for [`Self::prepare_planned`].
    pub unsafe fn launch_planned(
        &self,
        plan: &Plan,
        addresses: &[u64],
        alloc: &mut dyn FnMut(usize) -> Result<u64>,
        stream: &Stream,
        capturing: bool,
    ) -> Result<()> {
        // SAFETY: the caller's contract for `alloc` is this method's.
        let base = unsafe { self.workspace(plan, addresses, alloc) }?;
        if !capturing {
            let mut graphs = plan.graphs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if graphs.failure.is_none() {
                graphs.clock += 1;
                let now = graphs.clock;
                let held = graphs.of_stream(stream.inner.cu_stream() as u64);
                if let Some(graph) = held.iter_mut().find(|g| g.bound_to(addresses, base)) {
                    zero_counters(stream, &plan.counters_at(base))?;
                    graph.used = now;
                    return graph.launch(stream);
                }
            }
        }
        let prepared = self.prepared_at(plan, addresses, base)?;
        if capturing {
            return self.launch(&prepared, stream);
        }
        self.launch_graph(plan, &prepared, stream)
    }

    /// `prepared`'s launches, made from `plan`, as one graph launch on
    /// `stream`, which is not being captured.
    fn launch_graph(&self, plan: &Plan, prepared: &Prepared, stream: &Stream) -> Result<()> {
        let mut graphs = plan.graphs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if graphs.failure.is_some() || prepared.launches.is_empty() {
            return self.launch(prepared, stream);
        }
        zero_counters(stream, &prepared.zero_first)?;
        let key = arguments_key(prepared);
        graphs.clock += 1;
        let now = graphs.clock;
        let held = graphs.of_stream(stream.inner.cu_stream() as u64);
        if let Some(graph) = held.iter_mut().find(|g| g.key == key && g.holds(prepared)) {
            graph.used = now;
            graph.bound.clone_from(&prepared.bound);
            return graph.launch(stream);
        }
        if held.len() < GRAPHS_PER_STREAM {
            match Graph::build(self, prepared) {
                Ok(mut graph) => {
                    graph.key = key;
                    graph.bound.clone_from(&prepared.bound);
                    graph.used = now;
                    graph.launch(stream)?;
                    held.push(graph);
                    return Ok(());
                }
                Err(e) => {
                    graphs.failure = Some(e.to_string());
                    for l in &prepared.launches {
                        let params: Vec<_> = l.params.iter().collect();
                        self.kernels[l.kernel].kernel.launch(stream, &l.cfg, &params)?;
                    }
                    return Ok(());
                }
            }
        }
        let Some(oldest) = held.iter_mut().min_by_key(|g| g.used) else {
            return Err(RuntimeError::InvalidInput("no graph to launch".into()));
        };
        oldest.update(self, prepared)?;
        oldest.key = key;
        oldest.used = now;
        oldest.launch(stream)
    }
}
