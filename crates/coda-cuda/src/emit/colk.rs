//! Column-reduction kernels: one CTA per [`COL_TILE`] columns, a column per
//! lane; its warps stride over the rows (each warp's loads one coalesced
//! row segment), then combine in warp order. Stores that share no column
//! reduction run in CTAs of their own, side by side.

use super::code::Code;
use super::expr::Emitter;
use super::rowk::{store_call, stored_value, wrap};
use crate::error::CodegenError;
use crate::kir::{KernelKind, Op, Space, Store};
use std::collections::BTreeSet;

/// Columns per CTA of a column-reduction kernel: one per lane of a warp, so
/// that a warp's load is one contiguous row segment (a CTA per column, its
/// threads striding over rows, reads a 32-byte sector per element).
pub(crate) const COL_TILE: u32 = 32;

/// Threads per CTA of a column-reduction kernel: `COL_THREADS / 32` warps,
/// each taking every so many rows of the CTA's columns, so that enough
/// loads are in flight on each multiprocessor although a tensor of 2304
/// columns has only 72 CTAs.
pub(crate) const COL_THREADS: u32 = 1024;

/// The `__global__` function of a column-reduction kernel: column `c` is
/// the lane's column of the CTA's tile, and each reduction over rows runs
/// as a [`COL_TILE`]-column tile (`Emitter::column_tile`). Column values
/// are stored by the first warp, scalars by one thread.
pub(crate) fn emit_col(em: &mut Emitter<'_>, entry: &str) -> Result<String, CodegenError> {
    em.set_indent(1);
    em.coop = COL_THREADS;
    em.column_tile = true;
    let groups = col_groups(em);
    if let Some(tiles) = grouped_tiles(em, &groups) {
        return emit_col_groups(em, entry, &groups, tiles);
    }
    let values: Vec<usize> = (em.kernel.nodes.iter().enumerate())
        .filter(|(_, node)| node.reg.is_none() && matches!(node.space, Space::Scalar | Space::Col))
        .map(|(id, _)| id)
        .collect();
    values_and_stores(em, &values, &em.kernel.stores.clone(), "blockIdx.x == 0")?;
    let body = em.take_lines();
    if em.kernel.reads_col_index() {
        em.line(format!("const int c = (int)(blockIdx.x * {COL_TILE} + threadIdx.x % 32);"));
    }
    em.extend(body);
    Ok(wrap(em, entry, COL_THREADS))
}

/// Evaluates `values` (per-column and scalar nodes, in node order) with
/// the CTA's threads, then writes `stores`: column values by the first
/// warp, scalars by thread 0 of the CTA for which `first` holds.
fn values_and_stores(
    em: &mut Emitter<'_>,
    values: &[usize],
    stores: &[Store],
    first: &str,
) -> Result<(), CodegenError> {
    em.coop = COL_THREADS;
    for &id in values {
        em.eval(id, "0", "c")?;
    }
    em.coop = 1;
    for s in stores {
        let node = &em.kernel.nodes[s.node];
        let (value, scalar) = (node.value, node.space == Space::Scalar);
        let v = stored_value(em, s, "0", "c")?;
        let store = store_call(em, s, "0", if scalar { "0" } else { "c" }, &v);
        let guard = if scalar { format!("{first} && threadIdx.x == 0") } else { "threadIdx.x < 32".to_string() };
        em.stmt(Code::of(format!("if ({guard}) {store}"), [&store]), value);
    }
    Ok(())
}

/// The stores of a column-reduction kernel in groups that share no
/// per-column or scalar value: each group's values (the reductions and what
/// they lead to) and its stores, in store order.
fn col_groups(em: &Emitter<'_>) -> Vec<(BTreeSet<usize>, Vec<Store>)> {
    let nodes = &em.kernel.nodes;
    // The column reductions a store reads, and with them every per-column
    // or scalar value it needs (in node order, as `emit_col` evaluates
    // them); cheap per-column values (a load, a rotary frequency) may be
    // computed by several groups, a reduction only by one.
    let values_of = |root: usize| {
        let (mut stack, mut seen, mut values, mut reductions) =
            (vec![root], BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            if matches!(nodes[n].space, Space::Scalar | Space::Col) && nodes[n].reg.is_none() {
                values.insert(n);
            }
            if matches!(nodes[n].op, Op::ColReduce { .. }) {
                reductions.insert(n);
            }
            stack.extend(nodes[n].op.operands());
        }
        (values, reductions)
    };
    let mut groups: Vec<(BTreeSet<usize>, BTreeSet<usize>, Vec<Store>)> = Vec::new();
    for store in &em.kernel.stores {
        let (mut values, mut reductions) = values_of(store.node);
        let mut members = vec![store.clone()];
        // Merge every group this store shares a reduction with, keeping the
        // earliest group's place.
        let mut at = None;
        let mut i = 0;
        while i < groups.len() {
            if groups[i].1.is_disjoint(&reductions) {
                i += 1;
                continue;
            }
            let (other_values, other_reductions, other) = groups.remove(i);
            values.extend(other_values);
            reductions.extend(other_reductions);
            members = [other, members].concat();
            at = Some(at.unwrap_or(i));
        }
        groups.insert(at.unwrap_or(groups.len()), (values, reductions, members));
    }
    groups.into_iter().map(|(values, _, stores)| (values, stores)).collect()
}

/// The column tiles of a column-reduction kernel whose stores form more
/// than one group ([`col_groups`]) over a constant number of columns: its
/// CTAs then take one group each, so that a kernel of two reductions of
/// 2048 columns runs 128 CTAs instead of 64 (OLMo-2's two QK-norm gain
/// gradients, which rotate every element back, used half the
/// multiprocessors of an H100).
fn grouped_tiles(em: &Emitter<'_>, groups: &[(BTreeSet<usize>, Vec<Store>)]) -> Option<i64> {
    let KernelKind::Col { cols } = &em.kernel.kind else { return None };
    let cols = cols.as_const()?;
    (groups.len() > 1).then(|| (cols + i64::from(COL_TILE) - 1) / i64::from(COL_TILE))
}

/// The CTAs of column-reduction kernel groups (`tiles` CTAs each) side by
/// side: CTA `b` takes column tile `b % tiles` of group `b / tiles`, and
/// computes and stores that group's values only.
fn emit_col_groups(
    em: &mut Emitter<'_>,
    entry: &str,
    groups: &[(BTreeSet<usize>, Vec<Store>)],
    tiles: i64,
) -> Result<String, CodegenError> {
    for (g, (values, stores)) in groups.iter().enumerate() {
        em.open(format!("if (group == {g})"));
        em.push_scope();
        let values: Vec<usize> = values.iter().copied().collect();
        values_and_stores(em, &values, stores, &format!("blockIdx.x % {tiles} == 0"))?;
        em.pop_scope();
        em.close();
    }
    let body = em.take_lines();
    em.line(format!("const int group = (int)blockIdx.x / {tiles};  // the stores this CTA computes"));
    em.line(format!("const int c = (int)((blockIdx.x % {tiles}) * {COL_TILE} + threadIdx.x % 32);"));
    em.extend(body);
    em.col_groups = groups.len();
    Ok(wrap(em, entry, COL_THREADS))
}
