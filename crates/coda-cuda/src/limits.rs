//! Sizes the generated kernels can index: every constant in a dimension
//! (a whole constant dim, or a coefficient of a symbolic one) must be below
//! 2³¹, because kernels compute indices, loop bounds and launch parameters
//! with 32-bit integers. A larger one would compile to kernels that loop
//! forever or index the wrong elements, so it is refused here, with the
//! location of the first value that has it (`E0601`).

use crate::error::CodegenError;
use coda_diagnostics::{Diagnostic, SourceFile};
use coda_ir::{Block, Dim, Inst, RopeSpec};

/// The first integer the kernels cannot hold: 2³¹.
pub const MAX_DIM: i64 = 1 << 31;

/// Checks every dimension `block` uses against [`MAX_DIM`].
pub fn check_dims(block: &Block, source: &SourceFile) -> Result<(), CodegenError> {
    for (v, inst) in block.insts.iter() {
        let ty = block.ty(v);
        let mut dims: Vec<(&Dim, &str)> = vec![(&ty.shape.rows, "rows"), (&ty.shape.cols, "columns")];
        let mut constants: Vec<(i64, &str)> = Vec::new();
        let rope = |spec: &RopeSpec| (spec.head_dim, "a rotary head dimension");
        match inst {
            Inst::DimValue(d) => dims.push((d, "a dimension's value")),
            Inst::SliceCols { start, len, step, .. } => {
                dims.push((start, "a slice start"));
                dims.push((len, "a slice length"));
                constants.push((*step, "a slice step"));
            }
            Inst::ScatterCols { cols, .. } => dims.push((cols, "a scatter width")),
            Inst::RopeTable { spec, cols, .. } => {
                dims.extend([(&spec.start, "a rotary range start"), (&spec.end, "a rotary range end")]);
                dims.push((cols, "a rotary table width"));
                constants.push(rope(spec));
            }
            Inst::RopePartner { spec, .. } => {
                dims.extend([(&spec.start, "a rotary range start"), (&spec.end, "a rotary range end")]);
                constants.push(rope(spec));
            }
            _ => {}
        }
        let too_big = dims
            .iter()
            .flat_map(|(d, what)| d.monomials().map(move |(_, c)| (c, *what)))
            .chain(constants)
            .find(|(c, _)| c.unsigned_abs() >= MAX_DIM as u64);
        if let Some((value, what)) = too_big {
            let span = block.insts.span(v);
            let diagnostic = Diagnostic::error("E0601", "a dimension too large for the generated kernels")
                .with_primary(span, format!("{what}: {value}, 2^31 or more"))
                .with_help(format!(
                    "the kernels index with 32-bit integers, so every dimension (and every constant in one) must be \
                     below 2^31 = {MAX_DIM}; split the tensor into parts below that"
                ));
            return Err(CodegenError::Limit {
                block: block.name.clone(),
                location: source.location(span),
                diagnostic: Box::new(diagnostic),
            });
        }
    }
    Ok(())
}
