//! Runs with git checkpointing (SPEC 8.1, 8.7 step 2): their newest complete checkpoint
//! comes from the metadata history in the run's repository ([`newest`]), and a run
//! whose records are lost gets them back from its newest complete metadata commit
//! ([`restore_records`]).

use std::path::{Component, Path};

use super::{RunRecords, RunStore, StoreError};
use crate::checkpoint::{load_newest, load_newest_from_git, LoadError};
use crate::config::RunConfig;
use crate::git::{GitError, RunHistory};
use crate::id::RunId;
use crate::record::{Checkpoint, Manifest};

/// The newest complete checkpoint of the run in `run_dir`. A run whose `manifest` names
/// a run branch and a repository resumes from its metadata history; killed before the
/// initial metadata commit (no stage ran), it starts over from its initial checkpoint at
/// the base commit (a fork's is the commit it was forked at). Any other run resumes from its journal or `checkpoint.json`.
pub(crate) fn newest(
    manifest: Option<&Manifest>,
    run_dir: &Path,
    run_id: &str,
) -> Result<Option<Checkpoint>, LoadError> {
    let git = manifest.filter(|manifest| manifest.run_branch.is_some());
    let Some((manifest, repo_root)) =
        git.and_then(|manifest| Some((manifest, manifest.repo_root.as_deref()?)))
    else {
        return load_newest(run_dir);
    };
    if let Some(checkpoint) = load_newest_from_git(Path::new(repo_root), run_dir, run_id)? {
        return Ok(Some(checkpoint));
    }
    // A fork's initial checkpoint has the stages of its source (SPEC 20.2).
    let fork = manifest.forked_from.is_some();
    Ok(load_newest(run_dir)?
        .filter(|checkpoint| checkpoint.completed_nodes.is_empty() || fork)
        .map(|mut checkpoint| {
            checkpoint.git_commit_sha.clone_from(&manifest.base_sha);
            checkpoint
        }))
}

/// Why a run's records could not be restored from its metadata history.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The repository could not be read.
    #[error(transparent)]
    Git(#[from] GitError),
    /// No metadata commit of the run is complete.
    #[error("run {run_id} has no complete checkpoint in the repository's metadata")]
    NoCompleteCheckpoint {
        /// The run.
        run_id: String,
    },
    /// A complete metadata commit lacks a record.
    #[error("metadata commit {sha} of run {run_id} has no {name}")]
    MissingFile {
        /// The run.
        run_id: String,
        /// The metadata commit.
        sha: String,
        /// The record's file name.
        name: &'static str,
    },
    /// A record of the metadata commit is not valid.
    #[error("{name} of metadata commit {sha} is not valid")]
    InvalidFile {
        /// The metadata commit.
        sha: String,
        /// The record's file name.
        name: &'static str,
        /// What is wrong.
        #[source]
        source: serde_json::Error,
    },
    /// The restored records could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// SPEC 8.7 step 2: a run without records whose metadata is in `history` gets them back
/// from the newest complete metadata commit: the manifest (naming `history`'s
/// repository, where the run continues), the workflow, its children and the
/// configuration. `Ok(false)` when `history` has no metadata of the run.
pub(crate) fn restore_records(
    store: &dyn RunStore,
    history: &RunHistory,
    run_id: &RunId,
) -> Result<bool, RestoreError> {
    let id = run_id.as_str();
    if history.metadata_tip(id)?.is_none() {
        return Ok(false);
    }
    let sha = history.newest_complete_metadata(id)?.ok_or_else(|| {
        RestoreError::NoCompleteCheckpoint {
            run_id: id.to_owned(),
        }
    })?;
    let read = |name: &'static str| -> Result<Vec<u8>, RestoreError> {
        history
            .read_file(&sha, name)?
            .ok_or_else(|| RestoreError::MissingFile {
                run_id: id.to_owned(),
                sha: sha.clone(),
                name,
            })
    };
    let invalid = |name: &'static str| {
        let sha = sha.clone();
        move |source| RestoreError::InvalidFile { sha, name, source }
    };
    let mut manifest: Manifest =
        serde_json::from_slice(&read("manifest.json")?).map_err(invalid("manifest.json"))?;
    if let Some(work_dir) = history.work_dir() {
        let root = work_dir
            .canonicalize()
            .unwrap_or_else(|_| work_dir.to_path_buf());
        manifest.repo_root = Some(root.display().to_string());
    }
    let graph = String::from_utf8_lossy(&read("graph.fabro")?).into_owned();
    let config: RunConfig =
        serde_json::from_slice(&read("config.json")?).map_err(invalid("config.json"))?;
    let prefix = format!("{}/", super::CHILDREN_DIR);
    let children: Vec<(String, String)> = history
        .read_dir(&sha, super::CHILDREN_DIR)?
        .into_iter()
        .filter_map(|(path, bytes)| {
            let name = path.strip_prefix(&prefix)?.to_owned();
            // Paths come from a tree the run wrote; anything that would leave the run
            // directory is not one of its children.
            let inside = Path::new(&name)
                .components()
                .all(|component| matches!(component, Component::Normal(_)));
            inside.then(|| (name, String::from_utf8_lossy(&bytes).into_owned()))
        })
        .collect();
    store.write_records(
        run_id,
        &RunRecords {
            graph: &graph,
            children: &children,
            config: &config,
            manifest: &manifest,
            run_dir: None,
        },
    )?;
    Ok(true)
}
