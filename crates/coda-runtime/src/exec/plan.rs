//! A block's launches for one shape of its bindings, reused by every call
//! whose tensors differ only in their addresses.
//!
//! A [`Plan`] is keyed by the run-time dims and each binding's dtype,
//! shape, strides and 16-byte alignment (which decides whether a staging
//! buffer aliases its tensor or is a copy). It holds where every buffer's
//! address comes from (a binding, the tensor a staging buffer aliases, or
//! an offset in the workspace region), the launch configurations, and each
//! kernel's argument structs with their pointer fields left to fill in. A
//! staging buffer that is a copy adds a launch of the staging copy
//! ([`crate::staging`]): from its input before the block's kernels, or into
//! its output after them.
//! Filling a plan ([`Plan::fill`]) writes the addresses and encodes the
//! tensor maps, which embed them; nothing else is evaluated again, so a
//! call from PyTorch costs little host time beyond the launches.

use super::bind::{invalid, size, usize_of, Launch, WORKSPACE_ALIGN};
use super::graph::Graphs;
use crate::error::{Result, RuntimeError};
use crate::launch::LaunchConfig;
use crate::params::ParamBlock;
use crate::tensor::{describe, DType, TensorArg};
use coda_manifest::manifest::{BlockManifest, BufferSpec, FieldValue, KernelSpec};
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
    /// Stacked weights: the second buffer, the lower address of the two
    /// being the map's base and their distance the stride of `dims[1]`.
    stacked: Option<usize>,
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
    /// Tensor maps already encoded, by (launch, map, address, address of
    /// the stacked buffer or 0). Encoding
    /// one costs about a microsecond, as much as the rest of a launch's
    /// preparation; weights keep their addresses from call to call, and
    /// a training loop's activations come back to the same few.
    encoded: Mutex<HashMap<(usize, usize, u64, u64), ParamBlock>>,
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
        manifest: &BlockManifest,
        key: &PlanKey,
        dims: &BTreeMap<String, i64>,
        sms: u32,
    ) -> Result<Plan> {
        let mut places = Vec::new();
        let mut layouts: Vec<Layout> = Vec::new();
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        let mut workspace_bytes = 0usize;
        let mut counters = Vec::new();
        // The staging copies that run before and after the block's kernels;
        // the executor's copy kernels follow the manifest's, one per staging
        // buffer in manifest order (`bind::staging_copies`).
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let mut next_copy = manifest.kernels.len();
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
                    if role == "staging" {
                        next_copy += 1;
                    }
                    match readable {
                        Some(i) if role == "staging" => (Place::Alias(i), layouts[i]),
                        _ => {
                            let (layout, bytes) = host_layout(b, dims)?;
                            let offset = workspace_bytes.next_multiple_of(WORKSPACE_ALIGN);
                            workspace_bytes = offset
                                .checked_add(bytes.max(16))
                                .ok_or_else(|| invalid(format!("buffer `{}` is too large", b.name)))?;
                            if role == "counter" {
                                counters.push((offset, bytes));
                            }
                            if let (Some(tensor), "staging") = (source, role) {
                                let copy = StagingCopy { kernel: next_copy - 1, staging: places.len(), tensor };
                                match manifest.buffers[tensor].role.as_str() {
                                    "output" => after.push(copy),
                                    _ => before.push(copy),
                                }
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
        for copy in &before {
            launches.extend(copy.launch((copy.tensor, copy.staging), manifest, &layouts, dims)?);
        }
        for (kernel, spec) in manifest.kernels.iter().enumerate() {
            launches.push(plan_launch(kernel, spec, &index, &layouts, dims, sms)?);
        }
        for copy in &after {
            launches.extend(copy.launch((copy.staging, copy.tensor), manifest, &layouts, dims)?);
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

    /// The counters of a workspace at `base` (none without a workspace):
    /// (address, bytes), to zero before the launches.
    pub(super) fn counters_at(&self, base: u64) -> Vec<(u64, usize)> {
        if base == 0 {
            return Vec::new();
        }
        self.counters.iter().map(|&(offset, bytes)| (base + offset as u64, bytes)).collect()
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
                let second = map.stacked.map_or(0, |b| at[b] + map.offset);
                if let Some(block) = encoded.get(&(l, m, address, second)) {
                    params[map.param] = block.clone();
                    continue;
                }
                let mut strides = map.strides.clone();
                let base = match map.stacked {
                    Some(_) => {
                        if let Some(s) = strides.first_mut() {
                            *s = address.abs_diff(second);
                        }
                        address.min(second)
                    }
                    None => address,
                };
                let block = crate::tma::TiledMap {
                    dtype: map.dtype,
                    address: base,
                    dims: map.dims.clone(),
                    strides,
                    box_dims: map.box_dims.clone(),
                }
                .encode()?;
                if encoded.len() >= ENCODED_MAPS {
                    encoded.clear();
                }
                encoded.insert((l, m, address, second), block.clone());
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

/// A staging buffer that is a copy of its tensor in this plan.
#[derive(Debug, Clone, Copy)]
struct StagingCopy {
    /// The executor's copy kernel for it.
    kernel: usize,
    /// The staging buffer and the input or output it stands for (manifest
    /// indices).
    staging: usize,
    tensor: usize,
}

impl StagingCopy {
    /// The copy from buffer `src` to buffer `dst` (the staging buffer and
    /// its tensor, in the copy's direction), if there is anything to copy.
    fn launch(
        &self,
        (src, dst): (usize, usize),
        manifest: &BlockManifest,
        layouts: &[Layout],
        dims: &BTreeMap<String, i64>,
    ) -> Result<Option<LaunchPlan>> {
        let b = &manifest.buffers[self.staging];
        if layouts[src].dtype != layouts[dst].dtype {
            return Err(invalid(format!("staging buffer `{}` and its tensor differ in element type", b.name)));
        }
        let (rows, cols) = (size(&b.shape[0], dims)?, size(&b.shape[1], dims)?);
        let Some((cfg, args)) = crate::staging::launch(rows, cols, layouts[src].ld, layouts[dst].ld) else {
            return Ok(None);
        };
        let pointers = vec![(0, crate::staging::SRC_FIELD, src), (0, crate::staging::DST_FIELD, dst)];
        Ok(Some(LaunchPlan { kernel: self.kernel, cfg, params: vec![args], pointers, maps: Vec::new() }))
    }
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
        let stacked = match &map.stacked {
            Some(name) => {
                let s = buffer(name)?;
                if layouts[s].ld != layout.ld || layouts[s].dtype != layout.dtype {
                    return Err(invalid(format!(
                        "`{}` and `{name}` are read as one stacked weight and need one dtype and row stride, \
                         not {} with {} elements per row and {} with {}",
                        map.buffer, layout.dtype, layout.ld, layouts[s].dtype, layouts[s].ld
                    )));
                }
                Some(s)
            }
            None => None,
        };
        maps.push(MapPlan {
            param: params.len(),
            buffer: b,
            stacked,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A GEMM reading an input through a staging buffer and storing into
    /// an output's staging buffer, both 12 columns wide (padded to 16).
    const MANIFEST: &str = r#"{"schema": 3, "source": "g.coda", "arch": "sm_90a", "blocks": [{"block": "g", "kind": "block", "dims": ["M"],
        "buffers": [
            {"name": "a", "role": "input", "dtype": "bf16", "rank": 2, "shape": ["M", "12"]},
            {"name": "y", "role": "output", "dtype": "f32", "rank": 2, "shape": ["M", "12"]},
            {"name": "a.staged", "role": "staging", "dtype": "bf16", "rank": 2, "shape": ["M", "12"],
             "ld": "16", "staging_of": "a"},
            {"name": "tmp.y", "role": "staging", "dtype": "f32", "rank": 2, "shape": ["M", "12"],
             "ld": "16", "staging_of": "y"}],
        "kernels": [{"name": "gemm_y", "kind": "gemm", "entry": "coda_g_gemm_y", "file": "g_gemm_y.cu",
            "summary": "", "grid": ["M", "1", "1"], "block": [128, 1, 1], "smem_bytes": 0,
            "args": [{"name": "Params", "size": 16, "fields": [
                {"name": "a", "kind": "ptr", "value": {"ptr": "a.staged"}},
                {"name": "y", "kind": "ptr", "value": {"ptr": "tmp.y"}}]}]}]}]}"#;

    fn planned(row_stride: isize, aligned: bool) -> Plan {
        let manifest = coda_manifest::manifest::Manifest::from_json(MANIFEST).unwrap_or_else(|e| panic!("{e}"));
        let Some(manifest) = manifest.blocks.first() else { panic!("no block") };
        let binding = |dtype| Binding { dtype, shape: vec![5, 12], strides: vec![row_stride, 1], aligned };
        let key = PlanKey { dims: vec![5], bindings: vec![binding(DType::Bf16), binding(DType::F32)] };
        let dims = BTreeMap::from([("M".to_string(), 5)]);
        Plan::build(manifest, &key, &dims, 132).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The i64 fields of a staging copy's argument: `src_ld`, `dst_ld`,
    /// `rows`, `cols`, and its two addresses.
    fn copy_fields(launch: &Launch) -> ([i64; 4], [u64; 2]) {
        let bytes = launch.params[0].to_bytes();
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[8 * i..8 * i + 8]);
            w
        };
        let int = |i| i64::from_ne_bytes(word(i));
        ([int(1), int(3), int(4), int(5)], [u64::from_ne_bytes(word(0)), u64::from_ne_bytes(word(2))])
    }

    /// Misaligned tensors: the input is copied into its staging buffer
    /// before the GEMM and the output's staging buffer into the output
    /// after it, by the executor's copy kernels (after the manifest's).
    #[test]
    fn misaligned_tensors_are_copied_around_the_kernels() {
        let plan = planned(12, true);
        assert_eq!(plan.workspace_bytes(), 256 + 5 * 16 * 4);
        let launches = plan.fill(&[0x1000, 0x2000], 0x10000).unwrap_or_else(|e| panic!("{e}"));
        let kernels: Vec<usize> = launches.iter().map(|l| l.kernel).collect();
        assert_eq!(kernels, [1, 0, 2]);
        assert_eq!(copy_fields(&launches[0]), ([12, 16, 5, 12], [0x1000, 0x10000]));
        assert_eq!(copy_fields(&launches[2]), ([16, 12, 5, 12], [0x10100, 0x2000]));
        assert_eq!(launches[0].cfg.grid, (5, 1, 1));
        // The GEMM reads and writes the staging buffers.
        let gemm = launches[1].params[0].to_bytes();
        assert_eq!(gemm[..8], 0x10000u64.to_ne_bytes());
        assert_eq!(gemm[8..16], 0x10100u64.to_ne_bytes());
    }

    /// Aligned tensors with a row stride that is a multiple of 8: the
    /// staging buffers are the tensors, and nothing is copied.
    #[test]
    fn aligned_tensors_are_read_in_place() {
        let plan = planned(16, true);
        assert_eq!(plan.workspace_bytes(), 0);
        let launches = plan.fill(&[0x1000, 0x2000], 0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(launches.len(), 1);
        let gemm = launches[0].params[0].to_bytes();
        assert_eq!(gemm[..8], 0x1000u64.to_ne_bytes());
        assert_eq!(gemm[8..16], 0x2000u64.to_ne_bytes());
        // A base that is not 16-byte aligned copies whatever the stride.
        assert_eq!(planned(16, false).fill(&[0x1002, 0x2000], 0x10000).map(|l| l.len()).ok(), Some(3));
    }
}
