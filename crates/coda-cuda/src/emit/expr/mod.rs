//! The statement writer shared by every kind of kernel: evaluates a
//! non-register node at an index `(m, k)` into a `const float` local,
//! emitting the statements it needs (one `// file:line:col` comment per
//! statement) and memoizing per scope.
//!
//! Indices are C expressions (usually local names). A node is evaluated at
//! the indices of its space: `(0, 0)` for a scalar, `(m, 0)` per row,
//! `(0, k)` per column, `(m, k)` per element; index transforms (slices,
//! interleave, concatenation, rotary partners, transposes, picks) evaluate
//! their operand at other indices. Values evaluated in an outer scope (for
//! example per-row values before a column loop) are reused inside it.

mod chunk;
mod reduce;
mod rope;
mod staged;
mod values;

pub(crate) use reduce::GroupMember;

use super::code::{Code, Line};
use super::names::Namer;
use super::ops::{binary, float_lit, perm_args};
use super::params::ParamTable;
use crate::error::CodegenError;
use crate::kir::{BlockIr, Kernel, NodeId, Op, Space};
pub(crate) use chunk::chunk_width;
use chunk::Chunk;
use coda_diagnostics::SourceFile;
use coda_ir::{Block, Dim, RopeSpec, UnaryOp, Value};
use std::collections::HashMap;

/// Memo key: node and normalized indices.
type Key = (NodeId, String, String);

/// Writes the body of one kernel.
pub(crate) struct Emitter<'a> {
    pub(crate) ir: &'a BlockIr,
    pub(crate) kernel: &'a Kernel,
    pub(crate) block: &'a Block,
    pub(crate) source: &'a SourceFile,
    pub(crate) params: ParamTable,
    pub(crate) fields: Namer,
    pub(crate) locals: Namer,
    lines: Vec<Line>,
    indent: usize,
    scopes: Vec<HashMap<Key, Code>>,
    /// Threads per row that may run a cooperative (block-wide) reduction
    /// at the current point; 1 where only sequential code is allowed.
    pub(crate) coop: u32,
    /// Whether the current point is a GEMM epilogue's row stage, where the
    /// four lanes of a quad hold the same rows and run the same code (row
    /// partials are then finished by the quad together).
    pub(crate) quad_rows: bool,
    /// File-scope declarations the kernel needs (rotary frequency tables),
    /// by name, emitted before the kernel.
    pub(crate) globals: std::collections::BTreeMap<String, String>,
    /// Buffers other CTAs write while this kernel runs (a GEMM's row
    /// prelude outputs): loaded through L2 (`cg::load_cg`), never through
    /// the read-only cache.
    pub(crate) coherent: std::collections::BTreeSet<usize>,
    /// The constant range `[lo, hi)` of the column index `k` inside the
    /// current column loop, when it is one piece of a split loop: a
    /// concatenation evaluated at `k` then takes the one part covering it.
    pub(crate) k_range: Option<(i64, i64)>,
    /// How many times a row kernel's plain column loops are unrolled (its
    /// stores' loops and whole-row reductions' loops; not chunked loops,
    /// whose iterations already have a chunk of every stream in flight).
    pub(crate) unroll_columns: Option<u32>,
    /// Each rotary partner column local (`kp`) with the column it is the
    /// partner of and the rotation: the two share their pair, so a rotary
    /// frequency of that rotation at `kp` is the one at the column, and
    /// the angle is formed once for both.
    rope_partners: HashMap<String, (String, RopeSpec)>,
    /// Values of nodes that [`Self::eval`] does not bind (a slice, a
    /// broadcast, a rotary partner: each evaluation writes its own index
    /// statements), evaluated ahead of the parent that reads them by
    /// [`Self::eval_operands_first`], in the order the parent reads them.
    ahead: Vec<(Key, Code)>,
    /// Where the values in [`Self::ahead`] for the node being evaluated
    /// begin (those above are its operands').
    ahead_from: usize,
    /// The element loop of the chunked column loop being written, if any
    /// (see [`chunk`]).
    pub(crate) chunk: Option<Chunk>,
    /// Whether a block-wide reduction of more than a warp has been written:
    /// it exchanges partial results through the shared array `red`, which
    /// the kernel then declares.
    pub(crate) block_reductions: bool,
    /// Whether the kernel is a column-reduction kernel of column tiles
    /// (`emit::colk::emit_col`): a reduction over rows is then the lane's
    /// column, its warps taking rows in turn, combined in warp order.
    pub(crate) column_tile: bool,
    /// The groups of stores whose CTAs a column-reduction kernel runs side
    /// by side (`emit::colk::emit_col`): its grid is that many times its
    /// column tiles. 1 for every other kernel.
    pub(crate) col_groups: usize,
    /// The shared tables of rotary cosines and sines a CTA-per-row
    /// kernel fills for its row ([`Self::row_angle_tables`]).
    angle_tables: Vec<rope::AngleTable>,
    /// The shared array that holds each per-head reduction of the current
    /// row, where a row kernel stages them (`emit::rowk`), by node.
    pub(crate) group_arrays: HashMap<NodeId, String>,
    /// The shared arrays of values and columns of each staged top k, by
    /// operand and count (a top k's values and columns share them).
    pub(crate) top_arrays: HashMap<(NodeId, i64), (String, String)>,
    /// The staged arrays each top-k node reads, and whether it reads the
    /// columns.
    pub(crate) top_nodes: HashMap<NodeId, ((String, String), bool)>,
    /// The loads written so far, by buffer ([`staged`]).
    survey: staged::Survey,
    /// The row streams a CTA-per-row kernel reads from shared arrays.
    staged: std::collections::BTreeMap<usize, staged::StagedRow>,
}

impl<'a> Emitter<'a> {
    pub(crate) fn new(ir: &'a BlockIr, kernel: &'a Kernel, block: &'a Block, source: &'a SourceFile) -> Self {
        Emitter {
            ir,
            kernel,
            block,
            source,
            params: ParamTable::default(),
            fields: Namer::default(),
            locals: Namer::default(),
            lines: Vec::new(),
            indent: 0,
            scopes: vec![HashMap::new()],
            rope_partners: HashMap::new(),
            ahead: Vec::new(),
            ahead_from: 0,
            coop: 1,
            quad_rows: false,
            globals: std::collections::BTreeMap::new(),
            coherent: std::collections::BTreeSet::new(),
            k_range: None,
            unroll_columns: None,
            chunk: None,
            block_reductions: false,
            column_tile: false,
            col_groups: 1,
            angle_tables: Vec::new(),
            group_arrays: HashMap::new(),
            top_arrays: HashMap::new(),
            top_nodes: HashMap::new(),
            survey: staged::Survey::default(),
            staged: std::collections::BTreeMap::new(),
        }
    }

    pub(crate) fn internal(&self, message: impl Into<String>) -> CodegenError {
        CodegenError::Internal { block: self.block.name.clone(), message: message.into() }
    }

    /// `file:line:col` of an IR value.
    pub(crate) fn loc(&self, value: Value) -> String {
        self.source.location(self.block.insts.span(value))
    }

    /// A line of text that reads no variable the emitter decides anything
    /// about (braces, pragmas, loop headers, declarations of arrays).
    pub(crate) fn line(&mut self, text: impl Into<String>) {
        self.lines.push(Line::plain(self.indent, text));
    }

    /// A line of code.
    pub(crate) fn line_of(&mut self, code: Code) {
        self.lines.push(Line::of(self.indent, code));
    }

    /// A statement computing IR value `value`, with its source location.
    pub(crate) fn stmt(&mut self, code: Code, value: Value) {
        let loc = self.loc(value);
        let text = format!("{code}  // {loc}");
        self.line_of(Code { text, reads: code.reads });
    }

    /// `const TYPE NAME = INIT;`, with the source location of IR value `at`
    /// (an `int` constant is an index).
    pub(crate) fn define(&mut self, ty: &str, name: &str, init: Code, at: Option<Value>) {
        let loc = at.map(|value| format!("  // {}", self.loc(value))).unwrap_or_default();
        let code = Code { text: format!("const {ty} {name} = {init};{loc}"), reads: init.reads };
        let defines = Some(name.to_string());
        self.lines.push(Line { defines, index: ty == "int", ..Line::of(self.indent, code) });
    }

    /// Opens `header {` and a memo scope.
    pub(crate) fn open(&mut self, header: impl AsRef<str>) {
        self.line(format!("{} {{", header.as_ref()));
        self.indent += 1;
        self.scopes.push(HashMap::new());
    }

    /// Opens a plain column loop, unrolled as [`Self::unroll_columns`] says.
    pub(crate) fn open_column_loop(&mut self, header: impl AsRef<str>) {
        if let Some(factor) = self.unroll_columns {
            self.line(format!("#pragma unroll {factor}"));
        }
        self.open(header);
    }

    /// Closes the innermost scope.
    pub(crate) fn close(&mut self) {
        self.indent = self.indent.saturating_sub(1);
        self.scopes.pop();
        self.line("}");
    }

    /// Opens a memo scope without emitting anything.
    pub(crate) fn push_scope(&mut self) {
        self.scopes.push(HashMap::new());
    }

    /// Closes a scope opened by [`Self::push_scope`].
    pub(crate) fn pop_scope(&mut self) {
        self.scopes.pop();
    }

    pub(crate) fn set_indent(&mut self, indent: usize) {
        self.indent = indent;
    }

    /// Appends lines written earlier (already indented).
    pub(crate) fn extend(&mut self, lines: Vec<String>) {
        self.lines.extend(lines.into_iter().map(|text| Line::plain(0, text)));
    }

    /// The current indentation level.
    pub(crate) fn indent_level(&self) -> usize {
        self.indent
    }

    /// The position of the next line written.
    pub(crate) fn mark(&self) -> usize {
        self.lines.len()
    }

    /// The lines written from a position from [`Self::mark`] on.
    pub(crate) fn lines_from(&self, at: usize) -> &[Line] {
        &self.lines[at.min(self.lines.len())..]
    }

    /// Removes the line at a position from [`Self::mark`].
    pub(crate) fn remove_line(&mut self, at: usize) {
        if at < self.lines.len() {
            self.lines.remove(at);
        }
    }

    /// Inserts `lines` at a position from [`Self::mark`].
    pub(crate) fn insert_lines(&mut self, at: usize, lines: Vec<Line>) {
        let tail = self.lines.split_off(at.min(self.lines.len()));
        self.lines.extend(lines);
        self.lines.extend(tail);
    }

    /// The lines written so far, as text.
    pub(crate) fn take_lines(&mut self) -> Vec<String> {
        self.take_body().iter().map(Line::render).collect()
    }

    /// The lines written so far.
    pub(crate) fn take_body(&mut self) -> Vec<Line> {
        std::mem::take(&mut self.lines)
    }

    /// Records that `node` at `(m, k)` is held by the expression `var`.
    pub(crate) fn bind(&mut self, node: NodeId, m: &str, k: &str, var: Code) {
        let key = self.key(node, m, k);
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(key, var);
        }
    }

    fn key(&self, node: NodeId, m: &str, k: &str) -> Key {
        let space = self.kernel.nodes.get(node).map_or(Space::Tile, |n| n.space);
        let (m, k) = normalize(space, m, k);
        (node, m, k)
    }

    /// Whether node `node` has a value at row `m`, column `k` in scope.
    pub(crate) fn is_bound(&self, node: NodeId, m: &str, k: &str) -> bool {
        self.lookup(&self.key(node, m, k)).is_some()
    }

    fn lookup(&self, key: &Key) -> Option<Code> {
        self.scopes.iter().rev().find_map(|s| s.get(key).cloned())
    }

    /// A fresh local named after IR value `value`.
    pub(crate) fn local_for(&mut self, value: Value) -> String {
        let base =
            self.block.names.get(value.index()).cloned().flatten().unwrap_or_else(|| format!("v{}", value.index()));
        self.locals.fresh(&base)
    }

    /// `const int NAME = expr;`, or `expr` itself when it is a name or number.
    pub(crate) fn index(&mut self, base: &str, expr: Code) -> Code {
        if expr.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return expr;
        }
        let name = self.locals.fresh(base);
        self.define("int", &name, expr, None);
        Code::local(name)
    }

    /// A run-time dim as a `long long` C expression.
    pub(crate) fn dim_ll(&mut self, d: &Dim) -> String {
        if let Some(c) = d.as_const() {
            return format!("{c}LL");
        }
        let text = d.to_string();
        let mut out = String::new();
        let mut word = String::new();
        for ch in text.chars().chain(std::iter::once(' ')) {
            if ch.is_ascii_alphanumeric() || ch == '_' {
                word.push(ch);
                continue;
            }
            if !word.is_empty() {
                if word.chars().all(|c| c.is_ascii_digit()) {
                    out.push_str(&format!("{word}LL"));
                } else {
                    out.push_str(&format!("p.{}", self.params.dim(&word)));
                }
                word.clear();
            }
            if ch != ' ' {
                out.push(ch);
            } else {
                out.push(' ');
            }
        }
        format!("({})", out.trim())
    }

    /// A run-time dim as an `int` C expression.
    pub(crate) fn dim_int(&mut self, d: &Dim) -> String {
        match d.as_const() {
            Some(c) => c.to_string(),
            None => format!("(int){}", self.dim_ll(d)),
        }
    }

    /// `p.NAME` of a buffer read by this kernel.
    pub(crate) fn buf(&mut self, id: usize) -> String {
        let name = self.params.buf(self.ir, &mut self.fields, id);
        format!("p.{name}")
    }

    /// `p.NAME` of a buffer written by this kernel.
    pub(crate) fn buf_w(&mut self, id: usize) -> String {
        let name = self.params.write(self.ir, &mut self.fields, id);
        format!("p.{name}")
    }

    /// The arguments `p.b, p.b_ld` and `p.b_rows, p.b_cols` around `(m, k)`.
    pub(crate) fn access(&mut self, id: usize, m: &Code, k: &Code, write: bool) -> Code {
        let b = if write { self.buf_w(id) } else { self.buf(id) };
        Code::of(format!("{b}, {b}_ld, {m}, {k}, {b}_rows, {b}_cols"), [m, k])
    }

    /// Evaluates `node` at `(m, k)`, two indices ([`Code::index`]); returns
    /// a C expression (a local, a literal, an element of a chunk).
    pub(crate) fn eval(&mut self, node: NodeId, m: &str, k: &str) -> Result<Code, CodegenError> {
        let key = self.key(node, m, k);
        if let Some(var) = self.lookup(&key) {
            return Ok(var);
        }
        let own = self.ahead[self.ahead_from.min(self.ahead.len())..].iter().position(|(x, _)| *x == key);
        if let Some(at) = own {
            return Ok(self.ahead.remove(self.ahead_from + at).1);
        }
        let mark = self.ahead.len();
        self.eval_operands_first(node, m, k)?;
        self.eval_from(node, m, k, mark)
    }

    /// [`Self::eval_body`] of a node whose operands' unbound values are in
    /// [`Self::ahead`] from `mark` on; leaves `ahead` as it was before them.
    fn eval_from(&mut self, node: NodeId, m: &str, k: &str, mark: usize) -> Result<Code, CodegenError> {
        let outer = std::mem::replace(&mut self.ahead_from, mark);
        let value = self.eval_body(node, m, k);
        self.ahead.truncate(mark);
        self.ahead_from = outer;
        value
    }

    /// [`Self::eval`] of a node whose same-position operands
    /// ([`Self::same_position_operands`]) are evaluated already.
    fn eval_body(&mut self, node: NodeId, m: &str, k: &str) -> Result<Code, CodegenError> {
        let key = self.key(node, m, k);
        let n = self.kernel.nodes.get(node).cloned().ok_or_else(|| self.internal("node out of range"))?;
        if n.reg.is_some() {
            return Err(self.internal("register node evaluated outside the epilogue loop"));
        }
        let (m, k) = (key.1.clone(), key.2.clone());
        let (mi, ki) = (Code::index(&m), Code::index(&k));
        let expr = match &n.op {
            Op::Const(c) => return Ok(Code::lit(float_lit(*c))),
            Op::Dim(d) => return Ok(Code::lit(format!("(float){}", self.dim_ll(d)))),
            Op::Broadcast(a) => return self.eval(*a, &m, &k),
            Op::Transpose(a) => return self.eval(*a, &k, &m),
            Op::Slice { arg, start, step } => {
                let idx = if start.as_const() == Some(0) && *step == 1 {
                    ki
                } else {
                    let s = self.dim_int(start);
                    let idx = self.index("kc", Code::of(format!("{s} + {k} * {step}"), [&ki]));
                    if let (Some(offset), 1) = (start.as_const(), *step) {
                        self.chunk_shift(&idx, &k, offset);
                    }
                    idx
                };
                return self.eval(*arg, &m, &idx);
            }
            Op::RopePartner(spec, a) => {
                let args = self.rope_args(spec);
                let idx = match self.chunk_partner(spec, &k, &args) {
                    Some(idx) => idx,
                    None => self.index("kp", Code::of(format!("cg::rope_partner({k}, {args})"), [&ki])),
                };
                self.rope_partners.insert(idx.text.clone(), (k.clone(), spec.clone()));
                return self.eval(*a, &m, &idx);
            }
            Op::Unpermute(perm, a) => {
                let idx = self.index("kq", Code::of(format!("cg::pair_position({k}, {})", perm_args(perm)), [&ki]));
                return self.eval(*a, &m, &idx);
            }
            Op::Permute(perm, a) => {
                let idx = self.index("ks", Code::of(format!("cg::pair_source({k}, {})", perm_args(perm)), [&ki]));
                return self.eval(*a, &m, &idx);
            }
            Op::Load(id) => {
                self.note_load(*id, &m);
                if let Some(element) = self.chunk_load(*id, &m, &k, n.value) {
                    self.bind(node, &m, &k, element.clone());
                    return Ok(element);
                }
                if let Some(element) = self.staged_element(*id, &m, &ki) {
                    element
                } else {
                    let f = if self.coherent.contains(id) { "load_cg" } else { "load" };
                    let access = self.access(*id, &mi, &ki, false);
                    Code::of(format!("cg::{f}({access})"), [&access])
                }
            }
            Op::Rope(spec, table) => self.rope_table(spec, *table, &ki),
            Op::FinishRow(kind, bufs) => self.finish_row(*kind, bufs, &mi)?,
            Op::FinishCol(id) => {
                let b = self.buf(*id);
                Code::of(format!("cg::finish_sum<1>({b}, {b}_ld, {k}, {b}_cols, nullptr)"), [&ki])
            }
            Op::Unary(op, a) => self.unary(*op, *a, &m, &k)?,
            Op::Binary(op, a, b) => {
                let (a, b) = (self.eval(*a, &m, &k)?, self.eval(*b, &m, &k)?);
                Code::of(binary(*op, &a, &b), [&a, &b])
            }
            Op::Select(c, a, b) => {
                let (c, a, b) = (self.eval(*c, &m, &k)?, self.eval(*a, &m, &k)?, self.eval(*b, &m, &k)?);
                Code::of(format!("({c} != 0.0f ? {a} : {b})"), [&c, &a, &b])
            }
            Op::Cast(to, a) => {
                let a = self.eval(*a, &m, &k)?;
                Code::of(self.cast(*to, &a, n.value)?, [&a])
            }
            Op::Concat(parts) => self.concat(parts, &m, &k)?,
            Op::Interleave(e, o) => {
                let h = self.index("kh", Code::of(format!("{k} >> 1"), [&ki]));
                let (e, o) = (self.eval(*e, &m, &h)?, self.eval(*o, &m, &h)?);
                Code::of(format!("(({k} & 1) ? {o} : {e})"), [&ki, &o, &e])
            }
            Op::Take { arg, index, width } => {
                let t = self.taken_index(*index, &m, width, "kt")?;
                let v = self.eval(*arg, &m, &t)?;
                Code::of(format!("({t} >= 0 ? {v} : 0.0f)"), [&t, &v])
            }
            Op::Scatter { arg, index, width } => {
                let t = self.taken_index(*index, &m, width, "kt")?;
                let a = self.eval(*arg, &m, "0")?;
                Code::of(format!("({k} == {t} ? {a} : 0.0f)"), [&ki, &t, &a])
            }
            Op::GroupExpand(groups, a) => {
                let per_element = |op: &str| Code::of(format!("{k} {op} {}", groups.width()), [&ki]);
                let group = match groups {
                    coda_ir::ColGroups::Heads(w) => self.chunk_group_index(&k, *w).unwrap_or_else(|| per_element("/")),
                    coda_ir::ColGroups::Lanes(_) => per_element("%"),
                };
                let idx = self.index("kg", group);
                return self.eval(*a, &m, &idx);
            }
            Op::TopK { .. } => {
                let Some(((values, columns), indices)) = self.top_nodes.get(&node).cloned() else {
                    return Err(self.internal("a top k outside a CTA-per-row kernel's staging"));
                };
                match indices {
                    true => Code::of(format!("(float){columns}[{k}]"), [&ki]).reading(&[&columns]),
                    false => Code::of(format!("{values}[{k}]"), [&ki]).reading(&[&values]),
                }
            }
            Op::GatherRows { table, index, rows } => {
                let t = self.taken_index(*index, &m, rows, "mr")?;
                let v = self.eval(*table, &t, &k)?;
                Code::of(format!("({t} >= 0 ? {v} : 0.0f)"), [&t, &v])
            }
            Op::SliceHeads(part, a) => {
                let (w, h, s) = (part.width, part.head, part.start);
                let idx = self.index("kh", Code::of(format!("{k} / {w} * {h} + {s} + {k} % {w}"), [&ki]));
                return self.eval(*a, &m, &idx);
            }
            Op::PadHeads(part, a) => {
                let (w, h, s) = (part.width, part.head, part.start);
                let j = self.index("kj", Code::of(format!("{k} % {h} - {s}"), [&ki]));
                let idx = self.index("kh", Code::of(format!("{k} / {h} * {w} + {j}"), [&ki, &j]));
                let v = self.eval(*a, &m, &idx)?;
                Code::of(format!("(({j}) >= 0 && ({j}) < {w} ? {v} : 0.0f)"), [&j, &v])
            }
            Op::GroupReduce { op, groups, arg, cols } => match self.group_arrays.get(&node) {
                Some(array) => return Ok(Code::of(format!("{array}[{k}]"), [&ki]).reading(&[array])),
                None => {
                    let member = reduce::GroupMember { node, op: *op, arg: *arg };
                    let mut values = self.group_reductions(&[member], (*groups, cols), (&m, &k), None)?;
                    return values.pop().ok_or_else(|| self.internal("a group reduction without a value"));
                }
            },
            Op::RowReduce { op, arg, width } => return self.reduce(node, *op, *arg, width, &m, true),
            Op::ColReduce { op, arg, height } => return self.reduce(node, *op, *arg, height, &k, false),
            Op::Acc => return Err(self.internal("accumulator outside a GEMM epilogue")),
            // Only in a GEMM's per-row loop over the thread's rows `i`.
            // Bound by the grid tail before any tail node is evaluated.
            Op::GridReduce { .. } => return Err(self.internal("grid reduction outside the grid tail")),
        };
        let name = self.local_for(n.value);
        self.define("float", &name, expr, Some(n.value));
        self.bind(node, &m, &k, Code::local(&name));
        Ok(Code::local(name))
    }

    /// The index row `m` of `index` names, as an `int` local named after
    /// `base`: in `0..extent`, or -1 for any other value.
    fn taken_index(&mut self, index: NodeId, m: &str, extent: &Dim, base: &str) -> Result<Code, CodegenError> {
        let iv = self.eval(index, m, "0")?;
        let e = self.dim_int(extent);
        Ok(self.index(base, Code::of(format!("cg::take_index({iv}, {e})"), [&iv])))
    }

    /// Evaluates, without recursion, the operands that [`Self::eval`] of
    /// `node` would evaluate first at its own position, and theirs, and so
    /// on: chains of element-wise nodes are as long as the program (one per
    /// `let`). Each node is evaluated after its operands, in the order of
    /// a recursive evaluation, so the same statements are written in the
    /// same order; a node that `eval` binds is then found bound by its
    /// parent, and the value of one it does not bind waits in
    /// [`Self::ahead`] for its parent, which takes it in place of
    /// evaluating the node again.
    fn eval_operands_first(&mut self, node: NodeId, m: &str, k: &str) -> Result<(), CodegenError> {
        // `Some(mark)`: the node's operands are done, their unbound values
        // in `ahead` from `mark` on.
        let mut stack = vec![(node, m.to_string(), k.to_string(), None)];
        while let Some((id, m, k, operands_done)) = stack.pop() {
            let key = self.key(id, &m, &k);
            if let Some(mark) = operands_done {
                if id != node {
                    let value = self.eval_from(id, &m, &k, mark)?;
                    if self.lookup(&key).is_none() {
                        self.ahead.push((key, value));
                    }
                }
                continue;
            }
            let Some(n) = self.kernel.nodes.get(id) else { continue };
            // A register node is the epilogue loop's; `eval` reports one
            // met outside it.
            if self.lookup(&key).is_some() || (id != node && n.reg.is_some()) {
                continue;
            }
            let operands = self.same_position_operands(id);
            let (m, k) = (key.1, key.2);
            stack.push((id, m.clone(), k.clone(), Some(self.ahead.len())));
            stack.extend(operands.into_iter().rev().map(|o| (o, m.clone(), k.clone(), None)));
        }
        Ok(())
    }

    /// The operands [`Self::eval`] of `node` evaluates before anything else,
    /// at `node`'s own position, in its order.
    fn same_position_operands(&self, node: NodeId) -> Vec<NodeId> {
        let Some(n) = self.kernel.nodes.get(node) else { return Vec::new() };
        match &n.op {
            Op::Unary(UnaryOp::Sin | UnaryOp::Cos, a) => match self.rope_angle(*a) {
                Some((x, _)) => vec![x],
                None => vec![*a],
            },
            Op::Unary(_, a) | Op::Cast(_, a) | Op::Broadcast(a) => vec![*a],
            Op::Binary(_, a, b) => vec![*a, *b],
            Op::Select(c, a, b) => vec![*c, *a, *b],
            _ => Vec::new(),
        }
    }
}

/// Indices normalized to a space.
fn normalize(space: Space, m: &str, k: &str) -> (String, String) {
    match space {
        Space::Scalar => ("0".into(), "0".into()),
        Space::Row => (m.into(), "0".into()),
        Space::Col => ("0".into(), k.into()),
        Space::Tile => (m.into(), k.into()),
    }
}
