//! The before-snapshot of an in-place run (SPEC 17.2): the working tree as it is, tracked
//! changes and untracked files that git does not ignore, committed on top of `HEAD` straight
//! into the object database and named by `refs/fabro-before/{run_id}`. The index, the working
//! tree and the current branch are never touched (SPEC 13.6), so
//! `git restore --source=refs/fabro-before/{run_id} --worktree -- .` brings the user's work
//! back whatever the run's stages did.

use std::path::Path;

use git2::{FileMode, Repository, StatusOptions};

use super::{check_run_id, Author, GitError};

/// `refs/fabro-before/{run_id}`.
pub(crate) fn before_ref_name(run_id: &str) -> String {
    format!("refs/fabro-before/{run_id}")
}

/// Saves the working tree of the repository at `repo_root` under
/// [`before_ref_name`]`(run_id)` and returns the commit's SHA. A ref left by an earlier
/// attempt with the same id is replaced.
pub(crate) fn save_before(
    repo_root: &Path,
    run_id: &str,
    author: &Author,
) -> Result<String, GitError> {
    check_run_id(run_id)?;
    let repo = Repository::open(repo_root).map_err(GitError::git(format!(
        "open the repository at {}",
        repo_root.display()
    )))?;
    let head = repo
        .head()
        .and_then(|head| head.peel_to_commit())
        .map_err(GitError::git("read HEAD"))?;
    let mut options = StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo
        .statuses(Some(&mut options))
        .map_err(GitError::git("list the working tree's changes"))?;
    let mut update = git2::build::TreeUpdateBuilder::new();
    for entry in statuses.iter() {
        let Some(path) = entry.path() else {
            continue;
        };
        let on_disk = repo_root.join(path);
        match fs_err::symlink_metadata(&on_disk) {
            Ok(metadata) => {
                let (blob, mode) = if metadata.file_type().is_symlink() {
                    let target = fs_err::read_link(&on_disk)
                        .map_err(GitError::io("read the link", &on_disk))?;
                    let bytes = target.as_os_str().as_encoded_bytes();
                    let blob = repo
                        .blob(bytes)
                        .map_err(GitError::git(format!("store {path}")))?;
                    (blob, FileMode::Link)
                } else {
                    let blob = repo
                        .blob_path(&on_disk)
                        .map_err(GitError::git(format!("store {path}")))?;
                    let executable =
                        std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o111;
                    let mode = if executable != 0 {
                        FileMode::BlobExecutable
                    } else {
                        FileMode::Blob
                    };
                    (blob, mode)
                };
                update.upsert(path, blob, mode);
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                update.remove(path);
            }
            Err(error) => return Err(GitError::io("read", &on_disk)(error)),
        }
    }
    let base_tree = head.tree().map_err(GitError::git("read HEAD's tree"))?;
    let tree_id = update
        .create_updated(&repo, &base_tree)
        .map_err(GitError::git("build the working tree's snapshot"))?;
    let tree = repo
        .find_tree(tree_id)
        .map_err(GitError::git("read the snapshot tree"))?;
    let signature = author.signature()?;
    let message = format!("fabro({run_id}): working tree before the run\n\nFabro-Run: {run_id}\n");
    let commit = repo
        .commit(None, &signature, &signature, &message, &tree, &[&head])
        .map_err(GitError::git("commit the working tree's snapshot"))?;
    repo.reference(
        &before_ref_name(run_id),
        commit,
        true,
        "fabro: working tree before an in-place run",
    )
    .map_err(GitError::git(format!("write {}", before_ref_name(run_id))))?;
    Ok(commit.to_string())
}
