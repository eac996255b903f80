//! `write_file`: creates or replaces a file inside the write scope.

use fabro_llm::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_arguments, Tool, ToolContext, ToolError};
use crate::scope::WorkTree;
use crate::truncate::{OutputLimit, TruncationMode};

/// The `write_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteFile;

#[derive(Deserialize)]
struct Arguments {
    file_path: String,
    content: String,
}

impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn description(&self) -> &'static str {
        "Write a file, replacing it if it exists. Parent directories are created."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path relative to the working directory."},
                "content": {"type": "string", "description": "The complete new file content."}
            },
            "required": ["file_path", "content"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(1_000, TruncationMode::Tail)
    }

    fn written_paths(&self, arguments: &Value, tree: &WorkTree) -> Vec<String> {
        path_argument(arguments, "file_path", tree)
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: Arguments = parse_arguments(arguments)?;
            let path = context
                .tree
                .resolve_write(&arguments.file_path)
                .map_err(ToolError::Failed)?;
            write_text(&path.absolute, &arguments.content).await?;
            Ok(format!(
                "Wrote {} bytes to {}",
                arguments.content.len(),
                path.relative
            ))
        })
    }
}

/// The tracked path of a string argument, relative to the tree, if it resolves inside.
pub(crate) fn path_argument(arguments: &Value, key: &str, tree: &WorkTree) -> Vec<String> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .and_then(|path| tree.resolve_read(path).ok())
        .map(|resolved| vec![resolved.relative])
        .unwrap_or_default()
}

/// Writes `content`, creating parent directories.
pub(crate) async fn write_text(path: &std::path::Path, content: &str) -> Result<(), ToolError> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(|error| {
            ToolError::Failed(format!("cannot create {}: {error}", parent.display()))
        })?;
    }
    tokio::fs::write(path, content)
        .await
        .map_err(|error| ToolError::Failed(format!("cannot write {}: {error}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn writes_with_parent_directories() {
        let (_dir, context) = context();
        let result = run(
            Arc::new(WriteFile),
            json!({"file_path": "a/b/c.txt", "content": "hello"}),
            &context,
        )
        .await;
        assert_eq!(result.output, "Wrote 5 bytes to a/b/c.txt");
        assert_eq!(
            fs_err::read_to_string(context.tree.root().join("a/b/c.txt")).unwrap(),
            "hello"
        );
        assert_eq!(
            WriteFile.written_paths(&json!({"file_path": "./a/b/c.txt"}), &context.tree),
            ["a/b/c.txt"]
        );
    }

    #[tokio::test]
    async fn outside_the_tree_is_rejected() {
        let (dir, context) = context();
        let result = run(
            Arc::new(WriteFile),
            json!({"file_path": "../escape.txt", "content": "x"}),
            &context,
        )
        .await;
        assert!(result.is_error);
        assert_eq!(
            result.output,
            "Tool error (write_file): write scope violation: ../escape.txt is outside the allowed scope"
        );
        assert!(!dir.path().parent().unwrap().join("escape.txt").exists());
    }

    #[tokio::test]
    async fn missing_content_and_long_errors_are_cut_at_the_tail() {
        let (_dir, context) = context();
        let result = run(Arc::new(WriteFile), json!({"file_path": "a"}), &context).await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: write_file"));
        let long = "d/".repeat(800);
        let result = run(
            Arc::new(WriteFile),
            json!({"file_path": format!("../{long}x"), "content": ""}),
            &context,
        )
        .await;
        assert!(result
            .model_output
            .starts_with("[WARNING: Tool output was truncated. First "));
        assert!(result
            .model_output
            .ends_with("is outside the allowed scope"));
    }
}
