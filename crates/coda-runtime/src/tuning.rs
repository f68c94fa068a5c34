//! The autotuner's memory (`codac bench --autotune`): which tile
//! configuration won for a kernel, kept next to the kernel cache in
//! `<cache dir>/tuning.tsv`, one `key<TAB>configuration` line per kernel.
//!
//! A key ([`TuningKey`]) is a sha256 over everything the measurement
//! depends on (the device, the kernel's source with the rules' own
//! configuration, the run-time dimensions), so an entry goes stale by
//! itself when the compiler or the program changes: it is then never found
//! again. The source holds the kernel's name and its configuration, so an
//! entry never applies to another kernel. Reading never fails (a missing
//! or unreadable file is an empty memory, malformed lines are skipped);
//! writes are atomic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cache::{default_cache_dir, write_atomic, CacheKey};
use crate::error::Result;

/// The file name of the tuning memory inside the cache directory.
pub const TUNING_FILE: &str = "tuning.tsv";

/// What a tuning result is filed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TuningKey(CacheKey);

impl TuningKey {
    /// Hashes `parts` (each length-prefixed), e.g. the device name, the
    /// architecture, the kernel's source and the dimensions.
    pub fn from_parts(parts: &[&[u8]]) -> TuningKey {
        let mut all: Vec<&[u8]> = vec![b"codac-tuning-v1"];
        all.extend_from_slice(parts);
        TuningKey(CacheKey::from_parts(&all))
    }

    /// Lower-case hex, 64 characters.
    pub fn hex(&self) -> String {
        self.0.hex()
    }
}

/// The tuning results on disk, loaded into memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TuningStore {
    path: Option<PathBuf>,
    entries: BTreeMap<String, String>,
}

impl TuningStore {
    /// The store of the cache directory `dir` (nothing on disk: `None`).
    pub fn open(dir: Option<&Path>) -> TuningStore {
        let path = dir.map(|d| d.join(TUNING_FILE));
        // The file is ours and small; anything else at its path (a FIFO, a
        // device, gigabytes) is ignored like an unreadable file.
        let text = path
            .as_ref()
            .and_then(|p| crate::files::read_regular(p, 64 << 20).ok())
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .unwrap_or_default();
        TuningStore { path, entries: parse(&text) }
    }

    /// The store of this process's cache directory
    /// ([`default_cache_dir`]).
    pub fn from_env() -> TuningStore {
        TuningStore::open(default_cache_dir().as_deref())
    }

    /// Where the store is written (`None`: memory only).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The configuration filed under `key`.
    pub fn get(&self, key: &TuningKey) -> Option<&str> {
        self.entries.get(&key.hex()).map(String::as_str)
    }

    /// Files `config` under `key` (in memory; [`TuningStore::save`] writes).
    pub fn set(&mut self, key: &TuningKey, config: &str) {
        self.entries.insert(key.hex(), config.to_string());
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the store has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the store (sorted, so byte-for-byte deterministic); a store
    /// without a directory writes nothing.
    pub fn save(&self) -> Result<()> {
        let Some(path) = &self.path else { return Ok(()) };
        write_atomic(path, render(&self.entries).as_bytes())
    }
}

/// Entries of a tuning file: `key<TAB>value` lines, others skipped.
fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('\t'))
        .filter(|(k, v)| {
            k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()) && !v.is_empty() && !v.contains('\t')
        })
        .map(|(k, v)| (k.to_string(), v.trim_end().to_string()))
        .collect()
}

fn render(entries: &BTreeMap<String, String>) -> String {
    entries.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_a_round_trip_and_keys_depend_on_every_part() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = TuningKey::from_parts(&[b"H100", b"sm_90a", b"source", b"M=8192"]);
        let b = TuningKey::from_parts(&[b"H100", b"sm_90a", b"source", b"M=1000"]);
        assert_ne!(a, b);
        let mut store = TuningStore::open(Some(dir.path()));
        assert!(store.is_empty());
        store.set(&a, "Sm90Cfg128x128");
        store.save().expect("save");
        let again = TuningStore::open(Some(dir.path()));
        assert_eq!(again.get(&a), Some("Sm90Cfg128x128"));
        assert_eq!(again.get(&b), None);
        assert_eq!(again.len(), 1);
    }

    #[test]
    fn malformed_lines_are_skipped_and_a_missing_file_is_empty() {
        let key = "ab".repeat(32);
        let text = format!("garbage\n{key}\tSm90Cfg128x256\nshort\tSm90Cfg128x128\n{key}x\tA\n\n");
        let entries = parse(&text);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries.get(&key).map(String::as_str), Some("Sm90Cfg128x256"));
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(TuningStore::open(Some(&dir.path().join("absent"))).is_empty());
        assert!(TuningStore::open(None).save().is_ok());
    }
}
