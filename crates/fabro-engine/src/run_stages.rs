//! A run's stages as its directory records them (SPEC 7.5, 11.1): the stage directories
//! `stages/{rank:03}-{node_id}@{visit}/`, the latest stage of a node, and the nodes of the
//! stored workflow, for the commands that show one stage (`fabro logs`, `fabro diff`,
//! SPEC 17.4).

use std::path::{Path, PathBuf};

use crate::record::StageStatusFile;

/// One stage directory of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageDir {
    /// The stage's rank (its order of start in the run).
    pub rank: u32,
    /// The node the stage executed.
    pub node_id: String,
    /// The run-wide visit number.
    pub visit: u32,
    /// The directory.
    pub path: PathBuf,
}

/// Why a stage could not be found.
#[derive(Debug, thiserror::Error)]
pub enum StageLookupError {
    /// The node is not in the run's workflow.
    #[error("unknown node '{node_id}' in run {run_id}")]
    UnknownNode {
        /// The node asked for.
        node_id: String,
        /// The run.
        run_id: String,
    },
    /// The node is in the workflow but has not run yet.
    #[error("node '{node_id}' has no stage in run {run_id} yet")]
    NotRun {
        /// The node asked for.
        node_id: String,
        /// The run.
        run_id: String,
    },
    /// The run has not started any stage.
    #[error("run {run_id} has no stages yet")]
    NoStages {
        /// The run.
        run_id: String,
    },
    /// The stage directory could not be listed.
    #[error("cannot list {}", .path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl StageDir {
    /// The stage's `status.json`, once the stage has ended; `None` while it runs (or when
    /// the file cannot be read).
    pub fn status(&self) -> Option<StageStatusFile> {
        let text = fs_err::read_to_string(self.path.join("status.json")).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Every stage directory of the run in `run_dir`, by rank (then node and visit).
/// Directories whose name is not `{rank}-{node_id}@{visit}` are skipped.
pub fn list_stages(run_dir: &Path) -> Result<Vec<StageDir>, StageLookupError> {
    let directory = run_dir.join("stages");
    let entries = match fs_err::read_dir(&directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StageLookupError::Io {
                path: directory,
                source,
            })
        }
    };
    let mut stages: Vec<StageDir> = entries
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .filter_map(|entry| {
            let name = entry.file_name();
            let (rank, node_id, visit) = parse_stage_dir_name(name.to_str()?)?;
            Some(StageDir {
                rank,
                node_id: node_id.to_owned(),
                visit,
                path: entry.path(),
            })
        })
        .collect();
    stages.sort_by(|left, right| {
        (left.rank, &left.node_id, left.visit).cmp(&(right.rank, &right.node_id, right.visit))
    });
    Ok(stages)
}

/// `007-plan@2` → (7, "plan", 2).
pub(crate) fn parse_stage_dir_name(name: &str) -> Option<(u32, &str, u32)> {
    let (rank, rest) = name.split_once('-')?;
    let (node_id, visit) = rest.rsplit_once('@')?;
    if node_id.is_empty() || rank.is_empty() || !rank.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((rank.parse().ok()?, node_id, visit.parse().ok()?))
}

/// Checks that `node_id` names a node of the run: one of its stored workflow, or, when
/// that cannot be read, one that has a stage.
pub(crate) fn check_node(
    run_id: &str,
    run_dir: &Path,
    node_id: &str,
    stages: &[StageDir],
) -> Result<(), StageLookupError> {
    let graph = fs_err::read_to_string(run_dir.join("graph.fabro")).ok();
    check_node_of(run_id, node_id, graph.as_deref(), || {
        Ok(stages.iter().map(|stage| stage.node_id.clone()).collect())
    })
}

/// Checks that `node_id` names a node of the run's workflow `graph` (the text of
/// `graph.fabro`), or, when that is missing or does not parse, of one of its stages
/// (`stage_nodes`, asked only then): [`StageLookupError::UnknownNode`] otherwise.
pub(crate) fn check_node_of<E: From<StageLookupError>>(
    run_id: &str,
    node_id: &str,
    graph: Option<&str>,
    stage_nodes: impl FnOnce() -> Result<Vec<String>, E>,
) -> Result<(), E> {
    let parsed = graph.and_then(|text| fabro_language::syntax::parse(text).ok());
    let known = match parsed {
        Some(graph) => graph.nodes.iter().any(|node| node.id == node_id),
        None => stage_nodes()?.iter().any(|node| node == node_id),
    };
    if known {
        return Ok(());
    }
    Err(StageLookupError::UnknownNode {
        node_id: node_id.to_owned(),
        run_id: run_id.to_owned(),
    }
    .into())
}

/// The latest stage of `node_id` (highest rank), or without a node the latest stage of
/// the run (the running one, or the last one). Errors name an unknown node, a node that
/// has not run, or a run without stages.
pub fn latest_stage(
    run_id: &str,
    run_dir: &Path,
    node_id: Option<&str>,
) -> Result<StageDir, StageLookupError> {
    let stages = list_stages(run_dir)?;
    match node_id {
        Some(node_id) => {
            check_node(run_id, run_dir, node_id, &stages)?;
            stages
                .into_iter()
                .rev()
                .find(|stage| stage.node_id == node_id)
                .ok_or_else(|| StageLookupError::NotRun {
                    node_id: node_id.to_owned(),
                    run_id: run_id.to_owned(),
                })
        }
        None => stages
            .into_iter()
            .next_back()
            .ok_or_else(|| StageLookupError::NoStages {
                run_id: run_id.to_owned(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_directory_names_are_parsed_strictly() {
        assert_eq!(parse_stage_dir_name("007-plan@2"), Some((7, "plan", 2)));
        assert_eq!(
            parse_stage_dir_name("1234-a-b@c@10"),
            Some((1234, "a-b@c", 10))
        );
        assert_eq!(parse_stage_dir_name("x-plan@2"), None);
        assert_eq!(parse_stage_dir_name("-plan@2"), None);
        assert_eq!(parse_stage_dir_name("001-@2"), None);
        assert_eq!(parse_stage_dir_name("001-plan"), None);
    }

    #[test]
    fn the_latest_stage_is_the_highest_rank() {
        let root = tempfile::tempdir().expect("tempdir");
        let run_dir = root.path();
        for name in ["001-start@1", "002-a@1", "003-b@1", "010-a@2", "notes"] {
            fs_err::create_dir_all(run_dir.join("stages").join(name)).expect("mkdir");
        }
        fs_err::write(
            run_dir.join("graph.fabro"),
            "digraph w { start -> a -> b -> c }",
        )
        .expect("write");
        let latest = |node: Option<&str>| latest_stage("R", run_dir, node);
        assert_eq!(latest(Some("a")).expect("a ran").rank, 10);
        assert_eq!(latest(Some("b")).expect("b ran").visit, 1);
        assert_eq!(latest(None).expect("stages").node_id, "a");
        assert!(matches!(
            latest(Some("c")),
            Err(StageLookupError::NotRun { .. })
        ));
        assert!(matches!(
            latest(Some("zz")),
            Err(StageLookupError::UnknownNode { .. })
        ));
        // Without a readable workflow, nodes with stages are known.
        fs_err::remove_file(run_dir.join("graph.fabro")).expect("rm");
        assert!(matches!(
            latest(Some("c")),
            Err(StageLookupError::UnknownNode { .. })
        ));
        let empty = tempfile::tempdir().expect("tempdir");
        assert!(matches!(
            latest_stage("R", empty.path(), None),
            Err(StageLookupError::NoStages { .. })
        ));
    }
}
