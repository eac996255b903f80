//! Agent nodes (SPEC 5.2): the `api` backend (fabro's own [`AgentSession`], shared by
//! the nodes of a thread under `full` fidelity), the `cli` backend (an external agent
//! CLI, a new process per turn) and the `acp` backend (an Agent Client Protocol agent).
//! Agent events become `Agent.*` run events of the current node; agent failure classes
//! become the engine's (a change outside the write scope is `structural`).

mod extension;

use std::sync::{Arc, Mutex, PoisonError};

use fabro_agent::{
    run_acp_agent, run_cli_agent, AcpAgentConfig, AgentConfig, AgentError, AgentEvent,
    AgentOutcome, AgentSession, CliAgentConfig, ExternalOutcome, ProcessEnv, Steering,
};
use fabro_language::model::Backend;
use fabro_llm::Provider;

use super::reply::Reply;
use super::StageInput;
use crate::event::kind::{AgentSessionStarted, Warning};
use crate::event::Event;
use crate::failure::FailureClass;
use crate::llm_target::{credential_variable, LlmTarget};
use crate::outcome::Failure;
use crate::steering::AgentStage;
use crate::thread::{LiveSession, SharedSession};

pub(crate) use extension::AgentExtensions;

/// The conversation of one agent stage.
pub(super) enum AgentConversation {
    /// A live api session (possibly a thread's).
    Api(SharedSession),
    /// An external CLI; `original` is the first prompt, repeated in repair prompts.
    Cli {
        config: CliAgentConfig,
        original: String,
    },
    /// An ACP agent.
    Acp {
        config: AcpAgentConfig,
        original: String,
    },
}

impl AgentConversation {
    /// Starts (or, for a `full` thread, continues) the node's agent.
    pub(super) async fn new(
        input: &StageInput<'_>,
        target: &LlmTarget,
        thread: Option<&str>,
    ) -> Result<AgentConversation, Failure> {
        let node = input.node;
        let services = input.services;
        let env = process_env(input, target.provider)?;
        let started = |backend: &str| session_started(input, target, thread, backend);
        match node.llm.backend {
            // The simulated provider has no CLI: a cli agent with it runs like api.
            Backend::Cli if target.provider != Provider::Simulated => {
                let mut config = CliAgentConfig::for_provider(
                    target.provider,
                    target.model.clone(),
                    input.work_dir,
                    env,
                )
                .map_err(|error| agent_error(&error))?;
                config.write_scope = node.llm.write_scope().to_vec();
                config.file_tracking = services.file_tracking();
                config
                    .args
                    .extend(extension::cli_mcp_args(target.provider, input)?);
                // The CLI enforces the node timeout itself (`handles_own_timeout`), so
                // the stage still records what ran (SPEC 2.10, decision 69).
                config.timeout = node.timeout();
                started("cli");
                Ok(AgentConversation::Cli {
                    config,
                    original: String::new(),
                })
            }
            // SPEC 17.3: a run simulated everywhere runs acp agents on fabro's own loop.
            Backend::Acp if !target.simulated_everywhere => {
                let command = node
                    .llm
                    .acp_command()
                    .map(<[String]>::to_vec)
                    .or_else(|| services.acp_command.clone())
                    .filter(|command| !command.is_empty())
                    .ok_or_else(|| Failure {
                        reason: "acp backend requires acp_command or [agent.acp] command"
                            .to_owned(),
                        class: FailureClass::Deterministic,
                    })?;
                let mut config = AcpAgentConfig::new(command, input.work_dir, env);
                config.mcp_servers = services.extensions.external_servers(input)?;
                config.write_scope = node.llm.write_scope().to_vec();
                config.file_tracking = services.file_tracking();
                // The agent enforces the node timeout itself (`handles_own_timeout`), so
                // it can send `session/cancel` first (SPEC 5.2.3).
                config.timeout = node.timeout();
                started("acp");
                Ok(AgentConversation::Acp {
                    config,
                    original: String::new(),
                })
            }
            Backend::Api | Backend::Cli | Backend::Acp => {
                if let Some(live) = thread.and_then(|key| services.threads.session(key)) {
                    {
                        let mut guard = live.lock().await;
                        guard.session.set_node_id(node.id.clone());
                        *guard.node_id.lock().unwrap_or_else(PoisonError::into_inner) =
                            node.id.clone();
                    }
                    return Ok(AgentConversation::Api(live));
                }
                let node_id = Arc::new(Mutex::new(node.id.clone()));
                let sink_node = Arc::clone(&node_id);
                let emitter = Arc::clone(&services.emitter);
                let sink = Arc::new(move |event: AgentEvent| {
                    let id = sink_node
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    emitter.emit(Event::agent(&id, &event));
                });
                let mut config = AgentConfig::new(
                    target.provider,
                    target.model.clone(),
                    node.id.clone(),
                    input.work_dir,
                );
                config.max_turns = node.llm.max_turns;
                config.max_tokens = target.limits.max_tokens(node.llm.max_tokens());
                config.context_window = target.limits.context_window;
                config.reasoning_effort = Some(super::reply::reasoning_effort(node));
                config.prompt_cache = services.prompt_cache(&node.id);
                config.project_memory = node.llm.project_memory;
                config.write_scope = node.llm.write_scope().to_vec();
                config.file_tracking = services.file_tracking();
                config.tool_set = tool_set(node.llm.tools());
                config.skills = services.extensions.skills(input);
                let mut extra = services.extensions.mcp_tools(input, &env).await?;
                extra.extend(services.extensions.web_tools(node));
                config.env = env;
                if target.provider == Provider::Simulated {
                    config.context_window =
                        services.llm.simulated().context_window().map(u64::from);
                }
                // Retries and failover (SPEC 9.2, 9.4) under the agent loop.
                let client: Arc<dyn fabro_llm::LlmClient> = Arc::new(target.budgeted_client(
                    Arc::clone(&services.emitter),
                    &services.budget,
                    &node.id,
                ));
                let session = AgentSession::with_extra_tools(config, client, sink, extra)
                    .map_err(|error| agent_error(&error))?;
                started("api");
                let live = Arc::new(tokio::sync::Mutex::new(LiveSession { session, node_id }));
                if let Some(key) = thread {
                    services.threads.set_session(key, Arc::clone(&live));
                }
                Ok(AgentConversation::Api(live))
            }
        }
    }

    /// Registers the stage with the run's steering queue (SPEC 20.1) until the returned
    /// guard is dropped; api and acp agents take its messages, a cli agent none.
    pub(super) async fn steer(&mut self, input: &StageInput<'_>) -> AgentStage {
        let backend = match self {
            AgentConversation::Api(_) => "api",
            AgentConversation::Cli { .. } => "cli",
            AgentConversation::Acp { .. } => "acp",
        };
        let stage = input
            .services
            .steering
            .begin(&input.node.id, backend, input.stage_dir);
        let emitter = Arc::clone(&input.services.emitter);
        let node_id = input.node.id.clone();
        let events = Arc::new(move |event: AgentEvent| {
            emitter.emit(Event::agent(&node_id, &event));
        });
        let steering = Steering::new(stage.inbox(), events);
        match self {
            AgentConversation::Api(live) => live.lock().await.session.set_steering(steering),
            AgentConversation::Acp { config, .. } => config.steering = steering,
            AgentConversation::Cli { .. } => {}
        }
        stage
    }

    /// The external backend this conversation runs, `Api` for fabro's own loop.
    pub(super) fn backend(&self) -> Option<Backend> {
        Some(match self {
            AgentConversation::Api(_) => Backend::Api,
            AgentConversation::Cli { .. } => Backend::Cli,
            AgentConversation::Acp { .. } => Backend::Acp,
        })
    }

    /// Sends `text` and runs the agent until it answers.
    pub(super) async fn send(&mut self, input: &StageInput<'_>, text: &str) -> Reply {
        let cancel = &input.services.cancel;
        match self {
            AgentConversation::Api(live) => {
                let mut guard = live.lock().await;
                reply_of(guard.session.run(text, cancel).await)
            }
            AgentConversation::Cli { config, original } => {
                original.clear();
                original.push_str(text);
                let result = run_cli_agent(config, text, cancel).await;
                external_reply(input, config.model.as_deref(), result)
            }
            AgentConversation::Acp { config, original } => {
                original.clear();
                original.push_str(text);
                let result = run_acp_agent(config, text, cancel).await;
                external_reply(input, None, result)
            }
        }
    }

    /// A repair turn (SPEC 7.4): the live session gets the message; an external agent
    /// is started again with the original prompt, the rejected response and the message.
    pub(super) async fn repair(
        &mut self,
        input: &StageInput<'_>,
        rejected: &str,
        message: &str,
    ) -> Reply {
        let cancel = &input.services.cancel;
        match self {
            AgentConversation::Api(_) => self.send(input, message).await,
            AgentConversation::Cli { config, original } => {
                let prompt = repair_prompt(original, rejected, message);
                let result = run_cli_agent(config, &prompt, cancel).await;
                external_reply(input, config.model.as_deref(), result)
            }
            AgentConversation::Acp { config, original } => {
                let prompt = repair_prompt(original, rejected, message);
                let result = run_acp_agent(config, &prompt, cancel).await;
                external_reply(input, None, result)
            }
        }
    }
}

/// Emits `Agent.SessionStarted`. An acp agent picks its own model: the node's
/// attributes, if any, name it (decision 69), never fabro's pick for an api node.
fn session_started(
    input: &StageInput<'_>,
    target: &LlmTarget,
    thread: Option<&str>,
    backend: &str,
) {
    let (model, provider) = if backend == "acp" {
        let (model, provider) = acp_identity(input.node, None);
        (model.unwrap_or_default(), provider.unwrap_or_default())
    } else {
        (target.model.clone(), target.name.clone())
    };
    input.services.emitter.emit(Event::node(
        &input.node.id,
        AgentSessionStarted {
            backend: backend.to_owned(),
            model,
            provider,
            thread_id: thread.map(str::to_owned),
        },
    ));
}

/// The agent's tool set of a node's `tools` (SPEC 19.4).
fn tool_set(tools: fabro_language::model::ToolSet) -> fabro_agent::ToolSet {
    use fabro_language::model::ToolSet;
    match tools {
        ToolSet::ReadOnly => fabro_agent::ToolSet::ReadOnly,
        ToolSet::ReadWrite => fabro_agent::ToolSet::ReadWrite,
        ToolSet::Full => fabro_agent::ToolSet::Full,
    }
}

/// The backend a node's agent runs on with `target`, as [`AgentConversation::new`]
/// chooses it (for stages that fail before their conversation starts).
pub(super) fn external_backend(node: &fabro_language::Node, target: &LlmTarget) -> Option<Backend> {
    if node.handler != fabro_language::HandlerKind::Agent {
        return None;
    }
    Some(match node.llm.backend {
        Backend::Cli if target.provider != Provider::Simulated => Backend::Cli,
        Backend::Acp if !target.simulated_everywhere => Backend::Acp,
        Backend::Api | Backend::Cli | Backend::Acp => Backend::Api,
    })
}

/// The prompt of a new external-agent process for a repair turn (SPEC 5.2.2).
fn repair_prompt(original: &str, rejected: &str, message: &str) -> String {
    format!("{original}\n\nYour previous response:\n\n{rejected}\n\n{message}")
}

/// The environment of agent tools and processes (SPEC 13.5), isolated under
/// `agent_isolation` (SPEC 16); external CLIs get their own provider's key back
/// (gemini's under both of its names, SPEC 10.1), ACP agents every LLM key fabro holds.
fn process_env(input: &StageInput<'_>, provider: Provider) -> Result<ProcessEnv, Failure> {
    let mut env = crate::sandbox::stage_env(
        &input.services.sandbox_env,
        input.tmpdir,
        crate::sandbox::ProcessKind::Agent,
    );
    let variables: Vec<&str> = match input.node.llm.backend {
        Backend::Cli if provider != Provider::Simulated => {
            let extra: &[&str] = match provider {
                Provider::Gemini => &["GOOGLE_API_KEY"],
                Provider::Anthropic
                | Provider::OpenAi
                | Provider::OpenAiCompatible
                | Provider::Simulated => &[],
            };
            std::iter::once(credential_variable(provider))
                .chain(extra.iter().copied())
                .collect()
        }
        Backend::Acp => ACP_KEYS.to_vec(),
        Backend::Api | Backend::Cli => Vec::new(),
    };
    for variable in variables {
        // Credentials live in the process's secret store, not its environment.
        if let Some(value) = fabro_llm::redact::secrets().get(variable) {
            env.set(variable, value);
        }
    }
    Ok(env)
}

/// The LLM keys an ACP agent gets back (SPEC 13.5): fabro cannot know its provider.
const ACP_KEYS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENAI_COMPATIBLE_API_KEY",
    "KIMI_API_KEY",
    "ZAI_API_KEY",
    "MINIMAX_API_KEY",
    "INCEPTION_API_KEY",
    "OPENROUTER_API_KEY",
    "FIREWORKS_API_KEY",
    "LITELLM_API_KEY",
];

/// The reply of an external agent: usage only when the agent reported some (SPEC
/// 5.2.2), priced from the catalog when the agent gave no cost (SPEC 10.1.4), and the
/// model it reported. Its stderr is appended to the stage's `stderr.log`, redacted
/// (SPEC 5.2.3, 13.1); tool calls that all failed for a sandbox reason are a `Warning`.
fn external_reply(
    input: &StageInput<'_>,
    model: Option<&str>,
    result: Result<ExternalOutcome, AgentError>,
) -> Reply {
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) => {
            let failure = agent_error(&error);
            return Reply::failed(failure.reason, failure.class);
        }
    };
    if !outcome.stderr.is_empty() {
        let mut stderr = outcome.stderr.clone();
        fabro_llm::redact::redactor().redact_string(&mut stderr);
        let path = input.stage_dir.join("stderr.log");
        let written = fs_err::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, stderr.as_bytes()));
        if let Err(error) = written {
            input.services.emitter.emit(Event::node(
                &input.node.id,
                Warning::new("stage_log_unwritable", error.to_string()),
            ));
        }
    }
    // SPEC 5.2.3: text written before the final turn is kept in the events.
    for text in &outcome.earlier_turns {
        input.services.emitter.emit(Event::agent(
            &input.node.id,
            &AgentEvent::AssistantMessage {
                text: text.clone(),
                tool_call_count: 1,
                usage: fabro_llm::Usage::default(),
            },
        ));
    }
    if let Some(message) = &outcome.sandboxed_tools {
        input.services.emitter.emit(Event::node(
            &input.node.id,
            Warning::new("agent_tools_sandboxed", message.clone()),
        ));
    }
    let reported_model = outcome.model.clone();
    let usage = outcome.usage.map(|mut usage| {
        if usage.cost_usd.is_none() {
            let priced = reported_model.as_deref().or(model);
            usage.cost_usd = priced.and_then(|model| fabro_llm::catalog::cost_usd(model, &usage));
        }
        usage
    });
    let mut reply = reply_of(Ok(outcome.into_agent_outcome()));
    reply.usage = usage;
    reply.model = reported_model;
    reply
}

/// The model and provider an acp stage records (decision 69): the model the agent
/// reported, else the node's own attribute; the provider the node names, else the one
/// the recorded model implies; null when nothing says.
pub(super) fn acp_identity(
    node: &fabro_language::Node,
    reported: Option<&str>,
) -> (Option<String>, Option<String>) {
    let model = reported
        .map(str::to_owned)
        .or_else(|| node.llm.model().map(str::to_owned));
    let provider = match reported {
        Some(model) => crate::llm_target::infer_provider(model).map(|p| p.as_str().to_owned()),
        None => None,
    }
    .or_else(|| node.llm.provider().map(str::to_owned))
    .or_else(|| {
        model
            .as_deref()
            .and_then(crate::llm_target::infer_provider)
            .map(|provider| provider.as_str().to_owned())
    });
    (model, provider)
}

fn reply_of(result: Result<AgentOutcome, AgentError>) -> Reply {
    match result {
        Ok(outcome) => Reply {
            text: outcome.text,
            usage: Some(outcome.usage),
            model: None,
            files_touched: outcome.files_touched,
            last_touched: outcome.last_touched,
            failure: outcome.failure.map(|failure| Failure {
                reason: failure.reason,
                class: failure.class,
            }),
        },
        Err(error) => {
            let failure = agent_error(&error);
            Reply::failed(failure.reason, failure.class)
        }
    }
}

fn agent_error(error: &AgentError) -> Failure {
    let reason = match error {
        // SPEC 5.2.2 gives this message verbatim.
        AgentError::MissingProgram { .. } => error.to_string(),
        _ => crate::error_chain(error),
    };
    Failure {
        reason,
        class: error.class(),
    }
}
