//! The epilogue rules of the explicit `kernel` form, as diagnostics.
//!
//! A `kernel` is one GEMM and an epilogue: every value it computes must
//! find a home in that GEMM's epilogue (or be a reduction finished into an
//! output). Whether it does is exactly what the partitioner decides, so
//! `check` runs the partitioner on each kernel and reports, in the terms
//! of the user's expressions, every value it had to move out of the
//! epilogue whose operands were themselves fine (the later values only
//! inherit the problem). `compile` then never meets such a kernel.

use crate::kir::ColMap;
use crate::plan::refusal::Refusal;
use crate::plan::{self, Home, Plan};
use coda_diagnostics::{Diagnostic, SourceFile, Span};
use coda_ir::{Block, BlockKind, Inst, Value};

/// Help shared by the rules: what to do instead.
const SPLIT: &str = "write a `block` and let the compiler partition it, or split the work into several kernels";

/// The epilogue-rule errors of one block (none for a `block`).
pub fn kernel_form_errors(block: &Block, source: &SourceFile) -> Vec<Diagnostic> {
    if block.kind != BlockKind::Kernel {
        return Vec::new();
    }
    let plan = plan::partition(block, &Default::default(), &Default::default());
    let outside = outside_epilogue(block, &plan);
    let mut diagnostics = Vec::new();
    let mut first_outside = None;
    for (value, _) in block.insts.iter() {
        let index = value.index();
        if plan.canon[index] != value || !is_off_gemm(&plan.homes[index]) {
            continue;
        }
        first_outside.get_or_insert(value);
        let Some(refusal) = &plan.why_not_epilogue[index] else { continue };
        let operands = block.inst(value).operands();
        // An operand moved out along with a refused user (its register
        // copy gone) leaves later users with no accumulator to read: the
        // user's diagnostic already covers them.
        let moved_along = *refusal == Refusal::NoAccumulator
            && !matches!(block.inst(value), Inst::Reduce { .. })
            && operands.iter().any(|o| is_off_gemm(&plan.homes[plan.canon[o.index()].index()]));
        let inherited = moved_along || operands.iter().any(|o| outside[plan.canon[o.index()].index()]);
        if !inherited {
            diagnostics.push(Rule { block, plan: &plan, source }.diagnostic(value, refusal));
        }
    }
    if let (true, Some(value)) = (diagnostics.is_empty(), first_outside) {
        diagnostics.push(Rule { block, plan: &plan, source }.diagnostic(value, &Refusal::OtherThreads));
    }
    diagnostics
}

/// Whether a home is a kernel other than the GEMM.
fn is_off_gemm(home: &Home) -> bool {
    matches!(home, Home::Row(_) | Home::Col(_) | Home::Grid(_))
}

/// For each value: whether it was refused an epilogue home, or depends on
/// one that was. (A value the partitioner moved along with a refused user
/// of it has no refusal of its own.)
fn outside_epilogue(block: &Block, plan: &Plan) -> Vec<bool> {
    let mut outside = vec![false; block.insts.len()];
    for (value, inst) in block.insts.iter() {
        let index = value.index();
        let refused = is_off_gemm(&plan.homes[plan.canon[index].index()])
            && plan.why_not_epilogue[plan.canon[index].index()].is_some();
        outside[index] = refused || inst.operands().iter().any(|o| outside[o.index()]);
    }
    outside
}

/// One block's context for writing diagnostics.
struct Rule<'a> {
    block: &'a Block,
    plan: &'a Plan,
    source: &'a SourceFile,
}

impl Rule<'_> {
    fn span(&self, v: Value) -> Span {
        self.block.insts.span(v)
    }

    /// `` `name` `` for a call written `name(…)`, else "this expression".
    fn what(&self, v: Value) -> String {
        callee(self.source.slice(self.span(v))).map_or_else(|| "this expression".into(), |name| format!("`{name}`"))
    }

    fn diagnostic(&self, v: Value, refusal: &Refusal) -> Diagnostic {
        let span = self.span(v);
        let what = self.what(v);
        match refusal {
            Refusal::ReadsLater(late, _) => self.reads_later(v, *late),
            Refusal::NoAccumulator => {
                let reduces = match self.block.inst(v).operands().first() {
                    Some(o) if self.reads_reduction(*o).is_some() => "a finished reduction",
                    _ => "values computed from the inputs alone",
                };
                Diagnostic::error("E0407", format!("in a kernel, {what} can only reduce the matmul's result"))
                    .with_primary(span, format!("this reduces {reduces}"))
                    .with_help(format!(
                        "a kernel's reductions are computed from the tiles of its matmul's result; {SPLIT}"
                    ))
            }
            Refusal::MixedColumns(operands) => {
                let mut diagnostic = self
                    .other_columns(&what)
                    .with_primary(span, "combines columns that different threads hold");
                for (operand, map) in operands {
                    if self.span(*operand) != span {
                        diagnostic = diagnostic.with_secondary(self.span(*operand), describe_columns(map));
                    }
                }
                diagnostic.with_help(
                    "each thread holds fixed columns of the matmul's result: combine values of the same columns, or the halves `even(t)` and `odd(t)` of the same columns",
                )
            }
            Refusal::RopeHalf(rotary_dim) => Diagnostic::error(
                "E0406",
                "in a kernel, rotate-half `rope` needs columns that other threads hold",
            )
            .with_primary(span, format!("pairs column n with column n ± {}", rotary_dim / 2))
            .with_help(
                "write `style=interleaved` (each pair is two adjacent columns of one thread), or write a `block`: the compiler then reads the weight's rows in pair order",
            ),
            Refusal::Interleave => self
                .other_columns(&what)
                .with_primary(span, "its two arguments are not the halves of the same column pairs")
                .with_help("write `interleave(e, o)` with `e` computed from `even(t)` and `o` from `odd(t)` of the same value"),
            Refusal::Transpose => self
                .other_columns(&what)
                .with_primary(span, "transposes a value computed from the matmul")
                .with_help(format!("a kernel stores its result as the GEMM computes it; {SPLIT}")),
            Refusal::Broadcast => self
                .other_columns(&what)
                .with_primary(span, "spreads a value computed from the matmul over other rows or columns")
                .with_help(SPLIT),
            Refusal::Concat | Refusal::ReadsStoredConcat => self
                .other_columns(&what)
                .with_primary(span, "joins the matmul's columns with other values, or reads such a join")
                .with_help(format!(
                    "in a kernel, `concat` may only store whole parts of constant width of the matmul's result; {SPLIT}"
                )),
            Refusal::SliceRuntimeStart | Refusal::RopeRuntimeStart => self
                .other_columns(&what)
                .with_primary(span, "starts at a column known only at run time")
                .with_help("start column ranges of the matmul's result at a constant"),
            Refusal::SliceStep(step) => self
                .other_columns(&what)
                .with_primary(span, format!("takes every {step}th column of pair halves"))
                .with_help(SPLIT),
            Refusal::RopeOddStart => self
                .other_columns(&what)
                .with_primary(span, "its rotary pairs start at an odd column")
                .with_help("start the rotated columns `cols=a:b` at an even column"),
            // A `kernel` block never runs unfused: its partition has no
            // unfused GEMMs.
            Refusal::ReadsUnpermuted
            | Refusal::Dim(_)
            | Refusal::OtherThreads
            | Refusal::Unfused
            | Refusal::HeadsAcrossWarps(_) => self
                .other_columns(&what)
                .with_primary(span, "needs values that other threads hold")
                .with_help(SPLIT),
        }
    }

    fn other_columns(&self, what: &str) -> Diagnostic {
        Diagnostic::error("E0406", format!("in a kernel, {what} needs columns that other threads hold"))
    }

    /// `v` reads `late`, which the GEMM finishes only after its epilogue.
    fn reads_later(&self, v: Value, late: Value) -> Diagnostic {
        let span = self.span(v);
        if let Some(reduction) = self.reads_reduction(late) {
            let name = self.what(reduction);
            let title = format!("in a kernel, the result of {name} cannot be used in the same epilogue");
            let mut diagnostic = Diagnostic::error("E0405", title);
            let reduction_span = self.span(reduction);
            diagnostic = if reduction_span == span {
                diagnostic.with_primary(span, format!("{name} reduces the matmul's result and then uses the reduction"))
            } else {
                diagnostic.with_primary(span, "used here, while the matmul is still running").with_secondary(
                    reduction_span,
                    "a reduction of whole rows or columns, complete only after every tile",
                )
            };
            return diagnostic.with_help(format!(
                "make the reduction an output of this kernel and use it in a later one; or {SPLIT}"
            ));
        }
        let spread = self.spread_value(late).unwrap_or(late);
        let mut diagnostic =
            self.other_columns(&self.what(v)).with_primary(span, "needs columns that other threads hold");
        if self.span(spread) != span {
            diagnostic = diagnostic.with_secondary(self.span(spread), "spread over every column here");
        }
        diagnostic.with_help(format!("each thread holds fixed columns of the matmul's result; {SPLIT}"))
    }

    /// The reduction of an epilogue value that `v` is, or reads through
    /// values recomputed where they are used.
    fn reads_reduction(&self, v: Value) -> Option<Value> {
        self.find_through_inline(v, &|home| matches!(home, Home::RowPartial(..) | Home::ColPartial(_)))
    }

    /// The epilogue value that `v` broadcasts, through inline values.
    fn spread_value(&self, v: Value) -> Option<Value> {
        self.find_through_inline(v, &|home| matches!(home, Home::Acc(_)))
    }

    /// The first value, depth first from `v` through inline values, whose
    /// home satisfies `wanted`.
    fn find_through_inline(&self, v: Value, wanted: &dyn Fn(&Home) -> bool) -> Option<Value> {
        let mut stack = vec![v];
        let mut seen = vec![false; self.block.insts.len()];
        while let Some(x) = stack.pop() {
            let x = self.plan.canon[x.index()];
            if std::mem::replace(&mut seen[x.index()], true) {
                continue;
            }
            let home = &self.plan.homes[x.index()];
            if wanted(home) {
                return Some(x);
            }
            if *home == Home::Inline {
                stack.extend(self.block.inst(x).operands().into_iter().rev());
            }
        }
        None
    }
}

/// The function name of a call's source text.
fn callee(text: &str) -> Option<&str> {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    let name = &text[..end];
    let starts_like_a_name = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    (starts_like_a_name && text[end..].starts_with('(')).then_some(name)
}

/// The columns of the matmul's result that a register map holds, in words.
fn describe_columns(map: &ColMap) -> String {
    let width = map.len.as_const();
    match (map.stride, width) {
        (1, Some(width)) => format!("columns {}..{} of the matmul's result", map.offset, map.offset + width),
        (1, None) => format!("columns from {} of the matmul's result", map.offset),
        (_, Some(width)) => {
            format!("pair halves of columns {}..{} of the matmul's result", map.offset, map.offset + 2 * width)
        }
        (_, None) => format!("pair halves of the columns from {} of the matmul's result", map.offset),
    }
}

/// The kernel-form errors as one internal error: `check` reports them, so
/// `compile` meeting one is a bug.
pub(crate) fn unreachable_error(block: &Block, source: &SourceFile) -> Option<crate::CodegenError> {
    let first = kernel_form_errors(block, source).into_iter().next()?;
    let location = first.labels.first().map(|l| source.location(l.span)).unwrap_or_default();
    Some(crate::CodegenError::Internal {
        block: block.name.clone(),
        message: format!(
            "`check` accepted a kernel that breaks its rules: {location}: {} ({})",
            first.title, first.code
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::callee;

    #[test]
    fn callee_is_the_name_before_an_open_paren() {
        assert_eq!(callee("interleave(row_sum(z), odd(z))"), Some("interleave"));
        assert_eq!(callee("z - row(row_max(z))"), None);
        assert_eq!(callee("z"), None);
        assert_eq!(callee("2x(y)"), None);
    }
}
