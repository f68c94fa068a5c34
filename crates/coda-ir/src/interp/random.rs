//! Deterministic random inputs for a block (see [`random_inputs`]).

use super::bind::{bind_shape, resolve_bindings, DimBindings};
use super::error::EvalError;
use super::estimate::locate_dim_error;
use super::eval::MEMORY_LIMIT_BYTES;
use super::parallel::fill_chunks;
use super::round::round_to_dtype;
use super::tensor::HostTensor;
use crate::block::{Block, Tensor};
use crate::ty::DType;
use std::collections::BTreeMap;

/// Draws of a float that rounds to zero before it is kept anyway.
const ZERO_REDRAWS: usize = 8;

/// Elements per independent stream (blocks are generated in parallel).
const BLOCK: usize = 1 << 16;

/// Random inputs for every param and every `+=` output of `block`.
///
/// Every tensor draws from its own streams, keyed by the run's seed and the
/// tensor's name, so adding or renaming one param leaves the others
/// unchanged. Distributions, by declared dtype and shape:
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
/// (at most 8 times), so float tensors hold no zeros. Tensors have their
/// canonical `(rows, cols)`.
///
/// Precisely: the row-major data is cut into blocks of 65536 elements. Block
/// `b` of tensor `name` is filled from the SplitMix64 stream started at
/// `key ^ s(b)`, where `key = s(seed) ^ fnv1a64(name)` and `s(x)` is the
/// first SplitMix64 output from state `x`. An integer is the next output
/// modulo 1024 (2 for bool). Normals come in pairs from Marsaglia's polar
/// method: `u`, `v` uniform in `[-1, 1)` (`(output >> 11) * 2^-52 - 1`),
/// redrawn until `0 < s = u² + v² < 1`, then `u f` and `v f` in that order
/// with `f = sqrt(-2 ln(s) / s)` (`ln` from the `libm` crate, `sqrt` the
/// correctly rounded IEEE one, so the numbers are the same on every
/// platform). Blocks are generated on several threads; the result
/// does not depend on how many.
pub fn random_inputs(block: &Block, dims: &DimBindings, seed: u64) -> Result<BTreeMap<String, HostTensor>, EvalError> {
    let dims = resolve_bindings(block, dims).map_err(|e| locate_dim_error(block, e))?;
    check_memory(block, &dims)?;
    let mut inputs = BTreeMap::new();
    for decl in &block.params {
        let tensor = param_distribution(decl, &dims).and_then(|d| random_tensor(decl, &dims, seed, d));
        inputs.insert(decl.name.clone(), tensor.map_err(|e| e.at(decl.span))?);
    }
    for output in block.outputs.iter().filter(|o| o.accumulate) {
        let decl = &output.tensor;
        let distribution = match decl.dtype {
            DType::I32 | DType::Bool => integers(decl.dtype),
            _ => Distribution::Normal { mean: 0.0, std: 1.0 },
        };
        let tensor = random_tensor(decl, &dims, seed, distribution).map_err(|e| e.at(decl.span))?;
        inputs.insert(decl.name.clone(), tensor);
    }
    Ok(inputs)
}

/// Fails when the tensors together would exceed the memory limit.
fn check_memory(block: &Block, dims: &DimBindings) -> Result<(), EvalError> {
    let accumulated = block.outputs.iter().filter(|o| o.accumulate).map(|o| &o.tensor);
    let mut elements: u128 = 0;
    for decl in block.params.iter().chain(accumulated) {
        let (rows, cols) = bind_shape(&decl.shape, dims).map_err(|e| e.at(decl.span))?;
        elements += rows as u128 * cols as u128;
    }
    let needed = elements * 8;
    if needed > u128::from(MEMORY_LIMIT_BYTES) {
        let error = EvalError::OutOfMemory {
            what: format!("the random inputs of block `{}`", block.name),
            needed: u64::try_from(needed).unwrap_or(u64::MAX),
            limit: MEMORY_LIMIT_BYTES,
        };
        return Err(error.at(super::diagnostic::header_span(block)));
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
    Distribution::Integers { below: if dtype == DType::Bool { 2 } else { 1024 } }
}

/// The distribution of a param, as listed in the module docs.
fn param_distribution(decl: &Tensor, dims: &DimBindings) -> Result<Distribution, EvalError> {
    if !decl.dtype.is_float() {
        return Ok(integers(decl.dtype));
    }
    let symbolic = !decl.shape.rows.symbols().is_empty() || !decl.shape.cols.symbols().is_empty();
    Ok(if symbolic {
        Distribution::Normal { mean: 0.0, std: 1.0 }
    } else if decl.rank == 2 {
        let (_, cols) = bind_shape(&decl.shape, dims)?;
        Distribution::Normal { mean: 0.0, std: 1.0 / (cols as f64).sqrt() }
    } else {
        Distribution::Normal { mean: 1.0, std: 0.1 }
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
    let key = tensor_key(seed, &decl.name);
    let mut data = vec![0.0; rows.saturating_mul(cols)];
    fill_chunks(&mut data, BLOCK, |index, block| {
        let mut stream = Stream::for_block(key, index);
        for slot in block {
            *slot = draw(&mut stream, distribution, decl.dtype);
        }
    });
    Ok(HostTensor { dtype: decl.dtype, rows, cols, data })
}

/// One value, rounded to `dtype` and, for floats, not zero.
fn draw(stream: &mut Stream, distribution: Distribution, dtype: DType) -> f64 {
    match distribution {
        Distribution::Integers { below } => (stream.next_u64() % below.max(1)) as f64,
        Distribution::Normal { mean, std } => {
            let mut value = 0.0;
            for _ in 0..ZERO_REDRAWS {
                let x = mean + std * stream.normal();
                value = round_to_dtype(x, dtype);
                if value != 0.0 {
                    break;
                }
            }
            value
        }
    }
}

/// The key of tensor `name` under `seed`: the first SplitMix64 output from
/// `seed`, xor the FNV-1a hash of the name.
fn tensor_key(seed: u64, name: &str) -> u64 {
    Stream { state: seed, spare: None }.next_u64() ^ fnv1a(name)
}

/// A SplitMix64 stream with a spare normal.
struct Stream {
    state: u64,
    spare: Option<f64>,
}

impl Stream {
    /// The stream of block `index` of the tensor with `key`: SplitMix64
    /// started at `key ^ splitmix64_first_output(index)`.
    fn for_block(key: u64, index: usize) -> Stream {
        let mut mixer = Stream { state: index as u64, spare: None };
        Stream { state: key ^ mixer.next_u64(), spare: None }
    }

    /// SplitMix64.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)` with 53 random bits.
    fn symmetric(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (2.0 / (1u64 << 53) as f64) - 1.0
    }

    /// A standard normal: Marsaglia's polar method, both outputs used in turn.
    fn normal(&mut self) -> f64 {
        if let Some(spare) = self.spare.take() {
            return spare;
        }
        loop {
            let (u, v) = (self.symmetric(), self.symmetric());
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                let factor = (-2.0 * libm::log(s) / s).sqrt();
                self.spare = Some(v * factor);
                return u * factor;
            }
        }
    }
}

/// The 64-bit FNV-1a hash of `text`.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}
