//! Tidy checks on the source tree: module docs everywhere, `unsafe` and
//! cudarc confined to the runtime crate (and `unsafe` at the Python
//! binding's FFI boundary, its `executor.rs`).

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !path.ends_with("target") && !path.ends_with("snapshots") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["crates", "tests", "fuzz/fuzz_targets"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    files.sort();
    files
}

#[test]
fn every_rust_file_starts_with_module_docs() {
    let files = sources();
    assert!(files.len() > 10, "found only {} files", files.len());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(text.starts_with("//!"), "{} does not start with a `//!` comment", file.display());
    }
}

#[test]
fn unsafe_only_in_the_runtime() {
    for file in sources() {
        let in_runtime = file.components().any(|c| c.as_os_str() == "coda-runtime");
        // The binding wraps PyTorch's stream handle and workspace pointer.
        let at_ffi_boundary = file.ends_with("crates/coda-py/src/executor.rs");
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        // The keyword is assembled so that this file does not match itself.
        let keyword = ["un", "safe "].concat();
        let uses_unsafe = text.lines().any(|l| {
            let code = l.split("//").next().unwrap_or("");
            ["{", "fn", "impl"].iter().any(|next| code.contains(&format!("{keyword}{next}")))
        });
        assert!(in_runtime || at_ffi_boundary || !uses_unsafe, "{} uses unsafe outside coda-runtime", file.display());
    }
}

#[test]
fn cudarc_only_in_the_runtime() {
    let Ok(entries) = std::fs::read_dir(workspace().join("crates")) else { panic!("no crates/") };
    for entry in entries.flatten() {
        let manifest = std::fs::read_to_string(entry.path().join("Cargo.toml")).unwrap_or_default();
        let is_runtime = entry.file_name() == "coda-runtime";
        assert!(is_runtime || !manifest.contains("cudarc"), "{:?} depends on cudarc", entry.file_name());
    }
}
