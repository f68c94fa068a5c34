//! Row kernels, column-reduction kernels and staging copies.
//!
//! A row kernel runs 256 threads per row (one CTA per row, threads striding
//! over columns) or, when it stores only per-row values, a warp per row
//! (8 rows per CTA).
//! Per-row values (whole-row reductions, finished partials and what depends
//! on them) are computed first, identical in every thread; then each stored
//! tile is written by a column loop. A column-reduction kernel runs one CTA
//! per column: threads stride over rows, then reduce in a fixed order.

use super::expr::Emitter;
use crate::error::CodegenError;
use crate::kir::{BufId, Space, Store};
use coda_ir::Dim;

/// Threads per CTA of row, column and copy kernels.
pub(crate) const THREADS: u32 = 256;

/// The `__global__` function of a row kernel.
pub(crate) fn emit_row(em: &mut Emitter<'_>, rows: &Dim, tpr: u32, entry: &str) -> Result<String, CodegenError> {
    em.set_indent(1);
    em.coop = tpr;
    for (id, node) in em.kernel.nodes.clone().iter().enumerate() {
        if node.reg.is_none() && matches!(node.space, Space::Scalar | Space::Row) {
            em.eval(id, "m", "0")?;
        }
    }
    em.coop = 1;
    let stores = em.kernel.stores.clone();
    let guard = if tpr > 1 { format!("if (threadIdx.x % {tpr} == 0) ") } else { String::new() };
    let narrow: Vec<&Store> = stores.iter().filter(|s| is_narrow(em, s)).collect();
    for s in narrow {
        let v = em.eval(s.node, "m", "0")?;
        let m = if em.kernel.nodes[s.node].space == Space::Scalar { "0" } else { "m" };
        let text = store_call(em, s, m, "0", &v);
        em.stmt(format!("{guard}{text}"), em.kernel.nodes[s.node].value);
    }
    let wide: Vec<&Store> = stores.iter().filter(|s| !is_narrow(em, s)).collect();
    let mut widths: Vec<Dim> = Vec::new();
    for s in &wide {
        let w = em.block.ty(em.kernel.nodes[s.node].value).shape.cols.clone();
        if !widths.contains(&w) {
            widths.push(w);
        }
    }
    for w in widths {
        let we = em.dim_int(&w);
        em.open(format!("for (int k = cg::lane<{tpr}>(); k < {we}; k += {tpr})"));
        for s in wide.iter().filter(|s| em.block.ty(em.kernel.nodes[s.node].value).shape.cols == w) {
            let node = &em.kernel.nodes[s.node];
            let (value, m) = (node.value, if node.space == Space::Col { "0" } else { "m" });
            let v = em.eval(s.node, "m", "k")?;
            let text = store_call(em, s, m, "k", &v);
            em.stmt(text, value);
        }
        em.close();
    }
    let body = em.take_lines();
    if tpr < THREADS {
        let rows_expr = em.dim_int(rows);
        em.line(format!("const int m = (int)blockIdx.x * {} + (int)threadIdx.x / {tpr};", THREADS / tpr));
        em.line(format!("if (m >= {rows_expr}) return;"));
    } else if super::gemm::uses(&body.join("\n"), "m") {
        em.line("const int m = (int)blockIdx.x;");
    }
    em.extend(body);
    Ok(wrap(em, entry, THREADS))
}

/// The `__global__` function of a column-reduction kernel.
pub(crate) fn emit_col(em: &mut Emitter<'_>, entry: &str) -> Result<String, CodegenError> {
    em.set_indent(1);
    em.coop = THREADS;
    for (id, node) in em.kernel.nodes.clone().iter().enumerate() {
        if node.reg.is_none() && matches!(node.space, Space::Scalar | Space::Col) {
            em.eval(id, "0", "c")?;
        }
    }
    em.coop = 1;
    for s in em.kernel.stores.clone() {
        let node = &em.kernel.nodes[s.node];
        let (value, k) = (node.value, if node.space == Space::Scalar { "0" } else { "c" });
        let v = em.eval(s.node, "0", "c")?;
        let text = store_call(em, &s, "0", k, &v);
        em.stmt(format!("if (threadIdx.x == 0) {text}"), value);
    }
    let body = em.take_lines();
    if super::gemm::uses(&body.join("\n"), "c") {
        em.line("const int c = (int)blockIdx.x;");
    }
    em.extend(body);
    Ok(wrap(em, entry, THREADS))
}

/// The `__global__` function of a staging copy.
pub(crate) fn emit_copy(em: &mut Emitter<'_>, src: BufId, dst: BufId, entry: &str) -> String {
    em.set_indent(1);
    let s = em.buf(src);
    let d = em.buf_w(dst);
    em.line("const int m = (int)blockIdx.x;");
    em.open(format!("for (int k = (int)threadIdx.x; k < {s}_cols; k += {THREADS})"));
    em.line(format!("{d}[(long long)m * {d}_ld + k] = {s}[(long long)m * {s}_ld + k];"));
    em.close();
    wrap(em, entry, THREADS)
}

/// Whether a store writes one value per row (or a scalar).
fn is_narrow(em: &Emitter<'_>, s: &Store) -> bool {
    matches!(em.kernel.nodes[s.node].space, Space::Scalar | Space::Row)
}

fn store_call(em: &mut Emitter<'_>, s: &Store, m: &str, k: &str, v: &str) -> String {
    let access = em.access(s.buf, m, k, true);
    let f = if s.accumulate { "st_acc" } else { "st" };
    format!("cg::{f}({access}, {v});")
}

/// The params struct and the entry around the body written so far.
fn wrap(em: &mut Emitter<'_>, entry: &str, threads: u32) -> String {
    let body = em.take_lines().join("\n");
    let params = format!("Params_{}", em.kernel.name);
    let red =
        if uses_red(&body) { format!("    __shared__ float red[{}];\n", 2 * threads / 32) } else { String::new() };
    format!(
        "struct {params} {{\n{fields}}};\n\nextern \"C\" __global__ void __launch_bounds__({threads})\n\
         {entry}({params} p) {{\n{red}{body}\n}}\n",
        fields = em.params.c_fields("    "),
    )
}

fn uses_red(body: &str) -> bool {
    body.contains(", red)") || body.contains("(red,")
}
