//! Reading inputs from and writing outputs to `.npy` files.
//!
//! NumPy has no bfloat16, so float tensors are written as `<f4` (bf16 and f16
//! values are exactly representable in f32) and read from any of `<f2`,
//! `<f4`, `<f8`; i32 tensors are `<i4` (read from `<i4` or `<i8`). The file
//! shape follows the declared rank: `[]`, `[N]` or `[M, N]`.

use anyhow::{bail, Context, Result};
use coda::ir::{interp::bind_shape, Block, DType, Tensor};
use coda::{DimBindings, HostTensor};
use npyz::WriterBuilder;
use std::collections::BTreeMap;
use std::path::Path;

/// The shape a tensor has in its `.npy` file.
pub(crate) fn shape_of(tensor: &Tensor, value: &HostTensor) -> Vec<u64> {
    match tensor.rank {
        0 => vec![],
        1 => vec![(value.rows * value.cols) as u64],
        _ => vec![value.rows as u64, value.cols as u64],
    }
}

/// Reads every input of `block` (and the previous content of `+=` outputs) from `dir`.
pub(crate) fn read_inputs(block: &Block, dims: &DimBindings, dir: &Path) -> Result<BTreeMap<String, HostTensor>> {
    let accumulated = block.outputs.iter().filter(|o| o.accumulate).map(|o| &o.tensor);
    let mut inputs = BTreeMap::new();
    for tensor in block.params.iter().chain(accumulated) {
        let path = dir.join(format!("{}.npy", tensor.name));
        let (rows, cols) = bind_shape(&tensor.shape, dims)?;
        let data = read_file(&path).with_context(|| format!("input `{}`", tensor.name))?;
        if data.len() != rows * cols {
            bail!(
                "input `{}` in {}: expected {} elements ({rows} × {cols} for {}), found {}",
                tensor.name,
                path.display(),
                rows * cols,
                tensor.ty(),
                data.len()
            );
        }
        inputs.insert(tensor.name.clone(), HostTensor::new(tensor.dtype, rows, cols, data)?);
    }
    Ok(inputs)
}

fn read_file(path: &Path) -> Result<Vec<f64>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).with_context(|| format!("{} is not a .npy file", path.display()))?;
    if npy.order() != npyz::Order::C {
        bail!("{}: only C-order (row-major) arrays are supported", path.display());
    }
    let descr = npy.dtype().descr();
    let values: Vec<f64> = match descr.trim_matches(|c| c == '\'' || c == '"') {
        "<f8" => npy.into_vec::<f64>()?,
        "<f4" => npy.into_vec::<f32>()?.into_iter().map(f64::from).collect(),
        "<f2" => npy.into_vec::<half::f16>()?.into_iter().map(f64::from).collect(),
        "<i4" => npy.into_vec::<i32>()?.into_iter().map(f64::from).collect(),
        "<i8" => npy.into_vec::<i64>()?.into_iter().map(|v| v as f64).collect(),
        other => bail!("{}: unsupported dtype {other} (use float16/32/64 or int32/64)", path.display()),
    };
    Ok(values)
}

/// Writes one output to `dir/NAME.npy`.
pub(crate) fn write_output(dir: &Path, tensor: &Tensor, value: &HostTensor) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{}.npy", tensor.name));
    let shape = shape_of(tensor, value);
    let file = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    if tensor.dtype == DType::I32 {
        let mut writer = npyz::WriteOptions::new().default_dtype().shape(&shape).writer(&mut out).begin_nd()?;
        writer.extend(value.data.iter().map(|v| *v as i32))?;
        writer.finish()?;
    } else {
        let mut writer = npyz::WriteOptions::new().default_dtype().shape(&shape).writer(&mut out).begin_nd()?;
        writer.extend(value.data.iter().map(|v| *v as f32))?;
        writer.finish()?;
    }
    Ok(())
}
