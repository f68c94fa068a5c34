//! Readable, unique C++ identifiers for emitted code: source names where the
//! program has them (`x1`, `h`), `v12` for unnamed IR values, never a C++
//! keyword, a CUDA builtin or a name the emitted frame itself uses.

use std::collections::{BTreeSet, HashMap};

/// C++ keywords and names the generated code or CUDA headers use.
const RESERVED: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char16_t",
    "char32_t",
    "char8_t",
    "class",
    "co_await",
    "co_return",
    "co_yield",
    "compl",
    "concept",
    "const",
    "const_cast",
    "consteval",
    "constexpr",
    "constinit",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "requires",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    // CUDA and the emitted frame
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "coda",
    "cg",
    "p",
    "f",
    "t",
    "g",
    "e",
    "smem",
    "red",
    "i",
    "j",
    "m",
    "n",
    "k",
    "c",
    "tid",
    "row_ok",
    "Params",
    "Frag",
    "Tile",
    "acc",
    "min",
    "max",
    "abs",
    "exp",
    "log",
    "sqrt",
    "sin",
    "cos",
    "tanh",
    "pow",
    "floor",
    "rint",
];

/// Hands out unique identifiers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Namer {
    used: BTreeSet<String>,
    /// The suffix to try first for each base: every smaller one is taken
    /// (names are never given back), so a base handed out thousands of
    /// times costs one probe a name, not one per earlier name.
    next_suffix: HashMap<String, usize>,
}

impl Namer {
    /// A fresh identifier based on `base`.
    pub(crate) fn fresh(&mut self, base: &str) -> String {
        let mut clean: String = base.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        if clean.is_empty() || clean.starts_with(|c: char| c.is_ascii_digit()) {
            clean.insert(0, 'v');
        }
        // Identifiers with a double underscore are reserved in C++.
        while clean.contains("__") {
            clean = clean.replace("__", "_");
        }
        if clean.starts_with('_') {
            clean.insert(0, 'v');
        }
        let mut name = clean.clone();
        let mut i = self.next_suffix.get(&clean).copied().unwrap_or(1);
        while RESERVED.contains(&name.as_str()) || self.used.contains(&name) {
            name = format!("{clean}_{i}");
            i += 1;
        }
        self.next_suffix.insert(clean, i);
        self.used.insert(name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_not_keywords() {
        let mut n = Namer::default();
        assert_eq!(n.fresh("x1"), "x1");
        assert_eq!(n.fresh("x1"), "x1_1");
        assert_eq!(n.fresh("int"), "int_1");
        assert_eq!(n.fresh("tmp.h.bf16"), "tmp_h_bf16");
        assert_eq!(n.fresh("__x"), "v_x");
        assert_eq!(n.fresh("3d"), "v3d");
        assert_eq!(n.fresh("acc"), "acc_1");
    }
}
