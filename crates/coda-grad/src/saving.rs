//! The saving forward: the forward block with one more output per saved
//! tensor, which is what a training step runs before the backward.

use crate::{GradError, Saved};
use coda_ir::{Block, Output, Tensor};

/// `forward` plus an `f32` output for each saved tensor, named `<forward>_saving`.
pub(crate) fn saving_forward(forward: &Block, saved: &[Saved]) -> Result<Block, GradError> {
    let mut block = forward.clone();
    block.name = format!("{}_saving", forward.name);
    for s in saved {
        let span = forward.insts.span(s.value);
        let tensor = Tensor { name: s.name.clone(), dtype: s.ty.dtype, shape: s.ty.shape.clone(), rank: 2, span };
        block.outputs.push(Output { tensor, value: s.value, accumulate: false, span });
    }
    coda_ir::verify::verify(&block).map_err(|e| GradError::Internal(e.to_string()))?;
    Ok(block)
}
