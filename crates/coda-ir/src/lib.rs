//! The block IR of codac: a tensor-level SSA dataflow graph of one block.
//!
//! A [`Block`] holds its parameters, an [`Arena`] of [`Inst`]ructions (one
//! value each, operands always defined earlier, so arena order is evaluation
//! order), a parallel table of [`Ty`]pes and the outputs. Every value is
//! two-dimensional (`[rows, cols]` with symbolic [`Dim`]s), which maps each
//! value onto one epilogue operand class: scalar, per-row vector, per-column
//! vector or tile. Broadcasts are explicit instructions.
//!
//! Alongside the data structures live the typing rules ([`infer`]), the
//! [`verify`]er, the deterministic text [`print`]er and the reference
//! [`interp`]reter, which defines what every later stage must compute.

pub mod arena;
pub mod block;
pub mod dim;
pub mod infer;
pub mod inst;
pub mod interp;
pub mod print;
pub mod ty;
pub mod verify;

pub use arena::{Arena, Handle};
pub use block::{Block, BlockKind, DimDef, Module, Output, SavedProduct, Tensor};
pub use dim::{Dim, DimError};
pub use inst::{
    Axis, BinaryOp, ColGroups, HeadPart, Inst, PairPerm, ReduceOp, RopeSpec, RopeStyle, RopeTable, UnaryOp, Value,
};
pub use ty::{DType, Shape, ShapeClass, Ty, AMAX_FLOOR};
