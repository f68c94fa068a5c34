//! Every `tests/cases/**/*.coda` file, run to its stage and snapshotted.

#[test]
fn case_files() {
    insta::glob!("../cases", "**/*.coda", |path: &std::path::Path| {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        match coda_tests::run_case(path, &text) {
            Ok(snapshot) => insta::assert_snapshot!(snapshot),
            Err(message) => panic!("{}: {message}", path.display()),
        }
    });
}
