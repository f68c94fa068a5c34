//! Matrix products with every transpose flag, and operand rounding.

use super::*;

/// `A = [[1, 2, 3], [4, 5, 6]]`, `B = [[7, 8], [9, 10], [11, 12]]`.
const A: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
const A_T: [f64; 6] = [1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
const B: [f64; 6] = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
const B_T: [f64; 6] = [7.0, 9.0, 11.0, 8.0, 10.0, 12.0];

/// `op(a) @ op(b)` where `a` and `b` are given in their stored layouts.
fn product(
    a: (usize, usize, &[f64]),
    b: (usize, usize, &[f64]),
    flags: (bool, bool),
    round: bool,
) -> TestResult<Vec<f64>> {
    let mut bl = Builder::new();
    let lhs = bl.param("a", DType::BF16, (c(a.0 as i64), c(a.1 as i64)), 2)?;
    let rhs = bl.param("b", DType::F32, (c(b.0 as i64), c(b.1 as i64)), 2)?;
    let (lhs_transposed, rhs_transposed) = flags;
    let operand_dtype = DType::BF16;
    let p = bl.push(Inst::MatMul { lhs, rhs, lhs_transposed, rhs_transposed, operand_dtype })?;
    bl.output("p", DType::F32, p, false);
    let given = inputs(vec![("a", host(DType::F32, a.0, a.1, a.2)?), ("b", host(DType::F32, b.0, b.1, b.2)?)]);
    out(&run(&bl.block, &bind(&[]), &given, round)?, "p")
}

#[test]
fn every_transpose_flag() -> TestResult {
    let expected = [58.0, 64.0, 139.0, 154.0];
    assert_eq!(product((2, 3, &A), (3, 2, &B), (false, false), false)?, expected);
    assert_eq!(product((3, 2, &A_T), (3, 2, &B), (true, false), false)?, expected);
    assert_eq!(product((2, 3, &A), (2, 3, &B_T), (false, true), false)?, expected);
    assert_eq!(product((3, 2, &A_T), (2, 3, &B_T), (true, true), false)?, expected);
    Ok(())
}

#[test]
fn operands_round_but_the_result_does_not() -> TestResult {
    let x = 1.0 + 2f64.powi(-9);
    // The f32 operand x rounds to 1 in bf16 only when rounding is on.
    assert_eq!(product((1, 1, &[1.0]), (1, 1, &[x]), (false, false), false)?, [x]);
    assert_eq!(product((1, 1, &[1.0]), (1, 1, &[x]), (false, false), true)?, [1.0]);
    // 1 + 2^-8 is exact in f32 but not in bf16: the product is not rounded to bf16.
    let tiny = 2f64.powi(-8);
    assert_eq!(product((1, 2, &[1.0, 1.0]), (2, 1, &[1.0, tiny]), (false, false), true)?, [1.0 + tiny]);
    Ok(())
}

#[test]
fn large_products_split_across_threads_identically() -> TestResult {
    // Past the threading threshold; 67 columns leave a partial chunk and a
    // partial group of four, 300 a partial k tile.
    for (m, k, n) in [(96, 700, 80), (256, 300, 67)] {
        let a: Vec<f64> = (0..m * k).map(|i| ((i * 7919) % 1000) as f64 / 1000.0 - 0.5).collect();
        let b: Vec<f64> = (0..k * n).map(|i| ((i * 104_729) % 997) as f64 / 997.0 - 0.5).collect();
        let got = product((m, k, &a), (k, n, &b), (false, false), false)?;
        for (idx, &value) in got.iter().enumerate() {
            let (i, j) = (idx / n, idx % n);
            let expected = (0..k).fold(0.0, |acc, p| acc + a[i * k + p] * b[p * n + j]);
            assert_eq!(value.to_bits(), expected.to_bits(), "element ({i}, {j})");
        }
    }
    Ok(())
}

#[test]
fn only_operands_not_already_of_the_operand_type_round() -> TestResult {
    // An f16 value (1 + 2^-9 is exact in f16) still rounds to bf16 in a bf16 matmul.
    let mut bl = Builder::new();
    let x = bl.param("x", DType::F16, (c(1), c(1)), 2)?;
    let y = bl.param("y", DType::BF16, (c(1), c(1)), 2)?;
    let operand_dtype = DType::BF16;
    let p = bl.push(Inst::MatMul { lhs: x, rhs: y, lhs_transposed: false, rhs_transposed: false, operand_dtype })?;
    bl.output("p", DType::F32, p, false);
    let v = 1.0 + 2f64.powi(-9);
    let given = inputs(vec![("x", host(DType::F16, 1, 1, &[v])?), ("y", host(DType::BF16, 1, 1, &[3.0])?)]);
    assert_eq!(out(&run(&bl.block, &bind(&[]), &given, true)?, "p")?, [3.0]);
    assert_eq!(out(&run(&bl.block, &bind(&[]), &given, false)?, "p")?, [3.0 * v]);
    Ok(())
}
