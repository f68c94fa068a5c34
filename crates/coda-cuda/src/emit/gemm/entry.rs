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
        (None, None) => String::new(),
    };
    format!(
        "extern \"C\" __global__ void __launch_bounds__({cfg}::kThreads, {cfg}::kMinBlocks)\n\
         {entry}(coda::GemmArgs g, {epi}::Params e) {{\n    coda::gemm_sm80<{cfg}, {la}, {lb}, {elem}, {epi}{rows}>(g, e);\n}}\n",
        la = spec.a.layout.tag(),
        lb = spec.b.layout.tag(),
        elem = c_type(spec.elem),
    )
}

/// The entry point instantiating the Hopper mainloop: the tensor maps of A
/// and B (and of B's pair-order view) come first, by value; the shared
/// memory the host passes is checked against the header's formula. A row
/// prelude (`pre`: its `Pre` struct) takes the template's last argument,
/// and its `Params` struct the entry's.
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
    format!(
        "static_assert(coda::gemm_sm90_smem_bytes<{cfg}, {epi}>() == {smem}, \"codac's shared-memory size for {cfg}\");\n\n\
         extern \"C\" __global__ void __launch_bounds__({cfg}::kThreads, 1)\n\
         {entry}({maps}, coda::GemmArgs g, {epi}::Params e{pre_arg}) {{\n    \
         coda::gemm_sm90_rows<{cfg}, {la}, {lb}, {elem}, {epi}, {rows}{pre}>(ta, tb, {tbp}, g, e{pre_val});\n}}\n",
        pre = pre.map_or(String::new(), |p| format!(", {p}")),
        pre_arg = pre.map_or(String::new(), |p| format!(", {p}::Params pre")),
        pre_val = if pre.is_some() { ", pre" } else { "" },
        smem = spec.config.smem_bytes_with(col_vecs),
        la = spec.a.layout.tag(),
        lb = spec.b.layout.tag(),
        elem = c_type(spec.elem),
    )
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
