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

/// The run record files and the directory of run directories (SPEC 11.1): only the store
/// module and the layout it is built on name them (issue 30).
const RUN_RECORD_NAMES: [&str; 5] = [
    "events.jsonl",
    "checkpoint.json",
    "manifest.json",
    "journal.jsonl",
    "scratch",
];

/// The sources allowed to name the run records: the store module, and the run
/// directory layout (`run_dir.rs`) that the store and the layers below it (the run
/// index, the checkpoint log) share; under `store/` it would close import circles.
const RUN_RECORD_OWNERS: [&str; 3] = [
    "crates/fabro-engine/src/store.rs",
    "crates/fabro-engine/src/store/",
    "crates/fabro-engine/src/run_dir.rs",
];

/// Whether the string `value` is a path naming a run record: one of its `/`-separated
/// parts is a record name (`"events.jsonl"`, `"scratch/x"`; not prose such as
/// `"cannot read events.jsonl"`).
fn names_run_record(value: &str) -> bool {
    value
        .split('/')
        .any(|part| RUN_RECORD_NAMES.contains(&part))
}

fn is_test_only(attributes: &[syn::Attribute]) -> bool {
    attributes.iter().any(|attribute| {
        let path = attribute.path();
        if path.is_ident("test") {
            return true;
        }
        path.is_ident("cfg")
            && attribute
                .meta
                .require_list()
                .is_ok_and(|list| list.tokens.to_string() == "test")
    })
}

/// The string literals of non-test code that name a run record, with their lines; the
/// literals inside macro calls (`format!`, `json!`) included.
#[derive(Default)]
struct RecordLiterals {
    found: Vec<(usize, String)>,
}

impl RecordLiterals {
    fn check(&mut self, line: usize, value: &str) {
        if names_run_record(value) {
            self.found.push((line, value.to_owned()));
        }
    }

    fn check_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        for token in tokens {
            match token {
                proc_macro2::TokenTree::Group(group) => self.check_tokens(group.stream()),
                proc_macro2::TokenTree::Literal(literal) => {
                    if let Ok(text) = syn::parse_str::<syn::LitStr>(&literal.to_string()) {
                        self.check(literal.span().start().line, &text.value());
                    }
                }
                _ => {}
            }
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for RecordLiterals {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if !is_test_only(&module.attrs) {
            syn::visit::visit_item_mod(self, module);
        }
    }

    fn visit_item_fn(&mut self, function: &'ast syn::ItemFn) {
        if !is_test_only(&function.attrs) {
            syn::visit::visit_item_fn(self, function);
        }
    }

    fn visit_impl_item_fn(&mut self, function: &'ast syn::ImplItemFn) {
        if !is_test_only(&function.attrs) {
            syn::visit::visit_impl_item_fn(self, function);
        }
    }

    /// Doc comments may name the records; they are attributes, and no attribute opens
    /// a file.
    fn visit_attribute(&mut self, _attribute: &'ast syn::Attribute) {}

    fn visit_lit_str(&mut self, literal: &'ast syn::LitStr) {
        self.check(literal.span().start().line, &literal.value());
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.check_tokens(mac.tokens.clone());
    }
}

/// Issue 30 acceptance 2: no non-test code outside the store module names the run
/// record files (`events.jsonl`, `checkpoint.json`, `manifest.json`, `journal.jsonl`) or
/// `scratch/`; the server and the CLI reach run records through the engine's store.
#[test]
fn only_the_store_names_the_run_records() {
    use syn::visit::Visit;

    let root = workspace_root();
    let mut crates: Vec<PathBuf> = fs_err::read_dir(root.join("crates"))
        .expect("crates/ lists")
        .flatten()
        .map(|entry| entry.path())
        .collect();
    // `bench/` is left out with the `tests/` directories: it drives the `fabro` binary
    // from outside and inspects what it stores, as black-box tests do.
    crates.sort();
    let mut checked = 0;
    let mut offenders = Vec::new();
    for crate_dir in crates {
        for path in non_test_sources(&crate_dir) {
            let relative = path
                .strip_prefix(&root)
                .expect("under the root")
                .to_string_lossy()
                .into_owned();
            if relative.split('/').any(|part| part == "tests")
                || RUN_RECORD_OWNERS
                    .iter()
                    .any(|owner| relative.starts_with(owner))
            {
                continue;
            }
            let text = fs_err::read_to_string(&path).expect("sources are readable");
            let file = syn::parse_file(&text)
                .unwrap_or_else(|error| panic!("{relative} does not parse: {error}"));
            let mut literals = RecordLiterals::default();
            literals.visit_file(&file);
            checked += 1;
            offenders.extend(
                literals
                    .found
                    .into_iter()
                    .map(|(line, value)| format!("{relative}:{line}: {value:?}")),
            );
        }
    }
    assert!(checked > 100, "checked only {checked} sources");
    assert!(
        offenders.is_empty(),
        "run record names outside the store module (use the engine's record name constants \
         or the store):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn record_paths_are_told_from_prose() {
    assert!(names_run_record("events.jsonl"));
    assert!(names_run_record("scratch"));
    assert!(names_run_record("/srv/scratch/R1/manifest.json"));
    assert!(!names_run_record("cannot repair checkpoint.json"));
    assert!(!names_run_record("scratchpad"));
    assert!(!names_run_record("{}:x.json"));
}
