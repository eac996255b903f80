//! The agent extension keys of SPEC 19: `[mcp_servers.NAME]` (19.1), `[agent] web` and
//! `[agent.web_search] provider` (19.3). A stdio server without `command` or an HTTP one
//! without `url` is a configuration error naming the key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ConfigError, Section};

/// `[mcp_servers.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpServerSettings {
    /// `type`: `stdio` or `http` (Streamable HTTP).
    #[serde(rename = "type")]
    pub kind: McpServerKind,
    /// `command` of a stdio server: program and arguments.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// `env` of a stdio server, added to the filtered environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `url` of an HTTP server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `headers` of an HTTP server; `${VAR}` is read from the environment when the run
    /// starts. Recorded as written when they name variables, redacted otherwise.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "literal_values_redacted"
    )]
    pub headers: BTreeMap<String, String>,
    /// `startup_timeout_secs`: handshake and `tools/list` (10 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_timeout_secs: Option<u64>,
    /// `tool_timeout_secs`: one tool call (60 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_timeout_secs: Option<u64>,
    /// `required`: the stage fails `deterministic` when the server is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
}

/// `type` of an MCP server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpServerKind {
    /// A child process on stdio (the default).
    #[default]
    Stdio,
    /// Streamable HTTP.
    Http,
}

/// `[agent.web_search]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebSearchConfig {
    /// `provider`: only `brave` in this release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

pub(super) const MCP_SERVER_KEYS: &[&str] = &[
    "type",
    "command",
    "env",
    "url",
    "headers",
    "startup_timeout_secs",
    "tool_timeout_secs",
    "required",
];

/// Reads `[mcp_servers]`.
pub(super) fn mcp_servers(
    root: &Section<'_, '_>,
) -> Result<BTreeMap<String, McpServerSettings>, ConfigError> {
    let mut servers = BTreeMap::new();
    let Some(value) = root.get("mcp_servers") else {
        return Ok(servers);
    };
    let table = root.expect_table("mcp_servers", value)?;
    let listed = Section::free(root.context, root.child("mcp_servers"), table)?;
    for (name, entry) in table {
        let name = name.get_ref().to_string();
        let Some(server) = listed.section(&name, MCP_SERVER_KEYS)? else {
            continue;
        };
        let invalid = |key: &str, reason: String| ConfigError::Extension {
            key: server.child(key),
            file: root.context.file.to_path_buf(),
            line: root.context.line(entry.span().start),
            reason,
        };
        let kind = match server.string("type")?.as_deref() {
            None | Some("stdio") => McpServerKind::Stdio,
            Some("http") => McpServerKind::Http,
            Some(other) => {
                return Err(invalid(
                    "type",
                    format!("unknown type '{other}'; expected 'stdio' or 'http'"),
                ))
            }
        };
        let command = server.strings("command")?.unwrap_or_default();
        let url = server.string("url")?;
        match kind {
            McpServerKind::Stdio if command.is_empty() => {
                return Err(invalid(
                    "command",
                    "a stdio server needs a command".to_owned(),
                ))
            }
            McpServerKind::Http if url.as_deref().is_none_or(str::is_empty) => {
                return Err(invalid("url", "an http server needs a url".to_owned()))
            }
            McpServerKind::Stdio | McpServerKind::Http => {}
        }
        servers.insert(
            name,
            McpServerSettings {
                kind,
                command,
                env: server.string_table("env")?,
                url,
                headers: server.string_table("headers")?,
                startup_timeout_secs: server.count("startup_timeout_secs")?,
                tool_timeout_secs: server.count("tool_timeout_secs")?,
                required: server.boolean("required")?,
            },
        );
    }
    Ok(servers)
}

/// `[agent.web_search] provider`: `brave` is the only one in this release.
pub(super) fn search_provider(search: &Section<'_, '_>) -> Result<Option<String>, ConfigError> {
    let provider = search.string("provider")?;
    match provider.as_deref() {
        None | Some("brave") => Ok(provider),
        Some(other) => Err(ConfigError::Extension {
            key: search.child("provider"),
            file: search.context.file.to_path_buf(),
            line: search
                .get("provider")
                .map_or(1, |value| search.context.line(value.span().start)),
            reason: format!("unknown search provider '{other}'; expected 'brave'"),
        }),
    }
}

/// Serialises headers with literal values replaced by `[REDACTED]`: a `${VAR}` value
/// holds no secret and is what a resumed run must read again.
pub(super) fn literal_values_redacted<S: serde::Serializer>(
    table: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(table.iter().map(|(key, value)| {
        let shown = if value.contains("${") {
            value.as_str()
        } else {
            fabro_llm::REDACTED
        };
        (key, shown)
    }))
}

/// The value of the variable `name` for `${VAR}` expansion: from the process's secrets
/// (taken out of the environment at start-up), else the environment; empty counts as
/// unset.
pub(crate) fn variable_value(name: &str) -> Option<String> {
    fabro_llm::redact::secrets()
        .get_str(name)
        .map(str::to_owned)
        .or_else(|| std::env::var(name).ok())
        .filter(|value| !value.is_empty())
}

/// `${VAR}` in `text` replaced by the variables' values, each value adopted into the
/// process's secrets (redacted everywhere, kept out of child environments, SPEC 19.1);
/// the names of unset variables come back as the error.
pub(crate) fn expand_secret_variables(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<String>> {
    let mut expanded = String::with_capacity(text.len());
    let mut missing = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        expanded.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            expanded.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = &after[..end];
        match env(name) {
            Some(value) => {
                fabro_llm::redact::adopt(name, &value);
                expanded.push_str(&value);
            }
            None => missing.push(name.to_owned()),
        }
        rest = &after[end + 1..];
    }
    expanded.push_str(rest);
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn check(text: &str) -> Result<super::super::RunConfig, String> {
        super::super::parse(text, Path::new("conf/run.toml")).map_err(|error| error.to_string())
    }

    #[test]
    fn servers_parse_with_their_transport_keys() {
        let config = check(
            r#"[mcp_servers.files]
type = "stdio"
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."]
env = { LOG_LEVEL = "warn" }
startup_timeout_secs = 10
tool_timeout_secs = 60

[mcp_servers.tracker]
type = "http"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${TRACKER_TOKEN}", X-Team = "core" }
required = true

[agent]
web = true

[agent.web_search]
provider = "brave"
"#,
        )
        .unwrap();
        let files = &config.mcp_servers["files"];
        assert_eq!(files.kind, McpServerKind::Stdio);
        assert_eq!(files.command[0], "npx");
        assert_eq!(files.env["LOG_LEVEL"], "warn");
        assert_eq!(files.tool_timeout_secs, Some(60));
        let tracker = &config.mcp_servers["tracker"];
        assert_eq!(tracker.kind, McpServerKind::Http);
        assert_eq!(tracker.required, Some(true));
        assert_eq!(config.agent.web, Some(true));
        assert_eq!(config.agent.web_search.provider.as_deref(), Some("brave"));
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(
            json["mcp_servers"]["tracker"]["headers"],
            serde_json::json!({"Authorization": "Bearer ${TRACKER_TOKEN}", "X-Team": "[REDACTED]"})
        );
        // The recorded form reads back (resume).
        let back: super::super::RunConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back.mcp_servers["files"], *files);
    }

    #[test]
    fn a_server_without_its_command_or_url_names_the_key() {
        assert_eq!(
            check("[mcp_servers.files]\ntype = \"stdio\"\n").unwrap_err(),
            "a stdio server needs a command: key 'mcp_servers.files.command' in conf/run.toml:1"
        );
        assert_eq!(
            check("\n[mcp_servers.tracker]\ntype = \"http\"\n").unwrap_err(),
            "an http server needs a url: key 'mcp_servers.tracker.url' in conf/run.toml:2"
        );
        assert_eq!(
            check("[mcp_servers.x]\ntype = \"sse\"\nurl = \"u\"\n").unwrap_err(),
            "unknown type 'sse'; expected 'stdio' or 'http': key 'mcp_servers.x.type' in conf/run.toml:1"
        );
        assert!(check("[mcp_servers.x]\ncommand = [\"a\"]\ncmd = 1\n")
            .unwrap_err()
            .starts_with("unknown key 'mcp_servers.x.cmd' in conf/run.toml:3"));
    }

    #[test]
    fn header_variables_are_expanded_and_missing_ones_named() {
        let env = |name: &str| (name == "MCP_TEST_TOKEN_A").then(|| "tok-123456789".to_owned());
        assert_eq!(
            expand_secret_variables("Bearer ${MCP_TEST_TOKEN_A}", &env).unwrap(),
            "Bearer tok-123456789"
        );
        assert_eq!(
            fabro_llm::redact::redactor().redact_str("x tok-123456789 y"),
            "x [REDACTED] y"
        );
        assert_eq!(
            expand_secret_variables("${NOPE_1}-${NOPE_2}", &env).unwrap_err(),
            ["NOPE_1", "NOPE_2"]
        );
        assert_eq!(expand_secret_variables("plain", &env).unwrap(), "plain");
    }
}
