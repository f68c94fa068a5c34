//! End-to-end tests of the `codac` binary: exit codes, diagnostics on
//! standard error, JSON output, and `.npy` input/output of `eval`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::codac;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("codac-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_accepts_every_example() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut examples: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".coda"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 4, "{examples:?}");
    for example in &examples {
        let out = codac(&["check", &format!("examples/{example}"), "--color", "never"]);
        assert_eq!(out.status.code(), Some(0), "{example}: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains("ok"));
    }
}

#[test]
fn user_errors_exit_with_1_and_print_located_diagnostics() {
    let dir = temp_dir("errors");
    let file = dir.join("bad.coda");
    std::fs::write(&file, "dim M\nblock b(x: bf16[M, 8], w: bf16[8, 16]) -> (y: f32[M, 8]) {\n    y = x @ w.T\n}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = codac(&["check", file.to_str().unwrap_or_default(), "--color", "never"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("error[E0301]"), "{stderr}");
    assert!(stderr.contains("bad.coda:3:"), "{stderr}");
    assert!(!stderr.contains("\u{1b}["), "colour on a pipe: {stderr}");
}

#[test]
fn missing_file_is_a_user_error() {
    let out = codac(&["check", "no/such/file.coda"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot read"));
}

#[test]
fn explain_json_has_blocks_and_values() {
    let out = codac(&["explain", "examples/lm_head_ce.coda", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["schema"], 2);
    let block = &json["blocks"][0];
    assert_eq!(block["name"], "lm_head_ce");
    assert!(block["values"].as_array().is_some_and(|v| v.len() > 10));
    let kernels = json["kernels"].as_array().cloned().unwrap_or_default();
    assert_eq!(kernels.iter().filter(|k| k["kind"] == "gemm").count(), 1, "{kernels:?}");
    assert!(kernels.iter().all(|k| k["name"].is_string() && k["inputs"].is_array() && k["outputs"].is_array()));
    // The LM-head GEMM's epilogue reduces the logits: unfused, the block
    // stores them and moves more bytes (in as few kernels: the bare GEMM
    // takes cooperative tiles and its norm as a row prelude); other kernels
    // have no entry.
    let gemm = kernels.iter().find(|k| k["kind"] == "gemm").cloned().unwrap_or_default();
    let unfused = &gemm["unfused_alternative"];
    assert!(unfused["kernels"].as_u64() >= Some(2), "{gemm}");
    assert!(unfused["bytes_moved"].as_u64() > block["bytes_moved"].as_u64(), "{gemm} {block}");
    assert!(kernels.iter().filter(|k| k["kind"] != "gemm").all(|k| k["unfused_alternative"].is_null()));
}

#[test]
fn every_subcommand_help_has_an_example() {
    for sub in ["check", "explain", "eval"] {
        let out = codac(&[sub, "--help"]);
        assert_eq!(out.status.code(), Some(0));
        assert!(text(&out.stdout).contains("Example"), "{sub} --help has no example");
    }
}

/// A temporary directory holding `text` as a `.coda` file and an empty
/// folder for `.npy` inputs: (directory, source, inputs).
fn eval_case(name: &str, text: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let inputs = dir.join("in");
    std::fs::create_dir_all(&inputs).unwrap_or_else(|e| panic!("{e}"));
    let source = dir.join(format!("{name}.coda"));
    std::fs::write(&source, text).unwrap_or_else(|e| panic!("{e}"));
    (dir, source, inputs)
}

#[test]
fn eval_reads_and_writes_npy() {
    let (dir, source, inputs) = eval_case(
        "npy",
        "dim M\ndim N = 3\nblock s(x: f32[M, N], g: f32[N]) -> (y: f32[M, N], total: f32) {\n    y = x * g\n    total = sum(x * g)\n}\n",
    );
    write_npy(&inputs.join("x.npy"), &[2, 3], &[1.0, 2.0, 3.0, -1.0, 0.5, 4.0]);
    write_npy(&inputs.join("g.npy"), &[3], &[2.0, -1.0, 0.25]);
    let out_dir = dir.join("out");
    let out = codac(&[
        "eval",
        source.to_str().unwrap_or_default(),
        "--dims",
        "M=2",
        "--inputs",
        inputs.to_str().unwrap_or_default(),
        "--out",
        out_dir.to_str().unwrap_or_default(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let y = read_npy(&out_dir.join("y.npy"));
    assert_eq!(y.0, vec![2, 3]);
    assert_eq!(y.1, vec![2.0, -2.0, 0.75, -2.0, -0.5, 1.0]);
    let total = read_npy(&out_dir.join("total.npy"));
    assert_eq!(total.0, Vec::<u64>::new());
    assert_eq!(total.1, vec![-0.75]);
}

/// A value an input's dtype cannot hold names the input and its file.
#[test]
fn eval_names_the_input_whose_values_its_dtype_cannot_hold() {
    let (_, source, inputs) = eval_case(
        "npy-int",
        "dim M\nblock t(x: f32[M, 4], pos: i32[M]) -> (y: f32[M, 4]) {\n    y = x * f32(pos)[:, None]\n}\n",
    );
    write_npy(&inputs.join("x.npy"), &[2, 4], &[1.0; 8]);
    write_npy(&inputs.join("pos.npy"), &[2], &[1.5, 2.0]);
    let out = codac(&[
        "eval",
        source.to_str().unwrap_or_default(),
        "--dims",
        "M=2",
        "--inputs",
        inputs.to_str().unwrap_or_default(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("input `pos`") && stderr.contains("pos.npy") && stderr.contains("1.5"), "{stderr}");
}

#[test]
fn eval_rejects_unknown_and_missing_dims() {
    let out = codac(&["eval", "examples/gpt2_block.coda", "--dims", "Q=4", "--random"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not a run-time dimension"), "{}", text(&out.stderr));
}

fn write_npy(path: &Path, shape: &[u64], data: &[f32]) {
    use npyz::WriterBuilder;
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("{e}"));
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .unwrap_or_else(|e| panic!("{e}"));
    writer.extend(data.iter().copied()).unwrap_or_else(|e| panic!("{e}"));
    writer.finish().unwrap_or_else(|e| panic!("{e}"));
}

fn read_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap_or_else(|e| panic!("{e}"));
    let shape = npy.shape().to_vec();
    (shape, npy.into_vec::<f32>().unwrap_or_else(|e| panic!("{e}")))
}

/// `codac bench` without a GPU is a clear user-facing error (exit 1), not a
/// panic; with one, it prints its JSON report.
#[test]
fn bench_without_a_gpu_says_so() {
    let out = codac(&["bench", "examples/out_proj_kernel.coda", "--dims", "M=256", "--json", "--color", "never"]);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("internal compiler error"), "{stderr}");
    if out.status.code() == Some(0) {
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json["tool"], "codac bench");
        assert!(json["blocks"][0]["time"]["median_ms"].as_f64().is_some_and(|t| t > 0.0), "{json}");
    } else {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("error: no GPU"), "{stderr}");
    }
}

#[test]
fn bench_help_has_an_example_and_refuses_few_runs() {
    let out = codac(&["bench", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("Example"));
    let out = codac(&["bench", "examples/out_proj_kernel.coda", "--dims", "M=256", "--iters", "10"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--iters"), "{}", text(&out.stderr));
}

#[test]
fn compile_with_dims_chooses_tiles_for_them() {
    let config_of = |manifest: &Path, kernel: &str| -> String {
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(manifest).unwrap_or_default()).unwrap_or_default();
        let kernels = json["blocks"][0]["kernels"].as_array().cloned().unwrap_or_default();
        let k = kernels.iter().find(|k| k["name"] == kernel).cloned().unwrap_or_default();
        k["config"].as_str().unwrap_or("").to_string()
    };
    let dir = temp_dir("compile-dims");
    let (blind, small) = (dir.join("blind"), dir.join("small"));
    let out = codac(&["compile", "examples/llama3_block.coda", "-o", &blind.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let args = ["compile", "examples/llama3_block.coda", "-o", &small.display().to_string(), "--dims", "M=1000"];
    let out = codac(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The QKV GEMM: staged subtiles on ping-pong 128x192 tiles when M is
    // not known; 128x256 tiles would leave SMs idle at 1000 tokens.
    assert_eq!(config_of(&blind.join("manifest.json"), "gemm_u"), "Sm90Cfg128x192pps");
    assert_eq!(config_of(&small.join("manifest.json"), "gemm_u"), "Sm90Cfg128x128");
    assert_eq!(config_of(&small.join("manifest.json"), "gemm_x1"), "Sm90Cfg128x256");
    let out = codac(&["compile", "examples/llama3_block.coda", "-o", &small.display().to_string(), "--dims", "Q=4"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not a run-time dimension"), "{}", text(&out.stderr));
}

/// `explain --dims` describes the kernels `compile --dims` makes, with the
/// traffic at those dims.
#[test]
fn explain_with_dims_shows_the_tiles_and_traffic_at_them() {
    let out = codac(&["explain", "examples/llama3_block.coda", "--dims", "M=1000"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("// bytes moved at M = 1000:"), "{stdout}");
    let qkv = stdout.lines().find(|l| l.starts_with("//   gemm_u gemm:")).unwrap_or_default();
    assert!(qkv.contains("Sm90Cfg128x128 tiles"), "{qkv}");
    let blind = text(&codac(&["explain", "examples/llama3_block.coda"]).stdout);
    assert!(blind.contains("// bytes moved at M = 8192:"), "{blind}");
    let out = codac(&["explain", "examples/llama3_block.coda", "--dims", "Q=4"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not a run-time dimension"), "{}", text(&out.stderr));
}

/// `--tile-config` gives every Hopper GEMM the configuration asked for and
/// refuses a name that is not a Hopper configuration, listing the valid ones.
#[test]
fn tile_config_asks_for_one_configuration() {
    let dir = temp_dir("tile-config");
    let out_dir = dir.display().to_string();
    let args = ["compile", "examples/llama3_block.coda", "-o", &out_dir, "--tile-config", "Sm90Cfg128x128pp"];
    let out = codac(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).matches("Sm90Cfg128x128pp tiles").count(), 4, "{}", text(&out.stdout));
    let explain =
        codac(&["explain", "examples/llama3_block.coda", "--tile-config", "Sm90Cfg128x128", "--color", "never"]);
    assert_eq!(explain.status.code(), Some(0), "{}", text(&explain.stderr));
    assert!(text(&explain.stdout).contains("Sm90Cfg128x128 tiles"), "{}", text(&explain.stdout));
    let out = codac(&["compile", "examples/llama3_block.coda", "-o", &out_dir, "--tile-config", "Cfg64x64"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("not a Hopper tile configuration") && err.contains("Sm90Cfg128x192pps"), "{err}");
}

/// An architecture the kernels are not written for is refused before
/// anything is written, with the supported list (sm_75 compiled, then
/// failed in ptxas with 234 lines of `cp.async requires sm_80`).
#[test]
fn unsupported_arch_is_refused_up_front() {
    let dir = temp_dir("arch");
    let out_dir = dir.join("out");
    for arch in ["sm_75", "sm_70", "7.5", "sm_100a"] {
        let out =
            codac(&["compile", "examples/lm_head_ce.coda", "-o", out_dir.to_str().unwrap_or_default(), "--arch", arch]);
        assert_eq!(out.status.code(), Some(1), "{arch}: {}", text(&out.stderr));
        let stderr = text(&out.stderr);
        assert!(stderr.contains("sm_80") && stderr.contains("sm_90a"), "{arch}: {stderr}");
        assert!(!out_dir.exists(), "{arch}: wrote {}", out_dir.display());
    }
    let out =
        codac(&["compile", "examples/lm_head_ce.coda", "-o", out_dir.to_str().unwrap_or_default(), "--arch", "sm_86"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A dimension the kernels cannot index is a located diagnostic (E0601),
/// exit 1, from `compile`.
#[test]
fn compile_refuses_dims_of_two_to_the_31() {
    let dir = temp_dir("bigdim");
    let file = dir.join("big.coda");
    std::fs::write(&file, "dim M\ndim N = 2147483648\nblock b(x: f32[M, N]) -> (y: f32[M, N]) { y = x * 2 }\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let out_dir = dir.join("out");
    let out = codac(&[
        "compile",
        file.to_str().unwrap_or_default(),
        "-o",
        out_dir.to_str().unwrap_or_default(),
        "--color",
        "never",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("error[E0601]") && stderr.contains("big.coda:3:"), "{stderr}");
}

/// Builds a stand-in `libcuda.so.1` in `dir` that exports only the entry
/// points given in `c_source`; `None` when no C compiler is installed.
fn fake_libcuda(dir: &Path, c_source: &str) -> Option<PathBuf> {
    let source = dir.join("fake_cuda.c");
    std::fs::write(&source, c_source).unwrap_or_else(|e| panic!("{e}"));
    let lib = dir.join("libcuda.so.1");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(&lib)
        .arg(&source)
        .status()
        .ok()?;
    status.success().then_some(dir.to_path_buf())
}

/// A driver library that lacks an entry point the runtime calls is a typed
/// error (exit 1) naming the symbol, not a panic inside cudarc (exit 2).
#[test]
fn driver_missing_a_symbol_is_a_user_error() {
    let dir = temp_dir("fake-driver");
    // Enough to pass the presence and version checks, nothing more:
    // `cuDeviceGet` and everything after it are missing.
    let source = "int cuInit(unsigned f) { (void)f; return 0; }\n\
                  int cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n\
                  int cuDeviceGetCount(int *n) { *n = 1; return 0; }\n";
    let Some(lib_dir) = fake_libcuda(&dir, source) else {
        eprintln!("skipped: no C compiler to build a fake libcuda.so.1");
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for args in [
        vec!["run", "examples/out_proj_kernel.coda", "--dims", "M=64", "--random"],
        vec!["bench", "examples/out_proj_kernel.coda", "--dims", "M=64"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_codac"))
            .args(&args)
            .args(["--color", "never"])
            .env("LD_LIBRARY_PATH", &lib_dir)
            .current_dir(&root)
            .output()
            .unwrap_or_else(|e| panic!("cannot run codac: {e}"));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(!stderr.contains("internal compiler error"), "{args:?}: {stderr}");
        assert!(stderr.contains("cuDeviceGet"), "{args:?}: {stderr}");
    }
}

/// `codac explain f.coda | head -1`: a reader that stops early closes the
/// pipe. codac then ends the way `cat` or `grep` do, killed by SIGPIPE (the
/// shell's 141), with nothing on standard error; never an internal error.
#[cfg(unix)]
#[test]
fn closed_stdout_ends_quietly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for args in [["explain", "examples/llama3_block.coda"], ["explain", "--json"]] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codac"));
        cmd.args(args);
        if args[1] == "--json" {
            cmd.arg("examples/llama3_block.coda");
        }
        let mut child = cmd
            .current_dir(&root)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run codac: {e}"));
        // Close the reading end before codac writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {:?} {stderr}", out.status);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

/// Runs codac with a time limit: a read that never ends must fail the
/// test, not hang it.
fn codac_within(secs: u64, args: &[&str]) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut child = Command::new(env!("CARGO_BIN_EXE_codac"))
        .args(args)
        .current_dir(root)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run codac: {e}"));
    let start = std::time::Instant::now();
    while child.try_wait().unwrap_or_else(|e| panic!("{e}")).is_none() {
        if start.elapsed().as_secs() >= secs {
            let _ = child.kill();
            let _ = child.wait();
            panic!("codac {args:?} still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
}

/// An input `.npy` that is a link to `/dev/zero`, a FIFO, or a file with
/// more (or fewer) bytes than its header promises is refused, naming the
/// file, without reading past what the header promises.
#[cfg(unix)]
#[test]
fn npy_inputs_are_read_no_further_than_their_header_promises() {
    let dir = temp_dir("npy-hostile");
    let source = dir.join("scale.coda");
    std::fs::write(&source, "dim M\nblock s(x: f32[M, 3]) -> (y: f32[M, 3]) {\n    y = x * 2.0\n}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    type MakeInput<'a> = (&'a str, &'a dyn Fn(&Path));
    let cases: [MakeInput; 4] = [
        ("dev-zero", &|p| std::os::unix::fs::symlink("/dev/zero", p).unwrap_or_else(|e| panic!("{e}"))),
        ("fifo", &|p| {
            let made = Command::new("mkfifo").arg(p).status().unwrap_or_else(|e| panic!("{e}"));
            assert!(made.success());
        }),
        ("longer", &|p| {
            write_npy(p, &[2, 3], &[1.0; 6]);
            let mut bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{e}"));
            bytes.extend_from_slice(&[0; 4096]);
            std::fs::write(p, bytes).unwrap_or_else(|e| panic!("{e}"));
        }),
        ("shorter", &|p| {
            write_npy(p, &[2, 3], &[1.0; 6]);
            let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(p, &bytes[..bytes.len() - 4]).unwrap_or_else(|e| panic!("{e}"));
        }),
    ];
    for (name, make) in cases {
        let inputs = dir.join(name);
        std::fs::create_dir_all(&inputs).unwrap_or_else(|e| panic!("{e}"));
        let x = inputs.join("x.npy");
        make(&x);
        let out = codac_within(
            20,
            &[
                "eval",
                source.to_str().unwrap_or_default(),
                "--dims",
                "M=2",
                "--inputs",
                inputs.to_str().unwrap_or_default(),
            ],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains("x.npy"), "{name}: {stderr}");
    }
}

/// A source that never ends (`/dev/zero`) is refused at a size limit, not
/// read until memory runs out.
#[cfg(unix)]
#[test]
fn endless_source_is_refused() {
    let out = codac_within(20, &["check", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("larger than"), "{}", text(&out.stderr));
}

/// What the user can get wrong (`--dims`, `--inputs`, `--block`) is
/// reported before the GPU is looked for, so that it is found on any
/// machine.
#[test]
fn run_and_bench_check_their_arguments_before_the_gpu() {
    let missing = temp_dir("no-inputs").join("absent");
    let missing = missing.to_str().unwrap_or_default();
    let file = "examples/out_proj_kernel.coda";
    let cases: [(Vec<&str>, &str); 6] = [
        (vec!["run", file, "--dims", "Q=4", "--random"], "not a run-time dimension"),
        (vec!["run", file, "--dims", "M=64", "--inputs", missing], "cannot read"),
        (vec!["run", file, "--dims", "M=64", "--random", "--block", "nosuch"], "no block named `nosuch`"),
        (vec!["bench", file, "--dims", "Q=4"], "not a run-time dimension"),
        (vec!["bench", file, "--dims", "M=64", "--block", "nosuch"], "no block named `nosuch`"),
        (vec!["run", "examples/llama3_block.coda", "--random", "--dims", "M=64,T=3"], "not a run-time dimension"),
    ];
    for (args, expected) in cases {
        let out = codac(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// `--multiprocessors` only matters with `--dims`; alone it is refused,
/// not silently ignored.
#[test]
fn multiprocessors_needs_dims() {
    let dir = temp_dir("sms");
    let out = codac(&[
        "compile",
        "examples/out_proj_kernel.coda",
        "-o",
        dir.to_str().unwrap_or_default(),
        "--multiprocessors",
        "100",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--dims"), "{stderr}");
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

/// `--emit ''` writes only the manifest and says so, instead of listing
/// `.cu` files it did not write.
#[test]
fn emit_nothing_lists_no_files() {
    let dir = temp_dir("emit-nothing");
    let out =
        codac(&["compile", "examples/out_proj_kernel.coda", "-o", dir.to_str().unwrap_or_default(), "--emit", ""]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(file_names(&dir), ["manifest.json"]);
    assert!(!stdout.contains(".cu"), "{stdout}");
}

/// A second compile into the same directory leaves no file of the first
/// behind (fewer kernels, or fewer kinds of output), and keeps files
/// codac did not write.
#[test]
fn repeated_compile_leaves_no_stale_files() {
    let dir = temp_dir("recompile");
    let out_dir = dir.to_str().unwrap_or_default();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap_or_else(|e| panic!("{e}"));
    let out = codac(&["compile", "examples/gpt2_block.coda", "-o", out_dir]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(file_names(&dir).len() > 3);
    let out = codac(&["compile", "examples/out_proj_kernel.coda", "-o", out_dir]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let mut expected: Vec<String> = manifest["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|b| b["kernels"].as_array().into_iter().flatten())
        .filter_map(|k| k["file"].as_str().map(str::to_owned))
        .collect();
    expected.extend(["manifest.json".to_owned(), "notes.txt".to_owned()]);
    expected.sort();
    assert_eq!(file_names(&dir), expected);
    let out = codac(&["compile", "examples/out_proj_kernel.coda", "-o", out_dir, "--emit", ""]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(file_names(&dir), ["manifest.json", "notes.txt"]);
}

/// With `--grad`, `--block` takes the forward block's name (its training
/// step: saving forward and backward) as well as either of theirs, and an
/// unknown name lists the ones it takes.
#[test]
fn grad_block_takes_the_forward_name() {
    let dir = temp_dir("grad-block");
    let out_dir = dir.to_str().unwrap_or_default();
    let out = codac(&["compile", "examples/gpt2_block.coda", "-o", out_dir, "--grad", "--block", "gpt2_layer"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("block gpt2_layer_saving") && stdout.contains("block gpt2_layer_grad"), "{stdout}");
    let out = codac(&["compile", "examples/gpt2_block.coda", "-o", out_dir, "--grad", "--block", "gpt2_layer_grad"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("block gpt2_layer_saving"), "{}", text(&out.stdout));
    let out = codac(&["compile", "examples/gpt2_block.coda", "-o", out_dir, "--grad", "--block", "nosuch"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("gpt2_layer") && stderr.contains("gpt2_layer_grad"), "{stderr}");
}

/// PTX and CUBIN name their source without the directory codac ran in
/// (`-lineinfo` records it), and are the same bytes whether they come
/// from NVRTC or from a cache filled from another directory. Skipped
/// without NVRTC (set `CUDA_HOME` to a toolkit or the PyPI `nvidia/cu13`).
#[test]
fn ptx_and_cubin_do_not_depend_on_the_working_directory() {
    let dir = temp_dir("reproducible");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/out_proj_kernel.coda");
    let file = file.canonicalize().unwrap_or_else(|e| panic!("{e}"));
    let shared_cache = dir.join("cache");
    // (working directory, cache): the first fills the shared cache, the
    // second hits it from elsewhere, the third compiles afresh.
    let runs = [("here", shared_cache.clone()), ("there", shared_cache), ("there", dir.join("fresh-cache"))];
    let mut outputs: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
    for (i, (cwd, cache)) in runs.iter().enumerate() {
        let cwd = dir.join(cwd);
        let out_dir = dir.join(format!("out{i}"));
        std::fs::create_dir_all(&cwd).unwrap_or_else(|e| panic!("{e}"));
        let out = Command::new(env!("CARGO_BIN_EXE_codac"))
            .args(["compile", file.to_str().unwrap_or_default(), "--emit", "ptx,cubin", "-o"])
            .arg(&out_dir)
            .env("CODAC_CACHE_DIR", cache)
            .current_dir(&cwd)
            .output()
            .unwrap_or_else(|e| panic!("cannot run codac: {e}"));
        let stderr = text(&out.stderr);
        if without_nvrtc(&stderr) {
            return;
        }
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let mut files: Vec<(String, Vec<u8>)> = file_names(&out_dir)
            .into_iter()
            .filter(|n| n.ends_with(".ptx") || n.ends_with(".cubin"))
            .map(|n| {
                let bytes = std::fs::read(out_dir.join(&n)).unwrap_or_else(|e| panic!("{e}"));
                (n, bytes)
            })
            .collect();
        files.sort();
        assert!(!files.is_empty());
        let cwd_text = cwd.to_string_lossy().into_owned();
        for (name, bytes) in &files {
            let embedded = bytes.windows(cwd_text.len()).any(|w| w == cwd_text.as_bytes());
            assert!(!embedded, "{name} names the working directory {cwd_text}");
        }
        outputs.push(files);
    }
    assert!(outputs[0] == outputs[1], "a cache hit from another directory gave other bytes");
    assert!(outputs[1] == outputs[2], "a fresh compile gave other bytes than a cache hit");
}

/// Whether codac said it needs an NVRTC it did not find: the test then
/// says "skipped: no NVRTC", and fails where `CODAC_REQUIRE_NVRTC=1` (CI).
fn without_nvrtc(stderr: &str) -> bool {
    if !stderr.contains("needs NVRTC") {
        return false;
    }
    assert!(std::env::var("CODAC_REQUIRE_NVRTC").as_deref() != Ok("1"), "CODAC_REQUIRE_NVRTC=1: {stderr}");
    eprintln!("skipped: no NVRTC");
    true
}

#[test]
fn compile_time_lists_every_kernel_slowest_first() {
    let dir = temp_dir("time");
    let out = Command::new(env!("CARGO_BIN_EXE_codac"))
        .args(["compile", "../../examples/out_proj_kernel.coda", "--grad", "--time", "--emit", "cu", "-o"])
        .arg(&dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run codac: {e}"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    if without_nvrtc(&stderr) {
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let kernels: Vec<String> =
        file_names(&dir).into_iter().filter_map(|n| n.strip_suffix(".cu").map(str::to_owned)).collect();
    let table = stdout.split_once("NVRTC cold compile per kernel").map_or("", |(_, t)| t);
    let rows: Vec<(f64, &str)> = table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (secs, name) = l.trim().split_once(" s  ")?;
            Some((secs.trim().parse().ok()?, name))
        })
        .collect();
    let mut named: Vec<&str> = rows.iter().map(|r| r.1).collect();
    named.sort_unstable();
    assert_eq!(named, kernels, "{stdout}");
    assert!(rows.windows(2).all(|w| w[0].0 >= w[1].0), "not slowest first: {stdout}");
    assert!(rows.iter().all(|r| r.0 > 0.0), "{stdout}");
}
