//! The file-reading part of TRANSFORM (SPEC 2.6): `@path` prompts and output schemas
//! are inlined, and child workflows of sub_workflow nodes are loaded and checked.
//!
//! The crate does no I/O itself: files are read through a [`SourceLoader`] supplied by
//! the caller, so the same code runs against the file system and against in-memory
//! fixtures in tests.

use std::path::{Path, PathBuf};

use crate::diagnostic::{Diagnostic, Rule, Severity};
use crate::model::{HandlerKind, OutputSchema, Workflow};
use crate::schema;
use crate::span::LineIndex;
use crate::syntax::Attribute;
use crate::{check_source, CheckOptions, Checked};

/// Reads the files a workflow refers to. Implemented over the file system by the engine
/// and CLI, and over a map in tests.
pub trait SourceLoader {
    /// Reads `path` as UTF-8 text.
    fn read(&self, path: &Path) -> std::io::Result<String>;
    /// The user's home directory, for `~/` references.
    fn home_dir(&self) -> Option<PathBuf>;
}

/// A child workflow loaded for a sub_workflow node.
#[derive(Debug)]
pub struct ChildWorkflow {
    /// The sub_workflow node that runs it.
    pub node_id: String,
    /// The path as written in the attribute.
    pub reference: String,
    /// The resolved path.
    pub path: PathBuf,
    /// Its checked content.
    pub checked: Box<Checked>,
}

/// Deepest chain of child workflows followed.
const MAX_CHILD_DEPTH: usize = 16;

/// Resolves `reference` relative to `base_dir` (`~/` means the home directory).
pub fn resolve_path(loader: &dyn SourceLoader, base_dir: &Path, reference: &str) -> PathBuf {
    if let Some(rest) = reference.strip_prefix("~/") {
        if let Some(home) = loader.home_dir() {
            return home.join(rest);
        }
    }
    base_dir.join(reference)
}

/// `@path` when `value` starts with `@` and the rest contains no whitespace.
fn file_reference(value: &str) -> Option<&str> {
    let rest = value.strip_prefix('@')?;
    (!rest.is_empty() && !rest.contains(char::is_whitespace)).then_some(rest)
}

/// Inlines `@path` prompts and schemas and loads child workflows.
pub(crate) fn resolve_references(
    workflow: &mut Workflow,
    path: &Path,
    options: &CheckOptions<'_>,
    stack: &mut Vec<PathBuf>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<ChildWorkflow> {
    let base_dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let loader = options.loader;
    for node in workflow.nodes_mut() {
        if let Some(attribute) = node.attributes.get_any(&["prompt", "llm_prompt"]) {
            if let Some(reference) = file_reference(&attribute.value) {
                let target = resolve_path(loader, &base_dir, reference);
                match loader.read(&target) {
                    Ok(text) => node.llm.prompt = text.into(),
                    Err(error) => {
                        diagnostics.push(unresolved(attribute, &target, &error, &node.id))
                    }
                }
            }
        }
        if let Some(attribute) = node.attributes.get("output_schema") {
            if let Some(reference) = file_reference(attribute.value.trim()) {
                let target = resolve_path(loader, &base_dir, reference);
                match loader.read(&target) {
                    Ok(text) => match schema::parse_schema(&text) {
                        Ok(schema) => node.llm.set_output_schema(Some(OutputSchema::Json(schema))),
                        Err(message) => diagnostics.push(
                            Diagnostic::new(
                                Rule::OutputSchemaInvalid,
                                format!(
                                    "output schema file '{}' is not a valid JSON Schema: {message}",
                                    target.display()
                                ),
                            )
                            .at(attribute.key_span)
                            .node(&node.id),
                        ),
                    },
                    Err(error) => {
                        diagnostics.push(unresolved(attribute, &target, &error, &node.id))
                    }
                }
            }
        }
    }
    let mut children = Vec::new();
    let graph_attribute = workflow
        .attributes
        .get_any(&["stack.child_workflow", "stack.child_dotfile"])
        .cloned();
    for node in workflow.nodes() {
        if node.handler != HandlerKind::SubWorkflow {
            continue;
        }
        let Some(reference) = node
            .sub_workflow
            .as_ref()
            .and_then(|settings| settings.child_workflow.clone())
        else {
            continue;
        };
        let Some(attribute) = node
            .attributes
            .get_any(&["stack.child_workflow", "stack.child_dotfile"])
            .or(graph_attribute.as_ref())
        else {
            continue;
        };
        let target = resolve_path(loader, &base_dir, &reference);
        if stack.contains(&target) || stack.len() >= MAX_CHILD_DEPTH {
            diagnostics.push(
                Diagnostic::new(
                    Rule::ChildWorkflow,
                    format!(
                        "child workflow '{}' includes itself (directly or through other child workflows)",
                        target.display()
                    ),
                )
                .at(attribute.key_span)
                .node(&node.id),
            );
            continue;
        }
        let text = match loader.read(&target) {
            Ok(text) => text,
            Err(error) => {
                diagnostics.push(unresolved(attribute, &target, &error, &node.id));
                continue;
            }
        };
        stack.push(target.clone());
        let checked = check_source(&target, &text, options, stack);
        stack.pop();
        if let Some(first) = checked
            .diagnostics
            .iter()
            .find(|diagnostic| diagnostic.severity() == Severity::Error)
        {
            let location = match first.span {
                Some(span) => {
                    let (line, column) = LineIndex::new(&text).position(&text, span.start);
                    format!("{}:{line}:{column}", target.display())
                }
                None => target.display().to_string(),
            };
            diagnostics.push(
                Diagnostic::new(
                    Rule::ChildWorkflow,
                    format!(
                        "child workflow '{reference}' is invalid: {location}: error[{}]: {}",
                        first.rule.id(),
                        first.message
                    ),
                )
                .at(attribute.key_span)
                .node(&node.id),
            );
        }
        children.push(ChildWorkflow {
            node_id: node.id.clone(),
            reference,
            path: target,
            checked: Box::new(checked),
        });
    }
    children
}

fn unresolved(
    attribute: &Attribute,
    target: &Path,
    error: &std::io::Error,
    node_id: &str,
) -> Diagnostic {
    Diagnostic::new(
        Rule::UnresolvedFileRef,
        format!(
            "cannot read '{}' (referenced by {}): {error}",
            target.display(),
            attribute.key
        ),
    )
    .at(attribute.key_span)
    .node(node_id)
}
