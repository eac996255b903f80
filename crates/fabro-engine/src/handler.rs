//! Stage handlers (SPEC 5): one module per handler type, dispatched by
//! [`HandlerKind`] in [`execute`].
//!
//! A handler gets a [`StageInput`] (the node, a read-only snapshot of the context, the
//! stage directory, the working directory and the run's services) and returns an
//! [`Outcome`]. Handlers never fail with `Err`: every problem becomes a failed outcome
//! with a reason and a failure class (SPEC 4.3).

mod agent;

pub(crate) use agent::AgentExtensions;
mod command;
mod conditional;
pub(crate) mod fan_in;
mod human;
mod llm;
mod prompt;
mod reply;
mod sub_workflow;
mod wait;

use std::path::Path;
use std::sync::Arc;

use fabro_language::{HandlerKind, Node, NodeIndex, Workflow};
use tokio_util::sync::CancellationToken;

use crate::blob::BlobStore;
use crate::context::Context;
use crate::event::Emitter;
use crate::outcome::Outcome;
use crate::run_index::RunStatus;
use crate::sandbox::SandboxEnv;

/// A boxed `Send` future: handlers and traversals that run stages again (sub-workflows,
/// parallel branches) return one, since a recursive opaque future type could not be proven
/// `Send`.
pub(crate) type BoxFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Starts child workflow runs for sub-workflow nodes (SPEC 5.10). The run side implements
/// it, so handlers never prepare runs themselves.
pub(crate) trait ChildRunner: Send + Sync {
    /// Prepares the child workflow `request.reference` (relative to the parent's run
    /// directory, where children are stored, SPEC 4.1) as a new run and returns it ready
    /// to execute, or why it cannot run.
    fn start(&self, request: ChildRequest) -> Result<ChildRun, ChildRunFailed>;
}

/// What a sub-workflow node asks of its [`ChildRunner`].
#[derive(Debug, Clone)]
pub(crate) struct ChildRequest {
    /// The child workflow as the node names it.
    pub(crate) reference: String,
    /// The parent's `graph.goal`, the child's goal when it has none of its own.
    pub(crate) fallback_goal: Option<String>,
    /// The parent run's id, recorded in the child's manifest.
    pub(crate) parent_run_id: String,
    /// The child's working directory.
    pub(crate) work_dir: std::path::PathBuf,
    /// Cancels the child run.
    pub(crate) cancel: CancellationToken,
}

/// A prepared child run.
pub(crate) struct ChildRun {
    /// Its run id.
    pub(crate) run_id: String,
    /// Its run directory.
    pub(crate) run_dir: std::path::PathBuf,
    /// Executes it to the end.
    pub(crate) execution: BoxFuture<'static, Result<ChildReport, ChildRunFailed>>,
}

/// How a child run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChildReport {
    /// Its final status.
    pub(crate) status: RunStatus,
    /// Why, for `fail` and `canceled`.
    pub(crate) reason: Option<String>,
}

/// A child run that could not be prepared or executed; `reason` is the failure reason of
/// the sub-workflow stage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub(crate) struct ChildRunFailed {
    /// Why, with the child's path or the error's cause chain.
    pub(crate) reason: String,
}

/// Everything a handler may read for one attempt.
pub(crate) struct StageInput<'a> {
    /// The workflow.
    pub(crate) workflow: &'a Workflow,
    /// The node being executed.
    pub(crate) node: &'a Node,
    /// Its index.
    pub(crate) node_index: NodeIndex,
    /// The context before this stage (read-only).
    pub(crate) context: &'a Context,
    /// `{run_dir}/stages/{rank:03}-{node_id}@{visit}/`, already created.
    pub(crate) stage_dir: &'a Path,
    /// The stage's working directory.
    pub(crate) work_dir: &'a Path,
    /// The private `TMPDIR` of the stage's run or parallel branch (decision 63).
    pub(crate) tmpdir: &'a crate::sandbox::PrivateTmpDir,
    /// 1-based attempt number.
    pub(crate) attempt: u32,
    /// Outcome of the most recently completed stage, if any (conditional nodes copy it,
    /// SPEC 5.6).
    pub(crate) previous: Option<&'a Outcome>,
    /// Preamble for LLM nodes (SPEC 6.6), empty for other handlers.
    pub(crate) preamble: &'a str,
    /// Run-wide services.
    pub(crate) services: &'a RunServices,
}

/// Run-wide services shared by all stages.
pub(crate) struct RunServices {
    /// The run id.
    pub(crate) run_id: String,
    /// Events.
    pub(crate) emitter: Arc<Emitter>,
    /// The global blob store.
    pub(crate) blobs: Arc<dyn BlobStore>,
    /// The run store: each stage is saved in it when it starts and when it ends.
    pub(crate) runs: Arc<dyn crate::store::RunStore>,
    /// Cancelled on SIGINT/SIGTERM or by the stall watchdog; every long wait selects on
    /// it and handlers must return within 2 seconds (SPEC 4.3).
    pub(crate) cancel: CancellationToken,
    /// `--dry-run`: every handler is simulated (SPEC 4.9).
    pub(crate) dry_run: bool,
    /// Environment for commands (SPEC 13.5).
    pub(crate) sandbox_env: SandboxEnv,
    /// Human gate answer sources, first applicable wins (SPEC 5.5).
    pub(crate) interviewer: Arc<dyn crate::interviewer::Interviewer>,
    /// Run variables, for expanding prompts and scripts (SPEC 2.7).
    pub(crate) variables: fabro_language::Variables,
    /// Provider, model and client per LLM node (SPEC 10.2).
    pub(crate) llm: crate::llm_target::LlmSetup,
    /// Starts child workflow runs (SPEC 5.10).
    pub(crate) child_runner: Arc<dyn ChildRunner>,
    /// The `[agent.acp] command` of the run's configuration, for `acp` agents without
    /// their own `acp_command` (SPEC 5.2.3).
    pub(crate) acp_command: Option<Vec<String>>,
    /// Conversation threads under `full` fidelity (SPEC 6.5).
    pub(crate) threads: crate::thread::ThreadStore,
    /// Automatic asset capture after command stages (SPEC 7.8).
    pub(crate) assets: AssetCapture,
    /// The run's budget (SPEC 17.1).
    pub(crate) budget: Arc<crate::budget::Budget>,
    /// `[llm] prompt_caching` (SPEC 10.8): whether LLM calls mark their stable prefix.
    pub(crate) prompt_caching: bool,
    /// How agents find the files they changed: from the run worktree's watch once
    /// [`follow_git`](RunServices::follow_git) set it, else git snapshots.
    pub(crate) file_tracking: std::sync::OnceLock<fabro_agent::FileTracking>,
    /// MCP servers, skills and web tools of the run's agents (SPEC 19).
    pub(crate) extensions: agent::AgentExtensions,
    /// The run's `[[hooks]]` (SPEC 20.4).
    pub(crate) hooks: crate::hook::Hooks,
    /// Steering messages for the agent stages (SPEC 20.1).
    pub(crate) steering: crate::steering::SteeringQueue,
}

impl RunServices {
    /// Follows the run worktree's watch for asset capture and the agents' file tracking.
    pub(crate) fn follow_git(&self, git: &crate::git::RunGit) {
        self.assets.follow_git(git);
        if let Some(tracker) = git.change_tracker() {
            let _ = self
                .file_tracking
                .set(fabro_agent::FileTracking::with_tracker(tracker));
        }
    }

    /// The prompt cache of `node_id`'s calls (SPEC 10.8): `{run_id}:{node_id}`, or none
    /// when `[llm] prompt_caching = false`.
    pub(crate) fn prompt_cache(&self, node_id: &str) -> Option<String> {
        self.prompt_caching
            .then(|| format!("{}:{node_id}", self.run_id))
    }

    /// The agents' file tracking (a clone sharing the run's tracker).
    pub(crate) fn file_tracking(&self) -> fabro_agent::FileTracking {
        self.file_tracking.get().cloned().unwrap_or_default()
    }
}

/// Asset capture for one run: the scanner, where captured files go, and how many.
#[derive(Debug)]
pub(crate) struct AssetCapture {
    /// Candidate patterns and limits.
    pub(crate) scanner: Arc<crate::asset_capture::AssetScanner>,
    /// The run directory (`artifacts/files/…` goes under it).
    pub(crate) run_dir: std::path::PathBuf,
    /// Assets captured so far (`asset_count`).
    pub(crate) captured: std::sync::atomic::AtomicUsize,
    /// Stages started so far in every branch of the run.
    stages_started: std::sync::atomic::AtomicU64,
    /// Stages running right now in every branch of the run.
    stages_running: std::sync::atomic::AtomicUsize,
    /// The newest rescan after an attempt, tagged with `stages_started` as its stage
    /// saw it.
    recent: std::sync::Mutex<Option<(u64, crate::asset_capture::Snapshot)>>,
}

impl AssetCapture {
    pub(crate) fn new(scanner: crate::asset_capture::AssetScanner, run_dir: &Path) -> Self {
        AssetCapture {
            scanner: Arc::new(scanner),
            run_dir: run_dir.to_path_buf(),
            captured: std::sync::atomic::AtomicUsize::new(0),
            stages_started: std::sync::atomic::AtomicU64::new(0),
            stages_running: std::sync::atomic::AtomicUsize::new(0),
            recent: std::sync::Mutex::new(None),
        }
    }

    /// Takes the candidates of the run's working directory from the run worktree's watch
    /// instead of walking the tree around every command (SPEC 7.8, issue 20).
    pub(crate) fn follow_git(&self, git: &crate::git::RunGit) {
        if let Some((feed, work_dir_relative)) = git.change_feed() {
            self.scanner
                .follow(feed, &git.work_dir(), &work_dir_relative);
        }
    }

    /// Counts a stage (every handler kind, every branch) as started and, until the guard
    /// is dropped, as running: a stage that started since a rescan, or that runs beside
    /// the one that scans, may have written files the rescan does not account for.
    pub(crate) fn stage_running(&self) -> RunningStage<'_> {
        self.stages_started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.stages_running
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        RunningStage { assets: self }
    }

    /// Whether the caller's stage is the only one running.
    fn alone(&self) -> bool {
        self.stages_running
            .load(std::sync::atomic::Ordering::SeqCst)
            == 1
    }

    /// The tag of scans made from now on in the current stage.
    pub(crate) fn current_stage(&self) -> u64 {
        self.stages_started
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Keeps the rescan of an attempt of the stage tagged `stage`, unless other stages
    /// ran beside it (parallel branches sharing the working directory).
    pub(crate) fn keep(&self, stage: u64, snapshot: crate::asset_capture::Snapshot) {
        let kept = self.alone().then_some((stage, snapshot));
        if let Ok(mut recent) = self.recent.lock() {
            *recent = kept;
        }
    }

    /// The baseline for an attempt of the stage tagged `stage` in `work_dir`, from the
    /// kept rescan, if that was made by an earlier attempt of the same stage or by the
    /// stage that started right before it, with no other stage started since.
    pub(crate) fn reusable_baseline(
        &self,
        stage: u64,
        work_dir: &Path,
    ) -> Option<crate::asset_capture::Baseline> {
        let (tag, snapshot) = self.recent.lock().ok()?.take()?;
        if (tag == stage || tag + 1 == stage) && snapshot.work_dir() == work_dir && self.alone() {
            snapshot.into_baseline()
        } else {
            None
        }
    }
}

/// A stage counted as running by [`AssetCapture::stage_running`] until dropped.
pub(crate) struct RunningStage<'a> {
    assets: &'a AssetCapture,
}

impl Drop for RunningStage<'_> {
    fn drop(&mut self) {
        self.assets
            .stages_running
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs the handler of `input.node` for one attempt.
pub(crate) async fn execute(input: &StageInput<'_>) -> Outcome {
    match input.node.handler {
        HandlerKind::Start | HandlerKind::Exit => Outcome::success(),
        HandlerKind::Command => command::execute(input).await,
        HandlerKind::Human => human::execute(input).await,
        HandlerKind::Wait => wait::execute(input).await,
        HandlerKind::Conditional => conditional::execute(input),
        HandlerKind::Agent | HandlerKind::Prompt => llm::execute(input).await,
        HandlerKind::FanIn => fan_in::execute(input).await,
        // The traversal runs parallel nodes itself (they start sub-traversals), so this
        // arm is reached only through an engine defect.
        HandlerKind::Parallel => Outcome::fail(
            "engine error: parallel node dispatched as a leaf handler",
            crate::failure::FailureClass::Deterministic,
        ),
        HandlerKind::SubWorkflow => sub_workflow::execute(input).await,
    }
}

/// Whether the handler of `node` enforces the node `timeout` itself, so the traversal
/// must not cut it short: commands and human gates, `acp` agents, which answer a
/// timeout with `session/cancel` and 2 s of grace before termination (SPEC 5.2.3), and
/// `cli` agents, whose stage still records the model that ran (decision 69).
pub(crate) fn handles_own_timeout(node: &Node) -> bool {
    match node.handler {
        HandlerKind::Command | HandlerKind::Human => true,
        HandlerKind::Agent => node.llm.backend != fabro_language::model::Backend::Api,
        HandlerKind::Start
        | HandlerKind::Exit
        | HandlerKind::Wait
        | HandlerKind::Conditional
        | HandlerKind::Prompt
        | HandlerKind::FanIn
        | HandlerKind::Parallel
        | HandlerKind::SubWorkflow => false,
    }
}

/// The fidelity a stage runs with: `full` degrades to `summary:high` for external
/// agents, which cannot continue a session: `cli` agents with a `cli_no_threads`
/// warning (SPEC 5.2.2, decision 39), `acp` agents, which get one fresh session per
/// stage (SPEC 5.2.3), with an `acp_no_threads` warning.
pub(crate) fn stage_fidelity(
    node: &Node,
    fidelity: fabro_language::model::Fidelity,
    services: &RunServices,
) -> fabro_language::model::Fidelity {
    use fabro_language::model::{Backend, Fidelity};
    if fidelity != Fidelity::Full || node.handler != HandlerKind::Agent || services.dry_run {
        return fidelity;
    }
    let code = match node.llm.backend {
        Backend::Api => return fidelity,
        // The simulated provider has no CLI: such a node runs like `api`, threads included.
        Backend::Cli
            if services.llm.target_for(node).provider == fabro_llm::Provider::Simulated =>
        {
            return fidelity
        }
        Backend::Cli => "cli_no_threads",
        Backend::Acp => "acp_no_threads",
    };
    services.emitter.emit(crate::event::Event::warning(
        Some(&node.id),
        code,
        &format!(
            "node {} uses the {} backend, which cannot continue a thread; full fidelity runs as summary:high",
            node.id, node.llm.backend
        ),
    ));
    Fidelity::SummaryHigh
}

/// Scaffolding for handler unit tests: a run over a temporary directory and a workflow
/// parsed from a DOT snippet.
#[cfg(test)]
pub(crate) mod test_support {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use fabro_language::{AnyModel, CheckOptions, NoFiles, Variables, Workflow};
    use tokio_util::sync::CancellationToken;

    use super::{RunServices, StageInput};
    use crate::context::Context;
    use crate::event::{read_events, Emitter, EventEnvelope};
    use crate::llm_target::{LlmDefaults, LlmSetup};
    use crate::sandbox::SandboxEnv;

    /// A run over a fresh temporary directory `{tmp}`: events go to
    /// `{tmp}/events.jsonl`, blobs under `{tmp}/blobs/`, the stage directory is
    /// `{tmp}/stages/001-stage@1/` and the working directory `{tmp}/work/`.
    pub(crate) struct TestRun {
        /// Deleted when the run is dropped.
        pub(crate) dir: tempfile::TempDir,
        /// The services handed to handlers; fields may be changed before building inputs
        /// (`dry_run`, `interviewer`, `sandbox_env`, …).
        pub(crate) services: RunServices,
        /// The context every [`TestRun::input`] sees; replace it with struct update
        /// syntax (`StageInput { context: &other, ..run.input(&workflow, "id") }`).
        pub(crate) context: Context,
        /// The stage directory, already created.
        pub(crate) stage_dir: PathBuf,
        /// The working directory, already created.
        pub(crate) work_dir: PathBuf,
        /// The private `TMPDIR`, `{tmp}/tmp/`, made by the first confined process.
        pub(crate) tmpdir: crate::sandbox::PrivateTmpDir,
    }

    impl TestRun {
        /// A run with the real (filtered) environment, a default interviewer, a fresh
        /// cancellation token, no run variables, an LLM setup where every node falls back
        /// to the simulated client (replace `services.llm` to resolve a real workflow) and
        /// `dry_run` off.
        pub(crate) fn new() -> TestRun {
            let dir = tempfile::tempdir().expect("temporary directory");
            let root = dir.path();
            let stage_dir = root.join("stages").join("001-stage@1");
            let work_dir = root.join("work");
            let tmpdir = crate::sandbox::PrivateTmpDir::new(root.join("tmp"));
            fs_err::create_dir_all(&stage_dir).expect("stage directory");
            fs_err::create_dir_all(&work_dir).expect("working directory");
            let emitter = Emitter::open("test-run", &root.join("events.jsonl"), 1, Vec::new())
                .expect("events file");
            let cancel = CancellationToken::new();
            let services = RunServices {
                run_id: "test-run".to_owned(),
                emitter: Arc::new(emitter),
                blobs: Arc::new(crate::blob::FsBlobStore::new(root)),
                runs: Arc::new(crate::store::MemoryRunStore::new()),
                budget: Arc::new(crate::budget::Budget::new(
                    crate::budget::BudgetLimits::default(),
                    crate::budget::Totals::default(),
                    cancel.clone(),
                )),
                cancel,
                dry_run: false,
                sandbox_env: SandboxEnv::new(std::env::vars_os(), &[], &BTreeMap::new()),
                interviewer: Arc::new(crate::interviewer::FirstApplicable::new(Vec::new())),
                variables: Variables::default(),
                llm: no_llm_nodes(),
                child_runner: Arc::new(NoChildRuns),
                acp_command: None,
                threads: crate::thread::ThreadStore::default(),
                prompt_caching: true,
                assets: super::AssetCapture::new(
                    crate::asset_capture::AssetScanner::new(
                        &[],
                        crate::asset_capture::CaptureLimits::default(),
                    )
                    .expect("no include globs"),
                    root,
                ),
                file_tracking: std::sync::OnceLock::new(),
                extensions: super::agent::AgentExtensions::default(),
                hooks: crate::hook::Hooks::default(),
                steering: crate::steering::SteeringQueue::new("test-run", root),
            };
            TestRun {
                dir,
                services,
                context: Context::new(),
                stage_dir,
                work_dir,
                tmpdir,
            }
        }

        /// The temporary directory.
        pub(crate) fn path(&self) -> &Path {
            self.dir.path()
        }

        /// The input for the first attempt of node `node_id` of `workflow`.
        pub(crate) fn input<'a>(&'a self, workflow: &'a Workflow, node_id: &str) -> StageInput<'a> {
            let node_index = workflow
                .find(node_id)
                .unwrap_or_else(|| panic!("workflow has no node {node_id}"));
            StageInput {
                workflow,
                node: workflow.node(node_index),
                node_index,
                context: &self.context,
                stage_dir: &self.stage_dir,
                work_dir: &self.work_dir,
                tmpdir: &self.tmpdir,
                attempt: 1,
                previous: None,
                preamble: "",
                services: &self.services,
            }
        }

        /// Every event written to `events.jsonl` so far.
        pub(crate) fn events(&self) -> Vec<EventEnvelope> {
            let text =
                fs_err::read_to_string(self.path().join("events.jsonl")).expect("events file");
            read_events(&text)
        }
    }

    /// The child runner of handler tests: no child workflow can be started.
    struct NoChildRuns;

    impl super::ChildRunner for NoChildRuns {
        fn start(
            &self,
            request: super::ChildRequest,
        ) -> Result<super::ChildRun, super::ChildRunFailed> {
            Err(super::ChildRunFailed {
                reason: format!(
                    "child workflow {}: handler tests start no child runs",
                    request.reference
                ),
            })
        }
    }

    /// Parses and lowers `dot` with [`fabro_language::check`]. Lint diagnostics are
    /// ignored, so tests can build nodes that validation would reject (an empty script,
    /// an unknown language); only a parse error panics.
    pub(crate) fn workflow(dot: &str) -> Workflow {
        let variables = Variables::default();
        let options = CheckOptions {
            loader: &NoFiles,
            variables: &variables,
            models: &AnyModel,
        };
        let checked = fabro_language::check(Path::new("test.fabro"), dot, &options);
        checked
            .workflow
            .unwrap_or_else(|| panic!("workflow does not parse: {:?}", checked.diagnostics))
    }

    /// The LLM setup of a workflow without LLM nodes: every node gets the simulated
    /// fallback.
    fn no_llm_nodes() -> LlmSetup {
        let workflow =
            workflow("digraph { start [shape=Mdiamond] exit [shape=Msquare] start -> exit }");
        LlmSetup::resolve(&workflow, &LlmDefaults::default(), Arc::default(), false)
            .expect("a workflow without LLM nodes needs no credentials")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::AssetCapture;
    use crate::asset_capture::{AssetScanner, CaptureLimits};

    /// A rescan of `work_dir`.
    fn rescan(work_dir: &Path) -> (AssetScanner, crate::asset_capture::Snapshot) {
        let scanner = AssetScanner::new(&[], CaptureLimits::default()).expect("no globs");
        let baseline = scanner.baseline(work_dir);
        let (_, snapshot) = scanner.capture_with_snapshot(&baseline, &work_dir.join("assets"));
        (scanner, snapshot)
    }

    /// A kept rescan of the stage tagged `tag` in `work_dir`, the only stage running.
    fn capture_with_rescan(work_dir: &Path, tag: u64) -> AssetCapture {
        let (scanner, snapshot) = rescan(work_dir);
        let assets = AssetCapture::new(scanner, work_dir);
        let running = assets.stage_running();
        assets.keep(tag, snapshot);
        drop(running);
        assets
    }

    #[test]
    fn a_rescan_serves_its_own_stage_and_the_next_one_once() {
        let directory = tempfile::tempdir().expect("tempdir");
        let work = directory.path();
        // A retry of the same stage, and the stage right after it.
        for stage in [3, 4] {
            let assets = capture_with_rescan(work, 3);
            let _running = assets.stage_running();
            assert!(assets.reusable_baseline(stage, work).is_some(), "{stage}");
            assert!(
                assets.reusable_baseline(stage, work).is_none(),
                "taken once"
            );
        }
        // Another stage started in between (a branch, a human gate, an agent).
        let assets = capture_with_rescan(work, 3);
        let _running = assets.stage_running();
        assert!(assets.reusable_baseline(5, work).is_none());
        // Another working directory (a parallel branch's worktree).
        let assets = capture_with_rescan(work, 3);
        let _running = assets.stage_running();
        assert!(assets.reusable_baseline(4, &work.join("other")).is_none());
    }

    #[test]
    fn stages_running_side_by_side_neither_keep_nor_reuse_rescans() {
        let directory = tempfile::tempdir().expect("tempdir");
        let work = directory.path();
        let (scanner, snapshot) = rescan(work);
        let assets = AssetCapture::new(scanner, work);
        let first = assets.stage_running();
        let second = assets.stage_running();
        assets.keep(2, snapshot);
        drop(second);
        assert!(assets.reusable_baseline(2, work).is_none(), "not kept");

        let assets = capture_with_rescan(work, 1);
        let _next = assets.stage_running();
        let _beside = assets.stage_running();
        assert!(assets.reusable_baseline(2, work).is_none(), "not reused");
        drop(first);
    }

    #[test]
    fn stage_starts_advance_the_tag_and_guards_count_running_stages() {
        let directory = tempfile::tempdir().expect("tempdir");
        let scanner = AssetScanner::new(&[], CaptureLimits::default()).expect("no globs");
        let assets = AssetCapture::new(scanner, directory.path());
        assert_eq!(assets.current_stage(), 0);
        let first = assets.stage_running();
        assert!(assets.alone());
        let second = assets.stage_running();
        assert!(!assets.alone());
        assert_eq!(assets.current_stage(), 2);
        drop(second);
        assert!(assets.alone());
        drop(first);
    }
}
