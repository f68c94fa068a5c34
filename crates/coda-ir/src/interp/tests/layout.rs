//! Transpose, broadcast, column slices, concatenation and interleaving.

use super::*;

/// `[[1, 2, 3], [4, 5, 6]]`.
fn two_by_three() -> TestResult<HostTensor> {
    host(DType::F32, 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

/// Evaluates a block whose only param is `x = two_by_three()`.
fn on_x(b: &Builder) -> TestResult<BTreeMap<String, HostTensor>> {
    Ok(run(&b.block, &bind(&[]), &inputs(vec![("x", two_by_three()?)]), false)?)
}

#[test]
fn transpose_swaps_axes() -> TestResult {
    let mut b = Builder::new();
    let x = b.f32_param("x", 2, 3)?;
    let t = b.push(Inst::Transpose { arg: x })?;
    b.output("t", DType::F32, t, false);
    let results = on_x(&b)?;
    assert_eq!(results.get("t").map(HostTensor::shape), Some((3, 2)));
    assert_eq!(out(&results, "t")?, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    Ok(())
}

#[test]
fn broadcast_widens_unit_axes() -> TestResult {
    let mut b = Builder::new();
    let x = b.f32_param("x", 2, 3)?;
    let row = b.push(Inst::SliceCols { arg: x, start: c(1), len: c(1), step: 1 })?;
    let wide = b.push(Inst::Broadcast { arg: row, shape: Shape::new(c(2), c(3)) })?;
    let col = b.push(Inst::Reduce { op: crate::inst::ReduceOp::Sum, axis: crate::inst::Axis::Rows, arg: x })?;
    let tall = b.push(Inst::Broadcast { arg: col, shape: Shape::new(c(2), c(3)) })?;
    let k = b.push(Inst::Const(9.0))?;
    let all = b.push(Inst::Broadcast { arg: k, shape: Shape::new(c(2), c(2)) })?;
    b.output("wide", DType::F32, wide, false);
    b.output("tall", DType::F32, tall, false);
    b.output("all", DType::F32, all, false);
    let results = on_x(&b)?;
    assert_eq!(out(&results, "wide")?, [2.0, 2.0, 2.0, 5.0, 5.0, 5.0]);
    assert_eq!(out(&results, "tall")?, [5.0, 7.0, 9.0, 5.0, 7.0, 9.0]);
    assert_eq!(out(&results, "all")?, [9.0; 4]);
    Ok(())
}

#[test]
fn strided_slices_concat_and_interleave() -> TestResult {
    let mut b = Builder::new();
    let x = b.f32_param("x", 2, 3)?;
    let even = b.push(Inst::SliceCols { arg: x, start: c(0), len: c(2), step: 2 })?;
    let mid = b.push(Inst::SliceCols { arg: x, start: c(1), len: c(2), step: 1 })?;
    let both = b.push(Inst::ConcatCols { parts: vec![even, x, mid] })?;
    let mixed = b.push(Inst::Interleave { even, odd: mid })?;
    b.output("even", DType::F32, even, false);
    b.output("both", DType::F32, both, false);
    b.output("mixed", DType::F32, mixed, false);
    let results = on_x(&b)?;
    assert_eq!(out(&results, "even")?, [1.0, 3.0, 4.0, 6.0]);
    let both = [1.0, 3.0, 1.0, 2.0, 3.0, 2.0, 3.0, 4.0, 6.0, 4.0, 5.0, 6.0, 5.0, 6.0];
    assert_eq!(out(&results, "both")?, both);
    assert_eq!(out(&results, "mixed")?, [1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 6.0, 6.0]);
    Ok(())
}

#[test]
fn a_slice_past_the_end_is_an_error() -> TestResult {
    let mut b = Builder::new();
    b.block.dims.push(crate::block::DimDef { name: "S".into(), value: None });
    let x = b.f32_param("x", 2, 3)?;
    let s = b.push(Inst::SliceCols { arg: x, start: sym("S"), len: c(2), step: 1 })?;
    b.block.set_name(s, "tail");
    b.output("s", DType::F32, s, false);
    let given = inputs(vec![("x", two_by_three()?)]);
    assert_eq!(out(&run(&b.block, &bind(&[("S", 1)]), &given, false)?, "s")?, [2.0, 3.0, 5.0, 6.0]);
    let e = run(&b.block, &bind(&[("S", 2)]), &given, false).err().ok_or("sliced")?;
    assert_eq!(e.to_string(), "`tail`: slice columns 2 + k*1 for k < 2 leave 0..3");
    let diagnostic = e.diagnostic(&b.block);
    assert_eq!(diagnostic.code, "E0703");
    assert_eq!(
        diagnostic.labels.first().map(|l| l.message.as_str()),
        Some("`tail` takes columns 2..4 of a value with 3 columns")
    );
    Ok(())
}
