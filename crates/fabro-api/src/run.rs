//! The run documents of SPEC 14.3: the run list and its summaries, one run's document,
//! and the answers to starting, resuming and cancelling a run.

use fabro_engine::local::InspectView;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::question::HumanQuestion;

/// `GET /api/v1/runs`: one page of runs, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    /// Runs, newest first.
    pub runs: Vec<RunSummary>,
    /// The `before` of the next page, or null.
    pub next: Option<String>,
}

/// One element of `GET /api/v1/runs`: `fabro runs --json` plus `workflow_path`,
/// `current_node`, `usage`, `cost_usd` and `pending_question`. Also the document of a
/// run that is queued (not started yet) at `GET /api/v1/runs/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunSummary {
    /// The run id.
    pub run_id: String,
    /// The workflow's name.
    pub workflow_name: String,
    /// The workflow file the run started from; absent for a queued run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_path: Option<String>,
    /// `queued`, `running`, `success`, `partial_success`, `fail`, `canceled`,
    /// `interrupted` or `unreadable`.
    pub status: String,
    /// When the run started (RFC 3339 UTC); null while it is queued.
    pub started_at: Option<String>,
    /// When the run finished, if it has.
    pub finished_at: Option<String>,
    /// The run directory.
    pub run_dir: String,
    /// The run's goal.
    pub goal: String,
    /// The simulated provider was chosen because no credentials were found (SPEC 10.2).
    pub simulated_llm: bool,
    /// Why the run is `unreadable` (its manifest cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The node whose stage is running, else the node that completed last.
    pub current_node: Option<String>,
    /// Tokens over all stages.
    pub usage: RunUsage,
    /// Cost in US dollars over all stages; null when no stage reported one.
    pub cost_usd: Option<f64>,
    /// The question the run waits for an answer to, or null.
    pub pending_question: Option<HumanQuestion>,
    /// The worker that executes or executed the run last (SPEC 18.2); absent for runs
    /// of a server's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// The token totals of a run summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input plus output tokens.
    pub tokens: u64,
}

/// `GET /api/v1/runs/{id}`: the `fabro inspect --json` document plus
/// `pending_question`, or the summary of a run that has not started yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RunDocument {
    /// A run that has started: `fabro inspect --json` plus `pending_question`.
    Inspected(Box<InspectDocument>),
    /// A queued run: its summary, as in the run list.
    Queued(Box<RunSummary>),
}

impl RunDocument {
    /// The run id.
    pub fn run_id(&self) -> &str {
        match self {
            RunDocument::Inspected(document) => &document.inspect.run_id,
            RunDocument::Queued(summary) => &summary.run_id,
        }
    }

    /// The run status (`queued`, `running`, `success`, …).
    pub fn status(&self) -> &str {
        match self {
            RunDocument::Inspected(document) => &document.inspect.status,
            RunDocument::Queued(summary) => &summary.status,
        }
    }

    /// The run directory.
    pub fn run_dir(&self) -> &str {
        match self {
            RunDocument::Inspected(document) => &document.inspect.run_dir,
            RunDocument::Queued(summary) => &summary.run_dir,
        }
    }
}

/// The members both forms of [`RunDocument`] have: what a client that follows a run
/// (waits for its status, prints its directory) reads of `GET /api/v1/runs/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunHeader {
    /// The run id.
    pub run_id: String,
    /// The run status (`queued`, `running`, `success`, …).
    pub status: String,
    /// The run directory.
    pub run_dir: String,
}

impl From<&RunDocument> for RunHeader {
    fn from(document: &RunDocument) -> RunHeader {
        RunHeader {
            run_id: document.run_id().to_owned(),
            status: document.status().to_owned(),
            run_dir: document.run_dir().to_owned(),
        }
    }
}

/// The `fabro inspect --json` document of a run that has started, plus the question it
/// waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InspectDocument {
    /// `fabro inspect --json`.
    #[serde(flatten)]
    pub inspect: InspectView,
    /// The question the run waits for an answer to, or null.
    pub pending_question: Option<HumanQuestion>,
}

/// The answer to `POST /api/v1/runs` (201) and `POST /api/v1/runs/{id}/resume` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Started {
    /// The run id.
    pub run_id: String,
    /// `queued` or `running`.
    pub status: String,
    /// The run's API URL.
    pub url: String,
}

/// The answer to `POST /api/v1/runs/{id}/rewind` (200, SPEC 20.3), and what
/// `fabro rewind --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Rewound {
    /// The run id.
    pub run_id: String,
    /// The rewind's number in the run, from 1: the previous run-branch head is kept as
    /// `refs/fabro-rewound/{run_id}/{k}`, the stages after the checkpoint in
    /// `rewound/{k}/` of the run directory.
    pub k: u32,
    /// The rank of the stage the run went back to.
    pub to_rank: u32,
    /// That stage's node.
    pub node_id: String,
    /// That stage's visit.
    pub visit: u32,
}

/// The answer to `POST /api/v1/runs/{id}/cancel` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Canceling {
    /// The run id.
    pub run_id: String,
    /// Always `canceling`.
    pub status: String,
}

/// `GET /api/v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    /// fabro's version.
    pub version: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn queued() -> RunSummary {
        RunSummary {
            run_id: "r1".into(),
            workflow_name: "w".into(),
            workflow_path: None,
            status: "queued".into(),
            started_at: None,
            finished_at: None,
            run_dir: "/runs/r1".into(),
            goal: String::new(),
            simulated_llm: false,
            reason: None,
            current_node: None,
            usage: RunUsage::default(),
            cost_usd: None,
            pending_question: None,
            worker: None,
        }
    }

    #[test]
    fn a_queued_summary_has_the_members_of_the_untyped_one() {
        let value = serde_json::to_value(queued()).expect("serializes");
        assert_eq!(
            value,
            json!({
                "run_id": "r1", "workflow_name": "w", "status": "queued",
                "started_at": null, "finished_at": null, "run_dir": "/runs/r1", "goal": "",
                "simulated_llm": false, "current_node": null,
                "usage": {"input_tokens": 0, "output_tokens": 0, "tokens": 0},
                "cost_usd": null, "pending_question": null,
            })
        );
    }

    #[test]
    fn a_run_document_reads_back_as_the_form_it_was() {
        let queued = RunDocument::Queued(Box::new(queued()));
        let text = serde_json::to_string(&queued).expect("serializes");
        assert_eq!(
            serde_json::from_str::<RunDocument>(&text).expect("decodes"),
            queued
        );
        let inspect = json!({
            "run_id": "r2", "workflow_name": "w", "workflow_path": "/w.fabro", "goal": "g",
            "status": "success", "started_at": "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:00:01Z", "duration_ms": 1000, "run_dir": "/runs/r2",
            "base_sha": null, "run_branch": null, "simulated_llm": false, "dry_run": false,
            "parent_run_id": null, "current_node": "exit", "next_node_id": null, "stages": [],
            "totals": {"stages": 0, "attempts": 0, "duration_ms": 0, "tokens": 0,
                "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                "cost_usd": null, "files_touched": []},
            "pending_question": null,
        });
        let document: RunDocument = serde_json::from_value(inspect.clone()).expect("decodes");
        assert!(
            matches!(&document, RunDocument::Inspected(_)),
            "{document:?}"
        );
        assert_eq!(document.status(), "success");
        assert_eq!(document.run_dir(), "/runs/r2");
        assert_eq!(
            serde_json::to_value(&document).expect("serializes"),
            inspect
        );
        let header = RunHeader::from(&document);
        assert_eq!(
            serde_json::from_value::<RunHeader>(inspect).expect("decodes"),
            header
        );
    }
}
