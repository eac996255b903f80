//! `apply_patch`: the V4A patch format of OpenAI-family models (`*** Begin Patch` …
//! `*** End Patch` with Add, Delete and Update File sections, `*** Move to:` and `@@`
//! hunks). Every path is checked before anything is written, so a patch is applied
//! completely or not at all (up to I/O errors while writing).

use fabro_llm::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::write_file::write_text;
use super::{parse_arguments, Tool, ToolContext, ToolError};
use crate::scope::WorkTree;
use crate::truncate::{OutputLimit, TruncationMode};

/// The `apply_patch` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyPatch;

#[derive(Deserialize)]
struct Arguments {
    patch: String,
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Operation {
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

/// One `@@` hunk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Hunk {
    anchor: Option<String>,
    old: Vec<String>,
    new: Vec<String>,
    end_of_file: bool,
}

impl Tool for ApplyPatch {
    fn name(&self) -> &'static str {
        "apply_patch"
    }

    fn description(&self) -> &'static str {
        "Apply a V4A patch: `*** Begin Patch`, then `*** Add File: p` (lines prefixed +), `*** Delete File: p` or `*** Update File: p` (optional `*** Move to: q`, `@@ context` hunks with ' ', '-', '+' lines), then `*** End Patch`."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"patch": {"type": "string", "minLength": 1}},
            "required": ["patch"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(10_000, TruncationMode::Tail)
    }

    fn written_paths(&self, arguments: &Value, tree: &WorkTree) -> Vec<String> {
        let Some(Ok(operations)) = arguments.get("patch").and_then(Value::as_str).map(parse) else {
            return Vec::new();
        };
        let mut paths = Vec::new();
        for operation in &operations {
            let names: Vec<&str> = match operation {
                Operation::Add { path, .. } | Operation::Delete { path } => vec![path],
                Operation::Update { path, move_to, .. } => std::iter::once(path.as_str())
                    .chain(move_to.as_deref())
                    .collect(),
            };
            for name in names {
                if let Ok(resolved) = tree.resolve_read(name) {
                    if !paths.contains(&resolved.relative) {
                        paths.push(resolved.relative);
                    }
                }
            }
        }
        paths
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: Arguments = parse_arguments(arguments)?;
            let operations = parse(&arguments.patch).map_err(ToolError::InvalidArguments)?;
            apply(&operations, &context.tree).await
        })
    }
}

/// What applying one operation writes.
enum Change {
    Write {
        absolute: std::path::PathBuf,
        content: String,
    },
    Remove {
        absolute: std::path::PathBuf,
    },
}

async fn apply(operations: &[Operation], tree: &WorkTree) -> Result<String, ToolError> {
    // Check every path first, so nothing is half done.
    let mut rejected = None;
    for operation in operations {
        let targets: Vec<&str> = match operation {
            Operation::Add { path, .. } | Operation::Delete { path } => vec![path],
            Operation::Update { path, move_to, .. } => std::iter::once(path.as_str())
                .chain(move_to.as_deref())
                .collect(),
        };
        for target in targets {
            if let Err(error) = tree.resolve_write(target) {
                rejected.get_or_insert(error);
            }
        }
    }
    if let Some(error) = rejected {
        return Err(ToolError::Failed(error));
    }
    let mut changes = Vec::new();
    let mut summary = Vec::new();
    for operation in operations {
        match operation {
            Operation::Add { path, content } => {
                let resolved = tree.resolve_write(path).map_err(ToolError::Failed)?;
                summary.push(format!("A {}", resolved.relative));
                changes.push(Change::Write {
                    absolute: resolved.absolute,
                    content: content.clone(),
                });
            }
            Operation::Delete { path } => {
                let resolved = tree.resolve_write(path).map_err(ToolError::Failed)?;
                if !resolved.absolute.is_file() {
                    return Err(ToolError::Failed(format!(
                        "cannot delete {path}: no such file"
                    )));
                }
                summary.push(format!("D {}", resolved.relative));
                changes.push(Change::Remove {
                    absolute: resolved.absolute,
                });
            }
            Operation::Update {
                path,
                move_to,
                hunks,
            } => {
                let resolved = tree.resolve_write(path).map_err(ToolError::Failed)?;
                let original = tokio::fs::read_to_string(&resolved.absolute)
                    .await
                    .map_err(|error| ToolError::Failed(format!("cannot read {path}: {error}")))?;
                let content = apply_hunks(&original, hunks, path)?;
                match move_to {
                    Some(target) => {
                        let destination = tree.resolve_write(target).map_err(ToolError::Failed)?;
                        summary.push(format!(
                            "M {} -> {}",
                            resolved.relative, destination.relative
                        ));
                        changes.push(Change::Write {
                            absolute: destination.absolute,
                            content,
                        });
                        changes.push(Change::Remove {
                            absolute: resolved.absolute,
                        });
                    }
                    None => {
                        summary.push(format!("M {}", resolved.relative));
                        changes.push(Change::Write {
                            absolute: resolved.absolute,
                            content,
                        });
                    }
                }
            }
        }
    }
    for change in changes {
        match change {
            Change::Write { absolute, content } => write_text(&absolute, &content).await?,
            Change::Remove { absolute } => {
                tokio::fs::remove_file(&absolute).await.map_err(|error| {
                    ToolError::Failed(format!("cannot delete {}: {error}", absolute.display()))
                })?
            }
        }
    }
    Ok(format!("Applied patch:\n{}", summary.join("\n")))
}

/// Parses a V4A patch.
fn parse(patch: &str) -> Result<Vec<Operation>, String> {
    let lines: Vec<&str> = patch.trim().lines().collect();
    if lines.first().map(|line| line.trim()) != Some("*** Begin Patch") {
        return Err("patch must start with '*** Begin Patch'".to_owned());
    }
    if lines.last().map(|line| line.trim()) != Some("*** End Patch") {
        return Err("patch must end with '*** End Patch'".to_owned());
    }
    let body = &lines[1..lines.len() - 1];
    let mut operations = Vec::new();
    let mut index = 0;
    while index < body.len() {
        let line = body[index];
        index += 1;
        if let Some(path) = line.strip_prefix("*** Add File: ") {
            let mut content = Vec::new();
            while index < body.len() && !body[index].starts_with("*** ") {
                let added = body[index].strip_prefix('+').ok_or_else(|| {
                    format!(
                        "line {:?} of added file {path} must start with '+'",
                        body[index]
                    )
                })?;
                content.push(added);
                index += 1;
            }
            let mut content = content.join("\n");
            if !content.is_empty() {
                content.push('\n');
            }
            operations.push(Operation::Add {
                path: path.trim().to_owned(),
                content,
            });
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            operations.push(Operation::Delete {
                path: path.trim().to_owned(),
            });
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            let mut move_to = None;
            if let Some(target) = body
                .get(index)
                .and_then(|next| next.strip_prefix("*** Move to: "))
            {
                move_to = Some(target.trim().to_owned());
                index += 1;
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            while index < body.len() {
                let line = body[index];
                if line.starts_with("*** ") && line.trim() != "*** End of File" {
                    break;
                }
                index += 1;
                if let Some(anchor) = line.strip_prefix("@@") {
                    let anchor = anchor.trim();
                    hunks.push(Hunk {
                        anchor: (!anchor.is_empty()).then(|| anchor.to_owned()),
                        ..Hunk::default()
                    });
                    continue;
                }
                if hunks.is_empty() {
                    hunks.push(Hunk::default());
                }
                let hunk = hunks.last_mut().ok_or("internal: no hunk")?;
                if line.trim() == "*** End of File" {
                    hunk.end_of_file = true;
                } else if let Some(text) = line.strip_prefix('+') {
                    hunk.new.push(text.to_owned());
                } else if let Some(text) = line.strip_prefix('-') {
                    hunk.old.push(text.to_owned());
                } else {
                    let text = line.strip_prefix(' ').unwrap_or(line);
                    hunk.old.push(text.to_owned());
                    hunk.new.push(text.to_owned());
                }
            }
            if hunks
                .iter()
                .all(|hunk| hunk.old.is_empty() && hunk.new.is_empty())
                && move_to.is_none()
            {
                return Err(format!("update of {} has no changes", path.trim()));
            }
            operations.push(Operation::Update {
                path: path.trim().to_owned(),
                move_to,
                hunks,
            });
        } else if line.trim().is_empty() {
            continue;
        } else {
            return Err(format!("unexpected line in patch: {line:?}"));
        }
    }
    if operations.is_empty() {
        return Err("patch contains no file operations".to_owned());
    }
    Ok(operations)
}

/// Applies hunks in order; each is located after the previous one, matching lines
/// exactly, then ignoring trailing and finally surrounding whitespace.
fn apply_hunks(original: &str, hunks: &[Hunk], path: &str) -> Result<String, ToolError> {
    let had_newline = original.ends_with('\n');
    let mut lines: Vec<String> = original.lines().map(str::to_owned).collect();
    let mut cursor = 0;
    for hunk in hunks {
        if let Some(anchor) = &hunk.anchor {
            if let Some(found) = lines[cursor..]
                .iter()
                .position(|line| line.trim() == anchor.trim())
            {
                cursor += found + 1;
            }
        }
        let position = if hunk.old.is_empty() {
            if hunk.end_of_file {
                lines.len()
            } else {
                cursor
            }
        } else {
            locate(&lines, &hunk.old, cursor, hunk.end_of_file).ok_or_else(|| {
                ToolError::Failed(format!(
                    "could not find the lines to replace in {path}: {:?}",
                    hunk.old.join("\n")
                ))
            })?
        };
        lines.splice(
            position..position + hunk.old.len(),
            hunk.new.iter().cloned(),
        );
        cursor = position + hunk.new.len();
    }
    let mut text = lines.join("\n");
    if had_newline || original.is_empty() {
        text.push('\n');
    }
    Ok(text)
}

fn locate(lines: &[String], old: &[String], from: usize, end_of_file: bool) -> Option<usize> {
    let comparisons: [fn(&str, &str) -> bool; 3] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
    ];
    if old.len() > lines.len() {
        return None;
    }
    for equal in comparisons {
        let matches = |start: usize| old.iter().zip(&lines[start..]).all(|(a, b)| equal(a, b));
        if end_of_file {
            let start = lines.len() - old.len();
            if start >= from && matches(start) {
                return Some(start);
            }
        }
        if let Some(start) = (from..=lines.len() - old.len()).find(|&start| matches(start)) {
            return Some(start);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn adds_updates_moves_and_deletes() {
        let (_dir, context) = context();
        let root = context.tree.root();
        fs_err::write(
            root.join("main.py"),
            "def f():\n    return 1\n\nprint(f())\n",
        )
        .unwrap();
        fs_err::write(root.join("old.txt"), "bye\n").unwrap();
        fs_err::write(root.join("mv.txt"), "a\nb\n").unwrap();
        let patch = "*** Begin Patch\n*** Add File: new/hello.txt\n+hello\n+world\n*** Update File: main.py\n@@ def f():\n-    return 1\n+    return 2\n*** Delete File: old.txt\n*** Update File: mv.txt\n*** Move to: moved.txt\n@@\n a\n-b\n+c\n*** End Patch";
        let arguments = json!({"patch": patch});
        assert_eq!(
            ApplyPatch.written_paths(&arguments, &context.tree),
            ["new/hello.txt", "main.py", "old.txt", "mv.txt", "moved.txt"]
        );
        let result = run(Arc::new(ApplyPatch), arguments, &context).await;
        assert_eq!(
            result.output,
            "Applied patch:\nA new/hello.txt\nM main.py\nD old.txt\nM mv.txt -> moved.txt"
        );
        assert_eq!(
            fs_err::read_to_string(root.join("new/hello.txt")).unwrap(),
            "hello\nworld\n"
        );
        assert_eq!(
            fs_err::read_to_string(root.join("main.py")).unwrap(),
            "def f():\n    return 2\n\nprint(f())\n"
        );
        assert!(!root.join("old.txt").exists());
        assert!(!root.join("mv.txt").exists());
        assert_eq!(
            fs_err::read_to_string(root.join("moved.txt")).unwrap(),
            "a\nc\n"
        );
    }

    #[tokio::test]
    async fn malformed_patches_and_missing_context_are_errors() {
        let (_dir, context) = context();
        fs_err::write(context.tree.root().join("a.txt"), "x\n").unwrap();
        let result = run(Arc::new(ApplyPatch), json!({"patch": "garbage"}), &context).await;
        assert_eq!(
            result.output,
            "Invalid arguments for tool: apply_patch: patch must start with '*** Begin Patch'"
        );
        let patch = "*** Begin Patch\n*** Update File: a.txt\n-nothere\n+y\n*** End Patch";
        let result = run(Arc::new(ApplyPatch), json!({"patch": patch}), &context).await;
        assert!(result
            .output
            .starts_with("Tool error (apply_patch): could not find the lines to replace in a.txt"));
        assert_eq!(
            fs_err::read_to_string(context.tree.root().join("a.txt")).unwrap(),
            "x\n"
        );
    }

    #[tokio::test]
    async fn an_escaping_path_rejects_the_whole_patch() {
        let (_dir, context) = context();
        let patch = "*** Begin Patch\n*** Add File: ok.txt\n+ok\n*** Add File: ../../evil.txt\n+x\n*** End Patch";
        let result = run(Arc::new(ApplyPatch), json!({"patch": patch}), &context).await;
        assert_eq!(
            result.output,
            "Tool error (apply_patch): write scope violation: ../../evil.txt is outside the allowed scope"
        );
        assert!(!context.tree.root().join("ok.txt").exists());
    }

    #[test]
    fn whitespace_tolerant_matching() {
        let hunk = Hunk {
            anchor: None,
            old: vec!["a  ".to_owned()],
            new: vec!["b".to_owned()],
            end_of_file: false,
        };
        assert_eq!(apply_hunks("a\n", &[hunk], "f").unwrap(), "b\n");
    }
}
