//! What a finished parallel branch produced, kept on disk so that a run killed inside the
//! parallel stage reuses the branches that had finished when it resumes (SPEC 8.7 at branch
//! granularity) instead of running them again.
//!
//! Each branch that returns writes `{run_dir}/parallel/{node_id}@{visit}/{target}.json`
//! (atomically) before its result is merged. A resumed parallel stage reads these records and
//! reuses one only when it was made from the same parallel base commit and, with git, its
//! branch head still exists; every other branch runs again from the base.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::outcome::Outcome;

/// One branch's result, with everything the parent merges from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BranchRecord {
    /// The branch's first node.
    pub(crate) target: String,
    /// The parallel base commit the branch started from (`None` without git).
    pub(crate) base_sha: Option<String>,
    /// The outcome of the branch's last stage.
    pub(crate) outcome: Outcome,
    /// The branch head after its last stage (`None` without git).
    pub(crate) head_sha: Option<String>,
    /// The branch context's `score`, for the fan-in ranking.
    pub(crate) score: Option<f64>,
    /// The branch's completed stages with their latest outcomes, in completion order.
    pub(crate) completed: Vec<(String, Outcome)>,
    /// `response.{id}` and `output.{id}` values of the completed stages.
    pub(crate) outputs: BTreeMap<String, Value>,
    /// Visits per node at the branch's end.
    pub(crate) node_visits: BTreeMap<String, u32>,
    /// Loop failure signatures at the branch's end.
    pub(crate) loop_failure_signatures: BTreeMap<String, u32>,
    /// Names of the stage directories the branch's stages (nested ones included) wrote.
    pub(crate) stage_dirs: Vec<String>,
}

impl BranchRecord {
    /// The record of a branch that produced nothing but `outcome` (a panicked branch task).
    pub(crate) fn bare(target: &str, outcome: Outcome) -> BranchRecord {
        BranchRecord {
            target: target.to_owned(),
            base_sha: None,
            outcome,
            head_sha: None,
            score: None,
            completed: Vec::new(),
            outputs: BTreeMap::new(),
            node_visits: BTreeMap::new(),
            loop_failure_signatures: BTreeMap::new(),
            stage_dirs: Vec::new(),
        }
    }

    /// The highest stage rank among the record's stage directories.
    pub(crate) fn max_rank(&self) -> Option<u32> {
        self.stage_dirs
            .iter()
            .filter_map(|name| stage_rank(name))
            .max()
    }
}

/// Where the records of one parallel stage live.
#[derive(Debug, Clone)]
pub(crate) struct RecordDir {
    directory: PathBuf,
}

impl RecordDir {
    /// `{run_dir}/parallel/{node_id}@{visit}`.
    pub(crate) fn new(run_dir: &Path, node_id: &str, visit: u32) -> RecordDir {
        RecordDir {
            directory: run_dir.join("parallel").join(format!("{node_id}@{visit}")),
        }
    }

    fn path(&self, target: &str) -> PathBuf {
        self.directory.join(format!("{target}.json"))
    }

    /// Stores `record`, replacing an older one of the same branch.
    pub(crate) fn store(&self, record: &BranchRecord) -> std::io::Result<()> {
        fs_err::create_dir_all(&self.directory)?;
        crate::run_dir::write_json_atomic(&self.path(&record.target), record)
    }

    /// The stored record of branch `target`; `None` when there is none or it cannot be read
    /// (the branch then runs again).
    pub(crate) fn load(&self, target: &str) -> Option<BranchRecord> {
        let text = fs_err::read_to_string(self.path(target)).ok()?;
        let record: BranchRecord = serde_json::from_str(&text).ok()?;
        (record.target == target).then_some(record)
    }
}

/// The rank prefix of a stage directory name `{rank}-{node_id}@{visit}`.
pub(crate) fn stage_rank(name: &str) -> Option<u32> {
    name.split_once('-')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_language::StageStatus;

    #[test]
    fn records_round_trip_and_name_their_branch() {
        let directory = tempfile::tempdir().expect("tempdir");
        let records = RecordDir::new(directory.path(), "fan", 2);
        let mut record = BranchRecord::bare("a", Outcome::new(StageStatus::Success));
        record.stage_dirs = vec!["004-a@1".to_owned(), "012-a2@1".to_owned()];
        record.base_sha = Some("abc".to_owned());
        records.store(&record).expect("stored");
        assert!(directory.path().join("parallel/fan@2/a.json").is_file());
        let loaded = records.load("a").expect("loaded");
        assert_eq!(loaded.base_sha.as_deref(), Some("abc"));
        assert_eq!(loaded.outcome.status, StageStatus::Success);
        assert_eq!(loaded.max_rank(), Some(12));
        assert!(records.load("b").is_none());
    }

    #[test]
    fn a_torn_record_is_not_reused() {
        let directory = tempfile::tempdir().expect("tempdir");
        let records = RecordDir::new(directory.path(), "fan", 1);
        fs_err::create_dir_all(directory.path().join("parallel/fan@1")).expect("dir");
        fs_err::write(directory.path().join("parallel/fan@1/a.json"), "{\"tar").expect("write");
        assert!(records.load("a").is_none());
    }

    #[test]
    fn stage_ranks_come_from_directory_names() {
        assert_eq!(stage_rank("007-plan@2"), Some(7));
        assert_eq!(stage_rank("1234-x-y@1"), Some(1234));
        assert_eq!(stage_rank("plan@2"), None);
    }
}
