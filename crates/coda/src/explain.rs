//! `codac explain`: the checked program as readable text or stable JSON.
//!
//! The JSON schema is documented in `docs/explain-json.md`; keys are sorted
//! (serde_json's default map), so the output is byte-for-byte deterministic.

use crate::report;
use crate::{Checked, ExplainOptions};
use coda_ir::{print, Block, BlockKind, Shape, Tensor};
use serde_json::{json, Value};

/// The kernel report and the IR of every block, with a header per block
/// (traffic figures at 8192 for every run-time dim).
pub fn explain_text(checked: &Checked) -> String {
    explain_text_with(checked, &ExplainOptions::default())
}

/// [`explain_text`] with options.
pub fn explain_text_with(checked: &Checked, options: &ExplainOptions) -> String {
    let mut out = String::new();
    for block in &checked.module.blocks {
        if let Some(gradient) = crate::gradient_of(checked, &block.name) {
            out.push_str(&crate::grad_header(checked, gradient));
        }
        out.push_str(&format!(
            "// {} `{}`: {} input(s), {} output(s), {} matmul(s), {} IR values\n",
            kind_name(block),
            block.name,
            block.params.len(),
            block.outputs.len(),
            block.matmul_count(),
            block.insts.len()
        ));
        out.push_str(&report::report_text(&report::block_report(block, &checked.source, options)));
        out.push_str(&print::print_block(block, Some(&checked.source)));
        out.push('\n');
    }
    out
}

/// The machine-readable form (schema version 2).
pub fn explain_json(checked: &Checked) -> Value {
    explain_json_with(checked, &ExplainOptions::default())
}

/// [`explain_json`] with options.
pub fn explain_json_with(checked: &Checked, options: &ExplainOptions) -> Value {
    let mut blocks = Vec::new();
    let mut kernels = Vec::new();
    for block in &checked.module.blocks {
        let mut entry = block_json(block, checked);
        let (plan, ks) = report::report_json(&block.name, &report::block_report(block, &checked.source, options));
        entry["plan"] = plan;
        if let Some(gradient) = crate::gradient_of(checked, &block.name) {
            entry["grad"] = crate::gradient::header_json(checked, gradient);
        }
        blocks.push(entry);
        kernels.extend(ks);
    }
    json!({
        "schema": 2,
        "file": checked.source.name,
        "blocks": blocks,
        "kernels": kernels,
    })
}

fn kind_name(block: &Block) -> &'static str {
    match block.kind {
        BlockKind::Block => "block",
        BlockKind::Kernel => "kernel",
    }
}

fn shape_json(shape: &Shape) -> Value {
    json!([shape.rows.to_string(), shape.cols.to_string()])
}

fn tensor_json(tensor: &Tensor) -> Value {
    json!({
        "name": tensor.name,
        "dtype": tensor.dtype.name(),
        "shape": shape_json(&tensor.shape),
        "rank": tensor.rank,
    })
}

fn block_json(block: &Block, checked: &Checked) -> Value {
    let dims: Vec<Value> = block.dims.iter().map(|d| json!({ "name": d.name, "value": d.value })).collect();
    let values: Vec<Value> = block
        .insts
        .iter()
        .map(|(v, _)| {
            let ty = block.ty(v);
            json!({
                "id": v.index(),
                "text": print::print_value(block, v),
                "dtype": ty.dtype.name(),
                "shape": shape_json(&ty.shape),
                "name": block.names.get(v.index()).cloned().flatten(),
                "location": checked.source.location(block.insts.span(v)),
            })
        })
        .collect();
    let outputs: Vec<Value> = block
        .outputs
        .iter()
        .map(|o| {
            let mut t = tensor_json(&o.tensor);
            t["value"] = json!(o.value.index());
            t["accumulate"] = json!(o.accumulate);
            t
        })
        .collect();
    json!({
        "name": block.name,
        "kind": kind_name(block),
        "dims": dims,
        "inputs": block.params.iter().map(tensor_json).collect::<Vec<_>>(),
        "outputs": outputs,
        "matmuls": block.matmul_count(),
        "values": values,
    })
}
