//! The working tree an agent may write to (SPEC 13.4): path resolution that no `..`
//! or symlink can escape, and the optional `write_scope` globs.

use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};

/// The reason SPEC 13.4 gives for a write outside the allowed scope.
pub fn scope_violation_message(path: &str) -> String {
    format!("write scope violation: {path} is outside the allowed scope")
}

/// The failure reason for an attempt that changed paths outside the scope.
pub fn scope_failure_reason(paths: &[String]) -> String {
    format!("write scope violation: {}", paths.join(", "))
}

/// A `write_scope` glob that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid write_scope glob {glob:?}")]
pub(crate) struct ScopeGlobError {
    /// The glob as written.
    pub glob: String,
    /// Cause.
    #[source]
    pub source: globset::Error,
}

/// The working directory of an agent and the part of it the agent may modify.
#[derive(Debug, Clone)]
pub struct WorkTree {
    root: PathBuf,
    /// The root as the caller spelled it (may go through a symlink).
    alias: PathBuf,
    scope: Option<GlobSet>,
    /// Directories outside the root that may be read by absolute path (skills, SPEC
    /// 19.2), canonicalised.
    read_roots: Vec<PathBuf>,
}

/// A path inside the working tree, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Absolute path (symlinks of existing ancestors resolved).
    pub absolute: PathBuf,
    /// The path relative to the working directory, `/`-separated.
    pub relative: String,
}

impl WorkTree {
    /// A working tree rooted at `root` (canonicalised); `write_scope` globs, when
    /// given, restrict writes further.
    pub fn new(root: &Path, write_scope: &[String]) -> Result<WorkTree, crate::AgentError> {
        let alias = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        let root = root
            .canonicalize()
            .map_err(|source| crate::AgentError::WorkingDir {
                path: root.to_path_buf(),
                source,
            })?;
        let scope = if write_scope.is_empty() {
            None
        } else {
            let mut builder = GlobSetBuilder::new();
            for glob in write_scope {
                let parsed =
                    Glob::new(glob).map_err(|source| crate::AgentError::Configuration {
                        message: ScopeGlobError {
                            glob: glob.clone(),
                            source,
                        }
                        .to_string(),
                    })?;
                builder.add(parsed);
            }
            Some(
                builder
                    .build()
                    .map_err(|source| crate::AgentError::Configuration {
                        message: source.to_string(),
                    })?,
            )
        };
        Ok(WorkTree {
            root,
            alias,
            scope,
            read_roots: Vec::new(),
        })
    }

    /// The canonical working directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a model-supplied path for reading: relative paths are taken from the
    /// working directory; the result must lie inside it.
    pub fn resolve_read(&self, path: &str) -> Result<ResolvedPath, String> {
        self.resolve(path)
            .or_else(|| self.resolve_in_read_roots(path))
            .ok_or_else(|| format!("path {path} is outside the working directory"))
    }

    /// The same tree, with `roots` readable by absolute path as well (never writable).
    pub fn with_read_roots(mut self, roots: impl IntoIterator<Item = PathBuf>) -> WorkTree {
        self.read_roots.extend(
            roots
                .into_iter()
                .filter_map(|root| root.canonicalize().ok()),
        );
        self
    }

    /// An absolute path inside one of the read roots, symlinks resolved.
    fn resolve_in_read_roots(&self, path: &str) -> Option<ResolvedPath> {
        let path = Path::new(path);
        if !path.is_absolute() || self.read_roots.is_empty() {
            return None;
        }
        let absolute = path.canonicalize().ok()?;
        self.read_roots
            .iter()
            .any(|root| absolute.starts_with(root))
            .then(|| ResolvedPath {
                relative: absolute.to_string_lossy().into_owned(),
                absolute,
            })
    }

    /// Resolves a path for writing. A path outside the working directory or the
    /// `write_scope` is rejected with the SPEC 13.4 text, which the model receives as
    /// a tool error. `status.json` in the root is always allowed.
    pub fn resolve_write(&self, path: &str) -> Result<ResolvedPath, String> {
        match self.resolve(path) {
            Some(resolved) if self.in_scope(&resolved.relative) => Ok(resolved),
            _ => Err(scope_violation_message(path)),
        }
    }

    /// Whether a path relative to the root may be modified.
    pub fn in_scope(&self, relative: &str) -> bool {
        relative == "status.json"
            || self
                .scope
                .as_ref()
                .is_none_or(|scope| scope.is_match(relative))
    }

    /// The paths of `changed` (relative to the root) that lie outside the scope, for
    /// the after-attempt check of SPEC 13.4.
    pub fn out_of_scope(&self, changed: &[String]) -> Vec<String> {
        changed
            .iter()
            .filter(|path| !self.in_scope(path))
            .cloned()
            .collect()
    }

    /// Lexically normalises `path` against the root, then resolves symlinks of the
    /// deepest existing ancestor (and of the target itself when it exists) and checks
    /// the result is still under the root.
    fn resolve(&self, path: &str) -> Option<ResolvedPath> {
        if path.is_empty() || path.contains('\0') {
            return None;
        }
        // Absolute paths spelled through the caller's (symlinked) root are accepted.
        let joined = match Path::new(path).strip_prefix(&self.alias) {
            Ok(rest) if self.alias != self.root => self.root.join(rest),
            _ => self.root.join(path),
        };
        let mut normal = PathBuf::new();
        for component in joined.components() {
            match component {
                Component::ParentDir => {
                    if !normal.pop() {
                        return None;
                    }
                }
                Component::CurDir => {}
                other => normal.push(other.as_os_str()),
            }
        }
        if !normal.starts_with(&self.root) {
            return None;
        }
        // Follow symlinks along the existing part of the path.
        let mut existing = normal.clone();
        let mut rest = Vec::new();
        loop {
            if std::fs::symlink_metadata(&existing).is_ok() {
                break;
            }
            let name = existing.file_name()?.to_os_string();
            rest.push(name);
            if !existing.pop() {
                return None;
            }
        }
        let mut absolute = existing.canonicalize().ok()?;
        if !absolute.starts_with(&self.root) {
            return None;
        }
        for name in rest.into_iter().rev() {
            absolute.push(name);
        }
        let relative = absolute
            .strip_prefix(&self.root)
            .ok()?
            .components()
            .map(|component| component.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        Some(ResolvedPath { absolute, relative })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(scope: &[&str]) -> (tempfile::TempDir, WorkTree) {
        let dir = tempfile::tempdir().unwrap();
        fs_err::create_dir_all(dir.path().join("work/src")).unwrap();
        let scope: Vec<String> = scope.iter().map(|glob| (*glob).to_owned()).collect();
        let tree = WorkTree::new(&dir.path().join("work"), &scope).unwrap();
        (dir, tree)
    }

    /// SPEC 19.2: a skill's files outside the tree can be read by absolute path, never
    /// written, and nothing else outside becomes readable.
    #[test]
    fn read_roots_are_readable_by_absolute_path_only() {
        let (dir, tree) = tree(&[]);
        let skill = dir.path().join("home/skills/review");
        fs_err::create_dir_all(&skill).unwrap();
        fs_err::write(skill.join("checklist.md"), "- tests\n").unwrap();
        fs_err::write(dir.path().join("home/secret.txt"), "no").unwrap();
        let tree = tree.with_read_roots([skill.clone()]);
        let file = skill.join("checklist.md").display().to_string();
        let resolved = tree.resolve_read(&file).unwrap();
        assert_eq!(
            resolved.absolute,
            skill.join("checklist.md").canonicalize().unwrap()
        );
        assert!(tree.resolve_write(&file).is_err());
        let outside = dir.path().join("home/secret.txt").display().to_string();
        assert!(tree.resolve_read(&outside).is_err());
        assert!(tree
            .resolve_read("../home/skills/review/checklist.md")
            .is_err());
    }

    #[test]
    fn relative_and_absolute_paths_inside_resolve() {
        let (_dir, tree) = tree(&[]);
        let resolved = tree.resolve_write("src/../src/new/a.rs").unwrap();
        assert_eq!(resolved.relative, "src/new/a.rs");
        let absolute = tree.root().join("b.txt");
        let resolved = tree.resolve_write(absolute.to_str().unwrap()).unwrap();
        assert_eq!(resolved.relative, "b.txt");
    }

    #[test]
    fn dot_dot_escape_is_a_violation() {
        let (_dir, tree) = tree(&[]);
        let error = tree.resolve_write("../outside.txt").unwrap_err();
        assert_eq!(
            error,
            "write scope violation: ../outside.txt is outside the allowed scope"
        );
        assert_eq!(
            tree.resolve_write("/etc/passwd").unwrap_err(),
            "write scope violation: /etc/passwd is outside the allowed scope"
        );
    }

    #[test]
    fn symlink_escape_is_a_violation() {
        let (dir, tree) = tree(&[]);
        std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), tree.root().join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere/f"), tree.root().join("flink"))
            .unwrap();
        fs_err::write(dir.path().join("elsewhere/f"), "x").unwrap();
        assert!(tree.resolve_write("link/new.txt").is_err());
        assert!(tree.resolve_write("flink").is_err());
        assert!(tree.resolve_read("link/new.txt").is_err());
    }

    #[test]
    fn absolute_paths_through_a_symlinked_root_resolve() {
        let dir = tempfile::tempdir().unwrap();
        fs_err::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("alias")).unwrap();
        let tree = WorkTree::new(&dir.path().join("alias"), &[]).unwrap();
        let spelled = dir.path().join("alias/a.txt");
        let resolved = tree.resolve_write(spelled.to_str().unwrap()).unwrap();
        assert_eq!(resolved.relative, "a.txt");
        assert!(tree
            .resolve_write(dir.path().join("alias/../x").to_str().unwrap())
            .is_err());
    }

    #[test]
    fn write_scope_globs_restrict_writes_but_status_json_is_exempt() {
        let (_dir, tree) = tree(&["src/**"]);
        assert!(tree.resolve_write("src/lib.rs").is_ok());
        assert!(tree.resolve_write("status.json").is_ok());
        assert!(tree.resolve_write("README.md").is_err());
        assert!(tree.resolve_read("README.md").is_ok());
        assert_eq!(
            tree.out_of_scope(&["src/a.rs".to_owned(), "b.md".to_owned()]),
            ["b.md"]
        );
        assert_eq!(
            scope_failure_reason(&["a".to_owned(), "b".to_owned()]),
            "write scope violation: a, b"
        );
    }
}
