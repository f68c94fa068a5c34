//! Stores written through shared memory: which store of a GEMM epilogue
//! is staged (and how its columns map), which stores repeat it, which
//! second store goes through the scratch during the loop, and the
//! `coda::staged_*` calls that write them (see the module docs of `gemm`).

use super::super::params::c_type;
use super::Emitter;
use crate::emit::code::Code;
use crate::kir::{GemmSpec, Store};

/// How a staged store maps accumulator columns to output columns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Staging {
    /// The accumulator's own columns (`store_tile_staged`).
    Identity,
    /// A pair operation's half-width output (`coda::StagedHalfCols`).
    Half,
    /// A pair layout put back in order (`coda::StagedUnpermuteCols`).
    Unpermute(coda_ir::PairPerm),
}

/// The store to stage through shared memory, if any (see the module docs):
/// only in 255-register configurations with at most one partial, where the
/// extra address arithmetic does not spill.
pub(super) fn staged_store(em: &Emitter<'_>, spec: &GemmSpec) -> Option<(usize, Staging)> {
    let roomy = spec.config.is_sm90()
        || matches!(spec.config, crate::config::TileConfig::Cfg128x128w4 | crate::config::TileConfig::Cfg128x256);
    if !roomy || em.kernel.partials.len() > 1 {
        return None;
    }
    let fits = |how: &Staging| spec.config.stage_cols().is_none_or(|cols| fits(*how, cols));
    em.kernel.stores.iter().enumerate().find_map(|(i, s)| staging(em, spec, s).filter(fits).map(|how| (i, how)))
}

/// How store `s` could be staged through shared memory, if it can: a full
/// 16-bit tile of the accumulator's rows, written once.
pub(super) fn staging(em: &Emitter<'_>, spec: &GemmSpec, s: &Store) -> Option<Staging> {
    let (_, bn, _) = spec.config.tile();
    let subtiled = spec.config.stage_cols().is_some();
    let map = em.kernel.nodes[s.node].reg.as_ref()?;
    let buf = &em.ir.buffers[s.buf];
    let rows = buf.rows == crate::symexpr::SymExpr::from(&spec.m);
    // A concatenation part goes through staged subtiles only, shifted by
    // whole 16-byte chunks and of constant width (`OutCols::Part`).
    let part_ok =
        s.col_offset.is_none_or(|o| subtiled && o % crate::config::CHUNK_COLS == 0 && part_end(em, s).is_some());
    if !rows || s.accumulate || !buf.dtype.is_half() || map.offset != 0 || !part_ok {
        return None;
    }
    if s.col_offset.is_some() {
        return (map.stride == 1 && s.col_perm.is_none()).then_some(Staging::Identity);
    }
    match (map.stride, s.col_perm) {
        (1, None) if map.len == spec.n => Some(Staging::Identity),
        // A whole tile is put back from pair order group by group; staged
        // subtiles only need whole subtiles per group (`subtile::fits`).
        (1, Some(p)) if map.len == spec.n && p.start % p.group == 0 && (bn % p.group == 0 || subtiled) => {
            Some(Staging::Unpermute(p))
        }
        (2, None) => Some(Staging::Half),
        _ => None,
    }
}

/// The stores that repeat the staged store `first` (same node, staged the
/// same way, same element type) into other buffers: Hopper only, where the
/// scratch always holds a whole tile.
pub(super) fn twin_stores(em: &Emitter<'_>, spec: &GemmSpec, first: usize, how: Staging) -> Vec<usize> {
    let stores = &em.kernel.stores;
    let Some(staged) = stores.get(first) else { return Vec::new() };
    let dtype = em.ir.buffers[staged.buf].dtype;
    let same_way = |s: &Store| {
        staging(em, spec, s) == Some(how)
            && s.node == staged.node
            && em.ir.buffers[s.buf].dtype == dtype
            && s.buf != staged.buf
    };
    if !spec.config.is_sm90() {
        return Vec::new();
    }
    (0..stores.len()).filter(|i| *i != first && same_way(&stores[*i])).collect()
}

/// A second store that can go through the scratch during the loop, besides
/// the staged store `first` and its `twins` (which repeat it from the
/// scratch after it): one on the accumulator's own columns. The scratch
/// holds at most the staged operand then, read before each pair is written
/// (see `coda::staged_put`), so no pair loop reads what it writes.
pub(super) fn scratch_store(em: &Emitter<'_>, spec: &GemmSpec, first: usize, twins: &[usize]) -> Option<usize> {
    let own = |i: usize, s: &Store| {
        i != first && !twins.contains(&i) && matches!(staging(em, spec, s), Some(Staging::Identity))
    };
    em.kernel.stores.iter().enumerate().find_map(|(i, s)| own(i, s).then_some(i))
}

/// The `coda::Staged*` column map of a staged store.
pub(super) fn staging_map(how: Staging) -> String {
    match how {
        Staging::Identity => "coda::StagedOwnCols".to_string(),
        Staging::Half => "coda::StagedHalfCols".to_string(),
        Staging::Unpermute(p) => format!("coda::StagedUnpermuteCols<{}, {}, {}>", p.start, p.end, p.group),
    }
}

/// The output column bound of a `put_call`.
#[derive(Debug, Clone, Copy)]
pub(super) enum OutCols {
    /// The output buffer's own column count.
    Buffer,
    /// The GEMM's `N`: for the scratch store, whose buffer has the
    /// accumulator's columns by its selection (as `store_tile_staged` uses).
    GemmN,
    /// A concatenation part's columns `offset .. end` of the buffer (staged
    /// subtiles only): written through the buffer shifted by `offset`,
    /// bounded by the part's width.
    Part { offset: i64, end: i64 },
}

impl OutCols {
    /// The bound of `b`'s written columns, in the frame of [`Self::base`].
    pub(super) fn expr(self, b: &str) -> String {
        match self {
            OutCols::Buffer => format!("{b}_cols"),
            OutCols::GemmN => "t.n".to_string(),
            OutCols::Part { offset, end } => (end - offset).to_string(),
        }
    }

    /// The pointer the tile's column 0 is written through.
    pub(super) fn base(self, b: &str) -> String {
        match self {
            OutCols::Part { offset, .. } if offset != 0 => format!("{b} + {offset}"),
            _ => b.to_string(),
        }
    }

    /// `self`, or the part `store` writes when it is a concatenation part.
    pub(super) fn of(self, em: &Emitter<'_>, store: &Store) -> OutCols {
        match (store.col_offset, part_end(em, store)) {
            (Some(offset), Some(end)) => OutCols::Part { offset, end },
            _ => self,
        }
    }
}

/// The column where a concatenation part ends (its bound), when the part's
/// width is a constant.
pub(super) fn part_end(em: &Emitter<'_>, s: &Store) -> Option<i64> {
    let value = em.kernel.nodes[s.node].value;
    let width = em.block.ty(value).shape.cols.as_const()?;
    Some(width + s.col_offset?)
}

/// One pair of a store written into the scratch during the loop
/// (`coda::staged_put`): the staged store when the scratch is free, or the
/// scratch store (`Staging::Identity`, `OutCols::GemmN`).
pub(super) fn put_call(
    em: &mut Emitter<'_>,
    buf: usize,
    how: Staging,
    cols: OutCols,
    (v0, v1): (&Code, &Code),
) -> Code {
    let (b, t, map) = (em.buf_w(buf), c_type(em.ir.buffers[buf].dtype), staging_map(how));
    let cols = cols.expr(&b);
    let text = format!("coda::staged_put<{t}, {map}>(f, t, i, j, {b}, {b}_ld, {cols}, smem, {v0}, {v1});");
    Code::of(text, [v0, v1]).reading(&["f", "t", "i", "j", "smem"])
}

/// The store of a tile that `put_call` filled, after the loop (same `cols`).
pub(super) fn put_finish_call(em: &mut Emitter<'_>, buf: usize, how: Staging, cols: OutCols) -> Code {
    let (b, t, map) = (em.buf_w(buf), c_type(em.ir.buffers[buf].dtype), staging_map(how));
    let cols = cols.expr(&b);
    let text = format!("coda::staged_put_finish<{t}, {map}>(f, t, {b}, {b}_ld, {cols}, smem);");
    Code::lit(text).reading(&["f", "t", "smem"])
}

/// The call that writes the staged store from `f.acc` after the loop.
pub(super) fn staged_call(em: &mut Emitter<'_>, buf: usize, how: Staging) -> Code {
    let (b, t) = (em.buf_w(buf), c_type(em.ir.buffers[buf].dtype));
    let text = match how {
        // The helper checks the buffer's alignment itself (uniformly for the
        // CTA) and falls back to bounded element stores.
        Staging::Identity => format!("coda::store_tile_staged(f, t, f.acc, {b}, {b}_ld, smem);"),
        _ => {
            format!("coda::store_tile_staged_map<{t}, {}>(f, t, f.acc, {b}, {b}_ld, {b}_cols, smem);", staging_map(how))
        }
    };
    Code::lit(text).reading(&["f", "t", "smem"])
}

/// Whether `how` keeps a subtile's columns in runs that `coda::SubRuns`
/// knows: a pair layout whose groups hold whole subtiles.
fn fits(how: Staging, stage_cols: i64) -> bool {
    match how {
        Staging::Unpermute(p) => crate::config::groups_hold_subtiles(p.group, stage_cols),
        Staging::Identity | Staging::Half => true,
    }
}
