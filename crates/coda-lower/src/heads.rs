//! Per-head operations on a tensor of heads side by side (`[M, H · W]`, the
//! layout of a q or k projection): the `head_dim=` keyword of `rmsnorm`,
//! `layernorm` and the row reductions, and `expand_heads`.
//!
//! - `sum(x, axis=-1, head_dim=W)` (and `mean`, `max`, `logsumexp`): one
//!   value per head, `[M, H]`;
//! - `expand_heads(s, head_dim=W)`: each column of `s: [M, H]` repeated
//!   over its head's `W` columns, `[M, H · W]`;
//! - `head_slice(x, cols=a:b, head_dim=W)`: the columns `a..b` of every
//!   head, side by side, `[M, H · (b − a)]` (`x.view(M, H, W)[..., a:b]`);
//! - `head_concat(a, b, …, heads=H)`: the parts joined head by head, each
//!   head `[a_h | b_h | …]` (`torch.cat` of `[M, H, w]` views on the last
//!   axis);
//! - `rmsnorm(x, g, eps, head_dim=W)`, `layernorm(x, g, b, eps,
//!   head_dim=W)`: the norm of each head (QK-norm); a gain or bias of `W`
//!   elements is shared by every head, one of `H · W` is per column.
//!
//! Each is one instruction whatever the number of heads, so the IR and the
//! generated code do not grow with it.

use crate::args::{kw, match_args, req, Formal, Matched};
use crate::block::Lowerer;
use crate::builtins::reduce_op;
use coda_diagnostics::{Diagnostic, Span};
use coda_ir::{Axis, BinaryOp, ColGroups, Dim, HeadPart, Inst, Value};
use coda_syntax::ast::{Arg, ArgValue};

impl Lowerer<'_> {
    /// The `head_dim=` argument in `slot`, if given: the heads of `x`'s
    /// columns, for a positive constant that divides them (`E0306`).
    pub(crate) fn head_groups(
        &mut self,
        m: &Matched<'_>,
        slot: usize,
        cols: &Dim,
        function: &str,
    ) -> Option<Option<ColGroups>> {
        if !m.given(slot) {
            return Some(None);
        }
        let width = self.dims.eval(m.expr(slot)?, self.diagnostics)?;
        match width.as_const() {
            Some(w) if w > 0 && cols.div_exact(&width).is_ok() => Some(Some(ColGroups::Heads(w))),
            _ => {
                self.diagnostics.push(
                    Diagnostic::error(
                        "E0306",
                        format!("`{function}` needs `head_dim`, a constant that divides the columns"),
                    )
                    .with_primary(m.spans[slot], format!("head_dim is {width}, the tensor has {cols} columns"))
                    .with_help("the columns must be a whole number of heads: `head_dim=128` for q of 32 heads of 128"),
                );
                None
            }
        }
    }

    /// The mean over each row's columns, or over each head's.
    pub(crate) fn mean_over(&mut self, x: Value, heads: Option<ColGroups>, span: Span) -> Option<Value> {
        match heads {
            None => self.reduce("mean", x, Axis::Cols, span),
            Some(groups) => self.group_reduce("mean", x, groups, span),
        }
    }

    /// A per-row statistic as it is (it broadcasts), or a per-head one
    /// repeated over its head's columns of a `cols`-wide tensor.
    pub(crate) fn spread(&mut self, stat: Value, heads: Option<ColGroups>, cols: &Dim, span: Span) -> Option<Value> {
        match heads {
            None => Some(stat),
            Some(groups) => self.emit(Inst::GroupExpand { groups, arg: stat, cols: cols.clone() }, span),
        }
    }

    /// A norm's gain or bias: one of a head's width, on a tensor of several
    /// heads, is shared by every head; any other broadcasts as usual.
    pub(crate) fn over_heads(&mut self, p: Value, heads: Option<ColGroups>, cols: &Dim, span: Span) -> Option<Value> {
        let Some(ColGroups::Heads(w)) = heads else { return Some(p) };
        let shape = self.block.ty(p).shape.clone();
        if shape.cols.as_const() != Some(w) || cols.as_const() == Some(w) {
            return Some(p);
        }
        self.emit(Inst::GroupExpand { groups: ColGroups::Lanes(w), arg: p, cols: cols.clone() }, span)
    }

    /// `name` (`sum`, `mean`, `max`, `logsumexp`) of each group of columns.
    pub(crate) fn group_reduce(&mut self, name: &str, x: Value, groups: ColGroups, span: Span) -> Option<Value> {
        let reduced = self.emit(Inst::GroupReduce { op: reduce_op(name), groups, arg: x }, span)?;
        if name != "mean" {
            return Some(reduced);
        }
        let width = self.constant(groups.width() as f64, span)?;
        self.binary(BinaryOp::Div, reduced, width, span, span, span)
    }

    /// `expand_heads(s, head_dim=W)`.
    pub(crate) fn expand_heads(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 2] = [req("s"), kw("head_dim")];
        let m = match_args("expand_heads", span, args, &FORMALS, self.diagnostics)?;
        let s = self.tensor_arg(&m, 0)?;
        if !m.given(1) {
            self.diagnostics.push(
                Diagnostic::error("E0306", "`expand_heads` needs `head_dim`")
                    .with_primary(span, "head_dim missing")
                    .with_help("`expand_heads(s, head_dim=128)` repeats each column of s over 128 columns"),
            );
            return None;
        }
        let heads = self.block.ty(s).shape.cols.clone();
        let width = self.dims.eval(m.expr(1)?, self.diagnostics)?;
        let cols = match width.as_const() {
            Some(w) if w > 0 => heads.mul(&width).ok(),
            _ => None,
        };
        let Some(cols) = cols else {
            self.diagnostics.push(
                Diagnostic::error("E0306", "`expand_heads` needs `head_dim`, a positive constant")
                    .with_primary(m.spans[1], format!("head_dim is {width}")),
            );
            return None;
        };
        let groups = ColGroups::Heads(width.as_const()?);
        self.emit(Inst::GroupExpand { groups, arg: s, cols }, span)
    }

    /// `head_slice(x, cols=a:b, head_dim=W)`.
    pub(crate) fn head_slice(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        const FORMALS: [Formal; 3] = [req("x"), kw("cols"), kw("head_dim")];
        let m = match_args("head_slice", span, args, &FORMALS, self.diagnostics)?;
        let x = self.tensor_arg(&m, 0)?;
        let cols = self.block.ty(x).shape.cols.clone();
        let head = match m.expr(2) {
            Some(e) => self.dims.eval(e, self.diagnostics)?.as_const(),
            None => None,
        };
        let range = match m.slots.get(1).copied().flatten() {
            Some(ArgValue::Range(a, b)) => {
                let a = self.dims.eval(a, self.diagnostics)?;
                let b = self.dims.eval(b, self.diagnostics)?;
                a.as_const().zip(b.as_const())
            }
            _ => None,
        };
        let part = head.zip(range).map(|(head, (a, b))| HeadPart { head, start: a, width: b - a });
        match part {
            Some(part) if part.is_valid() && cols.div_exact(&Dim::constant(part.head)).is_ok() => {
                self.emit(Inst::SliceHeads { arg: x, part }, span)
            }
            _ => {
                self.diagnostics.push(
                    Diagnostic::error("E0306", "`head_slice` needs `cols=a:b` inside a head and `head_dim`")
                        .with_primary(span, format!("the tensor has {cols} columns"))
                        .with_help(
                            "`head_slice(qkv, cols=0:HD, head_dim=3 * HD)` takes the first HD columns of every head of \
                             3 * HD: the q of GPT-NeoX's per-head [q | k | v] layout",
                        ),
                );
                None
            }
        }
    }

    /// `head_concat(a, b, …, heads=H)`: each part in its place of every
    /// head, the places summed.
    pub(crate) fn head_concat(&mut self, args: &[Arg], span: Span) -> Option<Value> {
        let (mut parts, mut heads) = (Vec::new(), None);
        for arg in args {
            match (&arg.name, &arg.value) {
                (None, ArgValue::Expr(e)) => parts.push((self.tensor_expr(e, arg.span)?, arg.span)),
                (Some(n), ArgValue::Expr(e)) if n.name == "heads" => {
                    heads = self.dims.eval(e, self.diagnostics)?.as_const().filter(|h| *h > 0);
                }
                _ => heads = None,
            }
        }
        let widths: Option<Vec<i64>> = heads.and_then(|h| {
            parts
                .iter()
                .map(|(p, _)| self.block.ty(*p).shape.cols.as_const().filter(|c| c % h == 0).map(|c| c / h))
                .collect()
        });
        let (Some(heads), Some(widths)) = (heads, widths.filter(|_| parts.len() >= 2)) else {
            self.diagnostics.push(
                Diagnostic::error("E0306", "`head_concat` needs two or more parts of whole heads and `heads=`")
                    .with_primary(span, "every part's columns must be the number of heads times its width")
                    .with_help("`head_concat(q_rot, q_pass, heads=16)` joins each head's rotated and passed features"),
            );
            return None;
        };
        let head: i64 = widths.iter().sum();
        let cols = Dim::constant(heads * head);
        let rows = self.block.ty(parts[0].0).shape.rows.clone();
        let (mut joined, mut start) = (None, 0);
        for ((part, part_span), width) in parts.into_iter().zip(widths) {
            if self.block.ty(part).shape.rows != rows {
                self.diagnostics.push(
                    Diagnostic::error("E0302", "joined parts have different row counts")
                        .with_primary(part_span, "this part"),
                );
                return None;
            }
            let place = HeadPart { head, start, width };
            let placed = self.emit(Inst::PadHeads { arg: part, part: place, cols: cols.clone() }, span)?;
            joined = Some(match joined {
                None => placed,
                Some(sum) => self.binary(BinaryOp::Add, sum, placed, span, part_span, span)?,
            });
            start += width;
        }
        joined
    }
}
