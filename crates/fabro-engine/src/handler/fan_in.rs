//! The fan-in handler (SPEC 5.8): picks the best branch of the preceding parallel node
//! from `parallel.results`, by a heuristic or, when the node has a prompt, by asking the
//! LLM for `{"best_id": "..."}`. With git isolation it also names the chosen branch head,
//! `parallel.fan_in.best_head_sha`, and signals it to the traversal
//! ([`crate::outcome::Signal::FanInHead`]), which then moves the run branch there.

use fabro_language::StageStatus;
use fabro_llm::{LlmClient, Message, Request};
use serde_json::{json, Value};

use super::StageInput;
use crate::event::kind::FanInSelected;
use crate::event::Event;
use crate::failure::FailureClass;
use crate::outcome::{Outcome, Signal};
use crate::routing::json_objects;

/// One branch result as the parallel handler records it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) id: String,
    pub(crate) status: String,
    pub(crate) failure_reason: Option<String>,
    pub(crate) score: Option<f64>,
    /// The branch head with git isolation (SPEC 5.7), else `None`.
    pub(crate) head_sha: Option<String>,
}

impl Candidate {
    /// The branch's status, read like every status (any case, aliases); `None` for
    /// text that names no status.
    pub(crate) fn stage_status(&self) -> Option<StageStatus> {
        StageStatus::parse(&self.status)
    }
}

pub(super) async fn execute(input: &StageInput<'_>) -> Outcome {
    let candidates = candidates(input.context.get("parallel.results"));
    if candidates.is_empty() {
        return Outcome::fail(
            "No parallel results to evaluate",
            FailureClass::Deterministic,
        );
    }
    let mut method = "heuristic";
    let mut best = best_by_heuristic(&candidates);
    if !input.node.llm.prompt.is_empty() && !input.services.dry_run {
        match ask_llm(input, &candidates).await {
            Some(chosen) => {
                best = chosen;
                method = "llm";
            }
            None => {
                input.services.emitter.emit(Event::warning(
                    Some(&input.node.id),
                    "fan_in_llm_invalid",
                    &format!(
                        "fan-in node {} got no valid {{\"best_id\": …}} from the LLM; used the heuristic",
                        input.node.id
                    ),
                ));
            }
        }
    }
    let chosen = &candidates[best];
    input.services.emitter.emit(Event::node(
        &input.node.id,
        FanInSelected {
            best_head_sha: chosen.head_sha.clone(),
            best_id: chosen.id.clone(),
            best_outcome: chosen.status.clone(),
            method: method.to_owned(),
        },
    ));
    let all_failed = candidates
        .iter()
        .all(|candidate| candidate.stage_status() == Some(StageStatus::Fail));
    let outcome = if all_failed {
        Outcome::fail("all parallel branches failed", FailureClass::Deterministic)
    } else {
        Outcome::success()
    };
    let outcome = outcome
        .with_update("parallel.fan_in.best_id", json!(chosen.id))
        .with_update("parallel.fan_in.best_outcome", json!(chosen.status));
    // With git the traversal then moves the run branch to this head (SPEC 5.8).
    match &chosen.head_sha {
        Some(head_sha) => outcome
            .with_update("parallel.fan_in.best_head_sha", json!(head_sha))
            .with_signal(Signal::FanInHead(head_sha.clone())),
        None => outcome,
    }
}

/// Reads `parallel.results`.
pub(crate) fn candidates(results: Option<&Value>) -> Vec<Candidate> {
    results
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter_map(|entry| {
                    Some(Candidate {
                        id: entry.get("id")?.as_str()?.to_owned(),
                        status: entry.get("status")?.as_str()?.to_owned(),
                        failure_reason: entry
                            .get("failure_reason")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        score: entry.get("score").and_then(Value::as_f64),
                        head_sha: entry
                            .get("head_sha")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Status rank (`success` 0, `partial_success` 1, `skipped` 2, `fail` 3), then score
/// descending (none last), then id ascending; the index of the first.
pub(crate) fn best_by_heuristic(candidates: &[Candidate]) -> usize {
    let rank = |candidate: &Candidate| match candidate.stage_status() {
        Some(StageStatus::Success) => 0,
        Some(StageStatus::PartialSuccess) => 1,
        Some(StageStatus::Skipped) => 2,
        Some(StageStatus::Fail | StageStatus::Retry) | None => 3,
    };
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&candidates[a], &candidates[b]);
        rank(a)
            .cmp(&rank(b))
            .then_with(|| match (a.score, b.score) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then_with(|| a.id.cmp(&b.id))
    });
    order.first().copied().unwrap_or(0)
}

async fn ask_llm(input: &StageInput<'_>, candidates: &[Candidate]) -> Option<usize> {
    let mut prompt = format!("{}\n\n{}\n", input.preamble, input.node.llm.prompt);
    for candidate in candidates {
        let response = input
            .context
            .get_str(&format!("response.{}", candidate.id))
            .unwrap_or("")
            .chars()
            .take(4000)
            .collect::<String>();
        prompt.push_str(&format!(
            "\n## Candidate {}\n- Status: {}\n- Failure reason: {}\n\n{response}\n",
            candidate.id,
            candidate.status,
            candidate.failure_reason.as_deref().unwrap_or("none")
        ));
    }
    // SPEC 13.1: redacted before it is written and sent.
    fabro_llm::redact::redactor().redact_string(&mut prompt);
    let _ = fs_err::write(input.stage_dir.join("prompt.md"), &prompt);
    let target = input.services.llm.target_for(input.node);
    let request = Request {
        model: target.model.clone(),
        system: None,
        messages: vec![Message::user(prompt)],
        max_tokens: input.node.llm.max_tokens(),
        tools: Vec::new(),
        node_id: input.node.id.clone(),
        reasoning_effort: Some(super::reply::reasoning_effort(input.node)),
        ..Request::default()
    };
    let client = target.budgeted_client(
        input.services.emitter.clone(),
        &input.services.budget,
        &input.node.id,
    );
    let response = tokio::select! {
        response = client.complete(&request) => response.ok()?,
        () = input.services.cancel.cancelled() => return None,
    };
    let _ = fs_err::write(
        input.stage_dir.join("response.md"),
        fabro_llm::redact::redactor()
            .redact_str(&response.text)
            .as_bytes(),
    );
    json_objects(&response.text)
        .into_iter()
        .rev()
        .find_map(|object| {
            object
                .get("best_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .and_then(|id| candidates.iter().position(|candidate| candidate.id == id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: &str, status: &str, score: Option<f64>) -> Candidate {
        Candidate {
            id: id.to_owned(),
            status: status.to_owned(),
            failure_reason: None,
            score,
            head_sha: None,
        }
    }

    #[test]
    fn heuristic_orders_by_status_then_score_then_id() {
        let check = |candidates: &[Candidate], expected: &str| {
            assert_eq!(candidates[best_by_heuristic(candidates)].id, expected);
        };
        check(
            &[
                candidate("a", "fail", Some(9.0)),
                candidate("b", "partial_success", None),
            ],
            "b",
        );
        check(
            &[
                candidate("a", "success", None),
                candidate("b", "success", Some(1.0)),
            ],
            "b",
        );
        check(
            &[
                candidate("b", "success", Some(2.0)),
                candidate("a", "success", Some(2.0)),
            ],
            "a",
        );
        check(
            &[
                candidate("z", "success", None),
                candidate("y", "success", None),
            ],
            "y",
        );
    }

    /// SPEC "Open questions decided" 1: statuses match case-insensitively, aliases
    /// included, wherever they are read.
    #[test]
    fn heuristic_reads_statuses_in_any_case() {
        let candidates = [
            candidate("a", "partial_success", None),
            candidate("b", "Success", None),
            candidate("c", "FAILED", Some(9.0)),
            candidate("d", "skipped", Some(1.0)),
        ];
        assert_eq!(candidates[best_by_heuristic(&candidates)].id, "b");
        let candidates = [
            candidate("a", "FAILED", Some(9.0)),
            candidate("b", "Skipped", None),
        ];
        assert_eq!(candidates[best_by_heuristic(&candidates)].id, "b");
    }

    #[test]
    fn candidates_are_read_from_parallel_results() {
        let results = json!([{"id": "a", "status": "success", "failure_reason": null, "head_sha": null, "score": 3}, {"bad": 1}]);
        assert_eq!(
            candidates(Some(&results)),
            vec![candidate("a", "success", Some(3.0))]
        );
        assert!(candidates(None).is_empty());
    }
}
