//! The paths that differ between two trees, found by descending only into subtrees whose
//! ids differ: what a stage changed, at a cost that grows with the change rather than with
//! the tree (libgit2's tree-to-tree diff walks every entry of both trees).

use std::collections::BTreeMap;

use git2::{ObjectType, Oid, Repository};

use super::GitError;

/// Every path (blobs, links and submodule entries, `/`-separated) whose entry differs
/// between the trees `old` and `new`, or exists in only one of them; unsorted.
pub(crate) fn changed_paths(
    repo: &Repository,
    old: Oid,
    new: Oid,
) -> Result<Vec<String>, GitError> {
    let mut paths = Vec::new();
    compare(repo, Some(old), Some(new), "", &mut paths)?;
    Ok(paths)
}

/// One side of an entry: id, file mode, whether it is a tree.
type Side = (Oid, i32, bool);

fn compare(
    repo: &Repository,
    old: Option<Oid>,
    new: Option<Oid>,
    prefix: &str,
    paths: &mut Vec<String>,
) -> Result<(), GitError> {
    if old == new {
        return Ok(());
    }
    let mut entries: BTreeMap<Vec<u8>, (Option<Side>, Option<Side>)> = BTreeMap::new();
    for (tree, is_new) in [(old, false), (new, true)] {
        let Some(tree) = tree else {
            continue;
        };
        let tree = repo
            .find_tree(tree)
            .map_err(GitError::git("read a staged tree"))?;
        for entry in tree.iter() {
            let side = (
                entry.id(),
                entry.filemode(),
                entry.kind() == Some(ObjectType::Tree),
            );
            let slot = entries.entry(entry.name_bytes().to_vec()).or_default();
            if is_new {
                slot.1 = Some(side);
            } else {
                slot.0 = Some(side);
            }
        }
    }
    for (name, (old, new)) in entries {
        if old == new {
            continue;
        }
        let path = format!("{prefix}{}", String::from_utf8_lossy(&name));
        let subtree = |side: Option<Side>| side.filter(|side| side.2).map(|side| side.0);
        let (old_tree, new_tree) = (subtree(old), subtree(new));
        if old_tree.is_some() || new_tree.is_some() {
            compare(repo, old_tree, new_tree, &format!("{path}/"), paths)?;
        }
        let is_blob = |side: Option<Side>| side.is_some_and(|side| !side.2);
        if is_blob(old) || is_blob(new) {
            paths.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::changed_paths;
    use crate::git::test_repo::TestRepo;

    #[test]
    fn changed_paths_match_git_diff_name_only() {
        let Some(repo) = TestRepo::new() else {
            return;
        };
        repo.write("a/b/c.txt", "c\n");
        repo.write("a/d.txt", "d\n");
        repo.write("e", "file\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "one"]);
        let first = repo.git(&["rev-parse", "HEAD^{tree}"]);
        repo.write("a/b/c.txt", "changed\n");
        fs_err::remove_file(repo.path().join("e")).unwrap();
        repo.write("e/inside.txt", "now a directory\n");
        fs_err::remove_dir_all(repo.path().join("src")).unwrap();
        repo.write("src", "now a file\n");
        repo.git(&["add", "-A"]);
        repo.git(&["update-index", "--chmod=+x", "a/d.txt"]);
        repo.git(&["commit", "-q", "-m", "two"]);
        let second = repo.git(&["rev-parse", "HEAD^{tree}"]);
        let git = git2::Repository::open(repo.path()).unwrap();
        let oid = |sha: &str| git2::Oid::from_str(sha).unwrap();
        let mut paths = changed_paths(&git, oid(&first), oid(&second)).unwrap();
        paths.sort();
        let expected = repo.git(&["diff", "--name-only", "--no-renames", &first, &second]);
        assert_eq!(paths.join("\n"), expected);
        assert!(changed_paths(&git, oid(&first), oid(&first))
            .unwrap()
            .is_empty());
    }
}
