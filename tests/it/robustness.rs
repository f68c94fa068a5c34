//! Hostile inputs: the front end never panics, never hangs, and says something useful.

fn rejected(name: &str, bytes: &[u8]) -> coda::Checked {
    let checked = coda::check_bytes(name, bytes).unwrap_or_else(|e| panic!("{name}: internal error {e}"));
    assert!(checked.has_errors(), "{name} was accepted");
    assert!(checked.diagnostics.iter().all(|d| !d.labels.is_empty()), "{name}: a diagnostic has no location");
    checked
}

#[test]
fn empty_file_warns() {
    let checked = coda::check("empty.coda", "").unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", coda::render_to_string(&checked.source, &checked.diagnostics));
    assert!(checked.diagnostics.iter().any(|d| d.code == "W0003"));
}

#[test]
fn invalid_utf8_is_located() {
    let checked = rejected("bad.coda", b"dim M\n\xff\xfe block");
    assert_eq!(checked.diagnostics[0].code, "E0000");
    assert_eq!(checked.diagnostics[0].labels[0].span.start, 6);
}

#[test]
fn nul_bytes_are_unexpected_characters() {
    let checked = rejected("nul.coda", b"dim M\0\0\ndim N");
    assert!(checked.diagnostics.iter().any(|d| d.code == "E0001"));
}

#[test]
fn deep_brackets_stop_with_an_error() {
    let text =
        format!("dim M\nblock b(x: f32[M]) -> (y: f32[M]) {{ y = {}x{} }}", "(".repeat(100_000), ")".repeat(100_000));
    let checked = rejected("deep.coda", text.as_bytes());
    assert!(checked.diagnostics.iter().any(|d| d.code == "E0003"));
}

#[test]
fn long_operator_chains_are_capped() {
    let chain = vec!["x"; 200_000].join(" + ");
    let text = format!("dim M\nblock b(x: f32[M]) -> (y: f32[M]) {{ y = {chain} }}");
    let checked = rejected("chain.coda", text.as_bytes());
    assert!(checked.diagnostics.iter().any(|d| d.code == "E0004"));
}

#[test]
fn enormous_numbers_are_errors() {
    let text = "dim D = 99999999999999999999999999\ndim E = 9223372036854775807 * 4\nblock b(x: f32[D]) -> (y: f32[D]) { y = x * 1e999 }";
    let checked = rejected("big.coda", text.as_bytes());
    assert!(checked.diagnostics.iter().all(|d| d.code == "E0105" || d.code == "E0103" || d.code == "E0209"));
}

#[test]
fn ten_megabyte_file_finishes() {
    let line = "dim A = 1 // padding padding padding padding padding padding padding\n";
    let mut text = String::with_capacity(10 << 20);
    let mut i = 0;
    while text.len() < 10 << 20 {
        text.push_str(&line.replace('A', &format!("A{i}")));
        i += 1;
    }
    text.push_str("block b(x: f32[A0]) -> (y: f32[A0]) { y = x + ) }");
    let start = std::time::Instant::now();
    let checked = rejected("big.coda", text.as_bytes());
    assert!(checked.diagnostics.iter().any(|d| d.code == "E0002"));
    assert!(start.elapsed().as_secs() < 60, "took {:?}", start.elapsed());
}

#[test]
fn byte_soup_never_panics() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let alphabet = b"blockernldim()[]{},:.T->=+*/@<>!=0123456789eE_xyzMNK \n\t#;\"\\\xff";
    for _ in 0..2000 {
        let mut bytes = Vec::new();
        for _ in 0..(state % 200) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes.push(alphabet[(state % alphabet.len() as u64) as usize]);
        }
        let _ = coda::check_bytes("soup.coda", &bytes).unwrap_or_else(|e| panic!("internal error {e} on {bytes:?}"));
    }
}

/// A block with `n` chained `let`s, each reading the one before
/// (`let t{i+1} = t{i} * 1.0001 + {operand}`), from `let t0 = {first}` to
/// `y = {last}` (in which `T` is the chain's end), then `after`.
fn let_chain(signature: &str, first: &str, operand: &str, last: &str, after: &str, n: usize) -> String {
    let mut text = format!("dim M\nblock b({signature}) {{\n let a = {first}\n let t0 = a\n");
    for i in 0..n {
        text.push_str(&format!(" let t{} = t{i} * 1.0001 + {operand}\n", i + 1));
    }
    text.push_str(&format!(" y = {}\n}}\n{after}", last.replace('T', &format!("t{n}"))));
    text
}

/// Every pass after `check` walks the dataflow graph, whose chains are as
/// long as the program: none may recurse once per `let` (4,000 of them
/// overflowed the code generator's stack: `kir::build::node_of` and
/// `op_of`, the emitter's `eval`, a GEMM epilogue's pair evaluation).
/// Tests run on 2 MiB threads, a quarter of the CLI's stack.
#[test]
fn thousands_of_chained_lets_compile() {
    let gemm = "x: bf16[M, 64], w: bf16[64, 64]) -> (y: f32[M, 64]";
    let programs = [
        // Element-wise work alone: one row kernel.
        ("plain", let_chain("x: f32[M, 4]) -> (y: f32[M, 4]", "x", "x", "T", "", 4000)),
        // The chain in a GEMM's epilogue, reading a tile input; its gradient.
        ("epilogue", let_chain(gemm, "x @ w", "f32(x)", "T", "grad g = b wrt (x, w)\n", 4000)),
        // The chain outside the registers, added in a GEMM's epilogue.
        ("residual", let_chain(gemm, "f32(x)", "f32(x)", "T + x @ w", "", 4000)),
    ];
    for (what, text) in programs {
        let checked = coda::check("chain.coda", &text).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!checked.has_errors(), "{what}: {}", checked.render_diagnostics());
        let _ = coda::explain_text(&checked);
        coda::compile(&checked, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
        if !checked.grads.is_empty() {
            let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{what}: {e}"));
            coda::compile(&view, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{what} --grad: {e}"));
        }
    }
}

/// The emitted kernels of `text` with `D` bound to `value`, in bytes.
fn emitted_bytes(text: &str, value: i64) -> usize {
    let text = text.replace("dim D = ?", &format!("dim D = {value}"));
    let checked = coda::check("dims.coda", &text).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    let compiled = coda::compile(&checked, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    compiled.kernels.iter().map(|k| k.source.len()).sum()
}

/// The code generator writes code that depends on a dimension's value only
/// through the numbers in it: a rotary table of one entry per pair (which
/// took 8.5 s and 1.9 GB at `head_dim = 20000000`, and aborted at 3e9)
/// would not do.
#[test]
fn emitted_code_does_not_grow_with_dims() {
    let programs = [
        "dim M\ndim D = ?\nblock b(q: f32[M, D], pos: i32[M]) -> (y: f32[M, D]) { y = rope(q, pos, head_dim=D) }",
        "dim M\ndim D = ?\nblock b(x: f32[M, D]) -> (y: f32[M, D]) { y = x - max(x, axis=-1) + sum(x, axis=0) }",
        "dim M\ndim D = ?\nblock b(x: bf16[M, D], w: bf16[D, 64]) -> (y: f32[M, 64]) { y = x @ w }",
    ];
    for text in programs {
        let start = std::time::Instant::now();
        let sizes: Vec<usize> = [10_000, 20_000_000, 2_000_000_000].iter().map(|d| emitted_bytes(text, *d)).collect();
        let spread = sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0);
        assert!(spread < 2000, "{text}: {sizes:?} bytes");
        assert!(start.elapsed().as_secs() < 30, "{text}: {:?}", start.elapsed());
    }
}

/// The code generator's verdict on `text`: `Ok` or the refusal's diagnostic.
fn codegen_refusal(text: &str) -> Option<coda::Diagnostic> {
    let checked = coda::check("big.coda", text).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", checked.render_diagnostics());
    match coda::compile(&checked, &coda::CompileOptions::default()) {
        Ok(_) => None,
        Err(coda::CompileError::Codegen(coda::cuda::CodegenError::Limit { diagnostic, .. })) => Some(*diagnostic),
        Err(e) => panic!("{text}: {e}"),
    }
}

/// Kernels index with 32-bit integers: a dimension (or a constant in one)
/// of 2^31 or more is refused with a located error instead of compiling to
/// loops like `for (int kv = …; kv < 2147483648; …)`.
#[test]
fn dims_of_two_to_the_31_are_refused() {
    let refused = [
        "dim M\ndim N = 2147483648\nblock b(x: f32[M, N]) -> (y: f32[M, N]) { y = x * 2 }",
        "dim N = 4611686018427387904\nblock b(x: f32[N, 1]) -> (y: f32[N, 1]) { y = x * 2 }",
        "dim M\ndim N = 2147483648\nblock b(x: f32[M, 2]) -> (y: f32[M, 2]) { y = x * N }",
        "dim M\ndim K = 2147483648\nblock b(x: bf16[M, K], w: bf16[K, 64]) -> (y: f32[M, 64]) { y = x @ w }",
    ];
    for text in refused {
        let Some(d) = codegen_refusal(text) else { panic!("{text}: compiled") };
        assert_eq!(d.code, "E0601", "{text}");
        assert!(!d.labels.is_empty() && d.help.is_some(), "{text}: {d:?}");
    }
    let largest = "dim M\ndim N = 2147483647\nblock b(x: f32[M, N]) -> (y: f32[M, N]) { y = x * 2 }";
    assert_eq!(codegen_refusal(largest), None);
}

/// The traffic model counts bytes with checked arithmetic: at 2^62 rows
/// `explain` said 0.0 MB (the count wrapped).
#[test]
fn traffic_counts_do_not_wrap() {
    let text = "dim N = 4611686018427387904\nblock b(x: f32[N, 1]) -> (y: f32[N, 1]) { y = x * 2 }";
    let checked = coda::check("big.coda", text).unwrap_or_else(|e| panic!("{e}"));
    let block = &checked.module.blocks[0];
    let bytes = coda::cuda::traffic::unfused_bytes(block, &coda::cuda::traffic::default_dims(block));
    assert_eq!(bytes, u64::MAX);
    // Dims the kernels can index, bytes that do not fit in 64 bits.
    let text = "dim D = 2147483647\nblock b(x: f32[D, D]) -> (y: f32[D, D]) { y = x * 2 }";
    let checked = coda::check("square.coda", text).unwrap_or_else(|e| panic!("{e}"));
    let explained = coda::explain_text(&checked);
    assert!(explained.contains("2^64 bytes or more") && !explained.contains(" 0.0 MB"), "{explained}");
}

/// A backward's `explain` header lists every input gradient and recomputed
/// value; with hundreds of inputs those lists are broken into lines of the
/// width the kernel lines keep.
#[test]
fn a_wide_backward_header_keeps_its_lines_readable() {
    let n = 300;
    let names: Vec<String> = (0..n).map(|i| format!("x{i}")).collect();
    let params: Vec<String> = names.iter().map(|x| format!("{x}: f32[M, 4]")).collect();
    // A running sum, one `let` per input (one expression would nest too deeply).
    let lets: String = (1..n).map(|i| format!("    let s{i} = s{} + x{i}\n", i - 1)).collect();
    let text = format!(
        "dim M\nblock wide({}) -> (y: f32[M, 4]) {{\n    let s0 = x0\n{lets}    y = s{}\n}}\ngrad wide_grad = wide wrt ({})\n",
        params.join(", "),
        n - 1,
        names.join(", ")
    );
    let checked = coda::check("wide.coda", &text).unwrap_or_else(|e| panic!("{e}"));
    assert!(!checked.has_errors(), "{}", coda::render_to_string(&checked.source, &checked.diagnostics));
    let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{e}"));
    let header = coda::grad_header(&view, &view.grads[0]);
    assert!(header.contains("dx299"), "{header}");
    assert!(header.lines().all(|l| l.chars().count() <= 160), "{header}");
}

/// `explain` keeps every comment line within the width its kernel lines
/// keep (160 characters), the list of rules applied and a refusal's
/// message included: every example and case, forward and backward.
#[test]
fn explain_keeps_its_lines_readable() {
    let roots = ["examples", "tests/cases/grad", "tests/cases/ir", "tests/cases/eval"];
    for path in roots.iter().flat_map(|root| crate::rewrites::coda_files(root)) {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let checked = coda::check(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"));
        if checked.has_errors() {
            continue;
        }
        let mut reports = vec![coda::explain_text(&checked)];
        if !checked.grads.is_empty() {
            let view = coda::grad_view(&checked).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            reports.push(coda::explain_text(&view));
        }
        for report in reports {
            for line in report.lines().filter(|l| l.starts_with("//")) {
                assert!(
                    line.chars().count() <= 160,
                    "{}: a line of {} characters:\n{line}",
                    path.display(),
                    line.len()
                );
            }
        }
    }
}
