//! One live MCP connection: the stdio child or the HTTP session, the `initialize`
//! handshake and `tools/list` under `startup_timeout`, tool calls under
//! `tool_timeout`, and closing.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool as RemoteTool};
use rmcp::service::{Peer, RunningService};
use rmcp::RoleClient;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::Child;

use super::{McpServerConfig, McpTransport};
use crate::environment::ProcessEnv;
use crate::process::ProcessGroup;
use crate::tool::Tool;

/// How much of a stdio server's standard error is kept for error messages.
const STDERR_TAIL_BYTES: usize = 4096;

/// A connected server with the tools it listed.
pub struct McpConnection {
    server: String,
    peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, ()>>>,
    tools: Vec<RemoteTool>,
    tool_timeout: Duration,
    child: Mutex<Option<StdioChild>>,
}

impl std::fmt::Debug for McpConnection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("McpConnection")
            .field("server", &self.server)
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

/// A stdio server's process: killed with its group when dropped.
struct StdioChild {
    child: Child,
    group: ProcessGroup,
}

impl McpConnection {
    /// Starts or connects to the server and lists its tools within the startup timeout;
    /// the error is the reason for `mcp_unavailable`.
    pub(super) async fn open(
        config: &McpServerConfig,
        env: &ProcessEnv,
        cwd: &Path,
    ) -> Result<McpConnection, String> {
        match &config.transport {
            McpTransport::Stdio {
                command,
                env: extra,
            } => {
                let mut env = env.clone();
                for (name, value) in extra {
                    env.set(name, value);
                }
                open_stdio(config, command, &env, cwd).await
            }
            McpTransport::Http { url, headers } => open_http(config, url, headers).await,
        }
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Its tools as fabro tools named `mcp__{server}__{tool}`.
    pub fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        self.tools
            .iter()
            .map(|remote| Arc::new(super::McpTool::new(Arc::clone(self), remote)) as Arc<dyn Tool>)
            .collect()
    }

    /// Calls `tool` with `arguments`; a timeout or a protocol error is the error text.
    pub(super) async fn call(
        &self,
        tool: &str,
        arguments: Value,
    ) -> Result<CallToolResult, String> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        match tokio::time::timeout(self.tool_timeout, self.peer.call_tool(params)).await {
            Err(_) => Err(format!(
                "MCP tool call timed out after {}",
                seconds(self.tool_timeout)
            )),
            Ok(Err(error)) => Err(error.to_string()),
            Ok(Ok(result)) => Ok(result),
        }
    }

    /// Ends the session: the service stops (a stdio server sees its input close; at most
    /// half a second), then the server's process group is terminated (SIGTERM, SIGKILL
    /// after 2 s).
    pub async fn close(&self) {
        if let Some(mut service) = self.service.lock().await.take() {
            let _ = service.close_with_timeout(Duration::from_millis(500)).await;
        }
        let child = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut stdio) = child {
            stdio.group.terminate(&mut stdio.child).await;
        }
    }
}

/// `n s` for a timeout.
fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}

async fn open_stdio(
    config: &McpServerConfig,
    command: &[String],
    env: &ProcessEnv,
    cwd: &Path,
) -> Result<McpConnection, String> {
    let Some(program) = command.first() else {
        return Err("empty command".to_owned());
    };
    let mut process = env
        .command(program, cwd)
        .map_err(|error| error.to_string())?;
    process
        .args(command[1..].iter().map(OsString::from))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = crate::isolation::spawn_fenced(&mut process)
        .map_err(|error| format!("cannot start {program}: {error}"))?;
    let group = ProcessGroup::of(&child);
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("server stdio unavailable".to_owned());
    };
    let stderr = StderrTail::start(child.stderr.take());
    let handshake = async {
        let service = rmcp::serve_client((), (stdout, stdin))
            .await
            .map_err(|error| error.to_string())?;
        let tools = service
            .list_all_tools()
            .await
            .map_err(|error| error.to_string())?;
        Ok::<_, String>((service, tools))
    };
    let mut stdio = StdioChild { child, group };
    let opened = tokio::time::timeout(config.startup_timeout, handshake).await;
    let (service, tools) = match opened {
        Ok(Ok(opened)) => opened,
        failed => {
            stdio.group.terminate(&mut stdio.child).await;
            let reason = match failed {
                Err(_) => format!(
                    "no answer to the handshake within {}",
                    seconds(config.startup_timeout)
                ),
                Ok(Err(error)) => error,
                Ok(Ok(_)) => String::new(),
            };
            return Err(with_stderr(reason, &stderr.finish().await));
        }
    };
    Ok(McpConnection {
        server: config.name.clone(),
        peer: service.peer().clone(),
        service: tokio::sync::Mutex::new(Some(service)),
        tools,
        tool_timeout: config.tool_timeout,
        child: Mutex::new(Some(stdio)),
    })
}

async fn open_http(
    config: &McpServerConfig,
    url: &str,
    headers: &[(String, String)],
) -> Result<McpConnection, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp_reqwest::header::{HeaderName, HeaderValue};

    // reqwest 0.13 is built without a crypto provider of its own: fabro's TLS is ring
    // (as for the LLM clients). Installing it twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = rmcp_reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(config.startup_timeout)
        .redirect(rmcp_reqwest::redirect::Policy::none())
        .build()
        .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name '{name}'"))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| format!("invalid value of header '{name}'"))?;
        value.set_sensitive(true);
        custom.insert(name, value);
    }
    let transport = StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom),
    );
    let handshake = async {
        let service = rmcp::serve_client((), transport)
            .await
            .map_err(|error| error.to_string())?;
        let tools = service
            .list_all_tools()
            .await
            .map_err(|error| error.to_string())?;
        Ok::<_, String>((service, tools))
    };
    let (service, tools) = tokio::time::timeout(config.startup_timeout, handshake)
        .await
        .map_err(|_| {
            format!(
                "no answer to the handshake within {}",
                seconds(config.startup_timeout)
            )
        })??;
    Ok(McpConnection {
        server: config.name.clone(),
        peer: service.peer().clone(),
        service: tokio::sync::Mutex::new(Some(service)),
        tools,
        tool_timeout: config.tool_timeout,
        child: Mutex::new(None),
    })
}

/// `reason`, then the server's last standard-error lines when it wrote any.
fn with_stderr(reason: String, stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        reason
    } else {
        format!("{reason}; stderr: {stderr}")
    }
}

/// The last [`STDERR_TAIL_BYTES`] of a child's standard error, read in the background
/// for as long as the child keeps it open.
struct StderrTail {
    buffer: Arc<Mutex<Vec<u8>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl StderrTail {
    fn start(pipe: Option<tokio::process::ChildStderr>) -> StderrTail {
        let mut tail = StderrTail {
            buffer: Arc::new(Mutex::new(Vec::new())),
            task: None,
        };
        if let Some(mut pipe) = pipe {
            let buffer = Arc::clone(&tail.buffer);
            tail.task = Some(tokio::spawn(async move {
                let mut chunk = [0_u8; 4096];
                while let Ok(read) = pipe.read(&mut chunk).await {
                    if read == 0 {
                        break;
                    }
                    let mut buffer = buffer.lock().unwrap_or_else(PoisonError::into_inner);
                    buffer.extend_from_slice(&chunk[..read]);
                    let excess = buffer.len().saturating_sub(STDERR_TAIL_BYTES);
                    buffer.drain(..excess);
                }
            }));
        }
        tail
    }

    /// What was read once the pipe closed (the child is gone), or after half a second.
    async fn finish(mut self) -> String {
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_millis(500), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        let buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&buffer).into_owned()
    }
}
