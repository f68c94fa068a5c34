//! What a GEMM epilogue's pair loop fetches ahead, and which of its
//! accesses go unchecked: quad loads (the even and odd columns of a tensor
//! in pair layout) streamed through the scratch by `cp.async` or prefetched
//! into L2, and the loop's second copy for interior tiles, whose proven
//! accesses are plain vector loads and stores (`docs/codegen.md`).

use super::{ColMap, Emitter, Gemm, NodeId};

/// An access of the pair loop: `width` elements of buffer `buf` from column
/// `a * n + b` of row `m` (`Gemm::unchecked`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Access {
    pub(super) buf: usize,
    pub(super) a: i64,
    pub(super) b: i64,
    pub(super) width: i64,
    pub(super) write: bool,
}

/// How many column pairs ahead of the pair loop the quad loads' rows are
/// prefetched into L2 when they are not streamed (`Gemm::ahead_lines`).
const PREFETCH_AHEAD: usize = 8;

impl Gemm {
    /// The pair loop twice when some of its accesses can go unchecked: for
    /// tiles where every condition in `fast` holds (interior tiles of
    /// aligned buffers, nearly all of them), with `kEdge = false`, so that
    /// those accesses are plain vector loads and stores; and for the others,
    /// with every check. Branch-free checks made the loop about 2.5 times
    /// longer (8500 against 3400 SASS instructions for the dSwiGLU
    /// epilogue), and warps of such loops stalled half of the time on
    /// instruction fetch (Nsight Compute: `no_instruction`).
    ///
    /// Only when a load goes unchecked: a checked store is a few predicated
    /// instructions, a checked load also its element fallback; splitting
    /// for stores alone measured no faster on the H100 and made ptxas spill
    /// (the `y @ w_down.T` GEMM of the Llama-3 saving forward: 192 bytes,
    /// 3% slower).
    ///
    /// Stores held packed in the accumulators (`packed.rs`) are held by
    /// both copies and stored once, by `tail`, after them: the edge copy
    /// differs from the interior one only in its checks, which keeps it as
    /// short (the dSwiGLU GEMM's edge copy had stored its two outputs pair
    /// by pair with checked stores, and took two thirds of the kernel's
    /// compile time).
    pub(super) fn interior_split(&self, lines: Vec<String>, tail: Vec<String>) -> Vec<String> {
        let pad = "    ".repeat(2);
        if self.fast.is_empty() || !self.fast_load {
            let edge = match self.fast.is_empty() {
                true => Vec::new(),
                false => vec![format!("{pad}constexpr bool kEdge = true;  // no unchecked load: one checked loop")],
            };
            return [edge, lines, tail].concat();
        }
        let conditions = self.fast.join(&format!("\n{pad}    && "));
        let mut out = vec![format!("{pad}const bool interior = {conditions};")];
        for (head, edge) in [("if (interior) {", "false"), ("} else {", "true")] {
            out.push(format!("{pad}{head}"));
            out.push(format!("{pad}    constexpr bool kEdge = {edge};"));
            out.extend(lines.iter().map(|l| format!("    {l}")));
        }
        out.push(format!("{pad}}}"));
        out.extend(tail);
        out
    }

    /// `kEdge` when the access of `width` elements of `buf` at row `m` (a
    /// row of the tile) and column `a * n + b` (n the pair's first column)
    /// can go unchecked on interior tiles (adding the conditions to `fast`),
    /// `true` otherwise. Checked at run time, once per tile: the buffer
    /// covers the tile's rows and its column range (up to `cols`, the
    /// buffer's columns or a part's end), its base and row stride are
    /// aligned to the vector; at compile time: every column of the access
    /// is a multiple of `width` (n is even).
    pub(super) fn unchecked(&mut self, em: &mut Emitter<'_>, access: Access, cols: Option<String>) -> &'static str {
        let Access { buf, a, b, width, write } = access;
        if width < 2 || (2 * a) % width != 0 || b.rem_euclid(width) != 0 {
            return "true";
        }
        let name = if write { em.buf_w(buf) } else { em.buf(buf) };
        let cols = cols.unwrap_or_else(|| format!("{name}_cols"));
        let first = format!("{a}LL * t.tile_n0 + {b}");
        let last = format!("{a}LL * (t.tile_n0 + Frag::BN - 2) + {}", b + width - 1);
        let cond = format!(
            "cg::covers<{width}>({name}, {name}_ld, {name}_rows, {cols}, t.tile_m0 + Frag::BM, {first}, {last})"
        );
        position_or_push(&mut self.fast, cond);
        self.fast_load |= !write;
        "kEdge"
    }

    /// What fetches the quad loads' rows ahead of the pair loop: the lines
    /// before the loop and those at the top of its body. Streams
    /// (`cg::stream_issue`) copy pair `j + kStreamSlots - 1` into the slot
    /// that pair `j - 1` used, then wait for pair `j`'s copies; otherwise
    /// L2 prefetches run [`PREFETCH_AHEAD`] pairs ahead. The pair loop
    /// issues one load per pair and waits for it (the registers beside the
    /// accumulators allow no more in flight); neither a copy nor a
    /// prefetch holds a register.
    pub(super) fn ahead_lines(&self, em: &mut Emitter<'_>) -> (Vec<String>, Vec<String>) {
        let (list, streaming) = (&self.ahead, self.streaming);
        let ahead = if streaming { "kStreamSlots - 1".to_string() } else { PREFETCH_AHEAD.to_string() };
        // Staged subtiles run on ping-pong tiles, where the other
        // warpgroup's K loop covers the loads' latency; the prefetches'
        // addresses made ptxas spill beside 192 accumulators.
        if list.is_empty() || (!streaming && self.subtiled()) {
            return (Vec::new(), Vec::new());
        }
        // Before the loop (outside its interior copy) every copy is checked.
        let calls = |em: &mut Emitter<'_>, j: &str, in_loop: bool| -> Vec<String> {
            let mut lines = vec![format!("if ({j} < Frag::CJ) {{"), format!("    const int n = f.col({j});")];
            for (s, (buf, k, check)) in list.iter().enumerate() {
                let access = em.access(*buf, "f.row(i)", k, false);
                let check = if in_loop { check } else { &"true" };
                lines.push(format!(
                    "    for (int i = 0; i < Frag::RI; ++i) {};",
                    if streaming {
                        format!(
                            "cg::stream_issue<Frag, kStreamSlots, {check}>(f, smem, {s}, ({j}) % kStreamSlots, i, {access})"
                        )
                    } else {
                        format!("cg::prefetch_l2({access})")
                    }
                ));
            }
            lines.push("}".to_string());
            if streaming {
                lines.push("cg::stream_commit();".to_string());
            }
            lines
        };
        let mut before = Vec::new();
        if streaming {
            before.push(format!("constexpr int kStreamSlots = cg::stream_slots<Frag>({});", list.len()));
            before.push("static_assert(kStreamSlots >= 2, \"the scratch holds two slots per stream\");".to_string());
        }
        before.push("#pragma unroll".to_string());
        before.push(format!("for (int jp = 0; jp < {ahead}; ++jp) {{"));
        before.extend(calls(em, "jp", false).into_iter().map(|l| format!("    {l}")));
        before.push("}".to_string());
        let mut top = calls(em, &format!("j + {ahead}"), true);
        if streaming {
            top.push("cg::stream_wait<kStreamSlots - 1>();".to_string());
        }
        (before, top)
    }

    /// Buffer columns `base + 2c .. base + 2c + 4` of a tile load, where `c`
    /// is the pair's first column in `map`, as one `float4`.
    pub(super) fn quad_load(
        &mut self,
        em: &mut Emitter<'_>,
        op: NodeId,
        buf: usize,
        map: &ColMap,
        base: i64,
    ) -> String {
        let key = (op, map.offset, base);
        if let Some(v) = self.quads.get(&key) {
            return v.clone();
        }
        let value = em.kernel.nodes[op].value;
        let name = em.local_for(value);
        let c0 = self.col(em, map, 0);
        let k = if base == 0 { format!("2 * {c0}") } else { format!("{base} + 2 * {c0}") };
        let access = em.access(buf, "m", &k, false);
        let o = map.offset;
        let in_n = if o == 0 { "2 * n".to_string() } else { format!("2 * (n - {o})") };
        let in_n = if base == 0 { in_n } else { format!("{base} + {in_n}") };
        let check = self.unchecked(em, Access { buf, a: 2, b: base - 2 * o, width: 4, write: false }, None);
        // Decided by the first quad: a stream keeps operands from being
        // staged (`can_stage`), and a staged operand keeps quads from streaming.
        self.streaming = self.may_stream && self.staged_load.is_none();
        let s = position_or_push(&mut self.ahead, (buf, in_n, check));
        let load = if self.streaming {
            format!("cg::stream_quad<Frag, kStreamSlots>(f, smem, {s}, j % kStreamSlots, i, {})", em.buf(buf))
        } else {
            format!("cg::load4<{check}>({access})")
        };
        em.stmt(format!("const float4 {name} = {load};"), value);
        self.quads.insert(key, name.clone());
        name
    }
}

/// The position of `item` in `list`, appended if absent.
fn position_or_push<T: PartialEq>(list: &mut Vec<T>, item: T) -> usize {
    match list.iter().position(|x| *x == item) {
        Some(i) => i,
        None => {
            list.push(item);
            list.len() - 1
        }
    }
}
