//! LayerNorm deferral: the per-row shift and the per-column bias of a
//! matmul's left operand leave it as rank-one corrections of the result.
//!
//! A left operand that mixes a tile with per-row vectors (a normalization)
//! is expanded into a sum of products, `Σ ± r_i ⊙ T_i ⊙ c_i`, with `r_i`
//! per-row broadcasts, `c_i` per-column broadcasts and `T_i` tiles. When
//! exactly one term holds a tile, the matmul is rewritten as that term's
//! GEMM (per-row factors applied to the accumulator, see
//! [`crate::rowscale`]) plus one rank-one correction per other term, each a
//! per-row vector times a per-column vector computed from the weight alone.
//! For `layernorm(x, γ, β) = σ ⊙ (x − μ) ⊙ γ + β` this is
//! `σ ⊙ ((x ⊙ γ) @ W) − (σ μ) ⊗ (γᵀ W) + 1 ⊗ (βᵀ W)`.

use crate::rowscale::product;
use coda_ir::infer::TypeError;
use coda_ir::{BinaryOp, Block, DType, Dim, Inst, Shape, UnaryOp, Value};
use std::collections::HashMap;

/// `(X − a cᵀ) @ W = X @ W − a ⊗ (cᵀ W)` for a per-row vector `a` (`[M, 1]`)
/// and a per-column vector `c` (`[1, K]`): row `m`, column `n` of the
/// product of the rank-one term is `Σ_k a_m c_k W_kn = a_m (cᵀW)_n`. With
/// `a = σμ`, `c = γ` this moves LayerNorm's centring out of the operand.
pub(crate) const RULE_SHIFT: &str = "row-shift-through-matmul";

/// `(X + 1 cᵀ) @ W = X @ W + 1 ⊗ (cᵀ W)`: the rank-one term with no per-row
/// factor (LayerNorm's bias `β`) becomes a per-column vector of the result.
pub(crate) const RULE_BIAS: &str = "bias-through-matmul";

/// `(Y + 1 ⊗ u) + 1 ⊗ b = Y + 1 ⊗ (u + b)`: a bias added after the matmul
/// joins the bias term's weight product (one per-column vector fewer in the
/// consumer's epilogue; the weight-preparation GEMM adds `b`).
pub(crate) const RULE_MERGE_BIAS: &str = "bias-into-weight-product";

/// Most terms an expansion may have (LayerNorm has three).
const MAX_TERMS: usize = 8;

/// Deepest expression an expansion looks into.
const MAX_DEPTH: usize = 32;

/// One factor of a product term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Factor {
    /// `broadcast(r)` of a per-row `[M, 1]` vector `r` (holds `r`).
    Row(Value),
    /// `broadcast(c)` of a per-column `[1, K]` vector `c` (holds the broadcast).
    Col(Value),
    /// `broadcast(s)` of a scalar `s` (holds the broadcast).
    Scalar(Value),
    /// Anything else of the operand's shape.
    Tile(Value),
}

/// `± Π factors`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    negative: bool,
    factors: Vec<Factor>,
}

/// A rank-one correction `± row ⊗ (col @ W)` of the matmul's result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RankOne {
    /// Subtracted rather than added.
    pub(crate) negative: bool,
    /// The per-row vector (`[M, 1]`), or none for a bias.
    pub(crate) row: Option<Value>,
    /// The per-column vector (`[1, K]`) multiplied by the weight.
    pub(crate) col: Value,
}

/// A left operand split for LayerNorm deferral.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    /// The tile term without its per-row factors (the GEMM's operand).
    pub(crate) operand: Value,
    /// The product of the tile term's per-row factors.
    pub(crate) scale: Option<Value>,
    /// The other terms.
    pub(crate) rank_one: Vec<RankOne>,
}

/// Splits `lhs` (a value of the new block, read by a matmul as `operand`)
/// when it is a sum with one tile term, at least one per-row vector, and at
/// least one other term, and when its tile comes from a matmul (a GEMM
/// epilogue can then emit the row statistics the corrections need; for a
/// block input, the normalized operand is made by a row kernel anyway and
/// deferring it would only add work). `None`: not this rule's case.
pub(crate) fn split(block: &mut Block, lhs: Value, operand: DType) -> Result<Option<Split>, TypeError> {
    let root = peel_cast(block, lhs, operand);
    let shape = block.ty(root).shape.clone();
    if shape.rows.is_one() || shape.cols.is_one() {
        return Ok(None);
    }
    let mut expander = Expander { block, shape: &shape, has_row: HashMap::new() };
    let Some(terms) = expander.expand(root, 0) else { return Ok(None) };
    let (tiles, others): (Vec<Term>, Vec<Term>) =
        terms.into_iter().partition(|t| t.factors.iter().any(|f| matches!(f, Factor::Tile(_))));
    let [tile] = tiles.as_slice() else { return Ok(None) };
    if tile.negative || others.is_empty() || !tile_has_producer(block, tile) {
        return Ok(None);
    }
    let span = block.insts.span(root);
    let rows: Vec<Value> = tile.factors.iter().filter_map(row_of).collect();
    let kept: Vec<Value> = tile.factors.iter().filter_map(kept_in_operand).collect();
    let operand = product(block, &kept, span)?;
    if let Some(name) = product_name(block, &kept) {
        block.set_name(operand, &name);
    }
    let scale = if rows.is_empty() { None } else { Some(product(block, &rows, span)?) };
    let mut rank_one = Vec::new();
    for term in &others {
        rank_one.push(rank_one_of(block, term, &shape, span)?);
    }
    Ok(Some(Split { operand, scale, rank_one }))
}

/// `± row ⊗ (col @ W)` added to the scaled accumulator `acc` (`[M, N]`);
/// `weight_product` is `col @ W` (`[1, N]`).
pub(crate) fn apply(block: &mut Block, acc: Value, term: &RankOne, weight_product: Value) -> Result<Value, TypeError> {
    let span = block.insts.span(acc);
    let shape = block.ty(acc).shape.clone();
    let mut correction = block.push(Inst::Broadcast { arg: weight_product, shape: shape.clone() }, span)?;
    if let Some(row) = term.row {
        let wide = block.push(Inst::Broadcast { arg: row, shape }, span)?;
        correction = block.push(Inst::Binary { op: BinaryOp::Mul, lhs: wide, rhs: correction }, span)?;
    }
    let op = if term.negative { BinaryOp::Sub } else { BinaryOp::Add };
    block.push(Inst::Binary { op, lhs: acc, rhs: correction }, span)
}

/// Whether the old value `lhs` is used only as the (not transposed) left
/// operand of matmuls, directly or through casts, and is not an output. A
/// LayerNorm whose result is needed elsewhere is computed whole by some
/// kernel anyway; deferring it would only add work (and rounding).
pub(crate) fn only_left_operand(block: &Block, users: &[Vec<Value>], lhs: Value) -> bool {
    let mut stack = vec![lhs];
    while let Some(v) = stack.pop() {
        if block.outputs.iter().any(|o| o.value == v) {
            return false;
        }
        for &u in &users[v.index()] {
            match block.inst(u) {
                Inst::MatMul { lhs, rhs, lhs_transposed: false, .. } if *lhs == v && *rhs != v => {}
                Inst::Cast { .. } => stack.push(u),
                _ => return false,
            }
        }
    }
    true
}

/// A readable name for a product of `factors` (`x1_ln2_g` for `x1 ⊙ γ`),
/// when every factor, or the vector it broadcasts, has a source name.
pub(crate) fn product_name(block: &Block, factors: &[Value]) -> Option<String> {
    let mut parts = Vec::new();
    for &f in factors {
        let f = match block.inst(f) {
            Inst::Broadcast { arg, .. } => *arg,
            _ => f,
        };
        parts.push(block.names.get(f.index()).cloned().flatten()?);
    }
    Some(parts.join("_"))
}

/// The matmul rounds its operand to `operand` anyway.
fn peel_cast(block: &Block, mut v: Value, operand: DType) -> Value {
    while let Inst::Cast { to, arg } = block.inst(v) {
        if *to != operand {
            break;
        }
        v = *arg;
    }
    v
}

/// The expansion of an operand into product terms.
struct Expander<'a> {
    block: &'a Block,
    shape: &'a Shape,
    has_row: HashMap<Value, bool>,
}

impl Expander<'_> {
    /// `v` as a sum of product terms; `None` when a per-row factor sits
    /// inside something that is not a sum, difference, negation or product.
    fn expand(&mut self, v: Value, depth: usize) -> Option<Vec<Term>> {
        if depth > MAX_DEPTH {
            return None;
        }
        if !self.mentions_row(v, depth) {
            return Some(vec![Term { negative: false, factors: vec![self.atom(v)] }]);
        }
        let terms = match self.block.inst(v) {
            Inst::Binary { op: BinaryOp::Add, lhs, rhs } => {
                let (lhs, rhs) = (*lhs, *rhs);
                let mut terms = self.expand(lhs, depth + 1)?;
                terms.extend(self.expand(rhs, depth + 1)?);
                terms
            }
            Inst::Binary { op: BinaryOp::Sub, lhs, rhs } => {
                let (lhs, rhs) = (*lhs, *rhs);
                let mut terms = self.expand(lhs, depth + 1)?;
                terms.extend(negated(self.expand(rhs, depth + 1)?));
                terms
            }
            Inst::Unary { op: UnaryOp::Neg, arg } => negated(self.expand(*arg, depth + 1)?),
            Inst::Binary { op: BinaryOp::Mul, lhs, rhs } => {
                let (lhs, rhs) = (*lhs, *rhs);
                let left = self.expand(lhs, depth + 1)?;
                let right = self.expand(rhs, depth + 1)?;
                multiplied(&left, &right)
            }
            Inst::Broadcast { .. } => vec![Term { negative: false, factors: vec![self.atom(v)] }],
            _ => return None,
        };
        (terms.len() <= MAX_TERMS).then_some(terms)
    }

    /// Whether a per-row broadcast occurs in `v` through sums and products.
    fn mentions_row(&mut self, v: Value, depth: usize) -> bool {
        if let Some(hit) = self.has_row.get(&v) {
            return *hit;
        }
        let hit = depth <= MAX_DEPTH
            && match self.block.inst(v) {
                Inst::Binary { op: BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul, lhs, rhs } => {
                    let (lhs, rhs) = (*lhs, *rhs);
                    self.mentions_row(lhs, depth + 1) || self.mentions_row(rhs, depth + 1)
                }
                Inst::Unary { op: UnaryOp::Neg, arg } => self.mentions_row(*arg, depth + 1),
                _ => matches!(self.atom(v), Factor::Row(_)),
            };
        self.has_row.insert(v, hit);
        hit
    }

    /// What kind of factor `v` is.
    fn atom(&self, v: Value) -> Factor {
        let Inst::Broadcast { arg, .. } = self.block.inst(v) else { return Factor::Tile(v) };
        let ty = self.block.ty(*arg);
        if !ty.dtype.is_float() {
            return Factor::Tile(v);
        }
        let (rows_one, cols_one) = (ty.shape.rows.is_one(), ty.shape.cols.is_one());
        match (rows_one, cols_one) {
            (true, true) => Factor::Scalar(v),
            (false, true) if ty.shape.rows == self.shape.rows => Factor::Row(*arg),
            (true, false) if ty.shape.cols == self.shape.cols => Factor::Col(v),
            _ => Factor::Tile(v),
        }
    }
}

fn negated(terms: Vec<Term>) -> Vec<Term> {
    terms.into_iter().map(|t| Term { negative: !t.negative, ..t }).collect()
}

/// `(Σ a_i)(Σ b_j) = Σ a_i b_j`.
fn multiplied(left: &[Term], right: &[Term]) -> Vec<Term> {
    let mut out = Vec::new();
    for a in left {
        for b in right {
            let mut factors = a.factors.clone();
            factors.extend(b.factors.iter().copied());
            out.push(Term { negative: a.negative != b.negative, factors });
        }
    }
    out
}

fn row_of(f: &Factor) -> Option<Value> {
    match f {
        Factor::Row(r) => Some(*r),
        _ => None,
    }
}

/// The factors that stay in the GEMM operand (tiles, per-column vectors and
/// scalars, as the broadcast values the operand had).
fn kept_in_operand(f: &Factor) -> Option<Value> {
    match f {
        Factor::Tile(v) | Factor::Col(v) | Factor::Scalar(v) => Some(*v),
        Factor::Row(_) => None,
    }
}

/// Whether the tile of the tile term is computed from a matmul (so that a
/// GEMM epilogue can emit its row statistics).
fn tile_has_producer(block: &Block, tile: &Term) -> bool {
    let mut stack: Vec<Value> =
        tile.factors.iter().filter_map(|f| if let Factor::Tile(v) = f { Some(*v) } else { None }).collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        if matches!(block.inst(v), Inst::MatMul { .. }) {
            return true;
        }
        stack.extend(block.inst(v).operands());
    }
    false
}

/// The rank-one form of a term without a tile: its per-row factors and
/// scalars make the row vector, its per-column factors the column vector
/// (all ones when it has none).
fn rank_one_of(
    block: &mut Block,
    term: &Term,
    shape: &Shape,
    span: coda_diagnostics::Span,
) -> Result<RankOne, TypeError> {
    let mut rows = Vec::new();
    let mut cols = Vec::new();
    for f in &term.factors {
        match *f {
            Factor::Row(r) => rows.push(r),
            Factor::Scalar(b) => {
                let Inst::Broadcast { arg: s, .. } = *block.inst(b) else {
                    return Err(TypeError("a scalar factor that is not a broadcast".into()));
                };
                let per_row = Shape::new(shape.rows.clone(), Dim::constant(1));
                rows.push(block.push(Inst::Broadcast { arg: s, shape: per_row }, span)?);
            }
            Factor::Col(c) => {
                let Inst::Broadcast { arg, .. } = block.inst(c) else {
                    return Err(TypeError("a per-column factor that is not a broadcast".into()));
                };
                cols.push(*arg);
            }
            Factor::Tile(_) => return Err(TypeError("a rank-one term with a tile".into())),
        }
    }
    let row = if rows.is_empty() { None } else { Some(product(block, &rows, span)?) };
    if cols.is_empty() {
        let one = block.push(Inst::Const(1.0), span)?;
        let per_col = Shape::new(Dim::constant(1), shape.cols.clone());
        cols.push(block.push(Inst::Broadcast { arg: one, shape: per_col }, span)?);
    }
    let col = product(block, &cols, span)?;
    Ok(RankOne { negative: term.negative, row, col })
}
