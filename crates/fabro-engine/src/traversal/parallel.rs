//! Parallel fan-out (SPEC 5.7): each branch runs as its own sub-traversal on a deep copy
//! of the context, concurrently up to `max_parallel`, until it would enter the join node
//! or the exit node; the results are merged back into the parent run.
//!
//! With git checkpointing each branch works in its own worktree on its own branch
//! ([`crate::git::BranchWorktree`]), committed after every branch stage; the run branch is
//! then moved to the chosen branch head by the fan-in, or here when the join node is not a
//! fan-in node. A `first_success` join cancels the other branches through their join token:
//! their current stage ends `skipped` with its status file written like any other.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use fabro_language::model::JoinPolicy;
use fabro_language::{HandlerKind, NodeIndex, StageStatus};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{Branch, Role, Traversal};
use crate::event::kind::{
    ParallelBranchCompleted, ParallelBranchStarted, ParallelCompleted, ParallelStarted,
};
use crate::event::Event;
use crate::failure::FailureClass;
use crate::git::{BranchCleanup, BranchWorktree, CheckedOutBranch, ParallelSite};
use crate::handler::fan_in::{self, Candidate};
use crate::handler::BoxFuture;
use crate::outcome::{Outcome, Signal};

mod branch_record;
mod join;
#[cfg(test)]
mod tests;

use branch_record::{BranchRecord, RecordDir};
pub(crate) use join::join_node;

/// The notes of a stage ended because its branch's `first_success` join was satisfied.
const JOIN_SATISFIED_NOTES: &str = "canceled: join policy first_success satisfied";

/// The outcome of a stage ended because its branch's join was satisfied (SPEC 5.7).
pub(super) fn join_satisfied_outcome() -> Outcome {
    Outcome::new(StageStatus::Skipped)
        .with_notes(JOIN_SATISFIED_NOTES)
        .with_signal(Signal::JoinSatisfied)
}

/// Resolves when `token` is cancelled; never without a token.
pub(super) async fn join_satisfied(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// What one branch produced, and whether it came from an interrupted earlier attempt.
struct BranchResult {
    index: usize,
    record: BranchRecord,
}

/// The git isolation of one parallel stage: each branch's worktree (by target index, `None`
/// for reused branches) and what removing them and the leftovers of reused ones takes.
struct Isolation {
    worktrees: Vec<Option<BranchWorktree>>,
    cleanups: Vec<BranchCleanup>,
}

/// A branch's entry in `parallel.results`.
#[derive(Clone)]
struct BranchSummary {
    outcome: Outcome,
    score: Option<f64>,
    head_sha: Option<String>,
}

/// Branches of an interrupted attempt of the same parallel stage that need not run again.
struct Reused {
    records: Vec<(usize, BranchRecord)>,
}

impl Reused {
    fn contains(&self, index: usize) -> bool {
        self.records.iter().any(|(reused, _)| *reused == index)
    }
}

impl Traversal {
    /// A branch traversal starting at `target` that ends before `join`, on a copy of this
    /// traversal's state, cancelled through `join_cancel` when the join is satisfied.
    fn fork(
        &mut self,
        target: NodeIndex,
        join: NodeIndex,
        join_cancel: CancellationToken,
        worktree: Option<BranchWorktree>,
    ) -> Traversal {
        let target_id = self.run.workflow.node(target).id.clone();
        // The parallel stage's rank is unique in the run, so is the branch's TMPDIR.
        let tmpdir = crate::sandbox::branch_tmpdir(
            self.run.paths.run_dir(),
            self.state.stage_rank,
            &target_id,
        );
        let mut state = self.state.clone();
        state
            .context
            .set("internal.parallel.branch", target_id.clone());
        state.completed_nodes.clear();
        state.node_outcomes.clear();
        let mut work_dir = self.work_dir.clone();
        if let Some(worktree) = &worktree {
            work_dir = worktree.work_dir();
            state
                .context
                .set("internal.work_dir", work_dir.display().to_string());
        }
        let stage_log = match &self.role {
            // Nested branches write into their enclosing branch's list.
            Role::Branch(branch) => Arc::clone(&branch.stage_log),
            Role::Root(_) => Arc::default(),
        };
        let role = Role::Branch(Box::new(Branch {
            target: target_id,
            join,
            join_cancel,
            git: worktree,
            stage_log,
        }));
        let rng = rand::rngs::StdRng::seed_from_u64(self.rng.random());
        Traversal::new(Arc::clone(&self.run), role, state, rng, work_dir, tmpdir)
    }

    /// The branch this traversal commits to and its worktree: a parallel branch's own, else
    /// the run branch; `None` without git checkpointing.
    fn checked_out(&mut self) -> Option<CheckedOutBranch<'_>> {
        match &mut self.role {
            Role::Branch(branch) => branch.git.as_mut().map(BranchWorktree::checked_out),
            Role::Root(root) => root
                .checkpointer
                .git_mut()
                .map(crate::git::RunGit::checked_out),
        }
    }

    /// Moves the checked-out line (the run branch or the enclosing parallel branch) to
    /// `head`; `outcome` unless that fails.
    pub(super) fn advance_to(&mut self, head: &str, outcome: Outcome) -> Outcome {
        let Some(mut line) = self.checked_out() else {
            return outcome;
        };
        match line.advance(head) {
            Ok(_) => outcome,
            Err(error) => Outcome::engine_error(crate::error_chain(&error)),
        }
    }

    /// With git checkpointing: commits the parallel base (SPEC 5.7) and returns its SHA;
    /// `Ok(None)` without git checkpointing.
    fn parallel_base(&mut self, node_id: &str) -> Result<Option<String>, crate::git::GitError> {
        match self.checked_out() {
            Some(mut line) => line.commit_base(node_id).map(Some),
            None => Ok(None),
        }
    }

    /// The branches of an interrupted attempt of this parallel stage that finished from the
    /// same base (and, with git, whose heads exist): a resumed stage reuses them.
    fn reusable_branches(
        &mut self,
        records: &RecordDir,
        targets: &[String],
        base: Option<&str>,
    ) -> Reused {
        let mut reused = Vec::new();
        for (index, target) in targets.iter().enumerate() {
            let Some(record) = records.load(target) else {
                continue;
            };
            if record.base_sha.as_deref() != base {
                continue;
            }
            let head_exists = match (&record.head_sha, self.checked_out()) {
                (Some(head), Some(line)) => line.has_commit(head),
                (None, None) => true,
                _ => false,
            };
            if head_exists {
                reused.push((index, record));
            }
        }
        Reused { records: reused }
    }

    /// A resumed parallel stage keeps its rank (SPEC 8.7): stage directories of later ranks
    /// are the interrupted attempt's, and only the reused branches' are kept. Ranks allocated
    /// from here on come after the reused ones.
    fn forget_interrupted_stages(&self, reused: &Reused) {
        let own_rank = self.state.stage_rank;
        let keep: std::collections::BTreeSet<&str> = reused
            .records
            .iter()
            .flat_map(|(_, record)| record.stage_dirs.iter().map(String::as_str))
            .collect();
        let stages = self.run.paths.run_dir().join("stages");
        if let Ok(entries) = std::fs::read_dir(&stages) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let stale = branch_record::stage_rank(&name).is_some_and(|rank| rank > own_rank)
                    && !keep.contains(name.as_ref());
                if stale {
                    if let Err(error) = fs_err::remove_dir_all(entry.path()) {
                        tracing::warn!(%error, "cannot remove an interrupted stage directory");
                    }
                }
            }
        }
        if let Some(highest) = reused
            .records
            .iter()
            .filter_map(|(_, record)| record.max_rank())
            .max()
        {
            self.run
                .ranks
                .fetch_max(highest, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// With git checkpointing: creates one branch worktree at `base` per target that is not
    /// reused (SPEC 5.7). `Ok(None)` without git checkpointing.
    fn isolate(
        &mut self,
        site: &ParallelSite<'_>,
        targets: &[String],
        base: &str,
        reused: &Reused,
    ) -> Result<Option<Isolation>, crate::git::GitError> {
        let Some(line) = self.checked_out() else {
            return Ok(None);
        };
        let mut isolation = Isolation {
            worktrees: Vec::new(),
            cleanups: Vec::new(),
        };
        for (index, target) in targets.iter().enumerate() {
            if reused.contains(index) {
                isolation.cleanups.push(line.branch_cleanup(site, target));
                isolation.worktrees.push(None);
                continue;
            }
            match line.create_branch(site, target, base) {
                Ok(worktree) => {
                    isolation.cleanups.push(worktree.cleanup());
                    isolation.worktrees.push(Some(worktree));
                }
                Err(error) => {
                    drop(isolation.worktrees);
                    remove_worktrees(&isolation.cleanups);
                    return Err(error);
                }
            }
        }
        Ok(Some(isolation))
    }

    /// Runs the parallel node `node` (SPEC 5.7) and returns its outcome; the join node
    /// and the branch stages are kept for the main loop. `resumed` says that this is the
    /// first stage of a resumed run: branches that had finished are then reused.
    ///
    /// Returned as a boxed `Send` future: branches run stages, which may be parallel
    /// again, and an opaque recursive future type could not be proven `Send`.
    pub(crate) fn run_parallel(
        &mut self,
        node: NodeIndex,
        resumed: bool,
    ) -> BoxFuture<'_, Outcome> {
        Box::pin(self.run_parallel_inner(node, resumed))
    }

    async fn run_parallel_inner(&mut self, node: NodeIndex, resumed: bool) -> Outcome {
        let workflow = Arc::clone(&self.run.workflow);
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
        let emitter = Arc::clone(&self.run.services.emitter);
        emitter.emit(Event::node(
            &spec.id,
            ParallelStarted {
                branch_count: targets.len(),
                join_node: workflow.node(join).id.clone(),
                join_policy: spec.join_policy.as_str().to_owned(),
                max_parallel: spec.max_parallel,
            },
        ));
        let target_ids: Vec<String> = targets
            .iter()
            .map(|&target| workflow.node(target).id.clone())
            .collect();
        // A branch that cannot get its own worktree never shares one silently (SPEC 5.7).
        let setup = match self.set_up_branches(node, resumed, &target_ids) {
            Ok(setup) => setup,
            Err(error) => return Outcome::engine_error(crate::error_chain(&error)),
        };
        let BranchSetup {
            base,
            reused,
            mut worktrees,
            cleanups,
            records,
        } = setup;
        let join_token = match self.join_cancel() {
            Some(parent) => parent.child_token(),
            None => CancellationToken::new(),
        };
        let mut finished: Vec<BranchResult> = Vec::new();
        for (index, record) in reused.records {
            tracing::info!(branch = %record.target, "reusing a parallel branch that had finished");
            if satisfies_join(spec.join_policy, record.outcome.status) {
                join_token.cancel();
            }
            finished.push(BranchResult { index, record });
        }
        let semaphore = Arc::new(tokio::sync::Semaphore::new(
            spec.max_parallel.max(1) as usize
        ));
        let mut tasks = tokio::task::JoinSet::new();
        let mut task_index = BTreeMap::new();
        for (index, &target) in targets.iter().enumerate() {
            if finished.iter().any(|result| result.index == index) {
                continue;
            }
            let worktree = worktrees.get_mut(index).and_then(Option::take);
            let branch = self.fork(target, join, join_token.clone(), worktree);
            let task = BranchTask {
                index,
                target,
                target_id: target_ids[index].clone(),
                semaphore: Arc::clone(&semaphore),
                emitter: Arc::clone(&emitter),
                join_token: join_token.clone(),
                base: base.clone(),
                records: records.clone(),
            };
            let handle = tasks.spawn(task.run(branch));
            task_index.insert(handle.id(), (index, target_ids[index].clone()));
        }
        collect_branches(
            &mut tasks,
            &task_index,
            &mut finished,
            &join_token,
            spec.join_policy,
        )
        .await;
        let isolated = !cleanups.is_empty();
        if let Some(stopped) = finished
            .iter()
            .find(|result| result.record.outcome.engine_error)
        {
            let outcome = stopped.record.outcome.clone();
            remove_worktrees(&cleanups);
            return outcome;
        }
        // A run cancelled (or stopped by its budget, SPEC 17.1) while branches ran
        // interrupts the parallel stage itself: it is not recorded, and a resume runs it
        // again (SPEC 4.8).
        if self.run.services.cancel.is_cancelled() {
            remove_worktrees(&cleanups);
            return Outcome::fail("canceled", FailureClass::Canceled);
        }
        let mut outcome = self.merge_branches(node, join, &targets, finished);
        if isolated && workflow.node(join).handler != HandlerKind::FanIn && !outcome.is_fail() {
            outcome = self.move_to_best_branch(outcome);
        }
        remove_worktrees(&cleanups);
        outcome
    }

    /// The record of this branch traversal, ended with `outcome`.
    fn branch_record(&self, base_sha: Option<String>, outcome: Outcome) -> BranchRecord {
        let state = &self.state;
        let mut outputs = BTreeMap::new();
        let mut completed = Vec::new();
        for node_id in &state.completed_nodes {
            if let Some(outcome) = state.node_outcomes.get(node_id) {
                completed.push((node_id.clone(), outcome.clone()));
            }
            for key in [format!("response.{node_id}"), format!("output.{node_id}")] {
                if let Some(value) = state.context.get(&key) {
                    outputs.insert(key, value.clone());
                }
            }
        }
        BranchRecord {
            target: self.role.branch_target().unwrap_or_default().to_owned(),
            base_sha,
            outcome,
            head_sha: match &self.role {
                Role::Branch(branch) => branch.git.as_ref().map(BranchWorktree::head_sha),
                Role::Root(_) => None,
            },
            score: state.context.get("score").and_then(Value::as_f64),
            completed,
            outputs,
            node_visits: state.node_visits.clone(),
            loop_failure_signatures: state.loop_failure_signatures.clone(),
            stage_dirs: match &self.role {
                Role::Branch(branch) => branch
                    .stage_log
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone(),
                Role::Root(_) => Vec::new(),
            },
        }
    }

    /// Without a fan-in node as join: moves the run branch to the best successful branch
    /// head by the fan-in ranking (SPEC 5.7, 5.8).
    fn move_to_best_branch(&mut self, outcome: Outcome) -> Outcome {
        let candidates: Vec<Candidate> =
            fan_in::candidates(outcome.context_updates.get("parallel.results"))
                .into_iter()
                .filter(|candidate| {
                    matches!(
                        candidate.stage_status(),
                        Some(StageStatus::Success | StageStatus::PartialSuccess)
                    ) && candidate.head_sha.is_some()
                })
                .collect();
        if candidates.is_empty() {
            return outcome;
        }
        let best = &candidates[fan_in::best_by_heuristic(&candidates)];
        let Some(head) = best.head_sha.clone() else {
            return outcome;
        };
        self.advance_to(&head, outcome)
    }

    /// Folds branch results into this traversal and builds the parallel outcome.
    fn merge_branches(
        &mut self,
        node: NodeIndex,
        join: NodeIndex,
        targets: &[NodeIndex],
        finished: Vec<BranchResult>,
    ) -> Outcome {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(node);
        let mut by_index: Vec<Option<BranchSummary>> = vec![None; targets.len()];
        let mut copied: BTreeMap<String, (usize, Value)> = BTreeMap::new();
        for BranchResult { index, record } in finished {
            for (node_id, outcome) in &record.completed {
                self.pending_records
                    .push((node_id.clone(), outcome.clone()));
            }
            for (key, value) in &record.outputs {
                let keep = copied.get(key).is_none_or(|(earlier, _)| index < *earlier);
                if keep {
                    copied.insert(key.clone(), (index, value.clone()));
                }
            }
            // Visits and signatures merge in bulk: the next checkpoint compares all.
            self.state.touched_everything = true;
            for (node_id, visits) in &record.node_visits {
                let entry = self.state.node_visits.entry(node_id.clone()).or_insert(0);
                *entry = (*entry).max(*visits);
            }
            for (signature, count) in &record.loop_failure_signatures {
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
            if let Some(slot) = by_index.get_mut(index) {
                *slot = Some(BranchSummary {
                    outcome: record.outcome,
                    score: record.score,
                    head_sha: record.head_sha,
                });
            }
        }
        self.state.stage_rank = self.run.ranks.load(std::sync::atomic::Ordering::SeqCst);
        let results: Vec<Value> = targets
            .iter()
            .zip(&by_index)
            .map(|(&target, result)| {
                let BranchSummary {
                    outcome,
                    score,
                    head_sha,
                } = result.clone().unwrap_or(BranchSummary {
                    outcome: Outcome::new(StageStatus::Skipped),
                    score: None,
                    head_sha: None,
                });
                json!({"id": workflow.node(target).id, "status": outcome.status.as_str(),
                       "failure_reason": outcome.failure.as_ref().map(|failure| failure.reason.clone()),
                       "head_sha": head_sha, "score": score})
            })
            .collect();
        let statuses: Vec<StageStatus> = by_index
            .iter()
            .map(|result| {
                result
                    .as_ref()
                    .map_or(StageStatus::Skipped, |summary| summary.outcome.status)
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
        self.run.services.emitter.emit(Event::node(
            &spec.id,
            ParallelCompleted {
                failure_count,
                success_count,
            },
        ));
        let mut outcome = join_outcome(spec.join_policy, &statuses);
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
}

/// What a parallel stage needs before its branches start.
struct BranchSetup {
    /// The parallel base commit, with git checkpointing.
    base: Option<String>,
    /// Branches of an interrupted attempt that need not run again.
    reused: Reused,
    /// Each branch's worktree by target index, with git isolation.
    worktrees: Vec<Option<BranchWorktree>>,
    /// What removing the worktrees takes.
    cleanups: Vec<BranchCleanup>,
    /// Where branch records are stored: a top-level parallel stage's only.
    records: Option<RecordDir>,
}

impl Traversal {
    /// The base commit, the reused branches of an interrupted attempt and the branch
    /// worktrees of the parallel stage `node`.
    fn set_up_branches(
        &mut self,
        node: NodeIndex,
        resumed: bool,
        target_ids: &[String],
    ) -> Result<BranchSetup, crate::git::GitError> {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(node);
        let visit = self.state.node_visits.get(&spec.id).copied().unwrap_or(1);
        let run_dir = self.run.paths.run_dir().to_path_buf();
        let site = ParallelSite {
            run_dir: &run_dir,
            node_id: &spec.id,
            visit,
        };
        // Only a top-level parallel stage can be the stage a run resumes at.
        let records =
            matches!(self.role, Role::Root(_)).then(|| RecordDir::new(&run_dir, &spec.id, visit));
        let isolated = self.parallel_base(&spec.id).and_then(|base| {
            let reused = match (&records, resumed) {
                (Some(records), true) => {
                    let reused = self.reusable_branches(records, target_ids, base.as_deref());
                    self.forget_interrupted_stages(&reused);
                    reused
                }
                _ => Reused {
                    records: Vec::new(),
                },
            };
            let isolation = match &base {
                Some(base) => self.isolate(&site, target_ids, base, &reused)?,
                None => None,
            };
            Ok((base, reused, isolation))
        });
        let (base, reused, isolation) = isolated?;
        let (worktrees, cleanups) = match isolation {
            Some(isolation) => (isolation.worktrees, isolation.cleanups),
            None => {
                self.emit(Event::warning(
                    Some(&spec.id),
                    "parallel_no_isolation",
                    &format!(
                        "branches of {} share the working directory (no git isolation)",
                        spec.id
                    ),
                ));
                (Vec::new(), Vec::new())
            }
        };
        Ok(BranchSetup {
            base,
            reused,
            worktrees,
            cleanups,
            records,
        })
    }
}

/// One branch's task: what it needs besides its traversal.
struct BranchTask {
    index: usize,
    target: NodeIndex,
    target_id: String,
    semaphore: Arc<tokio::sync::Semaphore>,
    emitter: Arc<crate::event::Emitter>,
    join_token: CancellationToken,
    base: Option<String>,
    records: Option<RecordDir>,
}

impl BranchTask {
    /// Waits for a slot under `max_parallel` (or the join), runs the branch, stores its
    /// record for a resume and emits its events.
    async fn run(self, mut branch: Traversal) -> BranchResult {
        let BranchTask {
            index,
            target,
            target_id,
            semaphore,
            emitter,
            join_token,
            base,
            records,
        } = self;
        let permit = tokio::select! {
            biased;
            () = join_token.cancelled() => None,
            permit = semaphore.acquire_owned() => Some(permit),
        };
        if permit.is_none() {
            // The join was satisfied before this branch could start.
            let record = branch.branch_record(base, join_satisfied_outcome());
            return BranchResult { index, record };
        }
        emitter.emit(Event::node(
            &target_id,
            ParallelBranchStarted {
                branch: target_id.clone(),
                index,
            },
        ));
        let started = Instant::now();
        let outcome = branch.run_branch(target).await;
        let record = branch.branch_record(base, outcome);
        // A branch stopped by a storage failure, or interrupted by the run's
        // cancellation or budget (SPEC 4.8, 17.1), runs again on resume.
        let interrupted = branch.run.services.cancel.is_cancelled()
            && record.outcome.failure_class() == Some(FailureClass::Canceled);
        if let Some(records) = records
            .as_ref()
            .filter(|_| !record.outcome.engine_error && !interrupted)
        {
            if let Err(error) = records.store(&record) {
                tracing::warn!(%error, "cannot store a parallel branch's record");
            }
        }
        emitter.emit(Event::node(
            &target_id,
            ParallelBranchCompleted {
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                head_sha: record.head_sha.clone(),
                status: record.outcome.status,
            },
        ));
        BranchResult { index, record }
    }
}

/// Collects the branch tasks as they finish, cancelling the others through `join_token`
/// once `policy` is satisfied (SPEC 5.7); a panicked branch is a failed one.
async fn collect_branches(
    tasks: &mut tokio::task::JoinSet<BranchResult>,
    task_index: &BTreeMap<tokio::task::Id, (usize, String)>,
    finished: &mut Vec<BranchResult>,
    join_token: &CancellationToken,
    policy: JoinPolicy,
) {
    while let Some(joined) = tasks.join_next_with_id().await {
        match joined {
            Ok((_, result)) => {
                let satisfied = satisfies_join(policy, result.record.outcome.status);
                finished.push(result);
                if satisfied && !join_token.is_cancelled() {
                    // The other branches end their current stage `skipped`.
                    join_token.cancel();
                }
            }
            Err(error) => {
                let (index, target) = task_index
                    .get(&error.id())
                    .cloned()
                    .unwrap_or((usize::MAX, String::new()));
                let outcome = Outcome::fail(
                    format!("handler panicked: {error}"),
                    FailureClass::Deterministic,
                );
                finished.push(BranchResult {
                    index,
                    record: BranchRecord::bare(&target, outcome),
                });
            }
        }
    }
}

/// Whether a branch finished with `status` satisfies the join under `policy` before the
/// others finish: only a `first_success` join, by a successful branch (SPEC 5.7).
fn satisfies_join(policy: JoinPolicy, status: StageStatus) -> bool {
    policy == JoinPolicy::FirstSuccess && status == StageStatus::Success
}

/// The parallel stage's outcome under `policy` from its branches' final statuses, in
/// target order (SPEC 5.7): `wait_all` succeeds without failures and is `partial_success`
/// with some; `first_success` succeeds with one success and fails with none.
fn join_outcome(policy: JoinPolicy, statuses: &[StageStatus]) -> Outcome {
    let count = |wanted: StageStatus| statuses.iter().filter(|status| **status == wanted).count();
    match policy {
        JoinPolicy::WaitAll if count(StageStatus::Fail) == 0 => Outcome::success(),
        JoinPolicy::WaitAll => Outcome::new(StageStatus::PartialSuccess),
        JoinPolicy::FirstSuccess if count(StageStatus::Success) > 0 => Outcome::success(),
        JoinPolicy::FirstSuccess => Outcome::fail(
            format!(
                "join policy not satisfied: 0/{} branches succeeded",
                statuses.len()
            ),
            FailureClass::Deterministic,
        ),
    }
}

/// Removes branch worktrees and their registrations, keeping the branches (SPEC 5.7: the
/// audit trail). A failure is logged: the stage's result does not depend on it.
fn remove_worktrees(cleanups: &[BranchCleanup]) {
    for cleanup in cleanups {
        if let Err(error) = cleanup.remove() {
            tracing::warn!(error = %crate::error_chain(&error), "cannot remove a parallel branch worktree");
        }
    }
}
