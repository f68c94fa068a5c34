//! What the forward saves for the backward ([`save_point`]) and the saving
//! forward: the forward block with one more output per saved tensor, which
//! is what a training step runs before the backward.

use crate::{GradError, Saved};
use coda_ir::{BinaryOp, Block, Inst, Output, Tensor, Value};

/// The value saved for matmul `mm`: the matmul result itself, or, when the
/// result's only use is a chain of additions (residuals) ending in a cast to
/// a 16-bit type, that cast: `x1 = bf16(x0 + attn @ w_o.T)` saves `x1`
/// (bf16) instead of the f32 product. Exact: the backward never reads the
/// chain's f32 values (the derivatives of `+`, `−` and a cast need no
/// primal, the matmul's needs only its operands), and the cast is computed
/// the same way in both blocks. It halves the saved bytes, and the forward
/// already stores the cast (it is the next residual stream).
pub(crate) fn save_point(fwd: &Block, users: &[Vec<Value>], mm: Value) -> Value {
    let is_output = |v: Value| fwd.outputs.iter().any(|o| o.value == v);
    let mut v = mm;
    loop {
        let [user] = users[v.index()].as_slice() else { return mm };
        if is_output(v) {
            return mm;
        }
        match fwd.inst(*user) {
            Inst::Binary { op: BinaryOp::Add | BinaryOp::Sub, lhs, rhs } if lhs != rhs => v = *user,
            Inst::Cast { to, .. } if to.is_half() => return *user,
            _ => return mm,
        }
    }
}

/// The users of every forward value (each user once).
pub(crate) fn users_of(block: &Block) -> Vec<Vec<Value>> {
    let mut users = vec![Vec::new(); block.insts.len()];
    for (v, inst) in block.insts.iter() {
        for o in inst.operands() {
            if !users[o.index()].contains(&v) {
                users[o.index()].push(v);
            }
        }
    }
    users
}

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
