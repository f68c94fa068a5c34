//! Rows staged in shared memory (docs/codegen.md, "Rows staged in shared
//! memory").
//!
//! A CTA-per-row kernel that makes several passes over its row (a norm's
//! statistic, then the normalised values; a per-head statistic, then the
//! head's elements; a rotary partner beside each column) would load each
//! row stream once per pass and wait for memory in each: the backward's
//! row kernels spend most of their stalls on those loads. Such a kernel
//! copies row `m` of every row stream it reads into a shared array first,
//! all the copies in flight together, and every pass reads the arrays. The choice is made on the kernel's code as first written
//! (a survey, [`Survey`]): which buffers it loads at its row, and how many
//! times.

use super::{Code, Emitter};
use crate::kir::{BufId, Op, Space};
use coda_ir::DType;
use std::collections::{BTreeMap, BTreeSet};

/// Bytes of staged rows per CTA at most: static shared memory is limited
/// to 48 KiB, of which the kernel's other arrays (reduction scratch, rotary
/// tables, per-head statistics) take a little.
const STAGE_BYTES: i64 = 40 * 1024;

/// Loads of one row stream at the row from which a kernel stages its
/// rows. Measured on the H200 at M = 8192 (`codac bench FILE --grad`, the
/// builds side by side in one call), staging every row stream against
/// none: Qwen3's `row_hn`, which reads `dq` and `dk` four times (two
/// passes, each with the rotary partner), 0.463 and 0.484 ms against 0.342
/// and 0.378; Gemma-2's `row_hn` (three reads) 0.192 against 0.177. Where
/// every stream is read twice the copies did not pay: Gemma-2's `row_h`
/// 0.203 against 0.186 ms, but its `row_dx1` 0.137 against 0.154 (112
/// against 128 µs under Nsight Compute, its DRAM throughput 60% against
/// 52%), `row_x1` and `row_x_out` within 0.003 ms.
const MIN_READS: usize = 3;

/// The loads of a row kernel's body as first written, by buffer.
#[derive(Debug, Default, Clone)]
pub(crate) struct Survey {
    /// Load sites (chunk loads and element loads) at the kernel's row.
    at_row: BTreeMap<BufId, usize>,
    /// Buffers also loaded at another row (a gathered table row).
    elsewhere: BTreeSet<BufId>,
}

/// A staged row stream: its shared array and its constant width.
#[derive(Debug, Clone)]
pub(crate) struct StagedRow {
    /// The shared array's name.
    pub(crate) array: String,
    /// Elements of the row.
    pub(crate) width: i64,
}

impl Survey {
    /// The buffers worth staging: none unless some row stream is loaded at
    /// the row [`MIN_READS`] times or more, and then every row stream the
    /// kernel may stage, the most loaded first, within [`STAGE_BYTES`], so
    /// that all of the row's loads are in flight at once.
    pub(crate) fn choose(&self, em: &Emitter<'_>) -> Vec<(BufId, i64)> {
        let candidates: Vec<(BufId, i64, usize)> = (self.at_row.iter())
            .filter(|(id, _)| !self.elsewhere.contains(id))
            .filter_map(|(&id, &sites)| Some((id, stageable_width(em, id)?, sites)))
            .collect();
        if !candidates.iter().any(|c| c.2 >= MIN_READS) {
            return Vec::new();
        }
        let mut by_use = candidates;
        by_use.sort_by_key(|&(id, _, sites)| (std::cmp::Reverse(sites), id));
        let mut bytes = 0;
        let mut chosen = Vec::new();
        for (id, width, _) in by_use {
            let size = width * em.ir.buffers[id].dtype.size_bytes() as i64;
            if bytes + size <= STAGE_BYTES {
                bytes += size;
                chosen.push((id, width));
            }
        }
        chosen.sort_unstable();
        chosen
    }
}

/// The constant width of buffer `id` if its rows can be staged: a 16-bit
/// or f32 tensor over the kernel's rows that the kernel does not write nor
/// read through L2, of whole 16-byte vectors.
fn stageable_width(em: &Emitter<'_>, id: BufId) -> Option<i64> {
    let buffer = &em.ir.buffers[id];
    if !matches!(buffer.dtype, DType::BF16 | DType::F16 | DType::F32) {
        return None;
    }
    let size = buffer.dtype.size_bytes() as i64;
    let written = em.kernel.stores.iter().any(|s| s.buf == id);
    let tiles = em.kernel.nodes.iter().any(|n| n.op == Op::Load(id) && n.space == Space::Tile);
    let width = buffer.cols.as_const()?;
    let whole = width > 0 && (width * size) % 16 == 0;
    (whole && tiles && !written && !em.coherent.contains(&id) && buffer.rows.as_const() != Some(1)).then_some(width)
}

impl Emitter<'_> {
    /// Records a load of buffer `id` at row `m` for the [`Survey`].
    pub(crate) fn note_load(&mut self, id: BufId, m: &str) {
        match m == "m" {
            true => *self.survey.at_row.entry(id).or_default() += 1,
            false => {
                self.survey.elsewhere.insert(id);
            }
        }
    }

    /// The loads recorded by [`Self::note_load`] so far.
    pub(crate) fn survey(&self) -> &Survey {
        &self.survey
    }

    /// Declares the shared arrays of `streams` (buffer, width) and copies
    /// row `m` of each into them, then waits for every copy; later loads of
    /// those buffers at row `m` read the arrays.
    pub(crate) fn stage_rows(&mut self, streams: &[(BufId, i64)], threads: u32) {
        for &(id, width) in streams {
            let b = self.buf(id);
            let ty = crate::emit::params::c_type(self.ir.buffers[id].dtype);
            let field = b.strip_prefix("p.").unwrap_or(&b);
            let array = self.locals.fresh(&format!("{field}_row"));
            self.line(format!("__shared__ __align__(16) {ty} {array}[{width}];  // row m of {b}"));
            self.line(format!("cg::stage_row<{threads}, {width}>({array}, {b}, {b}_ld, m, {b}_rows, {b}_cols);"));
            self.staged.insert(id, StagedRow { array, width });
        }
        if !streams.is_empty() {
            self.line("cg::stage_wait();");
        }
    }

    /// The staged row of buffer `id`, when `m` is the kernel's row.
    fn staged_row(&self, id: BufId, m: &str) -> Option<&StagedRow> {
        self.staged.get(&id).filter(|_| m == "m")
    }

    /// Element `k` of staged buffer `id` at row `m`, if it is staged.
    pub(crate) fn staged_element(&self, id: BufId, m: &str, k: &Code) -> Option<Code> {
        let row = self.staged_row(id, m)?;
        let (array, width) = (&row.array, row.width);
        Some(Code::of(format!("cg::srow<{width}>({array}, {k})"), [k]).reading(&[array]))
    }

    /// The statement loading the chunk `name` of `width` elements from
    /// staged buffer `id` at row `m`, column `start`, if it is staged.
    pub(crate) fn staged_chunk(&self, id: BufId, m: &str, (name, width): (&str, i64), start: &str) -> Option<Code> {
        let row = self.staged_row(id, m)?;
        let (array, w) = (&row.array, row.width);
        let text = format!("float {name}[{width}]; cg::srow_chunk<{w}>({name}, {array}, {start});");
        Some(Code::lit(text).reading(&[array, start]))
    }
}
