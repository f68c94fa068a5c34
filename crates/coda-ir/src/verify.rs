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
    for fact in &block.saved_products {
        verify_saved_product(block, fact).map_err(|m| fail("saved product".into(), m))?;
    }
    Ok(())
}

/// The values of a saved product exist and have the rows of its left operand.
fn verify_saved_product(block: &Block, fact: &crate::SavedProduct) -> Result<(), String> {
    let defined = |v: crate::Value| v.index() < block.insts.len();
    if !fact.parts.iter().chain([&fact.lhs, &fact.rhs]).all(|v| defined(*v)) || fact.parts.is_empty() {
        return Err("names an undefined value".into());
    }
    if !matches!(block.inst(fact.rhs), crate::Inst::Param(_)) {
        return Err(format!("its right operand {} is not a parameter", fact.rhs));
    }
    let rows = &block.ty(fact.lhs).shape.rows;
    match fact.parts.iter().find(|p| &block.ty(**p).shape.rows != rows) {
        Some(p) => Err(format!("part {p} does not have the rows of {}", fact.lhs)),
        None => Ok(()),
    }
}
