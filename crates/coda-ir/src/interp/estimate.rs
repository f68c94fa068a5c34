//! What an evaluation will cost, computed from the block's shapes before
//! anything is allocated: the bytes of its inputs, the most bytes of values
//! live at once, and the work (see [`estimate`]).

use super::bind::{bind_shape, resolve_bindings, DimBindings};
use super::error::EvalError;
use super::eval::last_uses;
use crate::block::Block;
use crate::inst::{Inst, Value};

/// The cost of evaluating one block at given dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Bytes of the inputs: every param and the previous content of every
    /// `+=` output, 8 bytes an element (the interpreter holds `f64`).
    pub input_bytes: u64,
    /// The most bytes of computed values live at once, as the interpreter
    /// counts them against its limit: values it computed and has not freed,
    /// a matmul's operand copies, and copies made for outputs.
    pub peak_bytes: u64,
    /// Elements computed plus multiply-adds: the unit of
    /// [`Progress`](super::Progress).
    pub work: u128,
    /// Multiply-adds of the matmuls.
    pub macs: u128,
}

impl Estimate {
    /// Inputs plus the peak of live values: about the memory an evaluation
    /// on inputs held in memory needs.
    pub fn total_bytes(&self) -> u64 {
        self.input_bytes.saturating_add(self.peak_bytes)
    }
}

/// The cost of evaluating `block` under `dims`, computed from shapes alone
/// with the interpreter's own rules for freeing values: a param's input is
/// assumed to be used in place (as inputs of the param's dtype and shape
/// are), so the inputs count once. Fails, located, where a dimension has no
/// valid value or a value would exceed [`MAX_ELEMENTS`](super::MAX_ELEMENTS).
pub fn estimate(block: &Block, dims: &DimBindings) -> Result<Estimate, EvalError> {
    let dims = resolve_bindings(block, dims).map_err(|e| locate_dim_error(block, e))?;
    let accumulated = block.outputs.iter().filter(|o| o.accumulate).map(|o| &o.tensor);
    let mut input_elements: u128 = 0;
    for decl in block.params.iter().chain(accumulated) {
        let (rows, cols) = bind_shape(&decl.shape, &dims).map_err(|e| e.at(decl.span))?;
        input_elements += rows as u128 * cols as u128;
    }
    let work = instruction_work(block, &dims)?;
    let last_use = last_uses(block);
    let mut sizes = vec![0u128; block.insts.len()];
    let (mut live, mut peak, mut macs) = (0u128, 0u128, 0u128);
    for ((value, inst), work) in block.insts.iter().zip(&work) {
        let elements = elements_of(block, value, &dims)?;
        let own = if matches!(inst, Inst::Param(_)) { 0 } else { elements };
        let scratch = match inst {
            Inst::MatMul { lhs, rhs, .. } => {
                macs += work - elements;
                elements_of(block, *lhs, &dims)? + elements_of(block, *rhs, &dims)? + elements
            }
            _ => 0,
        };
        peak = peak.max(live + own + scratch);
        live += own;
        if let Some(size) = sizes.get_mut(value.index()) {
            *size = own;
        }
        for dead in inst.operands().into_iter().chain([value]) {
            if last_use.get(dead.index()) == Some(&value.index()) {
                live -= sizes.get_mut(dead.index()).map_or(0, std::mem::take);
            }
        }
    }
    for output in &block.outputs {
        // Outputs that store a param, or a value another output stores too, are copies.
        let copied = sizes.get(output.value.index()).is_none_or(|s| *s == 0)
            || block.outputs.iter().filter(|o| o.value == output.value).count() > 1;
        if copied {
            live += elements_of(block, output.value, &dims)?;
            peak = peak.max(live);
        }
    }
    let bytes = |elements: u128| u64::try_from(elements.saturating_mul(8)).unwrap_or(u64::MAX);
    Ok(Estimate { input_bytes: bytes(input_elements), peak_bytes: bytes(peak), work: work.iter().sum(), macs })
}

/// The elements of `value` under `dims`, the error located at its source.
fn elements_of(block: &Block, value: Value, dims: &DimBindings) -> Result<u128, EvalError> {
    let (rows, cols) = bound_shape(block, value, dims)?;
    Ok(rows as u128 * cols as u128)
}

/// The `(rows, cols)` of `value` under `dims`, the error located at its source.
fn bound_shape(block: &Block, value: Value, dims: &DimBindings) -> Result<(usize, usize), EvalError> {
    let ty = block
        .types
        .get(value.index())
        .ok_or_else(|| EvalError::Malformed { block: block.name.clone(), message: format!("{value} has no type") })?;
    bind_shape(&ty.shape, dims).map_err(|e| e.at(block.insts.span(value)))
}

/// The work of each instruction: the elements it computes, plus for a
/// matmul its multiply-adds.
pub(super) fn instruction_work(block: &Block, dims: &DimBindings) -> Result<Vec<u128>, EvalError> {
    let mut work = Vec::with_capacity(block.insts.len());
    for (value, inst) in block.insts.iter() {
        let elements = elements_of(block, value, dims)?;
        let macs = match inst {
            Inst::MatMul { lhs, lhs_transposed, .. } => {
                let (rows, cols) = bound_shape(block, *lhs, dims)?;
                let inner = if *lhs_transposed { rows } else { cols };
                elements * inner as u128
            }
            _ => 0,
        };
        work.push(elements + macs);
    }
    Ok(work)
}

/// A dimension error from binding the block's dims, located at the first
/// input whose shape mentions the dimension (else at the block).
pub(super) fn locate_dim_error(block: &Block, error: EvalError) -> EvalError {
    let name = match error.cause() {
        EvalError::UnboundDim { name } | EvalError::ConflictingDim { name, .. } => name.clone(),
        EvalError::NonPositiveDim { dim, .. } => dim.clone(),
        _ => return error,
    };
    let mentions = |decl: &&crate::block::Tensor| {
        decl.shape.rows.symbols().contains(&name) || decl.shape.cols.symbols().contains(&name)
    };
    let span =
        block.params.iter().find(mentions).map_or_else(|| super::diagnostic::header_span(block), |decl| decl.span);
    error.at(span)
}
