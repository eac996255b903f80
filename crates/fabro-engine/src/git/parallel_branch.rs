//! Git isolation of parallel branches (SPEC 5.7) and the fan-in move of the run branch
//! (SPEC 5.8).
//!
//! A parallel stage commits its line (the run branch, or the branch of an enclosing parallel
//! branch) as the parallel base, then gives every branch a [`BranchWorktree`]: branch
//! `fabro/parallel/{run_id}/{node_id}/{visit}/{target}` at the base and a linked worktree at
//! `{run_dir}/branches/{node_id}@{visit}/{target}` checked out from it. Every branch stage is
//! committed there. The fan-in (or the parallel stage itself) then moves the line to the chosen
//! branch head with [`CheckedOutBranch::advance`]: a fast-forward, after which commits the line
//! made since the base (the parallel stage's own commit) are replayed on top, so every stage
//! keeps its commit on the run branch.
//!
//! Only `refs/heads/fabro/parallel/*`, the line's own ref, objects, and fabro's own worktrees
//! and registrations are written; the user's checkout is never touched (SPEC 13.6).

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use super::exclude::Excludes;
use super::full_scan::{watched_paths, FullScanLog};
use super::index_file::WorktreeIndex;
use super::stage::{stage_worktree, Scope};
use super::watch::WorktreeWatch;
use super::{Author, GitError};

/// A branch and the worktree it is checked out in, borrowed from its owner: the run branch of a
/// [`RunGit`](super::RunGit) or the branch of a [`BranchWorktree`].
pub(crate) struct CheckedOutBranch<'a> {
    pub(super) repo: &'a Repository,
    /// Full ref name, `refs/heads/…`.
    pub(super) reference: String,
    pub(super) head: &'a mut Oid,
    /// The worktree's index.
    pub(super) index: &'a mut WorktreeIndex,
    /// The worktree's change feed, or why there is none.
    pub(super) watch: Result<&'a mut WorktreeWatch, &'a str>,
    /// Scan the whole worktree whatever the watch says (the run's first stage after a resume).
    pub(super) force_full_scan: bool,
    /// The run's `full_scan` warning.
    pub(super) full_scans: &'a FullScanLog,
    pub(super) excludes: &'a Excludes,
    pub(super) author: &'a Author,
    pub(super) run_id: &'a str,
    pub(super) work_dir_relative: &'a Path,
}

/// Where a parallel stage puts its branches.
#[derive(Debug, Clone)]
pub(crate) struct ParallelSite<'a> {
    /// The run directory; worktrees go under `{run_dir}/branches/`.
    pub run_dir: &'a Path,
    /// The parallel node.
    pub node_id: &'a str,
    /// The parallel node's visit.
    pub visit: u32,
}

impl ParallelSite<'_> {
    /// `fabro/parallel/{run_id}/{node_id}/{visit}/{target}` (SPEC 5.7).
    pub(crate) fn branch_name(&self, run_id: &str, target: &str) -> String {
        format!(
            "fabro/parallel/{run_id}/{}/{}/{target}",
            self.node_id, self.visit
        )
    }

    /// `{run_dir}/branches/{node_id}@{visit}` (SPEC 5.7).
    pub(crate) fn branches_dir(&self) -> PathBuf {
        self.run_dir
            .join("branches")
            .join(format!("{}@{}", self.node_id, self.visit))
    }
}

impl CheckedOutBranch<'_> {
    /// SHA of the branch tip.
    pub(crate) fn head_sha(&self) -> String {
        self.head.to_string()
    }

    /// Whether `sha` names a commit of the repository.
    pub(crate) fn has_commit(&self, sha: &str) -> bool {
        Oid::from_str(sha).is_ok_and(|oid| self.repo.find_commit(oid).is_ok())
    }

    /// What removing the worktree that branch `target` of `site` had (or would have) takes:
    /// for the leftovers of an interrupted attempt whose branch is not created again.
    pub(crate) fn branch_cleanup(&self, site: &ParallelSite<'_>, target: &str) -> BranchCleanup {
        BranchCleanup {
            path: site.branches_dir().join(target),
            admin_dir: self
                .repo
                .commondir()
                .join("worktrees")
                .join(registration_name(self.run_id, site, target)),
        }
    }

    /// Commits the worktree's changes as the parallel base of `node_id` and returns the base
    /// SHA: the tip itself when nothing changed (the usual case, since the previous stage was
    /// committed), else a new commit `fabro({run_id}): {node_id} (parallel base)`.
    pub(crate) fn commit_base(&mut self, node_id: &str) -> Result<String, GitError> {
        let parent_tree = self
            .repo
            .find_commit(*self.head)
            .map_err(GitError::git("read the branch tip"))?
            .tree_id();
        let watch = match &mut self.watch {
            Ok(watch) => Ok(&mut **watch),
            Err(reason) => Err(*reason),
        };
        let paths = watched_paths(watch, self.force_full_scan, self.full_scans);
        let scope = match &paths {
            Some(paths) => Scope::Paths(paths),
            None => Scope::Full,
        };
        let tree = stage_worktree(self.repo, self.index, parent_tree, self.excludes, scope)?;
        if tree != parent_tree {
            let message = format!(
                "fabro({run_id}): {node_id} (parallel base)\n\nFabro-Run: {run_id}\n",
                run_id = self.run_id
            );
            *self.head = commit(
                self.repo,
                &self.reference,
                *self.head,
                tree,
                &message,
                self.author,
            )?;
        }
        Ok(self.head_sha())
    }

    /// Creates the worktree of branch `target` of a parallel stage at `base_sha`. A branch or
    /// worktree left by an interrupted earlier attempt of the same stage is replaced.
    pub(crate) fn create_branch(
        &self,
        site: &ParallelSite<'_>,
        target: &str,
        base_sha: &str,
    ) -> Result<BranchWorktree, GitError> {
        let base = Oid::from_str(base_sha).map_err(|_| GitError::UnknownCommit {
            sha: base_sha.to_owned(),
        })?;
        let common_dir = self.repo.commondir().to_path_buf();
        let main = Repository::open(&common_dir).map_err(GitError::git(format!(
            "open the repository at {}",
            common_dir.display()
        )))?;
        let base_commit = main
            .find_commit(base)
            .map_err(|_| GitError::UnknownCommit {
                sha: base_sha.to_owned(),
            })?;
        let branch_name = site.branch_name(self.run_id, target);
        let path = site.branches_dir().join(target);
        let registration = registration_name(self.run_id, site, target);
        let admin_dir = common_dir.join("worktrees").join(&registration);
        let _lock = super::worktree::RepoLock::acquire(&common_dir)?;
        remove_dir_if_present(&path)?;
        remove_dir_if_present(&admin_dir)?;
        let branch = main
            .branch(&branch_name, &base_commit, true)
            .map_err(GitError::git(format!("create branch {branch_name}")))?;
        if let Some(parent) = path.parent() {
            fs_err::create_dir_all(parent).map_err(GitError::io("create", parent))?;
        }
        let mut options = git2::WorktreeAddOptions::new();
        options.reference(Some(branch.get()));
        if let Err(source) = main.worktree(&registration, &path, Some(&options)) {
            let _ = remove_dir_if_present(&admin_dir);
            return Err(GitError::Git {
                action: format!("add worktree {}", path.display()),
                source,
            });
        }
        let repo = Repository::open(&path).map_err(GitError::git(format!(
            "open the repository at {}",
            path.display()
        )))?;
        let mut index = WorktreeIndex::open(&repo)?;
        index.split_now(&repo)?;
        // A branch without a watch scans its whole worktree after every stage (with the
        // run's `full_scan` warning).
        let watch = WorktreeWatch::start(&path, &admin_dir.join("fabro-watch"));
        Ok(BranchWorktree {
            index,
            watch,
            full_scans: self.full_scans.clone(),
            repo,
            label: format!("{}@{}/{target}", site.node_id, site.visit),
            reference: format!("refs/heads/{branch_name}"),
            path,
            admin_dir,
            head: base,
            excludes: self.excludes.clone(),
            author: self.author.clone(),
            run_id: self.run_id.to_owned(),
            work_dir_relative: self.work_dir_relative.to_path_buf(),
        })
    }

    /// Moves the branch to `target_sha`, a descendant of the parallel base, and resets the
    /// worktree and index to it (SPEC 5.8). Commits the branch made since the base (the
    /// merge base of the tip and the target) are replayed on top of the target, oldest first,
    /// with their messages, authors and changes; without them this is a fast-forward.
    /// Returns the new tip.
    pub(crate) fn advance(&mut self, target_sha: &str) -> Result<String, GitError> {
        let target = Oid::from_str(target_sha)
            .ok()
            .filter(|oid| self.repo.find_commit(*oid).is_ok())
            .ok_or_else(|| GitError::UnknownCommit {
                sha: target_sha.to_owned(),
            })?;
        let base = self
            .repo
            .merge_base(*self.head, target)
            .map_err(GitError::git(format!(
                "find the parallel base of {target_sha}"
            )))?;
        let replay = first_parent_chain(self.repo, *self.head, base)?;
        let mut tip = target;
        for oid in replay.into_iter().rev() {
            tip = replay_commit(self.repo, oid, tip)?;
        }
        let tip_commit = self
            .repo
            .find_commit(tip)
            .map_err(GitError::git("read the new branch tip"))?;
        let mut checkout = git2::build::CheckoutBuilder::new();
        checkout.force();
        // Checked out before the ref moves, so files of the old tip that the new one lacks are
        // removed (the baseline is the old HEAD).
        self.repo
            .checkout_tree(tip_commit.as_object(), Some(&mut checkout))
            .map_err(GitError::git(format!("check out {tip}")))?;
        self.index.changed_wholesale();
        self.index.write(self.repo)?;
        self.repo
            .reference(&self.reference, tip, true, "fabro: fan-in")
            .map_err(GitError::git(format!("move {}", self.reference)))?;
        *self.head = tip;
        Ok(tip.to_string())
    }
}

/// One parallel branch's own branch and worktree, owned by the branch's traversal.
pub(crate) struct BranchWorktree {
    /// The worktree's index.
    index: WorktreeIndex,
    /// The worktree's change feed (see [`RunGit`](super::RunGit)), or why there is none.
    watch: Result<WorktreeWatch, String>,
    /// The run's `full_scan` warning.
    full_scans: FullScanLog,
    repo: Repository,
    /// `{node_id}@{visit}/{target}`, the `Fabro-Parallel` trailer.
    label: String,
    reference: String,
    path: PathBuf,
    admin_dir: PathBuf,
    head: Oid,
    excludes: Excludes,
    author: Author,
    run_id: String,
    work_dir_relative: PathBuf,
}

impl std::fmt::Debug for BranchWorktree {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("BranchWorktree")
            .field("reference", &self.reference)
            .field("path", &self.path)
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl BranchWorktree {
    /// The branch's working directory: the worktree joined with the run's working directory
    /// relative to the repository root.
    pub(crate) fn work_dir(&self) -> PathBuf {
        self.path.join(&self.work_dir_relative)
    }

    /// SHA of the branch head.
    pub(crate) fn head_sha(&self) -> String {
        self.head.to_string()
    }

    /// What removing the worktree takes, for [`BranchCleanup::remove`].
    pub(crate) fn cleanup(&self) -> BranchCleanup {
        BranchCleanup {
            path: self.path.clone(),
            admin_dir: self.admin_dir.clone(),
        }
    }

    /// Test hook: this branch stages with full scans only, as without a watch.
    #[cfg(test)]
    pub(crate) fn without_watch(mut self) -> BranchWorktree {
        self.watch = Err("disabled by a test".to_owned());
        self
    }

    /// Test hook: whether the branch's worktree has a watch.
    #[cfg(test)]
    pub(crate) fn is_watched(&self) -> bool {
        self.watch.is_ok()
    }

    /// The branch as a line that a nested parallel stage or a fan-in can build on.
    pub(crate) fn checked_out(&mut self) -> CheckedOutBranch<'_> {
        CheckedOutBranch {
            repo: &self.repo,
            reference: self.reference.clone(),
            head: &mut self.head,
            index: &mut self.index,
            watch: self.watch.as_mut().map_err(|reason| reason.as_str()),
            force_full_scan: false,
            full_scans: &self.full_scans,
            excludes: &self.excludes,
            author: &self.author,
            run_id: &self.run_id,
            work_dir_relative: &self.work_dir_relative,
        }
    }

    /// Commits the worktree's changes after a branch stage (even when nothing changed), with
    /// the run branch's subject and the `Fabro-Run` and `Fabro-Parallel` trailers; returns
    /// the new head.
    pub(crate) fn commit_stage(&mut self, node_id: &str, status: &str) -> Result<String, GitError> {
        let parent_tree = self
            .repo
            .find_commit(self.head)
            .map_err(GitError::git("read the branch tip"))?
            .tree_id();
        let paths = watched_paths(
            self.watch.as_mut().map_err(|reason| reason.as_str()),
            false,
            &self.full_scans,
        );
        let scope = match &paths {
            Some(paths) => Scope::Paths(paths),
            None => Scope::Full,
        };
        let tree = stage_worktree(
            &self.repo,
            &mut self.index,
            parent_tree,
            &self.excludes,
            scope,
        )?;
        let message = branch_commit_message(&self.run_id, node_id, status, &self.label);
        self.head = commit(
            &self.repo,
            &self.reference,
            self.head,
            tree,
            &message,
            &self.author,
        )?;
        Ok(self.head_sha())
    }
}

/// The files of a branch worktree and its registration; removing them keeps the branch.
#[derive(Debug, Clone)]
pub(crate) struct BranchCleanup {
    path: PathBuf,
    admin_dir: PathBuf,
}

impl BranchCleanup {
    /// Deletes the worktree directory, its registration in `.git/worktrees`, and the
    /// `{node_id}@{visit}` directory above it once empty. The branch and its commits stay.
    pub(crate) fn remove(&self) -> Result<(), GitError> {
        // `{common_dir}/worktrees/{registration}`.
        let _lock = match self.admin_dir.parent().and_then(Path::parent) {
            Some(common_dir) => Some(super::worktree::RepoLock::acquire(common_dir)?),
            None => None,
        };
        remove_dir_if_present(&self.path)?;
        remove_dir_if_present(&self.admin_dir)?;
        if let Some(parent) = self.path.parent() {
            // Fails while other branches' worktrees remain; the last removal succeeds.
            let _ = std::fs::remove_dir(parent);
        }
        Ok(())
    }
}

/// The message of a branch-stage commit: the run-branch subject of SPEC 8.3, then the
/// `Fabro-Run` trailer and `Fabro-Parallel: {node_id}@{visit}/{target}`. No `Fabro-Checkpoint`:
/// branch stages are checkpointed with their parallel stage.
pub(crate) fn branch_commit_message(
    run_id: &str,
    node_id: &str,
    status: &str,
    parallel: &str,
) -> String {
    format!(
        "fabro({run_id}): {node_id} ({status})\n\n\
         Fabro-Run: {run_id}\n\
         Fabro-Parallel: {parallel}\n"
    )
}

/// The registration name in `.git/worktrees`: unique per run, parallel visit and target, made
/// of characters every file system accepts.
fn registration_name(run_id: &str, site: &ParallelSite<'_>, target: &str) -> String {
    let clean = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    // A hash keeps names apart that differ only in replaced characters.
    let digest = fnv1a(&format!("{}\0{}\0{target}", site.node_id, site.visit));
    format!(
        "fabro-par-{}-{}-{}-{}-{digest:08x}",
        clean(run_id),
        clean(site.node_id),
        site.visit,
        clean(target)
    )
}

/// FNV-1a, 32 bits: a stable, dependency-free name hash.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

fn commit(
    repo: &Repository,
    reference: &str,
    parent: Oid,
    tree: Oid,
    message: &str,
    author: &Author,
) -> Result<Oid, GitError> {
    let commit_error = || GitError::git(format!("commit to {reference}"));
    let tree = repo.find_tree(tree).map_err(commit_error())?;
    let parent = repo.find_commit(parent).map_err(commit_error())?;
    let signature = author.signature()?;
    repo.commit(
        Some(reference),
        &signature,
        &signature,
        message,
        &tree,
        &[&parent],
    )
    .map_err(commit_error())
}

/// The commits from `tip` back along first parents until `base` (excluded), newest first.
fn first_parent_chain(repo: &Repository, tip: Oid, base: Oid) -> Result<Vec<Oid>, GitError> {
    let walk_error = || GitError::git("walk the branch since the parallel base");
    let mut chain = Vec::new();
    let mut current = tip;
    while current != base {
        chain.push(current);
        let commit = repo.find_commit(current).map_err(walk_error())?;
        current = commit.parent_id(0).map_err(walk_error())?;
    }
    Ok(chain)
}

/// Re-creates commit `oid` on top of `onto`: an empty commit keeps `onto`'s tree, any other
/// is cherry-picked; a conflict is an error.
fn replay_commit(repo: &Repository, oid: Oid, onto: Oid) -> Result<Oid, GitError> {
    let replay_error = || GitError::git(format!("replay {oid} after the fan-in"));
    let commit = repo.find_commit(oid).map_err(replay_error())?;
    let onto_commit = repo.find_commit(onto).map_err(replay_error())?;
    let empty = commit
        .parent(0)
        .map(|parent| parent.tree_id() == commit.tree_id())
        .unwrap_or(false);
    let tree = if empty {
        onto_commit.tree_id()
    } else {
        let mut index = repo
            .cherrypick_commit(&commit, &onto_commit, 0, None)
            .map_err(replay_error())?;
        if index.has_conflicts() {
            return Err(GitError::ReplayConflict {
                sha: oid.to_string(),
            });
        }
        index.write_tree_to(repo).map_err(replay_error())?
    };
    let tree = repo.find_tree(tree).map_err(replay_error())?;
    let (author, committer) = (commit.author(), commit.committer());
    let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
    let replayed = repo
        .commit(None, &author, &committer, &message, &tree, &[&onto_commit])
        .map_err(replay_error())?;
    Ok(replayed)
}

fn remove_dir_if_present(path: &Path) -> Result<(), GitError> {
    match fs_err::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(GitError::Io {
            action: "remove",
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests;
