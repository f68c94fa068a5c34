//! By-value kernel argument structs: [`ParamBlock`] lays out fields with the
//! C struct rules so that its bytes match a `struct` the code generator
//! emits, and [`layout`] computes the same layout from a field list.
//!
//! # Layout rules (the generated C struct must follow the same ones)
//!
//! Fields are laid out in declaration order. Every field kind has a size and
//! a natural alignment equal to its size:
//!
//! | kind | C type | size = align |
//! |------|--------|--------------|
//! | `Ptr` | any `T*` (64-bit) | 8 |
//! | `I32` / `U32` / `F32` | `int` / `unsigned` / `float` | 4 |
//! | `I64` / `U64` / `F64` | `long long` / `unsigned long long` / `double` | 8 |
//!
//! 1. A field's offset is the current end rounded up to its alignment
//!    (padding bytes are zero).
//! 2. The struct's alignment is the largest field alignment (1 when empty).
//! 3. The struct's size is the end of the last field rounded up to the
//!    struct's alignment.
//!
//! These are the rules of the x86-64 / aarch64 System V ABI, which nvcc and
//! NVRTC follow for device code. Example: `{ptr, i32, i32, i64, f32}` has
//! offsets 0, 8, 12, 16, 24 and size 32. The generated struct must not use
//! `alignas`, bit-fields or packing pragmas.

/// The kind of one struct field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldKind {
    /// A 64-bit device pointer.
    Ptr,
    /// `int`.
    I32,
    /// `unsigned int`.
    U32,
    /// `long long`.
    I64,
    /// `unsigned long long`.
    U64,
    /// `float`.
    F32,
    /// `double`.
    F64,
}

impl FieldKind {
    /// Size in bytes.
    pub fn size(self) -> usize {
        match self {
            FieldKind::I32 | FieldKind::U32 | FieldKind::F32 => 4,
            FieldKind::Ptr | FieldKind::I64 | FieldKind::U64 | FieldKind::F64 => 8,
        }
    }

    /// Alignment in bytes (equal to the size for every kind).
    pub fn align(self) -> usize {
        self.size()
    }

    /// A C type for the field (`Ptr` is shown as `void*`; any pointer type
    /// has the same layout).
    pub fn c_type(self) -> &'static str {
        match self {
            FieldKind::Ptr => "void*",
            FieldKind::I32 => "int",
            FieldKind::U32 => "unsigned int",
            FieldKind::I64 => "long long",
            FieldKind::U64 => "unsigned long long",
            FieldKind::F32 => "float",
            FieldKind::F64 => "double",
        }
    }
}

/// The layout of a struct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructLayout {
    /// Byte offset of each field, in order.
    pub offsets: Vec<usize>,
    /// Total size including tail padding.
    pub size: usize,
    /// Struct alignment.
    pub align: usize,
}

fn round_up(x: usize, align: usize) -> usize {
    x.div_ceil(align) * align
}

/// Computes the layout of a struct with these fields (see the module docs).
pub fn layout(fields: &[FieldKind]) -> StructLayout {
    let mut end = 0;
    let mut align = 1;
    let mut offsets = Vec::with_capacity(fields.len());
    for f in fields {
        let off = round_up(end, f.align());
        offsets.push(off);
        end = off + f.size();
        align = align.max(f.align());
    }
    StructLayout { offsets, size: round_up(end, align), align }
}

/// Builder for the bytes of one by-value struct argument.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParamBlock {
    data: Vec<u8>,
    fields: Vec<FieldKind>,
    offsets: Vec<usize>,
}

impl ParamBlock {
    /// An empty struct.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, kind: FieldKind, bytes: &[u8]) -> &mut Self {
        let off = round_up(self.data.len(), kind.align());
        self.data.resize(off, 0);
        self.data.extend_from_slice(bytes);
        self.fields.push(kind);
        self.offsets.push(off);
        self
    }

    /// Appends a device pointer.
    pub fn push_ptr(&mut self, ptr: u64) -> &mut Self {
        self.push(FieldKind::Ptr, &ptr.to_ne_bytes())
    }

    /// Appends an `int`.
    pub fn push_i32(&mut self, v: i32) -> &mut Self {
        self.push(FieldKind::I32, &v.to_ne_bytes())
    }

    /// Appends an `unsigned int`.
    pub fn push_u32(&mut self, v: u32) -> &mut Self {
        self.push(FieldKind::U32, &v.to_ne_bytes())
    }

    /// Appends a `long long`.
    pub fn push_i64(&mut self, v: i64) -> &mut Self {
        self.push(FieldKind::I64, &v.to_ne_bytes())
    }

    /// Appends an `unsigned long long`.
    pub fn push_u64(&mut self, v: u64) -> &mut Self {
        self.push(FieldKind::U64, &v.to_ne_bytes())
    }

    /// Appends a `float`.
    pub fn push_f32(&mut self, v: f32) -> &mut Self {
        self.push(FieldKind::F32, &v.to_ne_bytes())
    }

    /// Appends a `double`.
    pub fn push_f64(&mut self, v: f64) -> &mut Self {
        self.push(FieldKind::F64, &v.to_ne_bytes())
    }

    /// Overwrites pointer field `field` (a plan's placeholder) with `ptr`.
    pub(crate) fn set_ptr(&mut self, field: usize, ptr: u64) -> crate::Result<()> {
        match (self.fields.get(field), self.offsets.get(field)) {
            (Some(FieldKind::Ptr), Some(&offset)) => {
                self.data[offset..offset + 8].copy_from_slice(&ptr.to_ne_bytes());
                Ok(())
            }
            _ => Err(crate::RuntimeError::InvalidInput(format!("field {field} of a parameter block is not a pointer"))),
        }
    }

    /// Field kinds pushed so far.
    pub fn fields(&self) -> &[FieldKind] {
        &self.fields
    }

    /// Offsets of the fields pushed so far.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Struct alignment (largest field alignment, 1 when empty).
    pub fn align(&self) -> usize {
        self.fields.iter().map(|f| f.align()).max().unwrap_or(1)
    }

    /// Struct size including tail padding.
    pub fn size(&self) -> usize {
        round_up(self.data.len(), self.align())
    }

    /// True when no field was pushed.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The bytes of the pushed fields, without tail padding.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The struct's bytes, tail padding included (zeros).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.data.clone();
        out.resize(self.size(), 0);
        out
    }

    /// The layout of the pushed fields; equal to [`layout`] of [`Self::fields`].
    pub fn layout(&self) -> StructLayout {
        StructLayout { offsets: self.offsets.clone(), size: self.size(), align: self.align() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptr_i32_i32_i64_f32() {
        let mut p = ParamBlock::new();
        p.push_ptr(0x1122_3344_5566_7788).push_i32(-1).push_i32(2).push_i64(3).push_f32(1.5);
        assert_eq!(p.offsets(), &[0, 8, 12, 16, 24]);
        assert_eq!(p.size(), 32);
        assert_eq!(p.align(), 8);
        let b = p.to_bytes();
        assert_eq!(b.len(), 32);
        assert_eq!(&b[0..8], &0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(&b[8..12], &(-1i32).to_ne_bytes());
        assert_eq!(&b[16..24], &3i64.to_ne_bytes());
        assert_eq!(&b[24..28], &1.5f32.to_ne_bytes());
        assert_eq!(&b[28..32], &[0, 0, 0, 0]);
        assert_eq!(p.layout(), layout(p.fields()));
    }

    #[test]
    fn padding_before_eight_byte_fields() {
        let l = layout(&[FieldKind::I32, FieldKind::Ptr, FieldKind::F32]);
        assert_eq!(l.offsets, vec![0, 8, 16]);
        assert_eq!(l.size, 24);
        let mut p = ParamBlock::new();
        p.push_i32(7).push_ptr(1).push_f32(0.0);
        assert_eq!(p.to_bytes()[4..8], [0, 0, 0, 0]);
        assert_eq!(p.layout(), l);
    }

    #[test]
    fn four_byte_only_structs_align_to_four() {
        let l = layout(&[FieldKind::I32, FieldKind::F32, FieldKind::U32]);
        assert_eq!((l.offsets, l.size, l.align), (vec![0, 4, 8], 12, 4));
        let empty = layout(&[]);
        assert_eq!((empty.size, empty.align), (0, 1));
        assert!(ParamBlock::new().is_empty());
    }
}
