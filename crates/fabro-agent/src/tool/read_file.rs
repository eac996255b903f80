//! `read_file`: numbered lines of a file inside the working tree.

use fabro_llm::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_arguments, Tool, ToolContext, ToolError};
use crate::truncate::{OutputLimit, TruncationMode};

/// Lines returned when the call gives no `limit`.
const DEFAULT_LINES: usize = 2000;

/// The `read_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFile;

#[derive(Deserialize)]
struct Arguments {
    file_path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn description(&self) -> &'static str {
        "Read a text file. Lines are returned as `{n} | {text}`. Use offset (1-based line) and limit (lines, default 2000) for large files."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path relative to the working directory, or absolute inside it."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based."},
                "limit": {"type": "integer", "minimum": 1, "description": "Maximum lines to read (default 2000)."}
            },
            "required": ["file_path"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(50_000, TruncationMode::HeadTail)
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
                .resolve_read(&arguments.file_path)
                .map_err(ToolError::Failed)?;
            let bytes = tokio::fs::read(&path.absolute).await.map_err(|error| {
                ToolError::Failed(format!("cannot read {}: {error}", arguments.file_path))
            })?;
            let text = String::from_utf8_lossy(&bytes);
            Ok(number_lines(
                &text,
                arguments.offset.unwrap_or(1),
                arguments.limit.unwrap_or(DEFAULT_LINES),
            ))
        })
    }
}

/// Lines `offset..offset+limit` as `{n} | {text}`.
pub(crate) fn number_lines(text: &str, offset: usize, limit: usize) -> String {
    let start = offset.max(1);
    text.lines()
        .enumerate()
        .skip(start - 1)
        .take(limit)
        .map(|(index, line)| format!("{} | {line}", index + 1))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn numbers_lines_with_offset_and_limit() {
        let (_dir, context) = context();
        fs_err::write(context.tree.root().join("a.txt"), "one\ntwo\nthree\nfour\n").unwrap();
        let result = run(Arc::new(ReadFile), json!({"file_path": "a.txt"}), &context).await;
        assert_eq!(result.output, "1 | one\n2 | two\n3 | three\n4 | four");
        let result = run(
            Arc::new(ReadFile),
            json!({"file_path": "a.txt", "offset": 2, "limit": 2}),
            &context,
        )
        .await;
        assert_eq!(result.output, "2 | two\n3 | three");
    }

    #[tokio::test]
    async fn bad_arguments_and_missing_files_are_errors() {
        let (_dir, context) = context();
        let result = run(Arc::new(ReadFile), json!({"offset": 0}), &context).await;
        assert!(result.is_error);
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: read_file"));
        let result = run(Arc::new(ReadFile), json!({"file_path": "nope"}), &context).await;
        assert!(result
            .output
            .starts_with("Tool error (read_file): cannot read nope"));
        let result = run(Arc::new(ReadFile), json!({"file_path": "../x"}), &context).await;
        assert_eq!(
            result.output,
            "Tool error (read_file): path ../x is outside the working directory"
        );
    }

    #[tokio::test]
    async fn long_output_is_cut_head_and_tail() {
        let (_dir, context) = context();
        let line = "x".repeat(1000);
        let text = vec![line; 100].join("\n");
        fs_err::write(context.tree.root().join("big.txt"), text).unwrap();
        let result = run(
            Arc::new(ReadFile),
            json!({"file_path": "big.txt"}),
            &context,
        )
        .await;
        assert!(result.output.chars().count() > 100_000);
        assert!(result
            .model_output
            .contains("characters were removed from the middle"));
        assert!(result.model_output.starts_with("1 | xxx"));
        assert!(result.model_output.ends_with("xxx"));
    }
}
