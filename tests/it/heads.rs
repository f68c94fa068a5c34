//! Per-head operations stay one operation whatever the number of heads:
//! QK-norm with RoPE written with `head_dim=` has the same IR and the same
//! kernels at 2 heads and at 64, apart from the widths written in them.

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
