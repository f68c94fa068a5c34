//! The manifest: everything a host needs to run the generated kernels of a
//! file for any binding of the run-time dims, as deterministic JSON.
//!
//! ```text
//! Manifest { schema: 3, source, arch, blocks: [BlockManifest] }
//! BlockManifest { block, kind: "block" | "kernel", dims: ["M", …],
//!                 buffers: [BufferSpec], kernels: [KernelSpec] }
//! BufferSpec { name, role: input | output | scratch | partial | staging
//!                          | counter,
//!              dtype: bf16 | f16 | f32 | i32, rank, shape: [rows, cols],
//!              ld: size (buffers the host allocates), accumulate (outputs),
//!              staging_of (staging buffers) }
//! KernelSpec { name, kind: gemm | row | colreduce, entry, file,
//!              summary, config (gemm), grid: [x, y, z] sizes,
//!              block: [x, y, z], smem_bytes,
//!              persistent (grid capped at the SM count),
//!              tensor_maps: [TensorMapSpec], args: [StructSpec] }
//! TensorMapSpec { buffer, stacked (optional: a second buffer), base_row,
//!              dims: [size] (innermost first),
//!              strides: [int] (dims 1.., in rows of the buffer), box: [int] }
//! StructSpec { name, size, fields: [{ name, kind: ptr | i32 | i64 | f32,
//!              value: {"ptr": buffer} | {"ld": buffer} | {"expr": size} }] }
//! ```
//!
//! Sizes are strings in the grammar of [`crate::symexpr`] (`"M"`, `"4096"`,
//! `"ceil(M/128)"`). A buffer's shape is its canonical `[rows, cols]`; a
//! bound input or output has the declared rank (`[]`, `[n]` or
//! `[rows, cols]`). `ld` of an input or output comes from the binding (its
//! row stride). A `staging` buffer stands for the input or output named by
//! its `staging_of`: it is that tensor itself when the tensor is usable in
//! place by the GEMM mainloop (16-byte aligned base, row stride a multiple
//! of 8, unit column stride), and otherwise a buffer of the host's (`ld`
//! padded to a multiple of 8) that the host fills from the input before the
//! kernels, or empties into the output after them (a strided row copy;
//! `coda-runtime` has one copy kernel for every block). A `counter` buffer
//! (the i32 ticket of a row kernel's grid reduction) must be zeroed once
//! when the host allocates it; every launch leaves it 0 again, so launches of
//! one binding must not run concurrently. Struct layouts follow
//! `coda_runtime::ParamBlock` (natural alignment, tail padding).
//!
//! A kernel's parameters are its tensor maps (128-byte `CUtensorMap`s made
//! by `cuTensorMapEncodeTiled`, in order), then its `args` structs. A
//! tensor map describes the buffer's 16-bit elements from row `base_row`:
//! `dims[0]` contiguous elements, then `dims[i]` steps of `strides[i-1]`
//! rows (times the buffer's leading dimension), read in boxes of `box`
//! elements with the 128-byte swizzle, the 256-byte L2 promotion and zero
//! fill out of bounds. A `persistent` kernel's grid is
//! `min(grid, multiprocessors)`: its CTAs loop over the tiles.

use serde::{Deserialize, Serialize};

/// The manifest of one source file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version (3: staging copies are the host's).
    pub schema: u32,
    /// The source file name as given.
    pub source: String,
    /// The target architecture the sources were emitted for.
    pub arch: String,
    /// One entry per compiled block, in source order.
    pub blocks: Vec<BlockManifest>,
}

/// The kernels and buffers of one block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockManifest {
    /// The block's name.
    pub block: String,
    /// `block` or `kernel`.
    pub kind: String,
    /// Run-time dims to bind, in declaration order.
    pub dims: Vec<String>,
    /// Every buffer.
    pub buffers: Vec<BufferSpec>,
    /// Kernels in launch order.
    pub kernels: Vec<KernelSpec>,
}

/// A buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BufferSpec {
    /// Unique name; inputs and outputs keep their source names.
    pub name: String,
    /// `input`, `output`, `scratch`, `partial`, `staging` or `counter`
    /// (zeroed once at allocation).
    pub role: String,
    /// Element type.
    pub dtype: String,
    /// Declared rank (inputs and outputs), else 2.
    pub rank: u8,
    /// Canonical `[rows, cols]`.
    pub shape: [String; 2],
    /// Leading dimension of buffers the host allocates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ld: Option<String>,
    /// `+=` output: read-modify-write.
    #[serde(default, skip_serializing_if = "is_false")]
    pub accumulate: bool,
    /// Staging buffers: the input or output they stand for (module docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging_of: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A kernel launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelSpec {
    /// Name after what it makes (`gemm_x1`); launch order is the order
    /// of [`BlockManifest::kernels`].
    pub name: String,
    /// `gemm`, `row` or `colreduce`.
    pub kind: String,
    /// The `extern "C"` entry point.
    pub entry: String,
    /// The `.cu` file holding it.
    pub file: String,
    /// What it computes, in one line.
    pub summary: String,
    /// GEMM tile configuration (`Cfg128x128`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// Grid size in blocks (sizes).
    pub grid: [String; 3],
    /// Threads per block.
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    pub smem_bytes: u32,
    /// The grid is capped at the device's multiprocessor count.
    #[serde(default, skip_serializing_if = "is_false")]
    pub persistent: bool,
    /// TMA tensor maps passed before `args`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_maps: Vec<TensorMapSpec>,
    /// The by-value struct arguments, in order.
    pub args: Vec<StructSpec>,
}

/// A TMA tensor map over a 16-bit buffer (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMapSpec {
    /// The buffer it reads.
    pub buffer: String,
    /// Stacked weights: the buffer of the second, of `buffer`'s layout.
    /// `dims[1]` (of extent 2) then picks the buffer: the map's base is
    /// the lower of the two addresses and its stride their distance (its
    /// entry in `strides` is 0), so the kernel swaps the halves where the
    /// second lies below the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacked: Option<String>,
    /// First row of the buffer it covers.
    pub base_row: i64,
    /// Extents in elements, innermost (contiguous) first (sizes).
    pub dims: Vec<String>,
    /// Strides of `dims[1..]`, in rows of the buffer.
    pub strides: Vec<i64>,
    /// The box one TMA copy reads, innermost first.
    #[serde(rename = "box")]
    pub box_dims: Vec<u32>,
}

/// A by-value struct argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructSpec {
    /// The C struct name.
    pub name: String,
    /// Its size in bytes (C layout rules).
    pub size: usize,
    /// Its fields, in order.
    pub fields: Vec<FieldSpec>,
}

impl StructSpec {
    /// A struct with its size computed from the fields.
    pub fn new(name: &str, fields: Vec<FieldSpec>) -> StructSpec {
        let mut end = 0usize;
        let mut align = 1usize;
        for f in &fields {
            let size = field_size(&f.kind);
            end = end.div_ceil(size) * size + size;
            align = align.max(size);
        }
        StructSpec { name: name.to_string(), size: end.div_ceil(align) * align, fields }
    }
}

/// Size (= alignment) of a field kind.
pub fn field_size(kind: &str) -> usize {
    match kind {
        "i32" | "f32" => 4,
        _ => 8,
    }
}

/// One field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldSpec {
    /// The C field name.
    pub name: String,
    /// `ptr`, `i32`, `i64` or `f32`.
    pub kind: String,
    /// Where its value comes from.
    pub value: FieldValue,
}

/// The value of a field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldValue {
    /// The device address of a buffer.
    Ptr(String),
    /// The leading dimension (elements) of a buffer.
    Ld(String),
    /// A size expression.
    Expr(String),
}

impl Manifest {
    /// Deterministic pretty JSON (with a trailing newline).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Parses a manifest.
    pub fn from_json(text: &str) -> Result<Manifest, serde_json::Error> {
        serde_json::from_str(text)
    }
}
