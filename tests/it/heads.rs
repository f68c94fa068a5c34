//! Per-head operations stay one operation whatever the number of heads:
//! QK-norm with RoPE written with `head_dim=` has the same IR and the same
//! kernels at 2 heads and at 64, apart from the widths written in them;
//! independent statistics of the same heads share a pass over the row.

/// QK-norm and RoPE of `heads` heads of 128, forward and backward.
fn source(heads: usize) -> String {
    format!(
        "dim M\ndim HD = 128\n\
         block qk(u: f32[M, {heads} * HD], g: bf16[HD], b: bf16[HD], pos: i32[M]) -> (q: bf16[M, {heads} * HD]) {{\n    \
             let n = layernorm(rmsnorm(u, g, 1e-6, head_dim=HD), g, b, 1e-5, head_dim=HD)\n    \
             q = rope(n, pos, head_dim=HD, rotary_dim=64)\n\
         }}\n\
         grad qk_grad = qk wrt (u, g, b)\n"
    )
}

/// IR sizes of every block (forward and backward) and the kernels' sources.
fn measure(heads: usize) -> (Vec<usize>, Vec<String>) {
    let name = format!("qk{heads}.coda");
    let checked = coda::check(&name, &source(heads)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(!checked.has_errors(), "{name}:\n{}", checked.render_diagnostics());
    let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{name}: {e}"));
    let sizes = checked.module.blocks.iter().chain(&view.module.blocks).map(|b| b.insts.len()).collect();
    let options = coda::CompileOptions::for_arch("sm_90a");
    let forward = coda::compile(&checked, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let backward = coda::compile(&view, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let sources = forward.kernels.iter().chain(&backward.kernels).map(|k| k.source.clone()).collect();
    (sizes, sources)
}

#[test]
fn per_head_code_does_not_grow_with_the_number_of_heads() {
    let (few_ir, few) = measure(2);
    let (many_ir, many) = measure(64);
    assert_eq!(few_ir, many_ir, "IR values per block at 2 and 64 heads");
    assert!(few.len() >= 3, "forward and backward kernels: {}", few.len());
    assert_eq!(few.len(), many.len(), "kernels at 2 and 64 heads");
    for (a, b) in few.iter().zip(&many) {
        // The widths (256 against 8192) and the names that carry them.
        let grown = b.len().abs_diff(a.len());
        assert!(grown <= 256, "a kernel grew by {grown} bytes from 2 to 64 heads");
    }
}

/// Independent statistics of the same heads share one pass over the row:
/// the backward of a per-head RMSNorm with RoPE recomputes each head's sum
/// of squares and forms its dot product with the rotated output gradient
/// in one loop over the head's columns, behind one barrier.
#[test]
fn independent_per_head_statistics_share_one_pass() {
    let source = "dim M\ndim HD = 128\n\
         block q(u: f32[M, 4 * HD], g: bf16[HD], pos: i32[M]) -> (y: bf16[M, 4 * HD]) {\n    \
             y = rope(rmsnorm(u, g, 1e-6, head_dim=HD), pos, head_dim=HD)\n\
         }\n\
         grad q_grad = q wrt (u, g)\n";
    let checked = coda::check("q.coda", source).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{e}"));
    let step = coda::compile(&view, &coda::CompileOptions::for_arch("sm_90a")).unwrap_or_else(|e| panic!("{e}"));
    let staged: Vec<(usize, usize)> = step
        .kernels
        .iter()
        .map(|k| {
            let arrays = k.source.lines().filter(|l| l.contains("__shared__ float") && l.contains("_s[")).count();
            let passes = k.source.matches("for (int g = (int)threadIdx.x / 32;").count();
            (arrays, passes)
        })
        .filter(|(arrays, _)| *arrays > 0)
        .collect();
    // The saving forward stages the sums of squares alone, the backward
    // both statistics.
    let one_pass = staged.iter().all(|(_, passes)| *passes == 1);
    assert!(one_pass && staged.contains(&(2, 1)), "(staged per-head values, passes) per kernel: {staged:?}");
}

/// QK-norm and RoPE of a projection, as Qwen3 writes them.
fn projection(head_dim: usize) -> String {
    format!(
        "dim M\ndim HD = {head_dim}\n\
         block q(h: bf16[M, 512], w: bf16[8 * HD, 512], g: bf16[HD], pos: i32[M]) -> (y: bf16[M, 8 * HD]) {{\n    \
             y = rope(rmsnorm(h @ w.T, g, 1e-6, head_dim=HD), pos, head_dim=HD)\n\
         }}\n"
    )
}

/// The names and sources of the kernels of a forward block.
fn kernels_of(source: &str, arch: &str) -> (Vec<String>, Vec<String>) {
    let checked = coda::check("q.coda", source).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let compiled = coda::compile(&checked, &coda::CompileOptions::for_arch(arch)).unwrap_or_else(|e| panic!("{e}"));
    let kinds = compiled.kernels.iter().map(|k| k.name.clone()).collect();
    (kinds, compiled.kernels.iter().map(|k| k.source.clone()).collect())
}

/// A per-head RMSNorm of a projection whose heads one warp holds whole is
/// computed in the projection's epilogue: one GEMM kernel, its quads
/// combining each head's sum of squares, and RoPE still read in pair
/// layout. Where no tile of the GEMM holds a head (128 columns on the
/// portable mainloop, whose warps hold 64), a row kernel computes the
/// statistics instead.
#[test]
fn per_head_statistics_of_a_projection_stay_in_its_epilogue() {
    let (names, sources) = kernels_of(&projection(128), "sm_90a");
    assert_eq!(names.len(), 1, "kernels on sm_90a: {names:?}");
    assert!(sources[0].contains("coda::shfl_xor(") && sources[0].contains("[(j * 8) / 128]"), "{}", sources[0]);
    let (names, _) = kernels_of(&projection(64), "sm_80");
    assert_eq!(names.len(), 1, "kernels on sm_80 with heads of 64: {names:?}");
    let (names, sources) = kernels_of(&projection(128), "sm_80");
    assert_eq!(names.len(), 2, "kernels on sm_80 with heads of 128: {names:?}");
    assert!(!sources.iter().any(|s| s.contains("[(j * 8) / 128]")), "no epilogue reduces heads");
}
