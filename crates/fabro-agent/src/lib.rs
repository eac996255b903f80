//! The coding agent of fabro: what runs inside an agent node (SPEC 5.2).
//!
//! Three backends produce the same [`AgentOutcome`] (response text, usage, turns,
//! `files_touched`, and a classed [`AgentFailure`] when the run failed):
//!
//! - `api`: [`AgentSession`], fabro's own tool-calling loop (SPEC 10.4) over any
//!   [`fabro_llm::LlmClient`], with the per-provider [`ToolProfile`] of tools
//!   (SPEC 10.5), tool-call loop detection, context compaction (SPEC 6.8), project
//!   instruction files (SPEC 10.6) and writes confined to the working tree
//!   ([`WorkTree`], SPEC 13.4). A session keeps its conversation, so calling
//!   [`AgentSession::run`] again continues it (threads, `output_schema` repairs).
//! - `cli`: [`run_cli_agent`] runs an external agent CLI (claude, codex, gemini or any
//!   command) and tracks files with git snapshots ([`GitSnapshot`], SPEC 7.6).
//! - `acp`: [`run_acp_agent`] drives an Agent Client Protocol agent over stdio.
//!
//! The two external backends return an [`ExternalOutcome`]: an outcome plus what the
//! program reported (its model, usage only when reported, its stderr, and whether all
//! its tool calls failed for a sandbox reason).
//!
//! Events leave through the [`AgentEventSink`] trait; the engine maps [`AgentEvent`]s
//! to its run events. This crate knows nothing about workflows, preambles, routing or
//! output schemas: the engine builds the prompt and interprets the response.
//! It depends on `fabro-llm` only and never talks to providers itself.
//!
//! ```
//! use std::sync::Arc;
//! use fabro_agent::{AgentConfig, AgentSession, NullSink};
//! use fabro_llm::simulated::{Script, SimulatedClient};
//! use fabro_llm::Provider;
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let dir = tempfile::tempdir().unwrap();
//! let script = Script::parse(r#"{"nodes": {"implement": [
//!     {"tool_calls": [{"name": "write_file", "arguments": {"file_path": "hello.txt", "content": "hi"}}]},
//!     {"text": "Wrote hello.txt"}]}}"#).unwrap();
//! let config = AgentConfig::new(Provider::Simulated, "simulated", "implement", dir.path());
//! let client = Arc::new(SimulatedClient::new(script));
//! let mut session = AgentSession::with_default_tools(config, client, Arc::new(NullSink)).unwrap();
//! let outcome = session.run("Say hello in a file", &CancellationToken::new()).await.unwrap();
//! assert_eq!(outcome.text, "Wrote hello.txt");
//! assert_eq!(outcome.files_touched, ["hello.txt"]);
//! assert!(outcome.failure.is_none());
//! # }
//! ```

mod backend;
mod change_tracking;
mod compaction;
mod environment;
mod event;
mod failure;
mod history;
mod instructions;
pub mod isolation;
mod loop_detection;
pub mod mcp;
mod process;
mod scope;
mod session;
pub mod skill;
mod snapshot;
mod steering;
mod subagent;
pub mod timestamp;
pub mod tool;
mod tracker;
mod truncate;
pub mod web;

pub use backend::acp::{run_acp_agent, AcpAgentConfig};
pub use backend::cli::{run_cli_agent, CliAgentConfig, CliOutputFormat};
pub use backend::ExternalOutcome;
pub use change_tracking::{ChangeSource, ChangeTracker, FileTracking};
pub use compaction::{DEFAULT_CONTEXT_WINDOW, PRESERVED_ENTRIES, SUMMARY_PREFIX};
pub use environment::{is_secret_name, ProcessEnv};
pub use event::{AgentEvent, AgentEventSink, NullSink};
pub use failure::{AgentError, AgentFailure};
pub use instructions::{project_instructions, PROJECT_INSTRUCTIONS_TRUNCATED};
pub use loop_detection::{LoopDetector, LOOP_STEERING_MESSAGE};
pub use process::{ProcessGroup, SpawnError, Spawned};
pub use scope::{scope_failure_reason, scope_violation_message, ResolvedPath, WorkTree};
pub use session::{AgentConfig, AgentOutcome, AgentSession};
pub use skill::{discover as discover_skills, skill_dirs, InvalidSkill, Skill};
pub use snapshot::GitSnapshot;
pub use steering::{delivery_text, Steering, SteeringInbox, SteeringMessage, SteeringSource};
pub use subagent::register_subagent_tools;
pub use tool::{Tool, ToolContext, ToolError, ToolProfile, ToolRegistry, ToolResult, ToolSet};
pub use tracker::FileTracker;
pub use truncate::{OutputLimit, TruncationMode};
