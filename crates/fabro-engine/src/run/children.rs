//! Stored child workflows (SPEC 4.1, decided item 44): every child workflow of a
//! sub_workflow node, recursively, is stored like `graph.fabro` (after `@path` inlining,
//! before variable expansion) under `{run_dir}/children/`, and the stored graphs name
//! their children by these relative paths, so a run can be resumed without the original
//! files.
//!
//! The directory is flat: `graph.fabro` names a child `children/{name}`, and a stored
//! child names its own children `{name}` (a sibling, since references resolve relative
//! to the referring file).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use fabro_language::render::dot::render_dot;
use fabro_language::{ChildWorkflow, SourceLoader};

use crate::store::CHILDREN_DIR;

/// The text of `graph.fabro` and of every stored child, as `(name, text)` with `name`
/// relative to `children/`.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoredGraphs {
    /// `graph.fabro`.
    pub(crate) graph: String,
    /// The files of `children/`, sorted by name.
    pub(crate) children: Vec<(String, String)>,
}

impl StoredGraphs {
    /// The stored texts of `workflow` and its `children` (as loaded by `check`).
    pub(crate) fn of(workflow: &fabro_language::Workflow, children: &[ChildWorkflow]) -> Self {
        let mut names = Names::default();
        let graph = rewrite(render_dot(workflow), children, &mut names, "children/");
        let mut stored = BTreeMap::new();
        let mut pending: Vec<&ChildWorkflow> = children.iter().collect();
        while let Some(child) = pending.pop() {
            let name = names.name(&child.path);
            if stored.contains_key(&name) {
                continue;
            }
            let Some(workflow) = child.checked.workflow.as_ref() else {
                continue;
            };
            let text = rewrite(
                render_dot(workflow),
                &child.checked.children,
                &mut names,
                "",
            );
            stored.insert(name, text);
            pending.extend(child.checked.children.iter());
        }
        StoredGraphs {
            graph,
            children: stored.into_iter().collect(),
        }
    }

    /// A loader that reads the stored texts as if they were in `run_dir`.
    pub(crate) fn loader(&self, run_dir: &Path) -> StoredLoader {
        let files = self
            .children
            .iter()
            .map(|(name, text)| (run_dir.join(CHILDREN_DIR).join(name), text.clone()))
            .collect();
        StoredLoader { files }
    }
}

/// Unique file names for child workflows, one per resolved path: the original file name,
/// with `-2`, `-3`, … before the extension when two files share it.
#[derive(Debug, Default)]
struct Names {
    by_path: HashMap<PathBuf, String>,
    taken: HashSet<String>,
}

impl Names {
    fn name(&mut self, path: &Path) -> String {
        if let Some(name) = self.by_path.get(path) {
            return name.clone();
        }
        let file_name = path
            .file_name()
            .and_then(|name| name.to_str())
            .filter(|name| !name.is_empty() && !name.starts_with('.'))
            .unwrap_or("child.fabro");
        let (stem, extension) = match file_name.rsplit_once('.') {
            Some((stem, extension)) if !stem.is_empty() => (stem, Some(extension)),
            _ => (file_name, None),
        };
        let mut name = file_name.to_owned();
        let mut counter = 2;
        while self.taken.contains(&name) {
            name = match extension {
                Some(extension) => format!("{stem}-{counter}.{extension}"),
                None => format!("{stem}-{counter}"),
            };
            counter += 1;
        }
        self.taken.insert(name.clone());
        self.by_path.insert(path.to_path_buf(), name.clone());
        name
    }
}

/// `text` (normalised DOT) with every child reference replaced by `{prefix}{name}`, in
/// one pass so that a replacement is never replaced again.
fn rewrite(text: String, children: &[ChildWorkflow], names: &mut Names, prefix: &str) -> String {
    if children.is_empty() {
        return text;
    }
    let replacements: HashMap<String, String> = children
        .iter()
        .map(|child| {
            let stored = format!("{prefix}{}", names.name(&child.path));
            (
                fabro_language::render::dot::quoted(&child.reference),
                fabro_language::render::dot::quoted(&stored),
            )
        })
        .collect();
    let keys = ["stack.child_workflow", "stack.child_dotfile"]
        .map(|key| format!("{}=", fabro_language::render::dot::quoted(key)));
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some((start, key)) = keys
        .iter()
        .filter_map(|key| rest.find(key.as_str()).map(|start| (start, key)))
        .min_by_key(|(start, _)| *start)
    {
        let value_start = start + key.len();
        out.push_str(&rest[..value_start]);
        rest = &rest[value_start..];
        let Some(value_length) = quoted_length(rest) else {
            continue;
        };
        let value = &rest[..value_length];
        out.push_str(replacements.get(value).map_or(value, String::as_str));
        rest = &rest[value_length..];
    }
    out.push_str(rest);
    out
}

/// The length of the quoted string at the start of `text`, quotes included.
fn quoted_length(text: &str) -> Option<usize> {
    let mut chars = text.char_indices();
    if chars.next()?.1 != '"' {
        return None;
    }
    let mut escaped = false;
    for (index, c) in chars {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(index + 1),
            _ => {}
        }
    }
    None
}

/// Reads the stored children of a run that is being prepared, before they are written.
#[derive(Debug)]
pub(crate) struct StoredLoader {
    files: HashMap<PathBuf, String>,
}

impl SourceLoader for StoredLoader {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        self.files.get(path).cloned().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "not a stored child workflow")
        })
    }

    fn home_dir(&self) -> Option<PathBuf> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use fabro_language::{check, CheckOptions, ModelCatalog, Variables};

    use super::*;

    struct Files(HashMap<PathBuf, String>);

    impl SourceLoader for Files {
        fn read(&self, path: &Path) -> std::io::Result<String> {
            self.0
                .get(path)
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }

        fn home_dir(&self) -> Option<PathBuf> {
            None
        }
    }

    struct AnyModel;

    impl ModelCatalog for AnyModel {
        fn is_known(&self, _model: &str) -> bool {
            true
        }
    }

    fn leaf(name: &str) -> String {
        format!("digraph {name} {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}}\n")
    }

    fn manager(name: &str, references: &[&str]) -> String {
        let mut text =
            format!("digraph {name} {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
        let mut previous = "start".to_owned();
        for (index, reference) in references.iter().enumerate() {
            text.push_str(&format!(
                "  m{index} [shape=house, stack.child_workflow=\"{reference}\"]\n  {previous} -> m{index}\n"
            ));
            previous = format!("m{index}");
        }
        text.push_str(&format!("  {previous} -> exit\n}}\n"));
        text
    }

    fn stored_of(files: &[(&str, String)]) -> StoredGraphs {
        let loader = Files(
            files
                .iter()
                .map(|(path, text)| (PathBuf::from(path), text.clone()))
                .collect(),
        );
        let variables = Variables::new(String::new(), Default::default());
        let options = CheckOptions {
            loader: &loader,
            variables: &variables,
            models: &AnyModel,
        };
        let (path, text) = &files[0];
        let checked = check(Path::new(path), text, &options);
        assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
        StoredGraphs::of(
            checked.workflow.as_ref().expect("parsed"),
            &checked.children,
        )
    }

    fn references(text: &str) -> Vec<String> {
        let variables = Variables::new(String::new(), Default::default());
        let options = CheckOptions {
            loader: &Files(HashMap::new()),
            variables: &variables,
            models: &AnyModel,
        };
        let checked = check(Path::new("/x/graph.fabro"), text, &options);
        let workflow = checked.workflow.expect("parses");
        workflow
            .nodes()
            .iter()
            .filter_map(|node| node.sub_workflow.as_ref()?.child_workflow.clone())
            .collect()
    }

    #[test]
    fn children_get_unique_names_and_stored_graphs_name_them() {
        let stored = stored_of(&[
            (
                "/w/parent.fabro",
                manager(
                    "parent",
                    &[
                        "a/child.fabro",
                        "b/child.fabro",
                        "a/child.fabro",
                        "children/child.fabro",
                    ],
                ),
            ),
            ("/w/a/child.fabro", manager("child", &["../leaf.fabro"])),
            ("/w/b/child.fabro", leaf("other")),
            ("/w/children/child.fabro", leaf("third")),
            ("/w/a/../leaf.fabro", leaf("leaf")),
        ]);
        assert_eq!(
            references(&stored.graph),
            [
                "children/child.fabro",
                "children/child-2.fabro",
                "children/child.fabro",
                "children/child-3.fabro"
            ],
            "one file per resolved path, and no replacement is replaced again"
        );
        let names: Vec<&str> = stored
            .children
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "child-2.fabro",
                "child-3.fabro",
                "child.fabro",
                "leaf.fabro"
            ]
        );
        let child = &stored.children[2].1;
        assert_eq!(references(child), ["leaf.fabro"], "siblings in children/");
        assert!(stored.children[0].1.contains("digraph other"));
        assert!(stored.children[1].1.contains("digraph third"));
    }

    #[test]
    fn without_children_the_graph_is_the_normalised_workflow() {
        let stored = stored_of(&[("/w/w.fabro", leaf("w"))]);
        assert!(stored.children.is_empty());
        assert!(stored.graph.starts_with("digraph w {"));
    }
}
