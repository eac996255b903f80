//! `list_dir`: a directory tree to a given depth (gemini profile).

use std::path::Path;

use fabro_llm::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_arguments, Tool, ToolContext, ToolError};
use crate::truncate::{OutputLimit, TruncationMode};

/// The `list_dir` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListDir;

#[derive(Deserialize)]
struct Arguments {
    path: String,
    depth: Option<usize>,
}

impl Tool for ListDir {
    fn name(&self) -> &'static str {
        "list_dir"
    }

    fn description(&self) -> &'static str {
        "List a directory; directories end with `/`, nested entries are indented. depth defaults to 1."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "depth": {"type": "integer", "minimum": 1, "maximum": 20, "default": 1}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(20_000, TruncationMode::Tail).with_lines(500)
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: Arguments = parse_arguments(arguments)?;
            let start = context
                .tree
                .resolve_read(&arguments.path)
                .map_err(ToolError::Failed)?;
            let depth = arguments.depth.unwrap_or(1);
            tokio::task::spawn_blocking(move || {
                let mut lines = Vec::new();
                list(&start.absolute, depth, 0, &mut lines).map_err(|error| {
                    ToolError::Failed(format!("cannot list {}: {error}", start.relative))
                })?;
                Ok(if lines.is_empty() {
                    "(empty directory)".to_owned()
                } else {
                    lines.join("\n")
                })
            })
            .await
            .map_err(|error| ToolError::Failed(format!("list_dir failed: {error}")))?
        })
    }
}

fn list(
    directory: &Path,
    depth: usize,
    level: usize,
    lines: &mut Vec<String>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(directory)?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == ".git" {
            continue;
        }
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        let indent = "  ".repeat(level);
        if is_dir {
            lines.push(format!("{indent}{name}/"));
            if level + 1 < depth {
                list(&entry.path(), depth, level + 1, lines)?;
            }
        } else {
            lines.push(format!("{indent}{name}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn lists_to_depth() {
        let (_dir, context) = context();
        let root = context.tree.root();
        fs_err::create_dir_all(root.join("src/inner")).unwrap();
        fs_err::write(root.join("src/lib.rs"), "").unwrap();
        fs_err::write(root.join("a.txt"), "").unwrap();
        let result = run(Arc::new(ListDir), json!({"path": "."}), &context).await;
        assert_eq!(result.output, "a.txt\nsrc/");
        let result = run(
            Arc::new(ListDir),
            json!({"path": ".", "depth": 2}),
            &context,
        )
        .await;
        assert_eq!(result.output, "a.txt\nsrc/\n  inner/\n  lib.rs");
    }

    #[tokio::test]
    async fn bad_arguments_and_truncation() {
        let (_dir, context) = context();
        let result = run(Arc::new(ListDir), json!({"depth": 2}), &context).await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: list_dir"));
        let result = run(Arc::new(ListDir), json!({"path": "missing"}), &context).await;
        assert!(result
            .output
            .starts_with("Tool error (list_dir): cannot list missing"));
        for index in 0..510 {
            fs_err::write(context.tree.root().join(format!("f{index:03}")), "").unwrap();
        }
        let result = run(Arc::new(ListDir), json!({"path": "."}), &context).await;
        assert!(result.model_output.contains("[... 10 lines omitted ...]"));
    }
}
