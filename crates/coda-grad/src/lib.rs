//! Reverse-mode differentiation of the block IR.
//!
//! [`differentiate`] turns a verified forward [`Block`] into its backward
//! block: an ordinary block whose inputs are the forward's inputs it still
//! needs, the *saved* tensors and the gradients of the differentiated
//! outputs (`d<output>`), and whose outputs are the gradients of the
//! requested inputs (`d<input>`, in each input's dtype and shape). Because it
//! is an ordinary block, it goes through the same reparameterizer,
//! partitioner, code generator and interpreter as any other.
//!
//! # Saved-tensor policy
//!
//! The forward stores every matmul result the backward reads (in `f32`, the
//! type of a matmul result; or, when the result only feeds residual
//! additions ending in a 16-bit cast, that cast: `saving::save_point`), and
//! a matmul operand in its 16-bit operand type where reading it is cheaper
//! than recomputing it from saved results (`saving::saved_operands`),
//! unless it is an element-wise function of tensors the backward reads
//! anyway (`saving::recomputed_operands`); it reads a normalised tensor or
//! a row statistic that the forward outputs from that output
//! (`saving::normalized_outputs`, `saving::statistics_in_outputs`); the
//! backward recomputes every
//! other forward value it needs (elementwise work, norms and their row
//! statistics, activations, rotary tables) from its inputs and the saved
//! tensors. Matmuls are the only work too expensive to redo; everything
//! else is memory-bound work that fuses into the backward's own kernels.
//! For example the SwiGLU output `y = swiglu(z)` is recomputed from the
//! saved pre-activation `z`, which the backward reads for `dz` anyway,
//! never stored. [`Gradient::saved`] lists the saved tensors and
//! [`Gradient::saving_forward`] is the forward block that also outputs them.
//!
//! # Method
//!
//! The backward block first recomputes the forward (each matmul replaced by
//! its saved tensor), then walks the forward's instructions in reverse and
//! applies one vector-Jacobian product per instruction kind ([`vjp`], each
//! rule with its derivative identity as a comment), accumulating the
//! gradients of values used several times. Only *active* values (float
//! values that depend on a requested input) receive gradients, so integer
//! inputs, comparisons and constants never do. Dead code and unused inputs
//! are then removed and the result is verified.

mod activity;
mod builder;
mod compact;
pub mod fp8;
mod names;
mod saving;
mod shifted;
mod unary;
mod vjp;

use coda_diagnostics::Span;
use coda_ir::{Block, Ty, Value};

/// What to differentiate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GradSpec {
    /// The backward block's name.
    pub name: String,
    /// Indices of the forward's params whose gradients are wanted, in output order.
    pub wrt: Vec<usize>,
    /// Indices of the forward's outputs whose gradients are given.
    pub outputs: Vec<usize>,
    /// The declaration (the backward block's span).
    pub span: Span,
}

/// A tensor the forward stores for the backward.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// Its name: an input of the backward and an output of the saving forward.
    pub name: String,
    /// The forward value saved.
    pub value: Value,
    /// Its type (`f32` for a matmul result, the 16-bit type of a saved cast).
    pub ty: Ty,
    /// How its columns are ordered.
    pub layout: SavedLayout,
    /// The forward output that already holds it (same value, type and
    /// column order), whose name it takes: the saving forward adds no
    /// output for it, so the forward stores it once.
    pub output: Option<usize>,
}

/// The column order of a saved tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedLayout {
    /// The value's own columns.
    Plain,
    /// A value of `2F` columns used only through its halves `[:, :F]` and
    /// `[:, F:]`, saved interleaved: column `2j` holds `value[:, j]` and
    /// `2j + 1` holds `value[:, F + j]` (`saving::paired_halves`).
    PairedHalves,
    /// A matmul result `L` that the backward reads only as a softmax,
    /// saved as `bf16(exp(L − m))` with `m` its maximum over each group of
    /// `width` columns (`shifted::shifted_exponentials`).
    ShiftedExp {
        /// The group width.
        width: i64,
    },
    /// The maximum of a matmul result over each group of `width` columns,
    /// `f32[M, N / width]`, saved beside its [`SavedLayout::ShiftedExp`].
    GroupMax {
        /// The group width.
        width: i64,
    },
}

/// The result of [`differentiate`].
#[derive(Debug, Clone)]
pub struct Gradient {
    /// The forward block's name.
    pub forward: String,
    /// The backward block.
    pub backward: Block,
    /// The forward block with one more output per saved tensor.
    pub saving_forward: Block,
    /// What the forward stores for the backward, in forward order.
    pub saved: Vec<Saved>,
    /// The forward values the backward recomputes (besides inputs, saved
    /// tensors and constants), in forward order.
    pub recomputed: Vec<Value>,
    /// The requested inputs that no differentiated output depends on (their gradient is zero).
    pub zero: Vec<usize>,
    /// The forward's amax reductions that scale an fp8 cast and carry a
    /// gradient: computed from values that are not `detach`ed
    /// ([`fp8::differentiated_scales`]).
    pub differentiated_scales: Vec<Value>,
    /// For each requested input (forward param index), the backward output holding its gradient.
    pub input_grads: Vec<(usize, String)>,
    /// For each differentiated output (forward output index), the backward input
    /// taking its gradient (absent from the backward when nothing depends on it).
    pub output_grads: Vec<(usize, String)>,
}

/// Why a block could not be differentiated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GradError {
    /// An instruction on the path from an input to an output has no derivative rule.
    #[error("{what} cannot be differentiated: {reason}")]
    NotDifferentiable {
        /// The forward value.
        value: Value,
        /// Its instruction, as printed.
        what: String,
        /// Why.
        reason: String,
    },
    /// The spec names a param or output that does not exist, or one that is not a float.
    #[error("bad gradient request: {0}")]
    BadSpec(String),
    /// A rule built an ill-typed or unverifiable block: a bug in codac.
    #[error("the differentiator built an invalid block: {0}")]
    Internal(String),
}

/// Builds the backward block of `forward` (see the module docs).
pub fn differentiate(forward: &Block, spec: &GradSpec) -> Result<Gradient, GradError> {
    check_spec(forward, spec)?;
    let saving_operands = differentiate_recomputing(forward, spec, &[])?;
    let recomputed = saving::recomputed_operands(forward, &saving_operands.saved, &saving_operands.backward);
    if recomputed.is_empty() {
        return Ok(saving_operands);
    }
    differentiate_recomputing(forward, spec, &recomputed)
}

/// [`differentiate`], with the matmul operands in `recomputed` recomputed
/// by the backward instead of saved.
fn differentiate_recomputing(forward: &Block, spec: &GradSpec, recomputed: &[Value]) -> Result<Gradient, GradError> {
    let active = activity::active(forward, &spec.wrt);
    let differentiated_scales = fp8::differentiated_scales(forward, &active);
    let mut builder = builder::Builder::new(forward, spec, active, recomputed)?;
    builder.seed_outputs()?;
    vjp::sweep(&mut builder)?;
    let zero = builder.finish_outputs()?;
    let (backward, origin, saved, output_names) = builder.into_parts();
    let input_grads = spec.wrt.iter().copied().zip(backward.outputs.iter().map(|o| o.tensor.name.clone())).collect();
    let output_grads = spec.outputs.iter().copied().zip(output_names).collect();
    let (backward, origin) = compact::compact(&backward, &origin).map_err(GradError::Internal)?;
    let recomputes_matmul = backward.insts.iter().any(|(b, inst)| {
        matches!(inst, coda_ir::Inst::MatMul { .. }) && origin.get(b.index()).is_some_and(Option::is_some)
    });
    if recomputes_matmul {
        return Err(GradError::Internal("the backward recomputes a forward matmul instead of reading it saved".into()));
    }
    let saved: Vec<Saved> = saved.into_iter().filter(|s| backward.param(&s.name).is_some()).collect();
    let (mut backward, origin, saved) = shifted::shifted_exponentials(backward, origin, saved)?;
    backward.saved_products = saving::saved_products(forward, &backward, &origin, &saved);
    coda_ir::verify::verify(&backward).map_err(|e| GradError::Internal(e.to_string()))?;
    let recomputed = recomputed_values(forward, &backward, &origin);
    let saving_forward = saving::saving_forward(forward, &saved)?;
    Ok(Gradient {
        forward: forward.name.clone(),
        backward,
        saving_forward,
        saved,
        recomputed,
        zero,
        differentiated_scales,
        input_grads,
        output_grads,
    })
}

/// The default request: every float input, every float output.
pub fn default_spec(forward: &Block, name: String, span: Span) -> GradSpec {
    let wrt = forward.params.iter().enumerate().filter(|(_, p)| p.dtype.is_float()).map(|(i, _)| i).collect();
    let outputs =
        forward.outputs.iter().enumerate().filter(|(_, o)| o.tensor.dtype.is_float()).map(|(i, _)| i).collect();
    GradSpec { name, wrt, outputs, span }
}

fn check_spec(forward: &Block, spec: &GradSpec) -> Result<(), GradError> {
    for &i in &spec.wrt {
        match forward.params.get(i) {
            Some(p) if p.dtype.is_float() => {}
            Some(p) => return Err(GradError::BadSpec(format!("input `{}` is not a float", p.name))),
            None => return Err(GradError::BadSpec(format!("input #{i} does not exist"))),
        }
    }
    for &i in &spec.outputs {
        match forward.outputs.get(i) {
            Some(o) if o.tensor.dtype.is_float() => {}
            Some(o) => return Err(GradError::BadSpec(format!("output `{}` is not a float", o.tensor.name))),
            None => return Err(GradError::BadSpec(format!("output #{i} does not exist"))),
        }
    }
    Ok(())
}

/// Forward values copied into the backward, other than params, constants and saved tensors.
fn recomputed_values(forward: &Block, backward: &Block, origin: &[Option<Value>]) -> Vec<Value> {
    let mut values: Vec<Value> = backward
        .insts
        .iter()
        .filter(|(_, inst)| !matches!(inst, coda_ir::Inst::Param(_) | coda_ir::Inst::Const(_)))
        .filter_map(|(v, _)| origin.get(v.index()).copied().flatten())
        .filter(|f| !matches!(forward.inst(*f), coda_ir::Inst::Const(_) | coda_ir::Inst::DimValue(_)))
        .collect();
    values.sort();
    values.dedup();
    values
}
