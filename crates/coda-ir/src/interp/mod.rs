//! The reference interpreter: what every compiled kernel must compute.
//!
//! [`eval`] runs one [`Block`] on the CPU in `f64`, instruction by
//! instruction in arena order, and returns the content of every output. Its
//! semantics are *the* definition of the IR; a GPU kernel is judged by how
//! close it comes to these numbers. [`random_inputs`] makes deterministic
//! test inputs for a block.
//!
//! # Values
//!
//! Every value is a row-major `[rows, cols]` array of `f64` ([`HostTensor`]),
//! its shape being its type's shape under the dimension bindings
//! ([`bind_shape`]). Integers (`i32`) are held exactly; bools are `1.0` and
//! `0.0`. A value's dtype is only a storage type: arithmetic never rounds to
//! it, except where [`EvalOptions::round_to_storage`] says so (below).
//!
//! # Instructions
//!
//! * `Param(i)`: the input of that name. With rounding on, a float param is
//!   rounded to its declared dtype on read (inputs may be unrounded data).
//! * `Const(c)` is `c`; `DimValue(d)` is the value of `d` under the bindings.
//! * Unary ops, in `f64`: `neg`, `exp`, `log`, `sqrt`, `abs`, `sin`, `cos`,
//!   `tanh` as usual; `rsqrt(x) = 1 / sqrt(x)`; `sigmoid(x) = 1 / (1 + e^-x)`
//!   for `x >= 0` and `e^x / (1 + e^x)` otherwise (no overflow, so
//!   `sigmoid(-1000) = 0`); `relu(x) = max(x, 0)` with `relu(NaN) = NaN`;
//!   `gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`;
//!   `gelu(x) = 0.5 x (1 + erf(x / sqrt 2))`, evaluated as
//!   `0.5 x erfc(-x / sqrt 2)` (the same function, without the cancellation
//!   of `1 + erf` for negative `x`); `silu(x) = x sigmoid(x)`;
//!   `softplus(x) = x` for `x > 20`, else `log1p(e^x)`. `erf`/`erfc` come
//!   from the `libm` crate.
//! * Binary ops: `add sub mul div` in `f64`. `min`/`max` return NaN when
//!   either operand is NaN and order `-0 < +0` (IEEE 754-2019
//!   `minimum`/`maximum`). Comparisons give `1.0` or `0.0` (IEEE: every
//!   comparison with NaN is false except `ne`).
//! * `Select`: `on_true` where `cond != 0`, else `on_false`.
//! * `Cast { to }`: to `i32`, truncation toward zero, saturating at the `i32`
//!   range, NaN → 0 (CUDA's `cvt.rzi.s32`); to `bool`, `x != 0` (so NaN →
//!   1). To a float type: the identity with rounding off; with rounding on,
//!   one round-to-nearest-even from the exact `f64` to the target format
//!   (see [Rounding](#rounding)).
//! * `MatMul`: `op(lhs) @ op(rhs)` with the transposes applied; with rounding
//!   on, every operand element is first rounded to `operand_dtype`. Each dot
//!   product is summed in `f64` in increasing `k` order. The result is *not*
//!   rounded (its dtype is `f32`, but only stores and casts round).
//! * `Transpose`, `Broadcast` (axes of length 1 widen), `SliceCols` (columns
//!   `start + k step`, `k < len`; an out-of-range column is an error at run
//!   time), `ConcatCols`, `Interleave` (`out[:, 2j] = even[:, j]`,
//!   `out[:, 2j+1] = odd[:, j]`) only move values.
//! * `Reduce { axis: Cols }` gives one value per row (`[M, 1]`), `Rows` one
//!   per column (`[1, N]`). `sum` adds in increasing index order; `max` is NaN
//!   if any element is; `logsumexp` is `m + ln sum exp(x - m)` with `m` the
//!   max, except that it is NaN if any element is NaN, `-inf` if all are
//!   `-inf` and `+inf` if any is `+inf`.
//! * `TakeCols`: `out[m] = arg[m, index[m]]` when `index[m]` is an integer in
//!   `0..N`, else `0.0`. `ScatterCols` is its adjoint: `out[m, c] = arg[m]`
//!   where `c == index[m]`, `0.0` elsewhere.
//! * `RopeTable` / `RopePartner` with `RopeSpec { head_dim: hd, rotary_dim:
//!   rd, base, start, end, style }`: a column `n` with `start <= n < end`
//!   has `j = (n - start) mod hd`; it turns when `j < rd`. Half style: pair
//!   `i = j mod (rd/2)`, first member iff `j < rd/2`, partner `n + rd/2`
//!   (first) or `n - rd/2` (second). Interleaved: `i = j div 2`, first iff
//!   `j` is even, partner `n + 1` or `n - 1`. `freq = base.powf(-2 i / rd)`
//!   (computed as `base.powf(-(2 i) as f64 / rd as f64)`), `sign = -1` for
//!   the first member and `+1` for the second. Outside `start..end`, and
//!   for `j >= rd`: freq 0, sign 0, partner `n`. A partner outside `0..cols` is an error. (The lowering
//!   builds `rope(x) = x cos(pos freq) + partner(x) sign sin(pos freq)`.)
//!
//! # Outputs
//!
//! An output holds its value, or the previous content plus the value for
//! `+=` outputs (the previous content is passed as an input named like the
//! output). With rounding on, the stored value is rounded to the output's
//! dtype (`f32` included); an `i32` output is always truncated like a cast,
//! a `bool` output is always `x != 0`. Outputs keep the canonical
//! `(rows, cols)` of their declared [`Shape`]; rank-1 outputs are flattened
//! by the caller.
//!
//! # Inputs
//!
//! `inputs` maps every param name (and every `+=` output name) to a
//! [`HostTensor`]. A rank-2 input must have exactly its bound shape; a rank-0
//! or rank-1 input may be given as `[1, n]` or `[n, 1]`, whatever its
//! canonical shape, as long as the element count matches (it is normalized).
//! The input's own dtype is not checked; its values are: an `i32` param (or
//! output) must hold integers in the `i32` range.
//!
//! # Rounding
//!
//! `f32` rounding is Rust's `f64 as f32`, a single IEEE round-to-nearest-even.
//! `bf16` and `f16` are rounded straight from the `f64` (never through `f32`,
//! which would round twice): the value is scaled by the power of two of its
//! quantum (the unit in the last place of the target format at the value's
//! binade, or the subnormal quantum below the normal range), rounded to an
//! integer with ties to even, and scaled back; a magnitude that rounds above
//! the largest finite value becomes infinity. NaN stays NaN, infinities and
//! signed zeros are kept. The fp8 types follow PyTorch's conversions:
//! `e5m2` overflows to infinity like the others, `e4m3` (`float8_e4m3fn`,
//! which has no infinity) saturates at ±448, infinities included.
//!
//! # Resources
//!
//! Dimensions must evaluate to positive values and a value may have at most
//! [`MAX_ELEMENTS`] (2^31) elements. Values are freed after their last use;
//! if the values live at once (8 bytes an element, plus a matmul's operand
//! copies and result) would exceed [`MEMORY_LIMIT_BYTES`], evaluation stops
//! with [`EvalError::OutOfMemory`] before allocating. A param whose input
//! already has its dtype, shape and (with rounding) representable values is
//! read in place, not copied. Large matmuls and [`random_inputs`] use all
//! cores; their results do not depend on the number of threads. No input
//! makes [`eval`] panic; broken block invariants are reported as
//! [`EvalError::Malformed`].
//!
//! [`estimate`] computes, from shapes alone and before anything is
//! allocated, the bytes of the inputs, the most bytes of values live at
//! once (the count the limit above applies to) and the work; [`eval_with`]
//! takes the limit and reports [`Progress`] in units of that work.
//!
//! # Errors
//!
//! An error raised while evaluating a block is wrapped in [`EvalError::At`]
//! with the source span of the expression that defines the value being
//! computed, of the declaration of the input being read, or of the output
//! being stored; [`EvalError::diagnostic`] turns it into a located
//! diagnostic (`E07xx`, or `E9001` for a bug). Messages name values by
//! their source names, never by IR ids.

mod bind;
mod diagnostic;
mod error;
mod estimate;
mod eval;
mod inputs;
mod layout;
mod matmul;
mod ops;
mod parallel;
mod random;
mod rope;
mod round;
mod rows;
mod tensor;

#[cfg(test)]
mod tests;

pub use bind::{bind_shape, DimBindings, MAX_ELEMENTS};
pub use diagnostic::describe_bytes;
pub use error::EvalError;
pub use estimate::{estimate, Estimate};
pub use eval::{eval, eval_with, EvalOptions, Progress, MEMORY_LIMIT_BYTES};
pub use ops::{binary as apply_binary, top_k, unary as apply_unary};
pub use random::random_inputs;
pub use round::round_to_dtype;
pub use rows::{eval_rows, row_local_dim};
pub use tensor::HostTensor;

#[cfg(doc)]
use crate::{block::Block, ty::Shape};
