//! House-style checks that tools do not make (STYLE.md sections 9 and 10): every source
//! file opens with `//!` docs, and no test is parked with the `should_panic` or
//! `ignore` attributes.

use std::path::{Path, PathBuf};

use fabro_test_support::workspace_root;

fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs_err::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != "snapshots" && !name.to_string_lossy().starts_with('.') {
                rust_files(&path, files);
            }
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

fn workspace_sources() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = Vec::new();
    for top in ["crates", "bench", "fuzz"] {
        rust_files(&root.join(top), &mut files);
    }
    assert!(
        files.len() > 20,
        "found only {} Rust files under {}",
        files.len(),
        root.display()
    );
    files
}

#[test]
fn every_source_file_opens_with_module_docs() {
    let missing: Vec<_> = workspace_sources()
        .into_iter()
        .filter(|path| {
            let text = fs_err::read_to_string(path).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .collect();
    assert!(
        missing.is_empty(),
        "files without //! module docs: {missing:#?}"
    );
}

#[test]
fn no_parked_or_panic_expecting_tests() {
    let banned = [concat!("#[should", "_panic"), concat!("#[ig", "nore")];
    let offenders: Vec<_> = workspace_sources()
        .into_iter()
        .filter(|path| {
            let text = fs_err::read_to_string(path).unwrap_or_default();
            banned.iter().any(|pattern| text.contains(pattern))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "banned test attributes in {offenders:#?}"
    );
}

#[test]
fn readme_names_the_test_command_that_ci_runs() {
    let root = workspace_root();
    let readme = fs_err::read_to_string(root.join("README.md")).expect("README.md exists");
    let ci = fs_err::read_to_string(root.join(".ci/run")).expect(".ci/run exists");
    assert!(
        readme.contains("<!-- ci:test-command -->"),
        "README.md must mark its test command"
    );
    assert!(
        ci.contains("ci:test-command"),
        ".ci/run must run the README's command"
    );
}
