//! Rotary embedding tables and partners, against the formulas written out.

use super::*;
use crate::block::DimDef;
use crate::inst::{BinaryOp, RopeSpec, RopeStyle, RopeTable, UnaryOp};

fn spec(style: RopeStyle, head_dim: i64, base: f64, start: Dim, end: Dim) -> RopeSpec {
    RopeSpec { head_dim, rotary_dim: head_dim, base, start, end, style }
}

/// Freq and sign tables and the partner of `[0, 1, ..., cols-1]`.
fn tables(spec: RopeSpec, cols: i64) -> TestResult<[Vec<f64>; 3]> {
    let mut b = Builder::new();
    let columns = b.f32_param("n", 1, cols)?;
    let freq = b.push(Inst::RopeTable { spec: spec.clone(), table: RopeTable::Freq, cols: c(cols) })?;
    let sign = b.push(Inst::RopeTable { spec: spec.clone(), table: RopeTable::Sign, cols: c(cols) })?;
    let partner = b.push(Inst::RopePartner { spec, arg: columns })?;
    b.output("freq", DType::F32, freq, false);
    b.output("sign", DType::F32, sign, false);
    b.output("partner", DType::F32, partner, false);
    let n: Vec<f64> = (0..cols).map(|i| i as f64).collect();
    let results = run(&b.block, &bind(&[]), &inputs(vec![("n", host(DType::F32, 1, n.len(), &n)?)]), false)?;
    Ok([out(&results, "freq")?, out(&results, "sign")?, out(&results, "partner")?])
}

#[test]
fn half_style_tables() -> TestResult {
    let [freq, sign, partner] = tables(spec(RopeStyle::Half, 4, 100.0, c(0), c(8)), 10)?;
    assert_close(&freq, &[1.0, 0.1, 1.0, 0.1, 1.0, 0.1, 1.0, 0.1, 0.0, 0.0], 1e-15);
    assert_eq!(sign, [-1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0, 1.0, 0.0, 0.0]);
    assert_eq!(partner, [2.0, 3.0, 0.0, 1.0, 6.0, 7.0, 4.0, 5.0, 8.0, 9.0]);
    Ok(())
}

#[test]
fn interleaved_style_tables() -> TestResult {
    let [freq, sign, partner] = tables(spec(RopeStyle::Interleaved, 4, 100.0, c(2), c(10)), 10)?;
    assert_close(&freq, &[0.0, 0.0, 1.0, 1.0, 0.1, 0.1, 1.0, 1.0, 0.1, 0.1], 1e-15);
    assert_eq!(sign, [0.0, 0.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0]);
    assert_eq!(partner, [0.0, 1.0, 3.0, 2.0, 5.0, 4.0, 7.0, 6.0, 9.0, 8.0]);
    Ok(())
}

#[test]
fn eight_wide_heads_use_four_frequencies() -> TestResult {
    let [freq, _, _] = tables(spec(RopeStyle::Half, 8, 10000.0, c(0), c(8)), 8)?;
    let f = [1.0, 0.1, 0.01, 0.001];
    assert_close(&freq, &[f, f].concat(), 1e-14);
    Ok(())
}

#[test]
fn a_partner_outside_the_tensor_is_an_error() -> TestResult {
    let e = tables(spec(RopeStyle::Half, 4, 100.0, c(0), c(6)), 6).err().ok_or("accepted")?;
    assert!(e.to_string().contains("pairs column 4 with column 6, outside 0..6"), "{e}");
    let e = tables(spec(RopeStyle::Half, 3, 100.0, c(0), c(6)), 6).err().ok_or("accepted")?;
    assert!(e.to_string().contains("head_dim 3 is not a positive even number"), "{e}");
    Ok(())
}

/// `rope(x) = x cos(pos freq) + partner(x) sign sin(pos freq)` as the lowering builds it.
fn rope_block(style: RopeStyle) -> TestResult<Builder> {
    let mut b = Builder::new();
    b.block.dims.push(DimDef { name: "N".into(), value: None });
    let (m, n) = (c(3), sym("N"));
    let x = b.param("x", DType::F32, (m.clone(), n.clone()), 2)?;
    let pos = b.param("pos", DType::F32, (m.clone(), c(1)), 1)?;
    let spec = spec(style, 4, 10000.0, c(4), n.clone());
    let tile = Shape::new(m, n.clone());
    let widen = |b: &mut Builder, arg| b.push(Inst::Broadcast { arg, shape: tile.clone() });
    let freq = b.push(Inst::RopeTable { spec: spec.clone(), table: RopeTable::Freq, cols: n.clone() })?;
    let sign = b.push(Inst::RopeTable { spec: spec.clone(), table: RopeTable::Sign, cols: n })?;
    let (freq, sign, pos) = (widen(&mut b, freq)?, widen(&mut b, sign)?, widen(&mut b, pos)?);
    let mul = |b: &mut Builder, lhs, rhs| b.push(Inst::Binary { op: BinaryOp::Mul, lhs, rhs });
    let angle = mul(&mut b, pos, freq)?;
    let cos = b.push(Inst::Unary { op: UnaryOp::Cos, arg: angle })?;
    let sin = b.push(Inst::Unary { op: UnaryOp::Sin, arg: angle })?;
    let partner = b.push(Inst::RopePartner { spec, arg: x })?;
    let (straight, turned) = (mul(&mut b, x, cos)?, mul(&mut b, partner, sign)?);
    let turned = mul(&mut b, turned, sin)?;
    let y = b.push(Inst::Binary { op: BinaryOp::Add, lhs: straight, rhs: turned })?;
    b.output("y", DType::F32, y, false);
    Ok(b)
}

/// Rotates the pairs of columns 4..8 of each row by `pos * 10000^(-2i/4)`.
fn rotate_directly(style: RopeStyle, x: &[f64], pos: &[f64]) -> Vec<f64> {
    let mut y = x.to_vec();
    for (m, &p) in pos.iter().enumerate() {
        for i in 0..2 {
            let (a, b) = match style {
                RopeStyle::Half => (8 * m + 4 + i, 8 * m + 6 + i),
                RopeStyle::Interleaved => (8 * m + 4 + 2 * i, 8 * m + 5 + 2 * i),
            };
            let theta = p * 10000f64.powf(-2.0 * i as f64 / 4.0);
            let (xa, xb) = (x.get(a).copied().unwrap_or(0.0), x.get(b).copied().unwrap_or(0.0));
            if let Some(slot) = y.get_mut(a) {
                *slot = xa * theta.cos() - xb * theta.sin();
            }
            if let Some(slot) = y.get_mut(b) {
                *slot = xb * theta.cos() + xa * theta.sin();
            }
        }
    }
    y
}

#[test]
fn rope_rotates_pairs_in_both_styles() -> TestResult {
    let x: Vec<f64> = (0..24).map(|i| f64::from(i) * 0.37 - 3.0).collect();
    let pos = [0.0, 5.0, 123.0];
    let given = inputs(vec![("x", host(DType::F32, 3, 8, &x)?), ("pos", host(DType::F32, 3, 1, &pos)?)]);
    for style in [RopeStyle::Half, RopeStyle::Interleaved] {
        let b = rope_block(style)?;
        let got = out(&run(&b.block, &bind(&[("N", 8)]), &given, false)?, "y")?;
        let expected = rotate_directly(style, &x, &pos);
        for (g, e) in got.iter().zip(&expected) {
            assert!((g - e).abs() < 1e-12, "{style:?}: got {got:?}, expected {expected:?}");
        }
    }
    Ok(())
}
