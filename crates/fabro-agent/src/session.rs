//! The coding-agent loop of the `api` backend (SPEC 10.4): [`AgentSession`] keeps the
//! conversation, so it can be run again for a thread shared across nodes or for an
//! `output_schema` repair turn.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro_llm::{LlmClient, Message, Provider, ReasoningEffort, Request, ToolCall, Usage};
use futures_util::future::join_all;
use tokio_util::sync::CancellationToken;

use crate::change_tracking::FileTracking;
use crate::compaction;
use crate::environment::ProcessEnv;
use crate::event::{AgentEvent, AgentEventSink};
use crate::failure::{AgentError, AgentFailure};
use crate::history::{flatten, Entry};
use crate::instructions::{system_prompt, SystemPromptInput};
use crate::loop_detection::{LoopDetector, LOOP_STEERING_MESSAGE};
use crate::scope::{scope_failure_reason, WorkTree};
use crate::skill::Skill;
use crate::steering::Steering;
use crate::tool::{ToolContext, ToolProfile, ToolRegistry, ToolResult, ToolSet};
use crate::tracker::FileTracker;
use fabro_llm::FailureClass;

/// Settings of one api-backend session.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Provider serving `model` (tool profile, instruction file, summary role).
    pub provider: Provider,
    /// Model id.
    pub model: String,
    /// Workflow node the calls are made for (the simulated provider scripts per node).
    pub node_id: String,
    /// Working directory; every tool path is confined to it.
    pub working_dir: PathBuf,
    /// Assistant turns per [`AgentSession::run`]; 0 means unlimited.
    pub max_turns: u32,
    /// Context window in tokens; the catalog's value (else 200,000) when `None`.
    pub context_window: Option<u64>,
    /// Output cap per call; the provider adapter's default (the catalog's max output)
    /// when `None`.
    pub max_tokens: Option<u32>,
    /// Reasoning effort of every call, summaries included; sent only to models with
    /// reasoning (SPEC 10.1 item 2).
    pub reasoning_effort: Option<ReasoningEffort>,
    /// The prompt cache of the session's calls (SPEC 10.8, see
    /// [`Request::prompt_cache`]); `None` sends no cache markers.
    pub prompt_cache: Option<String>,
    /// Load project instruction files (SPEC 10.6).
    pub project_memory: bool,
    /// `write_scope` globs; empty means the whole working directory.
    pub write_scope: Vec<String>,
    /// Environment for the `shell` tool (already filtered, SPEC 13.5).
    pub env: ProcessEnv,
    /// `shell` timeout when a call gives none; the profile's default when `None`.
    pub shell_timeout: Option<Duration>,
    /// Date for the environment block (`YYYY-MM-DD`); the clock when `None`.
    pub date: Option<String>,
    /// How the write-scope check finds changed files (git snapshots, or a run's change
    /// feed, SPEC 13.4).
    pub file_tracking: FileTracking,
    /// What the agent may do (SPEC 19.4): tools outside the set are not offered.
    pub tool_set: ToolSet,
    /// Skills listed in the system prompt and served by `use_skill` (SPEC 19.2); their
    /// files may be read wherever they are.
    pub skills: Vec<Skill>,
}

impl AgentConfig {
    /// Defaults: unlimited turns, catalog window, project memory on, whole working
    /// directory writable, the current environment filtered.
    pub fn new(
        provider: Provider,
        model: impl Into<String>,
        node_id: impl Into<String>,
        working_dir: impl Into<PathBuf>,
    ) -> AgentConfig {
        AgentConfig {
            provider,
            model: model.into(),
            node_id: node_id.into(),
            working_dir: working_dir.into(),
            max_turns: 0,
            context_window: None,
            max_tokens: None,
            reasoning_effort: None,
            prompt_cache: None,
            project_memory: true,
            write_scope: Vec::new(),
            env: ProcessEnv::inherit(),
            shell_timeout: None,
            date: None,
            file_tracking: FileTracking::default(),
            tool_set: ToolSet::Full,
            skills: Vec::new(),
        }
    }
}

/// What one run of an agent (any backend) produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentOutcome {
    /// The response: text of the final assistant turn (empty when the run failed
    /// before one).
    pub text: String,
    /// Usage summed over every call of the run (compaction included).
    pub usage: Usage,
    /// Assistant turns taken.
    pub turns: u32,
    /// Paths written, relative to the working directory (SPEC 7.6).
    pub files_touched: Vec<String>,
    /// The "last touched" file for routing fallbacks (SPEC 7.2).
    pub last_touched: Option<String>,
    /// Why the run failed; `None` on success.
    pub failure: Option<AgentFailure>,
}

impl AgentOutcome {
    /// Whether the run succeeded.
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }
}

/// A live api-backend conversation.
pub struct AgentSession {
    config: AgentConfig,
    client: Arc<dyn LlmClient>,
    tools: ToolRegistry,
    sink: Arc<dyn AgentEventSink>,
    tree: WorkTree,
    system: String,
    history: Vec<Entry>,
    detector: LoopDetector,
    tracker: FileTracker,
    context_window: u64,
    shell_timeout: Duration,
    steering: Steering,
}

impl std::fmt::Debug for AgentSession {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AgentSession")
            .field("config", &self.config)
            .field("tools", &self.tools)
            .field("entries", &self.history.len())
            .finish_non_exhaustive()
    }
}

impl AgentSession {
    /// Builds the system prompt and an empty history. Fails when the working directory
    /// does not exist or a `write_scope` glob is invalid.
    pub fn new(
        config: AgentConfig,
        client: Arc<dyn LlmClient>,
        tools: ToolRegistry,
        sink: Arc<dyn AgentEventSink>,
    ) -> Result<AgentSession, AgentError> {
        let tree = WorkTree::new(&config.working_dir, &config.write_scope)?.with_read_roots(
            config
                .skills
                .iter()
                .filter_map(|skill| skill.path.parent().map(std::path::Path::to_path_buf)),
        );
        let mut system = system_prompt(&SystemPromptInput {
            provider: config.provider,
            model: &config.model,
            working_dir: tree.root(),
            project_memory: config.project_memory,
            date: config.date.as_deref(),
            confined: config.env.is_confined(),
        });
        if config.tool_set.allows("use_skill") {
            system.push_str(&crate::skill::prompt_block(&config.skills));
        }
        let context_window = config
            .context_window
            .or_else(|| {
                fabro_llm::catalog::find(&config.model).map(|model| u64::from(model.context_window))
            })
            .unwrap_or(compaction::DEFAULT_CONTEXT_WINDOW);
        let shell_timeout = config
            .shell_timeout
            .unwrap_or_else(|| ToolProfile::for_provider(config.provider).shell_timeout());
        let mut tools = tools;
        tools.restrict(config.tool_set);
        Ok(AgentSession {
            config,
            client,
            tools,
            sink,
            tree,
            system,
            history: Vec::new(),
            detector: LoopDetector::default(),
            tracker: FileTracker::default(),
            context_window,
            shell_timeout,
            steering: Steering::default(),
        })
    }

    /// The system prompt sent with every call.
    pub fn system_prompt(&self) -> &str {
        &self.system
    }

    /// The conversation so far, as sent to the provider.
    pub fn messages(&self) -> Vec<Message> {
        flatten(&self.history)
    }

    /// The context window compaction works against.
    pub fn context_window(&self) -> u64 {
        self.context_window
    }

    /// Changes the node the next calls are made for (a thread continuing at another node).
    pub fn set_node_id(&mut self, node_id: impl Into<String>) {
        self.config.node_id = node_id.into();
    }

    /// Takes steering messages from `steering` from now on (SPEC 20.1): before each LLM
    /// call, never while a tool runs. Sub-agents never get any.
    pub fn set_steering(&mut self, steering: Steering) {
        self.steering = steering;
    }

    /// Sends `prompt` as a user message and runs the loop until the model answers
    /// without tool calls, the turn limit is reached, the LLM call fails or `cancel`
    /// fires. Failures (LLM errors, turn limit, changes outside the write scope,
    /// cancellation)
    /// are reported in [`AgentOutcome::failure`] with their class, so usage and files
    /// stay known; the api backend currently always returns `Ok`, the `Result` keeps
    /// one shape with the cli and acp backends. Dropping the future stops the run and
    /// kills running shell commands; after a cancellation the session can continue.
    pub async fn run(
        &mut self,
        prompt: &str,
        cancel: &CancellationToken,
    ) -> Result<AgentOutcome, AgentError> {
        // With write_scope globs, changes made any way (shell included) are checked
        // against the scope from git snapshots (SPEC 7.6, 13.4).
        let before = if self.config.write_scope.is_empty() {
            None
        } else {
            self.config
                .file_tracking
                .snapshot(self.tree.root(), &self.config.env)
                .await
        };
        let mut run = RunState::default();
        self.history.push(Entry::Message(Message::user(prompt)));
        let failure = self.turns(&mut run, cancel).await;
        // Write tools refuse paths outside the scope with a tool error the model sees;
        // only paths that really changed outside it fail the attempt (SPEC 13.4): the
        // git snapshot difference, or outside git the tracked-tool list.
        let after = match &before {
            Some(_) => {
                self.config
                    .file_tracking
                    .snapshot(self.tree.root(), &self.config.env)
                    .await
            }
            None => None,
        };
        let changed = match (&before, &after) {
            (Some(before), Some(after)) => after.touched_since(before),
            _ => run.tracker.files().to_vec(),
        };
        let violations = self.tree.out_of_scope(&changed);
        let failure = match failure {
            Some(failure) if failure.class == FailureClass::Canceled => Some(failure),
            _ if !violations.is_empty() => Some(AgentFailure::new(
                FailureClass::Structural,
                scope_failure_reason(&violations),
            )),
            other => other,
        };
        Ok(AgentOutcome {
            text: run.text,
            usage: run.usage,
            turns: run.turns,
            files_touched: run.tracker.files().to_vec(),
            last_touched: run.tracker.last_touched().map(str::to_owned),
            failure,
        })
    }

    /// The loop proper; returns the failure that ended it, if any.
    async fn turns(
        &mut self,
        run: &mut RunState,
        cancel: &CancellationToken,
    ) -> Option<AgentFailure> {
        self.deliver_steering();
        loop {
            let request = Request {
                model: self.config.model.clone(),
                system: Some(self.system.clone()),
                messages: flatten(&self.history),
                max_tokens: self.config.max_tokens,
                tools: self.tools.definitions(),
                node_id: self.config.node_id.clone(),
                reasoning_effort: self.config.reasoning_effort,
                prompt_cache: self.config.prompt_cache.clone(),
                ..Request::default()
            };
            let response = tokio::select! {
                biased;
                () = cancel.cancelled() => return Some(AgentFailure::canceled()),
                response = self.client.complete(&request) => response,
            };
            let response = match response {
                Ok(response) => response,
                Err(error) => return Some(AgentFailure::from_llm(error)),
            };
            run.usage.add(&response.usage);
            run.turns += 1;
            let mut assistant = Message::assistant(response.text.clone());
            assistant.tool_calls = response.tool_calls.clone();
            assistant.thinking = response.thinking.clone();
            self.history.push(Entry::Message(assistant));
            self.sink.emit(AgentEvent::AssistantMessage {
                text: response.text.clone(),
                tool_call_count: response.tool_calls.len(),
                usage: response.usage,
            });
            if let Some(failure) = self.compact_if_needed(run, cancel).await {
                return Some(failure);
            }
            if response.tool_calls.is_empty() {
                // Steering that arrived meanwhile gets its own turn (SPEC 20.1).
                let room = self.config.max_turns == 0 || run.turns < self.config.max_turns;
                if room && self.deliver_steering() {
                    continue;
                }
                run.text = response.text;
                return None;
            }
            let Some(results) = self.execute_calls(&response.tool_calls, run, cancel).await else {
                // Answer every call, so a continued session sends a well-formed history.
                let canceled = response
                    .tool_calls
                    .iter()
                    .map(|call| {
                        Message::tool_result(
                            call.id.clone(),
                            format!("Tool error ({}): canceled", call.name),
                            true,
                        )
                    })
                    .collect();
                self.history.push(Entry::ToolResults(canceled));
                return Some(AgentFailure::canceled());
            };
            self.history.push(Entry::ToolResults(results));
            if let Some(pattern_length) = self.detector.record(&response.tool_calls) {
                self.sink.emit(AgentEvent::LoopDetected { pattern_length });
                self.history
                    .push(Entry::Message(Message::user(LOOP_STEERING_MESSAGE)));
            }
            if self.config.max_turns > 0 && run.turns >= self.config.max_turns {
                run.text = response.text;
                return Some(AgentFailure::new(
                    FailureClass::BudgetExhausted,
                    format!("turn limit reached ({})", self.config.max_turns),
                ));
            }
            // After the round of tool calls, before the next call (SPEC 20.1).
            self.deliver_steering();
        }
    }

    /// Appends the queued steering messages as one user message; whether there were any.
    fn deliver_steering(&mut self) -> bool {
        match self.steering.deliver() {
            Some(text) => {
                self.history.push(Entry::Message(Message::user(text)));
                true
            }
            None => false,
        }
    }

    /// Runs one turn's calls (concurrently when the registry allows), emitting the
    /// tool events and tracking written files. `None` when cancelled.
    async fn execute_calls(
        &mut self,
        calls: &[ToolCall],
        run: &mut RunState,
        cancel: &CancellationToken,
    ) -> Option<Vec<Message>> {
        let context = ToolContext {
            tree: self.tree.clone(),
            env: self.config.env.clone(),
            shell_timeout: self.shell_timeout,
            cancel: cancel.child_token(),
        };
        // Tracker keys are unique even when a model repeats a call id.
        let key = |index: usize| format!("{}#{index}", run.turns);
        for (index, call) in calls.iter().enumerate() {
            self.sink.emit(AgentEvent::ToolCallStarted {
                tool: call.name.clone(),
                call_id: call.id.clone(),
                arguments: call.arguments.clone(),
                server: self.tools.server_of(&call.name),
            });
            let paths = self.tools.written_paths(call, &self.tree);
            run.tracker.start(&key(index), paths.clone());
            self.tracker.start(&key(index), paths);
        }
        let timed = |call: &ToolCall| {
            let tools = &self.tools;
            let context = &context;
            let call = call.clone();
            async move {
                let started = Instant::now();
                let result = tools.execute(&call, context).await;
                (result, started.elapsed())
            }
        };
        let outcomes: Vec<(ToolResult, Duration)> = {
            let work = async {
                if self.tools.parallel_calls() && calls.len() > 1 {
                    join_all(calls.iter().map(timed)).await
                } else {
                    let mut outcomes = Vec::with_capacity(calls.len());
                    for call in calls {
                        outcomes.push(timed(call).await);
                    }
                    outcomes
                }
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                outcomes = work => outcomes,
            }
        };
        let mut messages = Vec::with_capacity(calls.len());
        for (index, (call, (result, elapsed))) in calls.iter().zip(outcomes).enumerate() {
            run.tracker.complete(&key(index), !result.is_error);
            self.tracker.complete(&key(index), !result.is_error);
            self.sink.emit(AgentEvent::ToolCallCompleted {
                tool: call.name.clone(),
                call_id: call.id.clone(),
                is_error: result.is_error,
                output: result.output,
                duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                server: self.tools.server_of(&call.name),
            });
            messages.push(Message::tool_result(
                call.id.clone(),
                result.model_output,
                result.is_error,
            ));
        }
        Some(messages)
    }

    /// SPEC 6.8: estimate, warn, summarise the older entries, replace them. A failed
    /// summary is reported and leaves the history alone; only cancellation ends the run.
    async fn compact_if_needed(
        &mut self,
        run: &mut RunState,
        cancel: &CancellationToken,
    ) -> Option<AgentFailure> {
        let estimated = compaction::estimate_tokens(&self.system, &self.history);
        if !compaction::over_threshold(estimated, self.context_window) {
            return None;
        }
        let usage_percent = if self.context_window == 0 {
            100.0
        } else {
            (estimated as f64) * 100.0 / (self.context_window as f64)
        };
        self.sink.emit(AgentEvent::ContextWindowWarning {
            estimated_tokens: estimated,
            context_window_size: self.context_window,
            usage_percent,
        });
        let split = compaction::split_point(&self.history)?;
        self.sink.emit(AgentEvent::CompactionStarted {
            estimated_tokens: estimated,
            context_window_size: self.context_window,
        });
        let mut request = compaction::summary_request(
            &self.config.model,
            &self.config.node_id,
            &compaction::render(&self.history[..split]),
        );
        request.max_tokens = self.config.max_tokens;
        request.reasoning_effort = self.config.reasoning_effort;
        // Simulated summaries never consume the node's scripted entries (SPEC 10.1.5).
        let client: &dyn LlmClient = if self.config.provider == Provider::Simulated {
            &compaction::SimulatedSummary
        } else {
            self.client.as_ref()
        };
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Some(AgentFailure::canceled()),
            response = client.complete(&request) => response,
        };
        match response {
            Err(error) => {
                self.sink.emit(AgentEvent::Error {
                    message: format!("context compaction failed: {error}"),
                });
                None
            }
            Ok(response) => {
                run.usage.add(&response.usage);
                let original_turn_count = self.history.len();
                let summary = compaction::summary_message(
                    self.config.provider,
                    &response.text,
                    &self.tracker.render(),
                );
                let summary_token_estimate =
                    u64::try_from(summary.text.chars().count() / 4).unwrap_or(u64::MAX);
                let preserved: Vec<Entry> = self.history.split_off(split);
                self.history = std::iter::once(Entry::Message(summary))
                    .chain(preserved)
                    .collect();
                self.sink.emit(AgentEvent::CompactionCompleted {
                    original_turn_count,
                    preserved_turn_count: original_turn_count - split,
                    summary_token_estimate,
                    tracked_file_count: self.tracker.files().len(),
                });
                None
            }
        }
    }
}

/// Results of the current run.
#[derive(Default)]
struct RunState {
    text: String,
    usage: Usage,
    turns: u32,
    tracker: FileTracker,
}

#[cfg(test)]
mod tests;
