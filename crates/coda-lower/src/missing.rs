//! Functions that other array languages have and `.coda` does not, with
//! what to write instead: a user who copies a model's math from PyTorch
//! or NumPy gets a way forward, not a spelling suggestion for an unrelated
//! builtin (`pow` is not a misspelling of `row`).
//!
//! Every replacement named here is checked by `docs/language.md`'s
//! examples and the `unknown_functions` case file.

/// What to write instead of `name`, when the language has a way.
pub(crate) fn instead_of(name: &str) -> Option<&'static str> {
    Some(match name {
        "power" | "float_power" => {
            "write `pow(x, p)` for a number `p`; for a tensor exponent `e` and a positive `x`, `exp(e * log(x))`"
        }
        "clip" | "clamp_min" | "clamp_max" => "write `clamp(x, min=lo, max=hi)`; either bound may be left out",
        "argmax" | "argsort" | "sort" => {
            "`topk(x, k)` and `topk_indices(x, k)` give the k largest values of each row and their columns (`topk_indices(x, 1)` is the argmax); `max(x, axis=-1)` is the largest value"
        }
        "erf" => {
            "there is no `erf`: `erf(x) = 2 ndtr(x √2) - 1`, with `ndtr` the standard normal distribution function; `gelu(x)` is the exact GELU `x ndtr(x)`, and `gelu_tanh(x)` its tanh approximation"
        }
        "reshape" | "view" | "flatten" | "unsqueeze" | "squeeze" | "permute" => {
            "there is no reshape: every tensor has two axes; `x[:, a:b]` slices columns, `concat(a, b)` joins them, `.T` transposes and `v[:, None]` makes a vector a column"
        }
        "gather" | "index_select" => {
            "`embedding(ids, table)` picks one row of a table per id (an embedding lookup); `take(x, index)` picks one column per row"
        }
        "matmul" | "mm" | "linear" => "write the matrix product with `@`: `x @ w.T` for an `nn.Linear` weight `w`",
        "cat" | "concatenate" | "hstack" => "write `concat(a, b, …)`; it joins columns",
        "neg" => "write `-x`",
        _ => return None,
    })
}
