//! What a GEMM epilogue's pair loop fetches ahead, and which of its
//! accesses are vector accesses of buffers aligned by construction: quad
//! loads (the even and odd columns of a tensor in pair layout) streamed
//! through the scratch by `cp.async`, held in registers a few pairs ahead,
//! or prefetched into L2, and the pair loads and stores that need no
//! alignment check (`docs/codegen.md`, "Aligned epilogue operands").

use super::{ColMap, Emitter, Gemm, NodeId};
use crate::emit::code::Code;
use crate::emit::params::c_type;

/// An access of the pair loop: `width` elements of buffer `buf` from column
/// `a * n + b` of row `m` (`Gemm::aligned`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Access {
    pub(super) buf: usize,
    pub(super) a: i64,
    pub(super) b: i64,
    pub(super) width: i64,
}

/// How many column pairs ahead of the pair loop the quad loads' rows are
/// prefetched into L2 when they are not streamed (`Gemm::ahead_lines`).
const PREFETCH_AHEAD: usize = 8;

/// How many column pairs ahead of the pair that reads it a held quad is
/// loaded (`Held`). Two spilled more beside 192 accumulators and were no
/// faster (`docs/codegen.md`).
const HELD_AHEAD: usize = 1;

/// A quad load of a staged-subtile epilogue (16-bit, aligned by
/// construction) whose words are loaded [`HELD_AHEAD`] column pairs before
/// the pair that reads them, into a ring of registers (`qh<s>[slot][i]`,
/// two words per row of the thread): the loads are issued in program order
/// (`cg::ldg_b64_on` is `asm volatile`), so a quad loaded where it is read
/// keeps the warp waiting for L2 once per pair, which was most of the
/// epilogue's stalls in the Gemma-2 dGeGLU backward.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Held {
    buf: usize,
    /// The quad's first buffer column, in `n`.
    k: String,
    /// `kWhole` of `cg::quad_bits`.
    whole: bool,
}

impl Gemm {
    /// Whether the access is one aligned vector of a buffer aligned by
    /// construction, so that the `_aligned` helpers (`cg::load4_aligned`,
    /// `cg::load2_aligned`, `cg::st2_aligned`, `cg::stream_issue<…, true>`)
    /// serve it with bounds checks only: at compile time every column of
    /// the access is a multiple of `width` (n is even); the buffer is a
    /// scratch or staging buffer (16-byte aligned, a row stride that is a
    /// multiple of 8: `kir::Buffer::vector_aligned`). The answer is the
    /// helpers' `kWhole` (whether the columns the access is bounded by,
    /// `cols` or the buffer's, are a constant multiple of `width`), or
    /// `None` for the helpers that check everything.
    ///
    /// The pair loop is emitted once: emitting it twice when such an
    /// access is a load (unchecked for interior tiles of aligned buffers,
    /// checked for the others) doubled the NVRTC compile of the
    /// epilogues with quad loads (the Llama-3 dSwiGLU backward 2.2 s, the
    /// Gemma dGeGLU backward 7.8 s); the block inputs they read now go
    /// through staging buffers instead (`kir::build`), so one copy serves
    /// every tile.
    pub(super) fn aligned(em: &Emitter<'_>, access: Access, cols: Option<i64>) -> Option<bool> {
        let Access { buf, a, b, width } = access;
        if width < 2 || (2 * a) % width != 0 || b.rem_euclid(width) != 0 {
            return None;
        }
        let buffer = &em.ir.buffers[buf];
        if !buffer.vector_aligned() {
            return None;
        }
        let cols = cols.or_else(|| buffer.cols.as_const());
        Some(cols.is_some_and(|c| c % width == 0))
    }

    /// What fetches the quad loads' rows ahead of the pair loop: the lines
    /// before the loop and those at the top of its body. Streams
    /// (`cg::stream_issue`) copy pair `j + kStreamSlots - 1` into the slot
    /// that pair `j - 1` used, then wait for pair `j`'s copies; otherwise
    /// L2 prefetches run [`PREFETCH_AHEAD`] pairs ahead (neither a copy
    /// nor a prefetch holds a register). Staged subtiles prefetch the
    /// tile's rows once and hold their 16-bit quads one pair ahead in
    /// registers (`Held`).
    pub(super) fn ahead_lines(&self, em: &mut Emitter<'_>) -> (Vec<String>, Vec<String>) {
        let (list, streaming) = (&self.ahead, self.streaming);
        let ahead = if streaming { "kStreamSlots - 1".to_string() } else { PREFETCH_AHEAD.to_string() };
        if list.is_empty() {
            return (Vec::new(), Vec::new());
        }
        // Staged subtiles run on ping-pong tiles, whose scratch holds no
        // stream slots and where per-pair prefetches' addresses made ptxas
        // spill beside 192 accumulators: the rows' quads are prefetched
        // into L2 once, for the whole tile, before the loop.
        if !streaming && self.subtiled() {
            let (held_before, held_top) = self.held_lines(em);
            return ([tile_row_prefetches(em, list), held_before].concat(), held_top);
        }
        let calls = |em: &mut Emitter<'_>, j: &str| -> Vec<String> {
            let mut lines = vec![format!("if ({j} < Frag::CJ) {{"), format!("    const int n = f.col({j});")];
            let row = Code::lit("f.row(i)").reading(&["f", "i"]);
            for (s, (buf, k, aligned)) in list.iter().enumerate() {
                let access = em.access(*buf, &row, &Code::lit(k).reading(&["n"]), false);
                lines.push(format!(
                    "    for (int i = 0; i < Frag::RI; ++i) {};",
                    if streaming {
                        format!(
                            "cg::stream_issue<Frag, kStreamSlots, {aligned}>(f, smem, {s}, ({j}) % kStreamSlots, i, {access})"
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
        before.extend(calls(em, "jp").into_iter().map(|l| format!("    {l}")));
        before.push("}".to_string());
        let mut top = calls(em, &format!("j + {ahead}"));
        if streaming {
            top.push("cg::stream_wait<kStreamSlots - 1>();".to_string());
        }
        (before, top)
    }

    /// Buffer columns `base + 2c .. base + 2c + 4` of a tile load, where `c`
    /// is the pair's first column in `map`, as one `float4`.
    pub(super) fn quad_load(&mut self, em: &mut Emitter<'_>, op: NodeId, buf: usize, map: &ColMap, base: i64) -> Code {
        let key = (op, map.offset, base);
        if let Some(v) = self.quads.get(&key) {
            return Code::local(v);
        }
        let value = em.kernel.nodes[op].value;
        let name = em.local_for(value);
        let c0 = self.col(em, map, 0);
        let k = if base == 0 { format!("2 * {c0}") } else { format!("{base} + 2 * {c0}") };
        let access = em.access(buf, &Code::local("m"), &Code::of(k, [&c0]), false);
        let o = map.offset;
        let in_n = if o == 0 { "2 * n".to_string() } else { format!("2 * (n - {o})") };
        let in_n = if base == 0 { in_n } else { format!("{base} + {in_n}") };
        let aligned = Self::aligned(em, Access { buf, a: 2, b: base - 2 * o, width: 4 }, None);
        // Decided by the first quad: a stream keeps operands from being
        // staged (`can_stage`), and a staged operand keeps quads from streaming.
        self.streaming = self.may_stream && self.staged_load.is_none();
        let s = position_or_push(&mut self.ahead, (buf, in_n, aligned.is_some()));
        let dtype = em.ir.buffers[buf].dtype;
        let held = aligned.filter(|_| self.subtiled() && !self.streaming && dtype.size_bytes() == 2);
        let load = if self.streaming {
            let b = em.buf(buf);
            let text = format!("cg::stream_quad<Frag, kStreamSlots>(f, smem, {s}, j % kStreamSlots, i, {b})");
            Code::lit(text).reading(&["f", "smem", "j", "i"])
        } else if let Some(whole) = held {
            let k = self.ahead[s].1.clone();
            let h = position_or_push(&mut self.held, Held { buf, k, whole });
            let t = c_type(dtype);
            let text = format!("cg::quad_floats<{t}>(qh{h}[j % {}][i])", HELD_AHEAD + 1);
            Code::lit(text).reading(&["j", "i"])
        } else {
            match aligned {
                Some(whole) => Code::of(format!("cg::load4_aligned<{whole}>({access})"), [&access]),
                None => Code::of(format!("cg::load4({access})"), [&access]),
            }
        };
        em.define("float4", &name, load, Some(value));
        self.quads.insert(key, name.clone());
        Code::local(name)
    }

    /// The held quads' ring (`Held`): before the pair loop, its
    /// declaration and the loads of the first [`HELD_AHEAD`] pairs; at the
    /// top of pair `j`'s body, the loads of pair `j + HELD_AHEAD` into the
    /// slot that pair `j - 1` read. The loop is unrolled, so every slot
    /// index is a constant and the ring stays in registers.
    fn held_lines(&self, em: &mut Emitter<'_>) -> (Vec<String>, Vec<String>) {
        if self.held.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let slots = HELD_AHEAD + 1;
        let row = Code::lit("f.row(i)").reading(&["f", "i"]);
        let loads = |em: &mut Emitter<'_>, j: &str| -> Vec<String> {
            let mut lines = vec![format!("if ({j} < Frag::CJ) {{"), format!("    const int n = f.col({j});")];
            for (h, held) in self.held.iter().enumerate() {
                let access = em.access(held.buf, &row, &Code::lit(&held.k).reading(&["n"]), false);
                lines.push("    #pragma unroll".to_string());
                lines.push(format!(
                    "    for (int i = 0; i < Frag::RI; ++i) qh{h}[({j}) % {slots}][i] = cg::quad_bits<{}>({access});",
                    held.whole
                ));
            }
            lines.push("}".to_string());
            lines
        };
        let mut before: Vec<String> =
            (0..self.held.len()).map(|h| format!("uint2 qh{h}[{slots}][Frag::RI];  // quads held ahead")).collect();
        before.push("#pragma unroll".to_string());
        before.push(format!("for (int jp = 0; jp < {HELD_AHEAD}; ++jp) {{"));
        before.extend(loads(em, "jp").into_iter().map(|l| format!("    {l}")));
        before.push("}".to_string());
        (before, loads(em, &format!("j + {HELD_AHEAD}")))
    }
}

/// Before the pair loop of a subtiled epilogue, for each quad read of a
/// 16-bit buffer aligned by construction: one bulk L2 prefetch per tile
/// row of the columns the tile's quads cover (`cg::prefetch_rows_l2`,
/// issued by the thread that writes the row), so that the loop's quad
/// loads, which wait for their data, find it in L2 instead of DRAM. The
/// quads of pair `n` are columns `k(n) .. k(n) + 4` with `k(n) = 2 n + c`;
/// the tile's are `k(n0) .. k(n0) + 2 BN`: 768 bytes per row of a 16-bit
/// tensor, so the tiles in flight (two per SM) take half of the H100's L2.
/// Not for `f32` quads: twice that fills the L2, and the Gemma dGeGLU
/// backward, which reads its `f32` pre-activation so, ran 4% slower
/// with the prefetch (3.64× its bare GEMM against 3.50×).
fn tile_row_prefetches(em: &mut Emitter<'_>, list: &[(usize, String, bool)]) -> Vec<String> {
    let mut lines = Vec::new();
    for (buf, k, aligned) in list {
        if !*aligned || em.ir.buffers[*buf].dtype.size_bytes() != 2 {
            continue;
        }
        let b = em.buf(*buf);
        lines.push("{".to_string());
        lines.push("    const int n = f.gcol0 - f.lcol0;  // the tile's first column".to_string());
        lines.push(format!("    cg::prefetch_rows_l2(f, {b}, {b}_ld, {b}_rows, {b}_cols, {k}, 2 * Frag::BN);"));
        lines.push("}".to_string());
    }
    lines
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
