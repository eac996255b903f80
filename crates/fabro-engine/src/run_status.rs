//! The status of a run (SPEC 8.5, 11.4): what the index, checkpoints, manifests and
//! events say about it. Written in canonical lower case; read in any case and with the
//! stage-status aliases of SPEC's decided question 1.

use fabro_language::StageStatus;
use serde::{Deserialize, Serialize};

/// The status of a run as the index reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Accepted by a server, waiting for a slot (SPEC 14.2): its directory holds
    /// `queued.json` and no manifest yet.
    Queued,
    /// A process is executing the run (it holds the run lock).
    Running,
    /// Reached exit with every goal met.
    Success,
    /// Reached exit with failures routed around (SPEC 4.7).
    PartialSuccess,
    /// Failed.
    Fail,
    /// Cancelled by the user or the stall watchdog.
    Canceled,
    /// Recorded as running, but no process holds its lock: it died mid-run.
    Interrupted,
    /// Its `manifest.json` cannot be read or parsed ([`RunRecord::reason`](crate::RunRecord::reason) says why).
    Unreadable,
}

impl RunStatus {
    /// The word stored in the index and printed by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::PartialSuccess => "partial_success",
            RunStatus::Fail => "fail",
            RunStatus::Canceled => "canceled",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Unreadable => "unreadable",
        }
    }

    /// Parses a stored status (`checkpoint.json` `run_status`, the index column), in
    /// any case; the stage-status aliases (`succeeded`, `failed`, …) are accepted for
    /// the statuses they name (SPEC "Open questions decided" 1).
    pub fn parse(text: &str) -> Option<RunStatus> {
        const WORDS: [(&str, RunStatus); 6] = [
            ("queued", RunStatus::Queued),
            ("running", RunStatus::Running),
            ("canceled", RunStatus::Canceled),
            ("cancelled", RunStatus::Canceled),
            ("interrupted", RunStatus::Interrupted),
            ("unreadable", RunStatus::Unreadable),
        ];
        if let Some(&(_, status)) = WORDS
            .iter()
            .find(|(word, _)| word.eq_ignore_ascii_case(text))
        {
            return Some(status);
        }
        match StageStatus::parse(text)? {
            StageStatus::Success => Some(RunStatus::Success),
            StageStatus::PartialSuccess => Some(RunStatus::PartialSuccess),
            StageStatus::Fail => Some(RunStatus::Fail),
            StageStatus::Skipped | StageStatus::Retry => None,
        }
    }

    /// The run status of a run that reached exit with `status`.
    pub fn completed(status: StageStatus) -> RunStatus {
        match status {
            StageStatus::Success => RunStatus::Success,
            StageStatus::PartialSuccess => RunStatus::PartialSuccess,
            StageStatus::Fail | StageStatus::Skipped | StageStatus::Retry => RunStatus::Fail,
        }
    }

    /// Whether the run ended (every status but `queued` and `running`).
    pub fn is_finished(self) -> bool {
        match self {
            RunStatus::Queued | RunStatus::Running => false,
            RunStatus::Success
            | RunStatus::PartialSuccess
            | RunStatus::Fail
            | RunStatus::Canceled
            | RunStatus::Interrupted
            | RunStatus::Unreadable => true,
        }
    }
}

/// Written as [`RunStatus::as_str`].
impl Serialize for RunStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Read through [`RunStatus::parse`].
impl<'de> Deserialize<'de> for RunStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RunStatus, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        RunStatus::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown run status '{text}'")))
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}
