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
use std::io::Read;
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
        let data = read_file(&path, tensor, rows, cols).with_context(|| format!("input `{}`", tensor.name))?;
        let host = HostTensor::new(tensor.dtype, rows, cols, data)
            .with_context(|| format!("input `{}` ({})", tensor.name, path.display()))?;
        inputs.insert(tensor.name.clone(), host);
    }
    Ok(inputs)
}

/// Longest `.npy` header accepted: NumPy writes a few hundred bytes.
const MAX_HEADER_BYTES: u64 = 1 << 20;

/// Reads the `.npy` file at `path` for `tensor` (`rows × cols` elements):
/// its data is read only once [`open_checked`] accepted the header.
/// Something that is not a regular file (a FIFO, a link to `/dev/zero`) is
/// refused before any read.
fn read_file(path: &Path, tensor: &Tensor, rows: usize, cols: usize) -> Result<Vec<f64>> {
    let Checked { mut reader, mut bytes, descr, data_len } = open_checked(path, tensor, rows, cols)?;
    let header_len = bytes.len() as u64;
    // The file's length was checked against the promise, so this reads at
    // most what the tensor needs even if the file grows meanwhile.
    (&mut reader).take(data_len).read_to_end(&mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 != header_len + data_len {
        bail!("{}: the file is truncated (it shrank while being read)", path.display());
    }
    let npy = npyz::NpyFile::new(&bytes[..]).with_context(|| format!("{} is not a .npy file", path.display()))?;
    let values: Vec<f64> = match descr.as_str() {
        "<f8" => npy.into_vec::<f64>()?,
        "<f4" => npy.into_vec::<f32>()?.into_iter().map(f64::from).collect(),
        "<f2" => npy.into_vec::<half::f16>()?.into_iter().map(f64::from).collect(),
        "<i4" => npy.into_vec::<i32>()?.into_iter().map(f64::from).collect(),
        _ => npy.into_vec::<i64>()?.into_iter().map(|v| v as f64).collect(),
    };
    Ok(values)
}

/// Checks every input file of `block` in `dir` ([`read_inputs`]' checks
/// short of reading the data), so that `run` and `bench` report a bad
/// `--inputs` before looking for a GPU.
pub(crate) fn check_inputs(block: &Block, dims: &DimBindings, dir: &Path) -> Result<()> {
    let accumulated = block.outputs.iter().filter(|o| o.accumulate).map(|o| &o.tensor);
    for tensor in block.params.iter().chain(accumulated) {
        let path = dir.join(format!("{}.npy", tensor.name));
        let (rows, cols) = bind_shape(&tensor.shape, dims)?;
        open_checked(&path, tensor, rows, cols).with_context(|| format!("input `{}`", tensor.name))?;
    }
    Ok(())
}

/// An input file whose header was read and checked, positioned at its data.
struct Checked {
    reader: std::io::BufReader<std::fs::File>,
    /// The header's bytes.
    bytes: Vec<u8>,
    /// The dtype, e.g. `<f4`.
    descr: String,
    /// Bytes of data the header promises, which are the rest of the file.
    data_len: u64,
}

/// Opens the `.npy` file at `path` for `tensor` (`rows × cols` elements),
/// reads its header and checks that it promises exactly the elements the
/// tensor needs and that the file is exactly as long as it promises.
fn open_checked(path: &Path, tensor: &Tensor, rows: usize, cols: usize) -> Result<Checked> {
    let (file, len) =
        coda_runtime::files::open_regular(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut reader = std::io::BufReader::new(file);
    let bytes = read_header(&mut reader, len).with_context(|| format!("{} is not a .npy file", path.display()))?;
    let header_len = bytes.len() as u64;
    let npy = npyz::NpyFile::new(&bytes[..]).with_context(|| format!("{} is not a .npy file", path.display()))?;
    if npy.order() != npyz::Order::C {
        bail!("{}: only C-order (row-major) arrays are supported", path.display());
    }
    let descr = npy.dtype().descr();
    let descr = descr.trim_matches(|c| c == '\'' || c == '"').to_owned();
    let item_bytes: u64 = match descr.as_str() {
        "<f8" | "<i8" => 8,
        "<f4" | "<i4" => 4,
        "<f2" => 2,
        other => bail!("{}: unsupported dtype {other} (use float16/32/64 or int32/64)", path.display()),
    };
    let shape = npy.shape().to_vec();
    let count = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    if count != Some((rows * cols) as u64) {
        bail!(
            "input `{}` in {}: expected {} elements ({rows} × {cols} for {}), the file's header has shape {shape:?}",
            tensor.name,
            path.display(),
            rows * cols,
            tensor.ty(),
        );
    }
    let data_len = (rows * cols) as u64 * item_bytes;
    if len != header_len + data_len {
        bail!(
            "{}: {len} bytes, but its header promises {} ({header_len} of header, {} × {item_bytes} of data){}",
            path.display(),
            header_len + data_len,
            rows * cols,
            if len < header_len + data_len { ": the file is truncated" } else { "" }
        );
    }
    Ok(Checked { reader, bytes, descr, data_len })
}

/// Reads a `.npy` header (magic, version, length, text) from a file of
/// `file_len` bytes, and returns its bytes.
fn read_header(reader: &mut impl Read, file_len: u64) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; 8];
    reader.read_exact(&mut bytes).context("shorter than a .npy header")?;
    if &bytes[..6] != b"\x93NUMPY" {
        bail!("no .npy magic string");
    }
    let field = if bytes[6] == 1 { 2 } else { 4 };
    bytes.resize(8 + field, 0);
    reader.read_exact(&mut bytes[8..]).context("shorter than a .npy header")?;
    let text_len = bytes[8..].iter().rev().fold(0u64, |n, &b| (n << 8) | u64::from(b));
    let total = 8 + field as u64 + text_len;
    if text_len > MAX_HEADER_BYTES || total > file_len {
        bail!("its header claims {text_len} bytes; the file has {file_len}");
    }
    let start = bytes.len();
    bytes.resize(total as usize, 0);
    reader.read_exact(&mut bytes[start..]).context("shorter than its header")?;
    Ok(bytes)
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
