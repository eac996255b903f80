//! Trees of the metadata ref (SPEC 8.3): the previous commit's tree with the given files
//! upserted. [`MetadataTree`] keeps the tree in memory between checkpoints, reading a directory
//! from the repository only the first time a file inside it changes, and serialises only the
//! directories on the paths that changed; the new objects go into the cycle's pack.

use std::collections::BTreeMap;

use git2::{Oid, Repository};

use super::object::{tree_data, ObjectKind, RawObject, TreeEntry};
use super::GitError;

/// Files of 512 KB (524,288 bytes) or more never enter a metadata commit (SPEC 8.3).
pub(crate) const METADATA_FILE_LIMIT: usize = 512 * 1024;

/// One file to upsert into the metadata tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MetadataFile<'a> {
    /// Path inside the tree, `/`-separated: `checkpoint.json`, `nodes/{id}/status.json`,
    /// `stages/003-build@1/prompt.md`, `artifacts/x.json`, `children/…`.
    pub path: &'a str,
    /// The file's bytes.
    pub contents: &'a [u8],
}

/// The result of [`RunGit::write_metadata`](super::RunGit::write_metadata).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetadataWrite {
    /// SHA of the new metadata commit, for the `Fabro-Checkpoint` trailer.
    pub sha: String,
    /// Paths left out because they reached [`METADATA_FILE_LIMIT`].
    pub skipped: Vec<String>,
}

/// The metadata tree of a run, as far as it has been read or written.
#[derive(Debug)]
pub(crate) struct MetadataTree {
    root: TreeNode,
}

/// A directory: `children` is `None` until it is needed; `oid` is `None` while it has changes
/// not yet serialised.
#[derive(Debug)]
struct TreeNode {
    oid: Option<Oid>,
    children: Option<BTreeMap<String, Child>>,
}

#[derive(Debug)]
enum Child {
    Blob(Oid),
    Tree(TreeNode),
}

impl MetadataTree {
    /// The tree of the first metadata commit: empty.
    pub(crate) fn empty() -> MetadataTree {
        MetadataTree {
            root: TreeNode::empty(),
        }
    }

    /// The tree `oid` of an existing commit, read lazily.
    pub(crate) fn existing(oid: Oid) -> MetadataTree {
        MetadataTree {
            root: TreeNode::unread(oid),
        }
    }

    /// Upserts `files` (those under [`METADATA_FILE_LIMIT`]) and appends the new blobs and
    /// trees to `objects`; returns the new root tree and the paths left out.
    pub(crate) fn upsert(
        &mut self,
        repo: &Repository,
        files: &[MetadataFile<'_>],
        objects: &mut Vec<RawObject>,
    ) -> Result<(Oid, Vec<String>), GitError> {
        let mut skipped = Vec::new();
        for file in files {
            let components = split_path(file.path)?;
            if file.contents.len() >= METADATA_FILE_LIMIT {
                skipped.push(file.path.to_owned());
                continue;
            }
            // SPEC 13.1: metadata commits hold no secret values, whatever the source.
            let contents = fabro_llm::redact::redactor().redact_bytes(file.contents);
            let blob = RawObject::new(ObjectKind::Blob, contents.into_owned());
            if self.root.upsert(repo, &components, blob.oid)? {
                objects.push(blob);
            }
        }
        Ok((self.root.write(objects), skipped))
    }
}

impl TreeNode {
    fn empty() -> TreeNode {
        TreeNode {
            oid: None,
            children: Some(BTreeMap::new()),
        }
    }

    fn unread(oid: Oid) -> TreeNode {
        TreeNode {
            oid: Some(oid),
            children: None,
        }
    }

    fn children(&mut self, repo: &Repository) -> Result<&mut BTreeMap<String, Child>, GitError> {
        if self.children.is_none() {
            let oid = self.oid.unwrap_or_else(Oid::zero);
            let tree = repo.find_tree(oid).map_err(|source| GitError::Git {
                action: format!("read metadata tree {oid}"),
                source,
            })?;
            let mut children = BTreeMap::new();
            for entry in tree.iter() {
                let Some(name) = entry.name() else { continue };
                let child = if entry.kind() == Some(git2::ObjectType::Tree) {
                    Child::Tree(TreeNode::unread(entry.id()))
                } else {
                    Child::Blob(entry.id())
                };
                children.insert(name.to_owned(), child);
            }
            self.children = Some(children);
        }
        Ok(self.children.get_or_insert_with(BTreeMap::new))
    }

    /// Sets the file at `components` to `blob`; whether anything changed.
    fn upsert(
        &mut self,
        repo: &Repository,
        components: &[&str],
        blob: Oid,
    ) -> Result<bool, GitError> {
        let changed = match components {
            [] => false,
            [name] => {
                let children = self.children(repo)?;
                if matches!(children.get(*name), Some(Child::Blob(existing)) if *existing == blob) {
                    false
                } else {
                    children.insert((*name).to_owned(), Child::Blob(blob));
                    true
                }
            }
            [directory, rest @ ..] => {
                let children = self.children(repo)?;
                let child = children
                    .entry((*directory).to_owned())
                    .or_insert_with(|| Child::Tree(TreeNode::empty()));
                if let Child::Blob(_) = child {
                    *child = Child::Tree(TreeNode::empty());
                }
                match child {
                    Child::Tree(node) => node.upsert(repo, rest, blob)?,
                    Child::Blob(_) => false,
                }
            }
        };
        if changed {
            self.oid = None;
        }
        Ok(changed)
    }

    /// Serialises this directory and its changed subdirectories into `objects`.
    fn write(&mut self, objects: &mut Vec<RawObject>) -> Oid {
        if let Some(oid) = self.oid {
            return oid;
        }
        let children = self.children.get_or_insert_with(BTreeMap::new);
        let mut entries = Vec::with_capacity(children.len());
        for (name, child) in children.iter_mut() {
            let (oid, is_tree) = match child {
                Child::Blob(oid) => (*oid, false),
                Child::Tree(node) => (node.write(objects), true),
            };
            entries.push(TreeEntry {
                name: name.clone(),
                oid,
                is_tree,
            });
        }
        let tree = RawObject::new(ObjectKind::Tree, tree_data(&entries));
        let oid = tree.oid;
        objects.push(tree);
        self.oid = Some(oid);
        oid
    }
}

fn split_path(path: &str) -> Result<Vec<&str>, GitError> {
    let components: Vec<&str> = path.split('/').collect();
    let valid = components
        .iter()
        .all(|part| !part.is_empty() && *part != "." && *part != ".." && *part != ".git");
    if valid {
        Ok(components)
    } else {
        Err(GitError::InvalidMetadataPath {
            path: path.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upserts `files` into the tree `base` and stores the new objects in `repo`.
    fn upsert_tree(
        repo: &Repository,
        base: Option<Oid>,
        files: &[MetadataFile<'_>],
    ) -> Result<(Oid, Vec<String>), GitError> {
        let mut tree = base.map_or_else(MetadataTree::empty, MetadataTree::existing);
        let mut objects = Vec::new();
        let result = tree.upsert(repo, files, &mut objects)?;
        let odb = repo.odb().unwrap();
        for object in objects {
            let kind = match object.kind {
                ObjectKind::Blob => git2::ObjectType::Blob,
                ObjectKind::Tree => git2::ObjectType::Tree,
                ObjectKind::Commit => git2::ObjectType::Commit,
            };
            assert_eq!(odb.write(kind, &object.data).unwrap(), object.oid);
        }
        Ok(result)
    }

    fn list(repo: &Repository, tree: Oid) -> Vec<(String, Vec<u8>)> {
        let tree = repo.find_tree(tree).unwrap();
        let mut out = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(git2::ObjectType::Blob) {
                let blob = repo.find_blob(entry.id()).unwrap();
                out.push((
                    format!("{dir}{}", entry.name().unwrap()),
                    blob.content().to_vec(),
                ));
            }
            git2::TreeWalkResult::Ok
        })
        .unwrap();
        out
    }

    fn file<'a>(path: &'a str, contents: &'a str) -> MetadataFile<'a> {
        MetadataFile {
            path,
            contents: contents.as_bytes(),
        }
    }

    #[test]
    fn upsert_keeps_old_files_and_replaces_changed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let (first, skipped) = upsert_tree(
            &repo,
            None,
            &[
                file("checkpoint.json", "{}"),
                file("nodes/a/status.json", "a1"),
                file("stages/001-a@1/status.json", "a1"),
            ],
        )
        .unwrap();
        assert!(skipped.is_empty());
        let (second, _) = upsert_tree(
            &repo,
            Some(first),
            &[
                file("checkpoint.json", "{\"n\":2}"),
                file("nodes/a/status.json", "a2"),
                file("nodes/b/prompt.md", "b"),
            ],
        )
        .unwrap();
        assert_eq!(
            list(&repo, second),
            vec![
                ("checkpoint.json".to_owned(), b"{\"n\":2}".to_vec()),
                ("nodes/a/status.json".to_owned(), b"a2".to_vec()),
                ("nodes/b/prompt.md".to_owned(), b"b".to_vec()),
                ("stages/001-a@1/status.json".to_owned(), b"a1".to_vec()),
            ]
        );
    }

    #[test]
    fn files_at_the_limit_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let big = vec![b'x'; METADATA_FILE_LIMIT];
        let just_below = vec![b'y'; METADATA_FILE_LIMIT - 1];
        let (tree, skipped) = upsert_tree(
            &repo,
            None,
            &[
                MetadataFile {
                    path: "nodes/a/response.md",
                    contents: &big,
                },
                MetadataFile {
                    path: "nodes/a/prompt.md",
                    contents: &just_below,
                },
            ],
        )
        .unwrap();
        assert_eq!(skipped, vec!["nodes/a/response.md"]);
        let names: Vec<String> = list(&repo, tree).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["nodes/a/prompt.md"]);
    }

    #[test]
    fn bad_paths_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        for path in ["", "/abs", "a//b", "../x", "a/./b", ".git/config", "dir/"] {
            let result = upsert_tree(&repo, None, &[file(path, "x")]);
            assert!(
                matches!(result, Err(GitError::InvalidMetadataPath { .. })),
                "{path:?}"
            );
        }
    }
}
