//! `grep`: regex search over the files of the working tree (respecting `.gitignore`).

use std::path::{Path, PathBuf};

use fabro_llm::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use regex::RegexBuilder;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_arguments, Tool, ToolContext, ToolError};
use crate::truncate::{OutputLimit, TruncationMode};

/// The `grep` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Grep;

#[derive(Deserialize)]
struct Arguments {
    pattern: String,
    path: Option<String>,
    glob_filter: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    max_results: Option<usize>,
}

impl Tool for Grep {
    fn name(&self) -> &'static str {
        "grep"
    }

    fn description(&self) -> &'static str {
        "Search file contents with a regular expression. Returns `path:line:text` for each match."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1},
                "path": {"type": "string", "description": "Directory or file to search (default: working directory)."},
                "glob_filter": {"type": "string", "description": "Only files whose path matches this glob, e.g. *.rs"},
                "case_insensitive": {"type": "boolean", "default": false},
                "max_results": {"type": "integer", "minimum": 1, "default": 100}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(20_000, TruncationMode::Tail).with_lines(200)
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: Arguments = parse_arguments(arguments)?;
            let regex = RegexBuilder::new(&arguments.pattern)
                .case_insensitive(arguments.case_insensitive)
                .build()
                .map_err(|error| {
                    ToolError::InvalidArguments(format!("invalid pattern: {error}"))
                })?;
            let filter = arguments
                .glob_filter
                .as_deref()
                .map(|glob| {
                    GlobBuilder::new(glob)
                        .literal_separator(true)
                        .build()
                        .map(|glob| glob.compile_matcher())
                        .map_err(|error| {
                            ToolError::InvalidArguments(format!("invalid glob_filter: {error}"))
                        })
                })
                .transpose()?;
            let start = context
                .tree
                .resolve_read(arguments.path.as_deref().unwrap_or("."))
                .map_err(ToolError::Failed)?;
            let root = context.tree.root().to_path_buf();
            let max = arguments.max_results.unwrap_or(100);
            tokio::task::spawn_blocking(move || {
                search(&root, &start.absolute, &regex, filter.as_ref(), max)
            })
            .await
            .map_err(|error| ToolError::Failed(format!("search failed: {error}")))
        })
    }
}

/// Files under `start` (gitignore respected, `.git` skipped), sorted by path.
pub(crate) fn walk_files(start: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ignore::WalkBuilder::new(start)
        .hidden(false)
        .require_git(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .sort_by_file_name(|a, b| a.cmp(b))
        .build()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|kind| kind.is_file()))
        .map(ignore::DirEntry::into_path)
        .collect();
    files.sort();
    files
}

/// `path` relative to `root`, `/`-separated.
pub(crate) fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|component| component.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

fn search(
    root: &Path,
    start: &Path,
    regex: &regex::Regex,
    filter: Option<&GlobMatcher>,
    max: usize,
) -> String {
    let mut matches = Vec::new();
    'files: for file in walk_files(start) {
        let relative = relative(root, &file);
        if let Some(filter) = filter {
            let name = file.file_name().map(Path::new).unwrap_or(&file);
            if !filter.is_match(&relative) && !filter.is_match(name) {
                continue;
            }
        }
        let Ok(bytes) = fs_err::read(&file) else {
            continue;
        };
        if bytes.contains(&0) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (index, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                matches.push(format!("{relative}:{}:{line}", index + 1));
                if matches.len() >= max {
                    break 'files;
                }
            }
        }
    }
    if matches.is_empty() {
        "No matches found".to_owned()
    } else {
        matches.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;

    fn fixture(root: &Path) {
        fs_err::create_dir_all(root.join("src")).unwrap();
        fs_err::write(root.join("src/a.rs"), "fn main() {}\nlet Main = 1;\n").unwrap();
        fs_err::write(root.join("notes.md"), "main idea\n").unwrap();
    }

    #[tokio::test]
    async fn finds_matches_with_filters() {
        let (_dir, context) = context();
        fixture(context.tree.root());
        let result = run(Arc::new(Grep), json!({"pattern": "main"}), &context).await;
        assert_eq!(
            result.output,
            "notes.md:1:main idea\nsrc/a.rs:1:fn main() {}"
        );
        let result = run(
            Arc::new(Grep),
            json!({"pattern": "main", "glob_filter": "*.rs", "case_insensitive": true}),
            &context,
        )
        .await;
        assert_eq!(
            result.output,
            "src/a.rs:1:fn main() {}\nsrc/a.rs:2:let Main = 1;"
        );
        let result = run(
            Arc::new(Grep),
            json!({"pattern": "main", "max_results": 1}),
            &context,
        )
        .await;
        assert_eq!(result.output, "notes.md:1:main idea");
        let result = run(Arc::new(Grep), json!({"pattern": "zzz"}), &context).await;
        assert_eq!(result.output, "No matches found");
    }

    #[tokio::test]
    async fn bad_arguments_are_errors() {
        let (_dir, context) = context();
        let result = run(Arc::new(Grep), json!({"pattern": "("}), &context).await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: grep: invalid pattern"));
        let result = run(
            Arc::new(Grep),
            json!({"pattern": "x", "path": "../.."}),
            &context,
        )
        .await;
        assert!(result.is_error);
    }

    #[tokio::test]
    async fn many_matches_are_cut_to_200_lines() {
        let (_dir, context) = context();
        fs_err::write(context.tree.root().join("m.txt"), "hit\n".repeat(500)).unwrap();
        let result = run(
            Arc::new(Grep),
            json!({"pattern": "hit", "max_results": 500}),
            &context,
        )
        .await;
        assert_eq!(result.output.lines().count(), 500);
        assert!(result.model_output.contains("[... 300 lines omitted ...]"));
    }
}
