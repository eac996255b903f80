//! The `acp` backend (SPEC 5.2.3): an Agent Client Protocol agent driven over its
//! stdio with JSON-RPC 2.0 (`initialize`, `session/new`, one `session/prompt`, and one
//! more per delivery of steering messages, SPEC 20.1).
//! The message chunks of the agent's final turn (after its last tool call) make the
//! response; permission requests are granted once (the write scope is checked
//! afterwards from git snapshots). The agent's stderr is kept; JSON-RPC errors name
//! their `data` and are classed with SPEC 9.1's rules.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

use super::{last_lines, timeout_reason, ExternalOutcome, ToolTally, STDERR_TAIL_LINES};
use crate::change_tracking::FileTracking;
use crate::environment::ProcessEnv;
use crate::failure::{AgentError, AgentFailure};
use crate::process::{Capture, ProcessGroup, KILL_GRACE};
use crate::scope::{scope_failure_reason, WorkTree};
use crate::snapshot::touched;
use crate::steering::Steering;
use fabro_llm::{FailureClass, Usage};

/// ACP protocol version fabro speaks.
const PROTOCOL_VERSION: u64 = 1;

/// How to run one ACP agent.
#[derive(Debug, Clone)]
pub struct AcpAgentConfig {
    /// Command line as argv (`acp_command` split by shell rules, or `[agent.acp] command`).
    pub command: Vec<String>,
    /// Working directory (cwd of the process and of `session/new`).
    pub working_dir: PathBuf,
    /// Environment (filtered, SPEC 13.5).
    pub env: ProcessEnv,
    /// Ends the run as `transient_infra` when exceeded.
    pub timeout: Option<Duration>,
    /// `write_scope` globs checked against the touched files.
    pub write_scope: Vec<String>,
    /// How long the agent may take to answer `session/cancel` before it is
    /// terminated (2 s, SPEC 5.2.3).
    pub cancel_grace: Duration,
    /// How the touched files are found (git snapshots, or a run's change feed).
    pub file_tracking: FileTracking,
    /// MCP servers passed in `session/new` (SPEC 19.1).
    pub mcp_servers: Vec<crate::mcp::McpServerConfig>,
    /// Steering messages, each delivery sent as a new prompt turn after the current
    /// one (SPEC 20.1).
    pub steering: Steering,
}

impl AcpAgentConfig {
    /// An agent run as `command` in `working_dir`. Under fabro's confinement fabro is
    /// the agent's sandbox (decision 68): it gets `IS_SANDBOX=1`, without which Claude
    /// Code (behind claude-code-acp) refuses to skip its prompts when run as root.
    pub fn new(
        command: Vec<String>,
        working_dir: impl Into<PathBuf>,
        mut env: ProcessEnv,
    ) -> AcpAgentConfig {
        if env.is_confined() {
            env.set("IS_SANDBOX", "1");
        }
        AcpAgentConfig {
            command,
            working_dir: working_dir.into(),
            env,
            timeout: None,
            write_scope: Vec::new(),
            cancel_grace: KILL_GRACE,
            file_tracking: FileTracking::default(),
            mcp_servers: Vec::new(),
            steering: Steering::default(),
        }
    }
}

/// Runs one ACP session with `prompt`. An agent that cannot be started is an
/// [`AgentError`]; once it runs, a JSON-RPC error or protocol breakage is the outcome's
/// failure, its reason ending with the last 20 lines of the agent's stderr.
/// Cancellation and timeout send `session/cancel` and terminate the process after 2 s.
pub async fn run_acp_agent(
    config: &AcpAgentConfig,
    prompt: &str,
    cancel: &CancellationToken,
) -> Result<ExternalOutcome, AgentError> {
    let program = config
        .command
        .first()
        .cloned()
        .ok_or_else(|| AgentError::Configuration {
            message: "empty acp command".to_owned(),
        })?;
    let tree = WorkTree::new(&config.working_dir, &config.write_scope)?;
    let before = config
        .file_tracking
        .snapshot(tree.root(), &config.env)
        .await;
    let mut child = spawn(config, &program, tree.root())?;
    let group = ProcessGroup::of(&child);
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(AgentError::Protocol {
            message: "agent stdio unavailable".to_owned(),
        });
    };
    let stderr = Capture::start(child.stderr.take());
    let mut connection = Connection {
        program,
        stdin: Some(stdin),
        lines: BufReader::new(stdout).lines(),
        next_id: 0,
        session_id: None,
        text: String::new(),
        earlier_turns: Vec::new(),
        model: None,
        usage: None,
        tools: ToolTally::default(),
    };
    let cwd = tree.root().to_string_lossy().into_owned();
    let mcp_servers = crate::mcp::acp_servers(&config.mcp_servers);
    let timeout = async {
        match config.timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    let ended = tokio::select! {
        result = connection.session(&cwd, prompt, &mcp_servers, &config.steering) => Some(result),
        () = timeout => None,
        () = cancel.cancelled() => None,
    };
    let failure = match ended {
        Some(Ok(stop_reason)) => {
            connection.stdin = None;
            if tokio::time::timeout(KILL_GRACE, child.wait())
                .await
                .is_err()
            {
                group.terminate(&mut child).await;
            }
            stop_failure(&stop_reason).map(Ok)
        }
        Some(Err(failure)) => {
            connection.stdin = None;
            group.terminate(&mut child).await;
            Some(Err(failure))
        }
        None => {
            connection.cancel(config.cancel_grace).await;
            group.terminate(&mut child).await;
            Some(Ok(if cancel.is_cancelled() {
                AgentFailure::canceled()
            } else {
                AgentFailure::new(FailureClass::TransientInfra, timeout_reason(config.timeout))
            }))
        }
    };
    drop(group);
    let stderr = stderr.finish().await;
    // Errors of the agent end with its stderr; stop reasons and timeouts do not.
    let failure =
        failure.map(|failure| failure.unwrap_or_else(|error| with_stderr(error, &stderr)));
    let after = config
        .file_tracking
        .snapshot(tree.root(), &config.env)
        .await;
    let (files_touched, last_touched) = touched(before.as_ref(), after.as_ref());
    let failure = failure.or_else(|| {
        let outside = tree.out_of_scope(&files_touched);
        (!outside.is_empty())
            .then(|| AgentFailure::new(FailureClass::Structural, scope_failure_reason(&outside)))
    });
    Ok(ExternalOutcome {
        text: connection.text,
        usage: connection.usage,
        model: connection.model,
        files_touched,
        last_touched,
        failure,
        sandboxed_tools: connection.tools.warning(),
        earlier_turns: connection.earlier_turns,
        stderr,
    })
}

/// Starts the agent in `cwd` with piped stdio, in a process group of its own.
fn spawn(
    config: &AcpAgentConfig,
    program: &str,
    cwd: &std::path::Path,
) -> Result<tokio::process::Child, AgentError> {
    let mut command =
        config
            .env
            .command(program, cwd)
            .map_err(|error| AgentError::Configuration {
                message: error.to_string(),
            })?;
    command
        .args(&config.command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    crate::isolation::spawn_fenced(&mut command).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => AgentError::MissingProgram {
            backend: "acp",
            program: program.to_owned(),
        },
        _ => AgentError::Spawn {
            program: program.to_owned(),
            source,
        },
    })
}

/// A failure of the running agent: `reason`, then the last 20 lines of its stderr.
fn with_stderr(mut failure: AgentFailure, stderr: &str) -> AgentFailure {
    let tail = last_lines(stderr, STDERR_TAIL_LINES);
    if !tail.trim().is_empty() {
        failure.reason.push('\n');
        failure.reason.push_str(&tail);
    }
    failure
}

/// The failure of a JSON-RPC error answering `method` (SPEC 5.2.3): its message and
/// `data` in the reason, classed with SPEC 9.1's rules: a typed status or error kind
/// in `data` first, then the text rules over message and data.
fn rpc_failure(method: &str, error: &Value) -> AgentFailure {
    let message = error["message"].as_str().unwrap_or("unknown error");
    let data = &error["data"];
    let data_text = match data {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let reason = if data_text.is_empty() {
        format!("{method} failed: {message}")
    } else {
        format!("{method} failed: {message}: {data_text}")
    };
    let class = typed_class(data)
        .unwrap_or_else(|| fabro_llm::classify_message(&format!("{message} {data_text}")));
    AgentFailure::new(class, reason)
}

/// The class a JSON-RPC error's `data` states by type: an HTTP status, or an error kind
/// such as codex-acp's `codex_error_info` (`server_overloaded`, `usage_limit_exceeded`).
fn typed_class(data: &Value) -> Option<FailureClass> {
    let status = [
        "status",
        "statusCode",
        "status_code",
        "httpStatus",
        "http_status_code",
    ]
    .iter()
    .find_map(|key| data[*key].as_u64());
    if let Some(status) = status {
        return Some(match status {
            408 | 429 | 500..=599 => FailureClass::TransientInfra,
            413 => FailureClass::BudgetExhausted,
            _ => FailureClass::Deterministic,
        });
    }
    let kind = ["codex_error_info", "type", "kind", "code"]
        .iter()
        .find_map(|key| data[*key].as_str())?
        .to_lowercase();
    if [
        "overloaded",
        "rate_limit",
        "too_many_requests",
        "internal_server_error",
        "server_error",
        "service_unavailable",
        "stream",
        "connection_failed",
    ]
    .iter()
    .any(|marker| kind.contains(marker))
    {
        Some(FailureClass::TransientInfra)
    } else if ["usage_limit", "quota", "context_window", "context_length"]
        .iter()
        .any(|marker| kind.contains(marker))
    {
        Some(FailureClass::BudgetExhausted)
    } else {
        None
    }
}

/// The failure a `stopReason` means.
fn stop_failure(stop_reason: &str) -> Option<AgentFailure> {
    match stop_reason {
        "max_tokens" | "max_turn_requests" => Some(AgentFailure::new(
            FailureClass::BudgetExhausted,
            format!("acp agent stopped: {stop_reason}"),
        )),
        "refusal" => Some(AgentFailure::new(
            FailureClass::Deterministic,
            "acp agent refused the prompt",
        )),
        "cancelled" => Some(AgentFailure::canceled()),
        _ => None,
    }
}

/// The client side of one JSON-RPC connection.
struct Connection {
    program: String,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    session_id: Option<String>,
    /// The message chunks since the agent's last tool call.
    text: String,
    /// The text of each earlier turn, ended by a tool call.
    earlier_turns: Vec<String>,
    /// The model the agent named in `session/new` (`models.currentModelId`).
    model: Option<String>,
    /// Usage the agent reported with its stop reason.
    usage: Option<Usage>,
    tools: ToolTally,
}

impl Connection {
    /// `initialize`, `session/new`, `session/prompt` (again for each delivery of
    /// steering messages after a turn that ended normally); returns the stop reason.
    async fn session(
        &mut self,
        cwd: &str,
        prompt: &str,
        mcp_servers: &Value,
        steering: &Steering,
    ) -> Result<String, AgentFailure> {
        self.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}
            }),
        )
        .await?;
        let session = self
            .request(
                "session/new",
                json!({"cwd": cwd, "mcpServers": mcp_servers}),
            )
            .await?;
        let session_id = session["sessionId"]
            .as_str()
            .ok_or_else(|| protocol_failure("session/new returned no sessionId"))?
            .to_owned();
        self.session_id = Some(session_id.clone());
        // Decision 69: the model the agent says it runs ("default" names none).
        self.model = session["models"]["currentModelId"]
            .as_str()
            .map(|id| id.split('/').next().unwrap_or(id).trim())
            .filter(|id| !id.is_empty() && *id != "default")
            .map(str::to_owned);
        let mut prompt = prompt.to_owned();
        loop {
            let result = self
                .request(
                    "session/prompt",
                    json!({"sessionId": session_id, "prompt": [{"type": "text", "text": prompt}]}),
                )
                .await?;
            if let Some(usage) = prompt_usage(&result["usage"]) {
                self.usage.get_or_insert_with(Usage::default).add(&usage);
            }
            let stop_reason = result["stopReason"]
                .as_str()
                .unwrap_or("end_turn")
                .to_owned();
            if stop_reason != "end_turn" {
                return Ok(stop_reason);
            }
            let Some(steered) = steering.deliver() else {
                return Ok(stop_reason);
            };
            // The response is the final turn's text: this turn's becomes an earlier one.
            let turn = std::mem::take(&mut self.text);
            if !turn.trim().is_empty() {
                self.earlier_turns.push(turn);
            }
            prompt = steered;
        }
    }

    /// Sends `session/cancel`, then keeps serving the agent (collecting its last
    /// message chunks) until it answers the pending prompt or `grace` passes.
    async fn cancel(&mut self, grace: Duration) {
        let Some(session_id) = self.session_id.clone() else {
            return;
        };
        let notification = json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}});
        if self.send(&notification).await.is_err() {
            return;
        }
        let pending = self.next_id;
        // Whatever ends the wait (answer, timeout, broken pipe), termination follows.
        let _ = tokio::time::timeout(grace, self.receive(pending, "session/prompt")).await;
    }

    /// Sends a request and serves the agent's notifications and requests until the
    /// matching response arrives.
    async fn request(&mut self, method: &str, params: Value) -> Result<Value, AgentFailure> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        self.receive(id, method).await
    }

    /// Serves the agent's notifications and requests until the response `id` arrives.
    async fn receive(&mut self, id: u64, method: &str) -> Result<Value, AgentFailure> {
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .map_err(|source| {
                    AgentFailure::new(
                        FailureClass::TransientInfra,
                        format!("i/o with {} failed: {source}", self.program),
                    )
                })?
                .ok_or_else(|| {
                    protocol_failure(&format!(
                        "agent closed its output while waiting for {method}"
                    ))
                })?;
            if line.trim().is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&line)
                .map_err(|error| protocol_failure(&format!("invalid JSON from agent: {error}")))?;
            if let Some(incoming) = message.get("method").and_then(Value::as_str) {
                let incoming = incoming.to_owned();
                self.serve(&incoming, &message).await?;
                continue;
            }
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(rpc_failure(method, error));
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// Handles one notification or request from the agent.
    async fn serve(&mut self, method: &str, message: &Value) -> Result<(), AgentFailure> {
        let params = &message["params"];
        match (method, message.get("id")) {
            ("session/update", None) => {
                self.update(&params["update"]);
                Ok(())
            }
            ("session/request_permission", Some(id)) => {
                // The narrowest option that allows the call (SPEC 5.2.3).
                let options = params["options"].as_array().cloned().unwrap_or_default();
                let chosen = ["allow_once", "allow_always"].iter().find_map(|kind| {
                    options
                        .iter()
                        .find(|option| option["kind"] == *kind)
                        .and_then(|option| option["optionId"].as_str())
                });
                let result = match chosen {
                    Some(option_id) => {
                        json!({"outcome": {"outcome": "selected", "optionId": option_id}})
                    }
                    None => json!({"outcome": {"outcome": "cancelled"}}),
                };
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                    .await
            }
            (_, Some(id)) => {
                self.send(&json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {"code": -32601, "message": format!("method not supported: {method}")}
                }))
                .await
            }
            (_, None) => Ok(()),
        }
    }

    /// One `session/update`: message chunks of the current turn (a tool call starts a
    /// new one, decision 67; mode and plan updates are never text) and tool results.
    fn update(&mut self, update: &Value) {
        match update["sessionUpdate"].as_str() {
            Some("agent_message_chunk") if update["content"]["type"] == "text" => {
                let text = update["content"]["text"].as_str().unwrap_or_default();
                // gemini announces mode changes as message text.
                if !text.starts_with("[MODE_UPDATE]") {
                    self.text.push_str(text);
                }
            }
            Some("tool_call" | "tool_call_update") => {
                let turn = std::mem::take(&mut self.text);
                if !turn.trim().is_empty() {
                    self.earlier_turns.push(turn);
                }
                match update["status"].as_str() {
                    Some("completed") => self.tools.record(None),
                    Some("failed") => {
                        let content = update["content"].as_array();
                        let text: Vec<&str> = content
                            .into_iter()
                            .flatten()
                            .filter_map(|item| item["content"]["text"].as_str())
                            .collect();
                        let text = text.join("\n");
                        self.tools.record(Some(&text));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    async fn send(&mut self, message: &Value) -> Result<(), AgentFailure> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| protocol_failure("agent input already closed"))?;
        let mut line = message.to_string();
        line.push('\n');
        let program = &self.program;
        let io = |source: std::io::Error| {
            if source.kind() == std::io::ErrorKind::BrokenPipe {
                protocol_failure("agent closed its input")
            } else {
                AgentFailure::new(
                    FailureClass::TransientInfra,
                    format!("i/o with {program} failed: {source}"),
                )
            }
        };
        stdin.write_all(line.as_bytes()).await.map_err(io)?;
        stdin.flush().await.map_err(io)
    }
}

/// A broken protocol: `deterministic`, like [`AgentError::Protocol`].
fn protocol_failure(message: &str) -> AgentFailure {
    let error = AgentError::Protocol {
        message: message.to_owned(),
    };
    AgentFailure::new(error.class(), error.to_string())
}

/// The `usage` of a `session/prompt` result, when the agent reports one.
fn prompt_usage(usage: &Value) -> Option<Usage> {
    let count = |key: &str| usage[key].as_u64().unwrap_or(0);
    let usage = Usage {
        input_tokens: count("inputTokens"),
        output_tokens: count("outputTokens"),
        cache_read_tokens: count("cachedReadTokens"),
        cache_write_tokens: count("cachedWriteTokens"),
        reasoning_tokens: count("thoughtTokens"),
        cost_usd: None,
    };
    (usage.input_tokens + usage.output_tokens > 0).then_some(usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::tests::repository;
    use std::sync::Arc;

    /// A fake ACP agent: answers ids 1–3 in order, streams two chunks, asks for a
    /// permission and checks that it was granted before writing a file.
    const FAKE_AGENT: &str = r#"
read -r init
case "$init" in *'"method":"initialize"'*) ;; *) echo "bad init: $init" >&2; exit 1;; esac
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{}}}'
read -r new
case "$new" in *'"method":"session/new"'*'"cwd"'*) ;; *) exit 1;; esac
echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-1"}}'
read -r prompt
case "$prompt" in *'please work'*) ;; *) exit 1;; esac
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hello, "}}}}'
echo '{"jsonrpc":"2.0","id":"perm-1","method":"session/request_permission","params":{"sessionId":"s-1","options":[{"optionId":"no","kind":"reject_once"},{"optionId":"yes","kind":"allow_once"}]}}'
read -r answer
case "$answer" in *'"optionId":"yes"'*) echo granted > acp.txt;; *) echo denied > acp.txt;; esac
echo '{"jsonrpc":"2.0","id":"fs-1","method":"fs/read_text_file","params":{}}'
read -r refused
case "$refused" in *'-32601'*) ;; *) exit 1;; esac
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"world"}}}}'
echo '{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}'
"#;

    fn agent(dir: &std::path::Path, body: &str, working_dir: &std::path::Path) -> AcpAgentConfig {
        let path = dir.join("agent.sh");
        fs_err::write(&path, body).unwrap();
        AcpAgentConfig::new(
            vec!["/bin/sh".to_owned(), path.to_string_lossy().into_owned()],
            working_dir,
            ProcessEnv::inherit(),
        )
    }

    #[tokio::test]
    async fn fake_agent_session() {
        let bin = tempfile::tempdir().unwrap();
        let repo = repository();
        let config = agent(bin.path(), FAKE_AGENT, repo.path());
        let outcome = run_acp_agent(&config, "please work", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.failure, None);
        assert_eq!(outcome.text, "Hello, world");
        assert_eq!(outcome.files_touched, ["acp.txt"]);
        assert_eq!(outcome.last_touched.as_deref(), Some("acp.txt"));
        assert_eq!(
            fs_err::read_to_string(repo.path().join("acp.txt")).unwrap(),
            "granted\n"
        );
    }

    /// SPEC 20.1: steering queued during a prompt turn is sent as the next prompt turn
    /// of the same session; the response is the text of that last turn.
    #[tokio::test]
    async fn steering_is_a_new_prompt_turn_after_the_current_one() {
        struct Once(std::sync::Mutex<Vec<crate::SteeringMessage>>);
        impl crate::SteeringInbox for Once {
            fn take(&self) -> Vec<crate::SteeringMessage> {
                std::mem::take(&mut *self.0.lock().unwrap())
            }
        }
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let body = r#"
read -r init
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}'
read -r new
echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-3"}}'
read -r prompt
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-3","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"first"}}}}'
echo '{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn","usage":{"inputTokens":5,"outputTokens":1}}}'
read -r steered
case "$steered" in *'[Steering from cli] also add docs'*'"sessionId":"s-3"'*) ;; *) echo "bad: $steered" >&2; exit 1;; esac
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-3","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"second"}}}}'
echo '{"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn","usage":{"inputTokens":7,"outputTokens":2}}}'
"#;
        let mut config = agent(bin.path(), body, dir.path());
        let inbox = Arc::new(Once(std::sync::Mutex::new(vec![crate::SteeringMessage {
            source: crate::SteeringSource::Cli,
            text: "also add docs".to_owned(),
        }])));
        let events = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&events);
        let sink = move |event: crate::AgentEvent| seen.lock().unwrap().push(event);
        config.steering = Steering::new(inbox, Arc::new(sink));
        let outcome = run_acp_agent(&config, "go", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.failure, None, "{}", outcome.stderr);
        assert_eq!(outcome.text, "second");
        assert_eq!(outcome.earlier_turns, ["first"]);
        let usage = outcome.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (12, 3));
        assert_eq!(
            *events.lock().unwrap(),
            [crate::AgentEvent::SteeringDelivered { count: 1 }]
        );
    }

    /// SPEC 19.1: `session/new` carries the configured MCP servers in ACP's form.
    #[tokio::test]
    async fn session_new_carries_the_mcp_servers() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let seen = bin.path().join("new.json");
        let body = format!(
            r#"
read -r init
echo '{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":1}}}}'
read -r new
printf '%s' "$new" > '{}'
echo '{{"jsonrpc":"2.0","id":2,"result":{{"sessionId":"s-2"}}}}'
read -r prompt
echo '{{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}'
"#,
            seen.display()
        );
        let mut config = agent(bin.path(), &body, dir.path());
        let server = |name: &str, transport| crate::mcp::McpServerConfig {
            name: name.to_owned(),
            transport,
            startup_timeout: Duration::from_secs(1),
            tool_timeout: Duration::from_secs(1),
            required: false,
        };
        config.mcp_servers = vec![
            server(
                "files",
                crate::mcp::McpTransport::Stdio {
                    command: vec!["mcp-server-filesystem".to_owned(), ".".to_owned()],
                    env: std::collections::BTreeMap::from([("LOG".to_owned(), "warn".to_owned())]),
                },
            ),
            server(
                "tracker",
                crate::mcp::McpTransport::Http {
                    url: "https://mcp.example.com/mcp".to_owned(),
                    headers: vec![("Authorization".to_owned(), "Bearer t".to_owned())],
                },
            ),
        ];
        let outcome = run_acp_agent(&config, "go", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.failure, None);
        let new: Value = serde_json::from_str(&fs_err::read_to_string(&seen).unwrap()).unwrap();
        assert_eq!(
            new["params"]["mcpServers"],
            json!([
                {"name": "files", "command": "mcp-server-filesystem", "args": ["."], "env": [{"name": "LOG", "value": "warn"}]},
                {"type": "http", "name": "tracker", "url": "https://mcp.example.com/mcp", "headers": [{"name": "Authorization", "value": "Bearer t"}]}
            ])
        );
    }

    #[tokio::test]
    async fn cancellation_sends_session_cancel_then_terminates() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let body = r#"
read -r init
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}'
read -r new
echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-9"}}'
read -r prompt
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-9","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"partial"}}}}'
touch ready
read -r cancel
printf '%s' "$cancel" > cancel-seen.txt
sleep 30
"#;
        let mut config = agent(bin.path(), body, dir.path());
        config.cancel_grace = Duration::from_millis(200);
        let cancel = CancellationToken::new();
        let watcher = {
            let cancel = cancel.clone();
            let ready = dir.path().join("ready");
            tokio::spawn(async move {
                // Cancel once the agent has streamed its chunk (the prompt is in flight).
                for _ in 0..1000 {
                    if ready.exists() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                cancel.cancel();
            })
        };
        let started = std::time::Instant::now();
        let outcome = run_acp_agent(&config, "x", &cancel).await.unwrap();
        watcher.await.unwrap();
        let seen = dir.path().join("cancel-seen.txt");
        assert_eq!(outcome.failure.unwrap().class, FailureClass::Canceled);
        assert_eq!(outcome.text, "partial");
        assert!(fs_err::read_to_string(seen)
            .unwrap()
            .contains("\"method\":\"session/cancel\""));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_timeout_sends_session_cancel_and_is_transient() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let body = r#"
read -r init
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}'
read -r new
echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-7"}}'
read -r prompt
read -r cancel
printf '%s' "$cancel" > cancel-seen.txt
echo '{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}'
"#;
        let mut config = agent(bin.path(), body, dir.path());
        config.timeout = Some(Duration::from_millis(300));
        let outcome = run_acp_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        let failure = outcome.failure.unwrap();
        assert_eq!(failure.class, FailureClass::TransientInfra);
        assert_eq!(failure.reason, "stage timed out after 300ms");
        assert!(fs_err::read_to_string(dir.path().join("cancel-seen.txt"))
            .unwrap()
            .contains("\"method\":\"session/cancel\""));
    }

    #[tokio::test]
    async fn errors_and_stop_reasons() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let body = r#"
read -r init
echo '{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"unsupported version"}}'
"#;
        let config = agent(bin.path(), body, dir.path());
        let failure = run_acp_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap()
            .failure
            .unwrap();
        assert_eq!(failure.reason, "initialize failed: unsupported version");
        assert_eq!(failure.class, FailureClass::Deterministic);
        let config = agent(bin.path(), "echo 'no config' >&2; exit 0\n", dir.path());
        let failure = run_acp_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap()
            .failure
            .unwrap();
        // The agent exits at once: fabro notices while writing or while reading; its
        // stderr ends the reason.
        assert!(failure.reason.contains("agent closed its"), "{failure:?}");
        assert!(failure.reason.ends_with("\nno config"), "{failure:?}");
        assert_eq!(
            stop_failure("max_turn_requests").unwrap().class,
            FailureClass::BudgetExhausted
        );
        assert_eq!(stop_failure("end_turn"), None);
    }

    #[tokio::test]
    async fn a_missing_agent_names_the_acp_backend() {
        let dir = tempfile::tempdir().unwrap();
        let config = AcpAgentConfig::new(
            vec!["fabro-no-such-acp-agent".to_owned(), "--acp".to_owned()],
            dir.path(),
            ProcessEnv::inherit(),
        );
        let error = run_acp_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "acp backend requires 'fabro-no-such-acp-agent' on PATH"
        );
        assert_eq!(error.class(), FailureClass::Deterministic);
    }
    /// The text-then-tool scenario (decision 67): a plan with a failing outcome before
    /// the tool call, `DONE` after it; a mode update chunk is no text. Permissions are
    /// granted once, not always.
    const PLAN_THEN_TOOL: &str = r#"
read -r init
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}'
read -r new
echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-2"}}'
read -r prompt
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-2","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Plan: write the file. {\"outcome\": \"fail\"}"}}}}'
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-2","update":{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Write out.txt","kind":"edit","status":"pending"}}}'
echo '{"jsonrpc":"2.0","id":"perm-1","method":"session/request_permission","params":{"sessionId":"s-2","toolCall":{"toolCallId":"c1"},"options":[{"optionId":"always","kind":"allow_always"},{"optionId":"once","kind":"allow_once"},{"optionId":"no","kind":"reject_once"}]}}'
read -r answer
case "$answer" in *'"optionId":"once"'*) echo written > out.txt;; *) echo "$answer" > wrong-answer.txt;; esac
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-2","update":{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed"}}}'
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-2","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"[MODE_UPDATE] autoEdit"}}}}'
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-2","update":{"sessionUpdate":"current_mode_update","currentModeId":"autoEdit"}}}'
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-2","update":{"sessionUpdate":"plan","entries":[]}}}'
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-2","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"DONE "}}}}'
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-2","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"{\"outcome\": \"success\"}"}}}}'
echo '{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}'
"#;

    #[tokio::test]
    async fn the_response_is_the_final_turn_and_permissions_are_granted_once() {
        let bin = tempfile::tempdir().unwrap();
        let repo = repository();
        let config = agent(bin.path(), PLAN_THEN_TOOL, repo.path());
        let outcome = run_acp_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.failure, None);
        assert_eq!(outcome.text, "DONE {\"outcome\": \"success\"}");
        assert_eq!(outcome.files_touched, ["out.txt"]);
        // The plan is kept for the stage's events (SPEC 5.2.3), not in the response.
        assert_eq!(
            outcome.earlier_turns,
            ["Plan: write the file. {\"outcome\": \"fail\"}"]
        );
    }

    #[tokio::test]
    async fn a_json_rpc_error_names_its_data_and_the_stderr_tail_and_is_classified() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let body = r#"
read -r init
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}'
read -r new
echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-3"}}'
read -r prompt
for i in $(seq 1 25); do echo "agent log $i" >&2; done
echo '{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Internal error","data":{"message":"We are currently experiencing high demand","codex_error_info":"server_overloaded"}}}'
"#;
        let config = agent(bin.path(), body, dir.path());
        let outcome = run_acp_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        let failure = outcome.failure.unwrap();
        assert_eq!(failure.class, FailureClass::TransientInfra);
        let tail: Vec<String> = (6..=25).map(|i| format!("agent log {i}")).collect();
        assert_eq!(
            failure.reason,
            format!(
                "session/prompt failed: Internal error: {{\"codex_error_info\":\"server_overloaded\",\"message\":\"We are currently experiencing high demand\"}}\n{}",
                tail.join("\n")
            )
        );
        // A rate limit in the message alone is transient too; an auth error is not.
        let body = r#"
read -r init
echo 'starting' >&2
echo '{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}}'
"#;
        let config = agent(bin.path(), body, dir.path());
        let outcome = run_acp_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        let failure = outcome.failure.unwrap();
        assert_eq!(failure.class, FailureClass::Deterministic);
        assert_eq!(
            failure.reason,
            "initialize failed: Authentication required\nstarting"
        );
    }

    #[tokio::test]
    async fn an_acp_timeout_reads_like_every_stage_timeout() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let body = r#"
read -r init
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}'
read -r new
echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-8"}}'
read -r prompt
read -r cancel
echo '{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}'
"#;
        let mut config = agent(bin.path(), body, dir.path());
        config.timeout = Some(Duration::from_millis(300));
        let outcome = run_acp_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            outcome.failure.unwrap().reason,
            "stage timed out after 300ms"
        );
    }

    /// Decision 68: fabro is the sandbox of the agents it confines, so an adapter that
    /// runs Claude Code (which refuses to skip its prompts as root otherwise) gets
    /// `IS_SANDBOX=1` when confined, and only then.
    #[test]
    fn a_confined_agent_is_told_it_runs_in_a_sandbox() {
        use crate::isolation::{IsolationMode, IsolationSettings, KernelSupport, ProcessKind};
        let tmp = tempfile::tempdir().unwrap();
        let empty = ProcessEnv::new(Vec::new(), &[], &std::collections::BTreeMap::new());
        let confined = empty
            .clone()
            .with_isolation(IsolationSettings::new(
                IsolationMode::Workspace,
                IsolationMode::None,
                KernelSupport::detect_only(&[]),
            ))
            .for_stage(
                ProcessKind::Agent,
                &crate::isolation::PrivateTmpDir::new(tmp.path().join("tmp")),
            );
        let config = AcpAgentConfig::new(vec!["agent".to_owned()], ".", confined);
        assert_eq!(
            config.env.get("IS_SANDBOX").map(|value| value.to_str()),
            Some(Some("1"))
        );
        let config = AcpAgentConfig::new(vec!["agent".to_owned()], ".", empty);
        assert_eq!(config.env.get("IS_SANDBOX"), None);
    }
}
