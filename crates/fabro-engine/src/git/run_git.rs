//! [`RunGit`]: one run's branch, worktree and metadata ref (SPEC 8.2–8.4, 8.6, 8.7 step 4).
//!
//! The repository is opened once, at the run's linked worktree; refs and objects are shared with
//! the user's repository, while `HEAD` and the index are the worktree's own. A file-system
//! watch on the worktree ([`WorktreeWatch`]) starts with it; a stage commit examines only the
//! paths it reported (a full scan when it cannot tell, with a `full_scan` warning once per
//! run), updates only the changed index entries, and builds the tree from the parent tree, so
//! unchanged directories are neither scanned nor rehashed (see [`stage_worktree`]).

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use super::exclude::Excludes;
use super::full_scan::{watched_paths, FullScanLog};
use super::history::metadata_tip;
use super::index_file::WorktreeIndex;
use super::message::{run_commit_message, MetadataMessage};
use super::metadata::{MetadataFile, MetadataTree, MetadataWrite};
use super::object::{commit_data, ObjectKind, RawObject};
use super::pack::PackStore;
use super::remote::RemotePush;
use super::stage::{stage_worktree, Scope};
use super::watch::WorktreeWatch;
use super::worktree::{
    add_worktree, find_commit, open, remote_tracking_refs, remove_dir_if_present,
    remove_lock_files, remove_worktree_files, worktree_admin_dir, RepoLock,
};
use super::{check_run_id, metadata_ref_name, run_branch_name, Author, GitError};

/// Per-run settings of [`RunGit`].
#[derive(Debug, Clone, Default)]
pub(crate) struct RunGitSettings {
    /// Author and committer of run-branch and metadata commits (`[git]`, SPEC 8.3).
    pub author: Author,
    /// `[checkpoint] exclude_globs`, gitignore syntax relative to the working directory.
    pub exclude_globs: Vec<String>,
    /// The working directory relative to the repository root, from
    /// [`RepoState::Clean`](super::RepoState::Clean) (empty when they are the same).
    pub work_dir_relative: PathBuf,
}

/// The changes of one stage, staged in the worktree's index but not yet committed.
///
/// Returned by [`RunGit::stage`]; pass it to [`RunGit::diff_patch`] for the stage's
/// `diff.patch` and to [`RunGit::commit`] after the metadata commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StagedChanges {
    tree: Oid,
    parent_tree: Oid,
}

impl StagedChanges {
    /// Whether the stage changed anything relative to the previous run-branch commit.
    pub(crate) fn is_empty(&self) -> bool {
        self.tree == self.parent_tree
    }
}

/// How many merged-away packs the repository handle may hold before it is reopened.
const REOPEN_AFTER_REMOVED_PACKS: usize = 64;

/// What a run-branch commit says about its stage (SPEC 8.3 subject and trailers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StageCommit<'a> {
    /// The stage's node.
    pub node_id: &'a str,
    /// The stage's status.
    pub status: &'a str,
    /// `Fabro-Completed`: completed stages, this one included.
    pub completed_count: usize,
}

/// One run's git state: the run branch `fabro/run/{run_id}`, its worktree, and the metadata
/// ref `refs/fabro/{run_id}`.
pub(crate) struct RunGit {
    repo: Repository,
    common_dir: PathBuf,
    run_id: String,
    worktree_path: PathBuf,
    work_dir_relative: PathBuf,
    author: Author,
    excludes: Excludes,
    head: Oid,
    metadata_tip: Option<Oid>,
    /// The tree of `metadata_tip`, kept between checkpoints; `None` until first needed.
    metadata_tree: Option<MetadataTree>,
    packs: PackStore,
    /// Packs merged away since `repo` was opened.
    removed_packs: usize,
    /// The worktree's index (libgit2's copy and the file git reads).
    index: WorktreeIndex,
    /// The worktree's change feed, or why there is none.
    watch: Result<WorktreeWatch, String>,
    /// The next stage scans the whole worktree whatever the watch says (after a resume).
    full_scan_next: bool,
    /// The run's `full_scan` warning (shared with its parallel branches' worktrees).
    full_scans: FullScanLog,
    /// Where the run's refs are pushed after each checkpoint (SPEC 18.3), if anywhere.
    remote: Option<RemotePush>,
}

impl std::fmt::Debug for RunGit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunGit")
            .field("run_id", &self.run_id)
            .field("worktree_path", &self.worktree_path)
            .field("head", &self.head)
            .field("metadata_tip", &self.metadata_tip)
            .finish_non_exhaustive()
    }
}

impl RunGit {
    /// Creates branch `fabro/run/{run_id}` at `base_sha` and a linked worktree at
    /// `worktree_path` checked out from it (SPEC 8.4).
    ///
    /// The user's `HEAD`, index, working tree and current branch are not touched; the parent of
    /// `worktree_path` is created when missing, `worktree_path` itself must not exist.
    /// Errors: [`GitError::BranchExists`], [`GitError::UnknownCommit`], libgit2 failures.
    pub(crate) fn create(
        repo_root: &Path,
        run_id: &str,
        base_sha: &str,
        worktree_path: &Path,
        settings: RunGitSettings,
    ) -> Result<RunGit, GitError> {
        check_run_id(run_id)?;
        let main = open(repo_root)?;
        let base = find_commit(&main, base_sha)?;
        let _lock = RepoLock::acquire(main.commondir())?;
        let branch_name = run_branch_name(run_id);
        if main
            .find_branch(&branch_name, git2::BranchType::Local)
            .is_ok()
        {
            return Err(GitError::BranchExists {
                branch: branch_name,
            });
        }
        let mut branch = main
            .branch(&branch_name, &base, false)
            .map_err(GitError::git(format!("create branch {branch_name}")))?;
        if let Err(error) = add_worktree(&main, run_id, worktree_path) {
            // Leave nothing behind that would make a second attempt fail with BranchExists.
            if let Err(cleanup) = branch.delete() {
                tracing::warn!(branch = %branch_name, error = %cleanup, "cannot delete the run branch after a failed worktree add");
            }
            if let Err(cleanup) = remove_dir_if_present(worktree_path) {
                tracing::warn!(error = %cleanup, "cannot remove a half-made run worktree");
            }
            return Err(error);
        }
        RunGit::open_worktree(&main, run_id, worktree_path, settings, false)
    }

    /// Re-attaches a fresh worktree at `worktree_path` to the existing run branch and resets
    /// the branch and the worktree to `commit_sha` (SPEC 8.7 step 4).
    ///
    /// The local branch is created from the commit when only a remote-tracking
    /// `{remote}/fabro/run/{run_id}` exists. Whatever the old worktree held (changes, untracked
    /// files, a half-deleted directory, a stale entry in `.git/worktrees`) is discarded.
    /// A directory at `worktree_path` that is not this run's worktree is refused with
    /// [`GitError::WorktreePathOccupied`] rather than deleted.
    pub(crate) fn reattach(
        repo_root: &Path,
        run_id: &str,
        worktree_path: &Path,
        commit_sha: &str,
        settings: RunGitSettings,
    ) -> Result<RunGit, GitError> {
        RunGit::reattach_or_create(
            repo_root,
            run_id,
            worktree_path,
            commit_sha,
            settings,
            false,
        )
    }

    /// [`reattach`](RunGit::reattach) for a run resumed from its initial checkpoint: when
    /// the run branch does not exist at all (the run was killed before its set-up made
    /// it), it is created at `commit_sha`, the base commit.
    pub(crate) fn restart(
        repo_root: &Path,
        run_id: &str,
        worktree_path: &Path,
        commit_sha: &str,
        settings: RunGitSettings,
    ) -> Result<RunGit, GitError> {
        RunGit::reattach_or_create(repo_root, run_id, worktree_path, commit_sha, settings, true)
    }

    fn reattach_or_create(
        repo_root: &Path,
        run_id: &str,
        worktree_path: &Path,
        commit_sha: &str,
        settings: RunGitSettings,
        create_missing: bool,
    ) -> Result<RunGit, GitError> {
        check_run_id(run_id)?;
        let main = open(repo_root)?;
        let _lock = RepoLock::acquire(main.commondir())?;
        // A process killed while updating the run's refs leaves their lock files behind;
        // the caller holds the run lock, so no live writer owns them.
        for reference in [
            format!("refs/heads/{}", run_branch_name(run_id)),
            metadata_ref_name(run_id),
        ] {
            let stale = main.path().join(format!("{reference}.lock"));
            let _ = fs_err::remove_file(stale);
        }
        remove_lock_files(
            &main
                .path()
                .join(format!("refs/heads/fabro/parallel/{run_id}")),
        );
        let commit = find_commit(&main, commit_sha)?;
        let branch_name = run_branch_name(run_id);
        let local = main
            .find_branch(&branch_name, git2::BranchType::Local)
            .is_ok();
        if !local
            && !create_missing
            && remote_tracking_refs(&main, &format!("fabro/run/{run_id}"))?.is_empty()
        {
            return Err(GitError::BranchMissing {
                branch: branch_name,
            });
        }
        remove_worktree_files(&main, run_id, worktree_path)?;
        main.reference(
            &format!("refs/heads/{branch_name}"),
            commit.id(),
            true,
            "fabro: reset run branch for resume",
        )
        .map_err(GitError::git(format!("reset branch {branch_name}")))?;
        add_worktree(&main, run_id, worktree_path)?;
        RunGit::open_worktree(&main, run_id, worktree_path, settings, true)
    }

    fn open_worktree(
        main: &Repository,
        run_id: &str,
        worktree_path: &Path,
        settings: RunGitSettings,
        resumed: bool,
    ) -> Result<RunGit, GitError> {
        // Refs are only ever pointed at commits fabro has just written (and synced), so
        // libgit2's existence check before each ref update (a lookup through every pack)
        // is skipped. The setting is process-wide.
        git2::opts::strict_object_creation(false);
        let repo = open(worktree_path)?;
        let head = repo
            .head()
            .and_then(|head| head.peel_to_commit())
            .map_err(GitError::git(format!(
                "read HEAD of worktree {}",
                worktree_path.display()
            )))?
            .id();
        let metadata_tip = metadata_tip(&repo, run_id)?;
        let excludes = Excludes::new(&settings.work_dir_relative, &settings.exclude_globs)?;
        let mut index = WorktreeIndex::open(&repo)?;
        index.split_now(&repo)?;
        let watch = WorktreeWatch::start(
            worktree_path,
            &worktree_admin_dir(main.commondir(), run_id).join("fabro-watch"),
        );
        Ok(RunGit {
            common_dir: main.commondir().to_path_buf(),
            repo,
            run_id: run_id.to_owned(),
            worktree_path: worktree_path.to_path_buf(),
            work_dir_relative: settings.work_dir_relative,
            author: settings.author,
            excludes,
            head,
            metadata_tip,
            metadata_tree: None,
            packs: PackStore::new(&main.commondir().join("objects"), true),
            removed_packs: 0,
            index,
            watch,
            full_scan_next: resumed,
            full_scans: FullScanLog::default(),
            remote: None,
        })
    }

    /// The worktree's root directory.
    #[cfg(test)]
    pub(crate) fn worktree_path(&self) -> &Path {
        &self.worktree_path
    }

    /// The run's working directory: the worktree joined with the working directory's path
    /// relative to the repository root.
    pub(crate) fn work_dir(&self) -> PathBuf {
        self.worktree_path.join(&self.work_dir_relative)
    }

    /// SHA of the run branch's tip (the base SHA before the first stage commit).
    pub(crate) fn head_sha(&self) -> String {
        self.head.to_string()
    }

    /// The run branch and its worktree, for parallel branches and the fan-in (SPEC 5.7, 5.8).
    pub(crate) fn checked_out(&mut self) -> super::CheckedOutBranch<'_> {
        super::CheckedOutBranch {
            repo: &self.repo,
            reference: format!("refs/heads/{}", run_branch_name(&self.run_id)),
            head: &mut self.head,
            index: &mut self.index,
            watch: self.watch.as_mut().map_err(|reason| reason.as_str()),
            force_full_scan: self.full_scan_next,
            full_scans: &self.full_scans,
            excludes: &self.excludes,
            author: &self.author,
            run_id: &self.run_id,
            work_dir_relative: &self.work_dir_relative,
        }
    }

    /// SHA of the newest metadata commit, if any has been written.
    pub(crate) fn metadata_sha(&self) -> Option<String> {
        self.metadata_tip.map(|oid| oid.to_string())
    }

    /// Whether the run's refs are pushed after each checkpoint.
    pub(crate) fn pushes(&self) -> bool {
        self.remote.is_some()
    }

    /// Pushes the run's refs to `remote` after each checkpoint from now on (SPEC 18.3).
    pub(crate) fn push_to(&mut self, remote: RemotePush) {
        self.remote = Some(remote);
    }

    /// Pushes the run branch and the metadata ref to the run's remote, if it has one: a
    /// compare-and-swap on what was last pushed, refused once another worker pushed.
    pub(crate) fn push(&mut self) -> Result<(), GitError> {
        let (Some(remote), Some(metadata)) = (self.remote.as_mut(), self.metadata_tip) else {
            return Ok(());
        };
        remote.push(
            &self.common_dir,
            &self.run_id,
            &self.head.to_string(),
            &metadata.to_string(),
        )
    }

    /// Writes a metadata commit on `refs/fabro/{run_id}` straight into the object database
    /// (SPEC 8.3): its tree is the previous metadata tree with `files` upserted (files of
    /// [`METADATA_FILE_LIMIT`](super::METADATA_FILE_LIMIT) bytes or more are skipped and
    /// listed), its parent the previous metadata commit (none for the first, which creates
    /// the ref). No index or worktree is involved.
    pub(crate) fn write_metadata(
        &mut self,
        message: MetadataMessage<'_>,
        files: &[MetadataFile<'_>],
    ) -> Result<MetadataWrite, GitError> {
        let mut objects = Vec::new();
        let (metadata, skipped) = self.metadata_commit(message, files, &mut objects)?;
        self.publish(&objects, Some(metadata), None)?;
        Ok(MetadataWrite {
            sha: metadata.to_string(),
            skipped,
        })
    }

    /// Steps 2 and 3 of the checkpoint cycle (SPEC 8.6) in one pack: the metadata commit
    /// of `files` (as [`write_metadata`](RunGit::write_metadata)) and the run-branch commit
    /// of `staged` naming it (as `commit` does). Both refs move only once every
    /// object is on disk, the metadata ref first.
    pub(crate) fn checkpoint_stage(
        &mut self,
        staged: StagedChanges,
        files: &[MetadataFile<'_>],
        stage: &StageCommit<'_>,
    ) -> Result<(MetadataWrite, String), GitError> {
        let mut objects = Vec::new();
        let (metadata, skipped) = self.metadata_commit(
            MetadataMessage::Checkpoint {
                node_id: stage.node_id,
            },
            files,
            &mut objects,
        )?;
        let head = self.run_commit(staged, stage, &metadata.to_string(), &mut objects)?;
        self.publish(&objects, Some(metadata), Some(head))?;
        Ok((
            MetadataWrite {
                sha: metadata.to_string(),
                skipped,
            },
            head.to_string(),
        ))
    }

    fn metadata_commit(
        &mut self,
        message: MetadataMessage<'_>,
        files: &[MetadataFile<'_>],
        objects: &mut Vec<RawObject>,
    ) -> Result<(Oid, Vec<String>), GitError> {
        let tree = match self.metadata_tree.take() {
            Some(tree) => tree,
            None => match self.metadata_tip {
                Some(tip) => MetadataTree::existing(
                    self.repo
                        .find_commit(tip)
                        .map_err(GitError::git("read the previous metadata commit"))?
                        .tree_id(),
                ),
                None => MetadataTree::empty(),
            },
        };
        let tree = self.metadata_tree.insert(tree);
        let (root, skipped) = tree.upsert(&self.repo, files, objects)?;
        let signature = self.author.signature()?;
        let parents: Vec<Oid> = self.metadata_tip.into_iter().collect();
        let commit = RawObject::new(
            ObjectKind::Commit,
            commit_data(root, &parents, &signature, &message.render(&self.run_id)),
        );
        let sha = commit.oid;
        objects.push(commit);
        Ok((sha, skipped))
    }

    fn run_commit(
        &self,
        staged: StagedChanges,
        stage: &StageCommit<'_>,
        metadata_sha: &str,
        objects: &mut Vec<RawObject>,
    ) -> Result<Oid, GitError> {
        let signature = self.author.signature()?;
        let message = run_commit_message(
            &self.run_id,
            stage.node_id,
            stage.status,
            stage.completed_count,
            metadata_sha,
        );
        let commit = RawObject::new(
            ObjectKind::Commit,
            commit_data(staged.tree, &[self.head], &signature, &message),
        );
        let sha = commit.oid;
        objects.push(commit);
        Ok(sha)
    }

    /// Writes `objects` as one pack, synced to disk, then moves the metadata ref and the run
    /// branch to the given commits. On failure the in-memory metadata tree is dropped, since
    /// it may name objects that never reached the disk.
    fn publish(
        &mut self,
        objects: &[RawObject],
        metadata: Option<Oid>,
        head: Option<Oid>,
    ) -> Result<(), GitError> {
        let objects_dir = self.common_dir.join("objects");
        let result = self
            .packs
            .write(objects)
            .map_err(GitError::io("write a pack in", objects_dir))
            .and_then(|()| {
                if let Some(metadata) = metadata {
                    self.move_ref(&metadata_ref_name(&self.run_id), metadata)?;
                    self.metadata_tip = Some(metadata);
                }
                if let Some(head) = head {
                    self.move_ref(
                        &format!("refs/heads/{}", run_branch_name(&self.run_id)),
                        head,
                    )?;
                    self.head = head;
                }
                Ok(())
            });
        if result.is_err() {
            self.metadata_tree = None;
        }
        result?;
        self.removed_packs += self.packs.take_removed();
        if self.removed_packs >= REOPEN_AFTER_REMOVED_PACKS {
            // libgit2 keeps every pack it has seen open and mapped, merged-away ones too;
            // a fresh handle lets go of them (bounding memory and file descriptors).
            let fresh = open(&self.worktree_path)?;
            WorktreeIndex::reopen(&mut self.repo, fresh)?;
            self.removed_packs = 0;
        }
        Ok(())
    }

    /// Points the ref `name` at `target`, which is already on disk.
    ///
    /// An existing loose ref is overwritten in place: one 41-byte write to one sector, where
    /// libgit2 would create a lock file and rename it over the ref, allocating an inode and
    /// freeing one per ref and stage. On ext4 without a journal every freed inode slows
    /// later file creation for seconds to minutes, which made long runs quadratic. An
    /// interrupted write is covered like any lost ref update: resume moves the refs forward
    /// from the journal ([`RunHistory::recover_refs`](super::RunHistory::recover_refs)).
    /// The first write of a ref, a symbolic or packed ref, goes through libgit2 (with a
    /// reflog entry); the in-place updates add none.
    fn move_ref(&self, name: &str, target: Oid) -> Result<(), GitError> {
        let path = self.common_dir.join(name);
        let line = format!("{target}\n");
        let overwritten = (|| -> std::io::Result<bool> {
            use std::os::unix::fs::FileExt;
            let file = match fs_err::OpenOptions::new().write(true).open(&path) {
                Ok(file) => file,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(error) => return Err(error),
            };
            if file.metadata()?.len() != line.len() as u64 {
                return Ok(false);
            }
            file.file().write_all_at(line.as_bytes(), 0)?;
            Ok(true)
        })()
        .map_err(GitError::io("update", path))?;
        if !overwritten {
            self.repo
                .reference(name, target, true, "fabro: checkpoint")
                .map_err(GitError::git(format!("update {name}")))?;
        }
        Ok(())
    }

    /// Stages every change in the worktree except the exclusions of SPEC 8.3 (configured
    /// globs, `.fabro/blobs/`, `.fabro/artifacts/`, and files the repository ignores) and
    /// writes the staged tree. Nothing is committed yet. Only the paths the watch reported
    /// are examined; the whole worktree when the watch cannot tell (then
    /// [`take_full_scan_warning`](RunGit::take_full_scan_warning) has the reason) and in the
    /// first stage after a resume.
    pub(crate) fn stage(&mut self) -> Result<StagedChanges, GitError> {
        let parent_tree = self
            .repo
            .find_commit(self.head)
            .map_err(GitError::git("read the run branch tip"))?
            .tree_id();
        let full_scan_next = std::mem::take(&mut self.full_scan_next);
        let paths = watched_paths(
            self.watch.as_mut().map_err(|reason| reason.as_str()),
            full_scan_next,
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
        Ok(StagedChanges { tree, parent_tree })
    }

    /// Test hook: this run stages with full scans only, as without a watch.
    #[cfg(test)]
    pub(crate) fn without_watch(mut self) -> RunGit {
        self.watch = Err("disabled by a test".to_owned());
        self
    }

    /// Test hook: the worktree's index file is split from `entries` entries on.
    #[cfg(test)]
    pub(crate) fn split_index_from(mut self, entries: usize) -> RunGit {
        self.index = self.index.with_split_min(entries);
        self
    }

    /// Test hook: commits are not synced to disk (many stages in a test stay fast).
    #[cfg(test)]
    pub(crate) fn volatile(mut self) -> RunGit {
        self.packs = PackStore::new(&self.common_dir.join("objects"), false);
        self
    }

    /// Test hook: the run's record of full scans.
    #[cfg(test)]
    pub(crate) fn full_scans(&self) -> &FullScanLog {
        &self.full_scans
    }

    /// Test hook: the worktree's watch, if it has one.
    #[cfg(test)]
    pub(crate) fn watch(&self) -> Option<&WorktreeWatch> {
        self.watch.as_ref().ok()
    }

    /// A second reader of the worktree's watch (asset capture), with the working directory
    /// relative to the worktree root; `None` without a watch.
    pub(crate) fn change_feed(&self) -> Option<(super::ChangeFeed, PathBuf)> {
        let watch = self.watch.as_ref().ok()?;
        Some((watch.feed(), self.work_dir_relative.clone()))
    }

    /// The agents' file tracking from the worktree's watch (SPEC 7.6, 13.4); `None` without
    /// a watch (agents then take git snapshots).
    pub(crate) fn change_tracker(&self) -> Option<fabro_agent::ChangeTracker> {
        let watch = self.watch.as_ref().ok()?;
        Some(fabro_agent::ChangeTracker::new(Box::new(watch.feed())))
    }

    /// Why a stage scanned the whole worktree instead of the watched paths, once per run
    /// (the `Warning` with code `full_scan`); `None` otherwise and after the first call
    /// that returned it.
    pub(crate) fn take_full_scan_warning(&mut self) -> Option<String> {
        self.full_scans.take()
    }

    /// The patch of `staged` against the previous run-branch commit (the stage's
    /// `diff.patch`, SPEC 7.5); `None` when it would reach `limit` bytes.
    pub(crate) fn diff_patch(
        &self,
        staged: &StagedChanges,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, GitError> {
        if staged.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let diff = self.staged_diff(staged)?;
        let mut patch = Vec::new();
        let mut too_big = false;
        let printed = diff.print(git2::DiffFormat::Patch, |_, _, line| {
            if matches!(line.origin(), '+' | '-' | ' ') {
                patch.push(line.origin() as u8);
            }
            patch.extend_from_slice(line.content());
            too_big = patch.len() >= limit;
            !too_big
        });
        if too_big {
            return Ok(None);
        }
        printed.map_err(GitError::git("diff the staged changes"))?;
        Ok(Some(patch))
    }

    /// The paths `staged` changes against the previous run-branch commit, sorted (a
    /// command stage's `files_touched`, SPEC 17.7).
    pub(crate) fn changed_paths(&self, staged: &StagedChanges) -> Result<Vec<String>, GitError> {
        if staged.is_empty() {
            return Ok(Vec::new());
        }
        let mut paths =
            super::tree_diff::changed_paths(&self.repo, staged.parent_tree, staged.tree)?;
        paths.sort();
        paths.dedup();
        Ok(paths)
    }

    /// The diff of `staged` against the previous run-branch commit, limited to the paths
    /// that differ (libgit2 would otherwise walk both whole trees).
    fn staged_diff(&self, staged: &StagedChanges) -> Result<git2::Diff<'_>, GitError> {
        let diff_error = || GitError::git("diff the staged changes");
        let paths = super::tree_diff::changed_paths(&self.repo, staged.parent_tree, staged.tree)?;
        let old = self
            .repo
            .find_tree(staged.parent_tree)
            .map_err(diff_error())?;
        let new = self.repo.find_tree(staged.tree).map_err(diff_error())?;
        let mut options = git2::DiffOptions::new();
        options.disable_pathspec_match(true);
        for path in &paths {
            options.pathspec(path);
        }
        self.repo
            .diff_tree_to_tree(Some(&old), Some(&new), Some(&mut options))
            .map_err(diff_error())
    }

    /// Commits `staged` on the run branch with the subject and trailers of SPEC 8.3 (even when
    /// nothing changed) and returns the commit's SHA.
    #[cfg(test)]
    pub(crate) fn commit(
        &mut self,
        staged: StagedChanges,
        node_id: &str,
        status: &str,
        completed_count: usize,
        metadata_sha: &str,
    ) -> Result<String, GitError> {
        let mut objects = Vec::new();
        let stage = StageCommit {
            node_id,
            status,
            completed_count,
        };
        let head = self.run_commit(staged, &stage, metadata_sha, &mut objects)?;
        self.publish(&objects, None, Some(head))?;
        Ok(head.to_string())
    }

    /// [`stage`](RunGit::stage) then [`commit`](RunGit::commit): the run-branch commit of one
    /// stage (step 3 of SPEC 8.6) for callers that do not need the stage's `diff.patch`.
    #[cfg(test)]
    pub(crate) fn commit_stage(
        &mut self,
        node_id: &str,
        status: &str,
        completed_count: usize,
        metadata_sha: &str,
    ) -> Result<String, GitError> {
        let staged = self.stage()?;
        self.commit(staged, node_id, status, completed_count, metadata_sha)
    }

    /// Flushes the file system holding the repository (`syncfs`), so the commits and refs
    /// written so far survive an operating-system crash (SPEC 13.2).
    ///
    /// libgit2 does not fsync what it writes; one `syncfs` per checkpoint cycle covers the
    /// loose objects, refs and index of both commits (and anything else dirty on that file
    /// system, such as the run directory when it lives there too).
    #[cfg(test)]
    pub(crate) fn sync_to_disk(&self) -> Result<(), GitError> {
        let directory = fs_err::File::open(&self.common_dir)
            .map_err(GitError::io("open", self.common_dir.clone()))?;
        nix::unistd::syncfs(directory.file())
            .map_err(|errno| std::io::Error::from_raw_os_error(errno as i32))
            .map_err(GitError::io("sync", self.common_dir.clone()))
    }

    /// Removes the worktree and its registration, keeping the run branch and the metadata ref
    /// (SPEC 8.4: a run that finished is not kept checked out).
    pub(crate) fn remove_worktree(self) -> Result<(), GitError> {
        let RunGit {
            repo,
            run_id,
            worktree_path,
            common_dir,
            watch,
            ..
        } = self;
        drop(watch);
        drop(repo);
        let _lock = RepoLock::acquire(&common_dir)?;
        remove_dir_if_present(&worktree_path)?;
        remove_dir_if_present(&worktree_admin_dir(&common_dir, &run_id))
    }
}

#[cfg(test)]
mod tests;
