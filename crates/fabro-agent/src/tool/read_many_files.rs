//! `read_many_files`: several files in one call (gemini profile).

use fabro_llm::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::read_file::number_lines;
use super::{parse_arguments, Tool, ToolContext, ToolError};
use crate::truncate::{OutputLimit, TruncationMode};

/// The `read_many_files` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadManyFiles;

#[derive(Deserialize)]
struct Arguments {
    paths: Vec<String>,
}

impl Tool for ReadManyFiles {
    fn name(&self) -> &'static str {
        "read_many_files"
    }

    fn description(&self) -> &'static str {
        "Read several text files; each is preceded by `==> path <==`."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1}
            },
            "required": ["paths"],
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
            let mut sections = Vec::new();
            for path in &arguments.paths {
                let body = match context.tree.resolve_read(path) {
                    Err(error) => format!("[error: {error}]"),
                    Ok(resolved) => match tokio::fs::read(&resolved.absolute).await {
                        Ok(bytes) => number_lines(&String::from_utf8_lossy(&bytes), 1, usize::MAX),
                        Err(error) => format!("[error: cannot read {path}: {error}]"),
                    },
                };
                sections.push(format!("==> {path} <==\n{body}"));
            }
            Ok(sections.join("\n\n"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn reads_each_file_and_reports_missing_ones() {
        let (_dir, context) = context();
        fs_err::write(context.tree.root().join("a"), "x\ny").unwrap();
        let result = run(
            Arc::new(ReadManyFiles),
            json!({"paths": ["a", "b"]}),
            &context,
        )
        .await;
        assert!(result
            .output
            .starts_with("==> a <==\n1 | x\n2 | y\n\n==> b <==\n[error: cannot read b"));
        let result = run(Arc::new(ReadManyFiles), json!({"paths": []}), &context).await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: read_many_files"));
    }

    #[tokio::test]
    async fn long_output_is_cut_head_and_tail() {
        let (_dir, context) = context();
        fs_err::write(context.tree.root().join("a"), "y".repeat(60_000)).unwrap();
        let result = run(Arc::new(ReadManyFiles), json!({"paths": ["a"]}), &context).await;
        assert!(result
            .model_output
            .contains("characters were removed from the middle"));
    }
}
