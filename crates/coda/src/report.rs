//! The kernel report of `codac explain`: the rules the reparameterizer
//! applied, the kernels the partitioner made (kind, inputs, outputs, what
//! each computes, why work stayed outside a GEMM), and the device-memory
//! traffic of each kernel against the unfused program.

use coda_cuda::kir::{BlockIr, KernelKind, Op, Role};
use coda_cuda::traffic;
use coda_diagnostics::SourceFile;
use coda_ir::Block;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Options of `explain`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExplainOptions {
    /// Run-time dims for the traffic figures (unbound dims: 8192).
    pub dims: BTreeMap<String, i64>,
    /// Which rewrites to apply.
    pub rewrite: coda_opt::Options,
    /// The code generator's options (row preludes, a tile configuration
    /// asked for by name).
    pub codegen: coda_cuda::CodegenOptions,
}

/// One kernel of the report.
#[derive(Debug, Clone)]
pub(crate) struct KernelReport {
    pub(crate) name: String,
    /// `gemm`, `elementwise`, `reduction` or `weight_prep`.
    pub(crate) kind: &'static str,
    pub(crate) summary: String,
    pub(crate) inputs: Vec<String>,
    pub(crate) outputs: Vec<String>,
    pub(crate) bytes_moved: u64,
    pub(crate) why: Vec<String>,
    /// For GEMM kernels: why the epilogue stores values that read no
    /// accumulator.
    pub(crate) joined: Vec<String>,
    /// Why a GEMM has its tile configuration, where its epilogue's traffic decided.
    pub(crate) tiles: Option<String>,
    /// For a GEMM whose epilogue does more than store its accumulator: the
    /// block with it unfused.
    pub(crate) unfused: Option<UnfusedSite>,
}

/// A block with one GEMM unfused (as `--unfuse` compiles it), against the
/// block as the rules build it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnfusedSite {
    /// The block's kernels, unfused.
    pub(crate) kernels: usize,
    /// The block's traffic, unfused.
    pub(crate) bytes_moved: u64,
}

/// The report of one block.
#[derive(Debug, Clone)]
pub(crate) struct BlockReport {
    pub(crate) rules: BTreeMap<&'static str, usize>,
    pub(crate) dims: BTreeMap<String, i64>,
    /// The kernels, or why the block could not be compiled.
    pub(crate) kernels: Result<Vec<KernelReport>, String>,
    /// The inputs and outputs with a staging buffer, which the runtime
    /// copies only when they are not aligned for the GEMMs.
    pub(crate) staged: Vec<String>,
    pub(crate) unfused_bytes: u64,
}

impl BlockReport {
    pub(crate) fn fused_bytes(&self) -> u64 {
        let kernels = self.kernels.as_deref().unwrap_or_default();
        kernels.iter().map(|k| k.bytes_moved).fold(0, u64::saturating_add)
    }

    pub(crate) fn count(&self, kind: &str) -> usize {
        self.kernels.as_deref().unwrap_or_default().iter().filter(|k| k.kind == kind).count()
    }
}

/// Rewrites, partitions and measures one block.
pub(crate) fn block_report(block: &Block, source: &SourceFile, options: &ExplainOptions) -> BlockReport {
    let mut dims = traffic::default_dims(block);
    for (name, value) in &options.dims {
        if let Some(slot) = dims.get_mut(name) {
            *slot = *value;
        }
    }
    let unfused_bytes = traffic::unfused_bytes(block, &dims);
    let (rewritten, rules) = if block.kind == coda_ir::BlockKind::Block {
        match coda_opt::reparameterize(block, &options.rewrite) {
            Ok(r) => (r.block, r.applied),
            Err(e) => {
                let kernels = Err(e.to_string());
                return BlockReport { rules: BTreeMap::new(), dims, kernels, staged: Vec::new(), unfused_bytes };
            }
        }
    } else {
        (block.clone(), BTreeMap::new())
    };
    let compiled = coda_cuda::compile_block(&rewritten, source, &options.codegen);
    let staged = compiled.as_ref().map_or_else(|_| Vec::new(), |c| staged(&c.ir));
    let kernels = compiled
        .map(|c| {
            let mut kernels = kernel_reports(&c.ir, &c.manifest, &dims);
            for k in kernels.iter_mut().filter(|k| k.kind == "gemm") {
                k.unfused = unfused_site(&rewritten, source, options, &c, &k.name, &dims);
            }
            kernels
        })
        .map_err(|e| e.to_string());
    BlockReport { rules, dims, kernels, staged, unfused_bytes }
}

/// `block` (compiled as `fused`) with GEMM `gemm` unfused, or `None` where
/// that changes no kernel (its epilogue only stores the accumulator).
fn unfused_site(
    block: &Block,
    source: &SourceFile,
    options: &ExplainOptions,
    fused: &coda_cuda::CompiledBlock,
    gemm: &str,
    dims: &BTreeMap<String, i64>,
) -> Option<UnfusedSite> {
    let mut codegen = options.codegen.clone();
    codegen.unfused.insert(gemm.to_string());
    let unfused = coda_cuda::compile_block(block, source, &codegen).ok()?;
    if unfused.kernels == fused.kernels {
        return None;
    }
    let bytes = unfused.ir.kernels.iter().map(|k| traffic::kernel_bytes(&unfused.ir, k, dims));
    Some(UnfusedSite { kernels: unfused.ir.kernels.len(), bytes_moved: bytes.fold(0, u64::saturating_add) })
}

/// The inputs and outputs that have a staging buffer, in buffer order.
fn staged(ir: &BlockIr) -> Vec<String> {
    ir.buffers.iter().filter_map(|b| b.staging_of.map(|t| ir.buffers[t].name.clone())).collect()
}

fn kernel_reports(
    ir: &BlockIr,
    manifest: &coda_cuda::BlockManifest,
    dims: &BTreeMap<String, i64>,
) -> Vec<KernelReport> {
    ir.kernels
        .iter()
        .zip(&manifest.kernels)
        .map(|(kernel, spec)| {
            let (reads, writes) = traffic::kernel_buffers(kernel);
            let visible = |ids: &std::collections::BTreeSet<usize>| -> Vec<String> {
                // A GEMM reads an input in place unless it is misaligned.
                let source =
                    |b: &coda_cuda::kir::Buffer| b.staging_of.map_or(b.name.clone(), |s| ir.buffers[s].name.clone());
                ids.iter().filter_map(|b| ir.buffers.get(*b)).map(source).collect()
            };
            let kind = match &kernel.kind {
                _ if weights_only(ir, kernel) => "weight_prep",
                KernelKind::Gemm(_) => "gemm",
                KernelKind::Col { .. } => "reduction",
                KernelKind::Row { .. }
                    if kernel.nodes.iter().any(|n| matches!(n.op, Op::RowReduce { .. } | Op::GridReduce { .. })) =>
                {
                    "reduction"
                }
                KernelKind::Row { .. } => "elementwise",
            };
            KernelReport {
                name: kernel.name.clone(),
                kind,
                summary: spec.summary.clone(),
                inputs: visible(&reads),
                outputs: visible(&writes),
                bytes_moved: traffic::kernel_bytes(ir, kernel, dims),
                why: kernel.why.clone(),
                joined: kernel.joined.clone(),
                tiles: kernel.tiles.clone(),
                unfused: None,
            }
        })
        .collect()
}

/// A kernel that reads only block inputs (through their padded copies, if
/// any) and none of whose buffers grows with a run-time dim: it depends on
/// weights alone, whatever its shape (a GEMM with one row, a GEMV, a gain
/// folded into a weight), so it can run once when the weights change. In a
/// block without run-time dims nothing tells weights from activations, and
/// no kernel is one.
fn weights_only(ir: &BlockIr, kernel: &coda_cuda::kir::Kernel) -> bool {
    let (reads, writes) = traffic::kernel_buffers(kernel);
    let source = |b: usize| ir.buffers[b].staging_of.unwrap_or(b);
    let fixed = |b: usize| {
        let buf = &ir.buffers[b];
        buf.rows.as_const().is_some() && buf.cols.as_const().is_some()
    };
    !ir.dims.is_empty()
        && reads.iter().all(|b| ir.buffers[source(*b)].role == Role::Input && fixed(source(*b)))
        && writes.iter().all(|b| fixed(*b))
}

/// The report as text, one `//` comment block.
pub(crate) fn report_text(r: &BlockReport) -> String {
    let mut out = String::new();
    let dims: Vec<String> = r.dims.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    let at = if dims.is_empty() { String::new() } else { format!(" at {}", dims.join(", ")) };
    if r.rules.is_empty() {
        out.push_str("// rules applied: none\n");
    } else {
        let rules: Vec<String> = r.rules.iter().map(|(name, n)| format!("{name} ×{n}")).collect();
        out.push_str(&wrapped(&format!("// rules applied: {}", rules.join(", "))));
    }
    let kernels = match &r.kernels {
        Ok(k) => k,
        Err(e) => {
            out.push_str(&wrapped(&format!("// kernels: not compiled: {e}")));
            return out;
        }
    };
    let kinds = ["gemm", "elementwise", "reduction", "weight_prep"];
    let counts: Vec<String> = kinds.iter().map(|k| format!("{} {k}", r.count(k))).collect();
    out.push_str(&format!("// kernels: {}", counts.join(", ")));
    if !r.staged.is_empty() {
        let n = r.staged.len();
        out.push_str(&format!("; {n} staged tensor(s), copied by the runtime only when misaligned"));
    }
    out.push('\n');
    for k in kernels {
        out.push_str(&wrapped(&format!("//   {} {}: {}", k.name, k.kind, k.summary)));
        out.push_str(&wrapped(&format!(
            "//      reads {}; writes {}; {}",
            k.inputs.join(", "),
            k.outputs.join(", "),
            mb(k.bytes_moved)
        )));
        if k.kind == "weight_prep" {
            out.push_str("//      weights only: can run once when the weights change\n");
        }
        for why in &k.why {
            out.push_str(&wrapped(&format!("//      not in an epilogue: {why}")));
        }
        for why in &k.joined {
            out.push_str(&wrapped(&format!("//      in the epilogue: {why}")));
        }
        if let Some(why) = &k.tiles {
            out.push_str(&wrapped(&format!("//      tiles: {why}")));
        }
        if let Some(u) = &k.unfused {
            out.push_str(&wrapped(&format!(
                "//      fused: {}",
                unfused_comparison(u, kernels.len(), r.fused_bytes())
            )));
        }
    }
    let (fused, unfused) = (r.fused_bytes(), r.unfused_bytes);
    let ratio = if fused > 0 { format!(" ({:.1}× less)", unfused as f64 / fused as f64) } else { String::new() };
    out.push_str(&format!("// bytes moved{at}: {} fused, {} unfused{ratio}\n", mb(fused), mb(unfused)));
    out
}

/// Why a GEMM site is fused, in bytes: what the block moves with it
/// unfused against fused (`kernels` and `bytes`).
fn unfused_comparison(u: &UnfusedSite, kernels: usize, bytes: u64) -> String {
    let more = u.kernels.saturating_sub(kernels);
    let extra = if more == 0 { String::new() } else { format!(", with {more} more kernel{}", plural(more)) };
    let verdict = match u.bytes_moved.cmp(&bytes) {
        std::cmp::Ordering::Greater => format!("{} more", mb(u.bytes_moved - bytes)),
        std::cmp::Ordering::Less => format!("{} less", mb(bytes - u.bytes_moved)),
        std::cmp::Ordering::Equal => "the same bytes".to_string(),
    };
    format!("unfusing it (a bare GEMM, its epilogue's work in later kernels) moves {verdict}{extra}; `bench --autotune` times both")
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The widest line of `explain`'s comments, in characters. The lists in a
/// kernel's lines (and a backward's header) grow with the block (a kernel of a block with a hundred
/// heads reads and writes hundreds of buffers), so a longer line is broken.
pub(crate) const MAX_LINE: usize = 160;

/// How a broken line goes on: deeper than the kernel's own lines.
pub(crate) const CONTINUATION: &str = "//        ";

/// `line` and a newline, broken after list separators (`,` and `;`) into
/// lines of at most [`MAX_LINE`] characters, and between words where a
/// separated piece alone is wider than a continuation line.
pub(crate) fn wrapped(line: &str) -> String {
    if line.chars().count() <= MAX_LINE {
        return format!("{line}\n");
    }
    let room = MAX_LINE - CONTINUATION.len();
    let pieces = line.split_inclusive([',', ';']).flat_map(|piece| {
        let words: Vec<&str> =
            if piece.chars().count() <= room { vec![piece] } else { piece.split_inclusive(' ').collect() };
        words
    });
    let mut out = String::new();
    let mut current = String::new();
    let mut fresh = true;
    for piece in pieces {
        if !fresh && current.chars().count() + piece.chars().count() > MAX_LINE {
            out.push_str(current.trim_end());
            out.push('\n');
            current = format!("{CONTINUATION}{}", piece.trim_start());
        } else {
            current.push_str(piece);
        }
        fresh = false;
    }
    out.push_str(current.trim_end());
    out.push('\n');
    out
}

fn mb(bytes: u64) -> String {
    // The traffic model saturates where a count overflows.
    if bytes == u64::MAX {
        return "2^64 bytes or more".into();
    }
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// The report as JSON (the block's entry) and its kernels (for the top-level array).
pub(crate) fn report_json(block: &str, r: &BlockReport) -> (Value, Vec<Value>) {
    let kernels: Vec<Value> = r
        .kernels
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|k| {
            json!({
                "block": block,
                "name": k.name,
                "kind": k.kind,
                "summary": k.summary,
                "inputs": k.inputs,
                "outputs": k.outputs,
                "bytes_moved": k.bytes_moved,
                "why_not_epilogue": k.why,
                "in_epilogue": k.joined,
                "tiles_why": k.tiles,
                "unfused_alternative": k.unfused.map(|u| json!({
                    "kernels": u.kernels,
                    "bytes_moved": u.bytes_moved,
                })),
            })
        })
        .collect();
    let entry = json!({
        "rules": r.rules,
        "traffic_dims": r.dims,
        "bytes_moved": r.fused_bytes(),
        "bytes_moved_unfused": r.unfused_bytes,
        "compile_error": r.kernels.as_ref().err(),
        "staged": r.staged,
    });
    (entry, kernels)
}

#[cfg(test)]
mod tests {
    use super::{wrapped, MAX_LINE};

    #[test]
    fn short_lines_stay_whole() {
        assert_eq!(wrapped("//   gemm_y gemm: acc = x @ w.T"), "//   gemm_y gemm: acc = x @ w.T\n");
    }

    #[test]
    fn long_lists_break_after_separators() {
        let names: Vec<String> = (0..200).map(|i| format!("part.v{i}.row_sum")).collect();
        let line = format!("//      reads x, w; writes {}; 1.0 MB", names.join(", "));
        let text = wrapped(&line);
        assert!(text.lines().all(|l| l.chars().count() <= MAX_LINE), "{text}");
        assert!(text.lines().skip(1).all(|l| l.starts_with("//        ")));
        let joined: Vec<&str> = text.lines().map(|l| l.trim_start_matches("//").trim()).collect();
        assert_eq!(joined.join(" "), line.trim_start_matches("//").trim());
    }
}
