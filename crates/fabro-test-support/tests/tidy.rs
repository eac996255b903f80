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

/// Issue 28 item 6: a test that cannot run says so through `fabro_test_support::skip`,
/// which fails it where `CI` is set; an `eprintln!` and an early `return` would pass in
/// CI without checking anything.
#[test]
fn tests_skip_only_through_the_helper_that_fails_in_ci() {
    let banned = [
        concat!("eprintln!(\"skip", "ped"),
        concat!("eprintln!(\"skip", "ping"),
        concat!("\"skip", "ped: "),
    ];
    let offenders: Vec<_> = workspace_sources()
        .into_iter()
        .filter(|path| {
            let text = fs_err::read_to_string(path).unwrap_or_default();
            banned.iter().any(|pattern| text.contains(pattern))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "tests that skip without failing in CI (use fabro_test_support::skip): {offenders:#?}"
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

/// The Rust files of `crate_dir/src` that are compiled outside tests: files named
/// `tests.rs`, and modules a parent declares under `#[cfg(test)]`, are left out.
fn non_test_sources(crate_dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&crate_dir.join("src"), &mut files);
    let mut test_only: Vec<PathBuf> = Vec::new();
    for path in &files {
        let text = fs_err::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            let declared = pair[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ");
            if pair[0] != "#[cfg(test)]" {
                continue;
            }
            let Some(name) = declared
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'))
            else {
                continue;
            };
            // `foo.rs` declares its children in `foo/`; `lib.rs` and `main.rs` beside them.
            let stem = path.file_stem().unwrap_or_default();
            let parent = path.parent().unwrap_or(Path::new(""));
            let base = if stem == "lib" || stem == "main" {
                parent.to_path_buf()
            } else {
                parent.join(stem)
            };
            test_only.push(base.join(format!("{name}.rs")));
            test_only.push(base.join(name));
        }
    }
    files
        .into_iter()
        .filter(|path| path.file_name().is_none_or(|name| name != "tests.rs"))
        .filter(|path| !test_only.iter().any(|excluded| path.starts_with(excluded)))
        .collect()
}

/// The text of a source file before its `#[cfg(test)] mod tests { … }` block, with
/// comment lines blanked (line numbers stay those of the file).
fn non_test_code(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests {") {
        Some(end) => &text[..end],
        None => text,
    };
    code.lines()
        .map(|line| {
            if line.trim_start().starts_with("//") {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Issue 15 acceptance 3: the engine reads no stdin and writes no stdout or stderr; the
/// terminal belongs to `fabro-cli` (the console interviewer lives there).
#[test]
fn the_engine_never_touches_the_terminal() {
    let engine = workspace_root().join("crates/fabro-engine");
    let banned = [
        concat!("std", "in()"),
        concat!("std", "out()"),
        concat!("std", "err()"),
        concat!("print", "!("),
        concat!("print", "ln!("),
        concat!("eprint", "!("),
        concat!("eprint", "ln!("),
    ];
    let sources = non_test_sources(&engine);
    assert!(
        sources.len() > 20,
        "found only {} engine sources",
        sources.len()
    );
    let mut offenders = Vec::new();
    for path in sources {
        let code = non_test_code(&fs_err::read_to_string(&path).unwrap_or_default());
        for (number, line) in code.lines().enumerate() {
            if banned.iter().any(|pattern| line.contains(pattern)) {
                offenders.push(format!(
                    "{}:{}: {}",
                    path.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "terminal I/O in fabro-engine:\n{}",
        offenders.join("\n")
    );
}
