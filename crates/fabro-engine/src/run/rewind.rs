//! [`rewind`] (SPEC 20.3): a run that is not running moves back to the checkpoint
//! written after one of its stages, so that `fabro resume` continues from there.
//!
//! Nothing is deleted. The rewind is recorded first ([`PendingRewind`], through the
//! store), then carried out in steps that can each be done again: with git, the run
//! branch's head kept as `refs/fabro-rewound/{id}/{k}`, a metadata commit holding the
//! checkpoint gone back to, and the run branch moved to that checkpoint's commit; the
//! later stage directories moved to `{run_dir}/rewound/{k}/stages/` (with the branch
//! records of a later parallel stage, to `rewound/{k}/parallel/`); the checkpoint
//! appended to the run's log; `RunRewound {to_rank, k}` appended to its events; the run
//! listed as not finished; and the record cleared. A rewind killed at any point is
//! finished by the next `fabro rewind` of the run or by `fabro resume`
//! ([`finish_pending`]), before anything reads the run's state.
//!
//! The test hook `FABRO_TEST_PAUSE_AT` pauses a rewind at `rewind_recorded` (after the
//! record), `rewind_git` (after the git steps) and `rewind_stages` (after the stage
//! directories moved).

use std::path::{Path, PathBuf};

use super::git_plan::git_settings;
use super::point::{self, StagePoint};
use super::watchdog::pause_for_tests;
use super::RunError;
use crate::event::kind::RunRewound;
use crate::event::{Emitter, Event, EventKind};
use crate::git::RewindGit;
use crate::id::RunId;
use crate::journal::ChangeHint;
use crate::record::{Manifest, PendingRewind};
use crate::run_dir::{RunPaths, REWOUND_DIR};
use crate::run_index::{RunIndexError, RunStatus};
use crate::run_stages::list_stages;
use crate::store::{Opening, StoreError, Stores};

/// Where finished parallel branches are recorded, per parallel stage (`{node}@{visit}`).
const PARALLEL_DIR: &str = "parallel";

/// What a client asks of a rewind.
#[derive(Debug, Clone)]
pub struct RewindRequest {
    /// The storage root (`$FABRO_HOME`).
    pub fabro_home: PathBuf,
    /// `--to NODE[@VISIT]` or `--to-rank N`.
    pub to: StagePoint,
}

/// What a rewind did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewound {
    /// The run.
    pub run_id: String,
    /// The rewind's number in the run, from 1.
    pub k: u32,
    /// The rank of the stage the run went back to.
    pub to_rank: u32,
    /// That stage's node.
    pub node_id: String,
    /// That stage's visit.
    pub visit: u32,
}

impl Rewound {
    fn of(run_id: &RunId, pending: &PendingRewind) -> Rewound {
        Rewound {
            run_id: run_id.as_str().to_owned(),
            k: pending.k,
            to_rank: pending.to_rank,
            node_id: pending.node_id.clone(),
            visit: pending.visit,
        }
    }
}

/// Moves run `run_id` back to the checkpoint written after the stage `request.to`
/// names (SPEC 20.3). A running run is refused ([`RunError::Running`]). An unfinished
/// earlier rewind is finished first; when it went to the same stage, that is the
/// rewind done.
pub fn rewind(
    stores: &Stores,
    run_id: &RunId,
    request: RewindRequest,
) -> Result<Rewound, RunError> {
    let RewindRequest { fabro_home, to } = request;
    let paths = RunPaths::new(&fabro_home, run_id.as_str());
    let manifest = stores
        .runs
        .read_manifest(run_id)
        .map_err(|_| RunError::NoRunDir {
            run_id: run_id.as_str().to_owned(),
            root: fabro_home.clone(),
        })?;
    let _lease = stores.runs.lock(run_id).map_err(|error| match error {
        StoreError::Locked { .. } | StoreError::Index(RunIndexError::Locked { .. }) => {
            RunError::Running {
                run_id: run_id.as_str().to_owned(),
            }
        }
        error => RunError::from(error),
    })?;
    let steps = Steps {
        stores,
        run_id,
        paths: &paths,
        manifest: &manifest,
    };
    if let Some(pending) = stores.runs.pending_rewind(run_id)? {
        steps.finish(&pending)?;
        if same_stage(&pending, &to) {
            return Ok(Rewound::of(run_id, &pending));
        }
    }
    let git = steps.git()?;
    let chosen = point::after_stage(stores, run_id, paths.run_dir(), git.is_some(), &to)?;
    let mut checkpoint = chosen.checkpoint;
    checkpoint.run_status = RunStatus::Running;
    checkpoint.timestamp = crate::timestamp::now_rfc3339();
    let mut numbers = rewound_dirs(paths.run_dir());
    if let Some(git) = &git {
        numbers.extend(
            git.rewound_numbers()
                .map_err(|source| steps.failed(source))?,
        );
    }
    let pending = PendingRewind {
        k: numbers.into_iter().max().unwrap_or(0) + 1,
        to_rank: chosen.rank,
        node_id: chosen.node_id.unwrap_or_default(),
        visit: chosen.visit,
        old_head: git.as_ref().and_then(RewindGit::run_branch_head),
        checkpoint,
    };
    stores.runs.set_pending_rewind(run_id, Some(&pending))?;
    pause_for_tests("rewind_recorded", &fabro_home);
    steps.finish(&pending)?;
    Ok(Rewound::of(run_id, &pending))
}

/// Finishes run `run_id`'s unfinished rewind, if it has one; the caller holds the run's
/// lock (a resume, before it reads the run's state).
pub(super) fn finish_pending(
    stores: &Stores,
    run_id: &RunId,
    fabro_home: &Path,
) -> Result<(), RunError> {
    let Some(pending) = stores.runs.pending_rewind(run_id)? else {
        return Ok(());
    };
    let manifest = stores.runs.read_manifest(run_id)?;
    let paths = RunPaths::new(fabro_home, run_id.as_str());
    Steps {
        stores,
        run_id,
        paths: &paths,
        manifest: &manifest,
    }
    .finish(&pending)
}

/// Whether an unfinished rewind went to the stage `to` names.
fn same_stage(pending: &PendingRewind, to: &StagePoint) -> bool {
    match to {
        StagePoint::Rank(rank) => pending.to_rank == *rank,
        StagePoint::Node { node_id, visit } => {
            &pending.node_id == node_id && visit.is_none_or(|visit| visit == pending.visit)
        }
    }
}

/// The numbers of the run's `rewound/{k}` directories.
fn rewound_dirs(run_dir: &Path) -> Vec<u32> {
    fs_err::read_dir(run_dir.join(REWOUND_DIR))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The steps of one run's rewind.
struct Steps<'a> {
    stores: &'a Stores,
    run_id: &'a RunId,
    paths: &'a RunPaths,
    manifest: &'a Manifest,
}

impl Steps<'_> {
    /// The run's refs, with git checkpointing.
    fn git(&self) -> Result<Option<RewindGit>, RunError> {
        let (Some(_), Some(repo_root)) = (&self.manifest.run_branch, &self.manifest.repo_root)
        else {
            return Ok(None);
        };
        RewindGit::open(Path::new(repo_root), self.run_id.as_str())
            .map(Some)
            .map_err(|source| self.failed(source))
    }

    fn failed(&self, source: crate::git::GitError) -> RunError {
        RunError::Rewind {
            run_id: self.run_id.as_str().to_owned(),
            source,
        }
    }

    /// Every step of `pending`, each done again or found done, then the record cleared.
    fn finish(&self, pending: &PendingRewind) -> Result<(), RunError> {
        let home = self.paths.root();
        if let Some(git) = self.git()? {
            self.move_refs(&git, pending)?;
        }
        pause_for_tests("rewind_git", home);
        self.move_stages(pending)?;
        let runs = &self.stores.runs;
        runs.rewind_stages(self.run_id, pending.k, pending.checkpoint.stage_rank)?;
        pause_for_tests("rewind_stages", home);
        let mut log = runs.open_checkpoints(self.run_id, Opening::Resume)?;
        if log.last() != Some(&pending.checkpoint) {
            log.write(&pending.checkpoint.view(), &ChangeHint::everything())
                .map_err(StoreError::from)?;
        }
        self.append_event(pending)?;
        runs.register_start(self.manifest, self.paths.run_dir())?;
        runs.set_pending_rewind(self.run_id, None)?;
        Ok(())
    }

    /// The previous head kept, the rewind's metadata commit, the branch moved back.
    fn move_refs(&self, git: &RewindGit, pending: &PendingRewind) -> Result<(), RunError> {
        let Some(commit) = pending.checkpoint.git_commit_sha.as_deref() else {
            return Ok(());
        };
        if let Some(old_head) = &pending.old_head {
            git.keep_rewound(pending.k, old_head)
                .map_err(|source| self.failed(source))?;
        }
        let mut bytes = serde_json::to_vec(&pending.checkpoint).map_err(|error| {
            RunError::from(StoreError::Io {
                action: "cannot serialise the checkpoint of",
                path: self.paths.run_dir().to_path_buf(),
                source: std::io::Error::from(error),
            })
        })?;
        bytes.push(b'\n');
        let config = self.stores.runs.read_config(self.run_id)?;
        let author = git_settings(&config, PathBuf::new()).author;
        git.record_rewind(pending.k, commit, &bytes, &author)
            .and_then(|()| git.move_branch(commit))
            .map_err(|source| self.failed(source))
    }

    /// The stage directories after the checkpoint moved to `rewound/{k}/stages/`.
    fn move_stages(&self, pending: &PendingRewind) -> Result<(), RunError> {
        let stages = list_stages(self.paths.run_dir()).map_err(|error| RunError::Io {
            action: "cannot list the stages of",
            path: self.paths.run_dir().to_path_buf(),
            source: std::io::Error::other(error.to_string()),
        })?;
        let target = self.paths.rewound_stages(pending.k);
        for stage in stages
            .iter()
            .filter(|stage| stage.rank > pending.checkpoint.stage_rank)
        {
            let Some(name) = stage.path.file_name() else {
                continue;
            };
            let io = |action| {
                move |source| RunError::Io {
                    action,
                    path: stage.path.clone(),
                    source,
                }
            };
            // A parallel stage's finished branches go with it (first, so that a rewind
            // done again still finds the stage), so that the stage runs its branches
            // again instead of reusing those of the old line.
            let key = format!("{}@{}", stage.node_id, stage.visit);
            let records = self.paths.run_dir().join(PARALLEL_DIR).join(&key);
            if records.is_dir() {
                let moved = target.with_file_name(PARALLEL_DIR);
                fs_err::create_dir_all(&moved)
                    .map_err(io("cannot create the rewound branches of"))?;
                fs_err::rename(&records, moved.join(&key)).map_err(io("cannot move"))?;
            }
            fs_err::create_dir_all(&target).map_err(io("cannot create the rewound stages of"))?;
            fs_err::rename(&stage.path, target.join(name)).map_err(io("cannot move"))?;
        }
        Ok(())
    }

    /// `RunRewound {to_rank, k}`, unless it is the run's last event already.
    fn append_event(&self, pending: &PendingRewind) -> Result<(), RunError> {
        let runs = &self.stores.runs;
        let opened = runs.open_events(self.run_id, Opening::Resume)?;
        let last = runs.read_events(self.run_id, opened.next_id.saturating_sub(1))?;
        let done = last.last().is_some_and(|envelope| {
            matches!(&envelope.kind, EventKind::RunRewound(rewound) if rewound.k == pending.k)
        });
        if done {
            return Ok(());
        }
        let emitter =
            Emitter::with_log(self.run_id.as_str(), opened.log, opened.next_id, Vec::new());
        emitter.emit(Event::run(RunRewound {
            k: pending.k,
            to_rank: pending.to_rank,
        }));
        match emitter.storage_failure() {
            Some(reason) => Err(RunError::from(StoreError::Io {
                action: "cannot append to the events of",
                path: self.paths.run_dir().to_path_buf(),
                source: std::io::Error::other(reason.to_owned()),
            })),
            None => Ok(()),
        }
    }
}
