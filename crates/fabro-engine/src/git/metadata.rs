//! Trees of the metadata ref (SPEC 8.3): the previous commit's tree with the given files
//! upserted, built with `TreeBuilder`s straight in the object database, touching only the
//! directories on the paths that change.

use std::collections::BTreeMap;

use git2::{Oid, Repository, Tree};

use super::GitError;

/// Files of 512 KB (524,288 bytes) or more never enter a metadata commit (SPEC 8.3).
pub const METADATA_FILE_LIMIT: usize = 512 * 1024;

/// One file to upsert into the metadata tree.
#[derive(Debug, Clone, Copy)]
pub struct MetadataFile<'a> {
    /// Path inside the tree, `/`-separated: `checkpoint.json`, `nodes/{id}/status.json`,
    /// `stages/003-build@1/prompt.md`, `artifacts/x.json`, `children/…`.
    pub path: &'a str,
    /// The file's bytes.
    pub contents: &'a [u8],
}

/// The result of [`RunGit::write_metadata`](super::RunGit::write_metadata).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataWrite {
    /// SHA of the new metadata commit, for the `Fabro-Checkpoint` trailer.
    pub sha: String,
    /// Paths left out because they reached [`METADATA_FILE_LIMIT`].
    pub skipped: Vec<String>,
}

/// Writes the blobs and trees for `files` on top of `base` and returns the new root tree.
pub(crate) fn upsert_tree(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    files: &[MetadataFile<'_>],
) -> Result<(Oid, Vec<String>), GitError> {
    let mut skipped = Vec::new();
    let mut entries = Vec::with_capacity(files.len());
    for file in files {
        let components = split_path(file.path)?;
        if file.contents.len() >= METADATA_FILE_LIMIT {
            skipped.push(file.path.to_owned());
            continue;
        }
        let blob = repo
            .blob(file.contents)
            .map_err(GitError::git(format!("write metadata file {}", file.path)))?;
        entries.push((components, blob));
    }
    let borrowed: Vec<(&[&str], Oid)> = entries
        .iter()
        .map(|(components, blob)| (components.as_slice(), *blob))
        .collect();
    let tree = upsert_level(repo, base, &borrowed)?;
    Ok((tree, skipped))
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

/// Upserts `entries` (paths relative to this level) into `base`, recursing per directory.
fn upsert_level(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    entries: &[(&[&str], Oid)],
) -> Result<Oid, GitError> {
    let write = |source| GitError::Git {
        action: "write a metadata tree".to_owned(),
        source,
    };
    let mut builder = repo.treebuilder(base).map_err(write)?;
    let mut directories: BTreeMap<&str, Vec<(&[&str], Oid)>> = BTreeMap::new();
    for (components, blob) in entries {
        match components {
            [name] => {
                builder.insert(name, *blob, 0o100644).map_err(write)?;
            }
            [directory, rest @ ..] => directories
                .entry(directory)
                .or_default()
                .push((rest, *blob)),
            [] => {}
        }
    }
    for (directory, children) in directories {
        let existing = base
            .and_then(|tree| tree.get_name(directory))
            .filter(|entry| entry.kind() == Some(git2::ObjectType::Tree))
            .map(|entry| repo.find_tree(entry.id()))
            .transpose()
            .map_err(write)?;
        let subtree = upsert_level(repo, existing.as_ref(), &children)?;
        builder
            .insert(directory, subtree, 0o040000)
            .map_err(write)?;
    }
    builder.write().map_err(write)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let base = repo.find_tree(first).unwrap();
        let (second, _) = upsert_tree(
            &repo,
            Some(&base),
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
