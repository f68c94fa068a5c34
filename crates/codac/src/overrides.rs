//! Hand-edited kernels for experiments: with `CODAC_KERNEL_OVERRIDE_DIR`
//! set, `codac run` and `codac bench` compile a file of that directory in
//! place of the generated kernel of the same file name (`<block>_<kernel>.cu`,
//! as `codac compile` writes it), and say so for each one. The kernel's
//! parameters and launch stay those of the manifest, so an edit must keep
//! the entry point's signature. This is how an idea is measured before it
//! is built into the code generator (`docs/cli.md`).

use anyhow::{Context, Result};
use std::path::Path;

/// The environment variable naming the directory of replacement sources.
pub(crate) const VAR: &str = "CODAC_KERNEL_OVERRIDE_DIR";

/// Replaces every kernel source that has a file of the same name in the
/// override directory, if one is set; returns the replaced file names.
pub(crate) fn apply(compiled: &mut coda::Compiled) -> Result<Vec<String>> {
    let Some(dir) = std::env::var_os(VAR) else { return Ok(Vec::new()) };
    replace_from(Path::new(&dir), compiled)
}

fn replace_from(dir: &Path, compiled: &mut coda::Compiled) -> Result<Vec<String>> {
    let mut replaced = Vec::new();
    for kernel in &mut compiled.kernels {
        let path = dir.join(&kernel.file_name);
        if !path.is_file() {
            continue;
        }
        kernel.source = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        eprintln!(
            "warning: {} compiled from {} ({VAR}), not from the generated source",
            kernel.file_name,
            path.display()
        );
        replaced.push(kernel.file_name.clone());
    }
    Ok(replaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled() -> coda::Compiled {
        let text = "dim M\nblock b(x: bf16[M, 64], w: bf16[64, 64]) -> (y: f32[M, 64]) {\n    y = x @ w.T\n}\n";
        let checked = coda::check("b.coda", text).unwrap_or_else(|e| panic!("{e}"));
        coda::compile(&checked, &coda::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_file_of_the_same_name_replaces_the_generated_source() {
        let mut compiled = compiled();
        let dir = std::env::temp_dir().join(format!("codac-override-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let target = compiled.kernels.last().map(|k| k.file_name.clone()).unwrap_or_default();
        std::fs::write(dir.join(&target), "// edited\n").unwrap_or_else(|e| panic!("{e}"));
        let untouched: Vec<String> =
            compiled.kernels.iter().filter(|k| k.file_name != target).map(|k| k.source.clone()).collect();
        let replaced = replace_from(&dir, &mut compiled).unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(replaced, vec![target.clone()]);
        assert_eq!(compiled.source(&target), Some("// edited\n"));
        let after: Vec<String> =
            compiled.kernels.iter().filter(|k| k.file_name != target).map(|k| k.source.clone()).collect();
        assert_eq!(after, untouched);
    }
}
