//! The IR verifier. Checked invariants:
//!
//! 1. every operand is defined before its user (arena order is evaluation order);
//! 2. the recorded type of every value is what the typing rules give;
//! 3. `types` and `names` have one entry per instruction;
//! 4. every output's value exists and has the output tensor's shape;
//! 5. every `Param(i)` names an existing parameter.
//!
//! A failure is a compiler bug, never a user error.

use crate::block::Block;
use crate::infer::infer;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("IR verification failed in block `{block}` at {location}: {message}")]
pub struct VerifyError {
    /// The block.
    pub block: String,
    /// The value or output concerned.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// Checks every invariant listed in the module docs.
pub fn verify(block: &Block) -> Result<(), VerifyError> {
    let fail = |location: String, message: String| VerifyError { block: block.name.clone(), location, message };
    if block.types.len() != block.insts.len() || block.names.len() != block.insts.len() {
        return Err(fail("side tables".into(), "length differs from the instruction count".into()));
    }
    for (value, inst) in block.insts.iter() {
        for operand in inst.operands() {
            if operand >= value {
                return Err(fail(value.to_string(), format!("uses {operand}, defined later")));
            }
        }
        // Re-infer against a block truncated to the values defined so far.
        let expected = infer(block, inst).map_err(|e| fail(value.to_string(), e.0))?;
        if &expected != block.ty(value) {
            return Err(fail(
                value.to_string(),
                format!("recorded type {} but the rules give {expected}", block.ty(value)),
            ));
        }
    }
    for output in &block.outputs {
        let location = format!("output `{}`", output.tensor.name);
        let Some(ty) = block.types.get(output.value.index()) else {
            return Err(fail(location, "stores an undefined value".into()));
        };
        if ty.shape != output.tensor.shape {
            return Err(fail(location, format!("stores {} into {}", ty.shape, output.tensor.shape)));
        }
    }
    Ok(())
}
