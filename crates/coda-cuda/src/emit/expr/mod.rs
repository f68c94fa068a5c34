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

use super::code::{Code, Line};
use super::names::Namer;
use super::ops::{binary, double_lit, float_lit, perm_args, unary_reg};
use super::params::ParamTable;
use crate::error::CodegenError;
use crate::kir::{BlockIr, Kernel, NodeId, Op, PartialKind, Space};
pub(crate) use chunk::chunk_width;
use chunk::Chunk;
use coda_diagnostics::SourceFile;
use coda_ir::{BinaryOp, Block, DType, Dim, ReduceOp, RopeSpec, RopeStyle, RopeTable, UnaryOp, Value};
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

    fn lookup(&self, key: &Key) -> Option<Code> {
        self.scopes.iter().rev().find_map(|s| s.get(key).cloned())
    }

    /// The shared array a block-wide reduction over `tpr` threads exchanges
    /// its partial results through: `red` beyond a warp, which the kernel
    /// must then declare ([`Self::block_reductions`]), else none.
    pub(crate) fn reduction_scratch(&mut self, tpr: u32) -> &'static str {
        if tpr > 32 {
            self.block_reductions = true;
            "red"
        } else {
            "nullptr"
        }
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
                if let Some(element) = self.chunk_load(*id, &m, &k, n.value) {
                    self.bind(node, &m, &k, element.clone());
                    return Ok(element);
                }
                let f = if self.coherent.contains(id) { "load_cg" } else { "load" };
                let access = self.access(*id, &mi, &ki, false);
                Code::of(format!("cg::{f}({access})"), [&access])
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
                let iv = self.eval(*index, &m, "0")?;
                let w = self.dim_int(width);
                let t = self.index("kt", Code::of(format!("cg::take_index({iv}, {w})"), [&iv]));
                let v = self.eval(*arg, &m, &t)?;
                Code::of(format!("({t} >= 0 ? {v} : 0.0f)"), [&t, &v])
            }
            Op::Scatter { arg, index, width } => {
                let iv = self.eval(*index, &m, "0")?;
                let w = self.dim_int(width);
                let t = self.index("kt", Code::of(format!("cg::take_index({iv}, {w})"), [&iv]));
                let a = self.eval(*arg, &m, "0")?;
                Code::of(format!("({k} == {t} ? {a} : 0.0f)"), [&ki, &t, &a])
            }
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

    fn rope_args(&mut self, spec: &RopeSpec) -> String {
        let start = self.dim_int(&spec.start);
        let end = self.dim_int(&spec.end);
        let inter = spec.style == RopeStyle::Interleaved;
        format!("{start}, {end}, {}, {inter}", spec.head_dim)
    }

    fn rope_table(&mut self, spec: &RopeSpec, table: RopeTable, k: &Code) -> Code {
        let args = self.rope_args(spec);
        let text = match table {
            RopeTable::Freq => format!("cg::rope_freq({k}, {args}, {})", freq_exponent(spec)),
            RopeTable::Sign => format!("cg::rope_sign({k}, {args})"),
        };
        Code::of(text, [k])
    }

    fn finish_row(&mut self, kind: PartialKind, bufs: &[usize], m: &Code) -> Result<Code, CodegenError> {
        let tpr = self.coop;
        let red = self.reduction_scratch(tpr);
        let first = *bufs.first().ok_or_else(|| self.internal("partial without a buffer"))?;
        let b = self.buf(first);
        let quad = self.quad_rows && tpr == 1;
        let reads = [m.clone(), scratch_code(red)];
        let text = match kind {
            PartialKind::RowSum | PartialKind::RowSumSq | PartialKind::RowPick | PartialKind::ColSum if quad => {
                format!("cg::finish_sum_quad({b}, {b}_ld, {m}, {b}_cols)")
            }
            PartialKind::RowSum | PartialKind::RowSumSq | PartialKind::RowPick | PartialKind::ColSum => {
                format!("cg::finish_sum<{tpr}>({b}, {b}_ld, {m}, {b}_cols, {red})")
            }
            PartialKind::RowMax if quad => format!("cg::finish_max_quad({b}, {b}_ld, {m}, {b}_cols)"),
            PartialKind::RowMax => format!("cg::finish_max<{tpr}>({b}, {b}_ld, {m}, {b}_cols, {red})"),
            PartialKind::RowLse => {
                let second = *bufs.get(1).ok_or_else(|| self.internal("lse partial without its sums"))?;
                let s = self.buf(second);
                format!("cg::finish_lse<{tpr}>({b}, {s}, {b}_ld, {m}, {b}_cols, {red})")
            }
        };
        Ok(Code::of(text, &reads))
    }

    fn unary(&mut self, op: UnaryOp, a: NodeId, m: &str, k: &str) -> Result<Code, CodegenError> {
        if matches!(op, UnaryOp::Sin | UnaryOp::Cos) {
            if let Some((x, spec)) = self.rope_angle(a) {
                let xv = self.eval(x, m, k)?;
                // Partners share their frequency: `cos(x · freq[kp])` is `cos(x · freq[k])`.
                let k = match self.rope_partners.get(k) {
                    Some((col, partner_spec)) if *partner_spec == spec => col.clone(),
                    _ => k.to_string(),
                };
                let k = k.as_str();
                let args = self.rope_args(&spec);
                let lookup = Code::of(self.rope_freq_lookup(&spec, k, &args), [&Code::index(k)]);
                // One local per column for the sine and the cosine (and
                // hoisted out of the row loop of a GEMM epilogue).
                let key = (a, "rope_freq".to_string(), k.to_string());
                let freq = match self.lookup(&key) {
                    Some(local) => local,
                    None => {
                        let local = self.locals.fresh("freq");
                        let value = self.kernel.nodes[a].value;
                        self.define("float2", &local, lookup, Some(value));
                        if let Some(scope) = self.scopes.last_mut() {
                            scope.insert(key, Code::local(&local));
                        }
                        Code::local(local)
                    }
                };
                let f = if op == UnaryOp::Sin { "sin_angle" } else { "cos_angle" };
                return Ok(Code::of(format!("cg::{f}({xv}, {freq})"), [&xv, &freq]));
            }
        }
        let a = self.eval(a, m, k)?;
        Ok(Code::of(unary_reg(op, &a), [&a]))
    }

    /// `(x, spec)` when `node` is `x * freq` with `freq` a rotary frequency
    /// table (possibly broadcast): the angle is then formed in double.
    fn rope_angle(&self, node: NodeId) -> Option<(NodeId, RopeSpec)> {
        let Op::Binary(BinaryOp::Mul, a, b) = &self.kernel.nodes.get(node)?.op else { return None };
        let freq_of = |mut id: NodeId| loop {
            match &self.kernel.nodes.get(id)?.op {
                Op::Broadcast(x) => id = *x,
                Op::Rope(spec, RopeTable::Freq) => return Some(spec.clone()),
                _ => return None,
            }
        };
        match (freq_of(*b), freq_of(*a)) {
            (Some(spec), _) if self.kernel.nodes.get(*a)?.reg.is_none() => Some((*a, spec)),
            (_, Some(spec)) if self.kernel.nodes.get(*b)?.reg.is_none() => Some((*b, spec)),
            _ => None,
        }
    }

    pub(crate) fn cast(&self, to: DType, a: &str, value: Value) -> Result<String, CodegenError> {
        Ok(match to {
            DType::BF16 => format!("cg::to_bf16({a})"),
            DType::F16 => format!("cg::to_f16({a})"),
            DType::F32 => a.to_string(),
            DType::I32 => format!("cg::to_i32({a})"),
            DType::Bool => format!("cg::to_bool({a})"),
            DType::E4M3 | DType::E5M2 => {
                return Err(CodegenError::Unsupported {
                    block: self.block.name.clone(),
                    location: self.loc(value),
                    what: format!("a cast to {to}"),
                    reason: "fp8 types are reserved".into(),
                })
            }
        })
    }

    /// The part of a concatenation that holds every column of the current
    /// loop piece ([`Self::k_range`]), when it is evaluated at `k` itself
    /// and its offsets are constants.
    fn part_covering_k(&self, parts: &[(NodeId, Dim)], k: &str) -> Option<usize> {
        let (lo, hi) = self.k_range.filter(|_| k == "k")?;
        let starts: Vec<i64> = parts.iter().map(|(_, off)| off.as_const()).collect::<Option<_>>()?;
        (0..parts.len()).find(|&i| starts[i] <= lo && starts.get(i + 1).is_none_or(|&next| hi <= next))
    }

    fn concat(&mut self, parts: &[(NodeId, Dim)], m: &str, k: &str) -> Result<Code, CodegenError> {
        let ki = Code::index(k);
        if let Some(part) = self.part_covering_k(parts, k) {
            let (node, offset) = &parts[part];
            let off = self.dim_int(offset);
            let idx = if off == "0" || self.is_constant(*node) {
                ki
            } else {
                let idx = self.index("kq", Code::of(format!("{k} - {off}"), [&ki]));
                if let Some(offset) = offset.as_const() {
                    self.chunk_shift(&idx, k, -offset);
                }
                idx
            };
            return self.eval(*node, m, &idx);
        }
        let mut values = Vec::new();
        for (part, offset) in parts {
            let off = self.dim_int(offset);
            // A constant part (the zero padding of a gradient) needs no index.
            let idx = if off == "0" || self.is_constant(*part) {
                ki.clone()
            } else {
                self.index("kq", Code::of(format!("{k} - {off}"), [&ki]))
            };
            values.push((self.eval(*part, m, &idx)?, off));
        }
        let mut expr = values.last().map(|(v, _)| v.clone()).unwrap_or_else(|| Code::lit("0.0f"));
        for i in (0..values.len().saturating_sub(1)).rev() {
            let next_off = &values[i + 1].1;
            let text = format!("({k} < {next_off} ? {} : {expr})", values[i].0);
            expr = Code::of(text, [&ki, &values[i].0, &expr]);
        }
        Ok(expr)
    }

    /// Whether `node` is a constant, possibly broadcast: its value does not
    /// depend on the row or column it is evaluated at.
    fn is_constant(&self, mut node: NodeId) -> bool {
        while let Some(Op::Broadcast(a)) = self.kernel.nodes.get(node).map(|n| &n.op) {
            node = *a;
        }
        matches!(self.kernel.nodes.get(node).map(|n| &n.op), Some(Op::Const(_)))
    }

    /// A whole-row (`row == true`, over columns `k`) or whole-column
    /// reduction at the current row `m` / column `k`.
    fn reduce(
        &mut self,
        node: NodeId,
        op: ReduceOp,
        arg: NodeId,
        extent: &Dim,
        at: &str,
        row: bool,
    ) -> Result<Code, CodegenError> {
        let value = self.kernel.nodes[node].value;
        let tpr = self.coop;
        let red = self.reduction_scratch(tpr);
        let name = self.local_for(value);
        // A whole-row reduction of a CTA-per-row kernel runs in chunks; it
        // streams few tensors: chunked as if one.
        let chunk_width = extent.as_const().and_then(|w| chunk::chunk_width(0, w, tpr, 1));
        let chunk_width = chunk_width.filter(|_| row && tpr == crate::kir::CTA_THREADS && self.chunk.is_none());
        let extent = self.dim_int(extent);
        let start = match op {
            ReduceOp::LogSumExp => format!("float {name}_m = coda::neg_inf(), {name}_s = 0.0f, {name}_bad = 0.0f;"),
            ReduceOp::Sum => format!("float {name}_acc = 0.0f;"),
            ReduceOp::Max => format!("float {name}_acc = coda::neg_inf();"),
        };
        self.stmt(Code::lit(start), value);
        let i = self.locals.fresh(if row { "kk" } else { "mm" });
        // A reduction inside a chunked loop's elements runs plain.
        let outer_chunk = self.chunk.take();
        if let Some(width) = chunk_width {
            self.open_chunks(&i, ("", &extent), (tpr, width), &[]);
        } else {
            let header = format!("for (int {i} = cg::lane<{tpr}>(); {i} < {extent}; {i} += {tpr})");
            match row {
                true => self.open_column_loop(header),
                false => self.open(header),
            }
        }
        let saved = std::mem::replace(&mut self.coop, 1);
        let x = if row { self.eval(arg, at, &i)? } else { self.eval(arg, &i, at)? };
        self.coop = saved;
        let (acc, m, s, bad) = (format!("{name}_acc"), format!("{name}_m"), format!("{name}_s"), format!("{name}_bad"));
        let step = match op {
            ReduceOp::Sum => Code::of(format!("{acc} += {x};"), [&x]).reading(&[&acc]),
            ReduceOp::Max => Code::of(format!("{acc} = cg::maximum({acc}, {x});"), [&x]).reading(&[&acc]),
            ReduceOp::LogSumExp => {
                Code::of(format!("cg::lse_push({m}, {s}, {bad}, {x});"), [&x]).reading(&[&m, &s, &bad])
            }
        };
        self.line_of(step);
        if chunk_width.is_some() {
            self.close_chunk_elements();
        }
        self.close();
        self.chunk = outer_chunk;
        let red_code = scratch_code(red);
        let finish = match op {
            ReduceOp::Sum => Code::of(format!("cg::block_sum<{tpr}>({acc}, {red})"), [&red_code]).reading(&[&acc]),
            ReduceOp::Max => Code::of(format!("cg::block_max<{tpr}>({acc}, {red})"), [&red_code]).reading(&[&acc]),
            ReduceOp::LogSumExp => {
                let text = format!("{bad} = cg::block_sum<{tpr}>({bad} != 0.0f ? 1.0f : 0.0f, {red});");
                self.line_of(Code::of(text, [&red_code]).reading(&[&bad]));
                let text = format!("cg::block_lse<{tpr}>({m}, {s}, {red});");
                self.line_of(Code::of(text, [&red_code]).reading(&[&m, &s]));
                Code::lit(format!("cg::lse_finish({m}, {s}, {bad})")).reading(&[&m, &s, &bad])
            }
        };
        self.define("float", &name, finish, Some(value));
        let (m, k) = if row { (at.to_string(), "0".to_string()) } else { ("0".to_string(), at.to_string()) };
        self.bind(node, &m, &k, Code::local(&name));
        Ok(Code::local(name))
    }
}

/// The shared array of a block-wide reduction
/// ([`Emitter::reduction_scratch`]) as code: `red`, or a null pointer.
fn scratch_code(red: &str) -> Code {
    match red {
        "red" => Code::local(red),
        _ => Code::lit(red),
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

/// `-2 log2(base) / head_dim`: a rotary frequency is `2^(pair * this)`.
impl Emitter<'_> {
    /// The name of a file-scope table of the `head_dim / 2` rotary
    /// frequencies `base^(-2 i / head_dim)`, computed here in double exactly
    /// as the interpreter does and stored as float pairs `{hi, lo}` with
    /// `hi + lo` the double to about 2^-48 (what `cg::reduced_angle` needs),
    /// so the epilogue looks a frequency up instead of evaluating an `exp2`
    /// or converting doubles per element.
    /// The expression of the `{hi, lo}` frequency pair of column `k`: a
    /// look-up in a table of the head's `head_dim / 2` frequencies emitted
    /// beside the kernel, or, for a head too wide for a table of at most
    /// [`MAX_ROPE_TABLE_PAIRS`] (the emitted code would grow with the
    /// head's width), the frequency computed in double.
    fn rope_freq_lookup(&mut self, spec: &RopeSpec, k: &str, args: &str) -> String {
        if spec.head_dim / 2 > MAX_ROPE_TABLE_PAIRS {
            let decl = "// base ^ (-2 i / hd) of column n computed in double (a table of hd / 2 pairs would be too large)\n\
                __device__ __forceinline__ float2 coda_rope_freq2(int n, int start, int end, int hd, bool interleaved, double c) {\n    \
                const double f = cg::rope_freq_d(n, start, end, hd, interleaved, c);\n    \
                const float hi = (float)f;\n    \
                return make_float2(hi, (float)(f - (double)hi));\n}\n";
            self.globals.entry("coda_rope_freq2".to_string()).or_insert_with(|| decl.to_string());
            return format!("coda_rope_freq2({k}, {args}, {})", freq_exponent(spec));
        }
        let name = format!("coda_rope_freq2_{}_{}", spec.head_dim, spec.base.to_bits());
        if !self.globals.contains_key(&name) {
            let values: Vec<String> = (0..spec.head_dim / 2)
                .map(|i| float_pair_lit(spec.base.powf(-((2 * i) as f64) / spec.head_dim as f64)))
                .collect();
            let decl = format!(
                "// base {} ^ (-2 i / {}), i < {}, as {{hi, lo}} float pairs\n__device__ const float2 {name}[{}] = {{{}}};\n",
                double_lit(spec.base),
                spec.head_dim,
                spec.head_dim / 2,
                spec.head_dim / 2,
                values.join(", ")
            );
            self.globals.insert(name.clone(), decl);
        }
        format!("cg::rope_freq_tab({k}, {args}, {name})")
    }
}

/// The most frequency pairs a rotary table emitted beside a kernel holds
/// (32 KiB of constants, about 140 KB of source; heads are 64 to 256 wide
/// in practice). Wider heads compute their frequencies instead.
const MAX_ROPE_TABLE_PAIRS: i64 = 4096;

/// `{hi, lo}`: the float nearest `x` and the float nearest the rest, as C
/// literals with 9 significant digits (enough to read back the same float).
fn float_pair_lit(x: f64) -> String {
    let hi = x as f32;
    let lo = (x - f64::from(hi)) as f32;
    format!("{{{:.8e}f, {:.8e}f}}", hi, lo)
}

fn freq_exponent(spec: &RopeSpec) -> String {
    double_lit(-2.0 * spec.base.log2() / spec.head_dim as f64)
}
