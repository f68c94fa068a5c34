//! Content-addressed kernel cache: an in-process map in front of an on-disk
//! store.
//!
//! * The key ([`CacheKey`]) is a sha256 over everything that determines the
//!   output: NVRTC version, the full NVRTC option list (arch, flags, include
//!   paths), the file-name hint and the source. See [`crate::Compiler`].
//! * The directory is `$CODAC_CACHE_DIR`, else `$XDG_CACHE_HOME/codac`, else
//!   `~/.cache/codac` ([`default_cache_dir`]); entries live in
//!   `<dir>/kernels/<key>.ckb`, sources NVRTC rejected in `<dir>/failed/`.
//! * Writes are atomic (temporary file in the same directory, then rename).
//! * Each entry carries a checksum (see `entry.rs`); a corrupt or truncated entry
//!   is counted, recompiled and overwritten, never trusted.
//! * Only regular files are read, at most `MAX_ENTRY_BYTES` of them (see
//!   [`crate::files`]): a FIFO, device or directory where an entry should
//!   be is counted as corrupt and replaced, never opened for a read that
//!   would block or not end.
//! * Disk problems never fail a compile: an unreadable or unwritable cache
//!   only costs a recompile (counted in [`CacheStats::write_errors`]).
//!
//! The compile step is a closure, so the cache logic is testable without
//! CUDA.

mod entry;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest, Sha256};

use crate::error::{Result, RuntimeError};

/// sha256 identifying one compilation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// Hashes `parts`, each length-prefixed so that part boundaries matter.
    pub fn from_parts(parts: &[&[u8]]) -> CacheKey {
        let mut h = Sha256::new();
        h.update(b"codac-kernel-cache-v1");
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        CacheKey(h.finalize().into())
    }

    /// Lower-case hex, 64 characters.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The output of one compilation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifacts {
    /// CUBIN image.
    pub cubin: Vec<u8>,
    /// PTX, when requested.
    pub ptx: Option<String>,
    /// NVRTC log (warnings).
    pub log: String,
}

/// Where a lookup was answered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The in-process map.
    Memory,
    /// A verified on-disk entry.
    Disk,
    /// Neither: the compile closure ran.
    Compiled,
}

impl Lookup {
    /// True for [`Lookup::Memory`] and [`Lookup::Disk`].
    pub fn is_hit(self) -> bool {
        self != Lookup::Compiled
    }
}

/// Counters since the cache was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Answered from memory.
    pub memory_hits: u64,
    /// Answered from a verified disk entry.
    pub disk_hits: u64,
    /// Compile closure ran.
    pub misses: u64,
    /// Disk entries rejected as corrupt (then recompiled and overwritten).
    pub corrupt_entries: u64,
    /// Failed attempts to write an entry.
    pub write_errors: u64,
}

/// In-process plus on-disk kernel cache.
#[derive(Debug)]
pub struct KernelCache {
    dir: Option<PathBuf>,
    memory: Mutex<HashMap<CacheKey, Arc<Artifacts>>>,
    stats: Mutex<CacheStats>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The cache directory from an environment: `$CODAC_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/codac`, else `$HOME/.cache/codac` (empty and relative
/// XDG values are ignored, as the XDG spec asks).
pub fn cache_dir_from(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = set("CODAC_CACHE_DIR") {
        return Some(d);
    }
    if let Some(d) = set("XDG_CACHE_HOME").filter(|d| d.is_absolute()) {
        return Some(d.join("codac"));
    }
    set("HOME").map(|h| h.join(".cache").join("codac"))
}

/// The cache directory for this process (see [`cache_dir_from`]).
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_dir_from(|k| std::env::var_os(k))
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically: a unique temporary file in the same
/// directory, flushed, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| RuntimeError::io(dir, e))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), TMP_COUNTER.fetch_add(1, Ordering::Relaxed)));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        RuntimeError::io(path, e)
    })
}

/// Larger entries are treated as corrupt, not read: a cubin with its PTX
/// is a few MB at most.
const MAX_ENTRY_BYTES: u64 = 1 << 30;

impl KernelCache {
    /// A cache storing entries under `dir` (memory only when `None`).
    pub fn new(dir: Option<PathBuf>) -> KernelCache {
        KernelCache { dir, memory: Mutex::new(HashMap::new()), stats: Mutex::new(CacheStats::default()) }
    }

    /// A cache in [`default_cache_dir`].
    pub fn from_env() -> KernelCache {
        Self::new(default_cache_dir())
    }

    /// The cache directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Where the entry for `key` lives on disk.
    pub fn entry_path(&self, key: &CacheKey) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join("kernels").join(format!("{}.ckb", key.hex())))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CacheStats {
        *lock(&self.stats)
    }

    /// Forgets the in-process entries (disk entries stay).
    pub fn clear_memory(&self) {
        lock(&self.memory).clear();
    }

    /// Returns the artifacts for `key`, from memory, from a verified disk
    /// entry, or by running `compile` (then stored in both). The memory lock
    /// is not held while `compile` runs, so distinct kernels compile in
    /// parallel.
    pub fn get_or_compile<F>(&self, key: &CacheKey, compile: F) -> Result<(Arc<Artifacts>, Lookup)>
    where
        F: FnOnce() -> Result<Artifacts>,
    {
        if let Some(a) = lock(&self.memory).get(key) {
            lock(&self.stats).memory_hits += 1;
            return Ok((a.clone(), Lookup::Memory));
        }
        let path = self.entry_path(key);
        if let Some(path) = &path {
            match crate::files::read_regular(path, MAX_ENTRY_BYTES) {
                Ok(bytes) => match entry::decode(key, &bytes) {
                    Ok(a) => {
                        lock(&self.stats).disk_hits += 1;
                        return Ok((self.remember(key, a), Lookup::Disk));
                    }
                    Err(_) => lock(&self.stats).corrupt_entries += 1,
                },
                // Absent, or unreadable: recompile. Something that is not
                // a regular file (or is absurdly large) counts as corrupt.
                Err(e) if matches!(e.kind(), std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData) => {
                    lock(&self.stats).corrupt_entries += 1
                }
                Err(_) => {}
            }
        }
        let artifacts = compile()?;
        lock(&self.stats).misses += 1;
        if let Some(path) = &path {
            if write_atomic(path, &entry::encode(key, &artifacts)).is_err() {
                lock(&self.stats).write_errors += 1;
            }
        }
        Ok((self.remember(key, artifacts), Lookup::Compiled))
    }

    fn remember(&self, key: &CacheKey, a: Artifacts) -> Arc<Artifacts> {
        let a = Arc::new(a);
        lock(&self.memory).insert(*key, a.clone());
        a
    }

    /// Writes a source NVRTC rejected (and its options, next to it as
    /// `<key>.options.txt`) under `<dir>/failed/`, or under the system
    /// temporary directory when there is no usable cache directory. Returns
    /// the source's path, or the error of the last attempt.
    pub fn dump_failed_source(&self, key: &CacheKey, source: &str, options: &[String]) -> Result<PathBuf> {
        let mut dirs: Vec<PathBuf> = self.dir.iter().map(|d| d.join("failed")).collect();
        dirs.push(std::env::temp_dir().join("codac-failed"));
        let mut last_err = None;
        for dir in dirs {
            let src = dir.join(format!("{}.cu", key.hex()));
            match write_atomic(&src, source.as_bytes()) {
                Ok(()) => {
                    let opts = dir.join(format!("{}.options.txt", key.hex()));
                    let _ = write_atomic(&opts, options.join("\n").as_bytes());
                    return Ok(src);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| RuntimeError::InvalidInput("no directory to dump the source to".into())))
    }
}

#[cfg(test)]
mod tests;
