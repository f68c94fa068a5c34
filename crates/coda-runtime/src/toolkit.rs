//! CUDA toolkit discovery: the toolkit root, its include directories and the
//! NVRTC shared library inside it.
//!
//! The root is the first existing directory among `$CUDA_HOME`, `$CUDA_PATH`
//! and `/usr/local/cuda` (in that order). Include directories are
//! `<root>/include` plus `<root>/include/cccl` when it exists (the PyPI
//! `nvidia-cuda-cccl` wheel puts `cuda/std/...` there). NVRTC is looked for in
//! `<root>/lib`, `<root>/lib64`, then a few system library directories; when
//! none holds it, the dynamic loader's own search (LD_LIBRARY_PATH, ld.so
//! cache) is the last resort — see [`crate::loader`].
//!
//! Discovery is pure path logic over an injectable environment so that it can
//! be tested against fake directory trees.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Toolkit roots tried after `$CUDA_HOME` and `$CUDA_PATH`.
const DEFAULT_ROOTS: &[&str] = &["/usr/local/cuda"];

/// Directories (besides the toolkit's own) searched for `libnvrtc`.
const SYSTEM_LIB_DIRS: &[&str] = &[
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
];

/// A discovered CUDA toolkit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolkit {
    /// The toolkit root, if one was found.
    pub root: Option<PathBuf>,
    /// Include directories passed to NVRTC (`--include-path`).
    pub include_dirs: Vec<PathBuf>,
    /// Absolute path of the NVRTC library, if found on disk.
    pub nvrtc_library: Option<PathBuf>,
    /// Root candidates that were looked at, in order.
    pub searched_roots: Vec<PathBuf>,
    /// Library directories searched for NVRTC, in order.
    pub searched_lib_dirs: Vec<PathBuf>,
}

impl Toolkit {
    /// Discovers the toolkit from the process environment.
    pub fn discover() -> Toolkit {
        Self::discover_with(|name| std::env::var_os(name), DEFAULT_ROOTS, SYSTEM_LIB_DIRS)
    }

    /// Discovers the toolkit using `env` to read environment variables,
    /// `default_roots` as the roots tried after `$CUDA_HOME` / `$CUDA_PATH`,
    /// and `system_lib_dirs` as the fallback library directories.
    pub fn discover_with(
        env: impl Fn(&str) -> Option<OsString>,
        default_roots: &[&str],
        system_lib_dirs: &[&str],
    ) -> Toolkit {
        let mut searched_roots = Vec::new();
        let mut root = None;
        for candidate in root_candidates(&env, default_roots) {
            searched_roots.push(candidate.clone());
            if candidate.is_dir() {
                root = Some(candidate);
                break;
            }
        }
        let include_dirs = root.as_deref().map(include_dirs_of).unwrap_or_default();

        let mut lib_dirs: Vec<PathBuf> = Vec::new();
        if let Some(r) = &root {
            lib_dirs.push(r.join("lib"));
            lib_dirs.push(r.join("lib64"));
        }
        lib_dirs.extend(system_lib_dirs.iter().map(PathBuf::from));

        let mut nvrtc_library = None;
        let mut searched_lib_dirs = Vec::new();
        for dir in &lib_dirs {
            searched_lib_dirs.push(dir.clone());
            if let Some(found) = find_nvrtc_in(dir) {
                nvrtc_library = Some(found);
                break;
            }
        }
        Toolkit { root, include_dirs, nvrtc_library, searched_roots, searched_lib_dirs }
    }

    /// A toolkit rooted at `root`, without consulting the environment or
    /// system directories.
    pub fn at(root: impl Into<PathBuf>) -> Toolkit {
        let root = root.into();
        Self::discover_with(|name| (name == "CUDA_HOME").then(|| root.clone().into_os_string()), &[], &[])
    }

    /// Every library directory worth searching for a CUDA library: the
    /// ones searched for NVRTC, then the system ones not among them.
    pub fn lib_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.searched_lib_dirs.clone();
        for d in SYSTEM_LIB_DIRS.iter().map(PathBuf::from) {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
        dirs
    }

    /// Looks for a header in the include directories.
    pub fn find_header(&self, name: &str) -> Option<PathBuf> {
        self.include_dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())
    }
}

/// Root candidates in priority order: `$CUDA_HOME`, `$CUDA_PATH`, then the defaults.
fn root_candidates(env: &impl Fn(&str) -> Option<OsString>, default_roots: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            out.push(PathBuf::from(v));
        }
    }
    out.extend(default_roots.iter().map(PathBuf::from));
    out
}

/// `<root>/include` plus `<root>/include/cccl` if present.
fn include_dirs_of(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let include = root.join("include");
    if include.is_dir() {
        let cccl = include.join("cccl");
        dirs.push(include);
        if cccl.is_dir() {
            dirs.push(cccl);
        }
    }
    dirs
}

/// File names of NVRTC in one directory, best first.
///
/// Prefers the unversioned development symlink, then the CUDA major this
/// crate is built for, then any other `libnvrtc.so.*` (never the
/// `-builtins` or `.alt` variants).
pub(crate) fn nvrtc_file_names() -> Vec<String> {
    #[cfg(windows)]
    {
        vec!["nvrtc64_130_0.dll".into(), "nvrtc64_13.dll".into()]
    }
    #[cfg(not(windows))]
    {
        vec!["libnvrtc.so".into(), format!("libnvrtc.so.{}", crate::loader::CUDA_MAJOR)]
    }
}

fn find_nvrtc_in(dir: &Path) -> Option<PathBuf> {
    for name in nvrtc_file_names() {
        let p = dir.join(&name);
        if p.is_file() {
            return Some(p);
        }
    }
    // Any other versioned libnvrtc.so.N (sorted for determinism).
    let mut others: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libnvrtc.so.") && p.is_file())
        })
        .collect();
    others.sort();
    others.pop()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn touch(p: &Path) {
        if let Some(parent) = p.parent() {
            assert!(fs::create_dir_all(parent).is_ok());
        }
        assert!(fs::write(p, b"").is_ok());
    }

    fn env_of(pairs: Vec<(&'static str, PathBuf)>) -> impl Fn(&str) -> Option<OsString> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone().into_os_string())
    }

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn pip_layout_is_discovered() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path().join("cu13");
        touch(&root.join("include/cuda_bf16.h"));
        touch(&root.join("include/cccl/cuda/std/cstdint"));
        touch(&root.join("lib/libnvrtc.so.13"));
        touch(&root.join("lib/libnvrtc-builtins.so.13.0"));
        let tk = Toolkit::discover_with(env_of(vec![("CUDA_HOME", root.clone())]), &[], &[]);
        assert_eq!(tk.root.as_deref(), Some(root.as_path()));
        assert_eq!(tk.include_dirs, vec![root.join("include"), root.join("include/cccl")]);
        assert_eq!(tk.nvrtc_library, Some(root.join("lib/libnvrtc.so.13")));
        assert_eq!(tk.find_header("cuda_bf16.h"), Some(root.join("include/cuda_bf16.h")));
        Ok(())
    }

    #[test]
    fn cuda_home_wins_over_cuda_path_and_missing_dirs_are_skipped() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        touch(&b.join("include/cuda.h"));
        touch(&b.join("lib64/libnvrtc.so"));
        // CUDA_HOME points to a directory that does not exist: skip to CUDA_PATH.
        let tk = Toolkit::discover_with(env_of(vec![("CUDA_HOME", a.clone()), ("CUDA_PATH", b.clone())]), &[], &[]);
        assert_eq!(tk.root.as_deref(), Some(b.as_path()));
        assert_eq!(tk.include_dirs, vec![b.join("include")]);
        assert_eq!(tk.nvrtc_library, Some(b.join("lib64/libnvrtc.so")));
        assert_eq!(tk.searched_roots, vec![a.clone(), b.clone()]);

        touch(&a.join("include/cuda.h"));
        let tk = Toolkit::discover_with(env_of(vec![("CUDA_HOME", a.clone()), ("CUDA_PATH", b.clone())]), &[], &[]);
        assert_eq!(tk.root.as_deref(), Some(a.as_path()));
        assert_eq!(tk.nvrtc_library, None);
        assert_eq!(tk.searched_lib_dirs, vec![a.join("lib"), a.join("lib64")]);
        let at = Toolkit::at(&a);
        assert_eq!((at.root, at.include_dirs), (tk.root, tk.include_dirs));
        Ok(())
    }

    #[test]
    fn system_dirs_are_a_fallback_and_other_versions_are_found() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let sys = tmp.path().join("syslib");
        touch(&sys.join("libnvrtc.so.12"));
        touch(&sys.join("libnvrtc-builtins.so.12.4"));
        let sys_str = sys.to_string_lossy().into_owned();
        let tk = Toolkit::discover_with(|_| None, &[], &[sys_str.as_str()]);
        assert_eq!(tk.root, None);
        assert!(tk.include_dirs.is_empty());
        assert_eq!(tk.nvrtc_library, Some(sys.join("libnvrtc.so.12")));
        Ok(())
    }
}
