//! The rewriting walk: rebuilds a block instruction by instruction, applying
//! the norm-deferral and pair-layout rules, then drops dead values.
//!
//! Each old value maps to a new value in its original column order
//! ([`Mapped::Plain`]) or in a matmul's pair order ([`Mapped::Paired`]:
//! the old value equals `unpermute_cols(new, perm)`). Paired values flow
//! through elementwise work whose other operands can be put in pair order
//! too; halves, rotate-half RoPE and row reductions consume them; anything
//! else puts them back in order and marks the layout as not absorbed.

use crate::pairs::{self, Choice};
use crate::{affine, fold, rowscale, Options};
use coda_ir::infer::TypeError;
use coda_ir::{Axis, BinaryOp, Block, ColGroups, Dim, Inst, Output, PairPerm, RopeSpec, RopeStyle, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The result of one rewriting walk.
pub(crate) struct Outcome {
    /// The rewritten block.
    pub(crate) block: Block,
    /// Rule counts.
    pub(crate) applied: BTreeMap<&'static str, usize>,
    /// Matmuls whose pair layout some user could not absorb.
    pub(crate) unabsorbed: BTreeSet<Value>,
}

#[derive(Debug, Clone, Copy)]
enum Mapped {
    Plain(Value),
    Paired { value: Value, perm: PairPerm, origin: Value },
}

struct Rewriter<'a> {
    old: &'a Block,
    new: Block,
    map: Vec<Mapped>,
    options: &'a Options,
    plan: &'a BTreeMap<Value, Choice>,
    applied: BTreeMap<&'static str, usize>,
    unabsorbed: BTreeSet<Value>,
    in_layout_memo: HashMap<(Value, PairPerm), Option<Value>>,
    /// Deferred matmuls (old value) with one bias term: the result before
    /// the bias, and the bias's weight product.
    biased: HashMap<Value, (Value, Value)>,
    /// The users of every old value.
    users: Vec<Vec<Value>>,
}

/// Rewrites `old` with the chosen pair layouts; an error is a bug in a rule
/// (it built an ill-typed instruction).
pub(crate) fn rewrite(old: &Block, options: &Options, plan: &BTreeMap<Value, Choice>) -> Result<Outcome, TypeError> {
    let new = empty_like(old);
    let mut r = Rewriter {
        old,
        new,
        map: Vec::with_capacity(old.insts.len()),
        options,
        plan,
        applied: BTreeMap::new(),
        unabsorbed: BTreeSet::new(),
        in_layout_memo: HashMap::new(),
        biased: HashMap::new(),
        users: old.users(),
    };
    r.run()?;
    let block = compact(&r.new)?;
    Ok(Outcome { block, applied: r.applied, unabsorbed: r.unabsorbed })
}

impl Rewriter<'_> {
    fn run(&mut self) -> Result<(), TypeError> {
        for (v, inst) in self.old.insts.iter() {
            let mapped = self.rewrite_inst(v, inst)?;
            if let Some(name) = self.old.names.get(v.index()).cloned().flatten() {
                let (Mapped::Plain(x) | Mapped::Paired { value: x, .. }) = mapped;
                self.new.set_name(x, &name);
            }
            self.map.push(mapped);
        }
        for output in &self.old.outputs {
            let value = match self.map[output.value.index()] {
                Mapped::Plain(x) => x,
                Mapped::Paired { value, perm, .. } => {
                    *self.applied.entry(pairs::RULE_UNPERMUTE_STORE).or_default() += 1;
                    self.emit(Inst::UnpermuteCols { arg: value, perm }, output.span)?
                }
            };
            self.new.outputs.push(Output { value, ..output.clone() });
        }
        Ok(())
    }

    fn emit(&mut self, inst: Inst, span: coda_diagnostics::Span) -> Result<Value, TypeError> {
        self.new.push(inst, span)
    }

    fn count(&mut self, rule: &'static str) {
        *self.applied.entry(rule).or_default() += 1;
    }

    /// The new value of `old` in original column order (putting a paired
    /// value back in order marks its layout as not absorbed).
    fn plain(&mut self, old: Value) -> Result<Value, TypeError> {
        match self.map[old.index()] {
            Mapped::Plain(x) => Ok(x),
            Mapped::Paired { value, perm, origin } => {
                self.unabsorbed.insert(origin);
                let span = self.old.insts.span(old);
                self.emit(Inst::UnpermuteCols { arg: value, perm }, span)
            }
        }
    }

    /// The first paired operand of `inst`, if any.
    fn paired_operand(&self, inst: &Inst) -> Option<(PairPerm, Value)> {
        inst.operands().into_iter().find_map(|o| match self.map[o.index()] {
            Mapped::Paired { perm, origin, .. } => Some((perm, origin)),
            Mapped::Plain(_) => None,
        })
    }

    fn rewrite_inst(&mut self, v: Value, inst: &Inst) -> Result<Mapped, TypeError> {
        let span = self.old.insts.span(v);
        if let Inst::MatMul { .. } = inst {
            return self.matmul(v, inst);
        }
        if let Some(mapped) = self.merge_bias(v, inst)? {
            return Ok(mapped);
        }
        if let Some(whole) = self.interleaved_halves(inst) {
            self.count(pairs::RULE_INTERLEAVE_HALVES);
            return Ok(Mapped::Plain(whole));
        }
        if let Some((perm, origin)) = self.paired_operand(inst) {
            if let Some(mapped) = self.absorb(v, inst, perm, origin)? {
                return Ok(mapped);
            }
        }
        let mut failed = None;
        let copy = inst.map_operands(|o| match self.plain(o) {
            Ok(x) => x,
            Err(e) => {
                failed = Some(e);
                o
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(Mapped::Plain(self.emit(copy, span)?))
    }

    /// `y` for `interleave(y[:, 0::2], y[:, 1::2])` of a value `y` of `2L`
    /// columns (see [`pairs::RULE_INTERLEAVE_HALVES`]).
    fn interleaved_halves(&self, inst: &Inst) -> Option<Value> {
        let Inst::Interleave { even, odd } = inst else { return None };
        let (Mapped::Plain(e), Mapped::Plain(o)) = (self.map[even.index()], self.map[odd.index()]) else {
            return None;
        };
        let half = |x: Value, parity: i64| match self.new.inst(x) {
            Inst::SliceCols { arg, start, len, step: 2 } if start.as_const() == Some(parity) => {
                let whole = self.new.ty(*arg).shape.cols.as_const()?;
                (len.as_const()? * 2 == whole).then_some(*arg)
            }
            _ => None,
        };
        let (a, b) = (half(e, 0)?, half(o, 1)?);
        (a == b).then_some(a)
    }

    /// Uses of a paired value that keep or consume the pair layout.
    fn absorb(&mut self, v: Value, inst: &Inst, perm: PairPerm, origin: Value) -> Result<Option<Mapped>, TypeError> {
        let span = self.old.insts.span(v);
        let paired = |value| Some(Mapped::Paired { value, perm, origin });
        match inst {
            Inst::Unary { .. } | Inst::Cast { .. } | Inst::Binary { .. } | Inst::Select { .. } => {
                Ok(self.elementwise_in_layout(inst, perm, span)?.and_then(paired))
            }
            // Halves of a single-group layout are its even and odd columns.
            Inst::SliceCols { arg, start, len, step: 1 } if perm.start == 0 && perm.group == perm.end => {
                let (half, s) = (perm.end / 2, start.as_const());
                if len.as_const() != Some(half) || !(s == Some(0) || s == Some(half)) {
                    return Ok(None);
                }
                let Mapped::Paired { value, .. } = self.map[arg.index()] else { return Ok(None) };
                let odd = i64::from(s == Some(half));
                let slice = Inst::SliceCols { arg: value, start: Dim::constant(odd), len: len.clone(), step: 2 };
                Ok(Some(Mapped::Plain(self.emit(slice, span)?)))
            }
            Inst::RopePartner { spec, arg } if same_rope(spec, perm) => {
                let Mapped::Paired { value, .. } = self.map[arg.index()] else { return Ok(None) };
                let spec = RopeSpec { style: RopeStyle::Interleaved, ..spec.clone() };
                Ok(paired(self.emit(Inst::RopePartner { spec, arg: value }, span)?))
            }
            // A row reduction does not depend on the column order.
            Inst::Reduce { op, axis: Axis::Cols, arg } => {
                let Mapped::Paired { value, .. } = self.map[arg.index()] else { return Ok(None) };
                Ok(Some(Mapped::Plain(self.emit(Inst::Reduce { op: *op, axis: Axis::Cols, arg: value }, span)?)))
            }
            // Nor does a per-head one, when pairs stay inside heads.
            Inst::GroupReduce { op, groups: ColGroups::Heads(width), arg } if pairs::within_heads(perm, *width) => {
                let Mapped::Paired { value, .. } = self.map[arg.index()] else { return Ok(None) };
                self.count(pairs::RULE_HEAD_STATISTICS);
                let reduce = Inst::GroupReduce { op: *op, groups: ColGroups::Heads(*width), arg: value };
                Ok(Some(Mapped::Plain(self.emit(reduce, span)?)))
            }
            _ => Ok(None),
        }
    }

    /// The new value of `old` with its columns in `perm` order, when it can
    /// be built without a permutation in memory: paired values, values
    /// constant along columns, rotary tables of the matching rope,
    /// per-column vectors (read at permuted columns), and elementwise
    /// combinations of those.
    fn in_layout(&mut self, old: Value, perm: PairPerm) -> Result<Option<Value>, TypeError> {
        if let Some(hit) = self.in_layout_memo.get(&(old, perm)) {
            return Ok(*hit);
        }
        let result = self.in_layout_uncached(old, perm)?;
        self.in_layout_memo.insert((old, perm), result);
        Ok(result)
    }

    fn in_layout_uncached(&mut self, old: Value, perm: PairPerm) -> Result<Option<Value>, TypeError> {
        if let Mapped::Paired { value, perm: p, .. } = self.map[old.index()] {
            return Ok((p == perm).then_some(value));
        }
        let span = self.old.insts.span(old);
        let inst = self.old.inst(old).clone();
        if self.old.ty(old).shape.cols.is_one() {
            return self.plain(old).map(Some);
        }
        match &inst {
            Inst::Broadcast { arg, shape } => {
                let Some(x) = self.in_layout(*arg, perm)? else { return Ok(None) };
                Ok(Some(self.emit(Inst::Broadcast { arg: x, shape: shape.clone() }, span)?))
            }
            Inst::RopeTable { spec, table, cols } if same_rope(spec, perm) => {
                let spec = RopeSpec { style: RopeStyle::Interleaved, ..spec.clone() };
                Ok(Some(self.emit(Inst::RopeTable { spec, table: *table, cols: cols.clone() }, span)?))
            }
            Inst::Unary { .. } | Inst::Cast { .. } | Inst::Binary { .. } | Inst::Select { .. } => {
                self.elementwise_in_layout(&inst, perm, span)
            }
            // A per-head value over its heads is constant inside each head.
            Inst::GroupExpand { groups: ColGroups::Heads(width), .. } if pairs::within_heads(perm, *width) => {
                self.plain(old).map(Some)
            }
            // A per-column vector (a bias) read in the accumulator's order.
            _ if self.old.ty(old).shape.rows.is_one() && self.old.ty(old).shape.cols.as_const() >= Some(perm.end) => {
                let arg = self.plain(old)?;
                self.count(pairs::RULE_PERMUTE_VECTOR);
                Ok(Some(self.emit(Inst::PermuteCols { arg, perm }, span)?))
            }
            _ => Ok(None),
        }
    }

    /// The elementwise `inst` rebuilt on its operands in `perm` order, when
    /// every operand can be put in that order.
    fn elementwise_in_layout(
        &mut self,
        inst: &Inst,
        perm: PairPerm,
        span: coda_diagnostics::Span,
    ) -> Result<Option<Value>, TypeError> {
        let mut operands = HashMap::new();
        for o in inst.operands() {
            match self.in_layout(o, perm)? {
                Some(x) => operands.insert(o, x),
                None => return Ok(None),
            };
        }
        let copy = inst.map_operands(|o| operands.get(&o).copied().unwrap_or(o));
        Ok(Some(self.emit(copy, span)?))
    }

    fn matmul(&mut self, v: Value, inst: &Inst) -> Result<Mapped, TypeError> {
        let Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, operand_dtype } = *inst else {
            return Err(TypeError("not a matmul".into()));
        };
        let span = self.old.insts.span(v);
        let mut a = self.plain(lhs)?;
        let weight = self.plain(rhs)?;
        let mut deferred = affine::Split { operand: a, scale: None, rank_one: Vec::new() };
        if self.options.defer_norms && !lhs_transposed {
            let split = if self.options.defer_layernorm && affine::only_left_operand(self.old, &self.users, lhs) {
                affine::split(&mut self.new, a, operand_dtype)?
            } else {
                None
            };
            deferred = match split {
                Some(split) => split,
                None => {
                    let (operand, scale) = rowscale::split(&mut self.new, a, operand_dtype)?;
                    affine::Split { operand, scale, rank_one: Vec::new() }
                }
            };
            a = deferred.operand;
        }
        let mut b = weight;
        // Stacked weights are read where they are: nothing folds into them.
        let stacked = matches!(self.new.inst(weight), Inst::StackRows { .. });
        if self.options.fold_gains && !stacked && (deferred.scale.is_some() || !deferred.rank_one.is_empty()) {
            if let Some((operand, folded)) = fold::gains(&mut self.new, a, weight, rhs_transposed)? {
                (a, b) = (operand, folded);
                self.count(fold::RULE);
            }
        }
        let choice = self.plan.get(&v).copied();
        let mut unfolded = weight;
        if let Some(c) = choice {
            unfolded = self.emit(Inst::PermuteRows { arg: weight, perm: c.perm }, span)?;
            b = if b == weight { unfolded } else { self.emit(Inst::PermuteRows { arg: b, perm: c.perm }, span)? };
            self.count(c.rule);
        }
        // Shifts before the bias, so that a bias added after the matmul
        // can join the bias term (`merge_bias`).
        deferred.rank_one.sort_by_key(|t| t.row.is_none());
        // The weight products come first, so that their weight-preparation
        // GEMMs launch before the GEMM whose epilogue reads them.
        let mut products = Vec::new();
        for term in &deferred.rank_one {
            let product =
                Inst::MatMul { lhs: term.col, rhs: unfolded, lhs_transposed: false, rhs_transposed, operand_dtype };
            let product = self.emit(product, span)?;
            if let Some(name) = affine::product_name(&self.new, &[term.col, rhs]) {
                self.new.set_name(product, &name);
            }
            products.push(product);
        }
        let mm = Inst::MatMul { lhs: a, rhs: b, lhs_transposed, rhs_transposed, operand_dtype };
        let mut out = self.emit(mm, span)?;
        if let Some(r) = deferred.scale {
            out = rowscale::apply(&mut self.new, out, r)?;
            self.count(rowscale::RULE);
        }
        let biases = deferred.rank_one.iter().filter(|t| t.row.is_none()).count();
        for (term, product) in deferred.rank_one.iter().zip(products) {
            if term.row.is_none() && biases == 1 && choice.is_none() {
                self.biased.insert(v, (out, product));
            }
            out = affine::apply(&mut self.new, out, term, product)?;
            self.count(if term.row.is_some() { affine::RULE_SHIFT } else { affine::RULE_BIAS });
        }
        Ok(match choice {
            Some(c) => Mapped::Paired { value: out, perm: c.perm, origin: v },
            None => Mapped::Plain(out),
        })
    }

    /// `(Y + 1 ⊗ u) + 1 ⊗ b = Y + 1 ⊗ (u + b)` for a matmul `Y + 1 ⊗ u`
    /// whose bias term `u` is a weight product and a bias `b` added to it:
    /// the weight-preparation GEMM adds `b`, and the consumer's epilogue
    /// reads one per-column vector instead of two.
    fn merge_bias(&mut self, v: Value, inst: &Inst) -> Result<Option<Mapped>, TypeError> {
        let Inst::Binary { op: BinaryOp::Add, lhs, rhs } = *inst else { return Ok(None) };
        let (matmul, other) = match (self.biased.get(&lhs), self.biased.get(&rhs)) {
            (Some(_), _) => (lhs, rhs),
            (None, Some(_)) => (rhs, lhs),
            (None, None) => return Ok(None),
        };
        let Inst::Broadcast { arg: bias, .. } = *self.old.inst(other) else { return Ok(None) };
        let bias_shape = &self.old.ty(bias).shape;
        if !bias_shape.rows.is_one() || bias_shape.cols != self.old.ty(v).shape.cols || bias_shape.cols.is_one() {
            return Ok(None);
        }
        let Some(&(base, product)) = self.biased.get(&matmul) else { return Ok(None) };
        let span = self.old.insts.span(v);
        let bias = self.plain(bias)?;
        let merged = self.emit(Inst::Binary { op: BinaryOp::Add, lhs: product, rhs: bias }, span)?;
        if let Some(name) = affine::product_name(&self.new, &[product, bias]) {
            self.new.set_name(merged, &name);
        }
        let shape = self.new.ty(base).shape.clone();
        let wide = self.emit(Inst::Broadcast { arg: merged, shape }, span)?;
        self.count(affine::RULE_MERGE_BIAS);
        Ok(Some(Mapped::Plain(self.emit(Inst::Binary { op: BinaryOp::Add, lhs: base, rhs: wide }, span)?)))
    }
}

/// Whether `perm` is the per-head pair layout of the rotate-half `spec`.
fn same_rope(spec: &RopeSpec, perm: PairPerm) -> bool {
    spec.style == RopeStyle::Half
        && spec.head_dim == perm.group
        && spec.rotary_dim == spec.head_dim
        && spec.start.as_const() == Some(perm.start)
        && spec.end.as_const() == Some(perm.end)
}

/// Rebuilds `block` instruction by instruction: `replace` may define an old
/// value anew in the new block (given the new values of the earlier ones),
/// every other instruction is copied with its operands mapped; names and
/// outputs follow and dead values are dropped. Returns the block and how
/// many values `replace` defined.
pub(crate) fn rebuild(
    block: &Block,
    mut replace: impl FnMut(&mut Block, &[Value], Value) -> Option<Result<Value, TypeError>>,
) -> Result<(Block, usize), TypeError> {
    let mut out = Block::new(block.name.clone(), block.kind, block.span);
    out.dims = block.dims.clone();
    out.params = block.params.clone();
    let mut map: Vec<Value> = Vec::with_capacity(block.insts.len());
    let mut count = 0;
    for (v, inst) in block.insts.iter() {
        let new = match replace(&mut out, &map, v) {
            Some(new) => {
                count += 1;
                new?
            }
            None => out.push(inst.map_operands(|o| map[o.index()]), block.insts.span(v))?,
        };
        if let Some(name) = block.names.get(v.index()).cloned().flatten() {
            out.set_name(new, &name);
        }
        map.push(new);
    }
    for o in &block.outputs {
        out.outputs.push(Output { value: map[o.value.index()], ..o.clone() });
    }
    Ok((compact(&out)?, count))
}

/// A copy of `block` without values no output needs.
pub(crate) fn compact(block: &Block) -> Result<Block, TypeError> {
    let mut live = vec![false; block.insts.len()];
    for o in &block.outputs {
        live[o.value.index()] = true;
    }
    for (v, inst) in block.insts.iter().collect::<Vec<_>>().into_iter().rev() {
        if live[v.index()] {
            for o in inst.operands() {
                live[o.index()] = true;
            }
        }
    }
    let mut out = empty_like(block);
    let mut map: Vec<Option<Value>> = vec![None; block.insts.len()];
    for (v, inst) in block.insts.iter() {
        // Parameters stay, live or not, so that parameter indices hold.
        if !live[v.index()] && !matches!(inst, Inst::Param(_)) {
            continue;
        }
        map[v.index()] = Some(copy_inst(&mut out, block, v, &map)?);
    }
    copy_outputs(&mut out, block, &map)?;
    Ok(out)
}

/// A block with `block`'s name, kind, dims and parameters, and nothing else.
pub(crate) fn empty_like(block: &Block) -> Block {
    let mut out = Block::new(block.name.clone(), block.kind, block.span);
    out.dims = block.dims.clone();
    out.params = block.params.clone();
    out
}

/// Copies instruction `v` of `block` into `out` with its operands mapped
/// (an operand without a new value keeps its own) and its name.
pub(crate) fn copy_inst(out: &mut Block, block: &Block, v: Value, map: &[Option<Value>]) -> Result<Value, TypeError> {
    let copy = block.inst(v).map_operands(|o| map[o.index()].unwrap_or(o));
    let nv = out.push(copy, block.insts.span(v))?;
    if let Some(name) = block.names.get(v.index()).cloned().flatten() {
        out.set_name(nv, &name);
    }
    Ok(nv)
}

/// `block`'s outputs in `out`, at their values' new values.
pub(crate) fn copy_outputs(out: &mut Block, block: &Block, map: &[Option<Value>]) -> Result<(), TypeError> {
    for o in &block.outputs {
        let value = map[o.value.index()].ok_or_else(|| TypeError("an output lost its value".into()))?;
        out.outputs.push(Output { value, ..o.clone() });
    }
    Ok(())
}
