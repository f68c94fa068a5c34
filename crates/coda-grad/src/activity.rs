//! Activity analysis: which forward values can carry a gradient.
//!
//! A value is *active* when it is a float and depends on one of the
//! requested inputs other than through `detach`. Integer and bool values
//! (targets, positions, comparison results, casts to `i32`) are never
//! active, so no gradient flows into them or through them; nor does one
//! flow through a `detach` (an fp8 cast's scale, say).

use coda_ir::{Block, Inst, UnaryOp};

/// `active[v]` for every forward value.
pub(crate) fn active(block: &Block, wrt: &[usize]) -> Vec<bool> {
    let mut active = vec![false; block.insts.len()];
    for (v, inst) in block.insts.iter() {
        let float = block.ty(v).dtype.is_float();
        active[v.index()] = float
            && match inst {
                Inst::Param(i) => wrt.contains(i),
                Inst::Unary { op: UnaryOp::Detach, .. } => false,
                _ => inst.operands().iter().any(|o| active[o.index()]),
            };
    }
    active
}
