//! One stage of a traversal (SPEC 4.2, 9.3): visits and rank, the stage directory, the
//! attempts with node retries, the handler call with timeout and panic containment,
//! `status.json`, and applying the result to the run state.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro_language::value::format_duration;
use fabro_language::{HandlerKind, NodeIndex, StageStatus};
use serde_json::Value;

use super::{parallel, Role, Traversal};
use crate::catch_panic::CatchPanic;
use crate::config::HookEvent;
use crate::event::kind::{EventUsage, StageCompleted, StageRetrying, StageStarted};
use crate::event::Event;
use crate::failure::{failure_signature, FailureClass};
use crate::handler::{self, StageInput};
use crate::hook::Gate;
use crate::outcome::{Outcome, Signal};
use crate::record::{StageStatusFile, UsageRecord};
use crate::retry::RetryPlan;
use crate::run_dir::write_json_atomic;
use crate::timestamp::now_rfc3339;

/// One stage while it runs: where it is recorded and when it started.
struct StageFrame {
    /// Its node.
    node: NodeIndex,
    /// The node's visit.
    visit: u32,
    /// Its rank.
    rank: u32,
    /// `{run_dir}/stages/{rank:03}-{node_id}@{visit}/`, created.
    stage_dir: std::path::PathBuf,
    /// The first stage of a resumed run.
    resumed: bool,
    /// The preamble of an LLM stage, empty for others.
    preamble: String,
    /// When its first attempt started.
    started: Instant,
    /// The same, for `status.json`.
    started_at: String,
    /// Its `StageStarted`, for `stage_start` hooks (SPEC 20.4).
    started_event: crate::event::EventEnvelope,
}

/// A retryable outcome of the last allowed attempt (SPEC 9.3): an exhausted `retry` becomes
/// `fail` with `max retries exceeded`; `allow_partial` accepts it as `partial_success`.
fn retries_exhausted(outcome: Outcome, allow_partial: bool) -> Outcome {
    let mut exhausted = if outcome.status == StageStatus::Retry {
        let mut failed = outcome;
        failed.status = StageStatus::Fail;
        failed.failure = Some(crate::outcome::Failure {
            reason: "max retries exceeded".to_owned(),
            class: FailureClass::TransientInfra,
        });
        failed
    } else {
        outcome
    };
    if allow_partial {
        exhausted.status = StageStatus::PartialSuccess;
        exhausted.notes = Some("retries exhausted, partial accepted".to_owned());
    }
    exhausted
}

/// Context values whose compact JSON is larger than this many bytes are offloaded to
/// the blob store (SPEC 7.7).
const OFFLOAD_THRESHOLD: usize = 102_400;

impl Traversal {
    /// Executes one stage of `node` with node retries (SPEC 9.3) and `auto_status`.
    pub(super) async fn run_stage(
        &mut self,
        node: NodeIndex,
        previous: Option<&Outcome>,
        entered_by: Option<fabro_language::EdgeIndex>,
    ) -> Outcome {
        let services = Arc::clone(&self.run.services);
        let _running = services.assets.stage_running();
        let frame = match self.begin_stage(node, entered_by) {
            Ok(frame) => frame,
            Err(error) => return Outcome::engine_error(error),
        };
        let (outcome, attempts) = match self.stage_start_hooks(&frame).await {
            Some(stopped) => (stopped, 1),
            None => self.attempts(&frame, previous).await,
        };
        self.finish_stage(&frame, outcome, attempts)
    }

    /// SPEC 20.4: the stage's `stage_start` hooks; the outcome of a stage a blocking one
    /// stopped before its handler ran.
    async fn stage_start_hooks(&mut self, frame: &StageFrame) -> Option<Outcome> {
        let services = Arc::clone(&self.run.services);
        if services.hooks.is_empty() {
            return None;
        }
        let place = self.hook_place(&frame.stage_dir);
        let gate = services
            .hooks
            .stage_start(&frame.started_event, place)
            .await;
        let stopped = match gate {
            Gate::Open => return None,
            Gate::Failed(reason) => Outcome::fail(reason, FailureClass::Deterministic),
            Gate::Canceled => Outcome::fail("canceled", FailureClass::Canceled),
        };
        let node_id = self.run.workflow.node(frame.node).id.clone();
        self.state.node_retries.insert(node_id, 0);
        Some(stopped)
    }

    /// Counts the visit, allocates the rank, sets the stage's context keys, creates the
    /// stage directory and emits `StageStarted`; fails when the stage directory cannot be
    /// created.
    fn begin_stage(
        &mut self,
        node: NodeIndex,
        entered_by: Option<fabro_language::EdgeIndex>,
    ) -> std::io::Result<StageFrame> {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(node);
        self.state.touch(&spec.id);
        let visit = {
            let visits = self.state.node_visits.entry(spec.id.clone()).or_insert(0);
            *visits += 1;
            *visits
        };
        let epoch_visit = {
            let visits = self
                .state
                .epoch_node_visits
                .entry(spec.id.clone())
                .or_insert(0);
            *visits += 1;
            *visits
        };
        let rank = self
            .run
            .ranks
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        self.state.stage_rank = rank;
        let context = &mut self.state.context;
        context.set("current_node", spec.id.clone());
        context.set("internal.node_visit_count", epoch_visit);
        context.set(format!("internal.retry_count.{}", spec.id), 0);
        let resumed = match &mut self.role {
            Role::Root(root) => std::mem::take(&mut root.resumed_stage),
            Role::Branch(_) => false,
        };
        let fidelity = self.stage_fidelity(node, entered_by, resumed);
        let stage_dir = self.run.paths.stage_dir(rank, &spec.id, visit);
        self.last_stage_dir = Some(stage_dir.clone());
        if let (Role::Branch(branch), Some(name)) = (&self.role, stage_dir.file_name()) {
            branch
                .stage_log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(name.to_string_lossy().into_owned());
        }
        if resumed {
            // A stage executed again after a crash reuses its rank; nothing of the
            // interrupted attempt may survive (SPEC 8.7).
            let _ = fs_err::remove_dir_all(&stage_dir);
        }
        fs_err::create_dir_all(&stage_dir)?;
        let isolation = crate::sandbox::stage_isolation(
            &self.run.services.sandbox_env,
            &self.run.services.emitter,
            &spec.id,
            spec.handler,
        );
        let started_event = self.emit(Event::node(
            &spec.id,
            StageStarted {
                attempt: 1,
                branch: self.role.branch_target().map(str::to_owned),
                handler: spec.handler.as_str().to_owned(),
                isolation,
                rank,
                visit,
            },
        ));
        let preamble = if spec.handler.is_llm() {
            crate::preamble::build(
                fidelity,
                &crate::preamble::PreambleInput {
                    workflow: &workflow,
                    context: &self.state.context,
                    stages: &self.state.epoch_stages,
                    run_dir: self.run.paths.run_dir(),
                    blobs: &self.run.services.blobs,
                },
            )
        } else {
            String::new()
        };
        let frame = StageFrame {
            node,
            visit,
            rank,
            stage_dir,
            resumed,
            preamble,
            started: Instant::now(),
            started_at: now_rfc3339(),
            started_event,
        };
        if let Err(error) = self.save_stage(&frame) {
            // The stage is saved again when it ends; a store that failed for good stops
            // the run then.
            tracing::warn!(error = %crate::error_chain(&error), "cannot save a starting stage");
        }
        Ok(frame)
    }

    /// Hands the stage's directory to the run store, which copies its row and files when
    /// it keeps records elsewhere (SPEC 18.1).
    fn save_stage(&self, frame: &StageFrame) -> Result<(), crate::store::StoreError> {
        let stage = crate::run_stages::StageDir {
            rank: frame.rank,
            node_id: self.run.workflow.node(frame.node).id.clone(),
            visit: frame.visit,
            path: frame.stage_dir.clone(),
        };
        let run_id = crate::RunId::from(self.run.services.run_id.as_str());
        self.run.services.runs.save_stage(&run_id, &stage)
    }

    /// The stage's fidelity (SPEC 6.4, 6.7), also set as `internal.fidelity`, and its
    /// thread as `internal.thread_id` (SPEC 6.5).
    fn stage_fidelity(
        &mut self,
        node: NodeIndex,
        entered_by: Option<fabro_language::EdgeIndex>,
        resumed: bool,
    ) -> fabro_language::model::Fidelity {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(node);
        let mut fidelity = entered_by
            .and_then(|edge| workflow.edge(edge).fidelity)
            .or(spec.llm.fidelity)
            .or(workflow.settings.default_fidelity)
            .unwrap_or(fabro_language::model::Fidelity::Compact);
        if resumed && fidelity == fabro_language::model::Fidelity::Full {
            fidelity = fabro_language::model::Fidelity::SummaryHigh;
        }
        let fidelity = crate::handler::stage_fidelity(spec, fidelity, &self.run.services);
        let context = &mut self.state.context;
        context.set("internal.fidelity", fidelity.as_str());
        let thread = crate::thread::thread_key(
            &workflow,
            node,
            entered_by,
            fidelity,
            &self.run.services.threads,
        );
        context.set(
            "internal.thread_id",
            thread.map_or(Value::Null, Value::from),
        );
        fidelity
    }

    /// The attempts of a stage with node retries (SPEC 9.3): its outcome and the number of
    /// attempts made.
    async fn attempts(&mut self, frame: &StageFrame, previous: Option<&Outcome>) -> (Outcome, u32) {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(frame.node);
        let plan = if spec.handler == HandlerKind::Conditional {
            RetryPlan::preset(fabro_language::model::RetryPolicy::None)
        } else {
            RetryPlan::for_node(spec, workflow.settings.default_max_retries)
        };
        let mut attempt = 1;
        let outcome = loop {
            let resumed_attempt = frame.resumed && attempt == 1;
            let outcome = self
                .attempt(
                    frame.node,
                    &frame.stage_dir,
                    attempt,
                    previous,
                    &frame.preamble,
                    resumed_attempt,
                )
                .await;
            let retryable = outcome.status == StageStatus::Retry
                || (outcome.is_fail()
                    && outcome.failure_class() == Some(FailureClass::TransientInfra));
            if !retryable || outcome.engine_error || self.run.services.cancel.is_cancelled() {
                break outcome;
            }
            if attempt >= plan.max_attempts {
                break retries_exhausted(outcome, spec.allow_partial);
            }
            let delay = plan.delay(attempt + 1, &mut self.rng);
            if let Err(error) = self.retry_later(frame, attempt, &outcome, delay) {
                break Outcome::engine_error(format!(
                    "cannot write {}: {error}",
                    frame.stage_dir.join("status.json").display()
                ));
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.run.services.cancel.cancelled() => break Outcome::fail("canceled", FailureClass::Canceled),
                () = parallel::join_satisfied(self.join_cancel()) => break parallel::join_satisfied_outcome(),
            }
            attempt += 1;
        };
        if attempt == 1 {
            self.state.node_retries.insert(spec.id.clone(), 0);
        }
        (outcome, attempt)
    }

    /// Records that attempt `attempt` of the stage will be retried after `delay`: the
    /// retry count, the attempt's `status.json` and files archived, `StageRetrying`. Fails
    /// when `status.json` cannot be written.
    fn retry_later(
        &mut self,
        frame: &StageFrame,
        attempt: u32,
        outcome: &Outcome,
        delay: Duration,
    ) -> std::io::Result<()> {
        let node_id = self.run.workflow.node(frame.node).id.clone();
        let retries = self.state.node_retries.entry(node_id.clone()).or_insert(0);
        *retries = attempt;
        self.state
            .context
            .set(format!("internal.retry_count.{node_id}"), attempt);
        self.write_status(frame, attempt, outcome)?;
        archive_attempt(&frame.stage_dir, attempt);
        self.emit(Event::node(
            &node_id,
            StageRetrying {
                attempt,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                failure_class: outcome
                    .failure_class()
                    .map_or("", FailureClass::as_str)
                    .to_owned(),
                failure_reason: outcome.failure_reason().to_owned(),
                next_attempt: attempt + 1,
            },
        ));
        Ok(())
    }

    /// Offloads large values, applies `auto_status`, sets `failure_signature`, writes the
    /// final `status.json` and emits `StageCompleted`.
    fn finish_stage(&mut self, frame: &StageFrame, mut outcome: Outcome, attempts: u32) -> Outcome {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(frame.node);
        if let Err(error) = self.offload_large_values(&mut outcome) {
            // SPEC 18.4.4: a blob the stage produced cannot be kept, so the stage's
            // result cannot be recorded; the run stops, resumable.
            outcome = Outcome::engine_error(format!(
                "cannot store a large context value: {}",
                crate::error_chain(&error)
            ));
        }
        let canceled = outcome.failure_class() == Some(FailureClass::Canceled);
        if spec.auto_status
            && !matches!(outcome.status, StageStatus::Success | StageStatus::Skipped)
            && !canceled
        {
            outcome = Outcome::success()
                .with_notes("auto-status: handler completed without writing status");
        }
        if spec.handler == HandlerKind::Command && !canceled {
            // SPEC 17.7: the paths the stage's run-branch commit changes.
            if let Some(checkpointer) = self.checkpointer_mut() {
                outcome.files_touched = checkpointer.stage_command();
            }
        }
        if outcome.is_fail() && spec.handler != HandlerKind::Conditional {
            if let Some(class) = outcome.failure_class() {
                let signature = failure_signature(&spec.id, class, outcome.failure_reason());
                self.state.context.set("failure_signature", signature);
            }
        }
        if let Err(error) = self.write_status(frame, attempts, &outcome) {
            if !outcome.engine_error {
                outcome = Outcome::engine_error(format!(
                    "cannot write {}: {error}",
                    frame.stage_dir.join("status.json").display()
                ));
            }
        } else if let Err(error) = self.save_stage(frame) {
            if !outcome.engine_error {
                outcome = Outcome::engine_error(format!(
                    "cannot save the stage: {}",
                    crate::error_chain(&error)
                ));
            }
        }
        let duration_ms = u64::try_from(frame.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let completed = self.emit(Event::node(
            &spec.id,
            StageCompleted {
                attempts,
                duration_ms,
                failure_class: outcome
                    .failure_class()
                    .map(|class| class.as_str().to_owned()),
                failure_reason: outcome
                    .failure
                    .as_ref()
                    .map(|failure| failure.reason.clone()),
                files_touched: outcome.files_touched.clone(),
                model: outcome.model.clone(),
                outcome: outcome.condition_value().to_owned(),
                provider: outcome.provider.clone(),
                rank: frame.rank,
                status: outcome.status,
                usage: outcome.usage.map(EventUsage::from),
                visit: frame.visit,
            },
        ));
        self.run.services.hooks.fire(
            HookEvent::StageComplete,
            &completed,
            self.hook_place(&frame.stage_dir),
        );
        outcome
    }

    /// SPEC 7.7: context values the stage wrote whose compact JSON exceeds 100 KB go to
    /// the blob store and are replaced by their refs, so checkpoints, events and
    /// `status.json` stay small. A blob store that cannot keep one is an error of the
    /// run's own storage.
    fn offload_large_values(&self, outcome: &mut Outcome) -> Result<(), crate::blob::BlobError> {
        for value in outcome.context_updates.values_mut() {
            if matches!(value, Value::Null | Value::Bool(_) | Value::Number(_)) {
                continue;
            }
            let Ok(bytes) = serde_json::to_vec(value) else {
                continue;
            };
            if bytes.len() <= OFFLOAD_THRESHOLD {
                continue;
            }
            let (reference, _) = self.run.services.blobs.put(&bytes)?;
            *value = Value::String(reference.into_string());
        }
        Ok(())
    }

    /// One attempt of the handler, with the node timeout and panic containment.
    async fn attempt(
        &mut self,
        node: NodeIndex,
        stage_dir: &Path,
        attempt: u32,
        previous: Option<&Outcome>,
        preamble: &str,
        resumed: bool,
    ) -> Outcome {
        let workflow = Arc::clone(&self.run.workflow);
        let spec = workflow.node(node);
        if spec.handler == HandlerKind::Parallel {
            // Parallel nodes start sub-traversals, so the traversal runs them itself.
            let outcome = self.run_parallel(node, resumed).await;
            return if self.join_satisfied() {
                parallel::join_satisfied_outcome()
            } else {
                outcome
            };
        }
        let input = StageInput {
            workflow: &workflow,
            node: spec,
            node_index: node,
            context: &self.state.context,
            stage_dir,
            work_dir: &self.work_dir,
            tmpdir: &self.tmpdir,
            attempt,
            previous,
            preamble,
            services: &self.run.services,
        };
        // The watchdog must not fire while a person is asked or a wait node sleeps.
        let pauses_watchdog = matches!(spec.handler, HandlerKind::Human | HandlerKind::Wait);
        if pauses_watchdog {
            self.run
                .watchdog_paused
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let handles_own_timeout = handler::handles_own_timeout(spec);
        let execution = CatchPanic::new(handler::execute(&input));
        // A branch whose join is satisfied drops its handler (killing its processes) and
        // ends the stage `skipped` (SPEC 5.7).
        let join_cancel = self.join_cancel().cloned();
        let execution = async {
            tokio::select! {
                biased;
                result = execution => result,
                () = parallel::join_satisfied(join_cancel.as_ref()) => Ok(parallel::join_satisfied_outcome()),
            }
        };
        let result = match spec.timeout().filter(|_| !handles_own_timeout) {
            Some(limit) => match tokio::time::timeout(limit, execution).await {
                Ok(result) => result,
                Err(_) => Ok(Outcome::fail(
                    format!("stage timed out after {}", format_duration(limit)),
                    FailureClass::TransientInfra,
                )),
            },
            None => execution.await,
        };
        if pauses_watchdog {
            self.run
                .watchdog_paused
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            self.run.services.emitter.touch();
        }
        let outcome = result.unwrap_or_else(|message| {
            Outcome::fail(
                format!("handler panicked: {message}"),
                FailureClass::Deterministic,
            )
        });
        // SPEC 5.8: the line this traversal commits to moves to the head the fan-in chose.
        match &outcome.signal {
            Some(Signal::FanInHead(head)) => {
                let head = head.clone();
                self.advance_to(&head, outcome)
            }
            _ => outcome,
        }
    }

    /// Writes `status.json` of attempt `attempt` of the stage (SPEC 7.4).
    fn write_status(
        &self,
        frame: &StageFrame,
        attempt: u32,
        outcome: &Outcome,
    ) -> std::io::Result<()> {
        let (node, visit, rank, stage_dir) =
            (frame.node, frame.visit, frame.rank, &frame.stage_dir);
        let spec = self.run.workflow.node(node);
        let signature = match (outcome.is_fail(), outcome.failure_class()) {
            (true, Some(class)) => {
                Some(failure_signature(&spec.id, class, outcome.failure_reason()))
            }
            _ => None,
        };
        let record = StageStatusFile {
            node_id: spec.id.clone(),
            visit,
            rank,
            attempt,
            handler: spec.handler.as_str().to_owned(),
            status: outcome.status,
            outcome: outcome.condition_value().to_owned(),
            failure_reason: outcome
                .failure
                .as_ref()
                .map(|failure| failure.reason.clone()),
            failure_class: outcome
                .failure_class()
                .map(|class| class.as_str().to_owned()),
            failure_signature: signature,
            preferred_next_label: outcome.preferred_label.clone(),
            suggested_next_ids: outcome.suggested_next_ids.clone(),
            context_updates: outcome.context_updates.clone(),
            notes: outcome.notes.clone(),
            files_touched: outcome.files_touched.clone(),
            model: outcome.model.clone(),
            provider: outcome.provider.clone(),
            usage: outcome.usage.map(UsageRecord::from),
            started_at: frame.started_at.clone(),
            finished_at: now_rfc3339(),
            duration_ms: u64::try_from(frame.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        write_json_atomic(&stage_dir.join("status.json"), &record)
    }

    /// Applies a completed stage to the run state (SPEC 4.2).
    pub(super) fn record(&mut self, node: NodeIndex, outcome: &Outcome) {
        let spec = self.run.workflow.node(node);
        let context = &mut self.state.context;
        for (key, value) in &outcome.context_updates {
            context.set(key.clone(), value.clone());
        }
        context.set("outcome", outcome.condition_value());
        context.set(
            "preferred_label",
            outcome.preferred_label.clone().unwrap_or_default(),
        );
        if outcome.is_fail() {
            context.set(
                "failure_class",
                outcome.failure_class().map_or("", FailureClass::as_str),
            );
        } else {
            context.set("failure_class", "");
            context.set("failure_signature", "");
        }
        self.state.completed_nodes.push(spec.id.clone());
        // Signals are for the traversal only; the state keeps what the records keep.
        let stored = Outcome {
            signal: None,
            ..outcome.clone()
        };
        if !matches!(spec.handler, HandlerKind::Start | HandlerKind::Exit) {
            self.state
                .epoch_stages
                .push((spec.id.clone(), stored.clone()));
        }
        self.state.node_outcomes.insert(spec.id.clone(), stored);
        self.state.touch(&spec.id);
        for (node_id, branch_outcome) in std::mem::take(&mut self.pending_records) {
            self.state.touch(&node_id);
            self.state.completed_nodes.push(node_id.clone());
            self.state
                .node_outcomes
                .insert(node_id.clone(), branch_outcome.clone());
            self.state.epoch_stages.push((node_id, branch_outcome));
        }
    }
}

/// Moves the files of attempt `attempt` into `attempts/{attempt}/` (SPEC 7.5).
fn archive_attempt(stage_dir: &Path, attempt: u32) {
    let target = stage_dir.join("attempts").join(attempt.to_string());
    if fs_err::create_dir_all(&target).is_err() {
        return;
    }
    for name in [
        "prompt.md",
        "response.md",
        "status.json",
        "stdout.log",
        "stderr.log",
    ] {
        let source = stage_dir.join(name);
        if source.exists() {
            let _ = fs_err::rename(&source, target.join(name));
        }
    }
}
