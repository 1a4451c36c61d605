//! The repository's own documentation passes the checks: every link in `README.md` and
//! `docs/**/*.md` resolves inside the repository, every anchor names a heading, and the book's
//! `docs/SUMMARY.md` lists every page.

use std::path::Path;

#[test]
fn every_link_of_the_readme_and_docs_resolves_inside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let files = quorate_docs::markdown_files(&root).unwrap();
    assert!(
        files.iter().any(|f| f == Path::new("README.md")) && files.len() > 10,
        "expected README.md and the docs/ tree under {}, found {files:?}",
        root.display()
    );
    let problems = quorate_docs::check_repository(&root).unwrap();
    let report: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        report.is_empty(),
        "{} problem(s):\n{}",
        report.len(),
        report.join("\n")
    );
}
