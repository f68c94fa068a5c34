//! The C text of operations and literals: the one home of the expression
//! helpers that every kind of kernel writes with.

use coda_ir::{BinaryOp, UnaryOp};

/// A C expression for a binary op on two fp32 values.
pub(crate) fn binary(op: BinaryOp, a: &str, b: &str) -> String {
    match op {
        BinaryOp::Add => format!("({a} + {b})"),
        BinaryOp::Sub => format!("({a} - {b})"),
        BinaryOp::Mul => format!("({a} * {b})"),
        BinaryOp::Div => format!("({a} / {b})"),
        BinaryOp::Min => format!("cg::minimum({a}, {b})"),
        BinaryOp::Max => format!("cg::maximum({a}, {b})"),
        BinaryOp::Lt => format!("cg::truth({a} < {b})"),
        BinaryOp::Le => format!("cg::truth({a} <= {b})"),
        BinaryOp::Gt => format!("cg::truth({a} > {b})"),
        BinaryOp::Ge => format!("cg::truth({a} >= {b})"),
        BinaryOp::Eq => format!("cg::truth({a} == {b})"),
        BinaryOp::Ne => format!("cg::truth({a} != {b})"),
    }
}

/// A unary function of a GEMM accumulator value: the exponential family,
/// `tanh` and tanh-GELU use the SFU forms of `coda_common.cuh` (`ex2.approx`,
/// `rcp.approx`: relative error about 1e-6; `tanh.approx`: about 2^-11,
/// under half a bf16 ulp; in tanh-GELU an absolute error of at most
/// 2^-12 |x|), inside the 5e-3 tolerance of any output that
/// depends on a matmul, and 5–10× fewer instructions than `expf`, `tanhf`
/// and an IEEE division (the exponential family made SwiGLU the largest
/// epilogue cost on the H100). Every other function is [`unary_reg`]'s.
pub(crate) fn unary_epilogue(op: UnaryOp, a: &str) -> String {
    match op {
        UnaryOp::Exp => format!("coda::exp_fast({a})"),
        UnaryOp::Sigmoid => format!("coda::sigmoid({a})"),
        UnaryOp::Silu => format!("coda::silu({a})"),
        UnaryOp::Tanh => format!("coda::tanh_fast({a})"),
        UnaryOp::GeluTanh => format!("coda::gelu_tanh({a})"),
        _ => unary_reg(op, a),
    }
}

/// A unary function of a value (no rotary angle special case).
pub(crate) fn unary_reg(op: UnaryOp, a: &str) -> String {
    match op {
        UnaryOp::Neg => format!("(-{a})"),
        UnaryOp::Exp => format!("expf({a})"),
        UnaryOp::Log => format!("logf({a})"),
        UnaryOp::Sqrt => format!("sqrtf({a})"),
        UnaryOp::Rsqrt => format!("cg::rsqrt({a})"),
        UnaryOp::Tanh => format!("tanhf({a})"),
        UnaryOp::Sigmoid => format!("cg::sigmoid({a})"),
        UnaryOp::Relu => format!("cg::relu({a})"),
        UnaryOp::GeluTanh => format!("cg::gelu_tanh({a})"),
        UnaryOp::GeluErf => format!("cg::gelu_erf({a})"),
        UnaryOp::Ndtr => format!("cg::ndtr({a})"),
        UnaryOp::Silu => format!("cg::silu({a})"),
        UnaryOp::Softplus => format!("cg::softplus({a})"),
        UnaryOp::Abs => format!("fabsf({a})"),
        UnaryOp::Sin => format!("sinf({a})"),
        UnaryOp::Cos => format!("cosf({a})"),
        UnaryOp::Detach => format!("({a})"),
    }
}

/// An fp32 C literal.
pub(crate) fn float_lit(c: f64) -> String {
    if c.is_nan() {
        return "cg::nan_f()".into();
    }
    if c.is_infinite() {
        return if c > 0.0 { "coda::pos_inf()".into() } else { "coda::neg_inf()".into() };
    }
    let f = c as f32;
    if f.is_infinite() {
        return if f > 0.0 { "coda::pos_inf()".into() } else { "coda::neg_inf()".into() };
    }
    let text = format!("{f:?}");
    let text = if text.contains(['.', 'e']) { format!("{text}f") } else { format!("{text}.0f") };
    if f < 0.0 {
        format!("({text})")
    } else {
        text
    }
}

/// A double C literal.
pub(crate) fn double_lit(c: f64) -> String {
    let text = format!("{c:?}");
    if text.contains(['.', 'e']) {
        text
    } else {
        format!("{text}.0")
    }
}

/// `start, end, group` of a pair permutation, as C arguments.
pub(crate) fn perm_args(perm: &coda_ir::PairPerm) -> String {
    format!("{}, {}, {}", perm.start, perm.end, perm.group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals() {
        assert_eq!(float_lit(1e-5), "1e-5f");
        assert_eq!(float_lit(0.5), "0.5f");
        assert_eq!(float_lit(-100.0), "(-100.0f)");
        assert_eq!(float_lit(f64::INFINITY), "coda::pos_inf()");
        assert_eq!(double_lit(500000.0), "500000.0");
    }
}
