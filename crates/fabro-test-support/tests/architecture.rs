//! `ARCHITECTURE.md` stays a short, true map (issue 15): under 12 KB, every backticked
//! path exists, and every backticked type, function or module it names is defined in the
//! workspace's sources.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fabro_test_support::workspace_root;

const MAX_BYTES: usize = 12 * 1024;

fn architecture() -> String {
    fs_err::read_to_string(workspace_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// The text between pairs of backticks (code spans), outside fenced blocks.
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            spans.push(inside.to_owned());
        }
    }
    spans
}

fn sources(directory: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs_err::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                sources(&path, files);
            }
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// Every name the sources define: types, traits, functions, modules, constants and
/// enum variants (a line that starts with the capitalised name).
fn defined_names() -> BTreeSet<String> {
    let root = workspace_root();
    let mut files = Vec::new();
    for top in ["crates", "bench"] {
        sources(&root.join(top), &mut files);
    }
    // `as` covers renaming re-exports; names a `use` brings in from other crates count too.
    let keywords = [
        "struct", "enum", "trait", "type", "fn", "mod", "const", "static", "as",
    ];
    let mut names = BTreeSet::new();
    for file in files {
        let text = fs_err::read_to_string(&file).unwrap_or_default();
        for line in text.lines() {
            let words: Vec<&str> = line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|word| !word.is_empty())
                .collect();
            for pair in words.windows(2) {
                if keywords.contains(&pair[0]) {
                    names.insert(pair[1].to_owned());
                }
            }
            let trimmed = line.trim_start();
            if trimmed.starts_with("use ") || trimmed.starts_with("pub use ") {
                names.extend(words.iter().map(|word| (*word).to_owned()));
            }
            if let Some(first) = words.first() {
                if trimmed.starts_with(first) && first.starts_with(|c: char| c.is_ascii_uppercase())
                {
                    names.insert((*first).to_owned());
                }
            }
        }
    }
    names
}

fn looks_like_path(span: &str) -> bool {
    !span.contains(['{', '$', ' ', '*', '[', '…'])
        && span.starts_with(|c: char| c.is_ascii_alphanumeric())
        && (span.contains('/') || span.ends_with(".rs") || span.ends_with(".md"))
}

/// A path exists from the root, or from a crate's `src` directory.
fn path_exists(span: &str) -> bool {
    let root = workspace_root();
    if root.join(span).exists() {
        return true;
    }
    let Ok(crates) = fs_err::read_dir(root.join("crates")) else {
        return false;
    };
    crates
        .flatten()
        .any(|krate| krate.path().join("src").join(span).exists())
}

/// `Type`, `Type::method`, `module::function`: the segments to look up. Crate names,
/// lowercase single words (plain words and values) and anything else are not checked.
fn names_in(span: &str) -> Option<Vec<&str>> {
    let identifier = |part: &str| {
        !part.is_empty()
            && part.starts_with(|c: char| c.is_ascii_alphabetic())
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = span.split("::").collect();
    if !parts.iter().all(|part| identifier(part)) {
        return None;
    }
    let plain_word = !parts[0].starts_with(|c: char| c.is_ascii_uppercase());
    let constant = parts[0]
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if parts.len() == 1 && (plain_word || constant) {
        return None;
    }
    Some(
        parts
            .into_iter()
            .filter(|part| !part.starts_with("fabro_"))
            .collect(),
    )
}

#[test]
fn the_architecture_document_is_short() {
    let size = architecture().len();
    assert!(size < MAX_BYTES, "ARCHITECTURE.md is {size} bytes");
}

#[test]
fn every_path_and_name_in_the_architecture_document_exists() {
    let names = defined_names();
    let mut missing = Vec::new();
    for span in code_spans(&architecture()) {
        if looks_like_path(&span) {
            if !path_exists(&span) {
                missing.push(format!("path {span}"));
            }
        } else if let Some(parts) = names_in(&span) {
            for part in parts {
                if !names.contains(part) {
                    missing.push(format!("{part} (in `{span}`)"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what does not exist: {missing:#?}"
    );
}

#[test]
fn the_checks_find_what_is_missing() {
    assert_eq!(
        code_spans("a `x` b `y::Z`\n```\n`not`\n```\n`w`"),
        ["x", "y::Z", "w"]
    );
    assert!(looks_like_path("crates/fabro-cli/src/main.rs"));
    assert!(!looks_like_path("refs/fabro/{id}"));
    assert!(!looks_like_path("//!"));
    assert!(!looks_like_path("../shared/SPEC.md"));
    assert!(path_exists("crates/fabro-cli/src/main.rs"));
    assert!(path_exists("handler/human.rs"));
    assert!(!path_exists("crates/nowhere.rs"));
    assert_eq!(
        names_in("PreparedRun::execute"),
        Some(vec!["PreparedRun", "execute"])
    );
    assert_eq!(names_in("fabro_language::check"), Some(vec!["check"]));
    assert_eq!(names_in("canceled"), None);
    assert_eq!(names_in("FABRO_HOME"), None);
    let names = defined_names();
    assert!(names.contains("Traversal") && names.contains("execute"));
    assert!(!names.contains("NoSuchTypeAnywhere"));
}
