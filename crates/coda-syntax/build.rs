//! Generates the parser from `grammar/coda.lalrpop` at the workspace root.

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let grammar_dir = std::path::Path::new(&manifest).join("../../grammar");
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    if let Err(err) = lalrpop::Configuration::new()
        .set_in_dir(&grammar_dir)
        .set_out_dir(&out_dir)
        .emit_rerun_directives(true)
        .process()
    {
        panic!("lalrpop failed on {}: {err}", grammar_dir.display());
    }
}
