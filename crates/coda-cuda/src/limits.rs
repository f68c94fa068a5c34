//! What the generated kernels can handle, checked before anything is
//! written.
//!
//! Sizes they can index: every constant in a dimension (a whole constant
//! dim, or a coefficient of a symbolic one) must be below 2³¹, because
//! kernels compute indices, loop bounds and launch parameters with 32-bit
//! integers. A larger one would compile to kernels that loop forever or
//! index the wrong elements, so it is refused here, with the location of
//! the first value that has it (`E0601`).
//!
//! Types and operations they can take: no value is fp8, because there is
//! no fp8 mainloop, conversion, load or store yet, and no kernel adds rows
//! by index (the gradient of an embedding lookup); such a block is refused
//! at its first fp8 input, output, matmul or cast or its scatter-add, and
//! the interpreter still evaluates it.
//!
//! Parameters they can take: every tensor a kernel reads or writes is
//! passed by value (24 bytes: a pointer, a leading dimension, rows and
//! columns), and CUDA refuses a kernel whose parameters pass
//! [`MAX_PARAM_BYTES`]; NVRTC only says "Formal parameter space overflowed",
//! and only when it is run. Such a kernel is refused here, at the value
//! that takes it past the limit (`E0602`).

use crate::error::CodegenError;
use crate::kir::{BlockIr, BufId, Kernel, KernelKind, Op};
use crate::manifest::{field_size, BlockManifest, FieldValue, KernelSpec};
use coda_diagnostics::{Diagnostic, SourceFile};
use coda_ir::{Block, Dim, Inst, RopeSpec, Value};

/// The first integer the kernels cannot hold: 2³¹.
pub const MAX_DIM: i64 = 1 << 31;

/// Checks every dimension `block` uses against [`MAX_DIM`].
pub fn check_dims(block: &Block, source: &SourceFile) -> Result<(), CodegenError> {
    for (v, inst) in block.insts.iter() {
        let ty = block.ty(v);
        let mut dims: Vec<(&Dim, &str)> = vec![(&ty.shape.rows, "rows"), (&ty.shape.cols, "columns")];
        let mut constants: Vec<(i64, &str)> = Vec::new();
        let rope = |spec: &RopeSpec| (spec.head_dim, "a rotary head dimension");
        match inst {
            Inst::DimValue(d) => dims.push((d, "a dimension's value")),
            Inst::SliceCols { start, len, step, .. } => {
                dims.push((start, "a slice start"));
                dims.push((len, "a slice length"));
                constants.push((*step, "a slice step"));
            }
            Inst::ScatterCols { cols, .. } => dims.push((cols, "a scatter width")),
            Inst::RopeTable { spec, cols, .. } => {
                dims.extend([(&spec.start, "a rotary range start"), (&spec.end, "a rotary range end")]);
                dims.push((cols, "a rotary table width"));
                constants.push(rope(spec));
            }
            Inst::RopePartner { spec, .. } => {
                dims.extend([(&spec.start, "a rotary range start"), (&spec.end, "a rotary range end")]);
                constants.push(rope(spec));
            }
            _ => {}
        }
        let too_big = dims
            .iter()
            .flat_map(|(d, what)| d.monomials().map(move |(_, c)| (c, *what)))
            .chain(constants)
            .find(|(c, _)| c.unsigned_abs() >= MAX_DIM as u64);
        if let Some((value, what)) = too_big {
            let span = block.insts.span(v);
            let diagnostic = Diagnostic::error("E0601", "a dimension too large for the generated kernels")
                .with_primary(span, format!("{what}: {value}, 2^31 or more"))
                .with_help(format!(
                    "the kernels index with 32-bit integers, so every dimension (and every constant in one) must be \
                     below 2^31 = {MAX_DIM}; split the tensor into parts below that"
                ));
            return Err(CodegenError::Limit {
                block: block.name.clone(),
                location: source.location(span),
                diagnostic: Box::new(diagnostic),
            });
        }
    }
    Ok(())
}

/// Refuses a block with an fp8 input, output, matmul or cast, or a
/// scatter-add of rows (an embedding's gradient) ([the module docs](self)).
pub fn check_supported(block: &Block, source: &SourceFile) -> Result<(), CodegenError> {
    if let Some(output) = block.outputs.iter().find(|o| o.tensor.dtype.is_fp8()) {
        return Err(CodegenError::Unsupported {
            block: block.name.clone(),
            location: source.location(output.span),
            what: format!("the {} output `{}`", output.tensor.dtype, output.tensor.name),
            reason: FP8_REASON.into(),
        });
    }
    for (v, inst) in block.insts.iter() {
        let what = match inst {
            Inst::Param(_) if block.ty(v).dtype.is_fp8() => format!("the {} input", block.ty(v).dtype),
            Inst::MatMul { operand_dtype, .. } if operand_dtype.is_fp8() => {
                format!("a matmul of {operand_dtype} operands")
            }
            Inst::Cast { to, .. } if to.is_fp8() => format!("a cast to {to}"),
            Inst::ScatterAddRows { .. } => {
                return Err(CodegenError::Unsupported {
                    block: block.name.clone(),
                    location: source.location(block.insts.span(v)),
                    what: "the gradient of an embedding lookup (a sum of rows by token id)".into(),
                    reason: "no kernel adds rows by index yet; the interpreter (`codac eval --grad`, or the block on \
                             CPU tensors from Python) evaluates it, and PyTorch's `index_add_` computes it"
                        .into(),
                })
            }
            _ => continue,
        };
        return Err(CodegenError::Unsupported {
            block: block.name.clone(),
            location: source.location(block.insts.span(v)),
            what,
            reason: FP8_REASON.into(),
        });
    }
    Ok(())
}

const FP8_REASON: &str = "fp8 kernels are not generated yet; the interpreter (`codac eval`, or a block on CPU \
                          tensors from Python) evaluates fp8 blocks";

/// The most bytes of parameters a kernel may take: 32,764 since CUDA 12.1,
/// on Volta and every later architecture (NVIDIA, "CUDA 12.1 Supports
/// Large Kernel Parameters"); codac targets `sm_80` and `sm_90a` with
/// CUDA 13.
pub const MAX_PARAM_BYTES: usize = 32_764;

/// Size and alignment of a TMA tensor map parameter (`coda::TmaDesc`).
const TENSOR_MAP_BYTES: usize = 128;

/// The parameters of a kernel, in order: each tensor map, then each field
/// of each argument struct, with the offset just past it (C layout rules:
/// every parameter at its alignment, a struct padded to its alignment);
/// the last entry is the end of the parameter space.
fn param_layout(spec: &KernelSpec) -> Vec<(Option<&FieldValue>, usize)> {
    let mut layout = Vec::new();
    let mut end = 0usize;
    for _ in &spec.tensor_maps {
        end = end.next_multiple_of(TENSOR_MAP_BYTES) + TENSOR_MAP_BYTES;
        layout.push((None, end));
    }
    for args in &spec.args {
        let align = args.fields.iter().map(|f| field_size(&f.kind)).max().unwrap_or(1);
        let start = end.next_multiple_of(align);
        let mut offset = 0usize;
        for field in &args.fields {
            let size = field_size(&field.kind);
            offset = offset.next_multiple_of(size) + size;
            layout.push((Some(&field.value), start + offset));
        }
        // An empty struct still takes a byte.
        end = start + args.size.max(1);
        layout.push((None, end));
    }
    layout
}

/// The bytes of parameters a kernel takes (see [`MAX_PARAM_BYTES`]).
pub fn param_bytes(spec: &KernelSpec) -> usize {
    param_layout(spec).last().map_or(0, |(_, end)| *end)
}

/// Checks every kernel of a block against [`MAX_PARAM_BYTES`].
pub fn check_params(
    block: &Block,
    ir: &BlockIr,
    manifest: &BlockManifest,
    source: &SourceFile,
) -> Result<(), CodegenError> {
    for (kernel, spec) in ir.kernels.iter().zip(&manifest.kernels) {
        let bytes = param_bytes(spec);
        if bytes <= MAX_PARAM_BYTES {
            continue;
        }
        // The buffer whose fields cross the limit (or the last one).
        let mut culprit = None;
        let mut tensors = 0usize;
        for (value, end) in param_layout(spec) {
            if let Some(FieldValue::Ptr(name)) = value {
                tensors += 1;
                culprit = Some((name.as_str(), tensors));
            }
            if end > MAX_PARAM_BYTES && culprit.is_some() {
                break;
            }
        }
        let total = spec.args.iter().flat_map(|a| &a.fields).filter(|f| matches!(f.value, FieldValue::Ptr(_))).count();
        let (name, ordinal) = culprit.unwrap_or(("", 0));
        let buf = ir.buffers.iter().position(|b| b.name == name);
        let value = buf.and_then(|b| first_use(block, kernel, b)).unwrap_or_else(|| stored_value(kernel));
        let span = block.insts.span(value);
        let diagnostic = Diagnostic::error("E0602", "a kernel with more parameters than CUDA allows")
            .with_primary(
                span,
                format!(
                    "tensor number {ordinal} of kernel `{}`, which takes its parameters past {MAX_PARAM_BYTES} bytes",
                    kernel.name
                ),
            )
            .with_note(format!(
                "kernel `{}` of block `{}` takes {total} tensors ({bytes} bytes of parameters: a pointer, a leading \
                 dimension, rows and columns per tensor); CUDA allows at most {MAX_PARAM_BYTES} bytes",
                kernel.name, block.name
            ))
            .with_help(
                "split the block into smaller blocks, so that fewer tensors meet in one kernel (every tensor a \
                 kernel reads or writes is one of its parameters)",
            );
        return Err(CodegenError::Limit {
            block: block.name.clone(),
            location: source.location(span),
            diagnostic: Box::new(diagnostic),
        });
    }
    Ok(())
}

/// The value at which `kernel` first uses buffer `buf`: the first node that
/// reads it (for a block input, the first node computing with it, since the
/// input's own span is its declaration), else the first store into it.
fn first_use(block: &Block, kernel: &Kernel, buf: BufId) -> Option<Value> {
    let kernels = match &kernel.kind {
        KernelKind::Gemm(spec) => spec.prelude.iter().map(|p| p.kernel.as_ref()).chain([kernel]).collect(),
        _ => vec![kernel],
    };
    for k in kernels {
        let reads = |op: &Op| match op {
            Op::Load(b) | Op::FinishCol(b) => *b == buf,
            Op::FinishRow(_, bufs) => bufs.contains(&buf),
            _ => false,
        };
        if let Some(id) = k.nodes.iter().position(|n| reads(&n.op)) {
            let node = &k.nodes[id];
            if !matches!(block.inst(node.value), Inst::Param(_)) {
                return Some(node.value);
            }
            let user = k.nodes.iter().find(|n| n.op.operands().contains(&id));
            return Some(user.map_or(node.value, |n| n.value));
        }
        if let Some(store) = k.stores.iter().find(|s| s.buf == buf) {
            return k.nodes.get(store.node).map(|n| n.value);
        }
    }
    None
}

/// A value the kernel computes, for a refusal without a better place.
fn stored_value(kernel: &Kernel) -> Value {
    let stored = kernel.stores.first().map(|s| s.node).or(kernel.partials.first().map(|p| p.node));
    stored.and_then(|n| kernel.nodes.get(n)).or(kernel.nodes.last()).map_or(Value::from_index(0), |n| n.value)
}
