//! Deterministic random inputs for a block (see [`random_inputs`]).

use super::bind::{bind_shape, resolve_bindings, DimBindings};
use super::error::EvalError;
use super::eval::MEMORY_LIMIT_BYTES;
use super::round::round_to_dtype;
use super::tensor::HostTensor;
use crate::block::{Block, Tensor};
use crate::ty::DType;
use std::collections::BTreeMap;

/// Draws of a float that rounds to zero before it is kept anyway.
const ZERO_REDRAWS: usize = 8;

/// Random inputs for every param and every `+=` output of `block`.
///
/// Every tensor draws from its own stream, seeded from the run's seed and the
/// tensor's name (FNV-1a), so adding or renaming one param leaves the others
/// unchanged. The generator is SplitMix64; normals come from the Box–Muller
/// transform with the `libm` crate's `log`, `sin`, `cos` and `sqrt`, so the
/// numbers are the same on every platform. Distributions, by declared dtype
/// and shape:
///
/// * `i32` params: integers uniform in `[0, 1024)` (whatever the columns of
///   the table they index: an index past the end takes 0);
/// * float params whose shape mentions a symbolic dim (activations): N(0, 1);
/// * float rank-2 params with constant dims (weights, `[out, in]`): normal
///   with mean 0 and standard deviation `1 / sqrt(cols)`;
/// * float rank-0 and rank-1 params with constant dims (gains, biases):
///   `1 + 0.1 N(0, 1)`;
/// * the previous content of every `+=` output: N(0, 1) (integers as for
///   params when the output is `i32`).
///
/// Float values are rounded to the tensor's dtype (a bf16 param holds
/// exactly representable values); a value that rounds to zero is drawn again
/// (at most a few times), so float tensors hold no zeros. Tensors have their
/// canonical `(rows, cols)`. fp8 tensors are [`EvalError::Unsupported`].
///
/// Precisely: the stream of tensor `name` is SplitMix64 started at
/// `splitmix64_first_output(seed) ^ fnv1a_64(name)`; an integer is the next
/// output modulo 1024; a normal pair is `r cos t`, `r sin t` with
/// `r = sqrt(-2 ln(1 - u1))`, `t = 2 pi u2`, `u = (output >> 11) / 2^53`,
/// used in that order.
pub fn random_inputs(
    block: &Block,
    dims: &DimBindings,
    seed: u64,
) -> Result<BTreeMap<String, HostTensor>, EvalError> {
    let dims = resolve_bindings(block, dims)?;
    check_memory(block, &dims)?;
    let mut inputs = BTreeMap::new();
    for decl in &block.params {
        let tensor = random_tensor(decl, &dims, seed, param_distribution(decl, &dims)?)?;
        inputs.insert(decl.name.clone(), tensor);
    }
    for output in block.outputs.iter().filter(|o| o.accumulate) {
        let decl = &output.tensor;
        let distribution = match decl.dtype {
            DType::I32 | DType::Bool => integers(decl.dtype),
            _ => Distribution::Normal {
                mean: 0.0,
                std: 1.0,
            },
        };
        inputs.insert(
            decl.name.clone(),
            random_tensor(decl, &dims, seed, distribution)?,
        );
    }
    Ok(inputs)
}

/// Fails when the tensors together would exceed the memory limit.
fn check_memory(block: &Block, dims: &DimBindings) -> Result<(), EvalError> {
    let accumulated = block
        .outputs
        .iter()
        .filter(|o| o.accumulate)
        .map(|o| &o.tensor);
    let mut elements: u128 = 0;
    for decl in block.params.iter().chain(accumulated) {
        let (rows, cols) = bind_shape(&decl.shape, dims)?;
        elements += rows as u128 * cols as u128;
    }
    let needed = elements * 8;
    if needed > u128::from(MEMORY_LIMIT_BYTES) {
        return Err(EvalError::OutOfMemory {
            what: format!("random inputs of block `{}`", block.name),
            needed: u64::try_from(needed).unwrap_or(u64::MAX),
            limit: MEMORY_LIMIT_BYTES,
        });
    }
    Ok(())
}

/// What values a tensor is drawn from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Distribution {
    /// `mean + std * N(0, 1)`.
    Normal { mean: f64, std: f64 },
    /// Integers uniform in `[0, below)`.
    Integers { below: u64 },
}

fn integers(dtype: DType) -> Distribution {
    Distribution::Integers {
        below: if dtype == DType::Bool { 2 } else { 1024 },
    }
}

/// The distribution of a param, as listed in the module docs.
fn param_distribution(decl: &Tensor, dims: &DimBindings) -> Result<Distribution, EvalError> {
    if !decl.dtype.is_float() {
        return Ok(integers(decl.dtype));
    }
    let symbolic = !decl.shape.rows.symbols().is_empty() || !decl.shape.cols.symbols().is_empty();
    Ok(if symbolic {
        Distribution::Normal {
            mean: 0.0,
            std: 1.0,
        }
    } else if decl.rank == 2 {
        let (_, cols) = bind_shape(&decl.shape, dims)?;
        Distribution::Normal {
            mean: 0.0,
            std: 1.0 / (cols as f64).sqrt(),
        }
    } else {
        Distribution::Normal {
            mean: 1.0,
            std: 0.1,
        }
    })
}

/// One tensor of `decl`'s bound shape drawn from `distribution`.
fn random_tensor(
    decl: &Tensor,
    dims: &DimBindings,
    seed: u64,
    distribution: Distribution,
) -> Result<HostTensor, EvalError> {
    let (rows, cols) = bind_shape(&decl.shape, dims)?;
    let mut stream = Stream::new(seed, &decl.name);
    let count = rows.saturating_mul(cols);
    let mut data = Vec::with_capacity(count);
    for _ in 0..count {
        data.push(draw(&mut stream, distribution, decl)?);
    }
    Ok(HostTensor {
        dtype: decl.dtype,
        rows,
        cols,
        data,
    })
}

/// One value, rounded to the tensor's dtype and, for floats, not zero.
fn draw(stream: &mut Stream, distribution: Distribution, decl: &Tensor) -> Result<f64, EvalError> {
    match distribution {
        Distribution::Integers { below } => Ok((stream.next_u64() % below.max(1)) as f64),
        Distribution::Normal { mean, std } => {
            let mut value = 0.0;
            for _ in 0..ZERO_REDRAWS {
                value =
                    round_to_dtype(mean + std * stream.normal(), decl.dtype).map_err(
                        |e| match e {
                            EvalError::Unsupported { what, message } => EvalError::Unsupported {
                                what: format!("random `{}`: {what}", decl.name),
                                message,
                            },
                            other => other,
                        },
                    )?;
                if value != 0.0 {
                    break;
                }
            }
            Ok(value)
        }
    }
}

/// A SplitMix64 stream with a spare Box–Muller normal.
struct Stream {
    state: u64,
    spare: Option<f64>,
}

impl Stream {
    /// The stream of the tensor `name` under `seed`.
    fn new(seed: u64, name: &str) -> Stream {
        let mut root = Stream {
            state: seed,
            spare: None,
        };
        let state = root.next_u64() ^ fnv1a(name);
        Stream { state, spare: None }
    }

    /// SplitMix64.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal (Box–Muller, both outputs used in turn).
    fn normal(&mut self) -> f64 {
        if let Some(spare) = self.spare.take() {
            return spare;
        }
        // 1 - u is in (0, 1], so the logarithm is finite.
        let radius = libm::sqrt(-2.0 * libm::log(1.0 - self.uniform()));
        let angle = 2.0 * std::f64::consts::PI * self.uniform();
        self.spare = Some(radius * libm::sin(angle));
        radius * libm::cos(angle)
    }
}

/// The 64-bit FNV-1a hash of `text`.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
