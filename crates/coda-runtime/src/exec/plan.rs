//! A block's launches for one shape of its bindings, reused by every call
//! whose tensors differ only in their addresses.
//!
//! A [`Plan`] is keyed by the run-time dims and each binding's dtype,
//! shape, strides and 16-byte alignment (which decides whether a staging
//! buffer aliases its input or is copied). It holds where every buffer's
//! address comes from (a binding, the input a staging buffer aliases, or an
//! offset in the workspace region), the launch configurations, and each
//! kernel's argument structs with their pointer fields left to fill in.
//! Filling a plan ([`Plan::fill`]) writes the addresses and encodes the
//! tensor maps, which embed them; nothing else is evaluated again, so a
//! call from PyTorch costs little host time beyond the launches.

use super::bind::{invalid, size, usize_of, Launch, WORKSPACE_ALIGN};
use super::graph::Graphs;
use super::BlockExecutor;
use crate::error::{Result, RuntimeError};
use crate::launch::LaunchConfig;
use crate::params::ParamBlock;
use crate::tensor::{describe, DType, TensorArg};
use coda_manifest::manifest::{BufferSpec, FieldValue, KernelSpec};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// What a plan depends on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct PlanKey {
    /// The run-time dims, in the manifest's order.
    pub(super) dims: Vec<i64>,
    /// Each input and output, in manifest order.
    pub(super) bindings: Vec<Binding>,
}

/// A caller's tensor without its address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Binding {
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    /// 16-byte aligned: a GEMM may read it in place.
    aligned: bool,
}

impl Binding {
    pub(super) fn of(b: &BufferSpec, t: &TensorArg) -> Result<Binding> {
        t.expect_aligned(&b.name, t.dtype.size_bytes() as u64)?;
        Ok(Binding { dtype: t.dtype, shape: t.shape.clone(), strides: t.strides.clone(), aligned: t.ptr % 16 == 0 })
    }
}

/// Where a buffer's address comes from.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// The caller's tensor: index into the bindings.
    Binding(usize),
    /// The same address as an earlier buffer (a staging buffer whose input
    /// the GEMM reads in place).
    Alias(usize),
    /// An offset into the workspace region.
    Workspace(usize),
}

/// A tensor map to encode once the buffer's address is known.
#[derive(Debug, Clone)]
struct MapPlan {
    /// Parameter position in the launch.
    param: usize,
    buffer: usize,
    dtype: DType,
    /// Bytes from the buffer's address to the map's first row.
    offset: u64,
    dims: Vec<u64>,
    strides: Vec<u64>,
    box_dims: Vec<u32>,
}

/// One launch with its addresses missing.
#[derive(Debug, Clone)]
struct LaunchPlan {
    kernel: usize,
    cfg: LaunchConfig,
    /// Tensor maps (empty placeholders) then argument structs.
    params: Vec<ParamBlock>,
    /// (parameter, field, buffer) of every pointer field.
    pointers: Vec<(usize, usize, usize)>,
    maps: Vec<MapPlan>,
}

/// A block's launches for one [`PlanKey`] (see the module docs).
#[derive(Debug)]
pub struct Plan {
    /// Per binding, in manifest order: its element size and whether the
    /// plan was built for a 16-byte aligned address.
    alignment: Vec<(u64, bool)>,
    places: Vec<Place>,
    /// Bytes of the workspace region (0: none needed).
    workspace_bytes: usize,
    /// Grid-reduction counters in the workspace: (offset, bytes).
    pub(super) counters: Vec<(usize, usize)>,
    launches: Vec<LaunchPlan>,
    /// Tensor maps already encoded, by (launch, map, address). Encoding
    /// one costs about a microsecond, as much as the rest of a launch's
    /// preparation; weights keep their addresses from call to call, and
    /// a training loop's activations come back to the same few.
    encoded: Mutex<HashMap<(usize, usize, u64), ParamBlock>>,
    /// The plan's launches as CUDA graphs, one per stream (`graph.rs`).
    pub(super) graphs: Mutex<Graphs>,
}

/// The most encoded tensor maps a plan keeps.
const ENCODED_MAPS: usize = 1024;

/// Leading dimension and element type of a buffer.
#[derive(Debug, Clone, Copy)]
struct Layout {
    ld: i64,
    dtype: DType,
}

impl Plan {
    /// Checks the bindings of `key` against the manifest and plans every
    /// buffer and launch.
    pub(super) fn build(
        executor: &BlockExecutor,
        key: &PlanKey,
        dims: &BTreeMap<String, i64>,
        sms: u32,
    ) -> Result<Plan> {
        let manifest = &executor.manifest;
        let mut places = Vec::new();
        let mut layouts: Vec<Layout> = Vec::new();
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        let mut workspace_bytes = 0usize;
        let mut counters = Vec::new();
        let mut aliased = Vec::new();
        let mut next_binding = 0;
        for b in &manifest.buffers {
            let (place, layout) = match b.role.as_str() {
                "input" | "output" => {
                    let binding = key.bindings.get(next_binding).ok_or_else(|| invalid("too few bindings".into()))?;
                    next_binding += 1;
                    (Place::Binding(next_binding - 1), check_binding(b, binding, dims)?)
                }
                role => {
                    let source = b.staging_of.as_ref().and_then(|s| index.get(s.as_str()).copied());
                    let readable = source.filter(|&i| {
                        let in_place = match places[i] {
                            Place::Binding(k) => key.bindings[k].aligned,
                            _ => false,
                        };
                        in_place && layouts[i].ld % 8 == 0
                    });
                    if role == "staging" && source.is_none() {
                        return Err(invalid(format!("staging buffer `{}` without its input", b.name)));
                    }
                    match readable {
                        Some(i) if role == "staging" => {
                            aliased.push(b.name.as_str());
                            (Place::Alias(i), layouts[i])
                        }
                        _ => {
                            let (layout, bytes) = host_layout(b, dims)?;
                            let offset = workspace_bytes.next_multiple_of(WORKSPACE_ALIGN);
                            workspace_bytes = offset
                                .checked_add(bytes.max(16))
                                .ok_or_else(|| invalid(format!("buffer `{}` is too large", b.name)))?;
                            if role == "counter" {
                                counters.push((offset, bytes));
                            }
                            (Place::Workspace(offset), layout)
                        }
                    }
                }
            };
            index.insert(b.name.as_str(), places.len());
            places.push(place);
            layouts.push(layout);
        }
        let mut launches = Vec::new();
        for (kernel, loaded) in executor.kernels.iter().enumerate() {
            if loaded.spec.when.as_ref().is_some_and(|w| aliased.contains(&w.as_str())) {
                continue;
            }
            launches.push(plan_launch(kernel, &loaded.spec, &index, &layouts, dims, sms)?);
        }
        let alignment = key.bindings.iter().map(|b| (b.dtype.size_bytes() as u64, b.aligned)).collect();
        Ok(Plan {
            alignment,
            places,
            workspace_bytes,
            counters,
            launches,
            encoded: Mutex::new(HashMap::new()),
            graphs: Mutex::new(Graphs::default()),
        })
    }

    /// Whether bindings at `addresses` (manifest order) can use this plan:
    /// each address is non-null, aligned to its element, and 16-byte
    /// aligned exactly where the plan's were (alignment decides whether a
    /// GEMM reads an input in place or through its staging copy).
    pub fn fits(&self, addresses: &[u64]) -> bool {
        addresses.len() == self.alignment.len()
            && addresses
                .iter()
                .zip(&self.alignment)
                .all(|(&a, &(elem, aligned))| a != 0 && a % elem == 0 && (a % 16 == 0) == aligned)
    }

    /// Why the driver could not run this plan's launches as a CUDA graph,
    /// if it could not ([`BlockExecutor::launch_graph`] then launches them
    /// one by one).
    pub fn graph_failure(&self) -> Option<String> {
        self.graphs.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).failure.clone()
    }

    /// Bytes of the workspace region a run with this plan needs (0: none).
    pub fn workspace_bytes(&self) -> usize {
        self.workspace_bytes
    }

    /// The launches with the bindings at `addresses` (manifest order) and
    /// the workspace at `base`.
    pub(super) fn fill(&self, addresses: &[u64], base: u64) -> Result<Vec<Launch>> {
        let mut at = Vec::with_capacity(self.places.len());
        for place in &self.places {
            let address = match *place {
                Place::Binding(k) => addresses.get(k).copied().ok_or_else(|| invalid("too few addresses".into()))?,
                Place::Alias(i) => at[i],
                Place::Workspace(offset) => base + offset as u64,
            };
            at.push(address);
        }
        let mut launches = Vec::with_capacity(self.launches.len());
        let mut encoded = self.encoded.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (l, plan) in self.launches.iter().enumerate() {
            let mut params = plan.params.clone();
            for &(param, field, buffer) in &plan.pointers {
                params[param].set_ptr(field, at[buffer])?;
            }
            for (m, map) in plan.maps.iter().enumerate() {
                let address = at[map.buffer] + map.offset;
                if let Some(block) = encoded.get(&(l, m, address)) {
                    params[map.param] = block.clone();
                    continue;
                }
                let block = crate::tma::TiledMap {
                    dtype: map.dtype,
                    address,
                    dims: map.dims.clone(),
                    strides: map.strides.clone(),
                    box_dims: map.box_dims.clone(),
                }
                .encode()?;
                if encoded.len() >= ENCODED_MAPS {
                    encoded.clear();
                }
                encoded.insert((l, m, address), block.clone());
                params[map.param] = block;
            }
            launches.push(Launch { kernel: plan.kernel, cfg: plan.cfg, params });
        }
        Ok(launches)
    }
}

/// Checks a caller's tensor (its dtype, shape and strides) against an input
/// or output buffer; returns its layout, the row stride being its leading
/// dimension.
fn check_binding(b: &BufferSpec, t: &Binding, dims: &BTreeMap<String, i64>) -> Result<Layout> {
    let dtype: DType = b.dtype.parse()?;
    let rows = usize_of(size(&b.shape[0], dims)?, "rows")?;
    let cols = usize_of(size(&b.shape[1], dims)?, "columns")?;
    let shape = match b.rank {
        0 => vec![],
        1 => vec![rows * cols],
        _ => vec![rows, cols],
    };
    let arg_err = |message: String| RuntimeError::Argument { name: b.name.clone(), message };
    if t.dtype != dtype || t.shape != shape {
        return Err(arg_err(format!("expected {}, got {}", describe(dtype, &shape), describe(t.dtype, &t.shape))));
    }
    let ld = if b.rank < 2 {
        let contiguous = TensorArg::new(t.dtype, t.shape.clone(), t.strides.clone(), 0)?;
        contiguous.expect_contiguous(&b.name)?;
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
    Ok(Layout { ld, dtype })
}

/// The layout and size in bytes of a buffer the host provides
/// (`rows * ld` elements).
fn host_layout(b: &BufferSpec, dims: &BTreeMap<String, i64>) -> Result<(Layout, usize)> {
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
    Ok((Layout { ld, dtype }, bytes))
}

/// One kernel's launch configuration, argument structs and tensor maps; a
/// persistent grid is capped at `sms`.
fn plan_launch(
    kernel: usize,
    spec: &KernelSpec,
    index: &BTreeMap<&str, usize>,
    layouts: &[Layout],
    dims: &BTreeMap<String, i64>,
    sms: u32,
) -> Result<LaunchPlan> {
    let buffer = |name: &str| {
        index.get(name).copied().ok_or_else(|| invalid(format!("kernel `{}` uses unknown buffer `{name}`", spec.name)))
    };
    let mut params = Vec::new();
    let mut maps = Vec::new();
    for map in &spec.tensor_maps {
        let b = buffer(&map.buffer)?;
        let layout = layouts[b];
        let elem = layout.dtype.size_bytes() as u64;
        let row_bytes =
            u64::try_from(layout.ld).map_err(|_| invalid(format!("buffer `{}` has a negative ld", map.buffer)))? * elem;
        let mut extents = Vec::new();
        for d in &map.dims {
            // An empty contraction (K = 0) still needs a valid map: nothing
            // is loaded from it.
            extents.push(u64::try_from(size(d, dims)?.max(1)).unwrap_or(1));
        }
        let base = u64::try_from(map.base_row).map_err(|_| invalid(format!("tensor map base row {}", map.base_row)))?;
        maps.push(MapPlan {
            param: params.len(),
            buffer: b,
            dtype: layout.dtype,
            offset: base * row_bytes,
            dims: extents,
            strides: map.strides.iter().map(|s| u64::try_from(*s).unwrap_or(0) * row_bytes).collect(),
            box_dims: map.box_dims.clone(),
        });
        params.push(ParamBlock::new());
    }
    let mut pointers = Vec::new();
    for s in &spec.args {
        let mut block = ParamBlock::new();
        for (field, f) in s.fields.iter().enumerate() {
            let value = match &f.value {
                FieldValue::Ptr(b) => {
                    pointers.push((params.len(), field, buffer(b)?));
                    block.push_ptr(0);
                    continue;
                }
                FieldValue::Ld(b) => layouts[buffer(b)?].ld,
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
    Ok(LaunchPlan { kernel, cfg, params, pointers, maps })
}
