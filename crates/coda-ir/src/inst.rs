//! The instruction set of the block IR.
//!
//! One instruction defines one value. Operands are [`Value`]s defined
//! earlier in the same block (arena order is a valid evaluation order).
//! Broadcasting is never implicit: binary operands have equal shapes, and
//! [`Inst::Broadcast`] widens a scalar or vector explicitly. Elementwise
//! arithmetic happens in fp32 (f64 in the interpreter); a value's dtype is
//! the storage type it would have if it were written to memory.
//!
//! Typing rules are written on each variant and implemented in
//! [`crate::infer`]; the verifier re-checks them.

use crate::arena::Handle;
use crate::dim::Dim;
use crate::ty::{DType, Shape};

/// A value: the handle of the instruction that defines it.
pub type Value = Handle<Inst>;

/// Elementwise functions of one argument. All map fp32 to fp32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `e^x`
    Exp,
    /// natural logarithm
    Log,
    /// square root
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// hyperbolic tangent
    Tanh,
    /// `1 / (1 + e^-x)`
    Sigmoid,
    /// `max(x, 0)`
    Relu,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`
    GeluTanh,
    /// `0.5 x (1 + erf(x / sqrt 2))`
    GeluErf,
    /// the standard normal distribution function `Φ(x) = 0.5 (1 + erf(x /
    /// sqrt 2))` (PyTorch's `torch.special.ndtr`)
    Ndtr,
    /// `x * sigmoid(x)`
    Silu,
    /// `log(1 + e^x)`
    Softplus,
    /// `|x|`
    Abs,
    /// sine (radians)
    Sin,
    /// cosine (radians)
    Cos,
    /// `x`, through which no gradient flows (PyTorch's `x.detach()`)
    Detach,
}

impl UnaryOp {
    /// Every unary op, for tables and tests.
    pub const ALL: [UnaryOp; 17] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::GeluTanh,
        UnaryOp::GeluErf,
        UnaryOp::Ndtr,
        UnaryOp::Silu,
        UnaryOp::Softplus,
        UnaryOp::Abs,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Detach,
    ];

    /// The name in the printed IR (and in source, except `neg`).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::GeluErf => "gelu",
            UnaryOp::Ndtr => "ndtr",
            UnaryOp::Silu => "silu",
            UnaryOp::Softplus => "softplus",
            UnaryOp::Abs => "abs",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Detach => "detach",
        }
    }
}

/// Elementwise functions of two arguments of equal shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// `min(a, b)` (NaN if either is NaN)
    Min,
    /// `max(a, b)` (NaN if either is NaN)
    Max,
    /// `a < b` (bool)
    Lt,
    /// `a <= b` (bool)
    Le,
    /// `a > b` (bool)
    Gt,
    /// `a >= b` (bool)
    Ge,
    /// `a == b` (bool)
    Eq,
    /// `a != b` (bool)
    Ne,
}

impl BinaryOp {
    /// The name in the printed IR.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Min => "min",
            BinaryOp::Max => "max",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
        }
    }

    /// Whether the result is a bool.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq | BinaryOp::Ne)
    }
}

/// Reduction operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Maximum (NaN if any element is NaN).
    Max,
    /// `log(sum(exp(x)))`, computed stably as `m + log(sum(exp(x - m)))`.
    LogSumExp,
}

impl ReduceOp {
    /// The name in the printed IR.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::LogSumExp => "logsumexp",
        }
    }
}

/// Which axis a reduction removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Axis {
    /// Reduce over rows: `[M, N] -> [1, N]` (a column reduction, e.g. a bias gradient).
    Rows,
    /// Reduce over columns: `[M, N] -> [M, 1]` (a row reduction, e.g. a norm statistic).
    Cols,
}

/// How RoPE pairs features within a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeStyle {
    /// Feature `i` pairs with `i + head_dim/2` (Llama / Hugging Face "rotate half").
    Half,
    /// Feature `2i` pairs with `2i + 1` (GPT-J / Meta original "interleaved").
    Interleaved,
}

/// A rotary embedding applied to the columns `start..end`, head by head:
/// the first `rotary_dim` features of each head turn, the rest pass
/// through (partial rotary: GPT-NeoX, Phi, Persimmon).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeSpec {
    /// Width of one head (a constant, even).
    pub head_dim: i64,
    /// Rotated features at the start of each head (a constant, even, at
    /// most `head_dim`); pairs and frequencies are those of a head of this
    /// width.
    pub rotary_dim: i64,
    /// Frequency base θ: pair `i` turns at `base^(-2i/head_dim)` radians per position.
    pub base: f64,
    /// First rotated column (a multiple of `head_dim` from 0).
    pub start: Dim,
    /// One past the last rotated column.
    pub end: Dim,
    /// Pairing convention.
    pub style: RopeStyle,
}

/// A per-column table derived from a [`RopeSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeTable {
    /// The pair's angular frequency for rotated columns, 0 elsewhere.
    Freq,
    /// `-1` for the first member of a pair, `+1` for the second, `0` outside the range.
    Sign,
}

/// A permutation that interleaves the two halves of every group of `group`
/// consecutive indices in `start..end` (identity elsewhere): position `p`
/// of the permuted order holds original index [`PairPerm::source`]`(p)`, so
/// the members `i` and `i + group/2` of a group become neighbours `2i`,
/// `2i + 1`. This is the pair layout of gated activations (one group: the
/// `[gate | up]` halves) and of rotate-half RoPE (one group per head).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PairPerm {
    /// First permuted index (a multiple of `group` from 0 is not required).
    pub start: i64,
    /// One past the last permuted index; `end - start` is a multiple of `group`.
    pub end: i64,
    /// Group width, even.
    pub group: i64,
}

impl PairPerm {
    /// The original index held at permuted position `p`.
    pub fn source(&self, p: i64) -> i64 {
        if p < self.start || p >= self.end {
            return p;
        }
        let local = p - self.start;
        let (base, j) = (local - local % self.group, local % self.group);
        self.start + base + (j % 2) * (self.group / 2) + j / 2
    }

    /// The permuted position of original index `c` (the inverse of [`PairPerm::source`]).
    pub fn position(&self, c: i64) -> i64 {
        if c < self.start || c >= self.end {
            return c;
        }
        let local = c - self.start;
        let (base, j) = (local - local % self.group, local % self.group);
        let half = self.group / 2;
        self.start + base + if j < half { 2 * j } else { 2 * (j - half) + 1 }
    }

    /// Whether the permutation is well formed.
    pub fn is_valid(&self) -> bool {
        self.group >= 2
            && self.group % 2 == 0
            && self.start >= 0
            && self.end >= self.start
            && (self.end - self.start) % self.group == 0
    }
}

impl std::fmt::Display for PairPerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pairs {}..{} group {}", self.start, self.end, self.group)
    }
}

/// How the columns of a tensor of heads side by side form groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColGroups {
    /// Column `n` is in group `n / width`: one group per head of `width`
    /// consecutive columns (per-head statistics, as QK-norm takes them).
    Heads(i64),
    /// Column `n` is in group `n % width`: one group per feature, holding
    /// that feature of every head (a gain shared by all heads).
    Lanes(i64),
}

impl ColGroups {
    /// The head width.
    pub fn width(self) -> i64 {
        match self {
            ColGroups::Heads(w) | ColGroups::Lanes(w) => w,
        }
    }

    /// The group of column `n`.
    pub fn group_of(self, n: i64) -> i64 {
        match self {
            ColGroups::Heads(w) => n / w,
            ColGroups::Lanes(w) => n % w,
        }
    }

    /// The number of groups of `cols` columns (a whole number of heads).
    pub fn count(self, cols: &Dim) -> Result<Dim, crate::dim::DimError> {
        let heads = cols.div_exact(&Dim::constant(self.width()))?;
        Ok(match self {
            ColGroups::Heads(_) => heads,
            ColGroups::Lanes(w) => Dim::constant(w),
        })
    }

    /// The name in the printed IR.
    pub fn name(self) -> &'static str {
        match self {
            ColGroups::Heads(_) => "heads",
            ColGroups::Lanes(_) => "lanes",
        }
    }
}

impl std::fmt::Display for ColGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {}", self.name(), self.width())
    }
}

/// Columns `start .. start + width` of each head of `head` columns: one
/// part of every head, as `x.view(M, H, head)[..., start:start + width]`
/// takes it (GPT-NeoX's per-head `[q | k | v]` projection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeadPart {
    /// Width of one head.
    pub head: i64,
    /// First column of the part within its head.
    pub start: i64,
    /// Columns of the part.
    pub width: i64,
}

impl HeadPart {
    /// The column of the whole tensor that column `c` of the parts holds.
    pub fn source(&self, c: i64) -> i64 {
        (c / self.width) * self.head + self.start + c % self.width
    }

    /// The column of the parts that column `n` of the whole tensor is, if
    /// it is in a part.
    pub fn position(&self, n: i64) -> Option<i64> {
        let j = n % self.head - self.start;
        (0..self.width).contains(&j).then_some((n / self.head) * self.width + j)
    }

    /// Whether the part lies inside a head.
    pub fn is_valid(&self) -> bool {
        self.head > 0 && self.start >= 0 && self.width > 0 && self.start + self.width <= self.head
    }
}

impl std::fmt::Display for HeadPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cols {}..{} of heads of {}", self.start, self.start + self.width, self.head)
    }
}

/// One instruction.
#[derive(Debug, Clone, PartialEq)]
pub enum Inst {
    /// The `index`-th block parameter. Type: as declared.
    Param(usize),
    /// A literal. Type: `f32[1, 1]`.
    Const(f64),
    /// The run-time value of a dimension. Type: `f32[1, 1]`.
    DimValue(Dim),
    /// `op(arg)`. Type: `f32` with `arg`'s shape.
    Unary {
        /// The function.
        op: UnaryOp,
        /// Operand (a float).
        arg: Value,
    },
    /// `op(lhs, rhs)`. Operands have equal shapes. Type: `f32`, or `bool` for comparisons.
    Binary {
        /// The function.
        op: BinaryOp,
        /// Left operand.
        lhs: Value,
        /// Right operand.
        rhs: Value,
    },
    /// `cond ? on_true : on_false`, elementwise; all three of equal shape. Type: `f32`.
    Select {
        /// A bool value.
        cond: Value,
        /// Taken where `cond` holds.
        on_true: Value,
        /// Taken elsewhere.
        on_false: Value,
    },
    /// Conversion to `to` (rounding to nearest even for narrower floats). Type: `to`, same shape.
    Cast {
        /// Target type.
        to: DType,
        /// Operand.
        arg: Value,
    },
    /// Widens axes of length 1 to `shape`. Type: `arg`'s dtype with `shape`.
    Broadcast {
        /// Operand whose every axis equals `shape`'s or is 1.
        arg: Value,
        /// The result shape.
        shape: Shape,
    },
    /// `op(lhs) @ op(rhs)` with operands rounded to `operand_dtype`, fp32 accumulation.
    /// With `lhs: [M, K]` and `rhs: [K, N]` after the optional transposes. Type: `f32[M, N]`.
    MatMul {
        /// The left operand, `[M, K]` (or `[K, M]` when transposed).
        lhs: Value,
        /// The right operand, `[K, N]` (or `[N, K]` when transposed, the nn.Linear layout).
        rhs: Value,
        /// Whether `lhs` is used transposed.
        lhs_transposed: bool,
        /// Whether `rhs` is used transposed.
        rhs_transposed: bool,
        /// The 16-bit type both operands are read in.
        operand_dtype: DType,
    },
    /// Swaps the axes. Type: same dtype, transposed shape.
    Transpose {
        /// Operand.
        arg: Value,
    },
    /// Reduces one axis to length 1. Type: `f32`, the reduced axis becomes 1.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// The axis removed.
        axis: Axis,
        /// Operand.
        arg: Value,
    },
    /// `out[:, g] = op(arg[:, n] for the columns n of group g)`: per-head
    /// statistics, or a per-feature reduction over heads. The columns of
    /// `arg` are a whole number of heads. Type: `f32[rows, groups]`.
    GroupReduce {
        /// The reduction.
        op: ReduceOp,
        /// How columns form groups.
        groups: ColGroups,
        /// Operand.
        arg: Value,
    },
    /// `out[:, n] = arg[:, group(n)]`: a per-head value over its head's
    /// columns, or a per-feature value over every head; the adjoint of a
    /// [`Inst::GroupReduce`] sum. Type: `arg`'s dtype, `[rows, cols]`.
    GroupExpand {
        /// How columns form groups.
        groups: ColGroups,
        /// Operand, one column per group.
        arg: Value,
        /// Width of the result, a whole number of heads.
        cols: Dim,
    },
    /// `out[:, c] = arg[:, part.source(c)]`: one part of every head, side
    /// by side. The columns of `arg` are a whole number of heads. Type:
    /// same dtype, `[rows, heads * part.width]`.
    SliceHeads {
        /// Operand.
        arg: Value,
        /// The part of each head.
        part: HeadPart,
    },
    /// `out[:, n] = arg[:, part.position(n)]`, 0 outside the parts: the
    /// adjoint of [`Inst::SliceHeads`]. Type: `f32[rows, cols]`.
    PadHeads {
        /// The parts side by side.
        arg: Value,
        /// The part of each head.
        part: HeadPart,
        /// Width of the result, a whole number of heads.
        cols: Dim,
    },
    /// Columns `start, start+step, …` (`len` of them). Type: same dtype, `[rows, len]`.
    SliceCols {
        /// Operand.
        arg: Value,
        /// First column.
        start: Dim,
        /// Number of columns taken.
        len: Dim,
        /// Distance between taken columns (1 for a range, 2 for even/odd halves of pairs).
        step: i64,
    },
    /// Columns of the parts side by side (all with equal rows). Type: `f32`.
    ConcatCols {
        /// The parts, left to right.
        parts: Vec<Value>,
    },
    /// `out[:, 2j] = even[:, j]`, `out[:, 2j+1] = odd[:, j]` (equal shapes). Type: `f32[rows, 2*cols]`.
    Interleave {
        /// Values for even columns.
        even: Value,
        /// Values for odd columns.
        odd: Value,
    },
    /// `out[m] = arg[m, index[m]]`, or 0 where `index[m]` is outside `0..N`.
    /// `arg: [M, N]`, `index: i32[M, 1]`. Type: `f32[M, 1]`.
    TakeCols {
        /// The table.
        arg: Value,
        /// One column index per row.
        index: Value,
    },
    /// `out[m, c] = arg[m]` where `c == index[m]`, 0 elsewhere (a row whose
    /// index is outside `0..cols` is all zeros): the adjoint of
    /// [`Inst::TakeCols`]. `arg: [M, 1]`, `index: i32[M, 1]`. Type: `f32[M, cols]`.
    ScatterCols {
        /// One value per row.
        arg: Value,
        /// One column index per row.
        index: Value,
        /// Width of the result.
        cols: Dim,
    },
    /// The `k` largest elements of each row in decreasing order (NaN above
    /// every number, ties to the lower column), or their columns: a
    /// router's expert choice. `arg: [M, N]`, `N` and `k <= N` constants.
    /// Type: `f32[M, k]`, or `i32[M, k]` for `indices`.
    TopK {
        /// Operand.
        arg: Value,
        /// How many.
        k: i64,
        /// The columns instead of the values.
        indices: bool,
    },
    /// `out[m, :] = table[index[m], :]`, 0 where `index[m]` is outside
    /// `0..V` (an embedding lookup). `table: [V, D]`, `index: i32[M, 1]`.
    /// Type: `table`'s dtype, `[M, D]`.
    GatherRows {
        /// The table.
        table: Value,
        /// One table row per output row.
        index: Value,
    },
    /// `out[v, :] = Σ arg[m, :]` over the rows `m` with `index[m] = v`, in
    /// increasing `m`: the adjoint of [`Inst::GatherRows`] (an embedding's
    /// gradient). `arg: [M, D]`, `index: i32[M, 1]`. Type: `f32[rows, D]`.
    ScatterAddRows {
        /// One row per index.
        arg: Value,
        /// The table row each row adds to.
        index: Value,
        /// Rows of the result (the table's).
        rows: Dim,
    },
    /// A per-column constant table of a rotary embedding over `cols` columns. Type: `f32[1, cols]`.
    RopeTable {
        /// The embedding.
        spec: RopeSpec,
        /// Which table.
        table: RopeTable,
        /// Width of the rotated tensor.
        cols: Dim,
    },
    /// `out[:, n] = arg[:, partner(n)]` where `partner` swaps the two members of
    /// each rotary pair (identity outside the range). Type: same as `arg`.
    RopePartner {
        /// The embedding.
        spec: RopeSpec,
        /// Operand, `[M, N]`.
        arg: Value,
    },
    /// `out[p, :] = arg[perm.source(p), :]`: the rows of a weight in pair
    /// layout (made by the reparameterizer, never by the front end). Type: as `arg`.
    PermuteRows {
        /// Operand (its row count a constant `>= perm.end`).
        arg: Value,
        /// The permutation.
        perm: PairPerm,
    },
    /// The rows of the parts one after another (equal columns and dtype):
    /// two weights that share a left operand read as one GEMM operand
    /// (made by the reparameterizer, never by the front end; the GEMM's
    /// loader reads each part where it is, so nothing is copied). Type:
    /// the parts' dtype, `[Σ rows, cols]`.
    StackRows {
        /// The parts, top to bottom.
        parts: Vec<Value>,
    },
    /// `out[:, p] = arg[:, perm.source(p)]`: a per-column vector (a bias, a
    /// gain) in the column order of a pair-layout accumulator it is combined
    /// with (made by the reparameterizer, never by the front end). Type: as
    /// `arg`.
    PermuteCols {
        /// Operand, `[1, N]` (`N` a constant `>= perm.end`).
        arg: Value,
        /// The permutation.
        perm: PairPerm,
    },
    /// `out[:, perm.source(p)] = arg[:, p]`: columns computed in pair layout
    /// put back in their original order. Type: as `arg`.
    UnpermuteCols {
        /// Operand (its column count a constant `>= perm.end`).
        arg: Value,
        /// The permutation.
        perm: PairPerm,
    },
}

impl Inst {
    /// A copy with every operand replaced by `f(operand)`; the one place,
    /// beside [`Inst::operands`], that knows where each variant keeps them.
    #[must_use]
    pub fn map_operands(&self, mut f: impl FnMut(Value) -> Value) -> Inst {
        let mut inst = self.clone();
        match &mut inst {
            Inst::Param(_) | Inst::Const(_) | Inst::DimValue(_) | Inst::RopeTable { .. } => {}
            Inst::Unary { arg, .. }
            | Inst::Cast { arg, .. }
            | Inst::Broadcast { arg, .. }
            | Inst::Transpose { arg }
            | Inst::Reduce { arg, .. }
            | Inst::GroupReduce { arg, .. }
            | Inst::GroupExpand { arg, .. }
            | Inst::SliceHeads { arg, .. }
            | Inst::PadHeads { arg, .. }
            | Inst::TopK { arg, .. }
            | Inst::SliceCols { arg, .. }
            | Inst::RopePartner { arg, .. }
            | Inst::PermuteRows { arg, .. }
            | Inst::PermuteCols { arg, .. }
            | Inst::UnpermuteCols { arg, .. } => *arg = f(*arg),
            Inst::Binary { lhs: a, rhs: b, .. }
            | Inst::MatMul { lhs: a, rhs: b, .. }
            | Inst::Interleave { even: a, odd: b }
            | Inst::TakeCols { arg: a, index: b }
            | Inst::ScatterCols { arg: a, index: b, .. }
            | Inst::GatherRows { table: a, index: b }
            | Inst::ScatterAddRows { arg: a, index: b, .. } => {
                *a = f(*a);
                *b = f(*b);
            }
            Inst::Select { cond, on_true, on_false } => {
                *cond = f(*cond);
                *on_true = f(*on_true);
                *on_false = f(*on_false);
            }
            Inst::ConcatCols { parts } | Inst::StackRows { parts } => parts.iter_mut().for_each(|p| *p = f(*p)),
        }
        inst
    }

    /// The operands, in order.
    pub fn operands(&self) -> Vec<Value> {
        match self {
            Inst::Param(_) | Inst::Const(_) | Inst::DimValue(_) | Inst::RopeTable { .. } => vec![],
            Inst::Unary { arg, .. }
            | Inst::Cast { arg, .. }
            | Inst::Broadcast { arg, .. }
            | Inst::Transpose { arg }
            | Inst::Reduce { arg, .. }
            | Inst::GroupReduce { arg, .. }
            | Inst::GroupExpand { arg, .. }
            | Inst::SliceHeads { arg, .. }
            | Inst::PadHeads { arg, .. }
            | Inst::TopK { arg, .. }
            | Inst::SliceCols { arg, .. }
            | Inst::RopePartner { arg, .. }
            | Inst::PermuteRows { arg, .. }
            | Inst::PermuteCols { arg, .. }
            | Inst::UnpermuteCols { arg, .. } => vec![*arg],
            Inst::Binary { lhs, rhs, .. } | Inst::MatMul { lhs, rhs, .. } => vec![*lhs, *rhs],
            Inst::Select { cond, on_true, on_false } => vec![*cond, *on_true, *on_false],
            Inst::ConcatCols { parts } | Inst::StackRows { parts } => parts.clone(),
            Inst::Interleave { even, odd } => vec![*even, *odd],
            Inst::TakeCols { arg, index } | Inst::ScatterCols { arg, index, .. } => vec![*arg, *index],
            Inst::GatherRows { table, index } => vec![*table, *index],
            Inst::ScatterAddRows { arg, index, .. } => vec![*arg, *index],
        }
    }
}
