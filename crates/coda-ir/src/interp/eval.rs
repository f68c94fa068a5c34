//! The evaluation loop: inputs, one instruction at a time, outputs.

use super::bind::{bind_shape, describe_shape, eval_dim, resolve_bindings, DimBindings};
use super::error::EvalError;
use super::layout;
use super::matmul::{matmul, scratch_elements, MatMulMode};
use super::ops;
use super::rope::bind_rope;
use super::round::{cast, round_slice};
use super::tensor::HostTensor;
use crate::block::{Block, Output, Tensor};
use crate::inst::{Inst, RopeSpec, Value};
use crate::ty::DType;
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
    eval_with_limit(block, dims, inputs, options, MEMORY_LIMIT_BYTES)
}

/// [`eval`] with `limit` bytes of live values instead of [`MEMORY_LIMIT_BYTES`].
pub(super) fn eval_with_limit(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
    options: &EvalOptions,
    limit: u64,
) -> Result<BTreeMap<String, HostTensor>, EvalError> {
    let dims = resolve_bindings(block, dims)?;
    check_all_inputs(block, &dims, inputs)?;
    let mut machine = Machine {
        block,
        dims,
        inputs,
        round: options.round_to_storage,
        values: vec![None; block.insts.len()],
        last_use: last_uses(block),
        live_bytes: 0,
        limit,
    };
    for (value, inst) in block.insts.iter() {
        machine.step(value, inst)?;
    }
    machine.outputs()
}

/// Checks every param and every `+=` output's previous content up front.
fn check_all_inputs(
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
) -> Result<(), EvalError> {
    let accumulated = block
        .outputs
        .iter()
        .filter(|o| o.accumulate)
        .map(|o| &o.tensor);
    for decl in block.params.iter().chain(accumulated) {
        input(inputs, decl, dims)?;
    }
    Ok(())
}

/// The input for `decl`, checked: present, of the bound shape (a flat
/// vector either way for rank 0 and 1), holding integers for `i32`.
fn input<'a>(
    inputs: &'a BTreeMap<String, HostTensor>,
    decl: &Tensor,
    dims: &DimBindings,
) -> Result<&'a HostTensor, EvalError> {
    let (rows, cols) = bind_shape(&decl.shape, dims)?;
    let name = decl.name.clone();
    let expected = || expected_input(decl, rows, cols, dims);
    let Some(given) = inputs.get(&decl.name) else {
        return Err(EvalError::MissingInput {
            name,
            expected: expected(),
        });
    };
    let flat = decl.rank < 2 && (given.rows == 1 || given.cols == 1);
    let fits = given.shape() == (rows, cols)
        || (flat && given.len() as u128 == rows as u128 * cols as u128);
    if !given.is_consistent() || !fits {
        return Err(EvalError::InputShape {
            name,
            expected: expected(),
            got: describe_given(given),
        });
    }
    if decl.dtype == DType::I32 {
        given.check_integers(&decl.name)?;
    }
    Ok(given)
}

/// The shape an input should have, for messages.
fn expected_input(decl: &Tensor, rows: usize, cols: usize, dims: &DimBindings) -> String {
    let shape = describe_shape(&decl.shape, dims);
    if decl.rank < 2 {
        format!(
            "a vector of {} elements, {shape}",
            rows.saturating_mul(cols)
        )
    } else {
        shape
    }
}

/// A given tensor's shape, for messages.
fn describe_given(given: &HostTensor) -> String {
    if given.is_consistent() {
        format!("[{}, {}]", given.rows, given.cols)
    } else {
        format!(
            "[{}, {}] with {} elements of data",
            given.rows,
            given.cols,
            given.len()
        )
    }
}

/// For each value, the index of the last instruction reading it (its own
/// index if none does, `usize::MAX` if an output stores it).
fn last_uses(block: &Block) -> Vec<usize> {
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

/// The state of one evaluation.
struct Machine<'a> {
    block: &'a Block,
    dims: DimBindings,
    inputs: &'a BTreeMap<String, HostTensor>,
    round: bool,
    /// Computed values still needed, by value index.
    values: Vec<Option<HostTensor>>,
    last_use: Vec<usize>,
    live_bytes: u64,
    /// The most bytes of values live at once.
    limit: u64,
}

impl Machine<'_> {
    /// Evaluates one instruction, then frees the values it read for the last time.
    fn step(&mut self, value: Value, inst: &Inst) -> Result<(), EvalError> {
        let ty = self
            .block
            .types
            .get(value.index())
            .ok_or_else(|| self.malformed(format!("{value} has no type")))?;
        let (rows, cols) = bind_shape(&ty.shape, &self.dims)?;
        let elements = rows as u128 * cols as u128;
        self.reserve(elements, 0, value)?;
        let data = self.compute(value, inst, rows, cols)?;
        if data.len() as u128 != elements {
            let message = format!(
                "{value} computed {} elements for [{rows}, {cols}]",
                data.len()
            );
            return Err(self.malformed(message));
        }
        let slot = self
            .values
            .get_mut(value.index())
            .ok_or_else(|| EvalError::Malformed {
                block: self.block.name.clone(),
                message: format!("{value} is outside the block"),
            })?;
        *slot = Some(HostTensor {
            dtype: ty.dtype,
            rows,
            cols,
            data,
        });
        self.free_dead(value, inst);
        Ok(())
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
            if let Some(freed) = self
                .values
                .get_mut(candidate.index())
                .and_then(Option::take)
            {
                self.live_bytes = self.live_bytes.saturating_sub(freed.data.len() as u64 * 8);
            }
        }
    }

    /// `%3`, or `` `h` (%3) `` for a named value.
    fn describe(&self, value: Value) -> String {
        match self.block.names.get(value.index()).cloned().flatten() {
            Some(name) => format!("`{name}` ({value})"),
            None => value.to_string(),
        }
    }

    fn malformed(&self, message: String) -> EvalError {
        EvalError::Malformed {
            block: self.block.name.clone(),
            message,
        }
    }

    /// A computed operand.
    fn operand(&self, value: Value) -> Result<&HostTensor, EvalError> {
        match self.values.get(value.index()) {
            Some(Some(tensor)) if tensor.is_consistent() => Ok(tensor),
            _ => Err(self.malformed(format!("{value} is read before it is defined"))),
        }
    }

    /// Operands that must all have the same shape.
    fn same_shape<const N: usize>(
        &self,
        values: [Value; N],
    ) -> Result<[&HostTensor; N], EvalError> {
        let mut tensors = Vec::with_capacity(N);
        for value in values {
            tensors.push(self.operand(value)?);
        }
        if tensors.windows(2).any(|w| w[0].shape() != w[1].shape()) {
            return Err(self.malformed(format!("operands {values:?} differ in shape")));
        }
        tensors
            .try_into()
            .map_err(|_| self.malformed("operand count".into()))
    }

    /// The data of one instruction's value, of shape `[rows, cols]`.
    fn compute(
        &mut self,
        value: Value,
        inst: &Inst,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<f64>, EvalError> {
        match inst {
            Inst::Param(index) => self.param(*index),
            Inst::Const(c) => Ok(vec![*c]),
            Inst::DimValue(dim) => Ok(vec![eval_dim(dim, &self.dims)? as f64]),
            Inst::Unary { op, arg } => Ok(self
                .operand(*arg)?
                .data
                .iter()
                .map(|&x| ops::unary(*op, x))
                .collect()),
            Inst::Binary { op, lhs, rhs } => {
                let [a, b] = self.same_shape([*lhs, *rhs])?;
                Ok(a.data
                    .iter()
                    .zip(&b.data)
                    .map(|(&x, &y)| ops::binary(*op, x, y))
                    .collect())
            }
            Inst::Select {
                cond,
                on_true,
                on_false,
            } => {
                let [c, t, f] = self.same_shape([*cond, *on_true, *on_false])?;
                let pick = |((&c, &t), &f): ((&f64, &f64), &f64)| if c != 0.0 { t } else { f };
                Ok(c.data.iter().zip(&t.data).zip(&f.data).map(pick).collect())
            }
            Inst::Cast { to, arg } => self
                .operand(*arg)?
                .data
                .iter()
                .map(|&x| cast(x, *to, self.round))
                .collect(),
            Inst::MatMul {
                lhs,
                rhs,
                lhs_transposed,
                rhs_transposed,
                operand_dtype,
            } => {
                let round_to = self.round.then_some(*operand_dtype);
                let mode = MatMulMode {
                    lhs_transposed: *lhs_transposed,
                    rhs_transposed: *rhs_transposed,
                    round_to,
                };
                self.matmul(value, *lhs, *rhs, mode)
            }
            _ => self.compute_layout(value, inst, rows, cols),
        }
    }

    /// The instructions that move values rather than compute them.
    fn compute_layout(
        &self,
        value: Value,
        inst: &Inst,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<f64>, EvalError> {
        let shape_error = |message: String| self.malformed(format!("{value}: {message}"));
        match inst {
            Inst::Transpose { arg } => Ok(layout::transpose(self.operand(*arg)?)),
            Inst::Broadcast { arg, .. } => {
                layout::broadcast(self.operand(*arg)?, rows, cols).map_err(shape_error)
            }
            Inst::Reduce { op, axis, arg } => Ok(ops::reduce(*op, *axis, self.operand(*arg)?)),
            Inst::SliceCols {
                arg, start, step, ..
            } => self.slice(value, *arg, eval_dim(start, &self.dims)?, cols, *step),
            Inst::ConcatCols { parts } => {
                let parts = parts
                    .iter()
                    .map(|p| self.operand(*p))
                    .collect::<Result<Vec<_>, _>>()?;
                layout::concat_cols(&parts, rows).map_err(shape_error)
            }
            Inst::Interleave { even, odd } => {
                layout::interleave(self.operand(*even)?, self.operand(*odd)?).map_err(shape_error)
            }
            Inst::TakeCols { arg, index } => self.take(*arg, *index),
            Inst::RopeTable { spec, table, .. } => {
                Ok(bind_rope(spec, &self.dims, &self.describe(value))?.table(*table, cols))
            }
            Inst::RopePartner { spec, arg } => self.rope_partner(value, spec, *arg),
            _ => Err(self.malformed(format!("{value}: unexpected instruction"))),
        }
    }

    /// The param's input, normalized, rounded to its dtype when rounding.
    fn param(&self, index: usize) -> Result<Vec<f64>, EvalError> {
        let decl = self
            .block
            .params
            .get(index)
            .ok_or_else(|| self.malformed(format!("parameter {index} does not exist")))?;
        let mut data = input(self.inputs, decl, &self.dims)?.data.clone();
        if self.round && decl.dtype.is_float() {
            round_slice(&mut data, decl.dtype).map_err(|e| with_tensor(e, &decl.name))?;
        }
        Ok(data)
    }

    fn matmul(
        &mut self,
        value: Value,
        lhs: Value,
        rhs: Value,
        mode: MatMulMode,
    ) -> Result<Vec<f64>, EvalError> {
        let scratch = scratch_elements(self.operand(lhs)?, self.operand(rhs)?);
        self.reserve(0, scratch, value)?;
        matmul(
            self.operand(lhs)?,
            self.operand(rhs)?,
            mode,
            &self.block.name,
        )
    }

    fn slice(
        &self,
        value: Value,
        arg: Value,
        start: i64,
        len: usize,
        step: i64,
    ) -> Result<Vec<f64>, EvalError> {
        let arg = self.operand(arg)?;
        let out_of_range = || EvalError::SliceOutOfRange {
            what: self.describe(value),
            start,
            len,
            step,
            cols: arg.cols,
        };
        let columns = layout::slice_columns(start, len, step, arg.cols).ok_or_else(out_of_range)?;
        layout::gather_cols(arg, &columns).map_err(|m| self.malformed(m))
    }

    fn take(&self, arg: Value, index: Value) -> Result<Vec<f64>, EvalError> {
        let (arg, index) = (self.operand(arg)?, self.operand(index)?);
        if index.shape() != (arg.rows, 1) {
            let message = format!(
                "take index {:?} for a table {:?}",
                index.shape(),
                arg.shape()
            );
            return Err(self.malformed(message));
        }
        Ok(ops::take_cols(arg, index))
    }

    fn rope_partner(
        &self,
        value: Value,
        spec: &RopeSpec,
        arg: Value,
    ) -> Result<Vec<f64>, EvalError> {
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
            let reused = block
                .outputs
                .iter()
                .skip(k + 1)
                .any(|o| o.value == output.value);
            let tensor = self.store(output, reused)?;
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
            let message = format!(
                "output `{}` stores {shape:?} into [{rows}, {cols}]",
                decl.name
            );
            return Err(self.malformed(message));
        }
        let mut data = if reused {
            self.reserve(rows as u128 * cols as u128, 0, output.value)?;
            self.operand(output.value)?.data.clone()
        } else {
            self.values
                .get_mut(output.value.index())
                .and_then(Option::take)
                .map(|t| t.data)
                .unwrap_or_default()
        };
        if output.accumulate {
            self.add_previous(decl, &mut data)?;
        }
        self.finish(decl, &mut data)?;
        Ok(HostTensor {
            dtype: decl.dtype,
            rows,
            cols,
            data,
        })
    }

    /// Adds the previous content of a `+=` output (rounded like a param).
    fn add_previous(&self, decl: &Tensor, data: &mut [f64]) -> Result<(), EvalError> {
        let previous = input(self.inputs, decl, &self.dims)?;
        for (x, &p) in data.iter_mut().zip(&previous.data) {
            let p = if self.round && decl.dtype.is_float() {
                super::round_to_dtype(p, decl.dtype)
            } else {
                Ok(p)
            };
            *x += p.map_err(|e| with_tensor(e, &decl.name))?;
        }
        Ok(())
    }

    /// Converts stored data to the output's dtype.
    fn finish(&self, decl: &Tensor, data: &mut [f64]) -> Result<(), EvalError> {
        let converts = self.round || matches!(decl.dtype, DType::I32 | DType::Bool);
        if converts {
            round_slice(data, decl.dtype).map_err(|e| with_tensor(e, &decl.name))?;
        }
        Ok(())
    }
}

/// Names the tensor in an unsupported-dtype error.
fn with_tensor(error: EvalError, name: &str) -> EvalError {
    match error {
        EvalError::Unsupported { what, message } => EvalError::Unsupported {
            what: format!("tensor `{name}`: {what}"),
            message,
        },
        other => other,
    }
}
