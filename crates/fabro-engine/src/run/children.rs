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

/// The directory of stored child workflows inside a run directory.
pub(crate) const CHILDREN_DIR: &str = "children";

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

/// `text` (normalised DOT) with every child reference replaced by `{prefix}{name}`.
fn rewrite(
    mut text: String,
    children: &[ChildWorkflow],
    names: &mut Names,
    prefix: &str,
) -> String {
    for child in children {
        let stored = format!("{prefix}{}", names.name(&child.path));
        for key in ["stack.child_workflow", "stack.child_dotfile"] {
            let from = format!("{}={}", quoted(key), quoted(&child.reference));
            let to = format!("{}={}", quoted(key), quoted(&stored));
            text = text.replace(&from, &to);
        }
    }
    text
}

/// `text` quoted as normalised DOT writes it.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => {}
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
