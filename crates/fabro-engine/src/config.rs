//! The run configuration (SPEC 12.3): one TOML schema shared by `{root}/settings.toml`,
//! `.fabro/project.toml` and run configs, parsed into a typed [`RunConfig`] and merged
//! layer by layer.
//!
//! Parsing is a pure function over text ([`parse`]); [`load`] finds and reads the layers
//! through a [`ConfigReader`]. Tables merge per key and arrays replace ([`RunConfig::over`]).

mod keys;

pub use keys::CostLimit;
use keys::{dirty_worktree, isolation_mode, sandbox_provider, RUN_KEYS};
pub(crate) use keys::{DirtyWorktree, DEFAULT_MAX_STAGES};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) use fabro_agent::isolation::IsolationMode;
use serde::{Deserialize, Serialize};
use toml::de::{DeTable, DeValue};

mod extensions;
mod hooks;
mod providers;
pub(crate) mod reference;
mod section;

pub(crate) use extensions::{
    expand_secret_variables, variable_value, McpServerKind, McpServerSettings, WebSearchConfig,
};
pub(crate) use hooks::{HookConfig, HookEvent, HookKind};

pub(crate) use providers::{preset_named, ModelConfig, ProviderConfig, PRESETS, WIRES};

use section::{Context, Section};

/// The only schema version this build reads.
pub(crate) const CONFIG_VERSION: i64 = 1;

/// One configuration layer, or several merged. Every key is optional so that a higher
/// layer overrides only what it sets; defaults are applied by the accessors of the
/// consumers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunConfig {
    /// `[workflow]`.
    pub workflow: WorkflowConfig,
    /// `[run]`.
    pub run: RunSection,
    /// `[llm]`.
    pub llm: LlmConfig,
    /// `[checkpoint]`.
    pub checkpoint: CheckpointConfig,
    /// `[git]`.
    pub git: GitConfig,
    /// `[sandbox]`.
    pub sandbox: SandboxConfig,
    /// `[artifacts]`.
    pub artifacts: ArtifactsConfig,
    /// `[agent]`.
    pub agent: AgentConfig,
    /// `[mcp_servers.NAME]`: Model Context Protocol servers (SPEC 19.1).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, McpServerSettings>,
    /// `[[hooks]]`: commands and HTTP requests run on run and stage events (SPEC 20.4),
    /// every layer's, lower layers first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookConfig>,
}

/// `[workflow]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkflowConfig {
    /// `graph` (top-level `graph`), resolved against the file's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<PathBuf>,
}

/// `[run]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSection {
    /// `goal` (top-level `goal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// `[run.vars]` (`[vars]`).
    pub vars: BTreeMap<String, String>,
    /// `dirty_worktree`: what a run does in a working tree with uncommitted changes
    /// (SPEC 17.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty_worktree: Option<DirtyWorktree>,
    /// `max_stages`: stages a run may start, all epochs and branches; 0 is unlimited
    /// (SPEC 17.1; default [`DEFAULT_MAX_STAGES`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_stages: Option<u64>,
    /// `max_tokens`: input + output tokens of every LLM call of the run (SPEC 17.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// `max_cost_usd`: `cost_usd` of every LLM call of the run (SPEC 17.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<CostLimit>,
    /// `max_duration`: wall time since the run or its resume started (SPEC 17.1), as
    /// written (`30m`, `2h`, `90s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<String>,
}

/// `[llm]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LlmConfig {
    /// `model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `provider`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// `base_url`, for openai_compatible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// `[llm.fallbacks]`: provider → failover chain.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub fallbacks: BTreeMap<String, Vec<String>>,
    /// `[llm.headers]`: extra headers for openai_compatible requests (gateways). Their
    /// values are recorded redacted, since gateways put credentials there.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "redacted_values"
    )]
    pub headers: BTreeMap<String, String>,
    /// `[llm.providers.NAME]`: providers configured by name (SPEC 10.7).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[llm.simulated] responses`, resolved against the file's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated_responses: Option<PathBuf>,
    /// `prompt_caching`: mark stable prompt prefixes for the providers' caches (SPEC
    /// 10.8); on unless set to false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_caching: Option<bool>,
}

/// `[checkpoint]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointConfig {
    /// `exclude_globs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude_globs: Option<Vec<String>>,
    /// `push`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<bool>,
    /// `remote`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
}

/// `[git]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GitConfig {
    /// `author_name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author_name: Option<String>,
    /// `author_email`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author_email: Option<String>,
}

/// `[sandbox]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxConfig {
    /// `provider`; only `local` is available in this release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<SandboxProvider>,
    /// `env`: extra environment for commands and tools.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `env_passthrough`: secret-looking variables allowed through (SPEC 13.5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_passthrough: Option<Vec<String>>,
    /// `[sandbox.docker] image` (future).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_image: Option<String>,
    /// `agent_isolation` (SPEC 16); `workspace` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_isolation: Option<IsolationMode>,
    /// `command_isolation` (SPEC 16); `none` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_isolation: Option<IsolationMode>,
    /// `network` (SPEC 16); true when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// `writable_paths`, added to the defaults (SPEC 16).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writable_paths: Option<Vec<String>>,
    /// `hidden_paths`, added to the defaults (SPEC 16).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden_paths: Option<Vec<String>>,
    /// `require_isolation` (SPEC 16); false when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_isolation: Option<bool>,
}

/// Where commands and tools run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxProvider {
    /// On this machine, in the run's working directory.
    Local,
}

/// `[artifacts]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArtifactsConfig {
    /// `include`: extra asset patterns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
}

/// `[agent]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    /// `[agent.acp] command`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acp_command: Option<Vec<String>>,
    /// `web`: offer the web tools (SPEC 19.3); false when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web: Option<bool>,
    /// `[agent.web_search]`.
    #[serde(skip_serializing_if = "is_default")]
    pub web_search: WebSearchConfig,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Why a configuration file was rejected. Every variant is a configuration error (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("invalid TOML in {}:{line}:{column}: {message}", .file.display())]
    Syntax {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A key or section the schema does not have.
    #[error("unknown key '{key}' in {}:{line}{}", .file.display(), suggestion_suffix(.suggestion.as_deref()))]
    UnknownKey {
        /// The dotted key.
        key: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// A known dotted key within edit distance 2.
        suggestion: Option<String>,
    },
    /// A key named like a credential.
    #[error("credentials are read from environment variables only ({key})")]
    Credential {
        /// The dotted key.
        key: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// `_version` other than 1.
    #[error("unsupported configuration version {found} in {}:{line}; this build reads {CONFIG_VERSION}", .file.display())]
    Version {
        /// The value found.
        found: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// `[sandbox] provider = "docker"`.
    #[error("the docker sandbox is not available in this release")]
    DockerSandbox {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// A `[run] dirty_worktree` other than `in_place` or `refuse`.
    #[error("unknown dirty_worktree '{value}' in {}:{line}; expected 'in_place' or 'refuse'", .file.display())]
    DirtyWorktree {
        /// The value found.
        value: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// A `[sandbox] provider` other than `local` or `docker`.
    #[error("unknown sandbox provider '{value}' in {}:{line}; expected 'local'", .file.display())]
    SandboxProvider {
        /// The value found.
        value: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// An `agent_isolation` or `command_isolation` other than `none` or `workspace`.
    #[error("unknown {key} '{value}' in {}:{line}; expected 'none' or 'workspace'", .file.display())]
    IsolationMode {
        /// The key.
        key: &'static str,
        /// The value found.
        value: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// A `[llm.providers.NAME]` entry that cannot be used (SPEC 10.7).
    #[error("{reason} in provider '{key}' in {}:{line}", .file.display())]
    Provider {
        /// The dotted key at fault.
        key: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A `[mcp_servers.NAME]` or `[agent.web_search]` entry that cannot be used (SPEC
    /// 19.1, 19.3).
    #[error("{reason}: key '{key}' in {}:{line}", .file.display())]
    Extension {
        /// The dotted key at fault.
        key: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A `[[hooks]]` entry that cannot be used (SPEC 20.4).
    #[error("{reason}: key '{key}' in {}:{line}", .file.display())]
    Hook {
        /// The dotted key at fault, e.g. `hooks[2].command`.
        key: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A value of the wrong type.
    #[error("key '{key}' in {}:{line} expects {expected}, found {found}", .file.display())]
    Type {
        /// The dotted key.
        key: String,
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// What the schema wants.
        expected: &'static str,
        /// The TOML type found.
        found: &'static str,
    },
}

fn suggestion_suffix(suggestion: Option<&str>) -> String {
    suggestion.map_or_else(String::new, |key| format!("; did you mean '{key}'?"))
}

/// Reads configuration files; tests pass an in-memory implementation.
pub trait ConfigReader {
    /// The file's text; `NotFound` means the layer is absent.
    fn read(&self, path: &Path) -> std::io::Result<String>;
}

/// Reads configuration files from the file system.
pub struct FsConfigReader;

impl ConfigReader for FsConfigReader {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        fs_err::read_to_string(path)
    }
}

/// Where the layers come from.
#[derive(Debug, Clone)]
pub struct ConfigSources {
    /// The storage root, holding `settings.toml`.
    pub root: PathBuf,
    /// The DOT file; its directory and ancestors are searched for the other layers.
    pub workflow: PathBuf,
    /// Explicit run configs, highest first (`--config FILE`, then a TOML `WORKFLOW`).
    /// When empty, `workflow.toml` or else `run.toml` next to the workflow is used.
    pub run_configs: Vec<PathBuf>,
}

/// Reads and merges every file layer: run config > `.fabro/project.toml` (nearest
/// ancestor of the workflow) > `{root}/settings.toml`.
pub fn load(sources: &ConfigSources, reader: &dyn ConfigReader) -> Result<RunConfig, ConfigError> {
    let mut merged =
        read_optional(&sources.root.join("settings.toml"), reader)?.unwrap_or_default();
    let directory = sources.workflow.parent().unwrap_or(Path::new(""));
    for ancestor in directory.ancestors() {
        if let Some(project) = read_optional(&ancestor.join(".fabro/project.toml"), reader)? {
            merged = project.over(merged);
            break;
        }
    }
    if sources.run_configs.is_empty() {
        for name in ["workflow.toml", "run.toml"] {
            if let Some(config) = read_optional(&directory.join(name), reader)? {
                merged = config.over(merged);
                break;
            }
        }
    } else {
        for path in sources.run_configs.iter().rev() {
            merged = read_required(path, reader)?.over(merged);
        }
    }
    Ok(merged)
}

/// The DOT file a run-config TOML names: `[workflow] graph`, default `workflow.fabro`,
/// relative to the TOML file.
pub fn workflow_graph(path: &Path, reader: &dyn ConfigReader) -> Result<PathBuf, ConfigError> {
    let config = read_required(path, reader)?;
    Ok(config
        .workflow
        .graph
        .unwrap_or_else(|| base_directory(path).join("workflow.fabro")))
}

/// Parses one file. Relative paths in it resolve against `file`'s directory.
pub fn parse(text: &str, file: &Path) -> Result<RunConfig, ConfigError> {
    let document = DeTable::parse(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        let (line, column) = line_column(text, offset);
        ConfigError::Syntax {
            file: file.to_path_buf(),
            line,
            column,
            message: error.message().trim_end().to_owned(),
        }
    })?;
    let context = Context {
        file,
        text,
        directory: base_directory(file),
    };
    let root = Section::new(&context, String::new(), document.get_ref(), ROOT_KEYS)?;
    for key in ["_version", "version"] {
        if let Some(value) = root.get(key) {
            let found = match value.get_ref() {
                DeValue::Integer(integer) => integer.as_str().to_owned(),
                other => return Err(root.type_error(key, value, "an integer", other)),
            };
            if found.parse::<i64>().ok() != Some(CONFIG_VERSION) {
                return Err(ConfigError::Version {
                    found,
                    file: file.to_path_buf(),
                    line: context.line(value.span().start),
                });
            }
        }
    }
    let mut config = RunConfig::default();
    config.workflow.graph = root.path("graph")?;
    if let Some(workflow) = root.section("workflow", WORKFLOW_KEYS)? {
        config.workflow.graph = workflow.path("graph")?.or(config.workflow.graph);
    }
    config.run.goal = root.string("goal")?;
    config.run.vars = root.string_table("vars")?;
    if let Some(run) = root.section("run", RUN_KEYS)? {
        config.run.goal = run.string("goal")?.or(config.run.goal);
        config.run.vars.extend(run.string_table("vars")?);
        config.run.dirty_worktree = dirty_worktree(&run)?;
        config.run.max_stages = run.count("max_stages")?;
        config.run.max_tokens = run.count("max_tokens")?;
        config.run.max_cost_usd = run.cost("max_cost_usd")?;
        config.run.max_duration = run.duration("max_duration")?;
    }
    if let Some(llm) = root.section("llm", LLM_KEYS)? {
        config.llm.model = llm.string("model")?;
        config.llm.provider = llm.string("provider")?;
        config.llm.base_url = llm.string("base_url")?;
        if let Some(fallbacks) = llm.get("fallbacks") {
            let table = llm.expect_table("fallbacks", fallbacks)?;
            let section = Section::free(&context, llm.child("fallbacks"), table)?;
            for (key, _) in table {
                let chain = section.strings(key.get_ref())?.unwrap_or_default();
                config
                    .llm
                    .fallbacks
                    .insert(key.get_ref().to_string(), chain);
            }
        }
        config.llm.headers = llm.string_table("headers")?;
        config.llm.providers = providers::providers(&llm)?;
        config.llm.prompt_caching = llm.boolean("prompt_caching")?;
        if let Some(simulated) = llm.section("simulated", SIMULATED_KEYS)? {
            config.llm.simulated_responses = simulated.path("responses")?;
        }
    }
    if let Some(checkpoint) = root.section("checkpoint", CHECKPOINT_KEYS)? {
        config.checkpoint.exclude_globs = checkpoint.strings("exclude_globs")?;
        config.checkpoint.push = checkpoint.boolean("push")?;
        config.checkpoint.remote = checkpoint.string("remote")?;
    }
    if let Some(git) = root.section("git", GIT_KEYS)? {
        config.git.author_name = git.string("author_name")?;
        config.git.author_email = git.string("author_email")?;
    }
    if let Some(sandbox) = root.section("sandbox", SANDBOX_KEYS)? {
        config.sandbox.provider = sandbox_provider(&sandbox)?;
        config.sandbox.env = sandbox.string_table("env")?;
        config.sandbox.env_passthrough = sandbox.strings("env_passthrough")?;
        config.sandbox.agent_isolation = isolation_mode(&sandbox, "agent_isolation")?;
        config.sandbox.command_isolation = isolation_mode(&sandbox, "command_isolation")?;
        config.sandbox.network = sandbox.boolean("network")?;
        config.sandbox.writable_paths = sandbox.strings("writable_paths")?;
        config.sandbox.hidden_paths = sandbox.strings("hidden_paths")?;
        config.sandbox.require_isolation = sandbox.boolean("require_isolation")?;
        if let Some(docker) = sandbox.section("docker", DOCKER_KEYS)? {
            config.sandbox.docker_image = docker.string("image")?;
        }
    }
    if let Some(artifacts) = root.section("artifacts", ARTIFACTS_KEYS)? {
        config.artifacts.include = artifacts.strings("include")?;
    }
    if let Some(agent) = root.section("agent", AGENT_KEYS)? {
        if let Some(acp) = agent.section("acp", ACP_KEYS)? {
            config.agent.acp_command = acp.strings("command")?;
        }
        config.agent.web = agent.boolean("web")?;
        if let Some(search) = agent.section("web_search", WEB_SEARCH_KEYS)? {
            config.agent.web_search.provider = extensions::search_provider(&search)?;
        }
    }
    config.mcp_servers = extensions::mcp_servers(&root)?;
    config.hooks = hooks::hooks(&root)?;
    Ok(config)
}

impl RunConfig {
    /// This layer over `lower`: keys set here win, tables merge per key, arrays replace.
    pub fn over(self, lower: RunConfig) -> RunConfig {
        fn table<V>(
            high: BTreeMap<String, V>,
            mut low: BTreeMap<String, V>,
        ) -> BTreeMap<String, V> {
            low.extend(high);
            low
        }
        RunConfig {
            workflow: WorkflowConfig {
                graph: self.workflow.graph.or(lower.workflow.graph),
            },
            run: RunSection {
                goal: self.run.goal.or(lower.run.goal),
                vars: table(self.run.vars, lower.run.vars),
                dirty_worktree: self.run.dirty_worktree.or(lower.run.dirty_worktree),
                max_stages: self.run.max_stages.or(lower.run.max_stages),
                max_tokens: self.run.max_tokens.or(lower.run.max_tokens),
                max_cost_usd: self.run.max_cost_usd.or(lower.run.max_cost_usd),
                max_duration: self.run.max_duration.or(lower.run.max_duration),
            },
            llm: LlmConfig {
                model: self.llm.model.or(lower.llm.model),
                provider: self.llm.provider.or(lower.llm.provider),
                base_url: self.llm.base_url.or(lower.llm.base_url),
                fallbacks: table(self.llm.fallbacks, lower.llm.fallbacks),
                headers: table(self.llm.headers, lower.llm.headers),
                providers: table(self.llm.providers, lower.llm.providers),
                simulated_responses: self
                    .llm
                    .simulated_responses
                    .or(lower.llm.simulated_responses),
                prompt_caching: self.llm.prompt_caching.or(lower.llm.prompt_caching),
            },
            checkpoint: CheckpointConfig {
                exclude_globs: self
                    .checkpoint
                    .exclude_globs
                    .or(lower.checkpoint.exclude_globs),
                push: self.checkpoint.push.or(lower.checkpoint.push),
                remote: self.checkpoint.remote.or(lower.checkpoint.remote),
            },
            git: GitConfig {
                author_name: self.git.author_name.or(lower.git.author_name),
                author_email: self.git.author_email.or(lower.git.author_email),
            },
            sandbox: SandboxConfig {
                provider: self.sandbox.provider.or(lower.sandbox.provider),
                env: table(self.sandbox.env, lower.sandbox.env),
                env_passthrough: self
                    .sandbox
                    .env_passthrough
                    .or(lower.sandbox.env_passthrough),
                docker_image: self.sandbox.docker_image.or(lower.sandbox.docker_image),
                agent_isolation: self
                    .sandbox
                    .agent_isolation
                    .or(lower.sandbox.agent_isolation),
                command_isolation: self
                    .sandbox
                    .command_isolation
                    .or(lower.sandbox.command_isolation),
                network: self.sandbox.network.or(lower.sandbox.network),
                writable_paths: self.sandbox.writable_paths.or(lower.sandbox.writable_paths),
                hidden_paths: self.sandbox.hidden_paths.or(lower.sandbox.hidden_paths),
                require_isolation: self
                    .sandbox
                    .require_isolation
                    .or(lower.sandbox.require_isolation),
            },
            artifacts: ArtifactsConfig {
                include: self.artifacts.include.or(lower.artifacts.include),
            },
            agent: AgentConfig {
                acp_command: self.agent.acp_command.or(lower.agent.acp_command),
                web: self.agent.web.or(lower.agent.web),
                web_search: WebSearchConfig {
                    provider: self
                        .agent
                        .web_search
                        .provider
                        .or(lower.agent.web_search.provider),
                },
            },
            mcp_servers: table(self.mcp_servers, lower.mcp_servers),
            // SPEC 20.4: the hooks of every layer run.
            hooks: lower.hooks.into_iter().chain(self.hooks).collect(),
        }
    }
}

const ROOT_KEYS: &[&str] = &[
    "_version",
    "version",
    "graph",
    "goal",
    "vars",
    "workflow",
    "run",
    "llm",
    "checkpoint",
    "git",
    "sandbox",
    "artifacts",
    "agent",
    "mcp_servers",
    "hooks",
];
const LLM_KEYS: &[&str] = &[
    "model",
    "provider",
    "base_url",
    "fallbacks",
    "headers",
    "providers",
    "simulated",
    "prompt_caching",
];

/// Serialises a header table with every value replaced by `[REDACTED]` (SPEC 13.1).
fn redacted_values<S: serde::Serializer>(
    table: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(table.keys().map(|key| (key, fabro_llm::REDACTED)))
}
const WORKFLOW_KEYS: &[&str] = &["graph"];
const SIMULATED_KEYS: &[&str] = &["responses"];
const CHECKPOINT_KEYS: &[&str] = &["exclude_globs", "push", "remote"];
const GIT_KEYS: &[&str] = &["author_name", "author_email"];
const DOCKER_KEYS: &[&str] = &["image"];
const ARTIFACTS_KEYS: &[&str] = &["include"];
const AGENT_KEYS: &[&str] = &["acp", "web", "web_search"];
const WEB_SEARCH_KEYS: &[&str] = &["provider"];
const ACP_KEYS: &[&str] = &["command"];
const SANDBOX_KEYS: &[&str] = &[
    "provider",
    "env",
    "env_passthrough",
    "docker",
    "agent_isolation",
    "command_isolation",
    "network",
    "writable_paths",
    "hidden_paths",
    "require_isolation",
];

/// Key names that hold credentials, matched whole or as a `_`/`-` suffix.
const CREDENTIAL_NAMES: &[&str] = &["api_key", "apikey", "token", "secret", "password"];

fn is_credential_key(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    CREDENTIAL_NAMES.iter().any(|credential| {
        name == *credential
            || name
                .strip_suffix(credential)
                .is_some_and(|rest| rest.ends_with(['_', '-']))
    })
}

fn read_optional(path: &Path, reader: &dyn ConfigReader) -> Result<Option<RunConfig>, ConfigError> {
    match reader.read(path) {
        Ok(text) => parse(&text, path).map(Some),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn read_required(path: &Path, reader: &dyn ConfigReader) -> Result<RunConfig, ConfigError> {
    let text = reader.read(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}

fn base_directory(file: &Path) -> &Path {
    file.parent().unwrap_or(Path::new(""))
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(0, |last| last.chars().count())
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<RunConfig, String> {
        parse(text, Path::new("conf/run.toml")).map_err(|error| error.to_string())
    }

    fn check_error(text: &str, expected: &str) {
        assert_eq!(check(text).unwrap_err(), expected, "{text}");
    }

    struct Files(BTreeMap<PathBuf, String>);

    impl ConfigReader for Files {
        fn read(&self, path: &Path) -> std::io::Result<String> {
            self.0
                .get(path)
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    }

    fn files(entries: &[(&str, &str)]) -> Files {
        Files(
            entries
                .iter()
                .map(|(path, text)| (PathBuf::from(path), (*text).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn isolation_keys_parse_and_reach_config_json() {
        let config = check(
            r#"[sandbox]
agent_isolation = "none"
command_isolation = "workspace"
network = false
writable_paths = ["~/.gradle"]
hidden_paths = ["/srv/secrets"]
require_isolation = true
"#,
        )
        .unwrap();
        let sandbox = &config.sandbox;
        assert_eq!(sandbox.agent_isolation, Some(IsolationMode::None));
        assert_eq!(sandbox.command_isolation, Some(IsolationMode::Workspace));
        assert_eq!(sandbox.network, Some(false));
        assert_eq!(
            sandbox.writable_paths.as_deref(),
            Some(&["~/.gradle".to_owned()][..])
        );
        assert_eq!(
            sandbox.hidden_paths.as_deref(),
            Some(&["/srv/secrets".to_owned()][..])
        );
        assert_eq!(sandbox.require_isolation, Some(true));
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["sandbox"]["command_isolation"], "workspace");
        assert_eq!(json["sandbox"]["network"], false);
        check_error(
            "[sandbox]\nagent_isolation = \"vm\"\n",
            "unknown agent_isolation 'vm' in conf/run.toml:2; expected 'none' or 'workspace'",
        );
        let lower = check("[sandbox]\nnetwork = false\nagent_isolation = \"none\"\n").unwrap();
        let merged = check("[sandbox]\nagent_isolation = \"workspace\"\n")
            .unwrap()
            .over(lower);
        assert_eq!(
            merged.sandbox.agent_isolation,
            Some(IsolationMode::Workspace)
        );
        assert_eq!(merged.sandbox.network, Some(false));
    }

    #[test]
    fn full_schema_parses() {
        let config = check(
            r#"_version = 1
[workflow]
graph = "flows/main.fabro"
[run]
goal = "Ship it"
[run.vars]
name = "x"
[llm]
model = "sonnet"
provider = "anthropic"
base_url = "http://localhost:1"
[llm.fallbacks]
anthropic = ["openai", "gemini"]
[llm.headers]
X-Gateway-Team = "fabro"
[llm.simulated]
responses = "responses.json"
[checkpoint]
exclude_globs = ["*.log"]
push = true
remote = "upstream"
[git]
author_name = "a"
author_email = "a@b"
[sandbox]
provider = "local"
env = { A = "1" }
env_passthrough = ["GITHUB_TOKEN"]
[sandbox.docker]
image = "img"
[artifacts]
include = ["out/**"]
[agent.acp]
command = ["agent", "--acp"]
"#,
        )
        .unwrap();
        assert_eq!(
            config.workflow.graph,
            Some(PathBuf::from("conf/flows/main.fabro"))
        );
        assert_eq!(config.run.goal.as_deref(), Some("Ship it"));
        assert_eq!(config.run.vars["name"], "x");
        assert_eq!(config.llm.model.as_deref(), Some("sonnet"));
        assert_eq!(config.llm.fallbacks["anthropic"], ["openai", "gemini"]);
        assert_eq!(config.llm.headers["X-Gateway-Team"], "fabro");
        assert_eq!(
            serde_json::to_value(&config.llm).unwrap()["headers"],
            serde_json::json!({"X-Gateway-Team": "[REDACTED]"})
        );
        assert_eq!(
            config.llm.simulated_responses,
            Some(PathBuf::from("conf/responses.json"))
        );
        assert_eq!(config.checkpoint.push, Some(true));
        assert_eq!(config.sandbox.provider, Some(SandboxProvider::Local));
        assert_eq!(config.sandbox.env["A"], "1");
        assert_eq!(
            config.sandbox.env_passthrough.as_deref(),
            Some(&["GITHUB_TOKEN".to_owned()][..])
        );
        assert_eq!(config.sandbox.docker_image.as_deref(), Some("img"));
        assert_eq!(
            config.agent.acp_command.as_deref(),
            Some(&["agent".to_owned(), "--acp".to_owned()][..])
        );
    }

    #[test]
    fn aliases_map_to_their_keys() {
        let config = check("version = 1\ngraph = \"g.fabro\"\ngoal = \"G\"\n[vars]\na = \"1\"\nb = \"old\"\n[run.vars]\nb = \"new\"\n").unwrap();
        assert_eq!(config.workflow.graph, Some(PathBuf::from("conf/g.fabro")));
        assert_eq!(config.run.goal.as_deref(), Some("G"));
        assert_eq!(
            config.run.vars,
            BTreeMap::from([
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "new".to_owned())
            ])
        );
    }

    #[test]
    fn unknown_keys_name_the_line_and_a_suggestion() {
        check_error(
            "[run]\ngoal = \"x\"\ngaol = \"y\"\n",
            "unknown key 'run.gaol' in conf/run.toml:3; did you mean 'run.goal'?",
        );
        check_error(
            "\n[sandbx]\n",
            "unknown key 'sandbx' in conf/run.toml:2; did you mean 'sandbox'?",
        );
        check_error("colour = 1\n", "unknown key 'colour' in conf/run.toml:1");
        check_error(
            "[llm.simulated]\nresponse = \"r\"\n",
            "unknown key 'llm.simulated.response' in conf/run.toml:2; did you mean 'llm.simulated.responses'?",
        );
    }

    #[test]
    fn credentials_are_rejected_anywhere() {
        check_error(
            "[llm]\napi_key = \"sk\"\n",
            "credentials are read from environment variables only (llm.api_key)",
        );
        check_error(
            "[run.vars]\ngithub_token = \"t\"\n",
            "credentials are read from environment variables only (run.vars.github_token)",
        );
        check_error(
            "password = \"p\"\n",
            "credentials are read from environment variables only (password)",
        );
        check_error(
            "[sandbox.env]\nDB_SECRET = \"s\"\n",
            "credentials are read from environment variables only (sandbox.env.DB_SECRET)",
        );
    }

    #[test]
    fn version_docker_types_and_syntax_are_errors() {
        check_error(
            "_version = 2\n",
            "unsupported configuration version 2 in conf/run.toml:1; this build reads 1",
        );
        check_error(
            "[sandbox]\nprovider = \"docker\"\n",
            "the docker sandbox is not available in this release",
        );
        check_error(
            "[sandbox]\nprovider = \"vm\"\n",
            "unknown sandbox provider 'vm' in conf/run.toml:2; expected 'local'",
        );
        check_error(
            "[checkpoint]\npush = \"yes\"\n",
            "key 'checkpoint.push' in conf/run.toml:2 expects a boolean, found string",
        );
        check_error(
            "[run.vars]\nn = 3\n",
            "key 'run.vars.n' in conf/run.toml:2 expects a string, found integer",
        );
        check_error(
            "llm = 1\n",
            "key 'llm' in conf/run.toml:1 expects a table, found integer",
        );
        let syntax = check("goal = \"x\"\nmodel = \n").unwrap_err();
        assert!(
            syntax.starts_with("invalid TOML in conf/run.toml:2:"),
            "{syntax}"
        );
    }

    #[test]
    fn layers_merge_per_key_and_arrays_replace() {
        let reader = files(&[
            (
                "/home/.fabro/settings.toml",
                "[llm]\nmodel = \"low\"\nprovider = \"openai\"\n[run.vars]\na = \"settings\"\nb = \"settings\"\nc = \"settings\"\n[checkpoint]\nexclude_globs = [\"a\", \"b\"]\n",
            ),
            (
                "/repo/.fabro/project.toml",
                "[llm]\nmodel = \"project\"\n[run.vars]\nb = \"project\"\nc = \"project\"\n[checkpoint]\nexclude_globs = [\"c\"]\n",
            ),
            ("/repo/flows/workflow.toml", "[run.vars]\nc = \"run\"\n"),
        ]);
        let sources = ConfigSources {
            root: PathBuf::from("/home/.fabro"),
            workflow: PathBuf::from("/repo/flows/w.fabro"),
            run_configs: Vec::new(),
        };
        let config = load(&sources, &reader).unwrap();
        assert_eq!(config.llm.model.as_deref(), Some("project"));
        assert_eq!(config.llm.provider.as_deref(), Some("openai"));
        assert_eq!(config.run.vars["a"], "settings");
        assert_eq!(config.run.vars["b"], "project");
        assert_eq!(config.run.vars["c"], "run");
        assert_eq!(config.checkpoint.exclude_globs, Some(vec!["c".to_owned()]));
    }

    #[test]
    fn explicit_run_configs_replace_the_adjacent_one() {
        let reader = files(&[
            (
                "/repo/workflow.toml",
                "goal = \"adjacent\"\n[vars]\na = \"adjacent\"\n",
            ),
            ("/repo/ci.toml", "goal = \"ci\"\n"),
            ("/repo/flow.toml", "goal = \"flow\"\n[vars]\nb = \"flow\"\n"),
        ]);
        let sources = ConfigSources {
            root: PathBuf::from("/nowhere"),
            workflow: PathBuf::from("/repo/w.fabro"),
            run_configs: vec![
                PathBuf::from("/repo/ci.toml"),
                PathBuf::from("/repo/flow.toml"),
            ],
        };
        let config = load(&sources, &reader).unwrap();
        assert_eq!(config.run.goal.as_deref(), Some("ci"));
        assert_eq!(config.run.vars.keys().collect::<Vec<_>>(), ["b"]);
        let missing = ConfigSources {
            run_configs: vec![PathBuf::from("/repo/missing.toml")],
            ..sources
        };
        assert_eq!(
            load(&missing, &reader).unwrap_err().to_string(),
            "cannot read configuration /repo/missing.toml"
        );
    }

    #[test]
    fn workflow_graph_defaults_next_to_the_toml() {
        let reader = files(&[
            ("/repo/a/run.toml", "[workflow]\ngraph = \"../g.fabro\"\n"),
            ("/repo/b/run.toml", "goal = \"x\"\n"),
        ]);
        assert_eq!(
            workflow_graph(Path::new("/repo/a/run.toml"), &reader).unwrap(),
            PathBuf::from("/repo/a/../g.fabro")
        );
        assert_eq!(
            workflow_graph(Path::new("/repo/b/run.toml"), &reader).unwrap(),
            PathBuf::from("/repo/b/workflow.fabro")
        );
    }

    #[test]
    fn credential_names_match_whole_words() {
        for name in [
            "api_key",
            "OPENAI_API_KEY",
            "token",
            "gh-token",
            "secret",
            "db_password",
        ] {
            assert!(is_credential_key(name), "{name}");
        }
        for name in ["max_tokens", "env_passthrough", "tokenizer", "secretary"] {
            assert!(!is_credential_key(name), "{name}");
        }
    }

    #[test]
    fn budget_keys_parse_merge_and_reject_bad_values() {
        let config = check(
            "[run]\nmax_stages = 0\nmax_tokens = 50_000\nmax_cost_usd = 2\nmax_duration = \"30m\"\n",
        )
        .expect("valid");
        assert_eq!(config.run.max_stages, Some(0));
        assert_eq!(config.run.max_tokens, Some(50_000));
        assert_eq!(config.run.max_cost_usd.map(CostLimit::usd), Some(2.0));
        assert_eq!(config.run.max_duration.as_deref(), Some("30m"));
        let higher = check("[run]\nmax_cost_usd = 0.5\n").expect("valid");
        let merged = higher.over(config);
        assert_eq!(merged.run.max_cost_usd.map(CostLimit::usd), Some(0.5));
        assert_eq!(merged.run.max_stages, Some(0));
        check_error(
            "[run]\nmax_stages = -1\n",
            "key 'run.max_stages' in conf/run.toml:2 expects a whole number ≥ 0, found integer",
        );
        check_error(
            "[run]\nmax_cost_usd = -1.5\n",
            "key 'run.max_cost_usd' in conf/run.toml:2 expects an amount in USD ≥ 0, found float",
        );
        check_error(
            "[run]\nmax_duration = \"soon\"\n",
            "key 'run.max_duration' in conf/run.toml:2 expects a duration such as 90s, 30m or 2h, found string",
        );
        check_error(
            "[run]\nmax_stage = 3\n",
            "unknown key 'run.max_stage' in conf/run.toml:2; did you mean 'run.max_stages'?",
        );
    }
}
