//! `glob`: files matching a glob pattern, newest first.

use std::time::SystemTime;

use fabro_llm::BoxFuture;
use globset::GlobBuilder;
use serde::Deserialize;
use serde_json::{json, Value};

use super::grep::{relative, walk_files};
use super::{parse_arguments, Tool, ToolContext, ToolError};
use crate::truncate::{OutputLimit, TruncationMode};

/// The `glob` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobTool;

#[derive(Deserialize)]
struct Arguments {
    pattern: String,
    path: Option<String>,
}

impl Tool for GlobTool {
    fn name(&self) -> &'static str {
        "glob"
    }

    fn description(&self) -> &'static str {
        "Find files whose path (relative to `path`) matches a glob such as **/*.rs; newest first."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1},
                "path": {"type": "string", "description": "Directory to search (default: working directory)."}
            },
            "required": ["pattern"],
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
            let matcher = GlobBuilder::new(&arguments.pattern)
                .literal_separator(true)
                .build()
                .map_err(|error| ToolError::InvalidArguments(format!("invalid pattern: {error}")))?
                .compile_matcher();
            let start = context
                .tree
                .resolve_read(arguments.path.as_deref().unwrap_or("."))
                .map_err(ToolError::Failed)?;
            let root = context.tree.root().to_path_buf();
            tokio::task::spawn_blocking(move || {
                let mut found: Vec<(SystemTime, String)> = walk_files(&start.absolute)
                    .into_iter()
                    .filter(|file| matcher.is_match(relative(&start.absolute, file)))
                    .map(|file| {
                        let modified = std::fs::metadata(&file)
                            .and_then(|metadata| metadata.modified())
                            .unwrap_or(SystemTime::UNIX_EPOCH);
                        (modified, relative(&root, &file))
                    })
                    .collect();
                found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
                if found.is_empty() {
                    "No files found".to_owned()
                } else {
                    found
                        .into_iter()
                        .map(|(_, path)| path)
                        .collect::<Vec<_>>()
                        .join("\n")
                }
            })
            .await
            .map_err(|error| ToolError::Failed(format!("glob failed: {error}")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn newest_first() {
        let (_dir, context) = context();
        let root = context.tree.root();
        fs_err::create_dir_all(root.join("src/deep")).unwrap();
        for (name, age) in [
            ("src/old.rs", 100),
            ("src/deep/new.rs", 0),
            ("README.md", 50),
        ] {
            let file = fs_err::File::create(root.join(name)).unwrap();
            file.set_modified(SystemTime::now() - Duration::from_secs(age))
                .unwrap();
        }
        let result = run(Arc::new(GlobTool), json!({"pattern": "**/*.rs"}), &context).await;
        assert_eq!(result.output, "src/deep/new.rs\nsrc/old.rs");
        let result = run(
            Arc::new(GlobTool),
            json!({"pattern": "*.rs", "path": "src"}),
            &context,
        )
        .await;
        assert_eq!(result.output, "src/old.rs");
        let result = run(Arc::new(GlobTool), json!({"pattern": "*.py"}), &context).await;
        assert_eq!(result.output, "No files found");
    }

    #[tokio::test]
    async fn bad_arguments_and_truncation() {
        let (_dir, context) = context();
        let result = run(
            Arc::new(GlobTool),
            json!({"pattern": "a[", "path": "."}),
            &context,
        )
        .await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: glob: invalid pattern"));
        let result = run(Arc::new(GlobTool), json!({}), &context).await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: glob"));
        for index in 0..600 {
            fs_err::write(context.tree.root().join(format!("f{index:03}.txt")), "").unwrap();
        }
        let result = run(Arc::new(GlobTool), json!({"pattern": "*.txt"}), &context).await;
        assert_eq!(result.output.lines().count(), 600);
        assert!(result.model_output.contains("[... 100 lines omitted ...]"));
    }
}
