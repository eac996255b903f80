//! Data-driven tests: every file in `tests/data/{ok,err}/` is checked, and its
//! diagnostics (one `line:column severity[rule] message` line each) are compared with a
//! snapshot named after the file. `ok/` files must have no errors, `err/` files must.

use std::path::{Path, PathBuf};

use fabro_language::{check, CheckOptions, LineIndex, ModelCatalog, SourceLoader, Variables};

struct DiskLoader;

impl SourceLoader for DiskLoader {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        // Like the CLI's loader: the diagnostic names the path, the error does not.
        #[expect(clippy::disallowed_methods, reason = "the diagnostic names the path")]
        std::fs::read_to_string(path)
    }

    fn home_dir(&self) -> Option<PathBuf> {
        None
    }
}

struct Catalog;

impl ModelCatalog for Catalog {
    fn is_known(&self, model: &str) -> bool {
        model.starts_with("claude-") || model.starts_with("gpt-")
    }
}

fn cases(kind: &str) -> Vec<PathBuf> {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(kind);
    let mut files: Vec<PathBuf> = fs_err::read_dir(&directory)
        .expect("tests/data exists")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "fabro")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no cases in {}", directory.display());
    files
}

fn render(path: &Path) -> (String, bool) {
    let text = fs_err::read_to_string(path).expect("case is readable");
    let variables = Variables::default();
    let options = CheckOptions {
        loader: &DiskLoader,
        variables: &variables,
        models: &Catalog,
    };
    let checked = check(path, &text, &options);
    let index = LineIndex::new(&text);
    let mut out = String::new();
    for diagnostic in &checked.diagnostics {
        let position = diagnostic.span.map_or_else(
            || "-".to_owned(),
            |span| {
                let (line, column) = index.position(&text, span.start);
                format!("{line}:{column}")
            },
        );
        out.push_str(&format!(
            "{position} {}[{}] {}\n",
            diagnostic.severity().as_str(),
            diagnostic.rule.id(),
            diagnostic.message
        ));
    }
    // Paths in messages are absolute here; keep snapshots independent of the checkout.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/");
    (out.replace(root, ""), checked.has_errors())
}

fn run(kind: &str, expect_errors: bool) {
    for path in cases(kind) {
        let name = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .expect("UTF-8 name");
        let (rendered, has_errors) = render(&path);
        assert_eq!(has_errors, expect_errors, "{name}:\n{rendered}");
        insta::assert_snapshot!(format!("{kind}_{name}"), rendered);
    }
}

#[test]
fn ok_cases() {
    run("ok", false);
}

#[test]
fn err_cases() {
    run("err", true);
}
