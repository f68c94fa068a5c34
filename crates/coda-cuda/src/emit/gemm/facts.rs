//! Facts about the nodes of a GEMM kernel that the pair loop asks about:
//! which values are the same at both columns of a pair, which tile values
//! read tile loads through element-wise operations only, where a sliced
//! tile load reads its buffer, and which operand is a column vector load.

use super::Emitter;
use crate::kir::{NodeId, Op, Space};
use std::collections::HashMap;

/// Whether node `id` has the same value at columns `2j` and `2j + 1`: it
/// reads columns only through interleaved rotary frequency tables whose
/// range starts and ends at even columns (pairs never straddle its ends).
pub(super) fn pair_invariant(em: &Emitter<'_>, id: NodeId, memo: &mut HashMap<NodeId, bool>) -> bool {
    node_flag(em, id, memo, |em, id| {
        let Some(node) = em.kernel.nodes.get(id) else { return Flag::Is(false) };
        if node.reg.is_none() && matches!(node.space, Space::Row | Space::Scalar) {
            return Flag::Is(true);
        }
        match &node.op {
            Op::Rope(spec, coda_ir::RopeTable::Freq) => Flag::Is(
                spec.style == coda_ir::RopeStyle::Interleaved
                    && spec.start.as_const().is_some_and(|s| s % 2 == 0)
                    && spec.end.as_const().is_some_and(|e| e % 2 == 0),
            ),
            Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::Cast(..) | Op::Broadcast(_) if node.reg.is_none() => {
                Flag::All
            }
            _ => Flag::Is(false),
        }
    })
}

/// Whether `id` is a tile value outside the registers that reads tile
/// loads through element-wise operations only (or is such a load, or a
/// constant-offset slice of one): [`Gemm::inline_pair`] evaluates it for
/// both slots of a pair with pair loads.
pub(super) fn reads_tile_pairs(em: &Emitter<'_>, id: NodeId, memo: &mut HashMap<NodeId, bool>) -> bool {
    node_flag(em, id, memo, |em, id| {
        let Some(node) = em.kernel.nodes.get(id) else { return Flag::Is(false) };
        if node.reg.is_some() || node.space != Space::Tile {
            return Flag::Is(false);
        }
        if sliced_tile_load(em, id).is_some() {
            return Flag::Is(true);
        }
        match &node.op {
            Op::Unary(..) | Op::Binary(..) | Op::Select(..) | Op::Cast(..) => Flag::Any,
            _ => Flag::Is(false),
        }
    })
}

/// What a node contributes to a property of node DAGs ([`node_flag`]).
enum Flag {
    /// The node has it or not, whatever its operands.
    Is(bool),
    /// The node has it when one of its operands has it.
    Any,
    /// The node has it when all its operands have it.
    All,
}

/// A property of `id` defined over its operands by `rule`, with the
/// answers for every node looked at kept in `memo`. The walk keeps its own
/// stack (element-wise chains are as long as the program) and asks about
/// each node once per kernel, not once per reader.
fn node_flag(
    em: &Emitter<'_>,
    id: NodeId,
    memo: &mut HashMap<NodeId, bool>,
    rule: impl Fn(&Emitter<'_>, NodeId) -> Flag,
) -> bool {
    let operands = |id: NodeId| em.kernel.nodes.get(id).map(|n| n.op.operands()).unwrap_or_default();
    let mut stack = vec![(id, false)];
    while let Some((id, operands_done)) = stack.pop() {
        if memo.contains_key(&id) {
            continue;
        }
        let flag = rule(em, id);
        if let Flag::Is(answer) = flag {
            memo.insert(id, answer);
            continue;
        }
        if !operands_done {
            stack.push((id, true));
            stack.extend(operands(id).into_iter().filter(|o| !memo.contains_key(o)).map(|o| (o, false)));
            continue;
        }
        let mut answers = operands(id).into_iter().map(|o| memo.get(&o).copied().unwrap_or(false));
        let answer = match flag {
            Flag::Any => answers.any(|a| a),
            _ => answers.all(|a| a),
        };
        memo.insert(id, answer);
    }
    memo.get(&id).copied().unwrap_or(false)
}

/// Where a tile value reads a buffer: column `c` of the value is column
/// `start + step * c` of `buf`, loaded by node `load`.
#[derive(Debug, Clone, Copy)]
pub(super) struct TileCols {
    pub(super) load: NodeId,
    pub(super) buf: usize,
    pub(super) start: i64,
    pub(super) step: i64,
}

/// A tile load, directly or through slices with constant starts, whose
/// composed step is 1 (a column range) or 2 (the even or odd columns of a
/// tensor in pair layout).
pub(super) fn sliced_tile_load(em: &Emitter<'_>, id: NodeId) -> Option<TileCols> {
    // The slices from `id` down to the load, outermost first (a loop: a
    // chain of slices is as long as the program).
    let mut slices = Vec::new();
    let mut at = id;
    let (load, buf) = loop {
        let node = em.kernel.nodes.get(at)?;
        if node.reg.is_some() || node.space != Space::Tile {
            return None;
        }
        match &node.op {
            Op::Load(buf) => break (at, *buf),
            Op::Slice { arg, start, step } => {
                slices.push((start.as_const(), *step));
                at = *arg;
            }
            _ => return None,
        }
    };
    let mut cols = TileCols { load, buf, start: 0, step: 1 };
    for (start, step) in slices.into_iter().rev() {
        cols = TileCols { start: cols.start + cols.step * start?, step: cols.step * step, ..cols };
        if !matches!(cols.step, 1 | 2) {
            return None;
        }
    }
    Some(cols)
}

/// The column-vector load under `op`'s broadcasts, and its buffer.
pub(super) fn column_vector_load(em: &Emitter<'_>, mut op: NodeId) -> Option<(NodeId, usize)> {
    while let Op::Broadcast(a) = em.kernel.nodes[op].op {
        op = a;
    }
    match em.kernel.nodes[op].op {
        Op::Load(buf) if em.kernel.nodes[op].space == Space::Col => Some((op, buf)),
        _ => None,
    }
}
