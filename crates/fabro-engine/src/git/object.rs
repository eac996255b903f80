//! Git objects built in memory: blobs, trees and commits serialised in git's own format and
//! named by their SHA-1, ready for [`PackStore`](super::pack::PackStore) to write in one pack
//! per checkpoint cycle instead of one loose file each.

use git2::Oid;
use sha1::{Digest, Sha1};

/// The kinds of object fabro writes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectKind {
    Commit,
    Tree,
    Blob,
}

impl ObjectKind {
    fn name(self) -> &'static str {
        match self {
            ObjectKind::Commit => "commit",
            ObjectKind::Tree => "tree",
            ObjectKind::Blob => "blob",
        }
    }

    /// The type number in a pack entry header.
    pub(crate) fn pack_type(self) -> u8 {
        match self {
            ObjectKind::Commit => 1,
            ObjectKind::Tree => 2,
            ObjectKind::Blob => 3,
        }
    }
}

/// One object with its id.
#[derive(Debug, Clone)]
pub(crate) struct RawObject {
    pub(crate) oid: Oid,
    pub(crate) kind: ObjectKind,
    pub(crate) data: Vec<u8>,
}

impl RawObject {
    /// Names `data` as an object of `kind`.
    pub(crate) fn new(kind: ObjectKind, data: Vec<u8>) -> RawObject {
        RawObject {
            oid: object_id(kind, &data),
            kind,
            data,
        }
    }
}

/// The object id git gives `data` stored as `kind`: SHA-1 over `"{kind} {len}\0"` and the data.
pub(crate) fn object_id(kind: ObjectKind, data: &[u8]) -> Oid {
    let mut hasher = Sha1::new();
    hasher.update(kind.name().as_bytes());
    hasher.update(b" ");
    hasher.update(data.len().to_string().as_bytes());
    hasher.update([0]);
    hasher.update(data);
    oid_from_digest(&hasher.finalize())
}

pub(crate) fn oid_from_digest(digest: &[u8]) -> Oid {
    // A SHA-1 digest is always 20 bytes, the length `Oid::from_bytes` accepts.
    Oid::from_bytes(digest).unwrap_or_else(|_| Oid::zero())
}

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeEntry {
    pub(crate) name: String,
    pub(crate) oid: Oid,
    pub(crate) is_tree: bool,
}

/// Serialises a tree: entries in git's order (names compared bytewise, a directory as if its
/// name ended in `/`), each `{mode} {name}\0{20-byte id}`.
pub(crate) fn tree_data<'a>(entries: impl IntoIterator<Item = &'a TreeEntry>) -> Vec<u8> {
    let mut sorted: Vec<&TreeEntry> = entries.into_iter().collect();
    sorted.sort_by(|a, b| tree_order(a).cmp(&tree_order(b)));
    let mut data = Vec::with_capacity(sorted.len() * 40);
    for entry in sorted {
        data.extend_from_slice(if entry.is_tree { b"40000 " } else { b"100644 " });
        data.extend_from_slice(entry.name.as_bytes());
        data.push(0);
        data.extend_from_slice(entry.oid.as_bytes());
    }
    data
}

fn tree_order(entry: &TreeEntry) -> TreeOrder<'_> {
    TreeOrder(entry)
}

/// Git's tree order: a directory sorts as if its name ended in `/`.
struct TreeOrder<'a>(&'a TreeEntry);

impl TreeOrder<'_> {
    fn bytes(&self) -> impl Iterator<Item = u8> + '_ {
        let suffix: &[u8] = if self.0.is_tree { b"/" } else { b"" };
        self.0.name.bytes().chain(suffix.iter().copied())
    }
}

impl PartialEq for TreeOrder<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for TreeOrder<'_> {}

impl PartialOrd for TreeOrder<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TreeOrder<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bytes().cmp(other.bytes())
    }
}

/// Serialises a commit the way `git commit` does: tree, parents, author and committer (the
/// same signature), a blank line and the message.
pub(crate) fn commit_data(
    tree: Oid,
    parents: &[Oid],
    signature: &git2::Signature<'_>,
    message: &str,
) -> Vec<u8> {
    let mut data = format!("tree {tree}\n").into_bytes();
    for parent in parents {
        data.extend_from_slice(format!("parent {parent}\n").as_bytes());
    }
    let person = signature_line(signature);
    data.extend_from_slice(format!("author {person}\ncommitter {person}\n\n").as_bytes());
    data.extend_from_slice(message.as_bytes());
    data
}

fn signature_line(signature: &git2::Signature<'_>) -> String {
    let when = signature.when();
    let offset = when.offset_minutes();
    let sign = if offset < 0 { '-' } else { '+' };
    let offset = offset.unsigned_abs();
    format!(
        "{} <{}> {} {sign}{:02}{:02}",
        String::from_utf8_lossy(signature.name_bytes()),
        String::from_utf8_lossy(signature.email_bytes()),
        when.seconds(),
        offset / 60,
        offset % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_libgit2() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init_bare(dir.path()).unwrap();
        let blob = RawObject::new(ObjectKind::Blob, b"hello\n".to_vec());
        assert_eq!(blob.oid, repo.blob(b"hello\n").unwrap());
        let entries = [
            TreeEntry {
                name: "a.b".to_owned(),
                oid: blob.oid,
                is_tree: false,
            },
            TreeEntry {
                name: "a".to_owned(),
                oid: repo.treebuilder(None).unwrap().write().unwrap(),
                is_tree: true,
            },
            TreeEntry {
                name: "a-".to_owned(),
                oid: blob.oid,
                is_tree: false,
            },
        ];
        let tree = RawObject::new(ObjectKind::Tree, tree_data(&entries));
        let mut builder = repo.treebuilder(None).unwrap();
        for entry in &entries {
            let mode = if entry.is_tree { 0o040000 } else { 0o100644 };
            builder.insert(&entry.name, entry.oid, mode).unwrap();
        }
        assert_eq!(tree.oid, builder.write().unwrap());
        let signature =
            git2::Signature::new("fabro", "fabro@local", &git2::Time::new(1_700_000_000, -90))
                .unwrap();
        let tree_id = builder.write().unwrap();
        let parent = repo
            .commit(
                None,
                &signature,
                &signature,
                "first",
                &repo.find_tree(tree_id).unwrap(),
                &[],
            )
            .unwrap();
        let expected = repo
            .commit(
                None,
                &signature,
                &signature,
                "subject\n\nbody\n",
                &repo.find_tree(tree_id).unwrap(),
                &[&repo.find_commit(parent).unwrap()],
            )
            .unwrap();
        let commit = RawObject::new(
            ObjectKind::Commit,
            commit_data(tree_id, &[parent], &signature, "subject\n\nbody\n"),
        );
        assert_eq!(commit.oid, expected);
    }
}
