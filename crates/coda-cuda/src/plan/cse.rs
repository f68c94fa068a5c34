//! Value numbering and liveness over the block IR.
//!
//! Two instructions with the same operation, the same (numbered) operands
//! and the same type compute the same value, so later stages use one
//! representative for both: `cross_entropy` and `logsumexp` of the same
//! logits share one log-sum-exp partial, and a repeated `x * x` is computed
//! once. A value is live when an output needs it.

use coda_ir::{Block, Inst, Value};
use std::collections::HashMap;

/// The representative of every value (itself when it is the first of its kind).
pub(crate) fn number_values(block: &Block) -> Vec<Value> {
    let mut canon: Vec<Value> = Vec::with_capacity(block.insts.len());
    let mut seen: HashMap<String, Value> = HashMap::new();
    for (value, inst) in block.insts.iter() {
        let remapped = remap(inst, &canon);
        let key = format!("{remapped:?}|{}", block.ty(value));
        let rep = *seen.entry(key).or_insert(value);
        canon.push(rep);
    }
    canon
}

/// `inst` with every operand replaced by its representative.
fn remap(inst: &Inst, canon: &[Value]) -> Inst {
    inst.map_operands(|v| canon.get(v.index()).copied().unwrap_or(v))
}

/// Which representatives the outputs need.
pub(crate) fn live_values(block: &Block, canon: &[Value]) -> Vec<bool> {
    let mut live = vec![false; block.insts.len()];
    let mut stack: Vec<Value> = block.outputs.iter().map(|o| canon[o.value.index()]).collect();
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut live[v.index()], true) {
            continue;
        }
        for operand in block.inst(v).operands() {
            stack.push(canon[operand.index()]);
        }
    }
    live
}
