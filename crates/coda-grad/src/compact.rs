//! Dead-code elimination: keeps the instructions the outputs need, and the
//! params they read (renumbered, in their original order).

use coda_ir::{Block, Inst, Value};

/// The live part of `block`, and the forward origin of each kept value.
pub(crate) fn compact(block: &Block, origin: &[Option<Value>]) -> Result<(Block, Vec<Option<Value>>), String> {
    let live = live_values(block);
    let mut param_index = vec![None; block.params.len()];
    let mut out = Block::new(block.name.clone(), block.kind, block.span);
    out.dims = block.dims.clone();
    for (v, inst) in block.insts.iter() {
        if let (Inst::Param(i), true) = (inst, live[v.index()]) {
            param_index[*i] = Some(out.params.len());
            out.params.push(block.params[*i].clone());
        }
    }
    let mut map: Vec<Option<Value>> = vec![None; block.insts.len()];
    let mut kept_origin = Vec::new();
    for (v, inst) in block.insts.iter() {
        if !live[v.index()] {
            continue;
        }
        let copy = match inst {
            Inst::Param(i) => Inst::Param(param_index[*i].ok_or("a live param was not kept")?),
            _ => inst.map_operands(|o| map[o.index()].unwrap_or(o)),
        };
        let new = out.push(copy, block.insts.span(v)).map_err(|e| e.0)?;
        if let Some(name) = &block.names[v.index()] {
            out.set_name(new, name);
        }
        map[v.index()] = Some(new);
        kept_origin.push(origin.get(v.index()).copied().flatten());
    }
    for output in &block.outputs {
        let value = map[output.value.index()].ok_or("an output's value was not kept")?;
        out.outputs.push(coda_ir::Output { value, ..output.clone() });
    }
    Ok((out, kept_origin))
}

/// Values some output needs.
fn live_values(block: &Block) -> Vec<bool> {
    let mut live = vec![false; block.insts.len()];
    for output in &block.outputs {
        live[output.value.index()] = true;
    }
    for (v, inst) in block.insts.iter().collect::<Vec<_>>().into_iter().rev() {
        if live[v.index()] {
            for o in inst.operands() {
                live[o.index()] = true;
            }
        }
    }
    live
}
