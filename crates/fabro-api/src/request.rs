//! The request bodies of SPEC 14.3: starting a run, resuming one, answering a question;
//! and of SPEC 20.2 and 20.3: forking a run, rewinding one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of `POST /api/v1/runs` (also kept in a queued run's `queued.json`): the
/// fields are the flags of `fabro run` (SPEC 12.1, 14.3).
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// A workflow path (relative to `work_dir`) or a bare workflow name.
    pub workflow: Option<String>,
    /// DOT text, instead of `workflow`; `@path` references resolve against `work_dir`.
    pub source: Option<String>,
    /// Working directory; default: the first root.
    pub work_dir: Option<String>,
    /// Like `--goal`.
    pub goal: Option<String>,
    /// Like `--var K=V`.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// Like `--model`.
    pub model: Option<String>,
    /// Like `--provider`.
    pub provider: Option<String>,
    /// Like `--auto-approve`.
    #[serde(default)]
    pub auto_approve: bool,
    /// Like `--answer NODE=LABEL`: per node, one label or the labels in the order the
    /// node's visits consume them.
    #[serde(default)]
    pub answers: BTreeMap<String, AnswerLabels>,
    /// Like `--dry-run`.
    #[serde(default)]
    pub dry_run: bool,
    /// Like `--run-id`.
    pub run_id: Option<String>,
    /// Like `--config FILE`: the run-config TOML layer above `.fabro/project.toml`
    /// (SPEC 12.3), sent as text since the file may be the client's.
    pub config: Option<ConfigFile>,
    /// Like `--no-in-place`: refuse a working tree with uncommitted changes.
    #[serde(default)]
    pub no_in_place: bool,
    /// Like `--max-stages N` (SPEC 17.1; 0: unlimited).
    pub max_stages: Option<u64>,
    /// Like `--max-tokens N`.
    pub max_tokens: Option<u64>,
    /// Like `--max-cost USD`.
    pub max_cost_usd: Option<f64>,
    /// Like `--max-duration D` (`90s`, `30m`, `2h`).
    pub max_duration: Option<String>,
    /// On a shared store's queue (SPEC 18.2), runs with a higher priority are claimed
    /// first, then the oldest; default 0.
    pub priority: Option<i32>,
    /// A repository named by URL to run in (SPEC 18.3), instead of `work_dir`: `workflow`
    /// is then a path inside the repository at `ref`, and `@path` references of
    /// `source` resolve against its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryRef>,
}

/// A repository by URL and a ref of it (SPEC 18.3).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepositoryRef {
    /// Any URL `git` fetches from; credentials come from the worker's environment.
    pub url: String,
    /// A branch, a tag or a commit; default: the remote's default branch.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// The labels of one node's `--answer` flags.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum AnswerLabels {
    /// One answer.
    One(String),
    /// Answers consumed in order, one per visit of the node.
    Many(Vec<String>),
}

impl AnswerLabels {
    /// The labels, in the order the node's visits consume them.
    pub fn labels(&self) -> Vec<String> {
        match self {
            AnswerLabels::One(label) => vec![label.clone()],
            AnswerLabels::Many(labels) => labels.clone(),
        }
    }

    /// One label as [`AnswerLabels::One`], several as [`AnswerLabels::Many`] (the
    /// shape `fabro run --server` sends).
    pub fn from_labels(mut labels: Vec<String>) -> AnswerLabels {
        if labels.len() == 1 {
            AnswerLabels::One(labels.remove(0))
        } else {
            AnswerLabels::Many(labels)
        }
    }
}

/// A run-config TOML file of the client (`--config`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Its path (absolute, or relative to `work_dir`): relative paths in it resolve
    /// against its directory, and errors name it.
    pub path: String,
    /// Its text.
    pub text: String,
}

/// The body of `POST /api/v1/runs/{id}/resume`: the flags of `fabro resume`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// Like `--auto-approve`.
    #[serde(default)]
    pub auto_approve: bool,
    /// Like `--answer NODE=LABEL`.
    #[serde(default)]
    pub answers: BTreeMap<String, AnswerLabels>,
    /// Like `--model`.
    pub model: Option<String>,
    /// Like `--provider`.
    pub provider: Option<String>,
    /// Like `--max-stages N` (SPEC 17.1; 0: unlimited).
    pub max_stages: Option<u64>,
    /// Like `--max-tokens N`.
    pub max_tokens: Option<u64>,
    /// Like `--max-cost USD`.
    pub max_cost_usd: Option<f64>,
    /// Like `--max-duration D` (`90s`, `30m`, `2h`).
    pub max_duration: Option<String>,
}

/// The body of `POST /api/v1/runs/{id}/fork` (SPEC 20.2): the flags of `fabro fork`.
/// Without `at` and `at_rank` the fork starts from the run's newest complete checkpoint.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// Like `--at NODE[@VISIT]`: the checkpoint written after this stage.
    pub at: Option<String>,
    /// Like `--at-rank N`: the checkpoint written after the stage of rank N.
    pub at_rank: Option<u32>,
    /// Like `--run-id`.
    pub run_id: Option<String>,
    /// Like `--workflow FILE`: an edited workflow to run instead of the stored one; a
    /// path inside the server's roots (relative paths against the first root).
    pub workflow: Option<String>,
    /// Like `--auto-approve`.
    #[serde(default)]
    pub auto_approve: bool,
    /// Like `--answer NODE=LABEL`.
    #[serde(default)]
    pub answers: BTreeMap<String, AnswerLabels>,
    /// Like `--model`.
    pub model: Option<String>,
    /// Like `--provider`.
    pub provider: Option<String>,
    /// Like `--max-stages N` (SPEC 17.1; 0: unlimited).
    pub max_stages: Option<u64>,
    /// Like `--max-tokens N`.
    pub max_tokens: Option<u64>,
    /// Like `--max-cost USD`.
    pub max_cost_usd: Option<f64>,
    /// Like `--max-duration D` (`90s`, `30m`, `2h`).
    pub max_duration: Option<String>,
}

/// The body of `POST /api/v1/runs/{id}/rewind` (SPEC 20.3): exactly one of `to` and
/// `to_rank`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RewindRequest {
    /// Like `--to NODE[@VISIT]`.
    pub to: Option<String>,
    /// Like `--to-rank N`.
    pub to_rank: Option<u32>,
}

/// The body of `POST /api/v1/runs/{id}/questions/{question_id}/answer`: `key`, or
/// `label`, or `text` (with `label` naming the freeform edge, if needed).
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// The option's accelerator key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The option's label (or target); with `text`, the freeform edge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Free text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_label_is_a_string_and_several_are_a_list() {
        let one = AnswerLabels::from_labels(vec!["A".into()]);
        let many = AnswerLabels::from_labels(vec!["A".into(), "B".into()]);
        assert_eq!(serde_json::to_string(&one).expect("serializes"), "\"A\"");
        assert_eq!(
            serde_json::to_string(&many).expect("serializes"),
            "[\"A\",\"B\"]"
        );
        assert_eq!(many.labels(), vec!["A".to_owned(), "B".to_owned()]);
        let request: StartRequest =
            serde_json::from_str(r#"{"workflow": "w.fabro", "answers": {"gate": ["A", "B"]}}"#)
                .expect("decodes");
        assert_eq!(request.answers["gate"], many);
        assert!(serde_json::from_str::<StartRequest>(r#"{"nope": 1}"#).is_err());
    }

    #[test]
    fn an_answer_sends_only_what_it_has() {
        let request = AnswerRequest {
            key: None,
            label: Some("Approve".into()),
            text: None,
        };
        assert_eq!(
            serde_json::to_string(&request).expect("serializes"),
            r#"{"label":"Approve"}"#
        );
    }
}
