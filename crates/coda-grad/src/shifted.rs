//! Saved logits as shifted exponentials: a saved matmul result `L` that
//! the backward reads only as `exp(L − r)`, with `r` one value per row (a
//! softmax against the row's log-sum-exp), is saved as
//!
//! ```text
//! m = max of L over each group of w columns       f32[M, N / w]
//! e = bf16(exp(L − expand(m)))                    bf16[M, N], in (0, 1]
//! ```
//!
//! and the backward reads `exp(L − r) = e · exp(expand(m) − r)`.
//!
//! This is the cross-entropy backward's `softmax(logits)`: at the LM head's
//! `M × 128256` logits it halves what the forward stores and the backward
//! reads (2.1 GB instead of 4.2 at M = 8192), and the forward computes `e`
//! in its GEMM's epilogue from the per-head maximum (a tile-local
//! reduction when a warp holds whole groups, `docs/codegen.md`), beside
//! the log-sum-exp partials it already forms there.
//!
//! Numerics: `e` is rounded to bf16, a relative error of at most 2⁻⁹ per
//! probability. The backward rounds its `softmax − onehot` to bf16 for the
//! dgrad and wgrad GEMMs anyway, so each probability's error is at most
//! twice that rounding's; at the target column the probability's absolute
//! error is at most 2⁻⁹ of it, before `− 1`. PyTorch's bf16 logits round
//! the logit itself, an error of 2⁻⁹ of the logit inside the exponential.
//! The shift keeps `e` in `(0, 1]` whatever the logits' range, so nothing
//! overflows or flushes that the `f32` form would keep.

use crate::{GradError, Saved, SavedLayout};
use coda_ir::{BinaryOp, Block, ColGroups, DType, Dim, Inst, Shape, Tensor, UnaryOp, Value};

/// A backward block, the forward origin of each of its values, and the saved tensors it reads.
type Rewritten = (Block, Vec<Option<Value>>, Vec<Saved>);

/// Group widths tried, widest first: a multiple of 8 that a warp's columns
/// hold on every mainloop keeps the maximum in the producing GEMM's
/// epilogue.
const WIDTHS: [i64; 4] = [64, 32, 16, 8];

/// A saved tensor to rewrite: its index in the saved list, its param's
/// index and backward value, the `exp` reading it, the row value
/// subtracted, and its groups of `width` columns.
struct Site {
    saved: usize,
    param_index: usize,
    param: Value,
    exp: Value,
    row_value: Value,
    width: i64,
    groups: i64,
}

/// Rewrites every saved matmul result that the backward reads only through
/// `exp(L − broadcast(r))`; returns the backward, its forward origins and
/// the saved list unchanged when there is none.
pub(crate) fn shifted_exponentials(
    backward: Block,
    origin: Vec<Option<Value>>,
    saved: Vec<Saved>,
) -> Result<Rewritten, GradError> {
    let users = backward.users();
    let sites: Vec<Site> = saved.iter().enumerate().filter_map(|(i, s)| site(&backward, &users, i, s)).collect();
    if sites.is_empty() {
        return Ok((backward, origin, saved));
    }
    let (block, origin, saved) = rebuild(&backward, &origin, saved, &sites)?;
    let (block, origin) = crate::compact::compact(&block, &origin).map_err(GradError::Internal)?;
    Ok((block, origin, saved))
}

/// The rewrite site of saved tensor `s`, if the backward reads it only as
/// `exp(L − broadcast(r))` with `r` one column, and a width of [`WIDTHS`]
/// divides its columns.
fn site(backward: &Block, users: &[Vec<Value>], index: usize, s: &Saved) -> Option<Site> {
    if s.layout != SavedLayout::Plain || s.ty.dtype != DType::F32 || s.output.is_some() {
        return None;
    }
    let cols = s.ty.shape.cols.as_const()?;
    let width = WIDTHS.into_iter().find(|w| cols % w == 0 && cols > *w)?;
    let (param_index, _) = backward.param(&s.name)?;
    let param = backward.insts.iter().find(|(_, i)| **i == Inst::Param(param_index)).map(|(v, _)| v)?;
    let [sub] = users[param.index()].as_slice() else { return None };
    let Inst::Binary { op: BinaryOp::Sub, lhs, rhs } = backward.inst(*sub) else { return None };
    if *lhs != param {
        return None;
    }
    let Inst::Broadcast { arg: row_value, .. } = backward.inst(*rhs) else { return None };
    if backward.ty(*row_value).shape.cols.as_const() != Some(1) || backward.ty(*row_value).shape.rows != s.ty.shape.rows
    {
        return None;
    }
    let [exp] = users[sub.index()].as_slice() else { return None };
    let is_exp = matches!(backward.inst(*exp), Inst::Unary { op: UnaryOp::Exp, .. });
    let groups = cols / width;
    is_exp.then_some(Site { saved: index, param_index, param, exp: *exp, row_value: *row_value, width, groups })
}

/// A name not among `taken`: `base`, or `base_2`, `base_3`, ….
fn fresh(base: String, taken: &[String]) -> String {
    (1..)
        .map(|k| if k == 1 { base.clone() } else { format!("{base}_{k}") })
        .find(|n| !taken.contains(n))
        .unwrap_or(base)
}

/// The backward with each site's param replaced by its two saved tensors
/// and its `exp` by `e · exp(expand(m) − r)`, and the saved list with each
/// site's entry replaced by the two.
fn rebuild(
    backward: &Block,
    origin: &[Option<Value>],
    saved: Vec<Saved>,
    sites: &[Site],
) -> Result<Rewritten, GradError> {
    let internal = |e: coda_ir::infer::TypeError| GradError::Internal(e.to_string());
    let mut taken: Vec<String> = backward.params.iter().map(|p| p.name.clone()).collect();
    taken.extend(backward.outputs.iter().map(|o| o.tensor.name.clone()));
    let mut out = Block::new(backward.name.clone(), backward.kind, backward.span);
    out.dims = backward.dims.clone();
    let mut new_saved = Vec::with_capacity(saved.len() + sites.len());
    // Param index in `out` of each old param, and the `(exp, max)` param pair of each site.
    let mut param_map = vec![0usize; backward.params.len()];
    let mut site_params: Vec<(usize, usize)> = Vec::new();
    for (i, p) in backward.params.iter().enumerate() {
        let Some(site) = sites.iter().find(|site| site.param_index == i) else {
            param_map[i] = out.params.len();
            out.params.push(p.clone());
            continue;
        };
        let s = &saved[site.saved];
        let exp_name = fresh(format!("{}_exp", s.name), &taken);
        taken.push(exp_name.clone());
        let max_name = fresh(format!("{}_max", s.name), &taken);
        taken.push(max_name.clone());
        let max_shape = Shape { rows: s.ty.shape.rows.clone(), cols: Dim::constant(site.groups) };
        param_map[i] = out.params.len();
        site_params.push((out.params.len(), out.params.len() + 1));
        out.params.push(Tensor { name: exp_name, dtype: DType::BF16, ..p.clone() });
        out.params.push(Tensor { name: max_name, dtype: DType::F32, shape: max_shape, ..p.clone() });
    }
    for (i, s) in saved.into_iter().enumerate() {
        match sites.iter().position(|site| site.saved == i) {
            None => new_saved.push(s),
            Some(k) => {
                let width = sites[k].width;
                let (e, m) = (&out.params[site_params[k].0], &out.params[site_params[k].1]);
                let layout = SavedLayout::ShiftedExp { width };
                let shifted = Saved { name: e.name.clone(), ty: e.ty(), layout, ..s.clone() };
                let maxima = Saved { name: m.name.clone(), ty: m.ty(), layout: SavedLayout::GroupMax { width }, ..s };
                new_saved.extend([shifted, maxima]);
            }
        }
    }
    let mut map: Vec<Option<Value>> = vec![None; backward.insts.len()];
    let mut new_origin = Vec::with_capacity(origin.len());
    let mut push = |out: &mut Block, inst: Inst, span, from: Option<Value>| -> Result<Value, GradError> {
        new_origin.push(from);
        out.push(inst, span).map_err(internal)
    };
    let mut maxima: Vec<Option<Value>> = vec![None; sites.len()];
    for (v, inst) in backward.insts.iter() {
        let span = backward.insts.span(v);
        let from = origin.get(v.index()).copied().flatten();
        let new = match (inst, sites.iter().position(|s| s.param == v || s.exp == v)) {
            (Inst::Param(_), Some(k)) => {
                let (e, m) = site_params[k];
                maxima[k] = Some(push(&mut out, Inst::Param(m), span, None)?);
                push(&mut out, Inst::Param(e), span, from)?
            }
            (_, Some(k)) => {
                let site = &sites[k];
                let cols = out.ty(map_of(&map, site.param)?).shape.clone();
                let m =
                    maxima[k].ok_or_else(|| GradError::Internal("a shifted exponential before its maxima".into()))?;
                let groups = ColGroups::Heads(site.width);
                let shift = push(&mut out, Inst::GroupExpand { groups, arg: m, cols: cols.cols.clone() }, span, None)?;
                let row = map_of(&map, site.row_value)?;
                let row = push(&mut out, Inst::Broadcast { arg: row, shape: cols }, span, None)?;
                let diff = push(&mut out, Inst::Binary { op: BinaryOp::Sub, lhs: shift, rhs: row }, span, None)?;
                let scale = push(&mut out, Inst::Unary { op: UnaryOp::Exp, arg: diff }, span, None)?;
                let e = map_of(&map, site.param)?;
                push(&mut out, Inst::Binary { op: BinaryOp::Mul, lhs: e, rhs: scale }, span, from)?
            }
            (Inst::Param(i), None) => push(&mut out, Inst::Param(param_map[*i]), span, from)?,
            (_, None) => push(&mut out, inst.map_operands(|o| map[o.index()].unwrap_or(o)), span, from)?,
        };
        if let Some(name) = &backward.names[v.index()] {
            out.set_name(new, name);
        }
        map[v.index()] = Some(new);
    }
    for output in &backward.outputs {
        out.outputs.push(coda_ir::Output { value: map_of(&map, output.value)?, ..output.clone() });
    }
    Ok((out, new_origin, new_saved))
}

fn map_of(map: &[Option<Value>], v: Value) -> Result<Value, GradError> {
    map[v.index()].ok_or_else(|| GradError::Internal("a value used before it was rebuilt".into()))
}
