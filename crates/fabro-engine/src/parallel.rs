//! Parallel fan-out (SPEC 5.7): each branch runs as its own sub-traversal on a deep copy
//! of the context, concurrently up to `max_parallel`, until it would enter the join node
//! or the exit node; the results are merged back into the parent run.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use fabro_language::model::JoinPolicy;
use fabro_language::{NodeIndex, StageStatus, Workflow};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::event::Event;
use crate::failure::FailureClass;
use crate::outcome::Outcome;
use crate::traversal::Traversal;

/// A boxed `Send` future.
pub(crate) type BoxFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The join node of branches starting at `targets` (SPEC 5.7): among nodes reachable at
/// distance ≥ 1 from every target, the smallest maximum distance, then the smallest
/// distance sum, then the lexically smallest id.
pub(crate) fn join_node(workflow: &Workflow, targets: &[NodeIndex]) -> Option<NodeIndex> {
    let distances: Vec<Vec<Option<u32>>> = targets
        .iter()
        .map(|&target| distances_from(workflow, target))
        .collect();
    workflow
        .node_indices()
        .filter_map(|node| {
            let mut max = 0;
            let mut sum = 0u64;
            for per_target in &distances {
                let distance = per_target[node.get()].filter(|&distance| distance >= 1)?;
                max = max.max(distance);
                sum += u64::from(distance);
            }
            Some((max, sum, workflow.node(node).id.as_str(), node))
        })
        .min_by(|a, b| (a.0, a.1, a.2.as_bytes()).cmp(&(b.0, b.1, b.2.as_bytes())))
        .map(|(_, _, _, node)| node)
}

/// BFS distances from `start`; a node reachable again through a cycle back to `start`
/// does not count as distance 0 for the others.
fn distances_from(workflow: &Workflow, start: NodeIndex) -> Vec<Option<u32>> {
    let mut distances = vec![None; workflow.nodes().len()];
    let mut queue = VecDeque::from([(start, 0u32)]);
    let mut seen = vec![false; workflow.nodes().len()];
    seen[start.get()] = true;
    while let Some((node, distance)) = queue.pop_front() {
        for (_, edge) in workflow.outgoing(node) {
            let next = edge.to;
            if !seen[next.get()] {
                seen[next.get()] = true;
                distances[next.get()] = Some(distance + 1);
                queue.push_back((next, distance + 1));
            }
        }
    }
    distances
}

/// What one branch produced.
struct BranchResult {
    index: usize,
    outcome: Outcome,
    branch: Option<Traversal>,
}

impl Traversal {
    /// A copy of this traversal for a branch starting at `target`.
    fn fork(&mut self, target: NodeIndex) -> Traversal {
        let target_id = self.workflow.node(target).id.clone();
        let mut state = self.state.clone();
        state
            .context
            .set("internal.parallel.branch", target_id.clone());
        state.completed_nodes.clear();
        state.node_outcomes.clear();
        Traversal {
            workflow: Arc::clone(&self.workflow),
            services: Arc::clone(&self.services),
            paths: self.paths.clone(),
            state,
            rng: rand::rngs::StdRng::seed_from_u64(self.rng.random()),
            work_dir: self.work_dir.clone(),
            dry_run_visit_limit: self.dry_run_visit_limit,
            cause: Arc::clone(&self.cause),
            watchdog_paused: Arc::clone(&self.watchdog_paused),
            branch: Some(target_id),
            ranks: Arc::clone(&self.ranks),
            pending_join: None,
            pending_records: Vec::new(),
            checkpointer: None,
            resumed_stage: false,
            last_stage_dir: None,
        }
    }

    /// Runs the parallel node `node` (SPEC 5.7) and returns its outcome; the join node
    /// and the branch stages are kept for the main loop.
    ///
    /// Returned as a boxed `Send` future: branches run stages, which may be parallel
    /// again, and an opaque recursive future type could not be proven `Send`.
    pub(crate) fn run_parallel<'a>(
        &'a mut self,
        node: NodeIndex,
        stage_dir: &'a Path,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(self.run_parallel_inner(node, stage_dir))
    }

    async fn run_parallel_inner(&mut self, node: NodeIndex, _stage_dir: &Path) -> Outcome {
        let workflow = Arc::clone(&self.workflow);
        let spec = workflow.node(node);
        let targets: Vec<NodeIndex> = workflow
            .outgoing(node)
            .filter(|(_, edge)| edge.is_unconditional())
            .map(|(_, edge)| edge.to)
            .collect();
        if targets.is_empty() {
            return Outcome::fail(
                format!("parallel node {} has no branches", spec.id),
                FailureClass::Deterministic,
            );
        }
        let Some(join) = join_node(&workflow, &targets) else {
            return Outcome::fail(
                format!(
                    "parallel node {} has no join node reachable from all branches",
                    spec.id
                ),
                FailureClass::Deterministic,
            );
        };
        let emitter = Arc::clone(&self.services.emitter);
        emitter.emit(Event::node(
            "ParallelStarted",
            &spec.id,
            json!({"branch_count": targets.len(), "join_policy": spec.join_policy.as_str(),
                   "max_parallel": spec.max_parallel, "join_node": workflow.node(join).id}),
        ));
        emitter.emit(Event::warning(
            Some(&spec.id),
            "parallel_no_isolation",
            &format!(
                "branches of {} share the working directory (no git isolation)",
                spec.id
            ),
        ));
        let semaphore = Arc::new(tokio::sync::Semaphore::new(
            spec.max_parallel.max(1) as usize
        ));
        let mut tasks = tokio::task::JoinSet::new();
        let mut task_index = BTreeMap::new();
        for (index, &target) in targets.iter().enumerate() {
            let mut branch = self.fork(target);
            let semaphore = Arc::clone(&semaphore);
            let emitter = Arc::clone(&emitter);
            let target_id = workflow.node(target).id.clone();
            let handle = tasks.spawn(async move {
                let _permit = semaphore.acquire_owned().await;
                emitter.emit(Event::node("ParallelBranchStarted", &target_id, json!({"branch": target_id, "index": index})));
                let started = Instant::now();
                let outcome = branch.run_branch(target, join).await;
                emitter.emit(Event::node(
                    "ParallelBranchCompleted",
                    &target_id,
                    json!({"status": outcome.status.as_str(), "duration_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), "head_sha": null}),
                ));
                BranchResult {
                    index,
                    outcome,
                    branch: Some(branch),
                }
            });
            task_index.insert(handle.id(), index);
        }
        let mut finished: Vec<BranchResult> = Vec::new();
        let mut satisfied = false;
        while let Some(joined) = tasks.join_next_with_id().await {
            match joined {
                Ok((_, result)) => {
                    let succeeded = result.outcome.status == StageStatus::Success;
                    finished.push(result);
                    if succeeded && spec.join_policy == JoinPolicy::FirstSuccess && !satisfied {
                        satisfied = true;
                        tasks.abort_all();
                    }
                }
                Err(error) => {
                    let index = task_index.get(&error.id()).copied().unwrap_or(usize::MAX);
                    let outcome = if error.is_cancelled() {
                        Outcome::new(StageStatus::Skipped)
                            .with_notes("canceled: join policy first_success satisfied")
                    } else {
                        Outcome::fail(
                            format!("handler panicked: {error}"),
                            FailureClass::Deterministic,
                        )
                    };
                    finished.push(BranchResult {
                        index,
                        outcome,
                        branch: None,
                    });
                }
            }
        }
        self.merge_branches(node, join, &targets, finished)
    }

    /// Folds branch results into this traversal and builds the parallel outcome.
    fn merge_branches(
        &mut self,
        node: NodeIndex,
        join: NodeIndex,
        targets: &[NodeIndex],
        finished: Vec<BranchResult>,
    ) -> Outcome {
        let workflow = Arc::clone(&self.workflow);
        let spec = workflow.node(node);
        let mut by_index: Vec<Option<(Outcome, Option<f64>)>> = vec![None; targets.len()];
        let mut copied: BTreeMap<String, (usize, Value)> = BTreeMap::new();
        for result in &finished {
            let score = result
                .branch
                .as_ref()
                .and_then(|branch| branch.state.context.get("score"))
                .and_then(Value::as_f64);
            if let Some(slot) = by_index.get_mut(result.index) {
                *slot = Some((result.outcome.clone(), score));
            }
            let Some(branch) = &result.branch else {
                continue;
            };
            for node_id in &branch.state.completed_nodes {
                if let Some(outcome) = branch.state.node_outcomes.get(node_id) {
                    self.pending_records
                        .push((node_id.clone(), outcome.clone()));
                }
                for key in [format!("response.{node_id}"), format!("output.{node_id}")] {
                    if let Some(value) = branch.state.context.get(&key) {
                        let keep = copied
                            .get(&key)
                            .is_none_or(|(index, _)| result.index < *index);
                        if keep {
                            copied.insert(key, (result.index, value.clone()));
                        }
                    }
                }
            }
            // Visits and signatures merge in bulk: the next checkpoint compares all.
            self.state.touched_everything = true;
            for (node_id, visits) in &branch.state.node_visits {
                let entry = self.state.node_visits.entry(node_id.clone()).or_insert(0);
                *entry = (*entry).max(*visits);
            }
            for (signature, count) in &branch.state.loop_failure_signatures {
                let before = self
                    .state
                    .loop_failure_signatures
                    .get(signature)
                    .copied()
                    .unwrap_or(0);
                let delta = count.saturating_sub(before);
                *self
                    .state
                    .loop_failure_signatures
                    .entry(signature.clone())
                    .or_insert(0) += delta;
            }
        }
        self.state.stage_rank = self.ranks.load(std::sync::atomic::Ordering::SeqCst);
        let results: Vec<Value> = targets
            .iter()
            .zip(&by_index)
            .map(|(&target, result)| {
                let (outcome, score) = result.clone().unwrap_or((Outcome::new(StageStatus::Skipped), None));
                json!({"id": workflow.node(target).id, "status": outcome.status.as_str(),
                       "failure_reason": outcome.failure.as_ref().map(|failure| failure.reason.clone()),
                       "head_sha": null, "score": score})
            })
            .collect();
        let statuses: Vec<StageStatus> = by_index
            .iter()
            .map(|result| {
                result
                    .as_ref()
                    .map_or(StageStatus::Skipped, |(outcome, _)| outcome.status)
            })
            .collect();
        let success_count = statuses
            .iter()
            .filter(|status| **status == StageStatus::Success)
            .count();
        let failure_count = statuses
            .iter()
            .filter(|status| **status == StageStatus::Fail)
            .count();
        self.services.emitter.emit(Event::node(
            "ParallelCompleted",
            &spec.id,
            json!({"success_count": success_count, "failure_count": failure_count}),
        ));
        let mut outcome = match spec.join_policy {
            JoinPolicy::WaitAll if failure_count == 0 => Outcome::success(),
            JoinPolicy::WaitAll => Outcome::new(StageStatus::PartialSuccess),
            JoinPolicy::FirstSuccess if success_count > 0 => Outcome::success(),
            JoinPolicy::FirstSuccess => Outcome::fail(
                format!(
                    "join policy not satisfied: 0/{} branches succeeded",
                    targets.len()
                ),
                FailureClass::Deterministic,
            ),
        };
        for (key, (_, value)) in copied {
            outcome.context_updates.insert(key, value);
        }
        outcome
            .context_updates
            .insert("parallel.results".to_owned(), Value::Array(results));
        outcome
            .context_updates
            .insert("parallel.branch_count".to_owned(), json!(targets.len()));
        self.pending_join = Some(join);
        outcome
    }

    /// Runs one branch from `start` until the next node would be `join` or the exit node,
    /// or no edge is selectable; returns the outcome of its last stage.
    pub(crate) fn run_branch(
        &mut self,
        start: NodeIndex,
        join: NodeIndex,
    ) -> BoxFuture<'_, Outcome> {
        Box::pin(self.run_branch_inner(start, join))
    }

    async fn run_branch_inner(&mut self, start: NodeIndex, join: NodeIndex) -> Outcome {
        let workflow = Arc::clone(&self.workflow);
        let exit = workflow.exit();
        let mut node = start;
        let mut previous: Option<Outcome> = None;
        let mut entered_by = None;
        loop {
            if self.services.cancel.is_cancelled() {
                return Outcome::fail("canceled", FailureClass::Canceled);
            }
            if let Some(crate::traversal::RunEnd::Failed { reason, class, .. }) =
                self.visit_limit_end(node)
            {
                return Outcome::fail(reason, class);
            }
            let outcome = self
                .run_stage_public(node, previous.as_ref(), entered_by)
                .await;
            self.record_public(node, &outcome);
            match self.next_node(node, &outcome) {
                Some(next) if next != join && Some(next) != exit => {
                    entered_by = workflow
                        .outgoing(node)
                        .find(|(_, edge)| edge.to == next)
                        .map(|(index, _)| index);
                    node = next;
                    previous = Some(outcome);
                }
                _ => return outcome,
            }
        }
    }
}
