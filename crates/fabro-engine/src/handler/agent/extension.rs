//! The agent extensions of a run (SPEC 19): its MCP connections (one per server for the
//! whole run, closed when it ends), the skills of its stages and the web tools' settings.
//! A server that cannot be used is a `Warning {code: "mcp_unavailable", server,
//! reason}` and the stage runs without it, unless the server is `required`; a malformed
//! skill is a `Warning {code: "skill_invalid", path}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fabro_agent::mcp::{
    McpPool, McpServerConfig, McpTransport, McpUnavailable, DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_TOOL_TIMEOUT,
};
use fabro_agent::{ProcessEnv, Skill, Tool};
use fabro_language::model::ToolSet;

use super::super::StageInput;
use crate::config::{
    expand_secret_variables, variable_value, McpServerKind, McpServerSettings, RunConfig,
};
use crate::event::kind::Warning;
use crate::event::Event;
use crate::failure::FailureClass;
use crate::outcome::Failure;

/// What a run's agent stages share of SPEC 19.
#[derive(Debug, Default)]
pub(crate) struct AgentExtensions {
    pool: McpPool,
    servers: BTreeMap<String, McpServerSettings>,
    /// `[agent] web`.
    web: bool,
    /// `[sandbox] network`: false keeps the web tools away.
    network: bool,
    /// `{root}`, holding `skills/`.
    fabro_home: PathBuf,
}

impl AgentExtensions {
    /// The extensions `config` sets up for a run storing under `fabro_home`.
    pub(crate) fn new(config: &RunConfig, fabro_home: &Path) -> AgentExtensions {
        AgentExtensions {
            pool: McpPool::default(),
            servers: config.mcp_servers.clone(),
            web: config.agent.web.unwrap_or(false),
            network: config.sandbox.network.unwrap_or(true),
            fabro_home: fabro_home.to_path_buf(),
        }
    }

    /// Closes the run's MCP connections (the run ended).
    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// The web tools of the node's agent (SPEC 19.3): with `web` on the node, else
    /// `[agent] web`, and never with `[sandbox] network = false` or a smaller tool set.
    /// `web_search` needs `BRAVE_API_KEY` (and uses `BRAVE_BASE_URL` when set).
    pub(crate) fn web_tools(&self, node: &fabro_language::Node) -> Vec<Arc<dyn Tool>> {
        let enabled =
            self.network && node.llm.tools() == ToolSet::Full && node.llm.web().unwrap_or(self.web);
        if !enabled {
            return Vec::new();
        }
        let mut tools: Vec<Arc<dyn Tool>> = vec![Arc::new(fabro_agent::web::WebFetch::default())];
        if let Some(key) = variable_value("BRAVE_API_KEY") {
            let base = variable_value("BRAVE_BASE_URL")
                .unwrap_or_else(|| fabro_agent::web::BRAVE_BASE_URL.to_owned());
            tools.push(Arc::new(fabro_agent::web::WebSearch::brave(base, key)));
        }
        tools
    }

    /// The MCP tools of an `api` agent stage: every server the node sees is connected
    /// (once per run) with `env` in the stage's working directory. An unavailable
    /// server is a warning, or the stage's `deterministic` failure when `required`.
    pub(crate) async fn mcp_tools(
        &self,
        input: &StageInput<'_>,
        env: &ProcessEnv,
    ) -> Result<Vec<Arc<dyn Tool>>, Failure> {
        let mut tools = Vec::new();
        if input.node.llm.tools() != ToolSet::Full {
            return Ok(tools);
        }
        for (settings, config) in self.node_servers(input.node) {
            let connected = match config {
                // A cancellation does not wait for a handshake (dropping it kills a
                // stdio server's process group).
                Ok(config) => tokio::select! {
                    biased;
                    () = input.services.cancel.cancelled() => {
                        return Err(Failure {
                            reason: "canceled".to_owned(),
                            class: FailureClass::Canceled,
                        })
                    }
                    connected = self.pool.connect(&config, env, input.work_dir) => connected,
                },
                Err(unavailable) => Err(unavailable),
            };
            match connected {
                Ok(connection) => tools.extend(connection.tools()),
                Err(unavailable) => unavailable_server(input, settings, &unavailable)?,
            }
        }
        Ok(tools)
    }

    /// The servers an external agent receives: an `acp` agent in `session/new`, Claude
    /// Code through `--mcp-config` (SPEC 19.1).
    pub(crate) fn external_servers(
        &self,
        input: &StageInput<'_>,
    ) -> Result<Vec<McpServerConfig>, Failure> {
        let mut servers = Vec::new();
        for (settings, config) in self.node_servers(input.node) {
            match config {
                Ok(config) => servers.push(config),
                Err(unavailable) => unavailable_server(input, settings, &unavailable)?,
            }
        }
        Ok(servers)
    }

    /// The skills listed to the node's agent (SPEC 19.2): found under `{root}/skills` and
    /// the repository's `.fabro/skills`, limited by the node's `skills`; malformed ones
    /// are warnings.
    pub(crate) fn skills(&self, input: &StageInput<'_>) -> Vec<Skill> {
        let wanted = input.node.llm.skills();
        if wanted.is_some_and(<[String]>::is_empty) {
            return Vec::new();
        }
        let dirs = fabro_agent::skill_dirs(&self.fabro_home, input.work_dir);
        let (skills, invalid) = fabro_agent::discover_skills(&dirs);
        for skill in invalid {
            let path = skill.path.display().to_string();
            let mut warning = Warning::new(
                "skill_invalid",
                format!("skill {path} skipped: {}", skill.reason),
            );
            warning.path = Some(path);
            input
                .services
                .emitter
                .emit(Event::node(&input.node.id, warning));
        }
        skills
            .into_iter()
            .filter(|skill| wanted.is_none_or(|names| names.contains(&skill.name)))
            .collect()
    }

    /// The configured servers the node sees, as agent configurations (header variables
    /// read now) or the reason they cannot be used.
    fn node_servers<'a>(
        &'a self,
        node: &fabro_language::Node,
    ) -> Vec<(
        &'a McpServerSettings,
        Result<McpServerConfig, McpUnavailable>,
    )> {
        let wanted = node.llm.mcp_servers();
        self.servers
            .iter()
            .filter(|(name, _)| wanted.is_none_or(|names| names.contains(name)))
            .map(|(name, settings)| (settings, server_config(name, settings)))
            .collect()
    }
}

/// The agent's view of one `[mcp_servers.NAME]`.
fn server_config(
    name: &str,
    settings: &McpServerSettings,
) -> Result<McpServerConfig, McpUnavailable> {
    let transport = match settings.kind {
        McpServerKind::Stdio => McpTransport::Stdio {
            command: settings.command.clone(),
            env: settings.env.clone(),
        },
        McpServerKind::Http => {
            let mut headers = Vec::new();
            for (header, value) in &settings.headers {
                let value = expand_secret_variables(value, &variable_value).map_err(|missing| {
                    McpUnavailable {
                        server: name.to_owned(),
                        reason: format!(
                            "header {header} needs the unset variable {}",
                            missing.join(", ")
                        ),
                    }
                })?;
                headers.push((header.clone(), value));
            }
            McpTransport::Http {
                url: settings.url.clone().unwrap_or_default(),
                headers,
            }
        }
    };
    Ok(McpServerConfig {
        name: name.to_owned(),
        transport,
        startup_timeout: settings
            .startup_timeout_secs
            .map_or(DEFAULT_STARTUP_TIMEOUT, Duration::from_secs),
        tool_timeout: settings
            .tool_timeout_secs
            .map_or(DEFAULT_TOOL_TIMEOUT, Duration::from_secs),
        required: settings.required.unwrap_or(false),
    })
}

/// `mcp_unavailable`, and the stage's failure when the server is required.
fn unavailable_server(
    input: &StageInput<'_>,
    settings: &McpServerSettings,
    unavailable: &McpUnavailable,
) -> Result<(), Failure> {
    let mut warning = Warning::new("mcp_unavailable", unavailable.to_string());
    warning.server = Some(unavailable.server.clone());
    warning.reason = Some(unavailable.reason.clone());
    input
        .services
        .emitter
        .emit(Event::node(&input.node.id, warning));
    if settings.required.unwrap_or(false) {
        return Err(Failure {
            reason: unavailable.to_string(),
            class: FailureClass::Deterministic,
        });
    }
    Ok(())
}

/// The arguments that give an external CLI agent of `provider` the run's MCP servers.
pub(super) fn cli_mcp_args(
    provider: fabro_llm::Provider,
    input: &StageInput<'_>,
) -> Result<Vec<String>, Failure> {
    Ok(mcp_flags(provider, &external_servers_for(provider, input)?))
}

/// The MCP servers an external CLI agent of `provider` is given (SPEC 19.1): Claude Code
/// (`--mcp-config`) and codex (`-c` overrides) have documented flags for them; gemini
/// reads its settings file only.
fn external_servers_for(
    provider: fabro_llm::Provider,
    input: &StageInput<'_>,
) -> Result<Vec<McpServerConfig>, Failure> {
    use fabro_llm::Provider;
    match provider {
        Provider::Anthropic | Provider::OpenAi => input.services.extensions.external_servers(input),
        Provider::Gemini | Provider::OpenAiCompatible | Provider::Simulated => Ok(Vec::new()),
    }
}

/// The command-line flags that hand `servers` to the CLI agent of `provider`.
fn mcp_flags(provider: fabro_llm::Provider, servers: &[McpServerConfig]) -> Vec<String> {
    use fabro_llm::Provider;
    if servers.is_empty() {
        return Vec::new();
    }
    match provider {
        Provider::Anthropic => vec![
            "--mcp-config".to_owned(),
            fabro_agent::mcp::claude_mcp_config(servers),
        ],
        Provider::OpenAi => fabro_agent::mcp::codex_mcp_overrides(servers),
        Provider::Gemini | Provider::OpenAiCompatible | Provider::Simulated => Vec::new(),
    }
}
