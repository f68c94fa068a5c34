//! Random inputs: determinism, independence of streams, distributions.

use super::*;
use crate::block::DimDef;
use crate::interp::{random_inputs, round_to_dtype};

/// A block with an activation, a weight, a gain, an index and a `+=` output.
fn layer(extra_param: bool) -> TestResult<Builder> {
    let mut b = Builder::new();
    b.block.dims.push(DimDef { name: "M".into(), value: None });
    if extra_param {
        b.param("extra", DType::F32, (c(1), c(4)), 1)?;
    }
    let x = b.param("x", DType::BF16, (sym("M"), c(256)), 2)?;
    let w = b.param("w", DType::BF16, (c(64), c(256)), 2)?;
    b.param("gain", DType::F32, (c(1), c(64)), 1)?;
    b.param("target", DType::I32, (sym("M"), c(1)), 1)?;
    let operand_dtype = DType::BF16;
    let y = b.push(Inst::MatMul { lhs: x, rhs: w, lhs_transposed: false, rhs_transposed: true, operand_dtype })?;
    b.output("y", DType::F16, y, true);
    Ok(b)
}

fn tensor_of<'a>(inputs: &'a BTreeMap<String, HostTensor>, name: &str) -> TestResult<&'a HostTensor> {
    Ok(inputs.get(name).ok_or_else(|| format!("no `{name}`"))?)
}

fn mean_and_std(data: &[f64]) -> (f64, f64) {
    let n = data.len() as f64;
    let mean = data.iter().sum::<f64>() / n;
    let var = data.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn same_seed_same_inputs_and_streams_are_independent() -> TestResult {
    let dims = bind(&[("M", 32)]);
    let first = random_inputs(&layer(false)?.block, &dims, 7)?;
    assert_eq!(first, random_inputs(&layer(false)?.block, &dims, 7)?);
    let other_seed = random_inputs(&layer(false)?.block, &dims, 8)?;
    assert_ne!(tensor_of(&first, "x")?, tensor_of(&other_seed, "x")?);
    let with_extra = random_inputs(&layer(true)?.block, &dims, 7)?;
    for name in ["x", "w", "gain", "target", "y"] {
        assert_eq!(tensor_of(&first, name)?, tensor_of(&with_extra, name)?, "`{name}` changed");
    }
    assert_eq!(first.len(), 5);
    Ok(())
}

#[test]
fn shapes_dtypes_and_distributions() -> TestResult {
    let inputs = random_inputs(&layer(false)?.block, &bind(&[("M", 32)]), 1)?;
    let x = tensor_of(&inputs, "x")?;
    assert_eq!((x.dtype, x.shape()), (DType::BF16, (32, 256)));
    for (name, mean, std) in [("x", 0.0, 1.0f64), ("w", 0.0, 1.0 / 16.0), ("gain", 1.0, 0.1), ("y", 0.0, 1.0)] {
        let t = tensor_of(&inputs, name)?;
        let (m, s) = mean_and_std(&t.data);
        assert!((m - mean).abs() < 0.1 * std.max(0.5) && (s / std - 1.0).abs() < 0.2, "{name}: {m} {s}");
        assert!(t.data.iter().all(|&v| v != 0.0 && v.is_finite()), "{name} holds a zero");
        for &v in &t.data {
            assert_eq!(round_to_dtype(v, t.dtype), v, "{name} is not rounded to {}", t.dtype);
        }
    }
    let target = tensor_of(&inputs, "target")?;
    assert_eq!(target.shape(), (32, 1));
    assert!(target.data.iter().all(|&v| v.fract() == 0.0 && (0.0..1024.0).contains(&v)));
    assert!(target.data.iter().any(|&v| v != target.data[0]));
    Ok(())
}

#[test]
fn random_inputs_evaluate() -> TestResult {
    let b = layer(false)?;
    let dims = bind(&[("M", 4)]);
    let given = random_inputs(&b.block, &dims, 3)?;
    let y = run(&b.block, &dims, &given, true)?;
    let y = y.get("y").ok_or("no y")?;
    assert_eq!((y.dtype, y.shape()), (DType::F16, (4, 64)));
    assert!(y.data.iter().all(|v| v.is_finite()));
    Ok(())
}

#[test]
fn random_inputs_check_dims() -> TestResult {
    let b = layer(false)?;
    let e = random_inputs(&b.block, &bind(&[]), 3).err().ok_or("generated")?;
    assert!(matches!(e.cause(), EvalError::UnboundDim { .. }), "{e}");
    let e = random_inputs(&b.block, &bind(&[("M", 1 << 23)]), 3).err().ok_or("generated")?;
    assert!(matches!(e.cause(), EvalError::OutOfMemory { .. }), "{e}");
    Ok(())
}
