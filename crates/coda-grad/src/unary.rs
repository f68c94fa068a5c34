//! Derivatives of the elementwise functions of one argument: for
//! `y = f(x)` and the gradient `g` of `y`, the gradient of `x` is
//! `g · f'(x)`, written with `x`, `y` and IR primitives only.

use crate::builder::Builder;
use crate::GradError;
use coda_diagnostics::Span;
use coda_ir::{BinaryOp, UnaryOp, Value};

/// `sqrt(2 / pi)`.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// `1 / sqrt(2 pi)`, the standard normal density at 0.
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
/// The cubic coefficient of the tanh form of GELU.
const GELU_CUBIC: f64 = 0.044_715;

/// `g · f'(x)` for `y = op(x)`.
pub(crate) fn vjp(
    b: &mut Builder<'_>,
    op: UnaryOp,
    x: Value,
    y: Value,
    g: Value,
    span: Span,
) -> Result<Value, GradError> {
    use BinaryOp::{Add, Div, Gt, Lt, Mul, Sub};
    match op {
        // d Φ(x) = φ(x) dx
        UnaryOp::Ndtr => {
            let density = normal_density(b, x, span)?;
            b.bin(Mul, g, density, span)
        }
        // d(-x) = -dx
        UnaryOp::Neg => b.un(UnaryOp::Neg, g, span),
        // d e^x = e^x dx = y dx
        UnaryOp::Exp => b.bin(Mul, g, y, span),
        // d ln x = dx / x
        UnaryOp::Log => b.bin(Div, g, x, span),
        // d sqrt(x) = dx / (2 sqrt(x)) = 0.5 dx / y
        UnaryOp::Sqrt => {
            let half = b.scale(g, 0.5, span)?;
            b.bin(Div, half, y, span)
        }
        // d x^(-1/2) = -1/2 x^(-3/2) dx = -0.5 y³ dx
        UnaryOp::Rsqrt => {
            let y2 = b.bin(Mul, y, y, span)?;
            let y3 = b.bin(Mul, y2, y, span)?;
            let gy3 = b.bin(Mul, g, y3, span)?;
            b.scale(gy3, -0.5, span)
        }
        // d tanh(x) = (1 - tanh²(x)) dx = (1 - y²) dx
        UnaryOp::Tanh => {
            let y2 = b.bin(Mul, y, y, span)?;
            let one = b.konst(1.0, span)?;
            let slope = b.bin(Sub, one, y2, span)?;
            b.bin(Mul, g, slope, span)
        }
        // d σ(x) = σ(x)(1 - σ(x)) dx = y (1 - y) dx
        UnaryOp::Sigmoid => {
            let one = b.konst(1.0, span)?;
            let rest = b.bin(Sub, one, y, span)?;
            let slope = b.bin(Mul, y, rest, span)?;
            b.bin(Mul, g, slope, span)
        }
        // d max(x, 0) = [x > 0] dx (0 at the kink, as in PyTorch)
        UnaryOp::Relu => {
            let zero = b.konst(0.0, span)?;
            let positive = b.bin(Gt, x, zero, span)?;
            b.mask(positive, g, span)
        }
        // d |x| = sign(x) dx (0 at 0)
        UnaryOp::Abs => {
            let zero = b.konst(0.0, span)?;
            let positive = b.bin(Gt, x, zero, span)?;
            let negative = b.bin(Lt, x, zero, span)?;
            let minus = b.un(UnaryOp::Neg, g, span)?;
            let below = b.mask(negative, minus, span)?;
            b.select(positive, g, below, span)
        }
        // d sin(x) = cos(x) dx
        UnaryOp::Sin => {
            let c = b.un(UnaryOp::Cos, x, span)?;
            b.bin(Mul, g, c, span)
        }
        // d cos(x) = -sin(x) dx
        UnaryOp::Cos => {
            let s = b.un(UnaryOp::Sin, x, span)?;
            let gs = b.bin(Mul, g, s, span)?;
            b.un(UnaryOp::Neg, gs, span)
        }
        // d softplus(x) = σ(x) dx
        UnaryOp::Softplus => {
            let s = b.un(UnaryOp::Sigmoid, x, span)?;
            b.bin(Mul, g, s, span)
        }
        // d (x σ(x)) = (σ(x) + x σ(x)(1 - σ(x))) dx = σ(x) (1 + x (1 - σ(x))) dx
        UnaryOp::Silu => {
            let s = match b.shared_parts(UnaryOp::Silu, x) {
                Some(SharedParts::Silu { sigmoid }) => sigmoid,
                _ => b.un(UnaryOp::Sigmoid, x, span)?,
            };
            let one = b.konst(1.0, span)?;
            let rest = b.bin(Sub, one, s, span)?;
            let x_rest = b.bin(Mul, x, rest, span)?;
            let factor = b.bin(Add, one, x_rest, span)?;
            let slope = b.bin(Mul, s, factor, span)?;
            b.bin(Mul, g, slope, span)
        }
        UnaryOp::GeluTanh => gelu_tanh(b, x, g, span),
        UnaryOp::GeluErf => gelu_erf(b, x, g, span),
        // d detach(x) = 0 (a detached value is never active, so nothing asks)
        UnaryOp::Detach => {
            let shape = b.bwd.ty(g).shape.clone();
            b.full(0.0, &shape, span)
        }
    }
}

/// What the backward's recomputation of a forward `f(x)` formed that
/// `f'(x)` shares. The backward recomputes such an `f` from IR primitives
/// ([`recompute`]) rather than as one atomic function, so that the
/// recomputed value and its derivative share one transcendental (the code
/// generator evaluates each value once): in a gated MLP's backward GEMM
/// epilogue, one `tanh` per element for GeLU, one `Φ` for the exact GELU
/// and one sigmoid (an exponential and a reciprocal) for SiLU, not one
/// beside each function.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SharedParts {
    /// `gelu_tanh(x) = x · half` with `u = c (x + a x³)`, `x2 = x²`,
    /// `t = tanh(u)` and `half = 0.5 (1 + t)`.
    GeluTanh { x2: Value, t: Value, half: Value },
    /// `gelu(x) = x · Φ(x)`.
    GeluErf { cdf: Value },
    /// `silu(x) = x · sigmoid(x)`.
    Silu { sigmoid: Value },
}

/// `op(x)` recomputed from primitives, with the parts its derivative
/// shares; `None` for a function with no such parts.
pub(crate) fn recompute(
    b: &mut Builder<'_>,
    op: UnaryOp,
    x: Value,
    span: Span,
) -> Result<Option<(Value, SharedParts)>, GradError> {
    let parts = match op {
        UnaryOp::GeluTanh => {
            let (x2, t, half) = gelu_tanh_parts(b, x, span)?;
            SharedParts::GeluTanh { x2, t, half }
        }
        UnaryOp::GeluErf => SharedParts::GeluErf { cdf: b.un(UnaryOp::Ndtr, x, span)? },
        UnaryOp::Silu => SharedParts::Silu { sigmoid: b.un(UnaryOp::Sigmoid, x, span)? },
        _ => return Ok(None),
    };
    let factor = match parts {
        SharedParts::GeluTanh { half, .. } => half,
        SharedParts::GeluErf { cdf } => cdf,
        SharedParts::Silu { sigmoid } => sigmoid,
    };
    Ok(Some((b.bin(BinaryOp::Mul, x, factor, span)?, parts)))
}

/// `(x2, t, half)` of [`SharedParts::GeluTanh`] for `x`.
fn gelu_tanh_parts(b: &mut Builder<'_>, x: Value, span: Span) -> Result<(Value, Value, Value), GradError> {
    use BinaryOp::{Add, Mul};
    let one = b.konst(1.0, span)?;
    let x2 = b.bin(Mul, x, x, span)?;
    let x3 = b.bin(Mul, x2, x, span)?;
    let cubic = b.scale(x3, GELU_CUBIC, span)?;
    let inner = b.bin(Add, x, cubic, span)?;
    let u = b.scale(inner, SQRT_2_OVER_PI, span)?;
    let t = b.un(UnaryOp::Tanh, u, span)?;
    let one_plus_t = b.bin(Add, one, t, span)?;
    let half = b.scale(one_plus_t, 0.5, span)?;
    Ok((x2, t, half))
}

/// With `u = c (x + a x³)` and `t = tanh(u)`, `gelu_tanh(x) = 0.5 x (1 + t)`:
/// `d gelu_tanh = [0.5 (1 + t) + 0.5 x (1 - t²) c (1 + 3 a x²)] dx`, from
/// the parts the recomputed forward formed ([`recompute`]), if it did.
fn gelu_tanh(b: &mut Builder<'_>, x: Value, g: Value, span: Span) -> Result<Value, GradError> {
    use BinaryOp::{Add, Mul, Sub};
    let (x2, t, half) = match b.shared_parts(UnaryOp::GeluTanh, x) {
        Some(SharedParts::GeluTanh { x2, t, half }) => (x2, t, half),
        _ => gelu_tanh_parts(b, x, span)?,
    };
    let one = b.konst(1.0, span)?;
    let t2 = b.bin(Mul, t, t, span)?;
    let sech2 = b.bin(Sub, one, t2, span)?;
    let x2a = b.scale(x2, 3.0 * GELU_CUBIC, span)?;
    let du = b.bin(Add, one, x2a, span)?;
    let du = b.scale(du, SQRT_2_OVER_PI, span)?;
    let half_x = b.scale(x, 0.5, span)?;
    let second = b.bin(Mul, half_x, sech2, span)?;
    let second = b.bin(Mul, second, du, span)?;
    let slope = b.bin(Add, half, second, span)?;
    b.bin(Mul, g, slope, span)
}

/// `gelu(x) = x Φ(x)`: `d gelu = (Φ(x) + x φ(x)) dx`, with `Φ(x)` the
/// one the recomputed forward formed ([`recompute`]), if it did. No
/// division: a backward GEMM's epilogue evaluates it per element.
fn gelu_erf(b: &mut Builder<'_>, x: Value, g: Value, span: Span) -> Result<Value, GradError> {
    use BinaryOp::{Add, Mul};
    let cdf = match b.shared_parts(UnaryOp::GeluErf, x) {
        Some(SharedParts::GeluErf { cdf }) => cdf,
        _ => b.un(UnaryOp::Ndtr, x, span)?,
    };
    let density = normal_density(b, x, span)?;
    let x_density = b.bin(Mul, x, density, span)?;
    let slope = b.bin(Add, cdf, x_density, span)?;
    b.bin(Mul, g, slope, span)
}

/// The standard normal density `φ(x) = e^(-x²/2) / sqrt(2 pi)`.
fn normal_density(b: &mut Builder<'_>, x: Value, span: Span) -> Result<Value, GradError> {
    let x2 = b.bin(BinaryOp::Mul, x, x, span)?;
    let exponent = b.scale(x2, -0.5, span)?;
    let density = b.un(UnaryOp::Exp, exponent, span)?;
    b.scale(density, INV_SQRT_2PI, span)
}
