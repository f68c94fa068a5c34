//! Per-head register values of a GEMM epilogue ([`ColMap::per_head`]):
//! QK-norm's statistics over each head of q or k, in the epilogue of the
//! projection, on tiles whose warps hold whole heads
//! (`TileConfig::holds_heads`).
//!
//! Before the pair loop, each per-head reduction, in node order, takes one
//! pass over the thread's pairs: every thread reduces its columns of each
//! head it holds into `NAME_h[Frag::RI][Frag::CJ * 8 / width]`, then the
//! four lanes of a quad (which hold a row's columns between them) combine
//! their shares by butterfly, so that each lane holds the head's value. The
//! per-head values computed from the reductions (`rsqrt(mean + eps)`)
//! follow once per row and head, in a loop over both. The pair loop reads
//! them at its pair's head: a warp's column `8j + 2t` (lane `4g + t`) lies
//! in its head `8j / width`, as heads start at multiples of `width`.

use super::{hoist, Emitter, Gemm};
use crate::emit::code::Code;
use crate::error::CodegenError;
use crate::kir::{ColMap, NodeId, Op, Store};
use coda_ir::ReduceOp;
use std::collections::BTreeSet;

impl Gemm {
    /// The lines before the pair loop that compute the per-head nodes the
    /// pair loop reads (`live`, see [`Gemm::live`]), and every per-head
    /// node they depend on.
    pub(super) fn head_passes(
        &mut self,
        em: &mut Emitter<'_>,
        live: &BTreeSet<NodeId>,
    ) -> Result<Vec<String>, CodegenError> {
        let heads = Self::head_nodes(em, live);
        let is_reduce = |em: &Emitter<'_>, x: NodeId| matches!(em.kernel.nodes[x].op, Op::GroupReduce { .. });
        let mut done = BTreeSet::new();
        let mut lines = Vec::new();
        let reductions: Vec<NodeId> = heads.iter().copied().filter(|x| is_reduce(em, *x)).collect();
        for id in reductions {
            lines.extend(self.reduce_pass(em, id)?);
            done.insert(id);
            // In node order, which is topological: every derived node whose
            // per-head operands are computed, by earlier passes or this one.
            let mut derived = Vec::new();
            for x in heads.iter().copied().filter(|x| !done.contains(x) && !is_reduce(em, *x)) {
                if Self::head_operands(em, x).iter().all(|o| done.contains(o) || derived.contains(o)) {
                    derived.push(x);
                }
            }
            if !derived.is_empty() {
                lines.extend(self.derived_pass(em, &derived)?);
                done.extend(derived);
            }
        }
        if let Some(missing) = heads.iter().find(|x| !done.contains(x)) {
            return Err(em.internal(format!("per-head node {missing} left uncomputed")));
        }
        for store in em.kernel.stores.clone().iter().filter(|s| heads.contains(&s.node)) {
            lines.extend(self.head_store(em, store)?);
        }
        Ok(lines)
    }

    /// The per-head nodes `live` reads, and those they read in turn.
    fn head_nodes(em: &Emitter<'_>, live: &BTreeSet<NodeId>) -> BTreeSet<NodeId> {
        let per_head = |id: &NodeId| em.kernel.nodes[*id].reg.as_ref().is_some_and(ColMap::per_head);
        let mut stack: Vec<NodeId> = live.iter().copied().filter(per_head).collect();
        let mut heads = BTreeSet::new();
        while let Some(id) = stack.pop() {
            if !heads.insert(id) || matches!(em.kernel.nodes[id].op, Op::GroupReduce { .. }) {
                continue;
            }
            stack.extend(em.kernel.nodes[id].op.operands().into_iter().filter(per_head));
        }
        heads
    }

    /// The per-head operands of a derived per-head node.
    fn head_operands(em: &Emitter<'_>, id: NodeId) -> Vec<NodeId> {
        let per_head = |o: &NodeId| em.kernel.nodes[*o].reg.as_ref().is_some_and(ColMap::per_head);
        em.kernel.nodes[id].op.operands().into_iter().filter(per_head).collect()
    }

    /// The register nodes a reduction's operand is computed from, stopping
    /// at per-head nodes (computed before it), in node order.
    fn operand_closure(em: &Emitter<'_>, arg: NodeId) -> BTreeSet<NodeId> {
        let mut stack = vec![arg];
        let mut closure = BTreeSet::new();
        while let Some(id) = stack.pop() {
            let Some(map) = em.kernel.nodes[id].reg.as_ref() else { continue };
            if !closure.insert(id) || map.per_head() {
                continue;
            }
            stack.extend(em.kernel.nodes[id].op.operands());
        }
        closure
    }

    /// Starts a body of the pre-loop passes: fresh memos, the per-row
    /// values bound, loads element by element (nothing is staged yet).
    fn open_pass(&mut self, em: &mut Emitter<'_>, in_head_loop: bool) {
        self.open_body(em);
        self.plain_loads = true;
        self.in_head_loop = in_head_loop;
        for id in self.head_arrays.keys().copied().collect::<Vec<_>>() {
            let value = em.kernel.nodes[id].reg.as_ref().and_then(|map| self.head_value(id, map));
            self.regs.extend(value.map(|v| (id, vec![v])));
        }
    }

    /// Ends a pass body: its lines, and whether they read `m` and `n`.
    fn close_pass(&mut self, em: &mut Emitter<'_>) -> (Vec<String>, bool, bool) {
        em.pop_scope();
        self.plain_loads = false;
        self.in_head_loop = false;
        let body = hoist::without_unread_indices(em.take_body());
        let reads = |name: &str| body.iter().any(|line| line.reads(name));
        let (m, n) = (reads("m"), reads("n"));
        (body.iter().map(|line| line.render()).collect(), m, n)
    }

    /// One reduction's pass over the thread's pairs, and its quad butterfly.
    fn reduce_pass(&mut self, em: &mut Emitter<'_>, id: NodeId) -> Result<Vec<String>, CodegenError> {
        let node = em.kernel.nodes[id].clone();
        let Op::GroupReduce { op, arg, .. } = node.op else { return Err(em.internal("not a reduction")) };
        let map = node.reg.clone().ok_or_else(|| em.internal("per-head reduction off the registers"))?;
        let (identity, combine): (&str, fn(&str, &str) -> String) = match op {
            ReduceOp::Sum => ("0.0f", |a, b| format!("{a} + {b}")),
            // NaN-propagating, as the interpreter's maximum.
            ReduceOp::Max => ("coda::neg_inf()", |a, b| format!("cg::maximum({a}, {b})")),
            ReduceOp::LogSumExp => return Err(em.internal("per-head log-sum-exp in an epilogue")),
        };
        let width = map.stride;
        let array = format!("{}_h", em.local_for(node.value));
        let heads = format!("Frag::CJ * 8 / {width}");
        let at = format!("{array}[i][(j * 8) / {width}]");
        let pad = |n: usize| "    ".repeat(n);
        let mut lines = vec![
            format!("{}float {array}[Frag::RI][{heads}];", pad(2)),
            format!("{}#pragma unroll", pad(2)),
            format!("{}for (int i = 0; i < Frag::RI; ++i) {{", pad(2)),
            format!("{}#pragma unroll", pad(3)),
            format!("{}for (int h = 0; h < {heads}; ++h) {array}[i][h] = {identity};", pad(3)),
            format!("{}}}", pad(2)),
        ];
        lines.extend(self.combine_pass(em, arg, node.value, (identity, combine), (&at, &array))?);
        // The quad's lanes hold a row's columns between them.
        let x = format!("{array}[i][h]");
        let butterfly =
            [1, 2].map(|lane| format!("{}{x} = {};", pad(4), combine(&x, &format!("coda::shfl_xor({x}, {lane})"))));
        lines.extend(row_head_loop(width, butterfly.into(), false, false));
        self.head_arrays.insert(id, array);
        Ok(lines)
    }

    /// A pass over the thread's pairs that combines each value of `arg` it
    /// holds into the array element `at` (of array `array`; columns outside
    /// the operand count as `identity`).
    pub(super) fn combine_pass(
        &mut self,
        em: &mut Emitter<'_>,
        arg: NodeId,
        value: coda_ir::Value,
        (identity, combine): (&str, fn(&str, &str) -> String),
        (at, array): (&str, &str),
    ) -> Result<Vec<String>, CodegenError> {
        let arg_map =
            em.kernel.nodes[arg].reg.clone().ok_or_else(|| em.internal("combined operand off the registers"))?;
        self.open_pass(em, false);
        for x in Self::operand_closure(em, arg) {
            self.register(em, x)?;
        }
        let vars = self.slot_values(em, arg, "combined operand")?;
        let mut terms = Vec::new();
        for (slot, v) in vars.iter().enumerate() {
            if self.spans_every_tile(&arg_map) {
                terms.push(v.clone());
                continue;
            }
            let c = self.col(em, &arg_map, slot);
            let len = em.dim_int(&arg_map.len);
            let inside = format!("({c} >= 0 && {c} < {len} && f.col_in(j, {slot}) ? {v} : {identity})");
            terms.push(Code::of(inside, [&c, v]).reading(&["f", "j"]));
        }
        let share = terms.iter().map(|t| t.text.clone()).reduce(|a, b| combine(&a, &b)).unwrap_or_default();
        let text = format!("{at} = {};", combine(at, &share));
        em.stmt(Code::of(text, &terms).reading(&[array, "i", "j"]), value);
        let (body, reads_m, reads_n) = self.close_pass(em);

        let pad = |n: usize| "    ".repeat(n);
        let mut lines =
            vec![format!("{}#pragma unroll", pad(2)), format!("{}for (int j = 0; j < Frag::CJ; ++j) {{", pad(2))];
        if reads_n {
            lines.push(format!("{}const int n = f.col(j);", pad(3)));
        }
        lines.push(format!("{}#pragma unroll", pad(3)));
        lines.push(format!("{}for (int i = 0; i < Frag::RI; ++i) {{", pad(3)));
        if reads_m {
            lines.push(format!("{}const int m = f.row(i);", pad(4)));
        }
        lines.extend(body);
        lines.push(format!("{}}}", pad(3)));
        lines.push(format!("{}}}", pad(2)));
        Ok(lines)
    }

    /// Per-head values computed from reductions, once per row and head.
    fn derived_pass(&mut self, em: &mut Emitter<'_>, derived: &[NodeId]) -> Result<Vec<String>, CodegenError> {
        let mut arrays = Vec::new();
        self.open_pass(em, true);
        for id in derived.iter().copied() {
            self.register(em, id)?;
            // Later nodes of this loop read the local; an array keeps what
            // the pair loop or a later pass reads.
            let read_later = (em.kernel.nodes.iter().enumerate())
                .any(|(user, node)| !derived.contains(&user) && node.op.operands().contains(&id))
                || em.kernel.stores.iter().any(|s| s.node == id);
            if !read_later {
                continue;
            }
            let array = format!("{}_h", em.local_for(em.kernel.nodes[id].value));
            let v = self.slot_values(em, id, "per-head value")?.into_iter().next().unwrap_or_default();
            em.line_of(Code::of(format!("{array}[i][h] = {v};"), [&v]).reading(&[&array, "i", "h"]));
            arrays.push((id, array));
        }
        let (body, reads_m, reads_n) = self.close_pass(em);
        let width = derived
            .first()
            .and_then(|id| em.kernel.nodes[*id].reg.as_ref())
            .map(|m| m.stride)
            .ok_or_else(|| em.internal("per-head values without a width"))?;
        let heads = format!("Frag::CJ * 8 / {width}");
        let mut lines: Vec<String> =
            arrays.iter().map(|(_, array)| format!("        float {array}[Frag::RI][{heads}];")).collect();
        lines.extend(row_head_loop(width, body, reads_m, reads_n));
        self.head_arrays.extend(arrays);
        Ok(lines)
    }

    /// A per-head value stored by the first lane of each quad that holds
    /// its row and head, after the passes that compute it.
    fn head_store(&mut self, em: &mut Emitter<'_>, store: &Store) -> Result<Vec<String>, CodegenError> {
        let map = em.kernel.nodes[store.node].reg.clone().ok_or_else(|| em.internal("per-head store"))?;
        if store.col_perm.is_some() || store.col_offset.is_some() {
            return Err(em.internal("a per-head value stored in pair order or as a part"));
        }
        let value = em.kernel.nodes[store.node].value;
        self.open_pass(em, true);
        self.register(em, store.node)?;
        let v = self.slot_values(em, store.node, "per-head store")?.into_iter().next().unwrap_or_default();
        let head = self.col(em, &map, 0);
        let len = em.dim_int(&map.len);
        let access = em.access(store.buf, &Code::local("m"), &head, true);
        let op = if store.accumulate { "st_acc" } else { "st" };
        let text =
            format!("if (f.row_in(i) && (f.lane & 3) == 0 && {head} >= 0 && {head} < {len}) cg::{op}({access}, {v});");
        em.stmt(Code::of(text, [&head, &access, &v]).reading(&["f"]), value);
        let (body, reads_m, reads_n) = self.close_pass(em);
        let lines = row_head_loop(map.stride, body, reads_m, reads_n);
        Ok(lines)
    }

    /// The slot value of a per-head node computed before the pair loop:
    /// its array at the current row and head.
    pub(super) fn head_value(&self, id: NodeId, map: &ColMap) -> Option<Code> {
        let array = self.head_arrays.get(&id)?;
        Some(match self.in_head_loop {
            true => Code::lit(format!("{array}[i][h]")).reading(&[array, "i", "h"]),
            false => Code::lit(format!("{array}[i][(j * 8) / {}]", map.stride)).reading(&[array, "i", "j"]),
        })
    }
}

/// A loop over the thread's rows and its heads of `width` columns around
/// `body` (rendered at four levels of indentation), with the row's `m` and
/// a column `n` of the head where the body reads them.
fn row_head_loop(width: i64, body: Vec<String>, reads_m: bool, reads_n: bool) -> Vec<String> {
    let pad = |n: usize| "    ".repeat(n);
    let mut lines = vec![
        format!("{}#pragma unroll", pad(2)),
        format!("{}for (int i = 0; i < Frag::RI; ++i) {{", pad(2)),
        format!("{}#pragma unroll", pad(3)),
        format!("{}for (int h = 0; h < Frag::CJ * 8 / {width}; ++h) {{", pad(3)),
    ];
    if reads_m {
        lines.push(format!("{}const int m = f.row(i);", pad(4)));
    }
    if reads_n {
        lines.push(format!("{}const int n = f.col(h * ({width} / 8));", pad(4)));
    }
    lines.extend(body);
    lines.push(format!("{}}}", pad(3)));
    lines.push(format!("{}}}", pad(2)));
    lines
}
