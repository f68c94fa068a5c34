//! The kernel IR: what one generated kernel computes, below the block IR and
//! above CUDA text. This is codac's epilogue IR, shared by all three kinds
//! of generated kernels.
//!
//! A [`BlockIr`] is a list of [`Kernel`]s in launch order plus a table of
//! global-memory [`Buffer`]s (block inputs and outputs, scratch
//! intermediates, per-tile partial buffers, padded staging copies). Each
//! kernel holds a small SSA DAG of [`Node`]s evaluated in fp32:
//!
//! * leaves: the accumulator ([`Op::Acc`], GEMM kernels only), loads of a
//!   buffer as a scalar, per-row vector, per-column vector or tile (the
//!   GEMM "C operand" is a tile load), constants, run-time dims, rotary
//!   tables, and partial buffers of an earlier kernel finished on read
//!   ([`Op::FinishRow`] / [`Op::FinishCol`]: sum, max, log-sum-exp merge,
//!   target pick, over the tiles in fixed order);
//! * fp32 elementwise ops, selects and casts (a cast to a 16-bit type rounds
//!   and widens again);
//! * index transforms: broadcast, transpose, column slices (of the whole
//!   tensor or of every head), concatenation, interleave, rotary partner; in a GEMM epilogue the ones that stay
//!   inside a thread's adjacent column pair `(2j, 2j+1)` are *pair ops*
//!   (`even`/`odd` halves give half-width values, `interleave` joins them);
//! * a row's top k ([`Op::TopK`], row kernels, once per row);
//! * per-head reductions ([`Op::GroupReduce`]: in row kernels one thread's
//!   loop over a group of columns; in a GEMM epilogue, over heads that one
//!   warp holds whole, each thread's columns then its quad's) and their
//!   expansion back over the group's columns ([`Op::GroupExpand`], an
//!   index transform);
//! * whole-row reductions ([`Op::RowReduce`], row kernels) and whole-column
//!   reductions ([`Op::ColReduce`], column-reduction kernels), computed
//!   cooperatively in a fixed order;
//! * grid reductions ([`Op::GridReduce`], row kernels): a sum or maximum
//!   over all rows of a per-row value of the kernel, through one partial
//!   per CTA ([`GridSpec`]); the *tail* (the grid reductions and the scalar
//!   nodes that depend on them) is evaluated once, by the CTA that takes
//!   the last ticket of the kernel's counter.
//!
//! Every node lives in a [`Space`]: one value per kernel ([`Space::Scalar`]),
//! per row, per column or per element. In a GEMM epilogue, nodes that depend
//! on the accumulator are *register* nodes: they carry a [`ColMap`] saying
//! which accumulator columns hold them. Outputs of a kernel are [`Store`]s
//! (each with its buffer's dtype, optionally accumulating) and, for GEMM
//! kernels, [`PartialOut`]s: row reductions (sum, sum of squares, max,
//! online log-sum-exp, target pick) to `[rows][column tiles]` buffers and
//! column sums to `[cols][row tiles]` buffers, finished by later kernels.

pub(crate) mod build;
mod names;
pub(crate) mod prelude;
mod uses;

use crate::config::TileConfig;
use crate::symexpr::SymExpr;
use coda_ir::{
    BinaryOp, BlockKind, ColGroups, DType, Dim, HeadPart, PairPerm, ReduceOp, RopeSpec, RopeTable, UnaryOp, Value,
};

/// Threads per CTA of row kernels, unless [`row_cta_threads`] balances a
/// CTA-per-row kernel's columns with another count.
pub const CTA_THREADS: u32 = 256;

/// Threads per CTA of a CTA-per-row kernel whose widest row of constant
/// width has `widest` columns: [`CTA_THREADS`], unless its 8-column chunks
/// need more than one round of them and the last round keeps at most a
/// quarter of the threads busy; then the multiple of 32 between 128 and
/// 512 that covers them in the fewest equal rounds. With 256 threads, a
/// 2304-column row (Gemma-2) takes a second round in which 32 threads work
/// and 224 wait, in every one of the kernel's whole-row passes; 288
/// threads cover it in one. Measured on the H200 at M = 8192 (`codac bench
/// examples/gemma2_layer.coda --grad`), 288 threads against 256: the
/// forward's row kernels 0.081 and 0.086 ms against 0.088 and 0.093, the
/// backward's 0.188, 0.137 and 0.230 against 0.227, 0.162 and 0.218 (the
/// last, of four whole-row passes, loses occupancy to its registers). A
/// last round half full gains nothing: Llama-3 1B's 3072-column row kernel
/// took 0.099 ms on 384 threads against 0.093 on 256.
pub fn row_cta_threads(widest: Option<i64>) -> u32 {
    let cta = i64::from(CTA_THREADS);
    let Some(chunks) = widest.filter(|w| *w > 0 && w % 8 == 0).map(|w| w / 8) else { return CTA_THREADS };
    if chunks <= cta || (chunks % cta) * 4 > cta || chunks % cta == 0 {
        return CTA_THREADS;
    }
    (128..=512).rev().step_by(32).find(|t| chunks % t == 0).map_or(CTA_THREADS, |t| t as u32)
}

/// Whether `threads_per_row` threads of a row kernel are its whole CTA
/// (not a warp or a thread).
pub(crate) fn whole_cta(threads_per_row: u32) -> bool {
    threads_per_row > 32
}

/// Threads per CTA of a row kernel with `threads_per_row` threads per row:
/// those of the row for a CTA per row, else [`CTA_THREADS`].
pub(crate) fn row_kernel_threads(threads_per_row: u32) -> u32 {
    match whole_cta(threads_per_row) {
        true => threads_per_row,
        false => CTA_THREADS,
    }
}

/// Index of a node in [`Kernel::nodes`].
pub type NodeId = usize;

/// Index of a buffer in [`BlockIr::buffers`].
pub type BufId = usize;

/// Where a node has one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// One value.
    Scalar,
    /// One value per row.
    Row,
    /// One value per column.
    Col,
    /// One value per element.
    Tile,
}

/// Which accumulator columns hold a register node of a GEMM epilogue.
///
/// Stride 1: the node's column `c` is accumulator column `offset + c`, one
/// value per fragment element. Stride 2: the node's column `c` lives in the
/// accumulator pair starting at `offset + 2c` (`offset` even), one value per
/// fragment pair; `even(x)` and `odd(x)` of the same stride-1 value share a
/// map, which is what makes a pair op thread-local. Stride `w` above 2 (a
/// head width, a multiple of 8): the node's column `c` is one value per row
/// for the head of accumulator columns `offset + w·c ..`, held by every
/// thread that holds columns of that head (a per-head statistic, computed
/// before the pair loop, `emit/gemm/heads.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColMap {
    /// First accumulator column (even for stride 2, a multiple of the
    /// stride above 2).
    pub offset: i64,
    /// 1, 2, or a head width.
    pub stride: i64,
    /// Number of columns of the node.
    pub len: Dim,
}

impl ColMap {
    /// Whether the node holds one value per head ([`ColMap::stride`] above 2).
    pub fn per_head(&self) -> bool {
        self.stride > 2
    }
}

/// What a partial buffer holds, and how a reader finishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartialKind {
    /// Row sums per column tile; finished by summing.
    RowSum,
    /// Row sums of squares per column tile; finished by summing.
    RowSumSq,
    /// Row maxima per column tile; finished by taking the maximum.
    RowMax,
    /// `(max, sum of exp(x - max))` per column tile in two buffers;
    /// finished by merging in order to a log-sum-exp.
    RowLse,
    /// The element at the row's target column if the tile holds it, else
    /// 0; finished by summing.
    RowPick,
    /// Column sums per row tile; finished by summing.
    ColSum,
}

impl PartialKind {
    /// A short name for buffers and comments.
    pub fn name(self) -> &'static str {
        match self {
            PartialKind::RowSum => "row_sum",
            PartialKind::RowSumSq => "row_sumsq",
            PartialKind::RowMax => "row_max",
            PartialKind::RowLse => "row_lse",
            PartialKind::RowPick => "row_pick",
            PartialKind::ColSum => "col_sum",
        }
    }
}

/// The operation of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The GEMM accumulator.
    Acc,
    /// A buffer read at the node's indices (0 outside the buffer).
    Load(BufId),
    /// A literal.
    Const(f64),
    /// The run-time value of a dimension.
    Dim(Dim),
    /// A rotary frequency or sign table, per column.
    Rope(RopeSpec, RopeTable),
    /// Per-row partials of an earlier kernel, finished over all tiles.
    FinishRow(PartialKind, Vec<BufId>),
    /// Per-column partials of an earlier kernel, summed over all tiles.
    FinishCol(BufId),
    /// `op(a)`.
    Unary(UnaryOp, NodeId),
    /// `op(a, b)`.
    Binary(BinaryOp, NodeId, NodeId),
    /// `c ? a : b`.
    Select(NodeId, NodeId, NodeId),
    /// Conversion through `DType`.
    Cast(DType, NodeId),
    /// Widening of length-1 axes.
    Broadcast(NodeId),
    /// Axes swapped.
    Transpose(NodeId),
    /// Columns `start + c * step`.
    Slice {
        /// Operand.
        arg: NodeId,
        /// First column.
        start: Dim,
        /// Step (1 or 2).
        step: i64,
    },
    /// Parts side by side; each part with its first column.
    Concat(Vec<(NodeId, Dim)>),
    /// `out[2j] = even[j]`, `out[2j+1] = odd[j]`.
    Interleave(NodeId, NodeId),
    /// The rotary partner column.
    RopePartner(RopeSpec, NodeId),
    /// Column `c` is the operand's column `perm.position(c)` (a pair-layout
    /// value put back in column order, outside a GEMM store).
    Unpermute(PairPerm, NodeId),
    /// Column `p` is the operand's column `perm.source(p)` (a per-column
    /// vector in the order of a pair-layout accumulator).
    Permute(PairPerm, NodeId),
    /// `arg[m, index[m]]`, 0 when the index is outside the columns.
    Take {
        /// The table.
        arg: NodeId,
        /// Column per row.
        index: NodeId,
        /// Columns of `arg`.
        width: Dim,
    },
    /// `arg[m]` at column `index[m]`, 0 elsewhere (and in every column when
    /// the index is outside `0..width`): the one-hot scatter that is the
    /// gradient of [`Op::Take`], e.g. cross-entropy's `−onehot(target)`.
    Scatter {
        /// One value per row.
        arg: NodeId,
        /// Column per row.
        index: NodeId,
        /// Columns of the result.
        width: Dim,
    },
    /// Element `k` of row `m`'s top `count` (decreasing, NaN first, ties to
    /// the lower column), or its column (row kernels, staged once per row).
    TopK {
        /// Operand.
        arg: NodeId,
        /// How many.
        count: i64,
        /// The columns instead of the values.
        indices: bool,
        /// Columns of the operand.
        width: Dim,
    },
    /// `table[index[m], k]`, 0 when the index is outside the table's rows
    /// (an embedding lookup).
    GatherRows {
        /// The table.
        table: NodeId,
        /// Table row per row.
        index: NodeId,
        /// Rows of `table`.
        rows: Dim,
    },
    /// A reduction over the columns of group `k` of the operand (per-head
    /// statistics): one thread's loop over the group (row kernels), or a
    /// per-head register node of a GEMM epilogue ([`ColMap::per_head`]).
    GroupReduce {
        /// The reduction.
        op: ReduceOp,
        /// How the operand's columns form groups.
        groups: ColGroups,
        /// Operand (tile space).
        arg: NodeId,
        /// Columns of the operand.
        cols: Dim,
    },
    /// The operand at the group of column `k` (a per-head value over its
    /// head, or a per-feature value over every head).
    GroupExpand(ColGroups, NodeId),
    /// The operand at column `part.source(k)`: one part of every head.
    SliceHeads(HeadPart, NodeId),
    /// The operand at column `part.position(k)`, 0 outside the parts.
    PadHeads(HeadPart, NodeId),
    /// A reduction over all columns of the current row (row kernels).
    RowReduce {
        /// The reduction.
        op: ReduceOp,
        /// Operand (tile or column space).
        arg: NodeId,
        /// Columns reduced.
        width: Dim,
    },
    /// A sum or maximum over all rows of a per-row node of a row kernel
    /// with a [`GridSpec`]: each CTA reduces its rows in row order into its
    /// partial, the last CTA reduces the partials in a fixed order.
    GridReduce {
        /// The reduction (sum or max).
        op: ReduceOp,
        /// Operand (row space).
        arg: NodeId,
        /// Rows reduced (the kernel's rows).
        height: Dim,
    },
    /// A reduction over all rows of the current column (column kernels).
    ColReduce {
        /// The reduction.
        op: ReduceOp,
        /// Operand (tile or row space).
        arg: NodeId,
        /// Rows reduced.
        height: Dim,
    },
}

impl Op {
    /// The operand nodes.
    pub fn operands(&self) -> Vec<NodeId> {
        match self {
            Op::Acc | Op::Load(_) | Op::Const(_) | Op::Dim(_) | Op::Rope(..) => vec![],
            Op::FinishRow(..) | Op::FinishCol(_) => vec![],
            Op::Unary(_, a) | Op::Cast(_, a) | Op::Broadcast(a) | Op::Transpose(a) => vec![*a],
            Op::Slice { arg, .. } | Op::RopePartner(_, arg) | Op::Unpermute(_, arg) | Op::Permute(_, arg) => {
                vec![*arg]
            }
            Op::RowReduce { arg, .. } | Op::ColReduce { arg, .. } | Op::GridReduce { arg, .. } => vec![*arg],
            Op::GroupReduce { arg, .. } | Op::GroupExpand(_, arg) => vec![*arg],
            Op::SliceHeads(_, arg) | Op::PadHeads(_, arg) => vec![*arg],
            Op::GatherRows { table, index, .. } => vec![*table, *index],
            Op::TopK { arg, .. } => vec![*arg],
            Op::Binary(_, a, b) | Op::Interleave(a, b) => vec![*a, *b],
            Op::Take { arg, index, .. } | Op::Scatter { arg, index, .. } => vec![*arg, *index],
            Op::Select(c, a, b) => vec![*c, *a, *b],
            Op::Concat(parts) => parts.iter().map(|(p, _)| *p).collect(),
        }
    }
}

/// One node of a kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What it computes.
    pub op: Op,
    /// Where it has values.
    pub space: Space,
    /// For register nodes of a GEMM epilogue: the accumulator columns.
    pub reg: Option<ColMap>,
    /// The block-IR value it computes (names and source locations).
    pub value: Value,
}

/// A store of a node into a buffer (converted to the buffer's dtype).
#[derive(Debug, Clone, PartialEq)]
pub struct Store {
    /// The stored node.
    pub node: NodeId,
    /// The destination.
    pub buf: BufId,
    /// `+=`: read-modify-write.
    pub accumulate: bool,
    /// For a value computed in pair layout: column `c` of the node goes to
    /// column `perm.source(c)` of the buffer.
    pub col_perm: Option<PairPerm>,
    /// For one part of a concatenation that a GEMM epilogue stores a part
    /// at a time: column `c` of the node (`c` below the node's width) goes
    /// to column `offset + c` of the buffer.
    pub col_offset: Option<i64>,
}

/// A per-tile reduction a GEMM epilogue writes for later kernels.
#[derive(Debug, Clone, PartialEq)]
pub struct PartialOut {
    /// The reduced register node (for sums of squares: the value squared).
    pub node: NodeId,
    /// The reduction; for [`PartialKind::RowPick`] also `index`.
    pub kind: PartialKind,
    /// The target-column node (per row) of a pick.
    pub index: Option<NodeId>,
    /// Destination buffers (two for log-sum-exp: max, then sum of exp).
    pub bufs: Vec<BufId>,
    /// The IR value of the reduction (names and source locations).
    pub value: Value,
}

/// The 16-bit operand layouts of the GEMM template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `A[m][k]` at `a[m * lda + k]`.
    AMxK,
    /// `A[m][k]` at `a[k * lda + m]`.
    AKxM,
    /// `B[k][n]` at `b[k * ldb + n]`.
    BKxN,
    /// `B[k][n]` at `b[n * ldb + k]` (nn.Linear weight).
    BNxK,
}

impl Layout {
    /// The C++ tag type.
    pub fn tag(self) -> &'static str {
        match self {
            Layout::AMxK => "coda::A_MxK",
            Layout::AKxM => "coda::A_KxM",
            Layout::BKxN => "coda::B_KxN",
            Layout::BNxK => "coda::B_NxK",
        }
    }
}

/// A GEMM operand: a 16-bit buffer and how to read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Operand {
    /// The buffer (a block input, a staging copy or a scratch buffer).
    pub buf: BufId,
    /// Its layout.
    pub layout: Layout,
    /// For a weight read in pair layout (`B_NxK` only): the loader reads
    /// row `perm.source(n)` of the buffer for accumulator column `n`.
    pub row_perm: Option<PairPerm>,
    /// For two weights stacked (`B_NxK` only): the buffer of the second and
    /// its first row in the stack (the first's row count); rows from there
    /// on are read from it.
    pub stacked: Option<(BufId, i64)>,
}

impl Operand {
    /// The buffers it reads: its own, then a stacked second weight's.
    pub fn bufs(&self) -> impl Iterator<Item = BufId> {
        std::iter::once(self.buf).chain(self.stacked.map(|(buf, _)| buf))
    }
}

/// The parts of a GEMM's K loop over a concatenated inner dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct KParts {
    /// Every part's K, first to last.
    pub ks: Vec<Dim>,
    /// The operand pairs after the first ([`GemmSpec::a`], [`GemmSpec::b`]),
    /// which the K loop reads in turn.
    pub more: Vec<KPart>,
}

/// One further part of a GEMM's K loop: `a @ b` (over its entry of
/// [`GemmSpec::k_parts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KPart {
    /// Left operand (the first part's layout).
    pub a: Operand,
    /// Right operand (the first part's layout).
    pub b: Operand,
}

impl GemmSpec {
    /// Every operand pair of the K loop, in order: the first part's, then
    /// the further parts'.
    pub fn operand_pairs(&self) -> impl Iterator<Item = (&Operand, &Operand)> {
        std::iter::once((&self.a, &self.b)).chain(self.further_parts().iter().map(|p| (&p.a, &p.b)))
    }

    /// The operand pairs after the first (none for a plain product).
    pub fn further_parts(&self) -> &[KPart] {
        self.k_parts.as_ref().map_or(&[], |p| p.more.as_slice())
    }

    /// The K of each operand pair of [`Self::operand_pairs`]: all of `k`
    /// for a plain product.
    pub fn pair_ks(&self) -> impl Iterator<Item = &Dim> {
        let ks = self.k_parts.as_ref().map_or(std::slice::from_ref(&self.k), |p| p.ks.as_slice());
        ks.iter()
    }

    /// Every buffer the K loop reads.
    pub fn operand_bufs(&self) -> impl Iterator<Item = BufId> + '_ {
        self.operand_pairs().flat_map(|(a, b)| a.bufs().chain(b.bufs()))
    }
}

/// The GEMM of a GEMM kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmSpec {
    /// Rows of the accumulator.
    pub m: Dim,
    /// Columns of the accumulator.
    pub n: Dim,
    /// The contracted dimension (all parts of it).
    pub k: Dim,
    /// Left operand (of the first part).
    pub a: Operand,
    /// Right operand (of the first part).
    pub b: Operand,
    /// For a product over a concatenated inner dimension, its parts
    /// (`coda::GemmKParts`); none for a plain product.
    pub k_parts: Option<Box<KParts>>,
    /// Operand element type (bf16 or f16).
    pub elem: DType,
    /// Tile configuration.
    pub config: TileConfig,
    /// The matmul value.
    pub matmul: Value,
    /// A row kernel whose rows this GEMM computes on demand, if any.
    pub prelude: Option<RowPrelude>,
}

/// A row kernel fused into the GEMM that reads its outputs (Hopper
/// mainloop only, see [`prelude`]): rows are handed out one at a time to
/// whichever warp asks, one warp per row: the idle warps of the producer
/// warpgroup, which walk the CTA's tiles ahead of the mainloop, and the
/// consumer warps of a tile whose row block is not finished yet; the
/// mainloop loads a tile only once its whole row block is done. So the row
/// kernel's work runs inside the GEMM's launch, mostly while the tensor
/// cores work, and its outputs are complete when the GEMM ends (later
/// kernels may read them as before).
#[derive(Debug, Clone, PartialEq)]
pub struct RowPrelude {
    /// The row kernel (its kind is [`KernelKind::Row`] without grid
    /// reductions; its rows are the GEMM's `m`).
    pub kernel: Box<Kernel>,
    /// The `[2 rows + 1, 1]` i32 counter buffer ([`Role::Counter`]), zero
    /// between launches; the mainloop uses its first `1 + 2 × row tiles`
    /// elements: the count of consumer warps that finished (the last one
    /// zeroes the buffer for the next launch), then per row tile of the
    /// GEMM the count of finished rows, then per row tile the next row to
    /// hand out.
    pub ready: BufId,
}

/// The kinds of generated kernels.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelKind {
    /// A GEMM with an epilogue.
    Gemm(GemmSpec),
    /// One CTA per row (threads striding over columns; see
    /// [`row_cta_threads`]), or with `threads_per_row == 32`, one warp per
    /// row. With `threads_per_row ==
    /// 1`, a one-row kernel without whole-row reductions whose column
    /// stores have one width: one thread per column, the columns spread
    /// over CTAs (the finishes of gain gradients' column partials, which
    /// one CTA took 0.35 ms to do on the H100).
    Row {
        /// Number of rows.
        rows: Dim,
        /// Threads cooperating on one row: the CTA's, 32, or 1 (see above;
        /// the CTA's threads are [`row_kernel_threads`]).
        threads_per_row: u32,
        /// The grid reductions, when the kernel has any.
        grid: Option<GridSpec>,
    },
    /// One CTA per 32 columns (a column per lane), its warps striding over rows.
    Col {
        /// Number of columns.
        cols: Dim,
    },
}

/// The grid reductions of a row kernel.
///
/// CTA `b` covers rows `[b * R, min((b + 1) * R, rows))` with `R` =
/// [`GridSpec::rows_per_cta`]; it writes the reduction of its rows' values
/// (in row order) to row `b` of each partial buffer, then takes a ticket
/// from `counter`. The CTA with the last ticket reduces each partial buffer
/// over `b = 0..grid` (a fixed order, the same on every run), evaluates
/// the tail, stores the scalar outputs and resets `counter` to 0, so the
/// counter is 0 between launches (the host zeroes it once).
#[derive(Debug, Clone, PartialEq)]
pub struct GridSpec {
    /// Rows per CTA: 1 (a CTA per row) or 8 (a warp per row).
    pub rows_per_cta: u32,
    /// Each [`Op::GridReduce`] node with its `[CTAs, 1]` fp32 partial
    /// buffer, in node order.
    pub parts: Vec<(NodeId, BufId)>,
    /// The `[1, 1]` i32 ticket counter ([`Role::Counter`]).
    pub counter: BufId,
}

/// One generated kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    /// Name within the block, after what it makes (`gemm_x1`, see
    /// [`names`]).
    pub name: String,
    /// Kind and kind-specific data.
    pub kind: KernelKind,
    /// The node DAG, operands before users.
    pub nodes: Vec<Node>,
    /// Stores, in the order they are emitted.
    pub stores: Vec<Store>,
    /// Per-tile partial reductions (GEMM kernels).
    pub partials: Vec<PartialOut>,
    /// For kernels other than GEMMs: why their work found no GEMM epilogue.
    pub why: Vec<String>,
    /// For GEMM kernels: why their epilogue stores values that read no
    /// accumulator (`plan::join`).
    pub joined: Vec<String>,
    /// For GEMM kernels: why their tile configuration, where their
    /// epilogue's traffic decided it (`tiles`).
    pub tiles: Option<String>,
}

impl Kernel {
    /// Which nodes belong to the grid tail: the grid reductions and every
    /// node that depends on one (evaluated once, by the last CTA).
    pub fn tail_nodes(&self) -> Vec<bool> {
        let mut tail = vec![false; self.nodes.len()];
        for (id, node) in self.nodes.iter().enumerate() {
            let grid = matches!(node.op, Op::GridReduce { .. });
            tail[id] = grid || node.op.operands().iter().any(|o| tail.get(*o).copied().unwrap_or(false));
        }
        tail
    }
}

/// What a buffer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A block input, bound by the caller.
    Input,
    /// A block output, bound by the caller.
    Output,
    /// An intermediate written by one kernel and read by later ones.
    Scratch,
    /// Per-tile partial reductions (fp32).
    Partial,
    /// A stand-in for a block input or output (`staging_of`) that is the
    /// tensor itself when the tensor is aligned for a GEMM mainloop, and
    /// otherwise a padded copy: of an input for the mainloop (the runtime
    /// fills it before the kernels), or of an output that a later kernel
    /// reads (the runtime empties it into the output after the kernels).
    Staging,
    /// A ticket counter of a grid reduction: the host zeroes it once when
    /// it allocates it; the kernel leaves it 0 after every launch.
    Counter,
}

impl Role {
    /// The manifest name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Output => "output",
            Role::Scratch => "scratch",
            Role::Partial => "partial",
            Role::Staging => "staging",
            Role::Counter => "counter",
        }
    }
}

/// A global-memory buffer of the block.
#[derive(Debug, Clone, PartialEq)]
pub struct Buffer {
    /// Unique name (block inputs and outputs keep theirs).
    pub name: String,
    /// What it is for.
    pub role: Role,
    /// Element type.
    pub dtype: DType,
    /// Canonical rows.
    pub rows: SymExpr,
    /// Canonical columns.
    pub cols: SymExpr,
    /// Declared rank of block inputs and outputs (2 otherwise).
    pub rank: u8,
    /// Leading dimension of buffers the host allocates; `None` for block
    /// inputs and outputs (taken from the binding).
    pub ld: Option<SymExpr>,
    /// `+=` outputs.
    pub accumulate: bool,
    /// For staging buffers: the input or output it stands for.
    pub staging_of: Option<BufId>,
}

impl Buffer {
    /// Whether the buffer is aligned by construction for vector accesses:
    /// its base 16-byte aligned and its row stride a multiple of 8
    /// elements (or a single row). A staging buffer is (the runtime binds
    /// the tensor it stands for only when it is so aligned, its padded copy
    /// otherwise), and so is a scratch buffer (allocated by the runtime,
    /// rows padded to 8 elements); block inputs and outputs are the
    /// caller's and may not be. The GEMM epilogues' vector accesses of such
    /// buffers check bounds only (`cg::load4_aligned`, docs/codegen.md).
    pub fn vector_aligned(&self) -> bool {
        match self.role {
            Role::Staging => true,
            Role::Scratch => {
                self.rows.as_const() == Some(1) || self.ld.as_ref() == Some(&self.cols.clone().round_up(8))
            }
            _ => false,
        }
    }
}

/// A compiled block: buffers and kernels in launch order.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockIr {
    /// The block's name.
    pub name: String,
    /// Block or explicit kernel.
    pub kind: BlockKind,
    /// Run-time dims, in declaration order.
    pub dims: Vec<String>,
    /// Every buffer.
    pub buffers: Vec<Buffer>,
    /// Kernels in launch order.
    pub kernels: Vec<Kernel>,
}

#[cfg(test)]
mod tests {
    use super::{row_cta_threads, CTA_THREADS};

    #[test]
    fn row_ctas_balance_only_a_nearly_empty_last_round() {
        // Gemma-2's 2304 columns: 288 chunks, one round of 288 threads.
        assert_eq!(row_cta_threads(Some(2304)), 288);
        // Phi-2's 2560: 320 chunks, 64 left for a second round of 256.
        assert_eq!(row_cta_threads(Some(2560)), 320);
        // Even rounds, one round, or a last round half full: 256.
        for width in [4096, 2048, 14336, 1536, 1000, 3072, 5120, 9216] {
            assert_eq!(row_cta_threads(Some(width)), CTA_THREADS, "{width} columns");
        }
        assert_eq!(row_cta_threads(None), CTA_THREADS);
    }
}
