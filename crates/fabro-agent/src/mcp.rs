//! Model Context Protocol servers (SPEC 19.1) through the official Rust SDK (`rmcp`):
//! [`McpServerConfig`] describes one server (stdio or Streamable HTTP), [`McpPool`]
//! holds the run's connections (each server is started or connected once, on the first
//! stage that uses it, and closed when the run ends), and each connection's tools are
//! offered to the model as `mcp__{server}__{tool}` [`Tool`](crate::Tool)s.
//!
//! A stdio server is a child of this process started through [`ProcessEnv`], so
//! `agent_isolation` confines it like the agent's own shell (SPEC 16), in a process group
//! of its own that is killed when the connection closes or is dropped.

mod connection;
mod tool;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::environment::ProcessEnv;

pub use connection::McpConnection;
pub use tool::{mcp_tool_name, McpTool};

/// Default of `startup_timeout_secs`: the handshake and `tools/list`.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `tool_timeout_secs`: one `tools/call`.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// One configured server (`[mcp_servers.NAME]`).
#[derive(Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The server's name (the `NAME` of its table).
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Limit for the `initialize` handshake and `tools/list`.
    pub startup_timeout: Duration,
    /// Limit for one tool call; a call that takes longer is a tool error.
    pub tool_timeout: Duration,
    /// Whether a stage that uses the server fails when it is unavailable.
    pub required: bool,
}

impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("McpServerConfig")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("startup_timeout", &self.startup_timeout)
            .field("tool_timeout", &self.tool_timeout)
            .field("required", &self.required)
            .finish()
    }
}

/// How a server is reached.
#[derive(Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on its standard input and output.
    Stdio {
        /// Program and arguments.
        command: Vec<String>,
        /// Variables added to the stage's filtered environment.
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
        /// Headers of every request, `${VAR}` already replaced; their values are never
        /// printed (`Debug` shows the names only).
        headers: Vec<(String, String)>,
    },
}

impl std::fmt::Debug for McpTransport {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTransport::Stdio { command, env } => formatter
                .debug_struct("Stdio")
                .field("command", command)
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
            McpTransport::Http { url, headers } => formatter
                .debug_struct("Http")
                .field("url", url)
                .field(
                    "headers",
                    &headers.iter().map(|(name, _)| name).collect::<Vec<_>>(),
                )
                .finish(),
        }
    }
}

/// A server that could not be started or did not answer its handshake in time (SPEC
/// 19.1: a `mcp_unavailable` warning, or a failed stage for a `required` server).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MCP server '{server}' is unavailable: {reason}")]
pub struct McpUnavailable {
    /// The server's name.
    pub server: String,
    /// Why (redacted).
    pub reason: String,
}

type Slot = Arc<tokio::sync::OnceCell<Result<Arc<McpConnection>, McpUnavailable>>>;

/// The MCP connections of one run, shared by its stages and parallel branches. A server
/// is connected on the first [`McpPool::connect`] that names it; later calls (and
/// concurrent ones) get the same connection, or the same failure.
#[derive(Default)]
pub struct McpPool {
    slots: std::sync::Mutex<BTreeMap<String, Slot>>,
}

impl std::fmt::Debug for McpPool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        formatter
            .debug_struct("McpPool")
            .field("servers", &slots.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl McpPool {
    /// The connection to `config`'s server, made now if this is the first stage that
    /// uses it: a stdio server is started with `env` in `cwd`.
    pub async fn connect(
        &self,
        config: &McpServerConfig,
        env: &ProcessEnv,
        cwd: &Path,
    ) -> Result<Arc<McpConnection>, McpUnavailable> {
        let slot = {
            let mut slots = self
                .slots
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(slots.entry(config.name.clone()).or_default())
        };
        slot.get_or_init(|| async {
            McpConnection::open(config, env, cwd)
                .await
                .map(Arc::new)
                .map_err(|reason| {
                    let mut reason = reason;
                    fabro_llm::redact::redactor().redact_string(&mut reason);
                    McpUnavailable {
                        server: config.name.clone(),
                        reason,
                    }
                })
        })
        .await
        .clone()
    }

    /// Closes every connection (the run ended): stdio servers get their input closed,
    /// then their process group is terminated.
    pub async fn close(&self) {
        let slots: Vec<Slot> = {
            let mut slots = self
                .slots
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            std::mem::take(&mut *slots).into_values().collect()
        };
        // Concurrently: a run's end (a cancellation included) waits for the slowest
        // server only.
        let closing = slots.iter().filter_map(|slot| match slot.get() {
            Some(Ok(connection)) => Some(connection.close()),
            Some(Err(_)) | None => None,
        });
        futures_util::future::join_all(closing).await;
    }
}

/// The `mcpServers` of `session/new` in ACP's form: stdio servers with `command`,
/// `args` and `env` as name/value pairs, HTTP ones with `type: "http"`, `url` and
/// `headers` as name/value pairs.
pub(crate) fn acp_servers(servers: &[McpServerConfig]) -> serde_json::Value {
    let pairs = |entries: &mut dyn Iterator<Item = (&String, &String)>| -> Vec<serde_json::Value> {
        entries
            .map(|(name, value)| serde_json::json!({"name": name, "value": value}))
            .collect()
    };
    serde_json::Value::Array(
        servers
            .iter()
            .map(|server| match &server.transport {
                McpTransport::Stdio { command, env } => serde_json::json!({
                    "name": server.name,
                    "command": command.first().cloned().unwrap_or_default(),
                    "args": command.iter().skip(1).collect::<Vec<_>>(),
                    "env": pairs(&mut env.iter()),
                }),
                McpTransport::Http { url, headers } => serde_json::json!({
                    "type": "http",
                    "name": server.name,
                    "url": url,
                    "headers": pairs(&mut headers.iter().map(|(name, value)| (name, value))),
                }),
            })
            .collect(),
    )
}

/// The `--mcp-config` value of Claude Code's documented flag (SPEC 19.1: `cli` agents
/// get the servers where the program has a flag for them): `{"mcpServers": {NAME:
/// {...}}}` with stdio servers as `command`, `args`, `env` and HTTP ones as `type:
/// "http"`, `url`, `headers`.
pub fn claude_mcp_config(servers: &[McpServerConfig]) -> String {
    let entries: serde_json::Map<String, serde_json::Value> = servers
        .iter()
        .map(|server| {
            let entry = match &server.transport {
                McpTransport::Stdio { command, env } => serde_json::json!({
                    "type": "stdio",
                    "command": command.first().cloned().unwrap_or_default(),
                    "args": command.iter().skip(1).collect::<Vec<_>>(),
                    "env": env,
                }),
                McpTransport::Http { url, headers } => serde_json::json!({
                    "type": "http",
                    "url": url,
                    "headers": headers.iter().cloned().collect::<BTreeMap<String, String>>(),
                }),
            };
            (server.name.clone(), entry)
        })
        .collect();
    serde_json::json!({ "mcpServers": entries }).to_string()
}

/// Codex's `-c key=value` overrides of its documented `[mcp_servers.NAME]`
/// configuration (values in TOML): `command`, `args` and `env` of stdio servers, `url`
/// and `http_headers` of HTTP ones.
pub fn codex_mcp_overrides(servers: &[McpServerConfig]) -> Vec<String> {
    // A JSON string is a TOML basic string; a JSON array of strings a TOML array.
    let text = |value: &str| serde_json::Value::from(value).to_string();
    let table = |entries: &mut dyn Iterator<Item = (&String, &String)>| -> String {
        let pairs: Vec<String> = entries
            .map(|(key, value)| format!("{} = {}", text(key), text(value)))
            .collect();
        format!("{{{}}}", pairs.join(", "))
    };
    let mut overrides = Vec::new();
    for server in servers {
        // Codex splits the dotted path at every `.` and keeps quotes as part of a key,
        // so the name goes bare, characters other than letters, digits, `-` and `_`
        // replaced.
        let name: String = server
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let key = format!("mcp_servers.{name}");
        match &server.transport {
            McpTransport::Stdio { command, env } => {
                let program = command.first().map_or("", String::as_str);
                overrides.push(format!("{key}.command={}", text(program)));
                let args: Vec<&String> = command.iter().skip(1).collect();
                overrides.push(format!("{key}.args={}", serde_json::json!(args)));
                if !env.is_empty() {
                    overrides.push(format!("{key}.env={}", table(&mut env.iter())));
                }
            }
            McpTransport::Http { url, headers } => {
                overrides.push(format!("{key}.url={}", text(url)));
                if !headers.is_empty() {
                    overrides.push(format!(
                        "{key}.http_headers={}",
                        table(&mut headers.iter().map(|(name, value)| (name, value)))
                    ));
                }
            }
        }
    }
    overrides
        .into_iter()
        .flat_map(|value| ["-c".to_owned(), value])
        .collect()
}

#[cfg(test)]
mod tests;
