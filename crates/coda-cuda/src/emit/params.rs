//! The by-value argument structs of generated kernels.
//!
//! Every buffer a kernel touches contributes four fields, in this order:
//! the pointer, its leading dimension (`long long`), and the number of rows
//! and columns (`int`) used for bounds; every run-time dim an expression
//! mentions contributes `dim_NAME` (`long long`). Fields follow the C
//! layout rules of `coda_runtime::ParamBlock` (natural alignment, no
//! packing), so the host fills the struct field by field from the manifest.

use super::names::Namer;
use crate::kir::{BlockIr, BufId};
use crate::manifest::{FieldSpec, FieldValue, StructSpec};
use coda_ir::DType;
use std::collections::{BTreeMap, BTreeSet};

/// The C type of an element.
pub(crate) fn c_type(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "__nv_bfloat16",
        DType::F16 => "__half",
        DType::I32 => "int",
        _ => "float",
    }
}

/// One field of an argument struct.
#[derive(Debug, Clone)]
struct Field {
    name: String,
    kind: &'static str,
    c_type: String,
    value: FieldValue,
    /// For pointers: the buffer (constness is decided at the end).
    buf: Option<BufId>,
}

/// The fields of one kernel's `Params` struct, collected while emitting.
#[derive(Debug, Clone, Default)]
pub(crate) struct ParamTable {
    fields: Vec<Field>,
    bufs: BTreeMap<BufId, String>,
    dims: BTreeMap<String, String>,
    written: BTreeSet<BufId>,
}

impl ParamTable {
    /// The base field name of buffer `id` (`p.NAME`, `p.NAME_ld`,
    /// `p.NAME_rows`, `p.NAME_cols`), adding its fields on first use.
    pub(crate) fn buf(&mut self, ir: &BlockIr, names: &mut Namer, id: BufId) -> String {
        if let Some(name) = self.bufs.get(&id) {
            return name.clone();
        }
        let buffer = &ir.buffers[id];
        let name = names.fresh(&buffer.name);
        let bufname = buffer.name.clone();
        self.fields.push(Field {
            name: name.clone(),
            kind: "ptr",
            c_type: c_type(buffer.dtype).to_string(),
            value: FieldValue::Ptr(bufname.clone()),
            buf: Some(id),
        });
        self.fields.push(Field {
            name: format!("{name}_ld"),
            kind: "i64",
            c_type: "long long".into(),
            value: FieldValue::Ld(bufname),
            buf: None,
        });
        for (suffix, expr) in [("rows", &buffer.rows), ("cols", &buffer.cols)] {
            self.fields.push(Field {
                name: format!("{name}_{suffix}"),
                kind: "i32",
                c_type: "int".into(),
                value: FieldValue::Expr(expr.to_string()),
                buf: None,
            });
        }
        self.bufs.insert(id, name.clone());
        name
    }

    /// Marks a buffer as written (its pointer is not `const`).
    pub(crate) fn write(&mut self, ir: &BlockIr, names: &mut Namer, id: BufId) -> String {
        self.written.insert(id);
        self.buf(ir, names, id)
    }

    /// The field holding run-time dim `name`.
    pub(crate) fn dim(&mut self, name: &str) -> String {
        if let Some(field) = self.dims.get(name) {
            return field.clone();
        }
        let field = format!("dim_{name}");
        self.fields.push(Field {
            name: field.clone(),
            kind: "i64",
            c_type: "long long".into(),
            value: FieldValue::Expr(name.to_string()),
            buf: None,
        });
        self.dims.insert(name.to_string(), field.clone());
        field
    }

    /// The C struct body: one field per line.
    pub(crate) fn c_fields(&self, indent: &str) -> String {
        let mut out = String::new();
        for f in &self.fields {
            let ty = match f.buf {
                Some(id) if !self.written.contains(&id) => format!("const {}*", f.c_type),
                Some(_) => format!("{}*", f.c_type),
                None => f.c_type.clone(),
            };
            out.push_str(&format!("{indent}{ty} {};\n", f.name));
        }
        out
    }

    /// The manifest description of the struct.
    pub(crate) fn spec(&self, name: &str) -> StructSpec {
        let fields: Vec<FieldSpec> = self
            .fields
            .iter()
            .map(|f| FieldSpec { name: f.name.clone(), kind: f.kind.to_string(), value: f.value.clone() })
            .collect();
        StructSpec::new(name, fields)
    }
}
