//! Tests of the kernel cache with a fake compile step (no CUDA needed).

use std::cell::Cell;
use std::ffi::OsString;
use std::path::PathBuf;

use super::*;

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn artifacts(tag: u8) -> Artifacts {
    Artifacts { cubin: vec![tag; 4096], ptx: None, log: String::new() }
}

/// A compile closure that counts how often it ran.
fn counting(count: &Cell<u32>, tag: u8) -> impl FnOnce() -> Result<Artifacts> + '_ {
    move || {
        count.set(count.get() + 1);
        Ok(artifacts(tag))
    }
}

#[test]
fn miss_then_memory_hit_then_disk_hit() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let key = CacheKey::from_parts(&[b"src", b"-arch=sm_80"]);
    let n = Cell::new(0);

    let cache = KernelCache::new(Some(tmp.path().to_path_buf()));
    let (a, how) = cache.get_or_compile(&key, counting(&n, 1))?;
    assert_eq!((how, n.get(), a.cubin[0]), (Lookup::Compiled, 1, 1));
    let (_, how) = cache.get_or_compile(&key, counting(&n, 2))?;
    assert_eq!((how, n.get()), (Lookup::Memory, 1));
    assert!(cache.entry_path(&key).is_some_and(|p| p.is_file()));

    // A new process (new cache object) finds the entry on disk.
    let cache2 = KernelCache::new(Some(tmp.path().to_path_buf()));
    let (a, how) = cache2.get_or_compile(&key, counting(&n, 3))?;
    assert_eq!((how, n.get(), a.cubin[0]), (Lookup::Disk, 1, 1));
    assert!(how.is_hit());
    assert_eq!(cache2.stats().disk_hits, 1);
    assert_eq!(cache.stats().misses, 1);
    assert_eq!(cache.stats().memory_hits, 1);
    Ok(())
}

#[test]
fn corrupt_and_truncated_entries_are_recompiled_and_overwritten() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let key = CacheKey::from_parts(&[b"kernel"]);
    let n = Cell::new(0);
    KernelCache::new(Some(tmp.path().to_path_buf())).get_or_compile(&key, counting(&n, 7))?;
    let path = KernelCache::new(Some(tmp.path().to_path_buf())).entry_path(&key).ok_or("no entry path")?;
    let good = std::fs::read(&path)?;

    // Flip one byte in the cubin payload.
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    std::fs::write(&path, &bad)?;
    let cache = KernelCache::new(Some(tmp.path().to_path_buf()));
    let (a, how) = cache.get_or_compile(&key, counting(&n, 7))?;
    assert_eq!((how, n.get(), a.cubin[0]), (Lookup::Compiled, 2, 7));
    assert_eq!(cache.stats().corrupt_entries, 1);
    assert_eq!(std::fs::read(&path)?, good, "entry was not overwritten");

    // Truncate it.
    std::fs::write(&path, &good[..good.len() / 2])?;
    let cache = KernelCache::new(Some(tmp.path().to_path_buf()));
    let (_, how) = cache.get_or_compile(&key, counting(&n, 7))?;
    assert_eq!((how, n.get()), (Lookup::Compiled, 3));
    assert_eq!(cache.stats().corrupt_entries, 1);

    // Empty file.
    std::fs::write(&path, b"")?;
    let cache = KernelCache::new(Some(tmp.path().to_path_buf()));
    let (_, how) = cache.get_or_compile(&key, counting(&n, 7))?;
    assert_eq!((how, n.get()), (Lookup::Compiled, 4));

    // And now it is good again.
    let cache = KernelCache::new(Some(tmp.path().to_path_buf()));
    let (_, how) = cache.get_or_compile(&key, counting(&n, 7))?;
    assert_eq!((how, n.get()), (Lookup::Disk, 4));
    Ok(())
}

#[test]
fn failed_compiles_are_not_cached_and_no_temp_files_remain() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let cache = KernelCache::new(Some(tmp.path().to_path_buf()));
    let key = CacheKey::from_parts(&[b"bad"]);
    let r = cache.get_or_compile(&key, || Err(RuntimeError::InvalidInput("nope".into())));
    assert!(r.is_err());
    assert!(cache.entry_path(&key).is_some_and(|p| !p.exists()));
    let n = Cell::new(0);
    cache.get_or_compile(&key, counting(&n, 1))?;
    assert_eq!(n.get(), 1);
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path().join("kernels"))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
    Ok(())
}

#[test]
fn unwritable_cache_dir_still_compiles() -> TestResult {
    let tmp = tempfile::tempdir()?;
    // A *file* where the cache directory should be: nothing can be written.
    let blocker = tmp.path().join("not-a-dir");
    std::fs::write(&blocker, b"x")?;
    let cache = KernelCache::new(Some(blocker));
    let n = Cell::new(0);
    let key = CacheKey::from_parts(&[b"k"]);
    let (_, how) = cache.get_or_compile(&key, counting(&n, 1))?;
    assert_eq!(how, Lookup::Compiled);
    assert_eq!(cache.stats().write_errors, 1);
    let (_, how) = cache.get_or_compile(&key, counting(&n, 1))?;
    assert_eq!(how, Lookup::Memory);
    // Failed sources then go to the temp dir.
    let dumped = cache.dump_failed_source(&key, "int x", &["-arch=sm_80".into()])?;
    assert_eq!(std::fs::read_to_string(&dumped)?, "int x");
    Ok(())
}

#[test]
fn keys_depend_on_every_part_and_boundaries() {
    let a = CacheKey::from_parts(&[b"ab", b"c"]);
    let b = CacheKey::from_parts(&[b"a", b"bc"]);
    assert_ne!(a, b);
    assert_eq!(a, CacheKey::from_parts(&[b"ab", b"c"]));
    assert_eq!(a.hex().len(), 64);
}

#[test]
fn cache_dir_resolution_order() {
    let env = |pairs: Vec<(&'static str, &'static str)>| {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
    };
    let all = vec![("CODAC_CACHE_DIR", "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
    assert_eq!(cache_dir_from(env(all)), Some(PathBuf::from("/c")));
    let no_codac = vec![("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
    assert_eq!(cache_dir_from(env(no_codac)), Some(PathBuf::from("/x/codac")));
    let relative_xdg = vec![("XDG_CACHE_HOME", "rel"), ("HOME", "/h")];
    assert_eq!(cache_dir_from(env(relative_xdg)), Some(PathBuf::from("/h/.cache/codac")));
    let empty_codac = vec![("CODAC_CACHE_DIR", ""), ("HOME", "/h")];
    assert_eq!(cache_dir_from(env(empty_codac)), Some(PathBuf::from("/h/.cache/codac")));
    assert_eq!(cache_dir_from(env(vec![])), None);
}

/// Runs `f` on another thread and fails the test if it takes more than
/// `secs` seconds: a read of a FIFO would otherwise hang the suite.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs)).unwrap_or_else(|_| panic!("still running after {secs} s"))
}

/// A FIFO, a directory or a link to a device where an entry should be is
/// skipped without opening it for a read that never ends, then replaced.
#[cfg(unix)]
#[test]
fn non_regular_entries_are_never_read() -> TestResult {
    for kind in ["fifo", "dir", "dev-zero"] {
        let tmp = tempfile::tempdir()?;
        let key = CacheKey::from_parts(&[b"kernel", kind.as_bytes()]);
        let cache = KernelCache::new(Some(tmp.path().to_path_buf()));
        let path = cache.entry_path(&key).ok_or("no entry path")?;
        std::fs::create_dir_all(path.parent().ok_or("no parent")?)?;
        match kind {
            "fifo" => {
                let made = std::process::Command::new("mkfifo").arg(&path).status()?;
                assert!(made.success(), "mkfifo failed");
            }
            "dir" => std::fs::create_dir(&path)?,
            _ => std::os::unix::fs::symlink("/dev/zero", &path)?,
        }
        let (how, stats) = within(20, move || {
            let n = Cell::new(0);
            let got = cache.get_or_compile(&key, counting(&n, 5)).map(|(a, how)| (a.cubin[0], how));
            (got.ok(), cache.stats())
        });
        assert_eq!(how, Some((5, Lookup::Compiled)), "{kind}");
        assert_eq!(stats.corrupt_entries, 1, "{kind}");
        if kind != "dir" {
            assert!(std::fs::symlink_metadata(&path)?.is_file(), "{kind}: entry not replaced");
        }
    }
    Ok(())
}
