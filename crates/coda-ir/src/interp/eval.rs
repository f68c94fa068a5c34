//! The evaluation loop: inputs, one instruction at a time, outputs.

use super::bind::{bind_shape, eval_dim, resolve_bindings, DimBindings};
use super::error::EvalError;
use super::estimate::{instruction_work, locate_dim_error};
use super::inputs::{check_all_inputs, input};
use super::layout;
use super::matmul::{matmul, scratch_elements, MatMulMode};
use super::ops;
use super::rope::bind_rope;
use super::round::{cast, round_slice, round_to_dtype};
use super::tensor::HostTensor;
use crate::block::{Block, Output, Tensor};
use crate::inst::{Inst, RopeSpec, Value};
use crate::ty::DType;
use coda_diagnostics::Span;
use std::collections::BTreeMap;

/// The most bytes of values (8 an element) live at once: 16 GiB.
pub const MEMORY_LIMIT_BYTES: u64 = 16 << 30;

/// How to evaluate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvalOptions {
    /// Round float params on read, matmul operands, casts and stores to
    /// their storage types, as the hardware does. Off: exact `f64` math.
    pub round_to_storage: bool,
}

/// Runs `block` on `inputs` and returns every output by name (see the
/// module docs for the semantics).
pub fn eval(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
    options: &EvalOptions,
) -> Result<BTreeMap<String, HostTensor>, EvalError> {
    eval_with(block, dims, inputs, options, MEMORY_LIMIT_BYTES, &mut |_| {})
}

/// How far an evaluation has come, reported before each instruction and
/// once at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Work done so far, in the units of [`Estimate::work`](super::Estimate::work).
    pub done: u128,
    /// All the work of the block.
    pub total: u128,
    /// The work of the instruction about to run (0 at the end).
    pub step: u128,
    /// The source of the value about to be computed (the block's at the end).
    pub span: Span,
}

/// [`eval`] with `limit` bytes of live values instead of
/// [`MEMORY_LIMIT_BYTES`], calling `progress` before every instruction and
/// once when every instruction has run.
pub fn eval_with(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
    options: &EvalOptions,
    limit: u64,
    progress: &mut dyn FnMut(Progress),
) -> Result<BTreeMap<String, HostTensor>, EvalError> {
    let dims = resolve_bindings(block, dims).map_err(|e| locate_dim_error(block, e))?;
    check_all_inputs(block, &dims, inputs)?;
    let work = instruction_work(block, &dims)?;
    let total = work.iter().sum();
    let mut machine = Machine {
        block,
        dims,
        inputs,
        round: options.round_to_storage,
        values: std::iter::repeat_with(|| None).take(block.insts.len()).collect(),
        last_use: last_uses(block),
        live_bytes: 0,
        limit,
    };
    let mut done = 0;
    for ((value, inst), step) in block.insts.iter().zip(work) {
        let span = block.insts.span(value);
        progress(Progress { done, total, step, span });
        machine.step(value, inst).map_err(|e| e.at(span))?;
        done += step;
    }
    progress(Progress { done, total, step: 0, span: block.span });
    machine.outputs()
}

/// [`eval_with`] without progress, for the tests.
#[cfg(test)]
pub(super) fn eval_with_limit(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
    options: &EvalOptions,
    limit: u64,
) -> Result<BTreeMap<String, HostTensor>, EvalError> {
    eval_with(block, dims, inputs, options, limit, &mut |_| {})
}

/// For each value, the index of the last instruction reading it (its own
/// index if none does, `usize::MAX` if an output stores it).
pub(super) fn last_uses(block: &Block) -> Vec<usize> {
    let mut last: Vec<usize> = (0..block.insts.len()).collect();
    for (value, inst) in block.insts.iter() {
        for operand in inst.operands() {
            if let Some(slot) = last.get_mut(operand.index()) {
                *slot = (*slot).max(value.index());
            }
        }
    }
    for output in &block.outputs {
        if let Some(slot) = last.get_mut(output.value.index()) {
            *slot = usize::MAX;
        }
    }
    last
}

/// A computed value: owned, or a param's input used as it is.
enum Slot<'a> {
    /// Computed by the interpreter (counted against the memory limit).
    Owned(HostTensor),
    /// A caller's input that already has the param's dtype, shape and values.
    Borrowed(&'a HostTensor),
}

impl Slot<'_> {
    fn tensor(&self) -> &HostTensor {
        match self {
            Slot::Owned(tensor) => tensor,
            Slot::Borrowed(tensor) => tensor,
        }
    }

    /// Bytes counted against the memory limit.
    fn owned_bytes(&self) -> u64 {
        match self {
            Slot::Owned(tensor) => tensor.data.len() as u64 * 8,
            Slot::Borrowed(_) => 0,
        }
    }
}

/// The state of one evaluation.
struct Machine<'a> {
    block: &'a Block,
    dims: DimBindings,
    inputs: &'a BTreeMap<String, HostTensor>,
    round: bool,
    /// Computed values still needed, by value index.
    values: Vec<Option<Slot<'a>>>,
    last_use: Vec<usize>,
    live_bytes: u64,
    /// The most bytes of values live at once.
    limit: u64,
}

impl<'a> Machine<'a> {
    /// Evaluates one instruction, then frees the values it read for the last time.
    fn step(&mut self, value: Value, inst: &Inst) -> Result<(), EvalError> {
        let ty = self.block.types.get(value.index()).ok_or_else(|| self.malformed(format!("{value} has no type")))?;
        let (rows, cols) = bind_shape(&ty.shape, &self.dims)?;
        let slot = match inst {
            Inst::Param(index) => self.param(value, *index, (rows, cols))?,
            _ => Slot::Owned(self.computed(value, inst, ty.dtype, (rows, cols))?),
        };
        let place = self.values.get_mut(value.index());
        let place = place.ok_or_else(|| EvalError::Malformed {
            block: self.block.name.clone(),
            message: format!("{value} is outside the block"),
        })?;
        *place = Some(slot);
        self.free_dead(value, inst);
        Ok(())
    }

    /// A value the interpreter computes, of the given dtype and shape.
    fn computed(
        &mut self,
        value: Value,
        inst: &Inst,
        dtype: DType,
        (rows, cols): (usize, usize),
    ) -> Result<HostTensor, EvalError> {
        let elements = rows as u128 * cols as u128;
        self.reserve(elements, 0, value)?;
        let data = self.compute(value, inst, rows, cols)?;
        if data.len() as u128 != elements {
            let message = format!("{value} computed {} elements for [{rows}, {cols}]", data.len());
            return Err(self.malformed(message));
        }
        Ok(HostTensor { dtype, rows, cols, data })
    }

    /// Counts `elements` (plus `scratch` temporary ones) against the memory limit.
    fn reserve(&mut self, elements: u128, scratch: u128, value: Value) -> Result<(), EvalError> {
        let needed = u128::from(self.live_bytes) + (elements + scratch) * 8;
        if needed > u128::from(self.limit) {
            return Err(EvalError::OutOfMemory {
                what: self.describe(value),
                needed: u64::try_from(needed).unwrap_or(u64::MAX),
                limit: self.limit,
            });
        }
        self.live_bytes += u64::try_from(elements * 8).unwrap_or(u64::MAX);
        Ok(())
    }

    /// Drops the operands of `inst` (and `value`) whose last reader was `value`.
    fn free_dead(&mut self, value: Value, inst: &Inst) {
        let now = value.index();
        for candidate in inst.operands().into_iter().chain([value]) {
            if self.last_use.get(candidate.index()) != Some(&now) {
                continue;
            }
            if let Some(freed) = self.values.get_mut(candidate.index()).and_then(Option::take) {
                self.live_bytes = self.live_bytes.saturating_sub(freed.owned_bytes());
            }
        }
    }

    /// `` `h` `` for a named value, else `this expression`: errors carry
    /// the value's source span, so IR ids never reach the user.
    fn describe(&self, value: Value) -> String {
        match self.block.names.get(value.index()).cloned().flatten() {
            Some(name) => format!("`{name}`"),
            None => "this expression".to_string(),
        }
    }

    fn malformed(&self, message: String) -> EvalError {
        EvalError::Malformed { block: self.block.name.clone(), message }
    }

    /// A computed operand.
    fn operand(&self, value: Value) -> Result<&HostTensor, EvalError> {
        match self.values.get(value.index()).and_then(Option::as_ref) {
            Some(slot) if slot.tensor().is_consistent() => Ok(slot.tensor()),
            _ => Err(self.malformed(format!("{value} is read before it is defined"))),
        }
    }

    /// Operands that must all have the same shape.
    fn same_shape<const N: usize>(&self, values: [Value; N]) -> Result<[&HostTensor; N], EvalError> {
        let mut tensors = Vec::with_capacity(N);
        for value in values {
            tensors.push(self.operand(value)?);
        }
        if tensors.windows(2).any(|w| w[0].shape() != w[1].shape()) {
            return Err(self.malformed(format!("operands {values:?} differ in shape")));
        }
        tensors.try_into().map_err(|_| self.malformed("operand count".into()))
    }

    /// The data of one instruction's value, of shape `[rows, cols]`.
    fn compute(&mut self, value: Value, inst: &Inst, rows: usize, cols: usize) -> Result<Vec<f64>, EvalError> {
        match inst {
            Inst::Const(c) => Ok(vec![*c]),
            Inst::DimValue(dim) => Ok(vec![eval_dim(dim, &self.dims)? as f64]),
            Inst::Unary { op, arg } => self.map(*arg, |x| Ok(ops::unary(*op, x))),
            Inst::Cast { to, arg } => self.map(*arg, |x| Ok(cast(x, *to, self.round))),
            Inst::Binary { op, lhs, rhs } => {
                let [a, b] = self.same_shape([*lhs, *rhs])?;
                let pairs = a.data.iter().zip(&b.data);
                Ok(pairs.map(|(&x, &y)| ops::binary(*op, x, y)).collect())
            }
            Inst::Select { cond, on_true, on_false } => {
                let [c, t, f] = self.same_shape([*cond, *on_true, *on_false])?;
                let triples = c.data.iter().zip(&t.data).zip(&f.data);
                Ok(triples.map(|((&c, &t), &f)| if c != 0.0 { t } else { f }).collect())
            }
            Inst::MatMul { .. } => self.matmul(value, inst, rows as u128 * cols as u128),
            _ => self.compute_layout(value, inst, rows, cols),
        }
    }

    /// `f` applied to every element of `arg`.
    fn map(&self, arg: Value, f: impl Fn(f64) -> Result<f64, EvalError>) -> Result<Vec<f64>, EvalError> {
        self.operand(arg)?.data.iter().map(|&x| f(x)).collect()
    }

    /// The instructions that move values rather than compute them.
    fn compute_layout(&self, value: Value, inst: &Inst, rows: usize, cols: usize) -> Result<Vec<f64>, EvalError> {
        let shape_error = |message: String| self.malformed(format!("{value}: {message}"));
        match inst {
            Inst::Transpose { arg } => Ok(layout::transpose(self.operand(*arg)?)),
            Inst::Broadcast { arg, .. } => layout::broadcast(self.operand(*arg)?, rows, cols).map_err(shape_error),
            Inst::Reduce { op, axis, arg } => Ok(ops::reduce(*op, *axis, self.operand(*arg)?)),
            Inst::GroupReduce { op, groups, arg } => Ok(ops::group_reduce(*op, *groups, self.operand(*arg)?, cols)),
            Inst::GroupExpand { groups, arg, .. } => {
                let columns: Vec<usize> = (0..cols as i64).map(|n| groups.group_of(n) as usize).collect();
                layout::gather_cols(self.operand(*arg)?, &columns).map_err(shape_error)
            }
            Inst::SliceHeads { arg, part } => {
                let columns: Vec<usize> = (0..cols as i64).map(|c| part.source(c) as usize).collect();
                layout::gather_cols(self.operand(*arg)?, &columns).map_err(shape_error)
            }
            Inst::PadHeads { arg, part, .. } => {
                let arg = self.operand(*arg)?;
                let mut out = vec![0.0; rows * cols];
                for (n, from) in (0..cols as i64).filter_map(|n| Some((n as usize, part.position(n)? as usize))) {
                    for r in 0..rows {
                        out[r * cols + n] = arg.data.get(r * arg.cols + from).copied().unwrap_or(f64::NAN);
                    }
                }
                Ok(out)
            }
            Inst::SliceCols { arg, start, step, .. } => {
                self.slice(value, *arg, eval_dim(start, &self.dims)?, cols, *step)
            }
            Inst::ConcatCols { parts } => {
                let parts = parts.iter().map(|p| self.operand(*p)).collect::<Result<Vec<_>, _>>()?;
                layout::concat_cols(&parts, rows).map_err(shape_error)
            }
            Inst::StackRows { parts } => {
                let parts = parts.iter().map(|p| self.operand(*p)).collect::<Result<Vec<_>, _>>()?;
                layout::stack_rows(&parts, cols).map_err(shape_error)
            }
            Inst::Interleave { even, odd } => {
                layout::interleave(self.operand(*even)?, self.operand(*odd)?).map_err(shape_error)
            }
            Inst::TakeCols { arg, index } => self.take(*arg, *index),
            Inst::TopK { arg, k, indices } => Ok(ops::top_k(self.operand(*arg)?, *k as usize, *indices)),
            Inst::GatherRows { table, index } => {
                let (table, index) = (self.operand(*table)?, self.operand(*index)?);
                Ok(ops::gather_rows(table, index))
            }
            Inst::ScatterAddRows { arg, index, .. } => {
                let (arg, index) = (self.operand(*arg)?, self.operand(*index)?);
                Ok(ops::scatter_add_rows(arg, index, rows))
            }
            Inst::ScatterCols { arg, index, .. } => self.scatter(*arg, *index, cols),
            Inst::RopeTable { spec, table, .. } => {
                Ok(bind_rope(spec, &self.dims, &self.describe(value))?.table(*table, cols))
            }
            Inst::RopePartner { spec, arg } => self.rope_partner(value, spec, *arg),
            Inst::PermuteRows { arg, perm } => {
                let rows: Vec<usize> = (0..rows as i64).map(|p| perm.source(p) as usize).collect();
                layout::gather_rows(self.operand(*arg)?, &rows).map_err(shape_error)
            }
            Inst::PermuteCols { arg, perm } => {
                let columns: Vec<usize> = (0..cols as i64).map(|p| perm.source(p) as usize).collect();
                layout::gather_cols(self.operand(*arg)?, &columns).map_err(shape_error)
            }
            Inst::UnpermuteCols { arg, perm } => {
                let columns: Vec<usize> = (0..cols as i64).map(|c| perm.position(c) as usize).collect();
                layout::gather_cols(self.operand(*arg)?, &columns).map_err(shape_error)
            }
            _ => Err(self.malformed(format!("{value}: unexpected instruction"))),
        }
    }

    /// The param's input: used as it is when it already has the declared
    /// dtype, shape and (when rounding) representable values; else a
    /// normalized copy, rounded to the dtype when rounding.
    fn param(&mut self, value: Value, index: usize, (rows, cols): (usize, usize)) -> Result<Slot<'a>, EvalError> {
        let block = self.block;
        let decl =
            block.params.get(index).ok_or_else(|| self.malformed(format!("parameter {index} does not exist")))?;
        let given = input(self.inputs, decl, &self.dims)?;
        let rounds = self.round && decl.dtype.is_float();
        let exact = given.dtype == decl.dtype && given.shape() == (rows, cols);
        if exact && (!rounds || representable(&given.data, decl.dtype)) {
            return Ok(Slot::Borrowed(given));
        }
        self.reserve(rows as u128 * cols as u128, 0, value)?;
        let mut data = given.data.clone();
        if rounds {
            round_slice(&mut data, decl.dtype);
        }
        Ok(Slot::Owned(HostTensor { dtype: decl.dtype, rows, cols, data }))
    }

    /// A matrix product, its operand copies counted against the memory limit.
    fn matmul(&mut self, value: Value, inst: &Inst, output: u128) -> Result<Vec<f64>, EvalError> {
        let Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, operand_dtype } = inst else {
            return Err(self.malformed(format!("{value} is not a matmul")));
        };
        let (a, b) = (self.operand(*lhs)?, self.operand(*rhs)?);
        // With rounding on, a value of the operand type is already rounded.
        let round = |t: &HostTensor| (self.round && t.dtype != *operand_dtype).then_some(*operand_dtype);
        let mode = MatMulMode {
            lhs_transposed: *lhs_transposed,
            rhs_transposed: *rhs_transposed,
            round_lhs: round(a),
            round_rhs: round(b),
        };
        let scratch = scratch_elements(a, b, output);
        self.reserve(0, scratch, value)?;
        matmul(self.operand(*lhs)?, self.operand(*rhs)?, mode, &self.block.name)
    }

    fn slice(&self, value: Value, arg: Value, start: i64, len: usize, step: i64) -> Result<Vec<f64>, EvalError> {
        let arg = self.operand(arg)?;
        let out_of_range =
            || EvalError::SliceOutOfRange { what: self.describe(value), start, len, step, cols: arg.cols };
        let columns = layout::slice_columns(start, len, step, arg.cols).ok_or_else(out_of_range)?;
        layout::gather_cols(arg, &columns).map_err(|m| self.malformed(m))
    }

    fn take(&self, arg: Value, index: Value) -> Result<Vec<f64>, EvalError> {
        let (arg, index) = (self.operand(arg)?, self.operand(index)?);
        if index.shape() != (arg.rows, 1) {
            let message = format!("take index {:?} for a table {:?}", index.shape(), arg.shape());
            return Err(self.malformed(message));
        }
        Ok(ops::take_cols(arg, index))
    }

    fn scatter(&self, arg: Value, index: Value, cols: usize) -> Result<Vec<f64>, EvalError> {
        let (arg, index) = (self.operand(arg)?, self.operand(index)?);
        if index.shape() != arg.shape() || arg.cols != 1 {
            let message = format!("scatter of {:?} by an index {:?}", arg.shape(), index.shape());
            return Err(self.malformed(message));
        }
        Ok(ops::scatter_cols(arg, index, cols))
    }

    fn rope_partner(&self, value: Value, spec: &RopeSpec, arg: Value) -> Result<Vec<f64>, EvalError> {
        let what = self.describe(value);
        let arg = self.operand(arg)?;
        let partners = bind_rope(spec, &self.dims, &what)?.partners(arg.cols, &what)?;
        layout::gather_cols(arg, &partners).map_err(|m| self.malformed(m))
    }

    /// Every output, by name.
    fn outputs(mut self) -> Result<BTreeMap<String, HostTensor>, EvalError> {
        let mut results = BTreeMap::new();
        let block = self.block;
        for (k, output) in block.outputs.iter().enumerate() {
            let reused = block.outputs.iter().skip(k + 1).any(|o| o.value == output.value);
            let tensor = self.store(output, reused).map_err(|e| e.at(output.span))?;
            results.insert(output.tensor.name.clone(), tensor);
        }
        Ok(results)
    }

    /// The content of one output; `reused` when a later output stores the same value.
    fn store(&mut self, output: &Output, reused: bool) -> Result<HostTensor, EvalError> {
        let decl = &output.tensor;
        let (rows, cols) = bind_shape(&decl.shape, &self.dims)?;
        let shape = self.operand(output.value)?.shape();
        if shape != (rows, cols) {
            let message = format!("output `{}` stores {shape:?} into [{rows}, {cols}]", decl.name);
            return Err(self.malformed(message));
        }
        let taken = if reused { None } else { self.values.get_mut(output.value.index()).and_then(Option::take) };
        let mut data = match taken {
            Some(Slot::Owned(tensor)) => tensor.data,
            Some(Slot::Borrowed(tensor)) => {
                self.reserve(rows as u128 * cols as u128, 0, output.value)?;
                tensor.data.clone()
            }
            None => {
                self.reserve(rows as u128 * cols as u128, 0, output.value)?;
                self.operand(output.value)?.data.clone()
            }
        };
        if output.accumulate {
            self.add_previous(decl, &mut data)?;
        }
        self.finish(decl, &mut data);
        Ok(HostTensor { dtype: decl.dtype, rows, cols, data })
    }

    /// Adds the previous content of a `+=` output (rounded like a param).
    fn add_previous(&self, decl: &Tensor, data: &mut [f64]) -> Result<(), EvalError> {
        let previous = input(self.inputs, decl, &self.dims)?;
        for (x, &p) in data.iter_mut().zip(&previous.data) {
            *x += if self.round && decl.dtype.is_float() { round_to_dtype(p, decl.dtype) } else { p };
        }
        Ok(())
    }

    /// Converts stored data to the output's dtype.
    fn finish(&self, decl: &Tensor, data: &mut [f64]) {
        let converts = self.round || matches!(decl.dtype, DType::I32 | DType::Bool);
        if converts {
            round_slice(data, decl.dtype);
        }
    }
}

/// Whether every element is exactly a value of `dtype` (NaN counts as one).
fn representable(data: &[f64], dtype: DType) -> bool {
    data.iter().all(|&x| {
        let r = round_to_dtype(x, dtype);
        r.to_bits() == x.to_bits() || (r.is_nan() && x.is_nan())
    })
}
