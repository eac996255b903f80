//! The events of SPEC 11.3 as types: one struct per event, and [`EventKind`] over them.
//!
//! `events.jsonl` has always written an event's properties with their keys in sorted
//! order (they were JSON maps), and a struct serialises its fields in declaration order:
//! so every struct here declares its fields alphabetically, which keeps the files byte
//! for byte as they were. A test checks the order of every event, and snapshots pin each
//! event's JSON, so a renamed or reordered field fails loudly.
//!
//! Every struct denies unknown fields: an event whose properties do not match its struct
//! exactly (written by another fabro version) is kept as a [`RawEvent`], so reading and
//! writing it again loses nothing.

use fabro_language::StageStatus;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::id::BlobRef;
use crate::run_status::RunStatus;

/// Declares [`EventKind`] with one variant per event struct, named as in the file.
macro_rules! event_kinds {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, )*) => {
        /// Every event fabro writes, tagged by its name in `events.jsonl` (the envelope's
        /// `event` field) with its struct as the `properties`.
        #[derive(Debug, Clone, PartialEq)]
        pub enum EventKind {
            $( $(#[$doc])* $variant($variant), )*
            /// An event of a name this version does not know, or whose properties do not
            /// match its struct: kept as read.
            Other(RawEvent),
        }

        impl EventKind {
            /// Every event name this version writes.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// The events of which exactly one ends a finished run (SPEC 11.3).
            pub const TERMINAL: [&'static str; 2] = ["WorkflowRunCompleted", "WorkflowRunFailed"];

            /// Whether an event called `name` ends its run.
            pub fn is_terminal_name(name: &str) -> bool {
                EventKind::TERMINAL.contains(&name)
            }

            /// Whether this event ends its run.
            pub fn is_terminal(&self) -> bool {
                EventKind::is_terminal_name(self.name())
            }

            /// The event name, e.g. `StageCompleted` or `Agent.ToolCallStarted`.
            pub fn name(&self) -> &str {
                match self {
                    $( EventKind::$variant(_) => $name, )*
                    EventKind::Other(raw) => &raw.name,
                }
            }

            /// The event called `name` with `properties`, as read from a file: a
            /// [`EventKind::Other`] when the name is unknown or the properties do not fit.
            pub fn from_parts(name: String, properties: Map<String, Value>) -> EventKind {
                let value = Value::Object(properties);
                let known = match name.as_str() {
                    $( $name => $variant::deserialize(&value).map(EventKind::$variant).ok(), )*
                    _ => None,
                };
                known.unwrap_or_else(|| EventKind::Other(RawEvent {
                    name,
                    properties: match value {
                        Value::Object(properties) => properties,
                        _ => Map::new(),
                    },
                }))
            }

            /// Serialises the properties alone (the envelope's `properties` object).
            pub(crate) fn serialize_properties<S: Serializer>(
                &self,
                serializer: S,
            ) -> Result<S::Ok, S::Error> {
                match self {
                    $( EventKind::$variant(properties) => properties.serialize(serializer), )*
                    EventKind::Other(raw) => raw.properties.serialize(serializer),
                }
            }
        }

        $(
            impl From<$variant> for EventKind {
                fn from(properties: $variant) -> EventKind {
                    EventKind::$variant(properties)
                }
            }
        )*
    };
}

event_kinds! {
    /// The run started or resumed.
    WorkflowRunStarted = "WorkflowRunStarted",
    /// The run reached exit.
    WorkflowRunCompleted = "WorkflowRunCompleted",
    /// The run failed or was cancelled.
    WorkflowRunFailed = "WorkflowRunFailed",
    /// A stage started (its first attempt).
    StageStarted = "StageStarted",
    /// A stage ended, after its last attempt.
    StageCompleted = "StageCompleted",
    /// A stage attempt failed and another follows (SPEC 9.3).
    StageRetrying = "StageRetrying",
    /// Structured output failed validation and the model is asked again (SPEC 7.4).
    StageOutputRepair = "StageOutputRepair",
    /// The traversal chose an edge.
    EdgeSelected = "EdgeSelected",
    /// A checkpoint was written (SPEC 8.6).
    CheckpointCompleted = "CheckpointCompleted",
    /// A command node started its script.
    CommandStarted = "CommandStarted",
    /// A command node's script ended.
    CommandCompleted = "CommandCompleted",
    /// A human gate asked its question.
    HumanQuestion = "HumanQuestion",
    /// A human gate got its answer.
    HumanAnswer = "HumanAnswer",
    /// A parallel node started its branches.
    ParallelStarted = "ParallelStarted",
    /// One parallel branch started.
    ParallelBranchStarted = "ParallelBranchStarted",
    /// One parallel branch ended.
    ParallelBranchCompleted = "ParallelBranchCompleted",
    /// Every parallel branch ended.
    ParallelCompleted = "ParallelCompleted",
    /// A fan-in node chose a branch.
    FanInSelected = "FanInSelected",
    /// A sub-workflow node started its child run.
    SubWorkflowStarted = "SubWorkflowStarted",
    /// A sub-workflow node's child run ended.
    SubWorkflowCompleted = "SubWorkflowCompleted",
    /// An agent session started.
    AgentSessionStarted = "Agent.SessionStarted",
    /// An assistant turn arrived.
    AgentAssistantMessage = "Agent.AssistantMessage",
    /// A tool call started.
    AgentToolCallStarted = "Agent.ToolCallStarted",
    /// A tool call ended.
    AgentToolCallCompleted = "Agent.ToolCallCompleted",
    /// An LLM call is retried (SPEC 9.2).
    AgentLlmRetry = "Agent.LlmRetry",
    /// An LLM call moves to the next provider (SPEC 9.4).
    AgentFailover = "Agent.Failover",
    /// The agent repeats itself; a steering message was added.
    AgentLoopDetected = "Agent.LoopDetected",
    /// The history passed 80 % of the context window.
    AgentContextWindowWarning = "Agent.ContextWindowWarning",
    /// Context compaction started (SPEC 6.8).
    AgentCompactionStarted = "Agent.CompactionStarted",
    /// Context compaction ended.
    AgentCompactionCompleted = "Agent.CompactionCompleted",
    /// A non-fatal agent problem.
    AgentError = "Agent.Error",
    /// Queued steering messages reached the agent (SPEC 20.1).
    AgentSteeringDelivered = "Agent.SteeringDelivered",
    /// A steering message was accepted for the run's agent (SPEC 20.1).
    SteeringQueued = "SteeringQueued",
    /// A goal gate is unsatisfied at exit; the run jumps to its retry target (SPEC 9.10).
    GoalGateUnsatisfied = "GoalGateUnsatisfied",
    /// A loop-restart edge was taken (SPEC 9.9).
    LoopRestart = "LoopRestart",
    /// A failure signature repeated too often (SPEC 9.8).
    CircuitBreakerTripped = "CircuitBreakerTripped",
    /// The stall watchdog cancelled the run (SPEC 9.11).
    WatchdogTimeout = "Watchdog.Timeout",
    /// A budget of SPEC 17.1 stopped the run.
    BudgetExhausted = "BudgetExhausted",
    /// A `[[hooks]]` entry started (SPEC 20.4).
    HookStarted = "HookStarted",
    /// A `[[hooks]]` entry ended.
    HookCompleted = "HookCompleted",
    /// Something a person should know about.
    Warning = "Warning",
    /// The run was moved back to an earlier checkpoint (SPEC 20.3).
    RunRewound = "RunRewound",
}

/// An event kept as read (see [`EventKind::Other`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    /// Its name.
    pub name: String,
    /// Its properties.
    pub properties: Map<String, Value>,
}

/// Token usage and cost as events carry it (keys in sorted order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventUsage {
    /// Tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// Cost in USD; `None` when the model has no price.
    pub cost_usd: Option<f64>,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
}

impl From<fabro_llm::Usage> for EventUsage {
    fn from(usage: fabro_llm::Usage) -> EventUsage {
        EventUsage {
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            cost_usd: usage.cost_usd,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            reasoning_tokens: usage.reasoning_tokens,
        }
    }
}

/// `WorkflowRunStarted {workflow_name, goal, run_dir, base_sha, run_branch, dry_run,
/// resumed, next_node_id, worker}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowRunStarted {
    /// Base commit, with git.
    pub base_sha: Option<String>,
    /// Whether handlers are simulated.
    pub dry_run: bool,
    /// The resolved goal.
    pub goal: String,
    /// The node the run starts (or resumes) at.
    pub next_node_id: String,
    /// Whether this is a resume.
    pub resumed: bool,
    /// The run branch, with git.
    pub run_branch: Option<String>,
    /// The run directory.
    pub run_dir: String,
    /// The worker that executes the run (SPEC 18.2); absent outside workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Graph id or file stem.
    pub workflow_name: String,
}

/// `WorkflowRunCompleted {status, duration_ms, completed_count, artifact_count,
/// asset_count, usage, cost_usd}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowRunCompleted {
    /// Blobs the run produced.
    pub artifact_count: usize,
    /// Assets captured.
    pub asset_count: usize,
    /// Stages completed.
    pub completed_count: usize,
    /// Cost of every LLM call, when priced.
    pub cost_usd: Option<f64>,
    /// Wall time of the run (or this resume).
    pub duration_ms: u64,
    /// Final status.
    pub status: RunStatus,
    /// Usage of every stage.
    pub usage: EventUsage,
}

/// `WorkflowRunFailed {reason, failure_class, node_id, duration_ms}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowRunFailed {
    /// Wall time of the run (or this resume).
    pub duration_ms: u64,
    /// Failure class (`canceled` for cancellations).
    pub failure_class: String,
    /// The node concerned, if any.
    pub node_id: Option<String>,
    /// Why.
    pub reason: String,
}

/// `StageStarted {handler, visit, attempt, rank, branch?, isolation?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageStarted {
    /// Always 1; later attempts are `StageRetrying`.
    pub attempt: u32,
    /// The parallel branch the stage runs in; absent at top level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Handler type.
    pub handler: String,
    /// How the stage's processes are isolated (SPEC 16); command and agent stages only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<StageIsolation>,
    /// Stage rank in the run.
    pub rank: u32,
    /// Run-wide visit number.
    pub visit: u32,
}

/// `isolation: {mode, network, enforced}` of `StageStarted` (SPEC 16).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageIsolation {
    /// What the kernel applies: `landlock`, `mount_namespace`, `network_namespace`.
    pub enforced: Vec<String>,
    /// `none` or `workspace`.
    pub mode: String,
    /// Whether the stage's processes have a network.
    pub network: bool,
}

/// `StageCompleted {status, outcome, duration_ms, files_touched, usage, failure_reason,
/// failure_class, model, provider, attempts, visit, rank}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageCompleted {
    /// Attempts made.
    pub attempts: u32,
    /// Wall time of the stage, every attempt included.
    pub duration_ms: u64,
    /// Failure class of a failed stage.
    pub failure_class: Option<String>,
    /// Failure reason of a failed stage.
    pub failure_reason: Option<String>,
    /// Files the stage changed.
    pub files_touched: Vec<String>,
    /// Model of an LLM stage.
    pub model: Option<String>,
    /// What conditions see as `outcome` (a custom outcome or the status).
    pub outcome: String,
    /// Provider of an LLM stage.
    pub provider: Option<String>,
    /// Stage rank in the run.
    pub rank: u32,
    /// Canonical status.
    pub status: StageStatus,
    /// LLM usage.
    pub usage: Option<EventUsage>,
    /// Run-wide visit number.
    pub visit: u32,
}

/// `StageRetrying {attempt, next_attempt, delay_ms, failure_reason, failure_class}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageRetrying {
    /// The attempt that failed.
    pub attempt: u32,
    /// Backoff before the next attempt.
    pub delay_ms: u64,
    /// Its failure class (empty for `retry` outcomes without one).
    pub failure_class: String,
    /// Its failure reason.
    pub failure_reason: String,
    /// The attempt that follows.
    pub next_attempt: u32,
}

/// `StageOutputRepair {attempt, max, errors}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageOutputRepair {
    /// Repair number, from 1.
    pub attempt: u32,
    /// Validation errors of the rejected output.
    pub errors: Vec<String>,
    /// Repairs allowed.
    pub max: u32,
}

/// `EdgeSelected {from, to, label, reason, loop_restart}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeSelected {
    /// Source node.
    pub from: String,
    /// Edge label.
    pub label: String,
    /// Whether the edge restarts the loop.
    pub loop_restart: bool,
    /// Why the edge was chosen (SPEC 4.5).
    pub reason: String,
    /// Target node.
    pub to: String,
}

/// `CheckpointCompleted {next_node_id, git_commit_sha, metadata_sha}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointCompleted {
    /// Run-branch commit, with git.
    pub git_commit_sha: Option<String>,
    /// Metadata commit, with git.
    pub metadata_sha: Option<String>,
    /// The node the run continues at.
    pub next_node_id: Option<String>,
}

/// `CommandStarted {script, language, timeout_ms}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandStarted {
    /// `shell` or `python`.
    pub language: String,
    /// The script.
    pub script: String,
    /// Its time limit.
    pub timeout_ms: u64,
}

/// `CommandCompleted {exit_code, duration_ms, timed_out, stdout_ref, stderr_ref}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandCompleted {
    /// Run time.
    pub duration_ms: u64,
    /// Exit code, when the process exited.
    pub exit_code: Option<i32>,
    /// Blob ref of stderr, when stored.
    pub stderr_ref: Option<BlobRef>,
    /// Blob ref of stdout, when stored.
    pub stdout_ref: Option<BlobRef>,
    /// Whether the time limit ended it.
    pub timed_out: bool,
}

/// One choice of a [`HumanQuestion`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanOption {
    /// Accelerator key.
    pub key: String,
    /// Label shown.
    pub label: String,
    /// Node the choice leads to.
    pub target: String,
}

/// `HumanQuestion {question_id, text, question_type, options, allow_freeform,
/// default_choice, timeout_ms}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanQuestion {
    /// Whether free text is accepted.
    pub allow_freeform: bool,
    /// The default choice, if any.
    pub default_choice: Option<String>,
    /// The choices.
    pub options: Vec<HumanOption>,
    /// Question id.
    pub question_id: String,
    /// `yes_no`, `multiple_choice`, `freeform` or `confirmation`.
    pub question_type: String,
    /// The question.
    pub text: String,
    /// Time limit, if any.
    pub timeout_ms: Option<u64>,
}

/// `HumanAnswer {question_id, source, selected_key, label, text}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanAnswer {
    /// Label of the chosen option (the freeform edge's label for free text).
    pub label: String,
    /// Question id.
    pub question_id: String,
    /// Key of the chosen option.
    pub selected_key: String,
    /// Where the answer came from.
    pub source: String,
    /// Free text, if any.
    pub text: String,
}

/// `ParallelStarted {branch_count, join_policy, max_parallel, join_node}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelStarted {
    /// Branches.
    pub branch_count: usize,
    /// The computed join node.
    pub join_node: String,
    /// `wait_all` or `first_success`.
    pub join_policy: String,
    /// Concurrency limit.
    pub max_parallel: u32,
}

/// `ParallelBranchStarted {branch, index}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelBranchStarted {
    /// The branch's first node.
    pub branch: String,
    /// Its position among the branches.
    pub index: usize,
}

/// `ParallelBranchCompleted {status, duration_ms, head_sha}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelBranchCompleted {
    /// Run time of the branch.
    pub duration_ms: u64,
    /// Head of the branch's git branch, with git.
    pub head_sha: Option<String>,
    /// The branch's status.
    pub status: StageStatus,
}

/// `ParallelCompleted {success_count, failure_count}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelCompleted {
    /// Branches that failed.
    pub failure_count: usize,
    /// Branches that succeeded.
    pub success_count: usize,
}

/// `FanInSelected {best_id, best_outcome, best_head_sha, method}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FanInSelected {
    /// Head of the chosen branch, with git.
    pub best_head_sha: Option<String>,
    /// The chosen branch.
    pub best_id: String,
    /// Its status.
    pub best_outcome: String,
    /// `heuristic` or `llm`.
    pub method: String,
}

/// `SubWorkflowStarted {child_run_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubWorkflowStarted {
    /// The child run.
    pub child_run_id: String,
}

/// `SubWorkflowCompleted {child_run_id, status}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubWorkflowCompleted {
    /// The child run.
    pub child_run_id: String,
    /// Its final status.
    pub status: RunStatus,
}

/// `SteeringQueued {source, text}` (SPEC 20.1): a steering message was accepted; about
/// the agent stage that runs, or run-level when it waits for the next one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SteeringQueued {
    /// `cli`, `api` or `ui`.
    pub source: String,
    /// The message (redacted).
    pub text: String,
}

/// `GoalGateUnsatisfied {gate_node, retry_target}` (run-level).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoalGateUnsatisfied {
    /// The unsatisfied goal gate.
    pub gate_node: String,
    /// Where the run jumps.
    pub retry_target: String,
}

/// `LoopRestart {from, to, restart_count}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopRestart {
    /// Source node of the restart edge.
    pub from: String,
    /// Restarts so far.
    pub restart_count: u32,
    /// Target node.
    pub to: String,
}

/// `CircuitBreakerTripped {signature, count, limit, scope}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CircuitBreakerTripped {
    /// Repetitions seen.
    pub count: u32,
    /// The limit.
    pub limit: u32,
    /// `loop` or `restart`.
    pub scope: String,
    /// The failure signature.
    pub signature: String,
}

/// `Watchdog.Timeout {stall_timeout_s, last_event_id}` (run-level).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchdogTimeout {
    /// Id of the last event before the stall.
    pub last_event_id: u64,
    /// The stall timeout.
    pub stall_timeout_s: u64,
}

/// `BudgetExhausted {kind, used, limit}` (run-level, SPEC 17.1): `kind` is `stages`,
/// `tokens`, `cost` or `duration`; `used` and `limit` as the reason prints them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetExhausted {
    /// Which limit.
    pub kind: String,
    /// The limit's value.
    pub limit: String,
    /// Amount used.
    pub used: String,
}

mod agent;
mod from_agent;
mod hook;
mod rewound;
mod warning;

pub use agent::{
    AgentAssistantMessage, AgentCompactionCompleted, AgentCompactionStarted,
    AgentContextWindowWarning, AgentError, AgentFailover, AgentLlmRetry, AgentLoopDetected,
    AgentSessionStarted, AgentSteeringDelivered, AgentToolCallCompleted, AgentToolCallStarted,
};
pub use hook::{HookCompleted, HookStarted};
pub use rewound::RunRewound;
pub use warning::Warning;

#[cfg(test)]
mod tests;
