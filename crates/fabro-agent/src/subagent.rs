//! Sub-agents (SPEC 10.4.6): `spawn_agent`, `send_input`, `wait` and `close_agent`
//! let a session start child sessions that share its working directory. Children get
//! the profile's tools without these four (depth limit 1); their events reach the
//! parent's sink wrapped in [`AgentEvent::SubAgent`] with their `agent_id`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fabro_llm::{BoxFuture, LlmClient};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::event::{AgentEvent, AgentEventSink};
use crate::failure::AgentError;
use crate::session::{AgentConfig, AgentOutcome, AgentSession};
use crate::skill::UseSkill;
use crate::tool::{parse_arguments, Tool, ToolContext, ToolError, ToolProfile, ToolRegistry};
use crate::truncate::{OutputLimit, TruncationMode};

impl AgentSession {
    /// A session with the provider's tool profile plus the sub-agent tools (SPEC 10.4.6).
    pub fn with_default_tools(
        config: AgentConfig,
        client: Arc<dyn LlmClient>,
        sink: Arc<dyn AgentEventSink>,
    ) -> Result<AgentSession, AgentError> {
        AgentSession::with_extra_tools(config, client, sink, Vec::new())
    }

    /// [`AgentSession::with_default_tools`] plus `use_skill` when the config lists
    /// skills, and `extra` tools (MCP and web tools, SPEC 19), all restricted to the
    /// config's tool set (SPEC 19.4). Sub-agents get the profile's tools only.
    pub fn with_extra_tools(
        config: AgentConfig,
        client: Arc<dyn LlmClient>,
        sink: Arc<dyn AgentEventSink>,
        extra: Vec<Arc<dyn Tool>>,
    ) -> Result<AgentSession, AgentError> {
        let mut tools = ToolRegistry::for_profile(ToolProfile::for_provider(config.provider));
        let mut children = config.clone();
        children.skills.clear();
        register_subagent_tools(
            &mut tools,
            &children,
            Arc::clone(&client),
            Arc::clone(&sink),
        );
        if !config.skills.is_empty() {
            register(&mut tools, Arc::new(UseSkill::new(config.skills.clone())));
        }
        for tool in extra {
            register(&mut tools, tool);
        }
        AgentSession::new(config, client, tools, sink)
    }
}

/// Adds `tool`; a schema the validator rejects (an MCP server's) leaves the tool out.
fn register(tools: &mut ToolRegistry, tool: Arc<dyn Tool>) {
    if let Err(error) = tools.register(tool) {
        tracing::warn!(%error, "tool left out");
    }
}

/// Adds the four sub-agent tools to `tools`. Children are built from `config` (the
/// parent's settings) and talk to `client`.
pub fn register_subagent_tools(
    tools: &mut ToolRegistry,
    config: &AgentConfig,
    client: Arc<dyn LlmClient>,
    sink: Arc<dyn AgentEventSink>,
) {
    let manager = Arc::new(SubAgents {
        config: config.clone(),
        client,
        sink,
        agents: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        cancel: CancellationToken::new(),
    });
    let all: [Arc<dyn Tool>; 4] = [
        Arc::new(SpawnAgent(Arc::clone(&manager))),
        Arc::new(SendInput(Arc::clone(&manager))),
        Arc::new(Wait(Arc::clone(&manager))),
        Arc::new(CloseAgent(manager)),
    ];
    for tool in all {
        // The schemas are constant and covered by the tests below.
        if let Err(error) = tools.register(tool) {
            tracing::error!(%error, "sub-agent tool schema rejected");
        }
    }
}

/// The children of one session.
struct SubAgents {
    config: AgentConfig,
    client: Arc<dyn LlmClient>,
    sink: Arc<dyn AgentEventSink>,
    agents: Mutex<HashMap<String, Child>>,
    next_id: AtomicU64,
    cancel: CancellationToken,
}

impl Drop for SubAgents {
    fn drop(&mut self) {
        // Stops running children (their shell commands are killed with them).
        self.cancel.cancel();
    }
}

/// One child: running (its task owns the session) or idle.
enum Child {
    Running(JoinHandle<(AgentSession, AgentOutcome)>),
    Idle(Box<(AgentSession, Option<AgentOutcome>)>),
    /// Momentarily, while the state is being changed.
    Moving,
}

impl SubAgents {
    fn start(&self, mut session: AgentSession, message: String) -> Child {
        let cancel = self.cancel.child_token();
        Child::Running(tokio::spawn(async move {
            let outcome = match session.run(&message, &cancel).await {
                Ok(outcome) => outcome,
                Err(error) => AgentOutcome {
                    failure: Some(crate::AgentFailure::new(error.class(), error.to_string())),
                    ..AgentOutcome::default()
                },
            };
            (session, outcome)
        }))
    }

    /// Waits for a running child; returns its latest outcome.
    async fn settle(&self, child: &mut Child) -> Result<Option<AgentOutcome>, ToolError> {
        match std::mem::replace(child, Child::Moving) {
            Child::Running(handle) => match handle.await {
                Ok((session, outcome)) => {
                    *child = Child::Idle(Box::new((session, Some(outcome.clone()))));
                    Ok(Some(outcome))
                }
                Err(error) => Err(ToolError::Failed(format!("sub-agent stopped: {error}"))),
            },
            Child::Idle(idle) => {
                let outcome = idle.1.clone();
                *child = Child::Idle(idle);
                Ok(outcome)
            }
            Child::Moving => Err(ToolError::Failed("sub-agent is busy".to_owned())),
        }
    }
}

/// Wraps a child's events with its id.
fn child_sink(parent: Arc<dyn AgentEventSink>, agent_id: String) -> Arc<dyn AgentEventSink> {
    Arc::new(move |event: AgentEvent| {
        parent.emit(AgentEvent::SubAgent {
            agent_id: agent_id.clone(),
            event: Box::new(event),
        });
    })
}

fn limit() -> OutputLimit {
    OutputLimit::new(20_000, TruncationMode::HeadTail)
}

struct SpawnAgent(Arc<SubAgents>);

#[derive(Deserialize)]
struct SpawnArguments {
    task: String,
    working_dir: Option<String>,
    model: Option<String>,
    max_turns: Option<u32>,
}

impl Tool for SpawnAgent {
    fn name(&self) -> &'static str {
        "spawn_agent"
    }

    fn description(&self) -> &'static str {
        "Start a sub-agent on a task in the background; returns its agent_id. Use wait to get its result."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "minLength": 1},
                "working_dir": {"type": "string", "description": "Directory inside the working directory (default: the same)."},
                "model": {"type": "string"},
                "max_turns": {"type": "integer", "minimum": 0}
            },
            "required": ["task"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        limit()
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: SpawnArguments = parse_arguments(arguments)?;
            let manager = &self.0;
            let mut config = manager.config.clone();
            if let Some(directory) = &arguments.working_dir {
                let resolved = context
                    .tree
                    .resolve_read(directory)
                    .map_err(ToolError::Failed)?;
                config.working_dir = resolved.absolute;
            }
            if let Some(model) = arguments.model {
                config.model = model;
            }
            if let Some(max_turns) = arguments.max_turns {
                config.max_turns = max_turns;
            }
            let agent_id = format!("agent_{}", manager.next_id.fetch_add(1, Ordering::Relaxed));
            let tools = ToolRegistry::for_profile(ToolProfile::for_provider(config.provider));
            let session = AgentSession::new(
                config,
                Arc::clone(&manager.client),
                tools,
                child_sink(Arc::clone(&manager.sink), agent_id.clone()),
            )
            .map_err(|error| ToolError::Failed(error.to_string()))?;
            let child = manager.start(session, arguments.task);
            manager.agents.lock().await.insert(agent_id.clone(), child);
            Ok(json!({"agent_id": agent_id, "status": "running"}).to_string())
        })
    }
}

struct SendInput(Arc<SubAgents>);

#[derive(Deserialize)]
struct SendArguments {
    agent_id: String,
    message: String,
}

impl Tool for SendInput {
    fn name(&self) -> &'static str {
        "send_input"
    }

    fn description(&self) -> &'static str {
        "Send a follow-up message to a sub-agent (after its current work finishes); it continues its conversation in the background."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"agent_id": {"type": "string"}, "message": {"type": "string", "minLength": 1}},
            "required": ["agent_id", "message"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        limit()
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: SendArguments = parse_arguments(arguments)?;
            let manager = &self.0;
            let mut agents = manager.agents.lock().await;
            let child = agents
                .get_mut(&arguments.agent_id)
                .ok_or_else(|| unknown(&arguments.agent_id))?;
            manager.settle(child).await?;
            match std::mem::replace(child, Child::Moving) {
                Child::Idle(idle) => {
                    *child = manager.start(idle.0, arguments.message);
                    Ok(json!({"agent_id": arguments.agent_id, "status": "running"}).to_string())
                }
                other => {
                    *child = other;
                    Err(ToolError::Failed("sub-agent is busy".to_owned()))
                }
            }
        })
    }
}

struct Wait(Arc<SubAgents>);

#[derive(Deserialize)]
struct AgentArguments {
    agent_id: String,
}

fn agent_id_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"agent_id": {"type": "string"}},
        "required": ["agent_id"],
        "additionalProperties": false
    })
}

fn unknown(agent_id: &str) -> ToolError {
    ToolError::Failed(format!("no sub-agent with id {agent_id}"))
}

impl Tool for Wait {
    fn name(&self) -> &'static str {
        "wait"
    }

    fn description(&self) -> &'static str {
        "Wait for a sub-agent to finish; returns {output, success, turns_used}."
    }

    fn parameters(&self) -> Value {
        agent_id_schema()
    }

    fn limit(&self) -> OutputLimit {
        limit()
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: AgentArguments = parse_arguments(arguments)?;
            let manager = &self.0;
            let mut agents = manager.agents.lock().await;
            let child = agents
                .get_mut(&arguments.agent_id)
                .ok_or_else(|| unknown(&arguments.agent_id))?;
            let outcome = manager.settle(child).await?.unwrap_or_default();
            Ok(json!({
                "output": outcome.text,
                "success": outcome.failure.is_none(),
                "turns_used": outcome.turns,
            })
            .to_string())
        })
    }
}

struct CloseAgent(Arc<SubAgents>);

impl Tool for CloseAgent {
    fn name(&self) -> &'static str {
        "close_agent"
    }

    fn description(&self) -> &'static str {
        "Stop a sub-agent and forget it."
    }

    fn parameters(&self) -> Value {
        agent_id_schema()
    }

    fn limit(&self) -> OutputLimit {
        limit()
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: AgentArguments = parse_arguments(arguments)?;
            let removed = self.0.agents.lock().await.remove(&arguments.agent_id);
            match removed {
                None => Err(unknown(&arguments.agent_id)),
                Some(child) => {
                    if let Child::Running(handle) = child {
                        // Dropping the run kills its shell commands.
                        handle.abort();
                    }
                    Ok(format!("closed {}", arguments.agent_id))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_llm::{
        replay_response, LlmError, Message, Provider, Request, Response, Role, ToolCall, Usage,
    };
    use std::sync::Mutex as StdMutex;

    /// Answers the parent ("parent task") and the child ("child task") from the
    /// state of their conversations, so their interleaving does not matter.
    #[derive(Default)]
    struct Router {
        child_tools: StdMutex<Vec<String>>,
    }

    fn reply(text: &str, calls: Vec<(&str, Value)>) -> Result<Response, LlmError> {
        Ok(Response {
            text: text.to_owned(),
            tool_calls: calls
                .into_iter()
                .enumerate()
                .map(|(index, (name, arguments))| ToolCall {
                    id: format!("call_{index}"),
                    name: name.to_owned(),
                    arguments,
                })
                .collect(),
            usage: Usage::default(),
            model: "fake".to_owned(),
            thinking: Vec::new(),
        })
    }

    impl LlmClient for Router {
        fn complete_streaming<'a>(
            &'a self,
            request: &'a Request,
            sink: &'a mut fabro_llm::StreamSink<'_>,
        ) -> BoxFuture<'a, Result<Response, LlmError>> {
            Box::pin(async move {
                let response: Result<Response, LlmError> = {
                    let last: &Message = request.messages.last().expect("requests carry messages");
                    let waits = request
                        .messages
                        .iter()
                        .filter(|message| message.text.contains("turns_used"))
                        .count();
                    match request.messages[0].text.as_str() {
                        "parent task" => match last.role {
                            Role::User => {
                                reply("", vec![("spawn_agent", json!({"task": "child task"}))])
                            }
                            _ if last.text.contains("\"status\":\"running\"") => {
                                reply("", vec![("wait", json!({"agent_id": "agent_1"}))])
                            }
                            _ if waits == 1 => reply(
                                "",
                                vec![(
                                    "send_input",
                                    json!({"agent_id": "agent_1", "message": "more"}),
                                )],
                            ),
                            _ => reply(&format!("parent done: {}", last.text), vec![]),
                        },
                        "child task" => {
                            *self.child_tools.lock().unwrap() =
                                request.tools.iter().map(|tool| tool.name.clone()).collect();
                            match (last.role, last.text.as_str()) {
                                (Role::User, "child task") => reply(
                                    "",
                                    vec![(
                                        "write_file",
                                        json!({"file_path": "child.txt", "content": "c"}),
                                    )],
                                ),
                                (Role::User, "more") => reply("more done", vec![]),
                                _ => reply("child done", vec![]),
                            }
                        }
                        other => panic!("unexpected conversation {other}"),
                    }
                };
                if let Ok(response) = &response {
                    replay_response(response, sink);
                }
                response
            })
        }
    }

    #[tokio::test]
    async fn spawn_wait_send_input_and_close() {
        let dir = tempfile::tempdir().unwrap();
        let events: Arc<StdMutex<Vec<AgentEvent>>> = Arc::default();
        let recorded = Arc::clone(&events);
        let sink: Arc<dyn AgentEventSink> =
            Arc::new(move |event| recorded.lock().unwrap().push(event));
        let router = Arc::new(Router::default());
        let mut config = AgentConfig::new(
            Provider::Anthropic,
            "claude-sonnet-4-6",
            "implement",
            dir.path(),
        );
        config.project_memory = false;
        let mut session = AgentSession::with_default_tools(
            config,
            Arc::clone(&router) as Arc<dyn LlmClient>,
            sink,
        )
        .unwrap();
        let outcome = session
            .run("parent task", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.failure, None);
        assert_eq!(
            outcome.text,
            r#"parent done: {"output":"more done","success":true,"turns_used":1}"#
        );
        assert_eq!(
            fs_err::read_to_string(dir.path().join("child.txt")).unwrap(),
            "c"
        );
        // Depth limit 1: the child has no sub-agent tools.
        let child_tools = router.child_tools.lock().unwrap().clone();
        assert_eq!(
            child_tools,
            [
                "read_file",
                "write_file",
                "edit_file",
                "shell",
                "grep",
                "glob"
            ]
        );
        let child_write = events.lock().unwrap().iter().any(|event| {
            matches!(event, AgentEvent::SubAgent { agent_id, event }
                if agent_id == "agent_1" && matches!(**event, AgentEvent::ToolCallStarted { ref tool, .. } if tool == "write_file"))
        });
        assert!(child_write);
        // The first wait reported the child's first run.
        let first_wait = session
            .messages()
            .iter()
            .find(|message| message.text.contains("turns_used"))
            .map(|message| message.text.clone())
            .unwrap();
        assert_eq!(
            first_wait,
            r#"{"output":"child done","success":true,"turns_used":2}"#
        );
    }

    #[tokio::test]
    async fn unknown_agents_are_tool_errors() {
        let dir = tempfile::tempdir().unwrap();
        let config = AgentConfig::new(Provider::Anthropic, "m", "n", dir.path());
        let mut tools = ToolRegistry::empty();
        register_subagent_tools(
            &mut tools,
            &config,
            Arc::new(Router::default()),
            Arc::new(crate::NullSink),
        );
        assert_eq!(
            tools.names(),
            ["spawn_agent", "send_input", "wait", "close_agent"]
        );
        let context = ToolContext {
            tree: crate::WorkTree::new(dir.path(), &[]).unwrap(),
            env: crate::ProcessEnv::inherit(),
            shell_timeout: std::time::Duration::from_secs(1),
            cancel: CancellationToken::new(),
        };
        for name in ["wait", "close_agent"] {
            let call = ToolCall {
                id: "c".to_owned(),
                name: name.to_owned(),
                arguments: json!({"agent_id": "agent_9"}),
            };
            let result = tools.execute(&call, &context).await;
            assert_eq!(
                result.output,
                format!("Tool error ({name}): no sub-agent with id agent_9")
            );
        }
        let call = ToolCall {
            id: "c".to_owned(),
            name: "spawn_agent".to_owned(),
            arguments: json!({"task": "t", "working_dir": "../.."}),
        };
        let result = tools.execute(&call, &context).await;
        assert!(result.is_error);
        assert!(result.output.contains("outside the working directory"));
    }
}
