//! The single integration-test binary of codac: file-driven snapshot cases,
//! the examples, CUDA code generation (snapshots and NVRTC compiles),
//! interpreter checks against independent formulas, robustness
//! against hostile input, tile configurations asked for by name, and tidy
//! checks on the source tree.

mod cases;
mod cuda;
mod examples;
mod grad;
mod heads;
mod interp;
mod pair_stores;
mod params;
mod rewrites;
mod robustness;
mod saving;
mod tidy;
mod tiles;
mod unfused;
