//! Column loops of CTA-per-row kernels in chunks of [`CHUNK`] columns per
//! thread (docs/codegen.md, "Row kernels in chunks").
//!
//! A chunked loop is two loops: the outer one strides over chunk starts
//! `kv` (multiples of eight), the inner one is unrolled over the chunk's
//! elements `e` and defines the column local (`k`, `kk`) as `kv + e`, so
//! every expression is written per element exactly as in a plain column
//! loop. What changes is the memory access: a load of a row stream at the
//! loop's column (or at a rotary partner column, which for the "rotate
//! half" style is the partner chunk's element `e`) is hoisted before the
//! inner loop as one `cg::load_chunk` of the whole chunk into a register array,
//! and a store writes the element into an array that one `cg::st_chunk` stores
//! after the inner loop: one 16-byte access per eight 16-bit elements
//! instead of eight 2-byte ones. The helpers fall back to element accesses
//! when a chunk is not 16-byte aligned or not wholly inside the buffer, so
//! the rewrite holds for any layout; the emitter only asks for chunks when
//! the loop's width and bounds are constant multiples of eight, so a chunk
//! never reaches past the loop's last column.

use super::{Code, Emitter, Line};
use coda_ir::{RopeSpec, RopeStyle, Value};
use std::collections::HashMap;

/// Columns per chunk at most: one 16-byte access of a 16-bit tensor.
pub(crate) const CHUNK: i64 = 8;

/// Floats of chunk arrays a loop may hold per thread (its row streams
/// times the chunk width): eight-column chunks of a kernel with many
/// streams cost occupancy. On the H100 the Gemma backward's 7-stream row
/// kernel at 56 registers (eight columns) ran at 2.44 TB/s, its element
/// loop at 32 registers at 2.71 TB/s.
const CHUNK_FLOATS: i64 = 40;

/// The element loop of a chunked column loop being written.
#[derive(Default)]
pub(crate) struct Chunk {
    /// The column locals of the element loop, each with the chunk start it
    /// belongs to and its element index there: the loop's own column
    /// (`k` → `kv`, `e`) and rotary partner columns (`kp` → `kpv`, `e`).
    cols: Vec<(String, String, String)>,
    /// Lines written before the element loop: chunk loads and partner
    /// chunk starts.
    hoisted: Vec<Line>,
    /// The chunk arrays loaded so far, by buffer, row and chunk start.
    loaded: HashMap<(usize, String, String), String>,
    /// Indentation of the hoisted lines.
    indent: usize,
    /// Where in the written lines the hoisted lines go.
    mark: usize,
    /// Columns per chunk.
    width: i64,
    /// The column locals defined in the element loop (the loop's own and
    /// rotary partners) with their lines, dropped when nothing else in the
    /// element loop uses them.
    defined: Vec<(String, usize)>,
}

/// The names of an open chunked loop.
pub(crate) struct ChunkLoop {
    /// The chunk start local.
    pub(crate) start: String,
    /// The element index local.
    pub(crate) elem: String,
}

/// The chunk width of a column loop over `[lo, hi)` with `tpr` threads
/// per row and `streams` row streams, if it can be chunked: the widest of
/// 8, 4 and 2 columns whose arrays fit [`CHUNK_FLOATS`] and that divides
/// the bounds, preferring one that gives every thread the same number of
/// chunks (`hi - lo` a multiple of `tpr` chunks; 3072 columns take chunks
/// of 4, not 8, of which half the threads would get one more).
pub(crate) fn chunk_width(lo: i64, hi: i64, tpr: u32, streams: usize) -> Option<i64> {
    let fits = |v: i64| lo % v == 0 && hi % v == 0 && hi > lo && v * (streams.max(1) as i64) <= CHUNK_FLOATS;
    let widths = [CHUNK, CHUNK / 2, CHUNK / 4];
    let balanced = widths.into_iter().find(|&v| fits(v) && (hi - lo) % (i64::from(tpr) * v) == 0);
    balanced.or_else(|| widths.into_iter().find(|&v| fits(v)))
}

impl Emitter<'_> {
    /// Opens a chunked loop over columns `[lo, end)` with `tpr` threads per
    /// row: the outer loop, the `arrays` declared in it (one float per
    /// element each), and the element loop defining column local `col`.
    pub(crate) fn open_chunks(
        &mut self,
        col: &str,
        (lo, end): (&str, &str),
        (tpr, width): (u32, i64),
        arrays: &[String],
    ) -> ChunkLoop {
        let start = self.locals.fresh("kv");
        let elem = self.locals.fresh("e");
        let step = i64::from(tpr) * width;
        self.open(format!("for (int {start} = {lo}cg::lane<{tpr}>() * {width}; {start} < {end}; {start} += {step})"));
        for a in arrays {
            self.line(format!("float {a}[{width}];"));
        }
        let chunk = Chunk {
            cols: vec![(col.to_string(), start.clone(), elem.clone())],
            indent: self.indent_level(),
            mark: self.mark(),
            width,
            ..Chunk::default()
        };
        self.line("#pragma unroll");
        self.open(format!("for (int {elem} = 0; {elem} < {width}; ++{elem})"));
        let defined = vec![(col.to_string(), self.mark())];
        self.define("int", col, Code::lit(format!("{start} + {elem}")).reading(&[&start, &elem]), None);
        self.chunk = Some(Chunk { defined, ..chunk });
        ChunkLoop { start, elem }
    }

    /// Closes the element loop of the innermost chunked loop and writes
    /// its hoisted loads before it; the outer loop stays open for the
    /// chunk stores.
    pub(crate) fn close_chunk_elements(&mut self) {
        self.close();
        if let Some(chunk) = self.chunk.take() {
            for (local, at) in chunk.defined.iter().rev() {
                if !self.lines_from(at + 1).iter().any(|line| line.reads(local)) {
                    self.remove_line(*at);
                }
            }
            self.insert_lines(chunk.mark, chunk.hoisted);
        }
    }

    /// In a chunked loop, a load of buffer `id` at row `m` and column `k`
    /// as an element of a hoisted chunk load, when `k` is one of the
    /// loop's column locals and `m` the kernel's row or a constant (a row
    /// computed inside the element loop, such as an embedding's table row,
    /// does not exist where the chunk load goes).
    pub(crate) fn chunk_load(&mut self, id: usize, m: &str, k: &str, value: Value) -> Option<Code> {
        let row_outside = m == "m" || m.chars().all(|c| c.is_ascii_digit());
        if self.coherent.contains(&id) || !row_outside {
            return None;
        }
        let (start, elem) = self.chunk_col(k)?;
        let key = (id, m.to_string(), start.clone());
        let element = |name: &str| Code::lit(format!("{name}[{elem}]")).reading(&[name, &elem]);
        if let Some(name) = self.chunk.as_ref().and_then(|c| c.loaded.get(&key)).cloned() {
            return Some(element(&name));
        }
        let name = self.local_for(value) + "_c";
        let width = self.chunk.as_ref()?.width;
        let load = match self.staged_chunk(id, m, (&name, width), &start) {
            Some(load) => load,
            None => {
                let access = self.access(id, &Code::index(m), &Code::local(&start), false);
                Code::of(format!("float {name}[{width}]; cg::load_chunk({name}, {access});"), [&access])
            }
        };
        let text = format!("{load}  // {}", self.loc(value));
        let chunk = self.chunk.as_mut()?;
        chunk.hoisted.push(Line::of(chunk.indent, Code { text, reads: load.reads }));
        chunk.loaded.insert(key, name.clone());
        Some(element(&name))
    }

    /// In a chunked loop, the rotary partner column of column local `k`
    /// as `kpv + e`, with the partner chunk's start `kpv` hoisted, when
    /// every chunk's partner is a chunk ("rotate half" with constant range
    /// bounds and half heads that are multiples of the chunk width, every
    /// feature of a head rotated).
    pub(crate) fn chunk_partner(&mut self, spec: &RopeSpec, k: &str, args: &str) -> Option<Code> {
        let width = self.chunk.as_ref()?.width;
        let aligned = |d: &coda_ir::Dim| d.as_const().is_some_and(|c| c % width == 0);
        let fits = spec.style == RopeStyle::Half
            && spec.rotary_dim == spec.head_dim
            && (spec.head_dim / 2) % width == 0
            && aligned(&spec.start)
            && aligned(&spec.end);
        if !fits {
            return None;
        }
        let (start, elem) = self.chunk_col(k)?;
        let partner_start = self.locals.fresh("kpv");
        let partner = self.locals.fresh("kp");
        let at = self.mark();
        let chunk = self.chunk.as_mut()?;
        let text = format!("const int {partner_start} = cg::rope_partner({start}, {args});");
        let code = Code::lit(text).reading(&[&start]);
        chunk.hoisted.push(Line { defines: Some(partner_start.clone()), index: true, ..Line::of(chunk.indent, code) });
        chunk.cols.push((partner.clone(), partner_start.clone(), elem.clone()));
        chunk.defined.push((partner.clone(), at));
        let init = Code::lit(format!("{partner_start} + {elem}")).reading(&[&partner_start, &elem]);
        self.define("int", &partner, init, None);
        Some(Code::local(partner))
    }

    /// In a chunked loop, records that local `idx` is column local `k`
    /// plus the constant `offset` (a slice's start, a concatenation part's
    /// offset): when the offset is a multiple of the chunk width, loads at `idx`
    /// are elements of the chunk at the shifted start.
    pub(crate) fn chunk_shift(&mut self, idx: &str, k: &str, offset: i64) {
        if self.chunk.as_ref().is_none_or(|c| offset % c.width != 0) {
            return;
        }
        let Some((start, elem)) = self.chunk_col(k) else { return };
        let definition = (self.mark().checked_sub(1))
            .filter(|&at| self.lines_from(at).first().is_some_and(|l| l.defines.as_deref() == Some(idx)));
        let shifted = match offset {
            0.. => format!("{start} + {offset}"),
            _ => format!("{start} - {}", -offset),
        };
        if let Some(chunk) = self.chunk.as_mut() {
            chunk.cols.push((idx.to_string(), shifted, elem));
            chunk.defined.extend(definition.map(|at| (idx.to_string(), at)));
        }
    }

    /// In a chunked loop, the group of column local `k` as the chunk's
    /// start over `width` when every chunk lies within one group of `width`
    /// columns (chunk starts are multiples of the chunk width, which
    /// divides `width`): a per-group value indexed by it is the same
    /// expression for every element of the chunk, so the compiler loads and
    /// computes it once per chunk instead of once per element (a softmax's
    /// saved maxima, per-head norms).
    pub(crate) fn chunk_group_index(&self, k: &str, width: i64) -> Option<Code> {
        let chunk = self.chunk.as_ref()?;
        if width % chunk.width != 0 {
            return None;
        }
        let (start, _) = self.chunk_col(k)?;
        // A shifted chunk's start is an expression of its loop's (`kv - 256`).
        let base: String = start.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let text = match base == start {
            true => format!("{start} / {width}"),
            false => format!("({start}) / {width}"),
        };
        Some(Code::of(text, [&Code::local(base)]))
    }

    /// The chunk start and element index column local `k` stands for.
    fn chunk_col(&self, k: &str) -> Option<(String, String)> {
        let chunk = self.chunk.as_ref()?;
        chunk.cols.iter().find(|(c, _, _)| c == k).map(|(_, s, e)| (s.clone(), e.clone()))
    }
}
