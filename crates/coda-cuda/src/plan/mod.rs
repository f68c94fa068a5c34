//! The partitioner: a greedy walk over the block IR in arena order that
//! gives every live value a home and builds the ordered kernel list.
//!
//! Homes ([`Home`]):
//!
//! * block inputs stay where the caller put them;
//! * *inline* values (elementwise math, broadcasts, constants, dims, rotary
//!   tables, column gathers over inputs and finished partials) have no home:
//!   every kernel that needs one recomputes it, as long as what it
//!   recomputes stays small ([`recompute`]);
//! * every matmul anchors a GEMM kernel; a value that depends on one
//!   accumulator, reads the accumulator's columns locally (same column, or
//!   the adjacent pair `(2j, 2j+1)`) and reads only values materialized by
//!   earlier kernels lives in that GEMM's epilogue (register values, with a
//!   [`ColMap`]);
//! * row reductions (sum, max, log-sum-exp, target pick) and column sums of
//!   epilogue values become per-tile partials of that GEMM, finished by the
//!   later kernels that read them;
//! * per-head reductions (sum, max) of epilogue values over heads that one
//!   warp of the GEMM's tile holds whole are epilogue values too, one per
//!   row and head ([`ColMap::per_head`]); a GEMM whose tiles cannot hold
//!   its heads is partitioned again with them in a row kernel
//!   (`split_heads`);
//! * anything else goes to a *row kernel* (one CTA or one warp per row);
//!   a sum or maximum over the rows of a per-row value that a row kernel
//!   over those rows can compute joins that kernel as a *grid reduction*
//!   (per-CTA partials, finished by the CTA that arrives last), together
//!   with the scalar work downstream of it ([`Home::Grid`]); other
//!   reductions over rows go to a *column-reduction kernel*. Both reuse
//!   the last such kernel when everything it reads is ready by then. When a value
//!   moves to a row kernel, epilogue values only it needs move along (they
//!   are recomputed from the accumulator there, so a `swiglu` on
//!   `[gate | up]` halves materializes the accumulator once);
//! * an inline element-wise value that a later kernel needs stored is
//!   stored by a GEMM epilogue over its shape that already loads a tensor
//!   it reads, rather than by a row kernel ([`join`]).
//!
//! A value read by a later kernel is materialized by its home kernel (fp32,
//! or the 16-bit operand type for a matmul operand); [`crate::kir::build`]
//! turns the plan into kernels with explicit stores.

pub(crate) mod cse;
mod grid;
pub(crate) mod join;
mod recompute;
pub(crate) mod refusal;
mod rules;

use crate::kir::{ColMap, PartialKind};
use coda_ir::{Block, DType, Dim, Inst, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Where a value is computed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Home {
    /// Not needed by any output.
    Dead,
    /// A block input.
    Param,
    /// Recomputed wherever it is used.
    Inline,
    /// A register value of GEMM kernel `k` (the accumulator or its epilogue).
    Acc(usize),
    /// A row reduction of GEMM kernel `k`'s epilogue, as per-tile partials.
    RowPartial(usize, PartialKind),
    /// A column sum of GEMM kernel `k`'s epilogue, as per-tile partials.
    ColPartial(usize),
    /// Computed in row kernel `k`.
    Row(usize),
    /// Computed in column-reduction kernel `k`.
    Col(usize),
    /// A scalar computed in the grid tail of row kernel `k`: a grid
    /// reduction over the kernel's rows, or scalar work on such reductions
    /// (evaluated once, by the CTA that arrives last).
    Grid(usize),
}

impl Home {
    /// The kernel that computes the value, if any.
    pub(crate) fn kernel(&self) -> Option<usize> {
        match self {
            Home::Acc(k)
            | Home::RowPartial(k, _)
            | Home::ColPartial(k)
            | Home::Row(k)
            | Home::Col(k)
            | Home::Grid(k) => Some(*k),
            Home::Dead | Home::Param | Home::Inline => None,
        }
    }
}

/// One side of a matmul.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OperandPlan {
    /// A block input of the operand type, read in place (through a padded
    /// staging copy when it is not aligned for the mainloop).
    Param {
        /// The parameter.
        index: usize,
        /// Whether the matmul reads it transposed.
        transposed: bool,
        /// Rows read in pair order (a weight in pair layout).
        row_perm: Option<coda_ir::PairPerm>,
        /// The weight stacked below this one ([`coda_ir::Inst::StackRows`],
        /// two parts of equal rows), read in place too.
        stacked: Option<usize>,
    },
    /// A value materialized in the operand type by an earlier kernel.
    Mat {
        /// The value.
        value: Value,
        /// Whether the matmul reads it transposed.
        transposed: bool,
        /// Rows read in pair order (a weight in pair layout).
        row_perm: Option<coda_ir::PairPerm>,
    },
}

/// One part of a GEMM's K loop: `a @ b` over that part's columns of the
/// concatenated left operand.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KPartPlan {
    /// Left operand.
    pub(crate) a: OperandPlan,
    /// Right operand.
    pub(crate) b: OperandPlan,
}

/// The most parts one GEMM's K loop reads (`coda::GemmKParts`).
pub(crate) const MAX_K_PARTS: usize = 3;

/// A kernel of the plan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KernelPlan {
    /// The GEMM of a matmul.
    Gemm {
        /// The matmul.
        matmul: Value,
        /// Left operand (of the first part, with further parts).
        a: OperandPlan,
        /// Right operand (of the first part, with further parts).
        b: OperandPlan,
        /// A product over a concatenated inner dimension
        /// (`[A₀ | A₁] @ [B₀; B₁]`, [`coda_ir::Inst::ConcatCols`] by
        /// [`coda_ir::Inst::StackRows`]): the operand pairs after the
        /// first, each read where it is. Empty for a plain product.
        parts: Vec<KPartPlan>,
    },
    /// A row kernel over `rows` rows.
    Row {
        /// Rows.
        rows: Dim,
    },
    /// A column-reduction kernel over `cols` columns.
    Col {
        /// Columns.
        cols: Dim,
    },
}

/// The result of partitioning.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Representative of every value.
    pub(crate) canon: Vec<Value>,
    /// Home of every representative.
    pub(crate) homes: Vec<Home>,
    /// Register column maps of epilogue values.
    pub(crate) maps: Vec<Option<ColMap>>,
    /// Kernels in launch order.
    pub(crate) kernels: Vec<KernelPlan>,
    /// Materializations requested while planning: (value, dtype) → kernel.
    pub(crate) mats: BTreeMap<(Value, DType), usize>,
    /// The kernel storing each output.
    pub(crate) output_kernels: Vec<usize>,
    /// Why a value could not live in an epilogue (for `explain` and the
    /// rules of `kernel` blocks).
    pub(crate) why_not_epilogue: Vec<Option<refusal::Refusal>>,
    /// Inline values stored by a GEMM epilogue that does not compute them
    /// from its accumulator ([`join`]).
    pub(crate) joined: BTreeMap<Value, join::Joined>,
}

/// Partitions a verified block.
///
/// A value's home is chosen when the walk reaches it, but which tensors a
/// kernel loads is known only once the walk has passed everything it
/// computes, which may come after a later GEMM asks for an operand that an
/// earlier GEMM's epilogue could store ([`join`]). So when the walk met
/// such a choice, it runs again, knowing what each kernel loaded the first
/// time.
///
/// The GEMMs of the matmuls in `unfused` keep their epilogues bare: they
/// store the accumulator, and what their epilogues would compute goes to
/// the kernels after them (the unfused form a fused site must beat). Those
/// in `split_heads` take no per-head reductions (their tiles cannot hold
/// whole heads, [`crate::tiles`]).
pub(crate) fn partition(block: &Block, unfused: &BTreeSet<Value>, split_heads: &BTreeSet<Value>) -> Plan {
    let first = walk(block, unfused, split_heads, None);
    if !first.join_choices {
        return first.plan;
    }
    let foresight = first.foresight();
    walk(block, unfused, split_heads, Some(foresight)).plan
}

/// One walk of the partitioner; inline values join GEMM epilogues only
/// with the [`join::Foresight`] of an earlier walk.
fn walk<'a>(
    block: &'a Block,
    unfused: &BTreeSet<Value>,
    split_heads: &BTreeSet<Value>,
    foresight: Option<join::Foresight>,
) -> rules::Planner<'a> {
    let canon = cse::number_values(block);
    let live = cse::live_values(block, &canon);
    let n = block.insts.len();
    let mut planner = rules::Planner {
        block,
        plan: Plan {
            canon,
            homes: vec![Home::Dead; n],
            maps: vec![None; n],
            kernels: Vec::new(),
            mats: BTreeMap::new(),
            output_kernels: Vec::new(),
            why_not_epilogue: vec![None; n],
            joined: BTreeMap::new(),
        },
        ready: vec![0; n],
        row_partial_dep: vec![false; n],
        uses_in_kernel: vec![0; n],
        closures: vec![Vec::new(); n],
        reads: Vec::new(),
        foresight,
        join_choices: false,
        unfused: unfused.clone(),
        split_heads: split_heads.clone(),
    };
    for (value, inst) in block.insts.iter() {
        if planner.plan.canon[value.index()] != value || !live[value.index()] {
            continue;
        }
        planner.place(value, inst);
    }
    planner.place_outputs();
    planner
}

/// Whether an instruction only rearranges or combines values elementwise
/// (so it can be recomputed anywhere from its operands).
pub(crate) fn is_inlinable(inst: &Inst) -> bool {
    !matches!(
        inst,
        Inst::Param(_) | Inst::MatMul { .. } | Inst::Reduce { .. } | Inst::GroupReduce { .. } | Inst::TopK { .. }
    )
}
