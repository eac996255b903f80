//! What follows a stage (SPEC 4.2, 9): goal gates at the exit, visit limits, the circuit
//! breakers, edge selection with failure routing, and loop restarts.

use std::sync::Arc;

use fabro_language::{HandlerKind, NodeIndex, StageStatus, Workflow};

use super::{RunEnd, Traversal};
use crate::event::kind::{CircuitBreakerTripped, EdgeSelected, LoopRestart};
use crate::event::Event;
use crate::failure::{failure_signature, FailureClass};
use crate::outcome::Outcome;
use crate::transition::{select_edge, ConditionView, SelectionReason};

/// Which signature table a failure is counted in.
#[derive(Debug, Clone, Copy)]
enum BreakerScope {
    /// Failed stages (SPEC 9.8).
    Loop,
    /// Transient failures crossing loop-restart edges (SPEC 9.9).
    Restart,
}

/// What a finished stage leads to.
pub(super) enum Next {
    Node(NodeIndex),
    End(RunEnd),
}

impl Traversal {
    /// The first unsatisfied goal gate and its retry target (SPEC 9.10), or the failure
    /// when it has none.
    pub(super) fn unsatisfied_goal_gate(&self) -> Option<Result<(NodeIndex, NodeIndex), RunEnd>> {
        let workflow = &self.run.workflow;
        let gates: Vec<NodeIndex> = workflow
            .node_indices()
            .filter(|&index| workflow.node(index).goal_gate)
            .collect();
        if gates.is_empty() {
            return None;
        }
        let mut ordered: Vec<NodeIndex> = Vec::new();
        for completed in &self.state.completed_nodes {
            if let Some(index) = workflow.find(completed) {
                if gates.contains(&index) && !ordered.contains(&index) {
                    ordered.push(index);
                }
            }
        }
        for &gate in &gates {
            if !ordered.contains(&gate) {
                ordered.push(gate);
            }
        }
        let satisfied = |gate: NodeIndex| {
            self.state
                .node_outcomes
                .get(&workflow.node(gate).id)
                .is_some_and(|outcome| {
                    matches!(
                        outcome.status,
                        StageStatus::Success | StageStatus::PartialSuccess
                    )
                })
        };
        let gate = ordered.into_iter().find(|&gate| !satisfied(gate))?;
        let spec = workflow.node(gate);
        let target = retry_target(workflow, gate);
        Some(
            target
                .map(|target| (gate, target))
                .ok_or_else(|| RunEnd::Failed {
                    reason: format!(
                        "goal gate unsatisfied for node {} and no retry target",
                        spec.id
                    ),
                    class: FailureClass::Deterministic,
                    node_id: Some(spec.id.clone()),
                }),
        )
    }

    /// The visit-limit termination for `node`, if it would exceed its limit (SPEC 9.7).
    pub(super) fn visit_limit(&self, node: NodeIndex) -> Option<RunEnd> {
        let spec = self.run.workflow.node(node);
        let (limit, source) = match spec.max_visits() {
            Some(limit) => (limit, "node"),
            None if self.run.workflow.settings.max_node_visits > 0 => {
                (self.run.workflow.settings.max_node_visits, "graph")
            }
            None => (self.run.dry_run_visit_limit?, "graph"),
        };
        let visits = self.state.node_visits.get(&spec.id).copied().unwrap_or(0);
        (visits >= limit).then(|| RunEnd::Failed {
            reason: format!(
                "node \"{}\" visited {limit} times ({source} limit {limit}); run is stuck in a cycle",
                spec.id
            ),
            class: FailureClass::CompilationLoop,
            node_id: Some(spec.id.clone()),
        })
    }

    /// Counts a failure signature in the table of `scope` and trips the circuit breaker
    /// at the graph's `loop_restart_signature_limit` (SPEC 9.8, 9.9).
    fn count_signature(
        &mut self,
        node_id: &str,
        signature: String,
        scope: BreakerScope,
    ) -> Option<RunEnd> {
        let table = match scope {
            BreakerScope::Loop => &mut self.state.loop_failure_signatures,
            BreakerScope::Restart => &mut self.state.restart_failure_signatures,
        };
        let count = {
            let count = table.entry(signature.clone()).or_insert(0);
            *count += 1;
            *count
        };
        let limit = self.run.workflow.settings.loop_restart_signature_limit;
        if count < limit {
            return None;
        }
        let (scope_name, kind) = match scope {
            BreakerScope::Loop => ("loop", "deterministic failure cycle"),
            BreakerScope::Restart => ("restart", "loop_restart failure cycle"),
        };
        self.emit(Event::node(
            node_id,
            CircuitBreakerTripped {
                count,
                limit,
                scope: scope_name.to_owned(),
                signature: signature.clone(),
            },
        ));
        Some(RunEnd::Failed {
            reason: format!(
                "{kind} detected: signature {signature} repeated {count} times (limit {limit})"
            ),
            class: FailureClass::CompilationLoop,
            node_id: Some(node_id.to_owned()),
        })
    }

    /// Circuit breaker, edge selection, failure routing and loop restarts after `node`.
    pub(super) fn next(&mut self, node: NodeIndex, outcome: &Outcome) -> Next {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(node);
        if outcome.is_fail() && spec.handler != HandlerKind::Conditional {
            if let Some(class) = outcome
                .failure_class()
                .filter(|class| class.counts_for_breaker())
            {
                let signature = failure_signature(&spec.id, class, outcome.failure_reason());
                if let Some(end) = self.count_signature(&spec.id, signature, BreakerScope::Loop) {
                    return Next::End(end);
                }
            }
        }
        let blobs = self.run.services.blobs.clone();
        let view = ConditionView {
            outcome: outcome.condition_value(),
            preferred_label: outcome.preferred_label.as_deref().unwrap_or(""),
            context: &self.state.context,
            blobs: &blobs,
        };
        let selected = select_edge(&workflow, node, outcome, &view, &mut self.rng);
        let parallel_join = if spec.handler == HandlerKind::Parallel && !outcome.is_fail() {
            self.pending_join.take()
        } else {
            None
        };
        let (target, edge, reason) = match (selected, parallel_join) {
            (Some((edge, reason)), _) => (workflow.edge(edge).to, Some(edge), reason),
            (None, Some(join)) => (join, None, SelectionReason::ParallelJoin),
            (None, None) if outcome.is_fail() => match retry_target(&workflow, node) {
                Some(target) => (target, None, SelectionReason::RetryTarget),
                None => {
                    return Next::End(RunEnd::Failed {
                        reason: outcome.failure_reason().to_owned(),
                        class: outcome
                            .failure_class()
                            .unwrap_or(FailureClass::Deterministic),
                        node_id: Some(spec.id.clone()),
                    })
                }
            },
            (None, None) => {
                return Next::End(RunEnd::Failed {
                    reason: format!(
                        "no outgoing edge matched from node {} (outcome={})",
                        spec.id,
                        outcome.condition_value()
                    ),
                    class: FailureClass::Deterministic,
                    node_id: Some(spec.id.clone()),
                })
            }
        };
        let loop_restart = edge.is_some_and(|edge| workflow.edge(edge).loop_restart);
        let label = edge.map_or("", |edge| workflow.edge(edge).label());
        if loop_restart {
            if let Some(end) = self.loop_restart(node, target, outcome) {
                return Next::End(end);
            }
        }
        self.emit(Event::node(
            &spec.id,
            EdgeSelected {
                from: spec.id.clone(),
                label: label.to_owned(),
                loop_restart,
                reason: reason.as_str().to_owned(),
                to: workflow.node(target).id.clone(),
            },
        ));
        Next::Node(target)
    }

    /// Applies the rules of SPEC 9.9 to a loop-restart edge; `Some` ends the run.
    fn loop_restart(
        &mut self,
        node: NodeIndex,
        target: NodeIndex,
        outcome: &Outcome,
    ) -> Option<RunEnd> {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(node);
        if let Some(class) = outcome.failure_class().filter(|_| outcome.is_fail()) {
            if class != FailureClass::TransientInfra {
                return Some(RunEnd::Failed {
                    reason: format!(
                        "loop_restart blocked: failure_class={class} (requires transient_infra)"
                    ),
                    class,
                    node_id: Some(spec.id.clone()),
                });
            }
            let signature = failure_signature(&spec.id, class, outcome.failure_reason());
            if let Some(end) = self.count_signature(&spec.id, signature, BreakerScope::Restart) {
                return Some(end);
            }
        }
        let limit = workflow.settings.max_restarts;
        if self.state.restart_count >= limit {
            return Some(RunEnd::Failed {
                reason: format!(
                    "loop_restart limit reached (max_restarts {limit}); run is stuck in a cycle"
                ),
                class: FailureClass::CompilationLoop,
                node_id: Some(spec.id.clone()),
            });
        }
        self.state.restart_count += 1;
        self.state.touched_everything = true;
        self.state.epoch_node_visits.clear();
        self.state.node_retries.clear();
        self.state.epoch_stages.clear();
        self.run.services.threads.clear();
        let keys: Vec<String> = self
            .state
            .context
            .iter()
            .map(|(key, _)| key.clone())
            .filter(|key| key.starts_with("internal.retry_count."))
            .collect();
        for key in keys {
            self.state.context.remove(&key);
        }
        self.state
            .context
            .set("internal.restart_count", self.state.restart_count);
        self.emit(Event::node(
            &spec.id,
            LoopRestart {
                from: spec.id.clone(),
                restart_count: self.state.restart_count,
                to: workflow.node(target).id.clone(),
            },
        ));
        None
    }
}

/// The first existing node among the node's `retry_target` and
/// `fallback_retry_target`, then the graph's (SPEC 9.5, 9.10).
fn retry_target(workflow: &Workflow, node: NodeIndex) -> Option<NodeIndex> {
    let spec = workflow.node(node);
    [
        spec.retry_target(),
        spec.fallback_retry_target(),
        workflow.settings.retry_target.as_deref(),
        workflow.settings.fallback_retry_target.as_deref(),
    ]
    .into_iter()
    .flatten()
    .find_map(|id| workflow.find(id))
}
