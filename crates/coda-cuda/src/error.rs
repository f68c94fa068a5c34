//! Errors of code generation.

/// Why a block could not be compiled to kernels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// A construct the code generator does not support yet.
    #[error("{location}: in block `{block}`, {what} is not supported by the CUDA code generator: {reason}")]
    Unsupported {
        /// The block.
        block: String,
        /// `file:line:col` of the value.
        location: String,
        /// The value.
        what: String,
        /// Why.
        reason: String,
    },
    /// A size beyond what the generated kernels can handle (`limits`).
    #[error("{location}: {} ({})", diagnostic.title, diagnostic.code)]
    Limit {
        /// The block.
        block: String,
        /// `file:line:col` of the value.
        location: String,
        /// The located diagnostic, to render with the source.
        diagnostic: Box<coda_diagnostics::Diagnostic>,
    },
    /// `CodegenOptions::unfused` names a kernel that is no GEMM of the
    /// compiled blocks.
    #[error("no GEMM kernel named `{name}` to run unfused; the GEMMs are: {known}")]
    UnknownGemm {
        /// The name asked for.
        name: String,
        /// The GEMM kernels' names, comma-separated.
        known: String,
    },
    /// A bug in the code generator (an invariant did not hold).
    #[error("internal code generator error in block `{block}`: {message}")]
    Internal {
        /// The block.
        block: String,
        /// What went wrong.
        message: String,
    },
}
