//! What the pair loop of a GEMM epilogue writes: its stores (pair stores,
//! stores through the scratch, stores put back from pair order), its
//! contributions to partial reductions, and the reductions over the CTA
//! tile and their partial stores after the loop.

use super::ahead::Access;
use super::staging::{part_end, put_call, OutCols, Staging};
use super::{subtile, Emitter, Gemm};
use crate::emit::code::Code;
use crate::emit::ops::perm_args;
use crate::error::CodegenError;
use crate::kir::{PartialKind, PartialOut, Store};

impl Gemm {
    pub(super) fn store(&mut self, em: &mut Emitter<'_>, store: &Store) -> Result<(), CodegenError> {
        let (node, buf, accumulate) = (store.node, store.buf, store.accumulate);
        let map = em.kernel.nodes[node].reg.clone().ok_or_else(|| em.internal("GEMM store of a non-register"))?;
        if map.per_head() {
            return Err(em.internal("GEMM store of a per-head value"));
        }
        let vars = self.slot_values(em, node, "store")?;
        let value = em.kernel.nodes[node].value;
        if let Some(perm) = store.col_perm {
            // Pair layout put back in column order: one element store per slot.
            let op = if accumulate { "st_acc" } else { "st" };
            for (slot, v) in vars.iter().enumerate() {
                let c = self.col(em, &map, slot);
                let col = Code::of(format!("cg::pair_source({c}, {})", perm_args(&perm)), [&c]);
                let access = em.access(buf, &Code::local("m"), &col, true);
                em.stmt(Code::of(format!("cg::{op}({access}, {v});"), [&access, v]), value);
            }
            return Ok(());
        }
        let c0 = self.col(em, &map, 0);
        let (access, end) = match store.col_offset {
            // One part of a concatenation: shifted, and bounded by the
            // part's end (a column bound, so the helpers stay branch-free).
            Some(offset) => {
                let end =
                    part_end(em, store).ok_or_else(|| em.internal("a stored concatenation part of run-time width"))?;
                let b = em.buf_w(buf);
                let c = if offset == 0 { c0.text.clone() } else { format!("{c0} + {offset}") };
                (Code::of(format!("{b}, {b}_ld, m, {c}, {b}_rows, {end}"), [&c0]).reading(&["m"]), Some(end))
            }
            None => (em.access(buf, &Code::local("m"), &c0, true), None),
        };
        let pair_store = map.stride == 1 && vars.len() == 2 && !accumulate;
        let aligned = match pair_store {
            true => {
                let offset = store.col_offset.unwrap_or(0);
                Self::aligned(em, Access { buf, a: 1, b: offset - map.offset, width: 2 }, end)
            }
            false => None,
        };
        let text = match (vars.as_slice(), accumulate) {
            ([v0, v1], false) => match aligned {
                Some(whole) => format!("cg::st2_aligned<{whole}>({access}, {v0}, {v1});"),
                None => format!("cg::st2({access}, {v0}, {v1});"),
            },
            ([v0, v1], true) => format!("cg::st2_acc({access}, {v0}, {v1});"),
            ([v], false) => format!("cg::st({access}, {v});"),
            ([v], true) => format!("cg::st_acc({access}, {v});"),
            _ => return Err(em.internal("store slots")),
        };
        em.stmt(Code::of(text, std::iter::once(&access).chain(&vars)), value);
        Ok(())
    }

    /// A pair of a store written into the scratch during the loop (the
    /// staged store when `put_staged`, or the scratch store): slot 1 repeats
    /// slot 0 for a pair operation's single value, which its map ignores.
    pub(super) fn put(
        &mut self,
        em: &mut Emitter<'_>,
        store: &Store,
        how: Staging,
        cols: OutCols,
        region: usize,
    ) -> Result<(), CodegenError> {
        let vars = self.slot_values(em, store.node, "store")?;
        let (Some(v0), Some(v1)) = (vars.first(), vars.last()) else { return Err(em.internal("put store slots")) };
        let code = if self.subtiled() {
            subtile::put_call(em, subtile::SubStore { buf: store.buf, how, cols, region }, (v0, v1))
        } else {
            put_call(em, store.buf, how, cols, (v0, v1))
        };
        em.stmt(code, em.kernel.nodes[store.node].value);
        Ok(())
    }

    /// The partials' per-thread accumulators, before the pair loop.
    pub(super) fn partial_decls(&mut self, em: &mut Emitter<'_>) -> Result<(), CodegenError> {
        for (idx, part) in em.kernel.partials.iter().enumerate() {
            let name = format!("part{idx}");
            let init = match part.kind {
                PartialKind::RowMax => "coda::neg_inf()",
                _ => "0.0f",
            };
            match part.kind {
                PartialKind::ColSum => {
                    // Kept column sums (`coda::col_keep`): one pair per 8 column pairs.
                    em.stmt(Code::lit(format!("float {name}[(Frag::CJ + 7) / 8][2];")), part.value);
                    em.line("#pragma unroll");
                    em.line(format!(
                        "for (int q = 0; q < (Frag::CJ + 7) / 8; ++q) {name}[q][0] = {name}[q][1] = 0.0f;"
                    ));
                }
                PartialKind::RowLse => self.lse_decls(em, idx, part)?,
                _ => {
                    em.stmt(Code::lit(format!("float {name}[Frag::RI];")), part.value);
                    em.line("#pragma unroll");
                    em.line(format!("for (int i = 0; i < Frag::RI; ++i) {name}[i] = {init};"));
                }
            }
        }
        Ok(())
    }

    /// Adds the node's slots to partial `idx`.
    pub(super) fn accumulate(
        &mut self,
        em: &mut Emitter<'_>,
        idx: usize,
        part: &PartialOut,
    ) -> Result<(), CodegenError> {
        let map = em.kernel.nodes[part.node].reg.clone().ok_or_else(|| em.internal("partial of a non-register"))?;
        let vars = self.slot_values(em, part.node, "partial")?;
        let len = em.dim_int(&map.len);
        let name = format!("part{idx}");
        let index = match part.index {
            Some(ix) => Some(em.eval(ix, "m", "0")?),
            None => None,
        };
        let every_col = self.spans_every_tile(&map);
        let col_sums = format!("{name}_j");
        for (slot, v) in vars.iter().enumerate() {
            let c = self.col(em, &map, slot);
            let cond = match every_col {
                true => Code::local("row_ok"),
                false => Code::of(format!("row_ok && {c} >= 0 && {c} < {len}"), [&c]).reading(&["row_ok"]),
            };
            let (text, reads): (String, &[&str]) = match part.kind {
                PartialKind::RowSum => (format!("if ({cond}) {name}[i] += {v};"), &[&name, "i"]),
                PartialKind::RowSumSq => (format!("if ({cond}) {name}[i] += {v} * {v};"), &[&name, "i"]),
                PartialKind::RowMax => (format!("if ({cond}) {name}[i] = fmaxf({name}[i], {v});"), &[&name, "i"]),
                PartialKind::RowLse => {
                    self.lse_accumulate(em, idx, part, &cond, v)?;
                    continue;
                }
                PartialKind::RowPick => {
                    let ix = index.clone().unwrap_or_else(|| Code::lit("-1.0f"));
                    let text = format!("if ({cond} && (float){c} == {ix}) {name}[i] += {v};");
                    em.stmt(Code::of(text, [&cond, &c, &ix, v]).reading(&[&name, "i"]), part.value);
                    continue;
                }
                PartialKind::ColSum => (format!("if ({cond}) {col_sums}[{slot}] += {v};"), &[&col_sums]),
            };
            em.stmt(Code::of(text, [&cond, v]).reading(reads), part.value);
        }
        Ok(())
    }

    pub(super) fn reductions(&mut self, em: &mut Emitter<'_>) -> Result<(), CodegenError> {
        for (idx, part) in em.kernel.partials.clone().iter().enumerate() {
            let name = format!("part{idx}");
            match part.kind {
                PartialKind::RowLse => {
                    self.lse_merge_shares(em, idx)?;
                    let (bm, bs) = (em.buf_w(part.bufs[0]), em.buf_w(part.bufs[1]));
                    let text = format!("coda::row_reduce_lse(f, {name}_m, {name}_s, smem);");
                    em.stmt(
                        Code::lit(text).reading(&["f", "smem", &format!("{name}_m"), &format!("{name}_s")]),
                        part.value,
                    );
                    em.line(format!("coda::store_row_partial(f, t, {name}_m, {bm});"));
                    em.line(format!("coda::store_row_partial(f, t, {name}_s, {bs});"));
                }
                PartialKind::ColSum => self.col_partial(em, idx, part)?,
                kind => {
                    let op = if kind == PartialKind::RowMax { "MaxOp" } else { "SumOp" };
                    let b = em.buf_w(part.bufs[0]);
                    let text = format!("coda::row_reduce<coda::{op}>(f, {name}, smem);");
                    em.stmt(Code::lit(text).reading(&["f", "smem", &name]), part.value);
                    em.line(format!("coda::store_row_partial(f, t, {name}, {b});"));
                }
            }
        }
        Ok(())
    }

    /// Column sums over the CTA's rows, stored at `[own column][tile_m]`:
    /// each tile column by the thread that finished it in the scratch
    /// (`coda::col_reduce_kept`), all of them at once: spreading the stores
    /// over the tile's threads keeps each thread's address arithmetic short
    /// (four threads storing a whole tile's sums take 64 dependent 64-bit
    /// address computations each, a fifth of the `w_qkv` dgrad's SASS). A
    /// pair operation's sum sits at the pair's first column.
    pub(super) fn col_partial(
        &mut self,
        em: &mut Emitter<'_>,
        idx: usize,
        part: &PartialOut,
    ) -> Result<(), CodegenError> {
        let name = format!("part{idx}");
        let map = em.kernel.nodes[part.node].reg.clone().ok_or_else(|| em.internal("column partial"))?;
        let b = em.buf_w(part.bufs[0]);
        let len = em.dim_int(&map.len);
        let text = format!("coda::col_reduce_kept<coda::SumOp>(f, {name}, smem);");
        em.stmt(Code::lit(text).reading(&["f", "smem", &name]), part.value);
        em.open("for (int lc = f.thread_index(); lc < Frag::BN; lc += Frag::kThreads)");
        if map.stride != 1 {
            em.line("if (lc % 2 != 0) continue;");
        }
        em.line("const int n = t.tile_n0 + lc;");
        self.cols.clear();
        let c = self.col(em, &map, 0);
        let store = format!("{b}[(long long){c} * {b}_ld + t.tile_m_idx] = smem[lc];");
        let store = match self.spans_every_tile(&map) {
            true => store,
            false => format!("if ({c} >= 0 && {c} < {len}) {store}"),
        };
        em.line_of(Code::of(store, [&c]).reading(&["t", "smem", "lc"]));
        em.close();
        Ok(())
    }
}
