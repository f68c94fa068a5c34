//! The deterministic text form of a block (used by snapshots and `codac explain`).
//!
//! One line per value: `%N = op operands : type`, followed by the `let` name
//! and source location when known. The format is documented in `docs/ir.md`.

use crate::block::{Block, BlockKind, Module};
use crate::inst::{Inst, RopeSpec, RopeStyle, RopeTable};
use coda_diagnostics::SourceFile;
use std::fmt::Write;

/// Prints every block of a module.
pub fn print_module(module: &Module, source: Option<&SourceFile>) -> String {
    let mut out = String::new();
    for (i, block) in module.blocks.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&print_block(block, source));
    }
    out
}

/// Prints one block.
pub fn print_block(block: &Block, source: Option<&SourceFile>) -> String {
    let mut out = String::new();
    let kind = match block.kind {
        BlockKind::Block => "block",
        BlockKind::Kernel => "kernel",
    };
    let _ = writeln!(out, "{kind} {} {{", block.name);
    for dim in &block.dims {
        match dim.value {
            Some(v) => {
                let _ = writeln!(out, "  dim {} = {v}", dim.name);
            }
            None => {
                let _ = writeln!(out, "  dim {}", dim.name);
            }
        }
    }
    for (value, inst) in block.insts.iter() {
        let mut line = format!("  {value} = {} : {}", describe(block, inst), block.ty(value));
        let name = block.names.get(value.index()).cloned().flatten();
        let location = source.map(|s| s.location(block.insts.span(value)));
        match (name, location) {
            (Some(n), Some(l)) => {
                let _ = write!(line, "    ; {n} @ {l}");
            }
            (Some(n), None) => {
                let _ = write!(line, "    ; {n}");
            }
            (None, Some(l)) => {
                let _ = write!(line, "    ; {l}");
            }
            (None, None) => {}
        }
        out.push_str(&line);
        out.push('\n');
    }
    for output in &block.outputs {
        let op = if output.accumulate { "+=" } else { "=" };
        let _ = writeln!(out, "  output {} {op} {} : {}", output.tensor.name, output.value, output.tensor.ty());
    }
    for fact in &block.saved_products {
        let parts: Vec<String> = fact.parts.iter().map(|p| p.to_string()).collect();
        let t = if fact.rhs_transposed { ".T" } else { "" };
        let _ = writeln!(
            out,
            "  saved {} = matmul.{} {}, {}{t}    ; made by the saving forward",
            parts.join(" | "),
            fact.operand_dtype,
            fact.lhs,
            fact.rhs
        );
    }
    out.push_str("}\n");
    out
}

/// One value's defining instruction, as printed (`matmul.bf16 %0, %1.T`).
pub fn print_value(block: &Block, value: crate::inst::Value) -> String {
    describe(block, block.inst(value))
}

fn describe(block: &Block, inst: &Inst) -> String {
    match inst {
        Inst::Param(i) => match block.params.get(*i) {
            Some(p) => format!("param {}", p.name),
            None => format!("param #{i}"),
        },
        Inst::Const(c) => format!("const {}", format_float(*c)),
        Inst::DimValue(d) => format!("dim {d}"),
        Inst::Unary { op, arg } => format!("{} {arg}", op.name()),
        Inst::Binary { op, lhs, rhs } => format!("{} {lhs}, {rhs}", op.name()),
        Inst::Select { cond, on_true, on_false } => format!("select {cond}, {on_true}, {on_false}"),
        Inst::Cast { to, arg } => format!("cast.{to} {arg}"),
        Inst::Broadcast { arg, shape } => format!("broadcast {arg} to {shape}"),
        Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, operand_dtype } => {
            let t = |flag: bool| if flag { ".T" } else { "" };
            format!("matmul.{operand_dtype} {lhs}{}, {rhs}{}", t(*lhs_transposed), t(*rhs_transposed))
        }
        Inst::Transpose { arg } => format!("transpose {arg}"),
        Inst::Reduce { op, axis, arg } => {
            let axis = match axis {
                crate::inst::Axis::Rows => "rows",
                crate::inst::Axis::Cols => "cols",
            };
            format!("reduce.{}.{axis} {arg}", op.name())
        }
        Inst::GroupReduce { op, groups, arg } => {
            format!("group_reduce.{}.{} {arg}, width {}", op.name(), groups.name(), groups.width())
        }
        Inst::GroupExpand { groups, arg, cols } => {
            format!("group_expand.{} {arg}, width {}, cols {cols}", groups.name(), groups.width())
        }
        Inst::SliceHeads { arg, part } => format!("slice_heads {arg}, {part}"),
        Inst::PadHeads { arg, part, cols } => format!("pad_heads {arg}, {part}, cols {cols}"),
        Inst::SliceCols { arg, start, len, step } => {
            format!("slice_cols {arg}, start {start}, len {len}, step {step}")
        }
        Inst::ConcatCols { parts } => {
            let parts: Vec<String> = parts.iter().map(ToString::to_string).collect();
            format!("concat_cols {}", parts.join(", "))
        }
        Inst::StackRows { parts } => {
            let parts: Vec<String> = parts.iter().map(ToString::to_string).collect();
            format!("stack_rows {}", parts.join(", "))
        }
        Inst::Interleave { even, odd } => format!("interleave {even}, {odd}"),
        Inst::TakeCols { arg, index } => format!("take_cols {arg}, {index}"),
        Inst::TopK { arg, k, indices } => {
            format!("topk{} {arg}, k {k}", if *indices { ".indices" } else { "" })
        }
        Inst::GatherRows { table, index } => format!("gather_rows {table}, {index}"),
        Inst::ScatterAddRows { arg, index, rows } => format!("scatter_add_rows {arg}, {index}, rows {rows}"),
        Inst::ScatterCols { arg, index, cols } => format!("scatter_cols {arg}, {index}, cols {cols}"),
        Inst::RopeTable { spec, table, cols } => {
            let table = match table {
                RopeTable::Freq => "freq",
                RopeTable::Sign => "sign",
            };
            format!("rope_table.{table} {}, cols {cols}", rope(spec))
        }
        Inst::RopePartner { spec, arg } => format!("rope_partner {arg}, {}", rope(spec)),
        Inst::PermuteRows { arg, perm } => format!("permute_rows {arg}, {perm}"),
        Inst::PermuteCols { arg, perm } => format!("permute_cols {arg}, {perm}"),
        Inst::UnpermuteCols { arg, perm } => format!("unpermute_cols {arg}, {perm}"),
    }
}

fn rope(spec: &RopeSpec) -> String {
    let style = match spec.style {
        RopeStyle::Half => "half",
        RopeStyle::Interleaved => "interleaved",
    };
    let rotary = match spec.rotary_dim == spec.head_dim {
        true => String::new(),
        false => format!(", rotary_dim {}", spec.rotary_dim),
    };
    format!(
        "{{{style}, head_dim {}{rotary}, base {}, cols {}..{}}}",
        spec.head_dim,
        format_float(spec.base),
        spec.start,
        spec.end
    )
}

/// Formats a float so that it reads back to the same value and always has a
/// decimal point or exponent (`1.0`, `1e-5`).
pub fn format_float(value: f64) -> String {
    let text = format!("{value:?}");
    if text.contains(['.', 'e', 'E', 'N', 'i']) {
        text
    } else {
        format!("{text}.0")
    }
}
