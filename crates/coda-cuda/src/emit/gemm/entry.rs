//! The `extern "C"` entry of a GEMM kernel, which instantiates
//! `coda::gemm_sm80` (portable) or `coda::gemm_sm90_rows` (Hopper, with its
//! tensor maps) with the epilogue functor, the functor's prefetch hook, and
//! the `GemmArgs` struct the host fills.

use super::super::params::c_type;
use super::Emitter;
use crate::kir::GemmSpec;
use crate::manifest::{FieldSpec, FieldValue, StructSpec};

/// The functor's `prefetch` (called by the Hopper mainloop before each
/// tile's K loop), running `calls`: `coda::stage_tile_async` of the staged
/// tile operand (`apply` finishes it with `coda::stage_tile_finish` and the
/// same arguments) and `cg::stage_col_async` of each staged column vector
/// (finished by `cg::stage_cols_finish`). None without calls.
pub(super) fn prefetch_hook(calls: &[String]) -> String {
    if calls.is_empty() {
        return String::new();
    }
    format!(
        "    static constexpr bool kPrefetch = true;\n    template <class Frag, class Tile>\n    \
         static __device__ void prefetch(const Params& p, const Frag& f, const Tile& t, float* smem) {{\n{}    }}\n",
        calls.iter().map(|c| format!("        {c}\n")).collect::<String>()
    )
}

/// The entry point instantiating the portable mainloop.
pub(super) fn sm80_entry(spec: &GemmSpec, epi: &str, entry: &str) -> String {
    let cfg = format!("coda::{}", spec.config.name());
    let rows = match (&spec.b.row_perm, spec.b.stacked) {
        (Some(p), None) => format!(", coda::PairRows<{}, {}, {}>", p.start, p.end, p.group),
        (Some(p), Some((_, stack))) => format!(", coda::PairRows<{}, {}, {}, {stack}>", p.start, p.end, p.group),
        (None, Some((_, stack))) => format!(", coda::StackedRows<{stack}>"),
        (None, None) if spec.k_parts.is_some() => ", coda::IdentityRows".to_string(),
        (None, None) => String::new(),
    };
    let (kp_arg, kparts, kp_val) = match spec.further_parts().len() {
        0 => ("", String::new(), ""),
        n => (", coda::GemmKParts kp", format!(", {}", n + 1), ", kp"),
    };
    format!(
        "extern \"C\" __global__ void __launch_bounds__({cfg}::kThreads, {cfg}::kMinBlocks)\n\
         {entry}(coda::GemmArgs g{kp_arg}, {epi}::Params e) {{\n    \
         coda::gemm_sm80<{cfg}, {la}, {lb}, {elem}, {epi}{rows}{kparts}>(g, e{kp_val});\n}}\n",
        la = spec.a.layout.tag(),
        lb = spec.b.layout.tag(),
        elem = c_type(spec.elem),
    )
}

/// The entry point instantiating the Hopper mainloop: the tensor maps of A
/// and B (and of B's pair-order view) come first, by value; the shared
/// memory the host passes is checked against the header's formula. A row
/// prelude (`pre`: its `Pre` struct) takes the template's last argument,
/// and its `Params` struct the entry's; a concatenated K's parts follow the
/// first part's maps and `GemmArgs`.
pub(super) fn sm90_entry(spec: &GemmSpec, epi: &str, entry: &str, pre: Option<&str>, col_vecs: usize) -> String {
    let cfg = format!("coda::{}", spec.config.name());
    let map = |name: &str| format!("const __grid_constant__ coda::TmaDesc {name}");
    let (maps, rows, tbp) = match &spec.b.row_perm {
        Some(p) => (
            format!("{}, {}, {}", map("ta"), map("tb"), map("tbp")),
            format!(
                "coda::Sm90PairRows<{}, {}, {}{}>",
                p.start,
                p.end,
                p.group,
                if spec.b.stacked.is_some() { ", true" } else { "" }
            ),
            "tbp",
        ),
        None => (format!("{}, {}", map("ta"), map("tb")), "coda::IdentityRows".to_string(), "tb"),
    };
    // A concatenated K: the further parts' maps (`ta1`, `tb1`, …) and the
    // `GemmKParts` carrying every part's K, gathered into `Sm90KParts`.
    let n = spec.further_parts().len() + 1;
    let (more, kp_arg, parts, pre_ty, pre_val) = match n {
        1 => (
            String::new(),
            "",
            String::new(),
            pre.map_or(String::new(), |p| format!(", {p}")),
            if pre.is_some() { ", pre" } else { "" }.to_string(),
        ),
        _ => {
            let more: String =
                (1..n).map(|p| format!(", {}, {}", map(&format!("ta{p}")), map(&format!("tb{p}")))).collect();
            let refs = |side: &str| {
                let names: Vec<String> =
                    std::iter::once(format!("&t{side}")).chain((1..n).map(|p| format!("&t{side}{p}"))).collect();
                names.join(", ")
            };
            let ks: Vec<String> = (0..n).map(|p| format!("kp.k{p}")).collect();
            let parts = format!(
                "const coda::Sm90KParts<{n}> parts = {{{{{}}}, {{{}}}, {{{}}}}};\n    ",
                refs("a"),
                refs("b"),
                ks.join(", ")
            );
            let pre_ty = format!(", {}, {n}", pre.unwrap_or("coda::NoPrelude"));
            let pre_val = format!(", {}, &parts", if pre.is_some() { "pre" } else { "coda::NoPrelude::Params()" });
            (more, ", coda::GemmKParts kp", parts, pre_ty, pre_val)
        }
    };
    format!(
        "static_assert(coda::gemm_sm90_smem_bytes<{cfg}, {epi}>() == {smem}, \"codac's shared-memory size for {cfg}\");\n\n\
         extern \"C\" __global__ void __launch_bounds__({cfg}::kThreads, 1)\n\
         {entry}({maps}{more}, coda::GemmArgs g{kp_arg}, {epi}::Params e{pre_arg}) {{\n    \
         {parts}coda::gemm_sm90_rows<{cfg}, {la}, {lb}, {elem}, {epi}, {rows}{pre_ty}>(ta, tb, {tbp}, g, e{pre_val});\n}}\n",
        pre_arg = pre.map_or(String::new(), |p| format!(", {p}::Params pre")),
        smem = spec.config.smem_bytes_with(col_vecs),
        la = spec.a.layout.tag(),
        lb = spec.b.layout.tag(),
        elem = c_type(spec.elem),
    )
}

/// The `GemmKParts` fields of a product over a concatenated inner
/// dimension (its further parts' operands and every part's K; a missing
/// third part repeats the second's buffers with K 0); none for a plain one.
pub(super) fn k_parts_args(em: &Emitter<'_>, spec: &GemmSpec) -> Option<StructSpec> {
    let (first, second) = match spec.further_parts() {
        [] => return None,
        [one] => (one, one),
        [one, two, ..] => (one, two),
    };
    let name = |buf: crate::kir::BufId| em.ir.buffers[buf].name.clone();
    let f = |name: &str, kind: &str, value: FieldValue| FieldSpec { name: name.into(), kind: kind.into(), value };
    let ks: Vec<&coda_ir::Dim> = spec.pair_ks().collect();
    let k = |i: usize| ks.get(i).map_or_else(|| "0".to_string(), |k| k.to_string());
    Some(StructSpec::new(
        "GemmKParts",
        vec![
            f("a1", "ptr", FieldValue::Ptr(name(first.a.buf))),
            f("b1", "ptr", FieldValue::Ptr(name(first.b.buf))),
            f("a2", "ptr", FieldValue::Ptr(name(second.a.buf))),
            f("b2", "ptr", FieldValue::Ptr(name(second.b.buf))),
            f("lda1", "i64", FieldValue::Ld(name(first.a.buf))),
            f("ldb1", "i64", FieldValue::Ld(name(first.b.buf))),
            f("lda2", "i64", FieldValue::Ld(name(second.a.buf))),
            f("ldb2", "i64", FieldValue::Ld(name(second.b.buf))),
            f("k0", "i32", FieldValue::Expr(k(0))),
            f("k1", "i32", FieldValue::Expr(k(1))),
            f("k2", "i32", FieldValue::Expr(k(2))),
        ],
    ))
}

/// The `GemmArgs` fields.
pub(super) fn gemm_args(em: &Emitter<'_>, spec: &GemmSpec) -> StructSpec {
    let a = em.ir.buffers[spec.a.buf].name.clone();
    let b = em.ir.buffers[spec.b.buf].name.clone();
    let b2 = spec.b.stacked.map_or_else(|| b.clone(), |(buf, _)| em.ir.buffers[buf].name.clone());
    let f = |name: &str, kind: &str, value: FieldValue| FieldSpec { name: name.into(), kind: kind.into(), value };
    StructSpec::new(
        "GemmArgs",
        vec![
            f("a", "ptr", FieldValue::Ptr(a.clone())),
            f("b", "ptr", FieldValue::Ptr(b.clone())),
            f("m", "i32", FieldValue::Expr(spec.m.to_string())),
            f("n", "i32", FieldValue::Expr(spec.n.to_string())),
            f("k", "i32", FieldValue::Expr(spec.k.to_string())),
            f("lda", "i64", FieldValue::Ld(a)),
            f("ldb", "i64", FieldValue::Ld(b)),
            f("b2", "ptr", FieldValue::Ptr(b2.clone())),
            f("ldb2", "i64", FieldValue::Ld(b2)),
        ],
    )
}
