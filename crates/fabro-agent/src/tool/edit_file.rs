//! `edit_file`: exact string replacement in one file.

use fabro_llm::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::write_file::{path_argument, write_text};
use super::{parse_arguments, Tool, ToolContext, ToolError};
use crate::scope::WorkTree;
use crate::truncate::{OutputLimit, TruncationMode};

/// The `edit_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct EditFile;

#[derive(Deserialize)]
struct Arguments {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }

    fn description(&self) -> &'static str {
        "Replace old_string with new_string in a file. old_string must occur exactly once unless replace_all is true."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "old_string": {"type": "string", "minLength": 1},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean", "default": false}
            },
            "required": ["file_path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(10_000, TruncationMode::Tail)
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
            let text = tokio::fs::read_to_string(&path.absolute)
                .await
                .map_err(|error| {
                    ToolError::Failed(format!("cannot read {}: {error}", arguments.file_path))
                })?;
            let count = text.matches(&arguments.old_string).count();
            if count == 0 {
                return Err(ToolError::Failed(format!(
                    "old_string not found in {}",
                    path.relative
                )));
            }
            if count > 1 && !arguments.replace_all {
                return Err(ToolError::Failed(format!(
                    "old_string occurs {count} times in {}; give more context or set replace_all",
                    path.relative
                )));
            }
            let edited = if arguments.replace_all {
                text.replace(&arguments.old_string, &arguments.new_string)
            } else {
                text.replacen(&arguments.old_string, &arguments.new_string, 1)
            };
            write_text(&path.absolute, &edited).await?;
            Ok(format!(
                "Replaced {count} occurrence(s) in {}",
                path.relative
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn replaces_once_or_all() {
        let (_dir, context) = context();
        let file = context.tree.root().join("a.txt");
        fs_err::write(&file, "a b a").unwrap();
        let result = run(
            Arc::new(EditFile),
            json!({"file_path": "a.txt", "old_string": "b", "new_string": "c"}),
            &context,
        )
        .await;
        assert_eq!(result.output, "Replaced 1 occurrence(s) in a.txt");
        let result = run(
            Arc::new(EditFile),
            json!({"file_path": "a.txt", "old_string": "a", "new_string": "z"}),
            &context,
        )
        .await;
        assert!(result.is_error);
        assert!(result.output.contains("occurs 2 times"));
        let result = run(
            Arc::new(EditFile),
            json!({"file_path": "a.txt", "old_string": "a", "new_string": "z", "replace_all": true}),
            &context,
        )
        .await;
        assert!(!result.is_error);
        assert_eq!(fs_err::read_to_string(&file).unwrap(), "z c z");
    }

    #[tokio::test]
    async fn absent_string_and_bad_arguments_fail() {
        let (_dir, context) = context();
        fs_err::write(context.tree.root().join("a.txt"), "abc").unwrap();
        let result = run(
            Arc::new(EditFile),
            json!({"file_path": "a.txt", "old_string": "x", "new_string": "y"}),
            &context,
        )
        .await;
        assert_eq!(
            result.output,
            "Tool error (edit_file): old_string not found in a.txt"
        );
        let result = run(
            Arc::new(EditFile),
            json!({"file_path": "a.txt", "old_string": "", "new_string": "y"}),
            &context,
        )
        .await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: edit_file"));
        let result = run(
            Arc::new(EditFile),
            json!({"file_path": "../a.txt", "old_string": "a", "new_string": "y"}),
            &context,
        )
        .await;
        assert!(result.output.contains("write scope violation"));
    }

    #[test]
    fn output_is_cut_at_ten_thousand_characters_from_the_tail() {
        let limit = EditFile.limit();
        assert_eq!(limit, OutputLimit::new(10_000, TruncationMode::Tail));
        let cut = limit.apply(&"e".repeat(10_500));
        assert!(cut.starts_with(
            "[WARNING: Tool output was truncated. First 500 characters were removed."
        ));
    }
}
