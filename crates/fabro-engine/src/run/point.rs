//! Which checkpoint a fork or a rewind starts from (SPEC 20.2, 20.3): a stage named as
//! `NODE[@VISIT]` or by its rank ([`StagePoint`]), and the checkpoint written after it
//! on the run's current line of history ([`after_stage`]); a fork without a stage takes
//! the newest complete checkpoint ([`newest`]).
//!
//! The run's checkpoints come from its store, oldest first. A rewind appends an earlier
//! state, so the log holds checkpoints that were rewound away: a checkpoint counts only
//! while every later one continues it (its completed stages start with the earlier
//! one's). With git checkpointing a checkpoint is complete once it names its run-branch
//! commit (SPEC 8.6).

use std::fmt;
use std::path::Path;

use super::RunError;
use crate::id::RunId;
use crate::record::Checkpoint;
use crate::run_stages::{list_stages, StageDir};
use crate::store::Stores;

/// A stage of a run, as `fabro fork --at`, `fabro rewind --to` and their `--*-rank`
/// flags name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StagePoint {
    /// `NODE` (its latest visit) or `NODE@VISIT`.
    Node {
        /// The node.
        node_id: String,
        /// The run-wide visit; `None`: the node's latest.
        visit: Option<u32>,
    },
    /// The stage of this rank.
    Rank(u32),
}

impl StagePoint {
    /// `NODE[@VISIT]`: a trailing `@` and digits is the visit, anything else the node.
    pub fn parse_node(text: &str) -> StagePoint {
        match text.rsplit_once('@') {
            Some((node_id, visit))
                if !node_id.is_empty()
                    && !visit.is_empty()
                    && visit.bytes().all(|byte| byte.is_ascii_digit()) =>
            {
                StagePoint::Node {
                    node_id: node_id.to_owned(),
                    visit: visit.parse().ok(),
                }
            }
            _ => StagePoint::Node {
                node_id: text.to_owned(),
                visit: None,
            },
        }
    }
}

impl fmt::Display for StagePoint {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StagePoint::Node {
                node_id,
                visit: Some(visit),
            } => write!(formatter, "{node_id}@{visit}"),
            StagePoint::Node {
                node_id,
                visit: None,
            } => write!(formatter, "{node_id}"),
            StagePoint::Rank(rank) => write!(formatter, "of rank {rank}"),
        }
    }
}

/// A checkpoint chosen to continue from, with the stage it was written after.
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    /// The checkpoint as written (its status is the source's).
    pub(crate) checkpoint: Checkpoint,
    /// The stage's rank (0 for the initial checkpoint).
    pub(crate) rank: u32,
    /// The stage's node (`None` for the initial checkpoint).
    pub(crate) node_id: Option<String>,
    /// The stage's visit.
    pub(crate) visit: u32,
}

/// The checkpoint written after the stage `point` names, on the run's current line.
/// `git`: the run checkpoints into git, so only checkpoints naming their run-branch
/// commit are complete.
pub(crate) fn after_stage(
    stores: &Stores,
    run_id: &RunId,
    run_dir: &Path,
    git: bool,
    point: &StagePoint,
) -> Result<Chosen, RunError> {
    let stages = list_stages(run_dir).map_err(|error| RunError::Io {
        action: "cannot list the stages of",
        path: run_dir.to_path_buf(),
        source: std::io::Error::other(error.to_string()),
    })?;
    let no_stage = || RunError::NoSuchStage {
        run_id: run_id.as_str().to_owned(),
        stage: point.to_string(),
    };
    let (node_id, visit) = match point {
        StagePoint::Rank(rank) => stages
            .iter()
            .find(|stage| stage.rank == *rank)
            .map(|stage| (stage.node_id.clone(), stage.visit))
            .ok_or_else(no_stage)?,
        StagePoint::Node {
            node_id,
            visit: Some(visit),
        } => (node_id.clone(), *visit),
        StagePoint::Node {
            node_id,
            visit: None,
        } => stages
            .iter()
            .filter(|stage| &stage.node_id == node_id)
            .map(|stage| stage.visit)
            .max()
            .map(|visit| (node_id.clone(), visit))
            .ok_or_else(no_stage)?,
    };
    let wanted = |checkpoint: &Checkpoint| {
        checkpoint.current_node.as_deref() == Some(node_id.as_str())
            && checkpoint.node_visits.get(&node_id) == Some(&visit)
            && (!git || checkpoint.git_commit_sha.is_some())
    };
    let mut found: Option<Checkpoint> = None;
    stores.runs.replay_checkpoints(run_id, &mut |checkpoint| {
        if found
            .as_ref()
            .is_some_and(|kept| !continues(kept, checkpoint))
        {
            found = None;
        }
        if found.is_none() && wanted(checkpoint) {
            found = Some(checkpoint.clone());
        }
    })?;
    let checkpoint = found.ok_or_else(|| RunError::NoCheckpointAfter {
        run_id: run_id.as_str().to_owned(),
        stage: format!("{node_id}@{visit}"),
    })?;
    let rank = rank_of(&stages, &node_id, visit).unwrap_or(checkpoint.stage_rank);
    Ok(Chosen {
        checkpoint,
        rank,
        node_id: Some(node_id),
        visit,
    })
}

/// The run's newest complete checkpoint (SPEC 8.7 step 2), with the stage it follows.
pub(crate) fn newest(stores: &Stores, run_id: &RunId, run_dir: &Path) -> Result<Chosen, RunError> {
    let checkpoint =
        stores
            .runs
            .load_checkpoint(run_id)?
            .ok_or_else(|| RunError::NoCheckpoint {
                run_id: run_id.as_str().to_owned(),
            })?;
    let node_id = checkpoint.current_node.clone();
    let visit = node_id
        .as_ref()
        .and_then(|node| checkpoint.node_visits.get(node).copied())
        .unwrap_or(0);
    let stages = list_stages(run_dir).unwrap_or_default();
    let rank = match &node_id {
        Some(node) => rank_of(&stages, node, visit).unwrap_or(checkpoint.stage_rank),
        None => 0,
    };
    Ok(Chosen {
        checkpoint,
        rank,
        node_id,
        visit,
    })
}

/// Whether `later` continues from `earlier`: a checkpoint written after a rewind to an
/// earlier stage does not.
fn continues(earlier: &Checkpoint, later: &Checkpoint) -> bool {
    later.completed_nodes.starts_with(&earlier.completed_nodes)
        && later.stage_rank >= earlier.stage_rank
}

/// The rank of the stage directory of `node_id`'s visit `visit`.
fn rank_of(stages: &[StageDir], node_id: &str, visit: u32) -> Option<u32> {
    stages
        .iter()
        .find(|stage| stage.node_id == node_id && stage.visit == visit)
        .map(|stage| stage.rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_visit_is_split_off() {
        let node = |node_id: &str, visit| StagePoint::Node {
            node_id: node_id.to_owned(),
            visit,
        };
        assert_eq!(StagePoint::parse_node("plan"), node("plan", None));
        assert_eq!(StagePoint::parse_node("plan@2"), node("plan", Some(2)));
        assert_eq!(StagePoint::parse_node("a@b@3"), node("a@b", Some(3)));
        assert_eq!(StagePoint::parse_node("a@b"), node("a@b", None));
        assert_eq!(StagePoint::parse_node("@3"), node("@3", None));
        assert_eq!(StagePoint::parse_node("plan@2").to_string(), "plan@2");
        assert_eq!(StagePoint::Rank(4).to_string(), "of rank 4");
    }
}
