//! INITIALIZE and EXECUTE (SPEC 4.1) of a prepared run, as named steps over [`Start`]:
//! [`PreparedRun::launch`] sets up the emitter, services, state and traversal,
//! [`PreparedRun::entry`] finds where the traversal enters the graph,
//! [`PreparedRun::initialize`] writes the records and the first checkpoint, and
//! [`PreparedRun::traverse`] runs the stages; FINALIZE is in `finish`.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use fabro_language::{EdgeIndex, NodeIndex};
use rand::SeedableRng;
use tokio_util::sync::CancellationToken;

use super::git_plan::{dirty_warning, git_settings, GitPlan};
use super::records::seed_context;
use super::watchdog::{pause_for_tests, spawn_cancel_watch, spawn_watchdog};
use super::{PreparedRun, ResumeError, RunError, RunReport, Start};
use crate::budget::Budget;
use crate::checkpoint::Checkpointer;
use crate::event::kind::WorkflowRunStarted;
use crate::event::{Emitter, Event, EventSink};
use crate::failure::FailureClass;
use crate::handler::RunServices;
use crate::llm_target::{LlmDefaults, LlmSetup};
use crate::outcome::Outcome;
use crate::record::{Checkpoint, Manifest};
use crate::run_index::RunStatus;
use crate::traversal::{CancelCause, RunEnd, RunState, Shared, Traversal};

/// What the set-up hands to the later steps.
pub(super) struct Launch {
    /// The run's events.
    pub(super) emitter: Arc<Emitter>,
    /// What handlers share.
    pub(super) services: Arc<RunServices>,
    /// The run's budget (SPEC 17.1).
    pub(super) budget: Arc<Budget>,
    /// Why the run was cancelled, when it was.
    pub(super) cause: Arc<CancelCause>,
    /// Open human questions and sleeping wait nodes pause the watchdog.
    pub(super) watchdog_paused: Arc<AtomicUsize>,
    /// The root traversal.
    pub(super) traversal: Traversal,
    /// The run's manifest: made for a new run, read for a resumed one.
    pub(super) manifest: Manifest,
    /// Why the run fails before its first stage, if it does.
    pub(super) setup_failure: Option<String>,
}

/// Where the traversal enters the graph.
pub(super) struct Entry {
    /// The first node to execute.
    node: NodeIndex,
    /// Its id.
    id: String,
    /// A resumed run whose exit stage completed: nothing is left to execute.
    exit_completed: bool,
    /// The outcome of the stage before `node` (a resumed run's last one).
    previous: Option<Outcome>,
    /// The edge taken from that stage to `node`.
    entered_by: Option<EdgeIndex>,
}

impl PreparedRun {
    /// INITIALIZE, EXECUTE and FINALIZE. `cancel` is fired by the caller on SIGINT or
    /// SIGTERM; `sinks` receive every event.
    pub async fn execute(
        mut self,
        cancel: CancellationToken,
        sinks: Vec<Arc<dyn EventSink>>,
    ) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let start = std::mem::replace(&mut self.start, Start::New);
        // SPEC 11.4: the run lock comes first, before anything of the run is read or
        // written: a resumed run got it from `prepare_resume`; a new run (whose directory
        // `prepare` just made) takes it here. Failures to lock never fail a new run.
        let lease = match self.lease.take() {
            Some(lease) => Some(lease),
            None => self
                .stores
                .runs
                .lock(&self.id())
                .inspect_err(|error| tracing::warn!(%error, "cannot take the run lock"))
                .ok(),
        };
        // SPEC 18.2: a worker that loses the run's lease stops it at once.
        let lost_watch = lease.as_ref().and_then(|lease| lease.lost()).map(|lost| {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                lost.cancelled().await;
                cancel.cancel();
            })
        });
        let mut launch = self.launch(&start, &cancel, sinks)?;
        let entry = self.entry(&start)?;
        self.initialize(&start, &mut launch, &entry)?;
        // SPEC 20.1: steering messages are accepted while the run executes.
        self.steering.attach(&launch.emitter);
        let stop_steering = CancellationToken::new();
        let steering = tokio::spawn(self.steering.clone().watch(stop_steering.clone()));
        // SPEC 18.2: a cancel written to a shared store by another process.
        let cancel_watch = spawn_cancel_watch(
            Arc::clone(&self.stores.runs),
            self.id(),
            cancel.clone(),
            stop_steering.clone(),
        );
        let end = self.traverse(&mut launch, &entry, &cancel).await;
        stop_steering.cancel();
        let _ = steering.await;
        if let Some(cancel_watch) = cancel_watch {
            let _ = cancel_watch.await;
        }
        // SPEC 19.1: the run's MCP servers are closed when it ends.
        launch.services.extensions.close().await;
        let report = self.finish(launch, end, started, lease).await;
        if let Some(lost_watch) = lost_watch {
            lost_watch.abort();
        }
        Ok(report)
    }

    /// Set-up: the event log, LLM clients, manifest, git, working directory, services,
    /// restored state and the traversal.
    fn launch(
        &mut self,
        start: &Start,
        cancel: &CancellationToken,
        sinks: Vec<Arc<dyn EventSink>>,
    ) -> Result<Launch, RunError> {
        let opened = self.stores.runs.open_events(&self.id(), start.opening())?;
        let emitter = Arc::new(Emitter::with_log(
            &self.run_id,
            opened.log,
            opened.next_id,
            sinks,
        ));
        emitter.cancel_on_storage_failure(cancel.clone());
        let (llm, setup_failure) = self.take_llm()?;
        let manifest = match start {
            Start::New | Start::Fork(_) => self.manifest(self.simulated_llm),
            Start::Resume(_) => self
                .stores
                .runs
                .read_manifest(&self.id())
                .map_err(|error| self.resume_error(ResumeError::Manifest(error)))?,
        };
        let run_git = match start {
            Start::Resume(checkpoint) => self.reattach_git(checkpoint, &manifest)?,
            Start::New | Start::Fork(_) => None,
        };
        let work_dir = self.work_dir(start, run_git.as_ref())?;
        let budget = Arc::new(Budget::new(
            crate::budget::BudgetLimits::from_config(&self.options.config.run),
            start
                .checkpoint()
                .map_or_else(Default::default, |checkpoint| crate::budget::Totals {
                    tokens: checkpoint.llm_tokens,
                    cost_usd: checkpoint.llm_cost_usd,
                }),
            cancel.clone(),
        ));
        let services = self.services(&emitter, &budget, llm, cancel)?;
        let (state, mut checkpointer) = self.restore(start, &services, &work_dir)?;
        if let Some(git) = run_git {
            services.follow_git(&git);
            checkpointer.attach_git(git);
        }
        let cause = Arc::new(CancelCause::default());
        let watchdog_paused = Arc::new(AtomicUsize::new(0));
        let traversal = self.traversal(
            start,
            &services,
            state,
            checkpointer,
            work_dir,
            &cause,
            &watchdog_paused,
        );
        Ok(Launch {
            emitter,
            services,
            budget,
            cause,
            watchdog_paused,
            traversal,
            manifest,
            setup_failure,
        })
    }

    /// The resolved LLM setup, or a dry-run one and the reason the run fails before any
    /// stage.
    fn take_llm(&mut self) -> Result<(LlmSetup, Option<String>), RunError> {
        match self.llm.take() {
            Some(Ok(llm)) => Ok((llm, None)),
            Some(Err(message)) => Ok((
                LlmSetup::resolve(
                    &self.workflow,
                    &LlmDefaults::default(),
                    Arc::default(),
                    true,
                )
                .map_err(RunError::LlmSetup)?,
                Some(message),
            )),
            None => Err(RunError::ExecutedTwice {
                run_id: self.run_id.clone(),
            }),
        }
    }

    /// SPEC 8.7 step 4: a resumed run with git checkpointing gets a fresh worktree on its
    /// run branch, reset to the checkpoint's commit. A run resumed from its initial
    /// checkpoint (at its base commit: a fork's has completed stages) may have been
    /// killed before its set-up made the branch.
    fn reattach_git(
        &self,
        checkpoint: &Checkpoint,
        manifest: &Manifest,
    ) -> Result<Option<crate::git::RunGit>, RunError> {
        let (Some(repo_root), Some(_)) = (&manifest.repo_root, &manifest.run_branch) else {
            return Ok(None);
        };
        // SPEC 18.3: a run taken over works in this machine's mirror of its repository.
        let repository = self.options.repository.as_ref();
        let repo_root = repository.map_or(Path::new(repo_root), |repository| {
            repository.mirror.as_path()
        });
        let sha = checkpoint
            .git_commit_sha
            .as_deref()
            .ok_or_else(|| self.resume_error(ResumeError::NoRunBranchCommit))?;
        let relative = PathBuf::from(manifest.work_dir_relative.clone().unwrap_or_default());
        let initial = checkpoint.completed_nodes.is_empty()
            || manifest.base_sha.as_deref() == Some(sha) && manifest.forked_from.is_some();
        let attach = if initial {
            crate::git::RunGit::restart
        } else {
            crate::git::RunGit::reattach
        };
        let mut git = attach(
            repo_root,
            &self.run_id,
            &self.paths.run_dir().join("worktree"),
            sha,
            git_settings(&self.options.config, relative),
        )
        .map_err(|error| self.resume_error(ResumeError::Worktree(error)))?;
        if let Some(repository) = repository {
            git.push_to(crate::git::RemotePush::new(
                repository.url.clone(),
                repository.pushed.clone(),
            ));
        }
        Ok(Some(git))
    }

    /// Where stages run: the run's worktree with git checkpointing (a new run's is made
    /// by [`PreparedRun::initialize`]), else the given or current directory.
    fn work_dir(
        &self,
        start: &Start,
        run_git: Option<&crate::git::RunGit>,
    ) -> Result<PathBuf, RunError> {
        Ok(match (run_git, &self.git_plan, &self.options.work_dir) {
            (Some(git), _, _) => git.work_dir(),
            (
                None,
                GitPlan::Clean {
                    work_dir_relative, ..
                },
                _,
            ) if start.is_new() => self
                .paths
                .run_dir()
                .join("worktree")
                .join(work_dir_relative),
            (None, _, Some(work_dir)) => work_dir.clone(),
            (None, _, None) => std::env::current_dir().map_err(|source| RunError::Io {
                action: "cannot read current directory",
                path: PathBuf::from("."),
                source,
            })?,
        })
    }

    /// What every handler of the run shares.
    fn services(
        &self,
        emitter: &Arc<Emitter>,
        budget: &Arc<Budget>,
        llm: LlmSetup,
        cancel: &CancellationToken,
    ) -> Result<Arc<RunServices>, RunError> {
        let scanner = crate::asset_capture::AssetScanner::new(
            self.options
                .config
                .artifacts
                .include
                .as_deref()
                .unwrap_or_default(),
            crate::asset_capture::CaptureLimits::default(),
        )
        .map_err(RunError::ArtifactsInclude)?
        .skipping(&self.options.fabro_home);
        Ok(Arc::new(RunServices {
            budget: Arc::clone(budget),
            run_id: self.run_id.clone(),
            emitter: Arc::clone(emitter),
            blobs: Arc::clone(&self.stores.blobs),
            runs: Arc::clone(&self.stores.runs),
            cancel: cancel.clone(),
            dry_run: self.options.dry_run,
            sandbox_env: self.options.sandbox_env.clone(),
            interviewer: self.interviewer(),
            variables: self.variables.clone(),
            llm,
            child_runner: Arc::new(super::child_runner::ChildRuns::new(
                &self.options,
                &self.run_id,
            )),
            acp_command: self.options.config.agent.acp_command.clone(),
            threads: crate::thread::ThreadStore::default(),
            prompt_caching: self.options.config.llm.prompt_caching.unwrap_or(true),
            assets: crate::handler::AssetCapture::new(scanner, self.paths.run_dir()),
            file_tracking: std::sync::OnceLock::new(),
            extensions: crate::handler::AgentExtensions::new(
                &self.options.config,
                &self.options.fabro_home,
            ),
            // SPEC 4.9: a dry run does nothing outside the run, so it runs no hooks.
            hooks: crate::hook::Hooks::new(
                if self.options.dry_run {
                    &[]
                } else {
                    &self.options.config.hooks
                },
                emitter,
                &self.options.sandbox_env,
                cancel,
            ),
            steering: self.steering.clone(),
        }))
    }

    /// The run's state and checkpointer: a seeded context for a new run; the
    /// checkpoint's state, simulated-provider cursors and continued log for a resumed one.
    fn restore(
        &self,
        start: &Start,
        services: &RunServices,
        work_dir: &Path,
    ) -> Result<(RunState, Checkpointer), RunError> {
        let log = self
            .stores
            .runs
            .open_checkpoints(&self.id(), start.opening());
        match start {
            Start::New => {
                let mut state = RunState::default();
                seed_context(
                    &mut state,
                    &self.workflow,
                    &self.goal,
                    &self.run_id,
                    work_dir,
                );
                Ok((state, Checkpointer::with_log(self.paths.run_dir(), log?)))
            }
            Start::Resume(checkpoint) => {
                let state = RunState::restore(checkpoint, &self.workflow);
                services
                    .llm
                    .simulated()
                    .restore_cursors(checkpoint.simulated_cursors.clone());
                let log =
                    log.map_err(|error| self.resume_error(ResumeError::Checkpoints(error)))?;
                Ok((state, Checkpointer::with_log(self.paths.run_dir(), log)))
            }
            Start::Fork(checkpoint) => {
                // SPEC 20.2: the checkpoint's state, under the fork's own id and in its
                // own working directory.
                let mut state = RunState::restore(checkpoint, &self.workflow);
                state.context.set("internal.run_id", self.run_id.as_str());
                state
                    .context
                    .set("internal.work_dir", work_dir.display().to_string());
                services
                    .llm
                    .simulated()
                    .restore_cursors(checkpoint.simulated_cursors.clone());
                Ok((state, Checkpointer::with_log(self.paths.run_dir(), log?)))
            }
        }
    }

    /// The root traversal.
    #[allow(clippy::too_many_arguments)]
    fn traversal(
        &self,
        start: &Start,
        services: &Arc<RunServices>,
        state: RunState,
        checkpointer: Checkpointer,
        work_dir: PathBuf,
        cause: &Arc<CancelCause>,
        watchdog_paused: &Arc<AtomicUsize>,
    ) -> Traversal {
        let first_rank = start
            .checkpoint()
            .map_or(0, |checkpoint| checkpoint.stage_rank);
        let rng = match self.options.random_seed {
            Some(seed) => rand::rngs::StdRng::seed_from_u64(seed),
            None => rand::rngs::StdRng::from_os_rng(),
        };
        let shared = Arc::new(Shared {
            workflow: Arc::clone(&self.workflow),
            services: Arc::clone(services),
            paths: self.paths.clone(),
            dry_run_visit_limit: self.options.dry_run.then_some(10),
            cause: Arc::clone(cause),
            watchdog_paused: Arc::clone(watchdog_paused),
            ranks: std::sync::atomic::AtomicU32::new(first_rank),
        });
        Traversal::root(
            shared,
            state,
            rng,
            work_dir,
            checkpointer,
            start.checkpoint().is_some(),
        )
    }

    /// Where the traversal enters the graph: the start node of a new run; the next node
    /// of a resumed run's checkpoint, entered from its current node (the exit node when
    /// the exit stage completed and only the final checkpoint is missing).
    fn entry(&self, start: &Start) -> Result<Entry, RunError> {
        let workflow = &self.workflow;
        let Some(checkpoint) = start.checkpoint() else {
            let node = workflow.start().ok_or_else(|| RunError::NoStartNode {
                run_id: self.run_id.clone(),
            })?;
            return Ok(Entry {
                node,
                id: workflow.node(node).id.clone(),
                exit_completed: false,
                previous: None,
                entered_by: None,
            });
        };
        let current = checkpoint.current_node.as_deref();
        // A run killed after its exit stage's checkpoint but before the final one has
        // nothing left to execute: resuming it only finishes it.
        let exit_completed = checkpoint.next_node_id.is_none()
            && workflow.exit().is_some()
            && current.and_then(|id| workflow.find(id)) == workflow.exit();
        let node = if exit_completed {
            workflow.exit()
        } else {
            checkpoint
                .next_node_id
                .as_deref()
                .and_then(|next| workflow.find(next))
        }
        .ok_or_else(|| {
            self.resume_error(ResumeError::NoNextNode {
                next_node_id: checkpoint.next_node_id.clone(),
            })
        })?;
        let previous = current.and_then(|id| checkpoint.node_outcomes.get(id).cloned());
        let entered_by = current.and_then(|id| workflow.find(id)).and_then(|from| {
            workflow
                .outgoing(from)
                .find(|(_, edge)| edge.to == node)
                .map(|(index, _)| index)
        });
        Ok(Entry {
            node,
            id: workflow.node(node).id.clone(),
            exit_completed,
            previous,
            entered_by,
        })
    }

    /// INITIALIZE: a new run's initial checkpoint, records, index entry and git set-up
    /// (a resumed run only registers again), then `WorkflowRunStarted`, the git warnings
    /// and, with git, the first checkpoint written through git.
    fn initialize(
        &self,
        start: &Start,
        launch: &mut Launch,
        entry: &Entry,
    ) -> Result<(), RunError> {
        match start {
            Start::New | Start::Fork(_) => self.initialize_new(launch, &entry.id)?,
            Start::Resume(_) => self.register_start(&launch.manifest),
        }
        let emitter = &launch.emitter;
        let started = emitter.emit(Event::run(WorkflowRunStarted {
            base_sha: launch.manifest.base_sha.clone(),
            dry_run: self.options.dry_run,
            goal: self.goal.clone(),
            next_node_id: entry.id.clone(),
            resumed: matches!(start, Start::Resume(_)),
            run_branch: launch.manifest.run_branch.clone(),
            run_dir: self.paths.run_dir().display().to_string(),
            worker: self.worker.clone(),
            workflow_name: self.workflow_name.clone(),
        }));
        launch.services.hooks.fire(
            crate::config::HookEvent::RunStart,
            &started,
            launch.traversal.hook_place(self.paths.run_dir()),
        );
        match &self.git_plan {
            GitPlan::Dirty { before_ref, .. } => {
                emitter.emit(Event::warning(
                    None,
                    "dirty_worktree",
                    &dirty_warning(before_ref),
                ));
            }
            GitPlan::Clean { untracked, .. } if !untracked.is_empty() => {
                emitter.emit(Event::warning(
                    None,
                    "untracked_not_in_worktree",
                    &format!(
                        "untracked files are not in the run worktree: {}",
                        untracked.join(", ")
                    ),
                ));
            }
            _ => {}
        }
        // With git, the first metadata commit holds the run's records (SPEC 8.3): a new
        // run's initial checkpoint is written again through git, as is a resumed run's
        // first one when the run never got that far.
        let traversal = &mut launch.traversal;
        let git_metadata = traversal
            .checkpointer_mut()
            .and_then(Checkpointer::git_mut)
            .map(|git| git.metadata_sha().is_some());
        match (start, git_metadata) {
            (_, Some(false)) => traversal.initial_checkpoint(Some(&entry.id)),
            (Start::Resume(_), _) => {
                traversal.final_checkpoint(Some(&entry.id), RunStatus::Running);
            }
            (Start::New | Start::Fork(_), _) => {}
        }
        Ok(())
    }

    /// SPEC 8.7, 11.1: the initial checkpoint, then the records with the manifest last,
    /// so that every run `fabro runs` lists can be resumed from its start; a directory
    /// without a manifest is a set-up that never finished, which nothing lists. Then
    /// SPEC 8.4: the run branch and its worktree; a failure there fails the run, which
    /// stays listed with the reason.
    fn initialize_new(&self, launch: &mut Launch, start_id: &str) -> Result<(), RunError> {
        launch.traversal.initial_checkpoint(Some(start_id));
        pause_for_tests("before_manifest", &self.options.fabro_home);
        self.write_records(&launch.manifest)?;
        pause_for_tests("after_manifest", &self.options.fabro_home);
        self.register_start(&launch.manifest);
        let GitPlan::Clean {
            repo_root,
            head_sha,
            work_dir_relative,
            ..
        } = &self.git_plan
        else {
            return Ok(());
        };
        let settings = git_settings(&self.options.config, work_dir_relative.clone());
        match crate::git::RunGit::create(
            repo_root,
            &self.run_id,
            head_sha,
            &self.paths.run_dir().join("worktree"),
            settings,
        ) {
            Ok(mut git) => {
                if let Some(repository) = &self.options.repository {
                    git.push_to(crate::git::RemotePush::new(
                        repository.url.clone(),
                        repository.pushed.clone(),
                    ));
                }
                launch.services.follow_git(&git);
                if let Some(checkpointer) = launch.traversal.checkpointer_mut() {
                    checkpointer.attach_git(git);
                }
                pause_for_tests("after_git_setup", &self.options.fabro_home);
            }
            Err(error) => {
                launch.setup_failure.get_or_insert_with(|| {
                    format!(
                        "cannot set up git checkpointing: {}",
                        crate::error_chain(&error)
                    )
                });
            }
        }
        Ok(())
    }

    /// Lists the run in the index (the caller holds the lock). Failures are logged and
    /// never stop the run (SPEC 11.4): the next read of the index finds the run anyway.
    fn register_start(&self, manifest: &Manifest) {
        if let Err(error) = self
            .stores
            .runs
            .register_start(manifest, self.paths.run_dir())
        {
            tracing::warn!(error = %crate::error_chain(&error), "cannot record the run in the run index");
        }
    }

    /// EXECUTE: the stages from the entry node on, under the stall watchdog and the
    /// duration budget, unless the set-up failed or nothing is left to execute.
    async fn traverse(
        &self,
        launch: &mut Launch,
        entry: &Entry,
        cancel: &CancellationToken,
    ) -> RunEnd {
        if let Some(reason) = launch.setup_failure.take() {
            return RunEnd::Failed {
                reason,
                class: FailureClass::Deterministic,
                node_id: None,
            };
        }
        if entry.exit_completed {
            return RunEnd::Completed {
                status: launch.traversal.completion_status(),
            };
        }
        let watchdog = spawn_watchdog(
            self.workflow.settings.stall_timeout,
            Arc::clone(&launch.emitter),
            cancel.clone(),
            Arc::clone(&launch.cause),
            Arc::clone(&launch.watchdog_paused),
        );
        let timer = launch.budget.time_left().map(|left| {
            let budget = Arc::clone(&launch.budget);
            tokio::spawn(async move {
                tokio::time::sleep(left).await;
                budget.check_duration();
            })
        });
        let end = launch
            .traversal
            .run_from(entry.node, entry.previous.clone(), entry.entered_by)
            .await;
        watchdog.abort();
        if let Some(timer) = timer {
            timer.abort();
        }
        end
    }
}
