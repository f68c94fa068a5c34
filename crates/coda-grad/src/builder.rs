//! The backward block under construction: its interface, the recomputed
//! forward values, the gradient accumulators and small instruction helpers.
//!
//! Layout of the block as built (before [`crate::compact`] prunes it):
//! every forward param (same indices), one saved param per forward matmul,
//! one gradient param per differentiated output; then a copy of every
//! forward instruction in order (a matmul becomes a read of its saved
//! param); then the gradient code, in reverse forward order.

use crate::names::{grad_name, Names};
use crate::unary::{recompute, SharedParts};
use crate::{GradError, GradSpec, Saved, SavedLayout};
use coda_diagnostics::Span;
use coda_ir::{
    Axis, BinaryOp, Block, BlockKind, DType, Dim, Inst, Output, ReduceOp, Shape, Tensor, Ty, UnaryOp, Value,
};
use std::collections::HashMap;

/// The even (`parity` 0) or odd columns of a saved param in pair layout,
/// `half` of them.
fn paired_slice(param: Value, parity: i64, half: Dim) -> Inst {
    Inst::SliceCols { arg: param, start: Dim::constant(parity), len: half, step: 2 }
}

/// `v[:, :F]` or `v[:, F:]` of a value `v` saved in pair layout as `p`
/// (`paired[v] = p`): `p[:, 0::2]` or `p[:, 1::2]`.
fn half_of_paired(inst: &Inst, paired: &[Option<Value>]) -> Option<Inst> {
    let Inst::SliceCols { arg, start, len, step: 1 } = inst else { return None };
    let param = paired[arg.index()]?;
    let parity = i64::from(start.as_const()? != 0);
    Some(paired_slice(param, parity, len.clone()))
}

/// State of one differentiation.
pub(crate) struct Builder<'f> {
    pub(crate) fwd: &'f Block,
    spec: &'f GradSpec,
    pub(crate) active: Vec<bool>,
    pub(crate) bwd: Block,
    /// The backward copy of each forward value.
    primal: Vec<Value>,
    /// The gradient accumulated so far for each forward value.
    adj: Vec<Option<Value>>,
    /// The forward value each backward value recomputes, if any.
    origin: Vec<Option<Value>>,
    saved: Vec<Saved>,
    /// The gradient param of each differentiated output, in spec order.
    output_grads: Vec<Value>,
    names: Names,
    /// What the recomputed forward formed of each function with parts its
    /// derivative shares, by function and (backward) argument.
    shared_parts: HashMap<(UnaryOp, Value), SharedParts>,
    /// Each gradient quantized for fp8 products, and its scales, by
    /// gradient, axis of the amax and type ([`crate::fp8`]): every product
    /// that reads a gradient along the same axis reads one copy.
    pub(crate) quantized: HashMap<(Value, Axis, DType), (Value, Value)>,
}

/// The saved param that stands for a forward value, and its layout.
#[derive(Debug, Clone, Copy)]
struct SavedParam {
    index: usize,
    layout: SavedLayout,
}

impl<'f> Builder<'f> {
    /// What the recomputed forward formed of `op(x)` for its derivative
    /// to share ([`crate::unary::recompute`]).
    pub(crate) fn shared_parts(&self, op: UnaryOp, x: Value) -> Option<SharedParts> {
        self.shared_parts.get(&(op, x)).copied()
    }

    /// Declares the interface and recomputes the forward.
    /// The operands in `recomputed` are not saved
    /// ([`crate::saving::recomputed_operands`]).
    pub(crate) fn new(
        fwd: &'f Block,
        spec: &'f GradSpec,
        active: Vec<bool>,
        recomputed: &[Value],
    ) -> Result<Self, GradError> {
        let mut bwd = Block::new(spec.name.clone(), BlockKind::Block, spec.span);
        bwd.dims = fwd.dims.clone();
        bwd.params = fwd.params.clone();
        let mut names = Names::default();
        fwd.params.iter().for_each(|p| names.keep(&p.name));
        fwd.outputs.iter().for_each(|o| names.keep(&o.tensor.name));
        let n = fwd.insts.len();
        let mut builder = Builder {
            fwd,
            spec,
            active,
            bwd,
            primal: Vec::with_capacity(n),
            adj: vec![None; n],
            origin: Vec::new(),
            saved: Vec::new(),
            output_grads: Vec::new(),
            names,
            shared_parts: HashMap::new(),
            quantized: HashMap::new(),
        };
        let saved_params = builder.declare_saved(recomputed);
        let grad_params = builder.declare_output_grads();
        builder.copy_forward(&saved_params)?;
        for index in grad_params {
            let span = builder.bwd.params[index].span;
            let v = builder.emit(Inst::Param(index), span)?;
            let name = builder.bwd.params[index].name.clone();
            builder.bwd.set_name(v, &name);
            builder.output_grads.push(v);
        }
        Ok(builder)
    }

    /// One saved param per forward matmul (its [`crate::saving::save_point`],
    /// in pair layout when [`crate::saving::paired_halves`] says so: named
    /// `<name>_pairs`), and one per matmul operand saved in the operand type
    /// ([`crate::saving::saved_operands`]), in forward order: the saved
    /// value's name, or `mm<k>`.
    fn declare_saved(&mut self, recomputed: &[Value]) -> Vec<Option<SavedParam>> {
        let mut params = vec![None; self.fwd.insts.len()];
        let users = self.fwd.users();
        let mut chosen: Vec<(Value, Ty, String)> = Vec::new();
        let matmuls: Vec<Value> =
            self.fwd.insts.iter().filter(|(_, i)| matches!(i, Inst::MatMul { .. })).map(|(v, _)| v).collect();
        let matmul_name = |mm: Value| {
            let ordinal = matmuls.iter().position(|m| *m == mm).unwrap_or(0);
            self.fwd.names[mm.index()].clone().unwrap_or_else(|| format!("mm{ordinal}"))
        };
        for &mm in &matmuls {
            let v = crate::saving::save_point(self.fwd, &users, mm);
            chosen.push((v, self.fwd.ty(v).clone(), matmul_name(mm)));
        }
        let points: Vec<Value> = chosen.iter().map(|(v, ..)| *v).collect();
        for (v, dtype) in crate::saving::saved_operands(self.fwd, &users, &points, recomputed) {
            let ty = Ty { dtype, shape: self.fwd.ty(v).shape.clone() };
            // Unnamed: after the matmul that reads it (`mm2_in`).
            let user = users[v.index()].first().copied().unwrap_or(v);
            chosen.push((v, ty, format!("{}_in", matmul_name(user))));
        }
        // Two matmuls whose results feed one residual sum share its cast as
        // their save point (GPT-NeoX's `x0 + attn @ w_o.T + mlp`): one param.
        chosen.sort_by_key(|(v, ..)| v.index());
        chosen.dedup_by_key(|(v, ..)| *v);
        for (v, ty, fallback) in chosen {
            let base = self.fwd.names[v.index()].clone().unwrap_or(fallback);
            let paired = crate::saving::paired_halves(self.fwd, &users, v).is_some();
            let layout = if paired { SavedLayout::PairedHalves } else { SavedLayout::Plain };
            let output = if paired { None } else { crate::saving::output_holding(self.fwd, v, &ty) };
            let name = match output {
                Some(j) => self.fwd.outputs[j].tensor.name.clone(),
                None => self.names.fresh(&if paired { format!("{base}_pairs") } else { base }),
            };
            self.saved.push(Saved { name: name.clone(), value: v, ty: ty.clone(), layout, output });
            let span = self.fwd.insts.span(v);
            self.bwd.params.push(Tensor { name, dtype: ty.dtype, shape: ty.shape, rank: 2, span });
            params[v.index()] = Some(SavedParam { index: self.bwd.params.len() - 1, layout });
        }
        // Normalised tensors and row statistics the forward outputs: one
        // param per output, the output's own tensor, for the value it holds
        // or for every reduction it holds.
        let mut by_output: Vec<Option<usize>> = vec![None; self.fwd.outputs.len()];
        let held = crate::saving::normalized_outputs(self.fwd, &points);
        for (v, j) in held.into_iter().chain(crate::saving::statistics_in_outputs(self.fwd)) {
            if params[v.index()].is_some() {
                continue;
            }
            let index = match by_output[j] {
                Some(index) => index,
                None => {
                    let tensor = self.fwd.outputs[j].tensor.clone();
                    let value = self.fwd.outputs[j].value;
                    let ty = self.fwd.ty(value).clone();
                    let saved =
                        Saved { name: tensor.name.clone(), value, ty, layout: SavedLayout::Plain, output: Some(j) };
                    self.saved.push(saved);
                    self.bwd.params.push(Tensor { span: self.fwd.insts.span(value), ..tensor });
                    by_output[j] = Some(self.bwd.params.len() - 1);
                    self.bwd.params.len() - 1
                }
            };
            params[v.index()] = Some(SavedParam { index, layout: SavedLayout::Plain });
        }
        params
    }

    /// One param `d<output>` per differentiated output, typed like the output.
    fn declare_output_grads(&mut self) -> Vec<usize> {
        let mut indices = Vec::new();
        for &j in &self.spec.outputs {
            let tensor = &self.fwd.outputs[j].tensor;
            let name = self.names.fresh(&grad_name(&tensor.name));
            self.bwd.params.push(Tensor { name, ..tensor.clone() });
            indices.push(self.bwd.params.len() - 1);
        }
        indices
    }

    /// Copies every forward instruction (a matmul becomes its saved param;
    /// a value saved in pair layout, the concatenation of the param's even
    /// and odd columns, and each of its halves, the even or odd columns).
    fn copy_forward(&mut self, saved_params: &[Option<SavedParam>]) -> Result<(), GradError> {
        let mut paired: Vec<Option<Value>> = vec![None; self.fwd.insts.len()];
        for (v, inst) in self.fwd.insts.iter() {
            let span = self.fwd.insts.span(v);
            let b = match saved_params[v.index()] {
                Some(SavedParam { index, layout: SavedLayout::PairedHalves }) => {
                    let param = self.emit(Inst::Param(index), span)?;
                    paired[v.index()] = Some(param);
                    self.unpair(param, span)?
                }
                // The builder saves in the two layouts only (`shifted` rewrites later).
                Some(SavedParam { index, .. }) => {
                    let param = self.emit(Inst::Param(index), span)?;
                    // A per-row statistic read from a vector output.
                    match self.bwd.ty(param).shape == self.fwd.ty(v).shape {
                        true => param,
                        false => self.emit(Inst::Transpose { arg: param }, span)?,
                    }
                }
                None => match (half_of_paired(inst, &paired), inst) {
                    (Some(slice), _) => self.emit(slice, span)?,
                    (None, Inst::Unary { op, arg }) => {
                        let x = self.primal[arg.index()];
                        match recompute(self, *op, x, span)? {
                            Some((y, parts)) => {
                                self.shared_parts.insert((*op, x), parts);
                                y
                            }
                            None => self.emit(Inst::Unary { op: *op, arg: x }, span)?,
                        }
                    }
                    (None, _) => self.emit(inst.map_operands(|o| self.primal[o.index()]), span)?,
                },
            };
            if let Some(name) = &self.fwd.names[v.index()] {
                self.bwd.set_name(b, name);
            }
            self.origin[b.index()] = Some(v);
            self.primal.push(b);
        }
        Ok(())
    }

    /// `[p[:, 0::2] | p[:, 1::2]]` of a saved param `p` in
    /// [`SavedLayout::PairedHalves`]: the value in its own column order.
    fn unpair(&mut self, param: Value, span: Span) -> Result<Value, GradError> {
        let cols = self.bwd.ty(param).shape.cols.as_const();
        let half = cols.ok_or_else(|| GradError::Internal("a paired saved tensor of run-time width".into()))? / 2;
        let mut parts = Vec::with_capacity(2);
        for parity in 0..2 {
            parts.push(self.emit(paired_slice(param, parity, Dim::constant(half)), span)?);
        }
        self.emit(Inst::ConcatCols { parts }, span)
    }

    /// Seeds each differentiated output's value with its gradient param.
    pub(crate) fn seed_outputs(&mut self) -> Result<(), GradError> {
        for (k, &j) in self.spec.outputs.iter().enumerate() {
            let value = self.fwd.outputs[j].value;
            self.accumulate(value, self.output_grads[k])?;
        }
        Ok(())
    }

    /// Adds one output `d<input>` per requested input; returns the inputs whose gradient is zero.
    pub(crate) fn finish_outputs(&mut self) -> Result<Vec<usize>, GradError> {
        let mut zero = Vec::new();
        for &i in &self.spec.wrt {
            let param = self.fwd.params[i].clone();
            let value = self.fwd.insts.iter().find(|(_, inst)| **inst == Inst::Param(i)).map(|(v, _)| v);
            let gradient = match value.and_then(|v| self.adj[v.index()]) {
                Some(g) => g,
                None => {
                    zero.push(i);
                    self.full(0.0, &param.shape, param.span)?
                }
            };
            let tensor = Tensor { name: self.names.fresh(&grad_name(&param.name)), ..param };
            let span = tensor.span;
            self.bwd.outputs.push(Output { tensor, value: gradient, accumulate: false, span });
        }
        Ok(zero)
    }

    /// The block, the forward origin of each value, every saved candidate and
    /// the names of the output-gradient params.
    pub(crate) fn into_parts(self) -> (Block, Vec<Option<Value>>, Vec<Saved>, Vec<String>) {
        let names = self.output_grads.iter().map(|v| self.bwd.names[v.index()].clone().unwrap_or_default()).collect();
        (self.bwd, self.origin, self.saved, names)
    }

    /// The backward copy of a forward value.
    pub(crate) fn primal(&self, v: Value) -> Value {
        self.primal[v.index()]
    }

    /// The finished gradient of a forward value, named `d<name>` when the value has a name.
    pub(crate) fn take_gradient(&mut self, v: Value) -> Result<Option<Value>, GradError> {
        let Some(g) = self.adj[v.index()] else { return Ok(None) };
        let g = match self.fwd.inst(v) {
            Inst::Cast { to, .. } => self.in_storage_type(g, *to, self.fwd.insts.span(v))?,
            _ => g,
        };
        if let Some(name) = &self.fwd.names[v.index()] {
            if self.bwd.names[g.index()].is_none() {
                self.bwd.set_name(g, &grad_name(name));
            }
        }
        Ok(Some(g))
    }

    /// `g` rounded to `dtype` when that is a 16-bit float and `g` is wider:
    /// the gradient of a tensor stored in 16 bits is itself a 16-bit tensor,
    /// as in PyTorch's autograd (docs/backward.md §3).
    pub(crate) fn in_storage_type(&mut self, g: Value, dtype: DType, span: Span) -> Result<Value, GradError> {
        if !dtype.is_half() || self.bwd.ty(g).dtype == dtype {
            return Ok(g);
        }
        // A concatenation stays one, of rounded parts (a GEMM epilogue
        // stores it a part at a time).
        if let Inst::ConcatCols { parts } = self.bwd.inst(g).clone() {
            let mut rounded = Vec::with_capacity(parts.len());
            for part in parts {
                rounded.push(self.in_storage_type(part, dtype, span)?);
            }
            return self.emit(Inst::ConcatCols { parts: rounded }, span);
        }
        self.emit(Inst::Cast { to: dtype, arg: g }, span)
    }

    /// Adds `contribution` to the gradient of `v` (nothing if `v` is not active).
    pub(crate) fn accumulate(&mut self, v: Value, contribution: Value) -> Result<(), GradError> {
        if !self.active[v.index()] {
            return Ok(());
        }
        let span = self.fwd.insts.span(v);
        let total = match self.adj[v.index()] {
            None => contribution,
            Some(sum) => self.add(sum, contribution, span)?,
        };
        self.adj[v.index()] = Some(total);
        Ok(())
    }

    /// `a + b`, where sums of column blocks stay blocks:
    /// `[a₀ | a₁] + [b₀ | b₁] = [a₀ + b₀ | a₁ + b₁]` when the blocks line
    /// up, and `0 + x = x`. The gradient of a value sliced several ways (the
    /// `[gate | up]` halves of a SwiGLU) is then one concatenation of the
    /// pieces' gradients, not a sum of zero-padded copies: a GEMM epilogue
    /// can store it a piece at a time (docs/backward.md).
    fn add(&mut self, a: Value, b: Value, span: Span) -> Result<Value, GradError> {
        if self.is_zero(a) && self.bwd.ty(a).shape == self.bwd.ty(b).shape {
            return Ok(b);
        }
        if self.is_zero(b) && self.bwd.ty(a).shape == self.bwd.ty(b).shape {
            return Ok(a);
        }
        let blocks = |s: &Self, v: Value| match s.bwd.inst(v) {
            Inst::ConcatCols { parts } => Some(parts.clone()),
            _ => None,
        };
        if let (Some(pa), Some(pb)) = (blocks(self, a), blocks(self, b)) {
            let width = |s: &Self, p: &[Value]| p.iter().map(|v| s.bwd.ty(*v).shape.clone()).collect::<Vec<_>>();
            if pa.len() == pb.len() && width(self, &pa) == width(self, &pb) {
                let mut parts = Vec::with_capacity(pa.len());
                for (x, y) in pa.into_iter().zip(pb) {
                    parts.push(self.add(x, y, span)?);
                }
                return self.emit(Inst::ConcatCols { parts }, span);
            }
        }
        self.bin(BinaryOp::Add, a, b, span)
    }

    /// `g` cut into column blocks of `widths`: the parts of a concatenation
    /// that has exactly those blocks, else slices.
    pub(crate) fn column_pieces(&mut self, g: Value, widths: &[Dim], span: Span) -> Result<Vec<Value>, GradError> {
        if let Inst::ConcatCols { parts } = self.bwd.inst(g) {
            let blocks: Vec<Dim> = parts.iter().map(|p| self.bwd.ty(*p).shape.cols.clone()).collect();
            if blocks == widths {
                return Ok(parts.clone());
            }
        }
        let mut pieces = Vec::with_capacity(widths.len());
        let mut offset = Dim::constant(0);
        for w in widths {
            let slice = Inst::SliceCols { arg: g, start: offset.clone(), len: w.clone(), step: 1 };
            pieces.push(self.emit(slice, span)?);
            offset = offset.add(w).map_err(|e| GradError::Internal(e.to_string()))?;
        }
        Ok(pieces)
    }

    /// Whether `v` is the constant 0 (broadcast or not).
    fn is_zero(&self, v: Value) -> bool {
        match self.bwd.inst(v) {
            Inst::Const(c) => *c == 0.0,
            Inst::Broadcast { arg, .. } => self.is_zero(*arg),
            _ => false,
        }
    }

    /// Appends an instruction.
    pub(crate) fn emit(&mut self, inst: Inst, span: Span) -> Result<Value, GradError> {
        let v = self.bwd.push(inst, span).map_err(|e| GradError::Internal(e.0))?;
        self.origin.push(None);
        Ok(v)
    }

    /// A scalar constant.
    pub(crate) fn konst(&mut self, c: f64, span: Span) -> Result<Value, GradError> {
        self.emit(Inst::Const(c), span)
    }

    /// The constant `c` at every element of `shape`.
    pub(crate) fn full(&mut self, c: f64, shape: &Shape, span: Span) -> Result<Value, GradError> {
        let scalar = self.konst(c, span)?;
        self.broadcast(scalar, shape, span)
    }

    /// `v` widened to `shape` (itself if it has that shape).
    pub(crate) fn broadcast(&mut self, v: Value, shape: &Shape, span: Span) -> Result<Value, GradError> {
        if &self.bwd.ty(v).shape == shape {
            return Ok(v);
        }
        self.emit(Inst::Broadcast { arg: v, shape: shape.clone() }, span)
    }

    /// The shape both operands broadcast to.
    fn joint(&self, a: Value, b: Value) -> Shape {
        let (sa, sb) = (&self.bwd.ty(a).shape, &self.bwd.ty(b).shape);
        let pick = |x: &Dim, y: &Dim| if x.is_one() { y.clone() } else { x.clone() };
        Shape::new(pick(&sa.rows, &sb.rows), pick(&sa.cols, &sb.cols))
    }

    /// `op(a, b)`, broadcasting a scalar or vector operand to the other's shape.
    pub(crate) fn bin(&mut self, op: BinaryOp, a: Value, b: Value, span: Span) -> Result<Value, GradError> {
        let shape = self.joint(a, b);
        let a = self.broadcast(a, &shape, span)?;
        let b = self.broadcast(b, &shape, span)?;
        self.emit(Inst::Binary { op, lhs: a, rhs: b }, span)
    }

    /// `a * c` for a constant `c`.
    pub(crate) fn scale(&mut self, a: Value, c: f64, span: Span) -> Result<Value, GradError> {
        let c = self.konst(c, span)?;
        self.bin(BinaryOp::Mul, a, c, span)
    }

    /// `op(a)`.
    pub(crate) fn un(&mut self, op: UnaryOp, a: Value, span: Span) -> Result<Value, GradError> {
        self.emit(Inst::Unary { op, arg: a }, span)
    }

    /// `cond ? t : f`, the branches broadcast to the condition's shape.
    pub(crate) fn select(&mut self, cond: Value, t: Value, f: Value, span: Span) -> Result<Value, GradError> {
        let shape = self.bwd.ty(cond).shape.clone();
        let t = self.broadcast(t, &shape, span)?;
        let f = self.broadcast(f, &shape, span)?;
        self.emit(Inst::Select { cond, on_true: t, on_false: f }, span)
    }

    /// `g` where `cond` holds, 0 elsewhere.
    pub(crate) fn mask(&mut self, cond: Value, g: Value, span: Span) -> Result<Value, GradError> {
        let zero = self.konst(0.0, span)?;
        self.select(cond, g, zero, span)
    }

    /// A reduction along one axis.
    pub(crate) fn reduce(&mut self, op: ReduceOp, axis: Axis, a: Value, span: Span) -> Result<Value, GradError> {
        self.emit(Inst::Reduce { op, axis, arg: a }, span)
    }
}
