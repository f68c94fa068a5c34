//! What the forward saves for the backward ([`save_point`]) and the saving
//! forward: the forward block with one more output per saved tensor, which
//! is what a training step runs before the backward.

use crate::{GradError, Saved, SavedLayout};
use coda_ir::{Axis, BinaryOp, Block, ColGroups, DType, Dim, Inst, Output, ReduceOp, Tensor, UnaryOp, Value};

/// The value saved for matmul `mm`: the matmul result itself, or, when the
/// result's only use is a chain of additions (residuals) ending in a cast to
/// a 16-bit type, that cast: `x1 = bf16(x0 + attn @ w_o.T)` saves `x1`
/// (bf16) instead of the f32 product. Exact: the backward never reads the
/// chain's f32 values (the derivatives of `+`, `−` and a cast need no
/// primal, the matmul's needs only its operands), and the cast is computed
/// the same way in both blocks. It halves the saved bytes, and the forward
/// already stores the cast (it is the next residual stream).
pub(crate) fn save_point(fwd: &Block, users: &[Vec<Value>], mm: Value) -> Value {
    let is_output = |v: Value| fwd.outputs.iter().any(|o| o.value == v);
    let mut v = mm;
    loop {
        let [user] = users[v.index()].as_slice() else { return mm };
        if is_output(v) {
            return mm;
        }
        match fwd.inst(*user) {
            Inst::Binary { op: BinaryOp::Add | BinaryOp::Sub, lhs, rhs } if lhs != rhs => v = *user,
            Inst::Cast { to, .. } if to.is_half() => return *user,
            _ => return mm,
        }
    }
}

/// Matmul operands saved in the operand type, beside the matmul results:
/// an `f32` operand `x` (not a block input) whose every user is a matmul
/// with the same operand type `D`, and whose recomputation would read saved
/// matmul results of more bytes than `x` has in `D`, unless `x` is in
/// `recomputed` ([`recomputed_operands`]). The GELU output `a` of
/// `a @ w_out.T` would be the case: the backward needs `a` only as the
/// weight-gradient GEMM's operand, which rounds it to `D` anyway, so
/// reading `a` in `D` is exact, and it reads `M × F` 16-bit values instead
/// of the `M × F` `f32` of its pre-activation. Not a normalized operand
/// (see [`saved_sources`]). Returns `(x, D)` pairs.
pub(crate) fn saved_operands(
    fwd: &Block,
    users: &[Vec<Value>],
    points: &[Value],
    recomputed: &[Value],
) -> Vec<(Value, DType)> {
    let mut out: Vec<(Value, DType)> = Vec::new();
    for (_, inst) in fwd.insts.iter() {
        let Inst::MatMul { lhs, rhs, operand_dtype, .. } = inst else { continue };
        for x in [*lhs, *rhs] {
            let taken = points.contains(&x) || out.iter().any(|(v, _)| *v == x) || recomputed.contains(&x);
            if taken || matches!(fwd.inst(x), Inst::Param(_)) || fwd.ty(x).dtype != DType::F32 {
                continue;
            }
            let only_matmuls = users[x.index()].iter().all(|u| {
                matches!(fwd.inst(*u), Inst::MatMul { operand_dtype: d, lhs, rhs, .. }
                    if d == operand_dtype && (*lhs == x || *rhs == x))
            });
            let is_output = fwd.outputs.iter().any(|o| o.value == x);
            let saved_bytes =
                |v: Value| fwd.ty(v).shape.cols.as_const().map(|c| c * fwd.ty(v).dtype.size_bytes() as i64);
            let own = saved_bytes(x).map(|b| b / 4 * operand_dtype.size_bytes() as i64);
            let read: Option<i64> = saved_sources(fwd, x, points).and_then(|s| s.into_iter().map(saved_bytes).sum());
            if only_matmuls && !is_output && own.zip(read).is_some_and(|(own, read)| read > own) {
                out.push((x, *operand_dtype));
            }
        }
    }
    out
}

/// A saved matmul operand `x` is recomputed instead when it is an
/// element-wise function of tensors the backward reads anyway:
///
/// `x = f(s_1, …, s_k)`, with `f` made of element-wise work, broadcasts and
/// column gathers only (no reduction, no matmul), and every `s_i` a saved
/// matmul result or a block input that the backward reads for another
/// reason; then `x` read saved equals `f(s_1, …, s_k)` recomputed in the
/// backward, which copies the forward's instructions of `f`.
///
/// Numerics: exact. The forward evaluates `f` on the same `s_i` (a matmul
/// result saved rounded is the rounded value the forward itself reads) in
/// `f32` and rounds `x` to the operand type for its matmul; the backward
/// evaluates the same instructions on the same values and the weight
/// gradient's matmul rounds to the same type. The SwiGLU output
/// `y = swiglu(z)` of `y @ w_down.T` is the case: the backward reads the
/// saved `z` for `dz` anyway, so keeping `y` (`M × F` 16-bit values a
/// layer, from the forward to the backward) buys no read; the code
/// generator evaluates `y` in the epilogue of the GEMM that already loads
/// `z` at the same tile coordinates (`dy = dx @ w_down`), which then stores
/// it for the weight gradient.
///
/// `saved` and `backward` are those of a differentiation that saved every
/// operand of [`saved_operands`]: the backward reads a tensor "anyway" when
/// it reads it with `x` saved.
pub(crate) fn recomputed_operands(fwd: &Block, saved: &[Saved], backward: &Block) -> Vec<Value> {
    let users = fwd.users();
    let points: Vec<Value> = fwd
        .insts
        .iter()
        .filter(|(_, inst)| matches!(inst, Inst::MatMul { .. }))
        .map(|(mm, _)| save_point(fwd, &users, mm))
        .collect();
    let read_saved: Vec<Value> = saved.iter().map(|s| s.value).collect();
    let reads_input = |index: usize| fwd.params.get(index).is_some_and(|p| backward.param(&p.name).is_some());
    let mut out = Vec::new();
    for (x, _) in saved_operands(fwd, &users, &points, &[]) {
        if !read_saved.contains(&x) {
            continue;
        }
        let others: Vec<Value> = read_saved.iter().copied().filter(|v| *v != x).collect();
        let Some(leaves) = elementwise_leaves(fwd, x, &others) else { continue };
        let read_anyway = leaves.iter().all(|leaf| match fwd.inst(*leaf) {
            Inst::Param(index) => reads_input(*index),
            _ => others.contains(leaf),
        });
        if read_anyway {
            out.push(x);
        }
    }
    out
}

/// What a walk back from a value does at each value it meets.
enum Step {
    /// Record it and stop there.
    Take,
    /// Stop there without recording it.
    Skip,
    /// Give up: the walk's question has no answer.
    Fail,
    /// Go on to its operands.
    Descend,
}

/// The values recorded by a walk back from `x` over its operands, each
/// value met once and decided by `step`; `None` when `step` fails one.
fn walk_back(fwd: &Block, x: Value, mut step: impl FnMut(Value, &Inst) -> Step) -> Option<Vec<Value>> {
    let (mut stack, mut seen, mut found) = (vec![x], std::collections::BTreeSet::new(), Vec::new());
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        let inst = fwd.inst(v);
        match step(v, inst) {
            Step::Take => found.push(v),
            Step::Skip => {}
            Step::Fail => return None,
            Step::Descend => stack.extend(inst.operands()),
        }
    }
    Some(found)
}

/// The tensors `x` is computed from through element-wise work alone: the
/// values of `stops` and the block inputs it reaches; `None` when the walk
/// meets a reduction or a matmul (a value that is no element-wise function
/// of stored tensors).
fn elementwise_leaves(fwd: &Block, x: Value, stops: &[Value]) -> Option<Vec<Value>> {
    walk_back(fwd, x, |v, inst| match inst {
        _ if v != x && stops.contains(&v) => Step::Take,
        Inst::Param(_) => Step::Take,
        Inst::MatMul { .. } | Inst::Reduce { .. } | Inst::GroupReduce { .. } => Step::Fail,
        _ => Step::Descend,
    })
}

/// The saved matmul results (`f32`, their own save points) that the
/// recomputation of `x` reads, through everything but matmuls and inputs;
/// `None` when it goes through a reduction: then `x` is a normalized tile
/// that the forward does not materialize (a deferred norm applies its row
/// scale after the matmul), and saving it would cost the forward a kernel.
fn saved_sources(fwd: &Block, x: Value, points: &[Value]) -> Option<Vec<Value>> {
    walk_back(fwd, x, |v, inst| match inst {
        _ if points.contains(&v) => Step::Take,
        Inst::MatMul { .. } | Inst::Param(_) => Step::Skip,
        Inst::Reduce { .. } | Inst::GroupReduce { .. } => Step::Fail,
        _ => Step::Descend,
    })
}

/// `F` when the float value `v` of `2F` columns (a constant) is used only
/// through its halves `v[:, :F]` and `v[:, F:]` (the `[gate | up]` halves
/// of a gated activation) and is not an output: then it is saved in
/// [`SavedLayout::PairedHalves`], `interleave(v[:, :F], v[:, F:])`. Exact
/// (a permutation of the same values, `f32` or 16-bit), and the cheap order on both
/// sides: the forward computes `v` with its weight rows in pair layout
/// (`gated-pair-layout`), so the interleave is its accumulator as it is
/// and the store is an identity store instead of a scattered un-permuting
/// one; the backward reads the halves as the even and odd columns, the
/// four values of an accumulator pair being one 16-byte load.
pub(crate) fn paired_halves(fwd: &Block, users: &[Vec<Value>], v: Value) -> Option<i64> {
    let ty = fwd.ty(v);
    let cols = ty.shape.cols.as_const()?;
    let half = cols / 2;
    let is_output = fwd.outputs.iter().any(|o| o.value == v);
    if !ty.dtype.is_float() || cols % 2 != 0 || half == 0 || is_output || users[v.index()].is_empty() {
        return None;
    }
    let is_half = |u: &Value| {
        matches!(fwd.inst(*u), Inst::SliceCols { start, len, step: 1, .. }
            if len.as_const() == Some(half) && matches!(start.as_const(), Some(s) if s == 0 || s == half))
    };
    users[v.index()].iter().all(is_half).then_some(half)
}

/// The forward output that holds `v` as the saved tensor of type `ty`
/// would: its value, in the same type, stored (not accumulated) whole. The
/// residual stream `x2 = x_out` with `x_out = bf16(x1 + y @ w_down.T)` is
/// the case: the backward reads the output `x2` instead of a second copy.
pub(crate) fn output_holding(fwd: &Block, v: Value, ty: &coda_ir::Ty) -> Option<usize> {
    fwd.outputs.iter().position(|o| {
        o.value == v && !o.accumulate && o.tensor.dtype == ty.dtype && o.tensor.rank == 2 && *fwd.ty(v) == *ty
    })
}

/// Normalised tensors that the forward outputs: `(v, j)` for each output
/// `j` of a 16-bit type, stored whole, whose value `v` is no save point and
/// depends, through everything but matmuls and inputs, on a reduction (a
/// norm's statistic, [`saved_sources`]). The backward reads the output
/// instead of recomputing it, which would read every tensor it is made of
/// and redo each statistic on the way: Gemma-2's layer output
/// `x2 = bf16(x1 + rmsnorm(mlp, …))`, with `x1 = bf16(x0 + rmsnorm(mm0,
/// …))`, which the next layer's input norm reads, would be recomputed from
/// `x0`, `mm0` and `mlp` and their two row statistics. Exact: the output
/// is the value of the same instructions on the same values; and free, as
/// the forward stores it anyway.
pub(crate) fn normalized_outputs(fwd: &Block, points: &[Value]) -> Vec<(Value, usize)> {
    let held = |o: &Output| {
        let ty = fwd.ty(o.value);
        !o.accumulate && o.tensor.rank == 2 && o.tensor.dtype == ty.dtype && ty.dtype.is_half()
    };
    (fwd.outputs.iter().enumerate())
        .filter(|(_, o)| held(o) && !points.contains(&o.value) && saved_sources(fwd, o.value, points).is_none())
        .map(|(j, o)| (o.value, j))
        .collect()
}

/// Per-row statistics that the forward outputs: `(v, j)` for each
/// reduction over columns `v` (`[rows, 1]`: a row's sum, maximum or
/// log-sum-exp) that output `j` holds, as the same instruction on the same
/// operand, in `v`'s type, stored whole (as a column or as a vector). The
/// backward reads the output instead of recomputing the reduction, which
/// would read its whole operand again: `lse = logsumexp(logits, axis=-1)`
/// beside a cross-entropy spares the backward a pass over the `M × V`
/// logits. Exact: the output is the value of the same instruction on the
/// same value.
pub(crate) fn statistics_in_outputs(fwd: &Block) -> Vec<(Value, usize)> {
    fwd.insts
        .iter()
        .filter(|(_, inst)| matches!(inst, Inst::Reduce { axis: Axis::Cols, .. }))
        .filter_map(|(v, inst)| {
            let ty = fwd.ty(v);
            let held = |o: &Output| {
                !o.accumulate && o.tensor.dtype == ty.dtype && fwd.inst(o.value) == inst && fwd.ty(o.value) == ty
            };
            fwd.outputs.iter().position(held).map(|j| (v, j))
        })
        .collect()
}

/// `forward` plus an output for each saved tensor that no output holds
/// already ([`Saved::output`]), named `<forward>_saving`.
pub(crate) fn saving_forward(forward: &Block, saved: &[Saved]) -> Result<Block, GradError> {
    let mut block = forward.clone();
    block.name = format!("{}_saving", forward.name);
    let internal = |e: coda_ir::infer::TypeError| GradError::Internal(e.to_string());
    let mut maxima: Vec<(Value, i64, Value)> = Vec::new();
    for s in saved.iter().filter(|s| s.output.is_none()) {
        let span = forward.insts.span(s.value);
        let tensor = Tensor { name: s.name.clone(), dtype: s.ty.dtype, shape: s.ty.shape.clone(), rank: 2, span };
        let value = match s.layout {
            SavedLayout::Plain => s.value,
            SavedLayout::PairedHalves => {
                let half = s.ty.shape.cols.as_const().map(|c| c / 2).ok_or_else(|| {
                    GradError::Internal(format!("saved `{}` in pair layout has run-time columns", s.name))
                })?;
                let slice = |start: i64| Inst::SliceCols {
                    arg: s.value,
                    start: Dim::constant(start),
                    len: Dim::constant(half),
                    step: 1,
                };
                let even = block.push(slice(0), span).map_err(internal)?;
                let odd = block.push(slice(half), span).map_err(internal)?;
                block.push(Inst::Interleave { even, odd }, span).map_err(internal)?
            }
            SavedLayout::GroupMax { width } => group_max(&mut block, &mut maxima, s.value, width, span)?,
            SavedLayout::ShiftedExp { width } => {
                let m = group_max(&mut block, &mut maxima, s.value, width, span)?;
                let cols = forward.ty(s.value).shape.cols.clone();
                let shift = block.push(Inst::GroupExpand { groups: ColGroups::Heads(width), arg: m, cols }, span);
                let diff = Inst::Binary { op: BinaryOp::Sub, lhs: s.value, rhs: shift.map_err(internal)? };
                let diff = block.push(diff, span).map_err(internal)?;
                let e = block.push(Inst::Unary { op: UnaryOp::Exp, arg: diff }, span).map_err(internal)?;
                block.push(Inst::Cast { to: s.ty.dtype, arg: e }, span).map_err(internal)?
            }
        };
        block.outputs.push(Output { tensor, value, accumulate: false, span });
    }
    coda_ir::verify::verify(&block).map_err(|e| GradError::Internal(e.to_string()))?;
    Ok(block)
}

/// The maximum of `value` over each group of `width` columns, pushed once
/// per value and width ([`SavedLayout::GroupMax`] and the shift of its
/// [`SavedLayout::ShiftedExp`] are one reduction).
fn group_max(
    block: &mut Block,
    maxima: &mut Vec<(Value, i64, Value)>,
    value: Value,
    width: i64,
    span: coda_diagnostics::Span,
) -> Result<Value, GradError> {
    if let Some((.., m)) = maxima.iter().find(|(v, w, _)| *v == value && *w == width) {
        return Ok(*m);
    }
    let reduce = Inst::GroupReduce { op: ReduceOp::Max, groups: ColGroups::Heads(width), arg: value };
    let m = block.push(reduce, span).map_err(|e| GradError::Internal(e.to_string()))?;
    maxima.push((value, width, m));
    Ok(m)
}

/// The saved products of the backward block ([`coda_ir::SavedProduct`]):
/// every saved matmul result `op(P) @ op(W)` with `P` untransposed, `W` a
/// parameter the backward reads, and `P` and every column part of the
/// saved tensor recomputed by the backward (`origin` maps backward values
/// to the forward values they recompute).
pub(crate) fn saved_products(
    forward: &Block,
    backward: &Block,
    origin: &[Option<Value>],
    saved: &[Saved],
) -> Vec<coda_ir::SavedProduct> {
    saved.iter().filter_map(|s| saved_product(forward, backward, origin, s)).collect()
}

fn saved_product(
    forward: &Block,
    backward: &Block,
    origin: &[Option<Value>],
    s: &Saved,
) -> Option<coda_ir::SavedProduct> {
    // A product saved rounded (`bf16(P @ W)`, a save point) stands for the
    // product up to that rounding, a half ulp per value like the forward's
    // own rounding of its operands.
    let product = match forward.inst(s.value) {
        Inst::Cast { arg, to } if to.is_half() => *arg,
        _ => s.value,
    };
    let Inst::MatMul { lhs, rhs, lhs_transposed: false, rhs_transposed, operand_dtype } = forward.inst(product) else {
        return None;
    };
    let Inst::Param(w) = forward.inst(*rhs) else { return None };
    let param = |name: &str| {
        let (index, _) = backward.param(name)?;
        backward.insts.iter().find(|(_, i)| matches!(i, Inst::Param(p) if *p == index)).map(|(v, _)| v)
    };
    let recomputed = |f: Value| backward.insts.iter().map(|(v, _)| v).find(|v| origin.get(v.index()) == Some(&Some(f)));
    let parts = match s.layout {
        SavedLayout::Plain => vec![param(&s.name)?],
        SavedLayout::PairedHalves => {
            let half = s.ty.shape.cols.as_const()? / 2;
            let halves = forward.users()[s.value.index()].clone();
            let at = |start: i64| {
                halves.iter().copied().find(
                    |u| matches!(forward.inst(*u), Inst::SliceCols { start: s, .. } if s.as_const() == Some(start)),
                )
            };
            vec![recomputed(at(0)?)?, recomputed(at(half)?)?]
        }
        SavedLayout::ShiftedExp { .. } | SavedLayout::GroupMax { .. } => return None,
    };
    Some(coda_ir::SavedProduct {
        parts,
        lhs: recomputed(*lhs)?,
        rhs: param(&forward.params[*w].name)?,
        rhs_transposed: *rhs_transposed,
        operand_dtype: *operand_dtype,
    })
}
