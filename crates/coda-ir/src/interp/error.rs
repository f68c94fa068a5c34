//! Why an evaluation failed: every error names the tensor, value or
//! dimension concerned, and an error raised while evaluating a block is
//! wrapped in [`EvalError::At`], the source span of the expression, input or
//! output concerned (see [`EvalError::diagnostic`]).

use coda_diagnostics::Span;

/// An evaluation that could not be carried out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// A symbolic dimension the block needs has no binding.
    #[error("dimension `{name}` is not bound (give it a value, e.g. `{name}=128`)")]
    UnboundDim {
        /// The dimension.
        name: String,
    },
    /// A dimension expression evaluates to zero or a negative number.
    #[error("dimension `{dim}` evaluates to {value}{bindings}; dimensions must be positive")]
    NonPositiveDim {
        /// The expression.
        dim: String,
        /// Its value.
        value: i64,
        /// The bindings used, as ` (M = 0)`, or empty.
        bindings: String,
    },
    /// A binding contradicts a named constant of the block.
    #[error("dimension `{name}` is the constant {constant} in this block but was bound to {bound}")]
    ConflictingDim {
        /// The dimension.
        name: String,
        /// Its declared value.
        constant: i64,
        /// The value given.
        bound: i64,
    },
    /// Dimension arithmetic overflowed 64 bits.
    #[error("dimension `{dim}` overflows 64-bit integers")]
    DimOverflow {
        /// The expression.
        dim: String,
    },
    /// A param (or the previous content of a `+=` output) was not given.
    #[error("missing input `{name}`: expected {expected}")]
    MissingInput {
        /// The tensor.
        name: String,
        /// Its expected shape, with the bindings used.
        expected: String,
    },
    /// An input has the wrong shape or element count.
    #[error("input `{name}`: expected {expected}, got {got}")]
    InputShape {
        /// The tensor.
        name: String,
        /// The expected shape, with the bindings used.
        expected: String,
        /// What was given.
        got: String,
    },
    /// An integer tensor holds a value that is not an `i32`.
    #[error("{tensor}: element {index} is {value}, which is not an i32 integer")]
    NotInteger {
        /// The tensor, as `` input `x` ``.
        tensor: String,
        /// Row-major position of the element.
        index: usize,
        /// The element.
        value: f64,
    },
    /// [`HostTensor::new`](super::HostTensor::new) got data of the wrong length.
    #[error("tensor data holds {len} elements but the shape [{rows}, {cols}] needs {expected}")]
    DataLength {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// `rows * cols`.
        expected: u128,
        /// The data's length.
        len: usize,
    },
    /// A value would be too large to hold.
    #[error("{what} would have {elements} elements, more than the limit of 2^31")]
    TooLarge {
        /// The value or shape.
        what: String,
        /// Its element count.
        elements: u128,
    },
    /// The values live at once would need too much memory.
    #[error("evaluating {what} would need {needed} bytes live, more than the limit of {limit}")]
    OutOfMemory {
        /// The value being computed.
        what: String,
        /// Bytes that would be live.
        needed: u64,
        /// The limit.
        limit: u64,
    },
    /// A column slice reaches outside its operand.
    #[error("{what}: slice columns {start} + k*{step} for k < {len} leave 0..{cols}")]
    SliceOutOfRange {
        /// The value.
        what: String,
        /// First column.
        start: i64,
        /// Number of columns.
        len: usize,
        /// Step.
        step: i64,
        /// Columns of the operand.
        cols: usize,
    },
    /// A rotary embedding is malformed or pairs a column with one that does not exist.
    #[error("{what}: {message}")]
    BadRope {
        /// The value.
        what: String,
        /// What is wrong.
        message: String,
    },
    /// An error located in the source: the expression that defines the value
    /// being computed, the declaration of the input being read, or the
    /// assignment of the output being stored.
    #[error("{error}")]
    At {
        /// Where in the `.coda` source.
        span: Span,
        /// The error itself.
        error: Box<EvalError>,
    },
    /// The block breaks an invariant the verifier should have caught.
    #[error("malformed block `{block}`: {message}")]
    Malformed {
        /// The block.
        block: String,
        /// What is wrong.
        message: String,
    },
}

impl EvalError {
    /// This error located at `span`, unless it already has a location.
    #[must_use]
    pub fn at(self, span: Span) -> EvalError {
        match self {
            located @ EvalError::At { .. } => located,
            error => EvalError::At { span, error: Box::new(error) },
        }
    }

    /// The error without its location.
    pub fn cause(&self) -> &EvalError {
        match self {
            EvalError::At { error, .. } => error.cause(),
            error => error,
        }
    }

    /// Where in the source the error arose, if known.
    pub fn span(&self) -> Option<Span> {
        match self {
            EvalError::At { span, .. } => Some(*span),
            _ => None,
        }
    }

    /// Whether the error is a bug in codac rather than in the program, its
    /// dims or its inputs.
    pub fn is_bug(&self) -> bool {
        matches!(self.cause(), EvalError::Malformed { .. })
    }
}
