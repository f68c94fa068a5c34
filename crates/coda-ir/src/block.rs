//! Blocks: a block's parameters, its straight-line instructions and its outputs.

use crate::arena::Arena;
use crate::dim::Dim;
use crate::infer::{infer, TypeError};
use crate::inst::{Inst, Value};
use crate::ty::{DType, Shape, Ty};
use coda_diagnostics::Span;

/// Whether a block is plain math or an explicit kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// Plain math, partitioned into kernels by the compiler.
    Block,
    /// One GEMM plus an explicit epilogue.
    Kernel,
}

/// A named dimension the block uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimDef {
    /// Its name.
    pub name: String,
    /// `Some` for a named constant, `None` for a symbolic dim bound at run time.
    pub value: Option<i64>,
}

/// An input or output tensor of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// Its name (the `.npy` file name for `codac eval`).
    pub name: String,
    /// Storage type.
    pub dtype: DType,
    /// Canonical two-axis shape.
    pub shape: Shape,
    /// Declared rank: 0 (scalar), 1 (a vector, stored as a flat array) or 2.
    pub rank: u8,
    /// The declaration.
    pub span: Span,
}

impl Tensor {
    /// The value type of this tensor.
    pub fn ty(&self) -> Ty {
        Ty { dtype: self.dtype, shape: self.shape.clone() }
    }
}

/// An output: a declared tensor and the value stored into it.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The declaration.
    pub tensor: Tensor,
    /// The value stored (rounded to the tensor's dtype).
    pub value: Value,
    /// `+=`: the stored result is the buffer's previous content plus `value`.
    pub accumulate: bool,
    /// The assignment statement.
    pub span: Span,
}

/// One block of straight-line SSA.
///
/// Invariants (checked by [`crate::verify`]): every operand is defined before
/// its user; `types[v]` is what [`infer`] gives for `insts[v]`; every output
/// value's shape equals its tensor's shape.
#[derive(Debug, Clone)]
pub struct Block {
    /// The block's name.
    pub name: String,
    /// Block or explicit kernel.
    pub kind: BlockKind,
    /// Dimensions declared for this block (file-level and block-level), in order.
    pub dims: Vec<DimDef>,
    /// Inputs in declaration order.
    pub params: Vec<Tensor>,
    /// Instructions, in a valid evaluation order.
    pub insts: Arena<Inst>,
    /// The type of every instruction, indexed like `insts`.
    pub types: Vec<Ty>,
    /// The source name of a value bound by `let`, if any (for printing).
    pub names: Vec<Option<String>>,
    /// Outputs in declaration order.
    pub outputs: Vec<Output>,
    /// What the differentiator knows about inputs made by the saving
    /// forward (empty for a block as written; see [`SavedProduct`]).
    pub saved_products: Vec<SavedProduct>,
    /// The whole block in the source.
    pub span: Span,
}

/// A relation between inputs of a backward block that the saving forward
/// guarantees: the columns of `parts`, concatenated in order, are the
/// product `lhs @ op(rhs)` as the forward computed it, or that product
/// rounded to a 16-bit type when the forward saved it so (`rhs` transposed when
/// `rhs_transposed`, operands rounded to `operand_dtype`, `f32`
/// accumulation; a rule of the forward may have applied a per-row scale
/// after the product instead of before it). `parts` are values that read
/// the saved tensor (the tensor itself, or its halves when it was saved in
/// pair layout); `lhs` is the backward's recomputation of the forward's
/// left operand and `rhs` a parameter. It holds only for inputs the saving
/// forward made, which is how a training step calls the backward; rules
/// that use it (the reparameterizer's `zdz` rule) trade the recomputation
/// of a row dot product for a read of the saved product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedProduct {
    /// The saved product's columns, in order.
    pub parts: Vec<Value>,
    /// The forward's left operand, `[rows, K]`.
    pub lhs: Value,
    /// The forward's right operand (a parameter).
    pub rhs: Value,
    /// Whether the forward read `rhs` transposed.
    pub rhs_transposed: bool,
    /// The 16-bit type the forward read both operands in.
    pub operand_dtype: DType,
}

impl Block {
    /// An empty block.
    pub fn new(name: impl Into<String>, kind: BlockKind, span: Span) -> Block {
        Block {
            name: name.into(),
            kind,
            dims: Vec::new(),
            params: Vec::new(),
            insts: Arena::default(),
            types: Vec::new(),
            names: Vec::new(),
            outputs: Vec::new(),
            saved_products: Vec::new(),
            span,
        }
    }

    /// Appends an instruction after inferring its type.
    pub fn push(&mut self, inst: Inst, span: Span) -> Result<Value, TypeError> {
        let ty = infer(self, &inst)?;
        let value = self.insts.append(inst, span);
        self.types.push(ty);
        self.names.push(None);
        Ok(value)
    }

    /// The type of a value.
    pub fn ty(&self, value: Value) -> &Ty {
        &self.types[value.index()]
    }

    /// The instruction defining a value.
    pub fn inst(&self, value: Value) -> &Inst {
        self.insts.get(value)
    }

    /// The users of every value, by value index: each instruction reading
    /// it, once, in arena order.
    pub fn users(&self) -> Vec<Vec<Value>> {
        let mut users = vec![Vec::new(); self.insts.len()];
        for (v, inst) in self.insts.iter() {
            for o in inst.operands() {
                if !users[o.index()].contains(&v) {
                    users[o.index()].push(v);
                }
            }
        }
        users
    }

    /// Names the value (the first name given wins).
    pub fn set_name(&mut self, value: Value, name: &str) {
        if let Some(slot) = self.names.get_mut(value.index()) {
            if slot.is_none() {
                *slot = Some(name.to_string());
            }
        }
    }

    /// The symbolic (run-time) dimensions, in declaration order.
    pub fn symbolic_dims(&self) -> impl Iterator<Item = &str> {
        self.dims.iter().filter(|d| d.value.is_none()).map(|d| d.name.as_str())
    }

    /// Looks up a parameter by name.
    pub fn param(&self, name: &str) -> Option<(usize, &Tensor)> {
        self.params.iter().enumerate().find(|(_, p)| p.name == name)
    }

    /// The number of matmuls, i.e. of GEMM kernels the block anchors.
    pub fn matmul_count(&self) -> usize {
        self.insts.iter().filter(|(_, i)| matches!(i, Inst::MatMul { .. })).count()
    }
}

/// Every block of one source file.
#[derive(Debug, Clone, Default)]
pub struct Module {
    /// The file name as the user gave it.
    pub file_name: String,
    /// Blocks in source order.
    pub blocks: Vec<Block>,
}

impl Module {
    /// Looks up a block by name.
    pub fn block(&self, name: &str) -> Option<&Block> {
        self.blocks.iter().find(|b| b.name == name)
    }
}

/// A dimension that is the constant 1.
pub fn one() -> Dim {
    Dim::constant(1)
}
