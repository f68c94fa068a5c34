//! Why the partitioner could not give a value a GEMM epilogue home: typed,
//! so that `explain` can print the reason and the `kernel` form's rules
//! ([`crate::kernel_form`]) can say it in the user's terms.

use crate::kir::ColMap;
use coda_ir::Value;
use std::fmt;

/// Why a value is not computed in a GEMM epilogue.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refusal {
    /// None of its operands is a register value of a GEMM.
    NoAccumulator,
    /// It reads a value (`Value`) that is ready only after the GEMM whose
    /// accumulator it also reads: a finished reduction, a broadcast of
    /// accumulator values, or a later kernel's result.
    ReadsLater(Value, String),
    /// It reads a pair-layout value put back in column order.
    ReadsUnpermuted,
    /// It reads a concatenation that lives in the epilogue.
    ReadsStoredConcat,
    /// It combines register values of different column maps: its register
    /// operands with their maps.
    MixedColumns(Vec<(Value, ColMap)>),
    /// A column slice starting at a run-time column.
    SliceRuntimeStart,
    /// A column slice with this step of a value held in column pairs.
    SliceStep(i64),
    /// An `interleave` of values that are not the halves of the same pairs.
    Interleave,
    /// An interleaved rotary range starting at a run-time column.
    RopeRuntimeStart,
    /// Interleaved rotary pairs that do not start at an even column.
    RopeOddStart,
    /// Rotate-half RoPE turning this many features of each head.
    RopeHalf(i64),
    /// A broadcast of a register value.
    Broadcast,
    /// A transpose of a register value.
    Transpose,
    /// A concatenation mixing register columns with anything else.
    Concat,
    /// Dimension arithmetic failed while mapping columns.
    Dim(String),
    /// Any other operation: it needs values other threads hold.
    OtherThreads,
    /// The GEMM was asked to run unfused (`CodegenOptions::unfused`).
    Unfused,
    /// A per-head reduction over heads of this many columns, in a GEMM
    /// whose tiles do not hold whole heads in each warp.
    HeadsAcrossWarps(i64),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoAccumulator => write!(f, "it does not read an accumulator"),
            Refusal::ReadsLater(_, what) => write!(
                f,
                "it reads {what}, which is only available after this GEMM (a finished reduction or a later kernel's result)"
            ),
            Refusal::ReadsUnpermuted => {
                write!(f, "it reads a pair-layout value put back in column order, which only a store can do")
            }
            Refusal::ReadsStoredConcat => {
                write!(f, "it reads a concatenation of accumulator columns, which only a store can do")
            }
            Refusal::MixedColumns(operands) => {
                let first = operands.first().map(|(_, m)| m);
                let other = operands.iter().map(|(_, m)| m).find(|m| Some(*m) != first);
                write!(
                    f,
                    "it combines accumulator columns that different threads hold ({} and {})",
                    first.map(describe_map).unwrap_or_default(),
                    other.map(describe_map).unwrap_or_default()
                )
            }
            Refusal::SliceRuntimeStart => write!(f, "the slice starts at a run-time column"),
            Refusal::SliceStep(step) => {
                write!(f, "a slice with step {step} of a value held in column pairs is not local")
            }
            Refusal::Interleave => write!(f, "`interleave` needs two half-width values of the same column pairs"),
            Refusal::RopeRuntimeStart => write!(f, "the rotary range starts at a run-time column"),
            Refusal::RopeOddStart => {
                write!(f, "the interleaved rotary pairs do not start at an even accumulator column")
            }
            Refusal::RopeHalf(rotary_dim) => write!(
                f,
                "rotate-half RoPE pairs column n with column n ± {} (columns of other threads)",
                rotary_dim / 2
            ),
            Refusal::Broadcast => write!(f, "it broadcasts an accumulator value across rows or columns"),
            Refusal::Transpose => write!(f, "it transposes an accumulator value"),
            Refusal::Concat => {
                write!(f, "it concatenates accumulator columns with other values or different columns")
            }
            Refusal::Dim(message) => write!(f, "{message}"),
            Refusal::OtherThreads => write!(f, "this operation needs values of other threads"),
            Refusal::Unfused => write!(f, "its GEMM runs unfused, as asked (`--unfuse`)"),
            Refusal::HeadsAcrossWarps(width) => write!(
                f,
                "no tile configuration of its GEMM holds whole heads of {width} columns in one warp"
            ),
        }
    }
}

/// The accumulator columns a register map holds, in words.
pub(crate) fn describe_map(m: &ColMap) -> String {
    if m.stride == 1 {
        format!("columns {}.. of the accumulator", m.offset)
    } else if m.per_head() {
        format!("heads of {} columns from {} of the accumulator", m.stride, m.offset)
    } else {
        format!("column pairs from {} of the accumulator", m.offset)
    }
}
