//! What the end-to-end tests of the `codac` binary share: running it from
//! the workspace root, where the examples' relative paths resolve.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `codac` with `args` from the workspace root.
pub(crate) fn codac(args: &[&str]) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Command::new(env!("CARGO_BIN_EXE_codac"))
        .args(args)
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run codac: {e}"))
}
