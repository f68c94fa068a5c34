//! The reference interpreter as the CLI runs it (`eval`, `eval --grad`,
//! `run --check`): a memory estimate checked against the memory available
//! before anything is allocated, progress on a terminal, and every error
//! rendered as a diagnostic located in the `.coda` source.
//!
//! The memory available is the least of `MemAvailable` in `/proc/meminfo`
//! and the headroom under the process's cgroup limit (`memory.max` minus
//! `memory.current` in cgroup v2, `memory.limit_in_bytes` minus
//! `memory.usage_in_bytes` in v1), unless `--max-memory` says otherwise.

use anyhow::Result;
use coda::ir::interp::{describe_bytes, estimate, eval_with, Estimate, Progress};
use coda::ir::Block;
use coda::{DimBindings, EvalError, EvalOptions, HostTensor, SourceFile};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// An error already turned into a located diagnostic; `main` renders it
/// and exits with 1, or with 2 when it is a bug in codac.
#[derive(Debug)]
pub(crate) struct Located {
    /// The source the diagnostic points into.
    pub(crate) source: SourceFile,
    /// The diagnostic.
    pub(crate) diagnostic: coda::Diagnostic,
    /// Whether it is a bug in codac.
    pub(crate) is_bug: bool,
}

impl std::fmt::Display for Located {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.diagnostic.title)
    }
}

impl std::error::Error for Located {}

/// An evaluation error of `block` as a [`Located`] error.
pub(crate) fn located(source: &SourceFile, block: &Block, error: &EvalError) -> anyhow::Error {
    Located { source: source.clone(), diagnostic: error.diagnostic(block), is_bug: error.is_bug() }.into()
}

/// The most memory an evaluation may use, and where that number comes from.
#[derive(Debug, Clone)]
pub(crate) struct MemoryLimit {
    /// Bytes.
    pub(crate) bytes: u64,
    /// Where the limit comes from, for messages.
    pub(crate) origin: String,
}

impl MemoryLimit {
    /// `--max-memory` when given, else the memory available now; `None`
    /// when neither is known (no `/proc`), which leaves only the
    /// interpreter's own limit.
    pub(crate) fn new(max_memory: Option<u64>) -> Option<MemoryLimit> {
        match max_memory {
            Some(bytes) => Some(MemoryLimit { bytes, origin: "set by --max-memory".into() }),
            None => available_memory(),
        }
    }
}

/// The memory available now: `MemAvailable`, or less under a cgroup limit.
fn available_memory() -> Option<MemoryLimit> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let available = meminfo
        .as_deref()
        .and_then(mem_available)
        .map(|bytes| MemoryLimit { bytes, origin: "the memory available (MemAvailable in /proc/meminfo)".into() });
    let cgroup = cgroup_headroom()
        .map(|bytes| MemoryLimit { bytes, origin: "the memory left under this process's cgroup limit".into() });
    match (available, cgroup) {
        (Some(a), Some(c)) => Some(if c.bytes < a.bytes { c } else { a }),
        (a, c) => a.or(c),
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bytes left under the cgroup's memory limit, when there is a limit.
fn cgroup_headroom() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut candidates = Vec::new();
    for line in groups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if controllers.is_empty() {
            candidates.push((format!("/sys/fs/cgroup{path}"), "memory.max", "memory.current"));
        } else if controllers.split(',').any(|c| c == "memory") {
            let dir = format!("/sys/fs/cgroup/memory{path}");
            candidates.push((dir, "memory.limit_in_bytes", "memory.usage_in_bytes"));
        }
    }
    // Inside a container the group's own path is often not mounted; its root is.
    candidates.push(("/sys/fs/cgroup".into(), "memory.max", "memory.current"));
    candidates.push(("/sys/fs/cgroup/memory".into(), "memory.limit_in_bytes", "memory.usage_in_bytes"));
    candidates.into_iter().find_map(|(dir, limit, usage)| {
        let read = |file: &str| std::fs::read_to_string(format!("{dir}/{file}")).ok();
        let limit: u64 = read(limit)?.trim().parse().ok()?;
        // "max", or a v1 "no limit" near 2^63, means there is none.
        if limit >= 1 << 60 {
            return None;
        }
        let usage: u64 = read(usage).and_then(|u| u.trim().parse().ok()).unwrap_or(0);
        Some(limit.saturating_sub(usage))
    })
}

/// Refuses, before anything is allocated, an evaluation of `block` whose
/// estimate exceeds `limit`; `blocks` are every block the command
/// evaluates for it (a saving forward and its backward, or the block).
pub(crate) fn check_memory(
    source: &SourceFile,
    blocks: &[&Block],
    dims: &DimBindings,
    limit: Option<&MemoryLimit>,
) -> Result<()> {
    for block in blocks {
        let needed = estimate(block, dims).map_err(|e| located(source, block, &e))?;
        let Some(limit) = limit else { continue };
        if needed.total_bytes() > limit.bytes {
            return Err(too_large(source, block, dims, &needed, limit));
        }
    }
    Ok(())
}

/// The refusal of an evaluation that would need more than `limit`.
fn too_large(
    source: &SourceFile,
    block: &Block,
    dims: &DimBindings,
    needed: &Estimate,
    limit: &MemoryLimit,
) -> anyhow::Error {
    let at = if dims.is_empty() {
        String::new()
    } else {
        let bound: Vec<String> = dims.iter().map(|(name, value)| format!("{name} = {value}")).collect();
        format!("at {}: ", bound.join(", "))
    };
    let title = format!(
        "evaluating block `{}` would need about {}, more than the limit of {}",
        block.name,
        describe_bytes(needed.total_bytes()),
        describe_bytes(limit.bytes)
    );
    let label = format!(
        "{at}{} of inputs and up to {} of values live at once (8 bytes an element)",
        describe_bytes(needed.input_bytes),
        describe_bytes(needed.peak_bytes)
    );
    let allow = "pass `--max-memory SIZE` to allow more (e.g. `--max-memory 64G`)";
    let help = match smaller_dims(block, dims, limit.bytes) {
        Some((dims, needed)) => {
            let bound: Vec<String> = dims.iter().map(|(name, value)| format!("{name}={value}")).collect();
            format!(
                "evaluate with smaller dims (`--dims {}` needs about {}), or {allow}",
                bound.join(","),
                describe_bytes(needed)
            )
        }
        None => {
            let smallest: DimBindings = dims.keys().map(|name| (name.clone(), 1)).collect();
            let floor = estimate(block, &smallest).map_or(String::new(), |needed| {
                format!(" (with every run-time dim 1 it still needs about {})", describe_bytes(needed.total_bytes()))
            });
            format!("no smaller dims fit{floor}: {allow}")
        }
    };
    let diagnostic = coda::Diagnostic::error("E0702", title)
        .with_primary(first_line(source, block.span), label)
        .with_note(format!("the limit is {}", limit.origin))
        .with_help(help);
    Located { source: source.clone(), diagnostic, is_bug: false }.into()
}

/// The part of `span` on its first line: a block's header, not its body.
fn first_line(source: &SourceFile, span: coda::Span) -> coda::Span {
    let text = source.slice(span);
    let end = text.find('\n').map_or(text.len(), |n| text[..n].trim_end().len());
    let start = span.range().start;
    coda::Span::new(start, start + end)
}

/// The dims halved together until the block fits in `limit` bytes, with
/// the estimate there.
fn smaller_dims(block: &Block, dims: &DimBindings, limit: u64) -> Option<(DimBindings, u64)> {
    let mut smaller = dims.clone();
    for _ in 0..64 {
        if smaller.values().all(|v| *v <= 1) {
            return None;
        }
        for value in smaller.values_mut() {
            *value = (*value / 2).max(1);
        }
        let needed = estimate(block, &smaller).ok()?.total_bytes();
        if needed <= limit {
            return Some((smaller, needed));
        }
    }
    None
}

/// Runs the interpreter on `block`, its errors located in `source`, with
/// progress on standard error when that is a terminal and the evaluation
/// takes a while.
pub(crate) fn evaluate(
    source: &SourceFile,
    block: &Block,
    dims: &DimBindings,
    inputs: &BTreeMap<String, HostTensor>,
    options: &EvalOptions,
    limit: Option<&MemoryLimit>,
) -> Result<BTreeMap<String, HostTensor>> {
    let bytes = limit.map_or(coda::ir::interp::MEMORY_LIMIT_BYTES, |l| l.bytes);
    let mut line = ProgressLine::new(source, &block.name);
    let result = eval_with(block, dims, inputs, options, bytes, &mut |p| line.show(p));
    line.clear();
    result.map_err(|e| located(source, block, &e))
}

/// How long an evaluation runs before its progress is shown.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// Work (elements plus multiply-adds) of one step that is worth showing
/// before it starts: about a second of the interpreter's matmuls.
const LONG_STEP: u128 = 1 << 30;

/// Redraws of the progress line at most this often.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// One line of progress on a terminal's standard error, redrawn in place.
struct ProgressLine<'a> {
    source: &'a SourceFile,
    block: &'a str,
    terminal: bool,
    start: Instant,
    drawn: Option<Instant>,
}

impl<'a> ProgressLine<'a> {
    fn new(source: &'a SourceFile, block: &'a str) -> Self {
        let terminal = std::io::stderr().is_terminal();
        ProgressLine { source, block, terminal, start: Instant::now(), drawn: None }
    }

    /// Shows how far the evaluation is and the line it is computing: once
    /// it has run for [`PROGRESS_AFTER`], or before a step of at least
    /// [`LONG_STEP`] units of work.
    fn show(&mut self, progress: Progress) {
        let now = Instant::now();
        let long_step = progress.step >= LONG_STEP;
        if !self.terminal || (now.duration_since(self.start) < PROGRESS_AFTER && !long_step) {
            return;
        }
        if !long_step && self.drawn.is_some_and(|drawn| now.duration_since(drawn) < PROGRESS_EVERY) {
            return;
        }
        self.drawn = Some(now);
        let percent = if progress.total == 0 { 100.0 } else { progress.done as f64 * 100.0 / progress.total as f64 };
        let at = self.source.location(progress.span);
        let elapsed = now.duration_since(self.start).as_secs_f64();
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[Keval {}: {percent:.0}% of the work, at {at}, {elapsed:.0} s", self.block);
        if long_step {
            let _ = write!(stderr, " (this step: {:.1e} multiply-adds or elements)", progress.step as f64);
        }
        let _ = stderr.flush();
    }

    /// Erases the line, so that what follows starts on a clean line.
    fn clear(&mut self) {
        if self.drawn.is_some() {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
        }
    }
}

/// Random inputs at least this large are announced on a terminal (the
/// 8B example's 1.7 GB take seconds to draw).
const ANNOUNCED_INPUT_BYTES: u64 = 256 << 20;

/// A line on a terminal's standard error while large random inputs are
/// drawn, erased when dropped.
pub(crate) struct InputsLine {
    shown: bool,
}

impl InputsLine {
    /// Shows the line when standard error is a terminal and the inputs of
    /// `block` take at least [`ANNOUNCED_INPUT_BYTES`].
    pub(crate) fn new(block: &Block, dims: &DimBindings) -> InputsLine {
        let bytes = estimate(block, dims).map_or(0, |e| e.input_bytes);
        let shown = bytes >= ANNOUNCED_INPUT_BYTES && std::io::stderr().is_terminal();
        if shown {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[Keval {}: drawing {} of random inputs", block.name, describe_bytes(bytes));
            let _ = stderr.flush();
        }
        InputsLine { shown }
    }
}

impl Drop for InputsLine {
    fn drop(&mut self) {
        if self.shown {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
        }
    }
}

/// Parses `--max-memory`: bytes, or a number with `K`, `M`, `G` or `T`
/// (powers of 1024, an optional `iB` or `B` after it).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    let number_end = lower.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(lower.len());
    let (number, unit) = lower.split_at(number_end);
    let shift = match unit.trim() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("`{trimmed}`: expected a size such as 512M, 8G or 1T")),
    };
    let value: f64 = number.parse().map_err(|_| format!("`{trimmed}`: expected a size such as 512M, 8G or 1T"))?;
    let bytes = value * 2f64.powi(shift);
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("`{trimmed}`: expected a size from 1 byte to 16 EiB"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::{mem_available, parse_size};

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("8X").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn mem_available_reads_kib() {
        let meminfo = "MemTotal:       24000000 kB\nMemAvailable:   17572416 kB\n";
        assert_eq!(mem_available(meminfo), Some(17_572_416 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }
}
