//! Log-sum-exp partials of a GEMM epilogue at one exponential per element.
//!
//! An online update per element (`coda::lse_add`) takes two exponentials
//! and a branch. Instead, each thread sums `exp(x − shift)` over its values
//! of a row, with a shift known before the pair loop, and merges its
//! shares once after it:
//! - **a head shift**: the epilogue already computes the maximum of the
//!   same values over each head of `w` columns (`heads.rs`), for a store of
//!   `exp(x − max)`, a softmax saved as shifted exponentials. The partial
//!   sums the very same exponentials per head, and NVRTC computes each once;
//! - **a thread shift** otherwise: the maximum of the thread's own values
//!   of the row, from a pass over its pairs before the loop (one `fmax`
//!   per element).
//!
//! After the loop a row's shares `(m_h, s_h)` become the thread's state
//! `(M, Σ_h s_h·exp(m_h − M))` with `M = max_h m_h`, one exponential per
//! head. A head whose maximum is −∞ holds no value above −∞ and adds
//! nothing; a NaN maximum propagates into the sum.

use super::{Emitter, Gemm};
use crate::emit::code::Code;
use crate::error::CodegenError;
use crate::kir::{NodeId, Op, PartialKind, PartialOut};
use coda_ir::ReduceOp;
use std::collections::BTreeSet;

/// Where a log-sum-exp partial takes its shift from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LseShift {
    /// The per-head maximum `node` of the same values, `width` columns per
    /// head, which the epilogue computes anyway.
    Head { node: NodeId, width: i64 },
    /// The thread's own maximum of the row (`part<idx>_x[i]`).
    Thread,
}

impl LseShift {
    /// How a log-sum-exp partial of `live`'s register nodes is shifted.
    pub(super) fn of(em: &Emitter<'_>, part: &PartialOut, live: &BTreeSet<NodeId>) -> LseShift {
        let head = em.kernel.nodes.iter().enumerate().find_map(|(id, node)| match node.op {
            Op::GroupReduce { op: ReduceOp::Max, arg, .. } if arg == part.node && live.contains(&id) => {
                node.reg.as_ref().filter(|map| map.per_head()).map(|map| LseShift::Head { node: id, width: map.stride })
            }
            _ => None,
        });
        head.unwrap_or(LseShift::Thread)
    }

    /// How many shares a thread keeps per row.
    fn shares(self) -> String {
        match self {
            LseShift::Head { width, .. } => format!("Frag::CJ * 8 / {width}"),
            LseShift::Thread => "1".into(),
        }
    }
}

impl Gemm {
    /// The shifts of the log-sum-exp partials, by partial index.
    pub(super) fn lse_shifts(em: &Emitter<'_>) -> Vec<Option<LseShift>> {
        let live = Self::live(em);
        let shift = |part: &PartialOut| (part.kind == PartialKind::RowLse).then(|| LseShift::of(em, part, &live));
        em.kernel.partials.iter().map(shift).collect()
    }

    /// The declarations of log-sum-exp partial `idx`: its state and its
    /// shares of exponentials.
    pub(super) fn lse_decls(&self, em: &mut Emitter<'_>, idx: usize, part: &PartialOut) -> Result<(), CodegenError> {
        let shift = self.lse_shift(em, idx)?;
        let name = format!("part{idx}");
        let shares = shift.shares();
        em.stmt(
            Code::lit(format!("float {name}_m[Frag::RI], {name}_s[Frag::RI], {name}_g[Frag::RI][{shares}];")),
            part.value,
        );
        em.line("#pragma unroll");
        em.open("for (int i = 0; i < Frag::RI; ++i)");
        em.line("#pragma unroll");
        em.line(format!("for (int h = 0; h < {shares}; ++h) {name}_g[i][h] = 0.0f;"));
        em.close();
        Ok(())
    }

    /// The thread shifts' passes before the pair loop.
    pub(super) fn lse_passes(&mut self, em: &mut Emitter<'_>) -> Result<Vec<String>, CodegenError> {
        let mut lines = Vec::new();
        for (idx, part) in em.kernel.partials.clone().iter().enumerate() {
            if self.lse_shifts[idx] != Some(LseShift::Thread) {
                continue;
            }
            let array = format!("part{idx}_x");
            lines.push(format!("        float {array}[Frag::RI];"));
            lines.push("        #pragma unroll".into());
            lines.push(format!("        for (int i = 0; i < Frag::RI; ++i) {array}[i] = coda::neg_inf();"));
            // NaN-propagating: a NaN value makes the whole sum NaN.
            let max = |a: &str, b: &str| format!("cg::maximum({a}, {b})");
            let at = format!("{array}[i]");
            lines.extend(self.combine_pass(em, part.node, part.value, ("coda::neg_inf()", max), (&at, &array))?);
        }
        Ok(lines)
    }

    /// The pair loop's line adding value `v` (under `cond`) to partial `idx`.
    pub(super) fn lse_accumulate(
        &mut self,
        em: &mut Emitter<'_>,
        idx: usize,
        part: &PartialOut,
        cond: &Code,
        v: &Code,
    ) -> Result<(), CodegenError> {
        let name = format!("part{idx}");
        let (share, shift) = match self.lse_shift(em, idx)? {
            LseShift::Head { node, width } => {
                let map =
                    em.kernel.nodes[node].reg.clone().ok_or_else(|| em.internal("head shift off the registers"))?;
                let shift = self.head_value(node, &map).ok_or_else(|| em.internal("head shift not computed"))?;
                (format!("{name}_g[i][(j * 8) / {width}]"), shift)
            }
            LseShift::Thread => {
                let array = format!("{name}_x");
                (format!("{name}_g[i][0]"), Code::lit(format!("{array}[i]")).reading(&[&array, "i"]))
            }
        };
        let text = format!("if ({cond}) {share} += coda::exp_fast({v} - {shift});");
        let gs = format!("{name}_g");
        em.stmt(Code::of(text, [cond, v, &shift]).reading(&[&gs, "i", "j"]), part.value);
        Ok(())
    }

    /// After the pair loop: each row's shares merged into the thread's
    /// state `(part<idx>_m, part<idx>_s)`.
    pub(super) fn lse_merge_shares(&self, em: &mut Emitter<'_>, idx: usize) -> Result<(), CodegenError> {
        let name = format!("part{idx}");
        let (g, m, s) = (format!("{name}_g"), format!("{name}_m"), format!("{name}_s"));
        em.line("#pragma unroll");
        em.open("for (int i = 0; i < Frag::RI; ++i)");
        match self.lse_shift(em, idx)? {
            shift @ LseShift::Head { node, .. } => {
                let array = self.head_arrays.get(&node).ok_or_else(|| em.internal("head shift not computed"))?;
                let (shares, m_h) = (shift.shares(), format!("{array}[i][h]"));
                em.line("float mx = coda::neg_inf(), s = 0.0f;");
                em.line("#pragma unroll");
                em.line(format!("for (int h = 0; h < {shares}; ++h) mx = cg::maximum(mx, {m_h});"));
                em.line("#pragma unroll");
                em.line(format!(
                    "for (int h = 0; h < {shares}; ++h) if ({m_h} != coda::neg_inf()) s += {g}[i][h] * coda::exp_fast({m_h} - mx);"
                ));
                em.line(format!("{m}[i] = mx;"));
                em.line(format!("{s}[i] = s;"));
            }
            LseShift::Thread => {
                let x = format!("{name}_x[i]");
                em.line(format!("{m}[i] = {x};"));
                em.line(format!("{s}[i] = {x} != coda::neg_inf() ? {g}[i][0] : 0.0f;"));
            }
        }
        em.close();
        Ok(())
    }

    fn lse_shift(&self, em: &Emitter<'_>, idx: usize) -> Result<LseShift, CodegenError> {
        self.lse_shifts.get(idx).copied().flatten().ok_or_else(|| em.internal("log-sum-exp partial without a shift"))
    }
}
