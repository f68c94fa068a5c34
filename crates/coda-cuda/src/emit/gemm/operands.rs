//! The register values of a GEMM epilogue's pair loop: the column index
//! locals, each register node's slot values, and the operands they read
//! (pair and quad loads, staged operands, column vectors staged per tile,
//! element-wise tile expressions evaluated for both slots at once).

use super::ahead::Access;
use super::facts::{column_vector_load, pair_invariant, reads_tile_pairs, sliced_tile_load, TileCols};
use super::{subtile, Emitter, Gemm, MAX_INLINE_PAIR_DEPTH, MAX_STAGED_COL_VECS};
use crate::emit::code::Code;
use crate::emit::ops::{binary, unary_epilogue};
use crate::error::CodegenError;
use crate::kir::{ColMap, NodeId, Op, Space};

impl Gemm {
    /// The local holding the own column of `map` at `slot`.
    pub(super) fn col(&mut self, em: &mut Emitter<'_>, map: &ColMap, slot: usize) -> Code {
        let key = (map.offset, map.stride, slot);
        if let Some(v) = self.cols.get(&key) {
            return v.clone();
        }
        let o = map.offset;
        let expr = match (map.stride, slot) {
            // The head of the pair (or of the head loop's column).
            (w, _) if w > 2 && o == 0 => format!("n / {w}"),
            (w, _) if w > 2 => format!("(n - {o}) / {w}"),
            (1, 0) if o == 0 => "n".to_string(),
            (1, s) => format!("n + {} - {o}", s).replace(" + 0 - 0", "").replace(" - 0", ""),
            _ if o == 0 => "n >> 1".to_string(),
            _ => format!("(n - {o}) >> 1"),
        };
        let base = match map.stride {
            1 => "c",
            2 => "cp",
            _ => "ch",
        };
        let name = em.index(base, Code::lit(expr).reading(&["n"]));
        self.cols.insert(key, name.clone());
        name
    }

    /// Whether every column of every tile is a column of `map`, so that a
    /// partial over it needs no column check: the map starts at the
    /// accumulator's first column and spans its N, a constant multiple of
    /// BN (two checks per accumulator pair had cost the Llama-3
    /// out-projection 8% of its cold compile).
    pub(super) fn spans_every_tile(&self, map: &ColMap) -> bool {
        let Some(n) = self.whole_col_tiles else { return false };
        map.offset == 0 && map.len.as_const().is_some_and(|len| len * map.stride == n)
    }

    pub(super) fn slots(map: &ColMap) -> usize {
        if map.stride == 1 {
            2
        } else {
            1
        }
    }

    /// Emits the slot values of register node `id`.
    pub(super) fn register(&mut self, em: &mut Emitter<'_>, id: NodeId) -> Result<(), CodegenError> {
        let node = em.kernel.nodes[id].clone();
        let map = node.reg.clone().ok_or_else(|| em.internal("not a register node"))?;
        if let Some(value) = self.head_value(id, &map) {
            self.regs.insert(id, vec![value]);
            return Ok(());
        }
        let name = em.local_for(node.value);
        let mut vars = Vec::new();
        if let Op::RopePartner(spec, _) = &node.op {
            let c0 = self.col(em, &map, 0);
            let (s, e) = (em.dim_int(&spec.start), em.dim_int(&spec.end));
            let init = Code::of(format!("{c0} >= {s} && {c0} < {e}"), [&c0]);
            em.define("bool", &format!("{name}_sw"), init, Some(node.value));
        }
        for slot in 0..Self::slots(&map) {
            let expr = self.slot_expr(em, id, &map, slot, &name)?;
            let var = if Self::slots(&map) == 2 { format!("{name}_{slot}") } else { format!("{name}_p") };
            em.define("float", &var, expr, Some(node.value));
            vars.push(Code::local(var));
        }
        self.regs.insert(id, vars);
        Ok(())
    }

    /// The value of operand `op` for slot `slot` of a node with map `map`.
    pub(super) fn operand(
        &mut self,
        em: &mut Emitter<'_>,
        op: NodeId,
        map: &ColMap,
        slot: usize,
    ) -> Result<Code, CodegenError> {
        if let Some(vars) = self.regs.get(&op) {
            return Ok(vars.get(slot).or(vars.first()).cloned().unwrap_or_default());
        }
        if self.plain_loads {
            let c = self.col(em, map, slot);
            return em.eval(op, "m", &c);
        }
        let half = if slot == 0 { "x" } else { "y" };
        if let (Op::Load(buf), Space::Tile, 1) = (&em.kernel.nodes[op].op, em.kernel.nodes[op].space, map.stride) {
            let pair = self.pair_load(em, op, *buf, map, "m");
            return Ok(Code::of(format!("{pair}.{half}"), [&pair]));
        }
        // A column vector (a gain, a bias) at the pair's own columns: one
        // 4-byte load for both instead of two bounded 2-byte loads.
        if let Some((vector, buf)) = column_vector_load(em, op).filter(|_| map.stride == 1) {
            let pair = self.pair_load(em, vector, buf, map, "0");
            return Ok(Code::of(format!("{pair}.{half}"), [&pair]));
        }
        if map.stride == 1
            && self.inline_depth < MAX_INLINE_PAIR_DEPTH
            && reads_tile_pairs(em, op, &mut self.pair_readers)
        {
            self.inline_depth += 1;
            let vars = self.inline_pair(em, op, map);
            self.inline_depth -= 1;
            let vars = vars?;
            return vars.get(slot).cloned().ok_or_else(|| em.internal("inline pair slots"));
        }
        // Both columns of an aligned pair see the same rotary frequency, so
        // a value that depends on the column only through it (the angle,
        // its sine and cosine) is computed once per pair: slot 1 reuses
        // slot 0's evaluation.
        let aligned_pair = map.stride == 1 && map.offset % 2 == 0;
        let slot =
            if slot == 1 && aligned_pair && pair_invariant(em, op, &mut self.pair_invariants) { 0 } else { slot };
        let c = self.col(em, map, slot);
        em.eval(op, "m", &c)
    }

    /// Both slots of an element-wise tile expression that is not a register
    /// value (a residual stream recomputed from saved tensors, say),
    /// evaluated together so that each tile load in it is one pair load
    /// (`pair_load`) instead of two element loads.
    pub(super) fn inline_pair(
        &mut self,
        em: &mut Emitter<'_>,
        op: NodeId,
        map: &ColMap,
    ) -> Result<Vec<Code>, CodegenError> {
        let key = (op, map.offset);
        if let Some(vars) = self.inline_pairs.get(&key) {
            return Ok(vars.clone());
        }
        let node = em.kernel.nodes[op].clone();
        let vars = match sliced_tile_load(em, op) {
            Some(TileCols { load, buf, start, step: 1 }) => {
                let at = ColMap { offset: map.offset - start, ..map.clone() };
                let pair = self.pair_load(em, load, buf, &at, "m");
                vec![Code::of(format!("{pair}.x"), [&pair]), Code::of(format!("{pair}.y"), [&pair])]
            }
            Some(TileCols { load, buf, start, step: 2 }) if start >= 0 => {
                // Buffer columns `start + 2c` and `start + 2c + 2`: two
                // elements of the quad at `start - parity + 2c`.
                let parity = start & 1;
                let quad = self.quad_load(em, load, buf, map, start - parity);
                let lane = |slot: i64| ["x", "y", "z", "w"][(parity + 2 * slot) as usize];
                vec![Code::of(format!("{quad}.{}", lane(0)), [&quad]), Code::of(format!("{quad}.{}", lane(1)), [&quad])]
            }
            _ => {
                let name = em.local_for(node.value);
                let mut vars = Vec::new();
                for slot in 0..2 {
                    let expr = self.slot_expr(em, op, map, slot, &name)?;
                    let var = format!("{name}_{slot}");
                    em.define("float", &var, expr, Some(node.value));
                    vars.push(Code::local(var));
                }
                vars
            }
        };
        self.inline_pairs.insert(key, vars.clone());
        Ok(vars)
    }

    /// Both elements of a load at the pair's own columns, as one `float2`
    /// (a single 4- or 8-byte load when aligned): of a tile (`row` = `m`,
    /// staged through shared memory where it can be) or of a column vector
    /// (`row` = `0`).
    pub(super) fn pair_load(&mut self, em: &mut Emitter<'_>, op: NodeId, buf: usize, map: &ColMap, row: &str) -> Code {
        let key = (op, map.offset);
        if let Some(v) = self.pairs.get(&key) {
            return Code::local(v);
        }
        let value = em.kernel.nodes[op].value;
        let name = em.local_for(value);
        if row == "m" && self.can_stage(em, buf, map) {
            if self.staged_load.is_none() {
                let b = em.buf(buf);
                let t = super::super::params::c_type(em.ir.buffers[buf].dtype);
                self.staged_load = Some((buf, format!("<{t}>(f, t, {b}, {b}_ld, {b}_rows, {b}_cols, smem)")));
            }
            let t = super::super::params::c_type(em.ir.buffers[buf].dtype);
            let read = if self.subtiled() {
                subtile::pair_call(em, buf)
            } else {
                Code::lit(format!("coda::staged_pair<{t}>(f, i, j, smem)")).reading(&["f", "i", "j", "smem"])
            };
            em.define("float2", &name, read, Some(value));
            self.pairs.insert(key, name.clone());
            return Code::local(name);
        }
        let c0 = self.col(em, map, 0);
        let access = em.access(buf, &Code::index(row), &c0, false);
        let load = match self.col_slot(em, buf, map, row) {
            Some(slot) => {
                Code::of(format!("cg::col_pair<Frag>(t, colv, {slot}, {access})"), [&access]).reading(&["t", "colv"])
            }
            None if row == "m" && map.stride == 1 => {
                let at = Access { buf, a: 1, b: -map.offset, width: 2 };
                match Self::aligned(em, at, None) {
                    Some(whole) => Code::of(format!("cg::load2_aligned<{whole}>({access})"), [&access]),
                    None => Code::of(format!("cg::load2({access})"), [&access]),
                }
            }
            None => Code::of(format!("cg::load2({access})"), [&access]),
        };
        em.define("float2", &name, load, Some(value));
        self.pairs.insert(key, name.clone());
        Code::local(name)
    }

    /// The slot of a column vector read at the pair's own columns that is
    /// staged per tile (see `cg::stage_col_async`), if it is: a 16- or
    /// 32-bit float vector on the Hopper mainloop, at most
    /// `MAX_STAGED_COL_VECS` of them, and no more than the configuration's
    /// shared memory has room for (their slots add to it: three beside the
    /// ping-pong tiles with 192 accumulators).
    pub(super) fn col_slot(&mut self, em: &Emitter<'_>, buf: usize, map: &ColMap, row: &str) -> Option<usize> {
        let dtype = em.ir.buffers[buf].dtype;
        let float = dtype.is_half() || dtype == coda_ir::DType::F32;
        if row != "0" || !self.config.is_sm90() || !float || map.offset != 0 || map.stride != 1 {
            return None;
        }
        if let Some(slot) = self.col_vecs.iter().position(|b| *b == buf) {
            return Some(slot);
        }
        let room = self.config.smem_bytes_with(self.col_vecs.len() + 1) <= crate::config::SM90_MAX_SMEM;
        (self.col_vecs.len() < MAX_STAGED_COL_VECS && room).then(|| {
            self.col_vecs.push(buf);
            self.col_vecs.len() - 1
        })
    }

    /// Whether a pair load of `buf` at `map` can read the staged operand:
    /// a 16-bit buffer at the accumulator's own columns, and no other
    /// buffer staged already (the scratch holds one tile).
    pub(super) fn can_stage(&self, em: &Emitter<'_>, buf: usize, map: &ColMap) -> bool {
        let half = em.ir.buffers[buf].dtype.is_half();
        let own = map.offset == 0 && map.stride == 1;
        // Staged subtiles keep the operand in region 0 and the outputs beside
        // it, so they need two regions.
        let room = !self.subtiled() || self.config.stage_regions() >= 2;
        half && own && room && !self.streaming && self.staged_load.as_ref().is_none_or(|(b, _)| *b == buf)
    }

    pub(super) fn slot_expr(
        &mut self,
        em: &mut Emitter<'_>,
        id: NodeId,
        map: &ColMap,
        slot: usize,
        name: &str,
    ) -> Result<Code, CodegenError> {
        let node = em.kernel.nodes[id].clone();
        Ok(match &node.op {
            Op::Acc => Code::lit(format!("f.acc[i][j][{slot}]")).reading(&["f", "i", "j"]),
            Op::Unary(op, a) => {
                let a = self.operand(em, *a, map, slot)?;
                Code::of(unary_epilogue(*op, &a), [&a])
            }
            Op::Binary(op, a, b) => {
                let (a, b) = (self.operand(em, *a, map, slot)?, self.operand(em, *b, map, slot)?);
                Code::of(binary(*op, &a, &b), [&a, &b])
            }
            Op::Select(c, a, b) => {
                let c = self.operand(em, *c, map, slot)?;
                let (a, b) = (self.operand(em, *a, map, slot)?, self.operand(em, *b, map, slot)?);
                Code::of(format!("({c} != 0.0f ? {a} : {b})"), [&c, &a, &b])
            }
            Op::Cast(to, a) => {
                let a = self.operand(em, *a, map, slot)?;
                Code::of(em.cast(*to, &a, node.value)?, [&a])
            }
            Op::Slice { arg, start, step } => {
                let arg_map =
                    em.kernel.nodes[*arg].reg.clone().ok_or_else(|| em.internal("slice of a non-register"))?;
                let vars = self.regs.get(arg).cloned().unwrap_or_default();
                let from = match (arg_map.stride, *step) {
                    (1, 2) => ((arg_map.offset + start.as_const().unwrap_or(0)) & 1) as usize,
                    (1, _) => slot,
                    _ => 0,
                };
                vars.get(from).cloned().ok_or_else(|| em.internal("slice operand slot"))?
            }
            // A per-head value at each column of its head.
            Op::GroupExpand(_, a) => self.operand(em, *a, map, slot)?,
            Op::Interleave(e, o) => {
                let half = ColMap { offset: map.offset, stride: 2, len: map.len.clone() };
                self.operand(em, if slot == 0 { *e } else { *o }, &half, 0)?
            }
            Op::RopePartner(_, a) => {
                let vars = self.regs.get(a).cloned().unwrap_or_default();
                let (same, other) = (vars.get(slot).cloned(), vars.get(1 - slot.min(1)).cloned());
                let (same, other) = same.zip(other).ok_or_else(|| em.internal("rope partner slots"))?;
                let switch = format!("{name}_sw");
                Code::of(format!("({switch} ? {other} : {same})"), [&other, &same]).reading(&[&switch])
            }
            _ => return Err(em.internal(format!("register node {id} with a non-local operation"))),
        })
    }
}
