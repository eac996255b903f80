//! The configuration reference of the user guide (`docs/guide/src/reference/configuration.md`),
//! generated from the key lists the parser accepts so that it cannot drift from them.
//!
//! Every key the parser knows must have an entry in [`DESCRIPTIONS`] and every entry must
//! name a known key: [`undocumented_keys`] and [`unknown_descriptions`] say which do not,
//! and the guide's tests require both to be empty.

use super::extensions::MCP_SERVER_KEYS;
use super::hooks::HOOK_KEYS;
use super::keys::RUN_KEYS;
use super::providers::{MODEL_KEYS, PROVIDER_KEYS};
use super::{
    ACP_KEYS, AGENT_KEYS, ARTIFACTS_KEYS, CHECKPOINT_KEYS, DOCKER_KEYS, GIT_KEYS, LLM_KEYS,
    ROOT_KEYS, SANDBOX_KEYS, SIMULATED_KEYS, WEB_SEARCH_KEYS, WORKFLOW_KEYS,
};

/// One documented key: its dotted name, the value it takes, its default and its meaning.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyDoc {
    /// The dotted key, with `NAME` and `ID` for names the user chooses.
    pub key: &'static str,
    /// The kind of value.
    pub value: &'static str,
    /// What applies when no layer sets it.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

const fn doc(
    key: &'static str,
    value: &'static str,
    default: &'static str,
    meaning: &'static str,
) -> KeyDoc {
    KeyDoc {
        key,
        value,
        default,
        meaning,
    }
}

/// The description of every key, in the order of the reference page.
pub(crate) const DESCRIPTIONS: &[KeyDoc] = &[
    doc("_version", "integer", "1", "Schema version; only 1 is accepted."),
    doc("version", "integer", "1", "Another name for `_version`."),
    doc("graph", "path", "`workflow.fabro` next to the file", "Another name for `workflow.graph`."),
    doc("goal", "string", "none", "Another name for `run.goal`."),
    doc("vars", "table of strings", "empty", "Another name for `run.vars`."),
    doc("workflow", "table", "", "The workflow a run config runs."),
    doc("workflow.graph", "path", "`workflow.fabro` next to the file", "The DOT file of a run config, relative to the file's directory."),
    doc("run", "table", "", "What a run does and how far it may go."),
    doc("run.goal", "string", "the graph's `goal`", "The run's goal, `$goal` in prompts."),
    doc("run.vars", "table of strings", "empty", "Variables expanded as `$name` in the workflow (`--var K=V` sets one)."),
    doc("run.dirty_worktree", "`\"in_place\"` or `\"refuse\"`", "`\"in_place\"`", "What a run does in a git checkout with uncommitted changes; `--no-in-place` is `refuse`."),
    doc("run.max_stages", "integer ≥ 0", "1000", "Stages a run may start, all branches and resumes; 0 is unlimited (`--max-stages`)."),
    doc("run.max_tokens", "integer ≥ 0", "unlimited", "Input plus output tokens of all LLM calls (`--max-tokens`)."),
    doc("run.max_cost_usd", "number ≥ 0", "unlimited", "Cost in USD of all LLM calls (`--max-cost`)."),
    doc("run.max_duration", "duration (`90s`, `30m`, `2h`)", "unlimited", "Wall time since the run or its resume started (`--max-duration`)."),
    doc("llm", "table", "", "Models and providers."),
    doc("llm.model", "string", "the provider's default model", "Model of nodes that set none (`--model`)."),
    doc("llm.provider", "string", "from the credentials found", "Provider of nodes that set none (`--provider`); `simulated` runs everything offline."),
    doc("llm.base_url", "URL", "none", "Endpoint of the `openai_compatible` provider."),
    doc("llm.fallbacks", "table of provider lists", "empty", "Failover chain per provider, e.g. `anthropic = [\"openai\"]`."),
    doc("llm.headers", "table of strings", "empty", "Extra headers of `openai_compatible` requests; recorded redacted."),
    doc("llm.providers", "table of tables", "empty", "Providers configured by name, used as `provider=\"NAME\"`."),
    doc("llm.providers.NAME.wire", "`\"chat\"`, `\"responses\"`, `\"anthropic\"` or `\"gemini\"`", "`\"chat\"` for presets", "The wire format the endpoint speaks."),
    doc("llm.providers.NAME.base_url", "URL", "the preset's", "The endpoint."),
    doc("llm.providers.NAME.api_key_env", "variable name", "the preset's", "The environment variable holding the key; a run fails before its first stage when it is unset."),
    doc("llm.providers.NAME.headers", "table of strings", "empty", "Extra headers; `${VAR}` is read from the environment; recorded redacted."),
    doc("llm.providers.NAME.models", "table of tables", "empty", "Models of this provider, by id."),
    doc("llm.providers.NAME.models.ID.context_window", "integer", "unknown", "Tokens the model reads; the agent compacts its history before it."),
    doc("llm.providers.NAME.models.ID.max_output", "integer", "unknown", "Default output cap of a call."),
    doc("llm.providers.NAME.models.ID.input_price", "USD per million tokens", "unknown", "Price of input tokens; without both prices a call's cost is unknown."),
    doc("llm.providers.NAME.models.ID.output_price", "USD per million tokens", "unknown", "Price of output tokens."),
    doc("llm.providers.NAME.models.ID.cache_read_price", "USD per million tokens", "the input price", "Price of input tokens read from the provider's cache."),
    doc("llm.providers.NAME.models.ID.reasoning", "boolean", "unknown", "Whether the model reasons, as `fabro model list` shows it."),
    doc("llm.simulated", "table", "", "The offline `simulated` provider."),
    doc("llm.simulated.responses", "path", "none", "A file of scripted responses per node (`FABRO_SIMULATED_RESPONSES` overrides it)."),
    doc("llm.prompt_caching", "boolean", "true", "Mark stable prompt prefixes for the providers' caches."),
    doc("checkpoint", "table", "", "Git checkpoints."),
    doc("checkpoint.exclude_globs", "array of globs", "empty", "Paths never staged in checkpoint commits."),
    doc("checkpoint.push", "boolean", "false", "Accepted but not acted on in this release: fabro does not push."),
    doc("checkpoint.remote", "string", "`origin`", "Accepted but not acted on in this release."),
    doc("git", "table", "", "Commits fabro writes."),
    doc("git.author_name", "string", "`fabro`", "Author name of checkpoint commits."),
    doc("git.author_email", "string", "`fabro@local`", "Author email of checkpoint commits."),
    doc("sandbox", "table", "", "Where and how commands and agents run."),
    doc("sandbox.provider", "`\"local\"`", "`\"local\"`", "Only `local` exists; `docker` is refused (exit 2)."),
    doc("sandbox.env", "table of strings", "empty", "Extra environment of commands and tools."),
    doc("sandbox.env_passthrough", "array of names", "none", "Secret-looking variables let through to commands and agents."),
    doc("sandbox.docker", "table", "", "Reserved for a Docker sandbox, which is not available yet."),
    doc("sandbox.docker.image", "string", "none", "Reserved; not used in this release."),
    doc("sandbox.agent_isolation", "`\"none\"` or `\"workspace\"`", "`\"workspace\"`", "Isolation of agent processes (Linux)."),
    doc("sandbox.command_isolation", "`\"none\"` or `\"workspace\"`", "`\"none\"`", "Isolation of command nodes (Linux)."),
    doc("sandbox.network", "boolean", "true", "`false` cuts isolated processes off every network."),
    doc("sandbox.writable_paths", "array of paths", "caches and agent state", "More writable paths, added to the defaults."),
    doc("sandbox.hidden_paths", "array of paths", "`~/.ssh`, `~/.aws`, `~/.gnupg`, … and fabro's blobs, index and server token", "More unreadable paths, added to the defaults."),
    doc("sandbox.require_isolation", "boolean", "false", "`true`: a kernel that cannot enforce the settings exits 2 instead of warning."),
    doc("artifacts", "table", "", "Files captured from stages."),
    doc("artifacts.include", "array of globs", "none", "More asset patterns to capture."),
    doc("agent", "table", "", "Agent backends."),
    doc("agent.acp", "table", "", "The Agent Client Protocol backend."),
    doc("agent.acp.command", "array of strings", "none", "The adapter program and arguments of `backend=\"acp\"` nodes without `acp_command`."),
    doc("agent.web", "boolean", "false", "Offer `web_fetch` and `web_search` to agent stages (never with `[sandbox] network = false`)."),
    doc("agent.web_search", "table", "", "The search service of `web_search`."),
    doc("agent.web_search.provider", "string", "`brave`", "The search service; `BRAVE_API_KEY` holds its key, `BRAVE_BASE_URL` overrides its address."),
    doc("mcp_servers", "table", "", "Model Context Protocol servers whose tools agent stages get, by name."),
    doc("mcp_servers.NAME.type", "string", "required", "`stdio` (a child process) or `http` (Streamable HTTP)."),
    doc("mcp_servers.NAME.command", "array of strings", "required for stdio", "The server program and its arguments, started in the run's working directory under `agent_isolation`."),
    doc("mcp_servers.NAME.env", "table", "none", "Variables for a stdio server (names that look like credentials are refused; use `env_passthrough`)."),
    doc("mcp_servers.NAME.url", "string", "required for http", "The server's Streamable HTTP endpoint."),
    doc("mcp_servers.NAME.headers", "table", "none", "HTTP headers; a value `${VAR}` is read from the environment and redacted like a key."),
    doc("mcp_servers.NAME.startup_timeout_secs", "integer", "10", "How long the handshake and `tools/list` may take."),
    doc("mcp_servers.NAME.tool_timeout_secs", "integer", "60", "How long one tool call may take before it is a tool error."),
    doc("mcp_servers.NAME.required", "boolean", "false", "Fail the stage (`deterministic`) when the server cannot start, instead of a `mcp_unavailable` warning."),
    doc("hooks", "array of tables", "empty", "Commands or HTTP requests run on run and stage events; the entries of every layer run, lower layers first."),
    doc("hooks.event", "`\"run_start\"`, `\"run_complete\"`, `\"run_failed\"`, `\"stage_start\"`, `\"stage_complete\"` or `\"human_question\"`", "required", "When the hook runs; `run_complete` and `run_failed` run just before the run's last event."),
    doc("hooks.nodes", "array of node ids", "all nodes", "Only for these nodes' stages and questions (not for run events)."),
    doc("hooks.type", "`\"command\"` or `\"http\"`", "`\"command\"`", "`command` runs `sh -c` in the working directory with the event envelope as JSON on stdin; `http` POSTs the envelope as JSON."),
    doc("hooks.command", "string", "required for command", "The shell command, run with the sandbox environment and `command_isolation` of command nodes."),
    doc("hooks.url", "URL", "required for http", "Where an http hook POSTs the envelope."),
    doc("hooks.headers", "table of strings", "empty", "Headers of an http hook; `${VAR}` is read from the environment and redacted like a key; never written anywhere."),
    doc("hooks.blocking", "boolean", "false", "`stage_start` only: wait for the hook, and fail the stage (`deterministic`, with its last stderr line) when it fails; the node's handler does not run."),
    doc("hooks.timeout_secs", "integer ≥ 1", "30", "How long the hook may run; then its process group is killed (a non-blocking hook then warns `hook_failed`)."),
];

/// Every dotted key the parser accepts, in parser order.
pub(crate) fn known_keys() -> Vec<String> {
    let mut keys = Vec::new();
    let nested: &[(&str, &[&str])] = &[
        ("workflow", WORKFLOW_KEYS),
        ("run", RUN_KEYS),
        ("llm", LLM_KEYS),
        ("llm.providers.NAME", PROVIDER_KEYS),
        ("llm.providers.NAME.models.ID", MODEL_KEYS),
        ("llm.simulated", SIMULATED_KEYS),
        ("checkpoint", CHECKPOINT_KEYS),
        ("git", GIT_KEYS),
        ("sandbox", SANDBOX_KEYS),
        ("sandbox.docker", DOCKER_KEYS),
        ("artifacts", ARTIFACTS_KEYS),
        ("agent", AGENT_KEYS),
        ("agent.acp", ACP_KEYS),
        ("agent.web_search", WEB_SEARCH_KEYS),
        ("mcp_servers.NAME", MCP_SERVER_KEYS),
        ("hooks", HOOK_KEYS),
    ];
    keys.extend(ROOT_KEYS.iter().map(|key| (*key).to_owned()));
    for (section, names) in nested {
        keys.extend(names.iter().map(|key| format!("{section}.{key}")));
    }
    keys
}

/// Keys the parser accepts that have no description.
pub fn undocumented_keys() -> Vec<String> {
    known_keys()
        .into_iter()
        .filter(|key| !DESCRIPTIONS.iter().any(|doc| doc.key == key))
        .collect()
}

/// Descriptions of keys the parser does not accept.
pub fn unknown_descriptions() -> Vec<&'static str> {
    let known = known_keys();
    DESCRIPTIONS
        .iter()
        .map(|doc| doc.key)
        .filter(|key| !known.iter().any(|known| known == key))
        .collect()
}

/// The reference page as Markdown: one table per top-level section.
pub fn markdown() -> String {
    let mut page = String::from(
        "# Configuration reference\n\n\
         <!-- Generated from crates/fabro-engine/src/config/reference.rs and the parser's key \
         lists; do not edit. Regenerate with: FABRO_UPDATE_GUIDE=1 cargo test -p fabro-cli \
         --test guide -->\n\n\
         Every key of the configuration schema, the same in every layer \
         (`$FABRO_HOME/settings.toml`, `.fabro/project.toml`, a run config, the rest of \
         `server.toml`). `NAME` and `ID` stand for names you choose. Any other key is an \
         error (exit 2), and so is a key named like a credential (`api_key`, `token`, …).\n",
    );
    let mut section = "";
    for doc in DESCRIPTIONS {
        let top = doc.key.split('.').next().unwrap_or(doc.key);
        let table = matches!(doc.value, "table" | "array of tables");
        let top = if doc.key.contains('.') || table {
            top
        } else {
            ""
        };
        if top != section || !page.contains("\n## ") {
            section = top;
            let title = if top.is_empty() {
                "Top level".to_owned()
            } else if doc.value == "array of tables" {
                format!("`[[{top}]]`")
            } else {
                format!("`[{top}]`")
            };
            page.push_str(&format!(
                "\n## {title}\n\n| Key | Value | Default | Meaning |\n|---|---|---|---|\n"
            ));
        }
        let default = if doc.default.is_empty() {
            "–"
        } else {
            doc.default
        };
        page.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            doc.key, doc.value, default, doc.meaning
        ));
    }
    page
}
