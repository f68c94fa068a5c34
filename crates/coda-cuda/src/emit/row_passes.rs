//! The shared passes of a CTA-per-row kernel's row: per-head statistics
//! staged in shared arrays, whole-row reductions that share one loop over
//! the row, and a row's top k, each computed once per row before the
//! column loops read them.

use super::code::Code;
use super::expr::{Emitter, GroupMember};
use crate::error::CodegenError;
use crate::kir::{Node, Op, Space};
use coda_ir::Dim;

/// Stages what node `id` of a CTA-per-row kernel (`tpr` threads) computes
/// once per row, if it is such a node not yet staged; `tail` marks the
/// nodes evaluated after the grid reductions.
pub(super) fn stage(
    em: &mut Emitter<'_>,
    (id, node): (usize, &Node),
    tpr: u32,
    tail: &[bool],
) -> Result<(), CodegenError> {
    match &node.op {
        Op::GroupReduce { groups, cols, .. } if !em.group_arrays.contains_key(&id) => {
            let batch = group_batch(em, id, tail);
            stage_group_reductions(em, &batch, (*groups, cols), tpr)
        }
        Op::TopK { arg, count, indices, width } => stage_top_k(em, id, node, (*arg, *count, *indices), width),
        Op::RowReduce { width, .. } if !em.is_bound(id, "m", "0") => {
            let (batch, needed) = row_batch(em, id, tail);
            for n in needed {
                em.eval(n, "m", "0")?;
            }
            // A lone reduction streams few tensors: chunked as if one.
            let streams = if batch.len() > 1 { batch_streams(em, &batch) } else { 1 };
            em.row_reductions(&batch, width, ("m", streams)).map(drop)
        }
        _ => Ok(()),
    }
}

/// Stages per-head reductions of a CTA-per-row kernel in shared arrays,
/// once per row: warp `w` takes groups `w`, `w + 8`, …, its lanes striding
/// over each group's columns and accumulating every member of `batch` in
/// one pass ([`group_batch`]); later reads index the arrays.
fn stage_group_reductions(
    em: &mut Emitter<'_>,
    batch: &[GroupMember],
    (groups, cols): (coda_ir::ColGroups, &Dim),
    threads: u32,
) -> Result<(), CodegenError> {
    let Some(count) = groups.count(cols).ok().and_then(|c| c.as_const()) else { return Ok(()) };
    let arrays: Vec<String> =
        batch.iter().map(|x| format!("{}_s", em.local_for(em.kernel.nodes[x.node].value))).collect();
    for array in &arrays {
        em.line(format!("__shared__ float {array}[{count}];"));
    }
    em.open(format!("for (int g = (int)threadIdx.x / 32; g < {count}; g += {})", threads / 32));
    em.coop = 32;
    let streams = batch_streams(em, batch);
    let values = em.group_reductions(batch, (groups, cols), ("m", "g"), Some(streams));
    em.coop = 1;
    for (v, array) in values?.iter().zip(&arrays) {
        em.line_of(Code::of(format!("if (cg::lane<32>() == 0) {array}[g] = {v};"), [v]).reading(&["g"]));
    }
    em.close();
    em.line("__syncthreads();");
    for (x, array) in batch.iter().zip(arrays) {
        em.group_arrays.insert(x.node, array);
    }
    Ok(())
}

/// The per-head reductions staged with node `first` in one pass: `first`
/// and every later one over the same groups of the same columns whose
/// operand reads no per-row reduction (or finished partial) that is not
/// yet computed when `first` is staged, none of the batch included.
/// Independent statistics of one head (a norm's sum of squares and its
/// backward's dot product) then share a pass over the row and a barrier.
fn group_batch(em: &Emitter<'_>, first: usize, tail: &[bool]) -> Vec<GroupMember> {
    let nodes = &em.kernel.nodes;
    let Op::GroupReduce { groups, cols, .. } = &nodes[first].op else { return Vec::new() };
    let pending = |n: usize| {
        n >= first
            && matches!(
                nodes[n].op,
                Op::GroupReduce { .. }
                    | Op::RowReduce { .. }
                    | Op::TopK { .. }
                    | Op::GridReduce { .. }
                    | Op::FinishRow(..)
            )
    };
    let reads_pending = |arg: usize| {
        let (mut stack, mut seen) = (vec![arg], std::collections::BTreeSet::new());
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            if pending(n) {
                return true;
            }
            stack.extend(nodes[n].op.operands());
        }
        false
    };
    let mut batch = Vec::new();
    for (id, node) in nodes.iter().enumerate().skip(first) {
        let Op::GroupReduce { op, groups: g, arg, cols: c } = &node.op else { continue };
        let fits = g == groups && c == cols && !tail[id] && node.reg.is_none() && !reads_pending(*arg);
        if fits && !em.group_arrays.contains_key(&id) {
            batch.push(GroupMember { node: id, op: *op, arg: *arg });
        }
    }
    batch
}

/// The whole-row reductions evaluated with node `first` in one pass over
/// the row: `first` and every later one over the same columns whose
/// operand reads no reduction that is not yet evaluated, with the per-row
/// values their operands read that are not yet computed (to evaluate
/// before the pass, in node order). A row kernel of several norms then
/// reads its row once per layer of dependent statistics instead of once
/// per statistic: Gemma-2's backward recomputes four RMSNorm statistics,
/// two of them (of the two GEMM outputs) independent of the others.
fn row_batch(em: &Emitter<'_>, first: usize, tail: &[bool]) -> (Vec<GroupMember>, Vec<usize>) {
    let nodes = &em.kernel.nodes;
    let Op::RowReduce { op, arg, width } = &nodes[first].op else { return (Vec::new(), Vec::new()) };
    let mut batch = vec![GroupMember { node: first, op: *op, arg: *arg }];
    let mut needed = std::collections::BTreeSet::new();
    for (id, node) in nodes.iter().enumerate().skip(first + 1) {
        let Op::RowReduce { op, arg, width: w } = &node.op else { continue };
        if w != width || tail[id] || node.reg.is_some() || em.is_bound(id, "m", "0") {
            continue;
        }
        if let Some(rows) = computable_in_pass(em, *arg, tail) {
            needed.extend(rows);
            batch.push(GroupMember { node: id, op: *op, arg: *arg });
        }
    }
    (batch, needed.into_iter().collect())
}

/// The loads a pass of `batch` makes per column: its operands' tile loads
/// and the rotary partners' second loads. Six reductions of OLMo-2's
/// backward share one pass over nine of them; in chunks of 8 (72 floats)
/// ptxas gave it 114 registers, so the chunks follow the loads' count.
fn batch_streams(em: &Emitter<'_>, batch: &[GroupMember]) -> usize {
    let nodes = &em.kernel.nodes;
    let mut stack: Vec<usize> = batch.iter().map(|x| x.arg).collect();
    let (mut seen, mut streams) = (std::collections::BTreeSet::new(), 0);
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        match nodes[n].op {
            Op::Load(_) if nodes[n].space == Space::Tile => streams += 1,
            Op::RopePartner(..) => streams += 1,
            _ => {}
        }
        stack.extend(nodes[n].op.operands());
    }
    streams
}

/// The per-row values not yet computed that operand `arg` reads, if it
/// reads no reduction that is not yet evaluated (nor a tail value).
fn computable_in_pass(em: &Emitter<'_>, arg: usize, tail: &[bool]) -> Option<Vec<usize>> {
    let nodes = &em.kernel.nodes;
    let (mut stack, mut seen, mut rows) = (vec![arg], std::collections::BTreeSet::new(), Vec::new());
    while let Some(n) = stack.pop() {
        if !seen.insert(n) || em.is_bound(n, "m", "0") {
            continue;
        }
        // A staged per-head statistic or top k is read from its arrays.
        match nodes[n].op {
            Op::RowReduce { .. } | Op::GridReduce { .. } => return None,
            Op::GroupReduce { .. } if em.group_arrays.contains_key(&n) => continue,
            Op::TopK { .. } if em.top_nodes.contains_key(&n) => continue,
            Op::GroupReduce { .. } | Op::TopK { .. } => return None,
            _ if tail[n] => return None,
            _ => {}
        }
        if matches!(nodes[n].space, Space::Scalar | Space::Row) {
            rows.push(n);
        }
        stack.extend(nodes[n].op.operands());
    }
    Some(rows)
}

/// Chooses a row's top k in a CTA-per-row kernel once: the first warp
/// takes the k elements in turn, its lanes striding over the columns not
/// yet taken and combining their best in a fixed butterfly (NaN first, ties
/// to the lower column), into shared arrays of values and columns that
/// every later read indexes ([`Emitter::top_nodes`]); a top k's values and
/// its columns share them. A router chooses among a few dozen experts.
fn stage_top_k(
    em: &mut Emitter<'_>,
    id: usize,
    node: &crate::kir::Node,
    (arg, count, indices): (usize, i64, bool),
    width: &Dim,
) -> Result<(), CodegenError> {
    if let Some(arrays) = em.top_arrays.get(&(arg, count)).cloned() {
        em.top_nodes.insert(id, (arrays, indices));
        return Ok(());
    }
    let name = em.local_for(node.value);
    let (values, columns) = (format!("{name}_v"), format!("{name}_c"));
    let w = em.dim_int(width);
    em.line(format!("__shared__ float {values}[{count}];"));
    em.line(format!("__shared__ int {columns}[{count}];"));
    em.open("if (threadIdx.x < 32)");
    em.open(format!("for (int t = 0; t < {count}; ++t)"));
    em.line("float best = coda::neg_inf();");
    em.line("int best_c = 0x7fffffff;");
    em.coop = 1;
    em.open(format!("for (int kj = cg::lane<32>(); kj < {w}; kj += 32)"));
    em.line_of(Code::lit(format!("if (cg::taken(kj, {columns}, t)) continue;")).reading(&["kj", "t"]));
    let x = em.eval(arg, "m", "kj")?;
    let pick = format!("if (cg::top_better({x}, kj, best, best_c)) {{ best = {x}; best_c = kj; }}");
    em.line_of(Code::of(pick, [&x]).reading(&["kj"]));
    em.close();
    em.line("cg::warp_top(best, best_c);");
    em.line(format!("if (cg::lane<32>() == 0) {{ {values}[t] = best; {columns}[t] = best_c; }}"));
    em.line("__syncwarp();");
    em.close();
    em.close();
    em.line("__syncthreads();");
    let arrays = (values, columns);
    em.top_arrays.insert((arg, count), arrays.clone());
    em.top_nodes.insert(id, (arrays, indices));
    Ok(())
}
