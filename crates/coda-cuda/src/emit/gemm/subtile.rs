//! Staged subtiles: the epilogue of a configuration that stages a few
//! columns at a time (`TileConfig::stage_cols`, the ping-pong
//! `Sm90Cfg128x192pps`).
//!
//! Such a configuration's scratch holds one or two regions of
//! `BM × stage_cols` elements instead of whole tiles (the shared memory saved deepens the
//! ring). The pair loop walks the tile's columns in order, so every
//! `stage_cols / 8` column pairs form a subtile; at its first pair
//! `coda::sub_begin` waits until the previous subtile's stores have read
//! the scratch and `coda::sub_load` copies the staged operand's subtile (a
//! residual) into region 0; each pair reads it with `coda::sub_pair` and
//! puts its staged outputs with `coda::sub_put`; after its last pair
//! `coda::sub_end` stores each region with coalesced 16-byte stores. The
//! outputs' regions: a second output on the accumulator's own columns (the
//! scratch store) replaces the operand in region 0, each thread reading its
//! pair before putting its own; the staged store takes region 1 beside
//! either, else region 0; its twins are stored again from the same region.
//! Nothing is held in `f.acc` for a second pass, and no quad is streamed
//! through the scratch.

use super::staging::{staging_map, OutCols, Staging};
use super::Emitter;
use crate::emit::code::Code;

/// A store written through a region: its buffer, column map, column bound
/// and region.
#[derive(Debug, Clone, Copy)]
pub(super) struct SubStore {
    pub buf: usize,
    pub how: Staging,
    pub cols: OutCols,
    pub region: usize,
}

/// The template arguments and the output arguments of a store's helpers.
fn parts(em: &mut Emitter<'_>, s: SubStore) -> (String, String, String) {
    let (b, t, map) = (em.buf_w(s.buf), super::super::params::c_type(em.ir.buffers[s.buf].dtype), staging_map(s.how));
    let (base, cols) = (s.cols.base(&b), s.cols.expr(&b));
    (t.to_string(), map, format!("{base}, {b}_ld, {cols}"))
}

/// One pair of `s` into its region (`coda::sub_put`).
pub(super) fn put_call(em: &mut Emitter<'_>, s: SubStore, (v0, v1): (&Code, &Code)) -> Code {
    let (t, map, out) = parts(em, s);
    let text = format!("coda::sub_put<{t}, {map}, {}>(f, t, i, j, {out}, smem, {v0}, {v1});", s.region);
    Code::of(text, [v0, v1]).reading(&["f", "t", "i", "j", "smem"])
}

/// The staged operand's pair, read from region 0 (`coda::sub_pair`).
pub(super) fn pair_call(em: &mut Emitter<'_>, buf: usize) -> Code {
    let (b, t) = (em.buf(buf), super::super::params::c_type(em.ir.buffers[buf].dtype));
    let text = format!("coda::sub_pair<{t}>(f, t, i, j, {b}, {b}_ld, {b}_rows, {b}_cols, smem)");
    Code::lit(text).reading(&["f", "t", "i", "j", "smem"])
}

/// The first lines of a column pair's body: the subtile's barrier, then
/// the staged operand's copy.
pub(super) fn begin_lines(em: &mut Emitter<'_>, operand: Option<usize>) -> Vec<String> {
    let mut lines = vec!["coda::sub_begin(f, t, j);".to_string()];
    if let Some(buf) = operand {
        let (b, t) = (em.buf(buf), super::super::params::c_type(em.ir.buffers[buf].dtype));
        lines.push(format!("coda::sub_load<{t}>(f, t, j, {b}, {b}_ld, {b}_rows, {b}_cols, smem);"));
    }
    lines
}

/// The last lines of a column pair's body: every region's store, the first
/// after a barrier over the tile's threads.
pub(super) fn end_lines(em: &mut Emitter<'_>, stores: &[SubStore]) -> Vec<String> {
    let mut lines = Vec::new();
    for (k, s) in stores.iter().enumerate() {
        let (t, map, out) = parts(em, *s);
        let sync = k == 0;
        lines.push(format!("coda::sub_end<{t}, {map}, {}, {sync}>(f, t, j, {out}, smem);", s.region));
    }
    lines
}
