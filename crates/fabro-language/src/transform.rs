//! The file-reading part of TRANSFORM (SPEC 2.6): `@path` prompts and output schemas
//! are inlined, and child workflows of sub_workflow nodes are loaded and checked.
//!
//! The crate does no I/O itself: files are read through a [`SourceLoader`] supplied by
//! the caller, so the same code runs against the file system and against in-memory
//! fixtures in tests.

use std::path::{Path, PathBuf};

use crate::diagnostic::{Diagnostic, Rule, Severity};
use crate::model::{HandlerKind, Node, OutputSchema, Workflow};
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
        inline_prompt(node, loader, &base_dir, diagnostics);
        inline_output_schema(node, loader, &base_dir, diagnostics);
    }
    let graph_attribute = workflow
        .attributes
        .get_any(&["stack.child_workflow", "stack.child_dotfile"])
        .cloned();
    let children = Children {
        options,
        base_dir: &base_dir,
        graph_attribute: graph_attribute.as_ref(),
    };
    workflow
        .nodes()
        .iter()
        .filter_map(|node| children.load(node, stack, diagnostics))
        .collect()
}

/// Replaces an `@path` prompt with the file's text.
fn inline_prompt(
    node: &mut Node,
    loader: &dyn SourceLoader,
    base_dir: &Path,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let Some(attribute) = node.attributes.get_any(&["prompt", "llm_prompt"]) else {
        return;
    };
    let Some(reference) = file_reference(&attribute.value) else {
        return;
    };
    let target = resolve_path(loader, base_dir, reference);
    match loader.read(&target) {
        Ok(text) => node.llm.prompt = text.into(),
        Err(error) => diagnostics.push(unresolved(attribute, &target, &error, &node.id)),
    }
}

/// Replaces an `@path` output schema with the JSON Schema the file holds.
fn inline_output_schema(
    node: &mut Node,
    loader: &dyn SourceLoader,
    base_dir: &Path,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let Some(attribute) = node.attributes.get("output_schema") else {
        return;
    };
    let Some(reference) = file_reference(attribute.value.trim()) else {
        return;
    };
    let target = resolve_path(loader, base_dir, reference);
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
        Err(error) => diagnostics.push(unresolved(attribute, &target, &error, &node.id)),
    }
}

/// Loads and checks the child workflows of one workflow's sub_workflow nodes.
struct Children<'a> {
    options: &'a CheckOptions<'a>,
    /// The directory child paths are relative to.
    base_dir: &'a Path,
    /// The graph-level child attribute, used by nodes that set none of their own.
    graph_attribute: Option<&'a Attribute>,
}

impl Children<'_> {
    /// The child workflow of `node`, `None` when it is no sub_workflow node with a child,
    /// or when the child cannot be loaded (reported in `diagnostics`). A child that loads
    /// but has errors is returned, with one diagnostic naming its first error.
    fn load(
        &self,
        node: &Node,
        stack: &mut Vec<PathBuf>,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Option<ChildWorkflow> {
        if node.handler != HandlerKind::SubWorkflow {
            return None;
        }
        let reference = node
            .sub_workflow
            .as_ref()
            .and_then(|settings| settings.child_workflow.clone())?;
        let attribute = node
            .attributes
            .get_any(&["stack.child_workflow", "stack.child_dotfile"])
            .or(self.graph_attribute)?;
        let loader = self.options.loader;
        let target = resolve_path(loader, self.base_dir, &reference);
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
            return None;
        }
        let text = match loader.read(&target) {
            Ok(text) => text,
            Err(error) => {
                diagnostics.push(unresolved(attribute, &target, &error, &node.id));
                return None;
            }
        };
        stack.push(target.clone());
        let checked = check_source(&target, &text, self.options, stack);
        stack.pop();
        if let Some(first) = checked
            .diagnostics
            .iter()
            .find(|diagnostic| diagnostic.severity() == Severity::Error)
        {
            diagnostics.push(
                invalid_child(first, &reference, &target, &text)
                    .at(attribute.key_span)
                    .node(&node.id),
            );
        }
        Some(ChildWorkflow {
            node_id: node.id.clone(),
            reference,
            path: target,
            checked: Box::new(checked),
        })
    }
}

/// The `child_workflow` error of a child whose first error is `first`, located in the
/// child's `text` at `target`.
fn invalid_child(first: &Diagnostic, reference: &str, target: &Path, text: &str) -> Diagnostic {
    let location = match first.span {
        Some(span) => {
            let (line, column) = LineIndex::new(text).position(text, span.start);
            format!("{}:{line}:{column}", target.display())
        }
        None => target.display().to_string(),
    };
    Diagnostic::new(
        Rule::ChildWorkflow,
        format!(
            "child workflow '{reference}' is invalid: {location}: error[{}]: {}",
            first.rule.id(),
            first.message
        ),
    )
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
