//! `[[hooks]]` (SPEC 20.4): commands or HTTP requests run on run and stage events. Every
//! entry is checked here, once: an unknown event or type, a command hook without
//! `command`, an HTTP hook without `url`, `blocking` outside `stage_start`, a zero
//! timeout and keys of the other type are configuration errors naming the key.
//!
//! Unlike other arrays, `[[hooks]]` of every layer run: the entries of a lower layer
//! come first (see [`RunConfig::over`](super::RunConfig::over)).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toml::de::DeValue;

use super::{ConfigError, Section};

/// The timeout of a hook without `timeout_secs`.
pub(crate) const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 30;

/// One `[[hooks]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookConfig {
    /// `event`: when it runs.
    pub event: HookEvent,
    /// `nodes`: only on these nodes' stages and questions (all when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// `type`: `command` (the default) or `http`.
    #[serde(rename = "type", default)]
    pub kind: HookKind,
    /// `command` of a command hook, run as `sh -c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `url` of an HTTP hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `headers` of an HTTP hook; `${VAR}` is read from the environment when the run
    /// starts. Recorded as written when they name variables, redacted otherwise.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "super::extensions::literal_values_redacted"
    )]
    pub headers: BTreeMap<String, String>,
    /// `blocking` (`stage_start` only): a failure fails the stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<bool>,
    /// `timeout_secs` ([`DEFAULT_HOOK_TIMEOUT_SECS`] when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

impl HookConfig {
    /// Whether a failure fails the stage.
    pub fn is_blocking(&self) -> bool {
        self.blocking.unwrap_or(false)
    }

    /// How long it may run.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_secs.unwrap_or(DEFAULT_HOOK_TIMEOUT_SECS))
    }

    /// Whether it runs for an event about `node_id` (`None` for run events).
    pub fn applies_to(&self, node_id: Option<&str>) -> bool {
        match (&self.nodes, node_id) {
            (None, _) => true,
            (Some(nodes), Some(node_id)) => nodes.iter().any(|node| node == node_id),
            (Some(_), None) => false,
        }
    }
}

/// The events hooks run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// After `WorkflowRunStarted` (new and resumed runs).
    RunStart,
    /// Before `WorkflowRunCompleted`.
    RunComplete,
    /// Before `WorkflowRunFailed` (failed and cancelled runs).
    RunFailed,
    /// After `StageStarted`, before the handler runs.
    StageStart,
    /// After `StageCompleted`.
    StageComplete,
    /// After `HumanQuestion`.
    HumanQuestion,
}

impl HookEvent {
    /// Every event, in the order of SPEC 20.4.
    pub const ALL: [HookEvent; 6] = [
        HookEvent::RunStart,
        HookEvent::RunComplete,
        HookEvent::RunFailed,
        HookEvent::StageStart,
        HookEvent::StageComplete,
        HookEvent::HumanQuestion,
    ];

    /// Its name in the configuration and in hook events.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::RunStart => "run_start",
            HookEvent::RunComplete => "run_complete",
            HookEvent::RunFailed => "run_failed",
            HookEvent::StageStart => "stage_start",
            HookEvent::StageComplete => "stage_complete",
            HookEvent::HumanQuestion => "human_question",
        }
    }

    /// The event called `name`.
    pub fn parse(name: &str) -> Option<HookEvent> {
        HookEvent::ALL
            .into_iter()
            .find(|event| event.as_str() == name)
    }

    /// Whether its events are about a node (so `nodes` applies).
    pub fn is_about_a_node(self) -> bool {
        match self {
            HookEvent::StageStart | HookEvent::StageComplete | HookEvent::HumanQuestion => true,
            HookEvent::RunStart | HookEvent::RunComplete | HookEvent::RunFailed => false,
        }
    }
}

/// `type` of a hook.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookKind {
    /// `sh -c {command}` in the working directory (the default).
    #[default]
    Command,
    /// `POST {url}`.
    Http,
}

impl HookKind {
    /// Its name in the configuration and in hook events.
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Command => "command",
            HookKind::Http => "http",
        }
    }
}

pub(super) const HOOK_KEYS: &[&str] = &[
    "event",
    "nodes",
    "type",
    "command",
    "url",
    "headers",
    "blocking",
    "timeout_secs",
];

/// Reads `[[hooks]]`.
pub(super) fn hooks(root: &Section<'_, '_>) -> Result<Vec<HookConfig>, ConfigError> {
    let Some(value) = root.get("hooks") else {
        return Ok(Vec::new());
    };
    let DeValue::Array(entries) = value.get_ref() else {
        return Err(root.type_error("hooks", value, "an array of tables", value.get_ref()));
    };
    let mut hooks = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let DeValue::Table(table) = entry.get_ref() else {
            return Err(root.type_error("hooks", entry, "an array of tables", entry.get_ref()));
        };
        let prefix = format!("hooks[{}]", index + 1);
        let hook = Section::new(root.context, prefix, table, HOOK_KEYS)?;
        let line = root.context.line(entry.span().start);
        hooks.push(hook_entry(&hook, line)?);
    }
    Ok(hooks)
}

/// One checked entry; `line` is where it starts.
fn hook_entry(hook: &Section<'_, '_>, line: usize) -> Result<HookConfig, ConfigError> {
    let invalid = |key: &str, reason: String| ConfigError::Hook {
        key: hook.child(key),
        file: hook.context.file.to_path_buf(),
        line: hook
            .get(key)
            .map_or(line, |value| hook.context.line(value.span().start)),
        reason,
    };
    let event = match hook.string("event")? {
        None => return Err(invalid("event", "a hook needs an event".to_owned())),
        Some(name) => HookEvent::parse(&name).ok_or_else(|| {
            let names: Vec<&str> = HookEvent::ALL.iter().map(|event| event.as_str()).collect();
            invalid(
                "event",
                format!(
                    "unknown event '{name}'; expected one of {}",
                    names.join(", ")
                ),
            )
        })?,
    };
    let kind = match hook.string("type")?.as_deref() {
        None | Some("command") => HookKind::Command,
        Some("http") => HookKind::Http,
        Some(other) => {
            return Err(invalid(
                "type",
                format!("unknown type '{other}'; expected 'command' or 'http'"),
            ))
        }
    };
    let command = hook.string("command")?;
    let url = hook.string("url")?;
    let headers = hook.string_table("headers")?;
    match kind {
        HookKind::Command if command.as_deref().is_none_or(str::is_empty) => {
            return Err(invalid(
                "command",
                "a command hook needs a command".to_owned(),
            ))
        }
        HookKind::Command if url.is_some() => {
            return Err(invalid("url", "only http hooks have a url".to_owned()))
        }
        HookKind::Command if !headers.is_empty() => {
            return Err(invalid(
                "headers",
                "only http hooks have headers".to_owned(),
            ))
        }
        HookKind::Http if command.is_some() => {
            return Err(invalid(
                "command",
                "only command hooks have a command".to_owned(),
            ))
        }
        HookKind::Http
            if !url
                .as_deref()
                .is_some_and(|url| url.starts_with("http://") || url.starts_with("https://")) =>
        {
            return Err(invalid(
                "url",
                "an http hook needs an http:// or https:// url".to_owned(),
            ))
        }
        HookKind::Command | HookKind::Http => {}
    }
    let blocking = hook.boolean("blocking")?;
    if blocking == Some(true) && event != HookEvent::StageStart {
        return Err(invalid(
            "blocking",
            "only stage_start hooks can be blocking".to_owned(),
        ));
    }
    let nodes = hook.strings("nodes")?;
    if nodes.is_some() && !event.is_about_a_node() {
        return Err(invalid(
            "nodes",
            format!("{} hooks are not about a node", event.as_str()),
        ));
    }
    let timeout_secs = hook.count("timeout_secs")?;
    if timeout_secs == Some(0) {
        return Err(invalid(
            "timeout_secs",
            "a hook's timeout must be at least 1 second".to_owned(),
        ));
    }
    Ok(HookConfig {
        event,
        nodes,
        kind,
        command,
        url,
        headers,
        blocking,
        timeout_secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn check(text: &str) -> Result<super::super::RunConfig, String> {
        super::super::parse(text, Path::new("conf/run.toml")).map_err(|error| error.to_string())
    }

    #[test]
    fn hooks_parse_with_the_keys_of_spec_20_4() {
        let config = check(
            r#"[[hooks]]
event = "stage_start"
nodes = ["deploy"]
type = "command"
command = "./scripts/check-deploy.sh"
blocking = true
timeout_secs = 30

[[hooks]]
event = "run_complete"
type = "http"
url = "https://hooks.example.com/fabro"
headers = { Authorization = "Bearer ${HOOK_TOKEN}", X-Team = "core" }
"#,
        )
        .unwrap();
        let [check_deploy, notify] = &config.hooks[..] else {
            panic!("two hooks: {:?}", config.hooks);
        };
        assert_eq!(check_deploy.event, HookEvent::StageStart);
        assert_eq!(check_deploy.kind, HookKind::Command);
        assert!(check_deploy.is_blocking());
        assert!(check_deploy.applies_to(Some("deploy")));
        assert!(!check_deploy.applies_to(Some("build")));
        assert_eq!(check_deploy.timeout().as_secs(), 30);
        assert_eq!(notify.kind, HookKind::Http);
        assert!(!notify.is_blocking());
        assert!(notify.applies_to(None));
        assert_eq!(notify.timeout().as_secs(), DEFAULT_HOOK_TIMEOUT_SECS);
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(
            json["hooks"][1]["headers"],
            serde_json::json!({"Authorization": "Bearer ${HOOK_TOKEN}", "X-Team": "[REDACTED]"})
        );
        assert_eq!(json["hooks"][0]["type"], "command");
        // The recorded form reads back (resume).
        let back: super::super::RunConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back.hooks[0], *check_deploy);
    }

    #[test]
    fn invalid_entries_name_the_key() {
        let cases = [
            (
                "[[hooks]]\ncommand = \"x\"\n",
                "a hook needs an event: key 'hooks[1].event' in conf/run.toml:1",
            ),
            (
                "[[hooks]]\nevent = \"stage_end\"\ncommand = \"x\"\n",
                "unknown event 'stage_end'; expected one of run_start, run_complete, run_failed, stage_start, stage_complete, human_question: key 'hooks[1].event' in conf/run.toml:2",
            ),
            (
                "[[hooks]]\nevent = \"run_start\"\ncommand = \"x\"\n[[hooks]]\nevent = \"run_start\"\n",
                "a command hook needs a command: key 'hooks[2].command' in conf/run.toml:4",
            ),
            (
                "[[hooks]]\nevent = \"run_start\"\ntype = \"http\"\n",
                "an http hook needs an http:// or https:// url: key 'hooks[1].url' in conf/run.toml:1",
            ),
            (
                "[[hooks]]\nevent = \"run_start\"\ntype = \"grpc\"\n",
                "unknown type 'grpc'; expected 'command' or 'http': key 'hooks[1].type' in conf/run.toml:3",
            ),
            (
                "[[hooks]]\nevent = \"run_start\"\ncommand = \"x\"\nblocking = true\n",
                "only stage_start hooks can be blocking: key 'hooks[1].blocking' in conf/run.toml:4",
            ),
            (
                "[[hooks]]\nevent = \"run_failed\"\ncommand = \"x\"\nnodes = [\"a\"]\n",
                "run_failed hooks are not about a node: key 'hooks[1].nodes' in conf/run.toml:4",
            ),
            (
                "[[hooks]]\nevent = \"stage_start\"\ncommand = \"x\"\ntimeout_secs = 0\n",
                "a hook's timeout must be at least 1 second: key 'hooks[1].timeout_secs' in conf/run.toml:4",
            ),
            (
                "[[hooks]]\nevent = \"stage_start\"\ncommand = \"x\"\nurl = \"http://h\"\n",
                "only http hooks have a url: key 'hooks[1].url' in conf/run.toml:4",
            ),
            (
                "[[hooks]]\nevent = \"stage_start\"\ntype = \"http\"\nurl = \"http://h\"\ncommand = \"x\"\n",
                "only command hooks have a command: key 'hooks[1].command' in conf/run.toml:5",
            ),
            (
                "hooks = 1\n",
                "key 'hooks' in conf/run.toml:1 expects an array of tables, found integer",
            ),
            (
                "[[hooks]]\nevent = \"stage_start\"\ncommand = \"x\"\ntimeout_secs = \"5\"\n",
                "key 'hooks[1].timeout_secs' in conf/run.toml:4 expects a whole number ≥ 0, found string",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(check(text).unwrap_err(), expected, "{text}");
        }
        assert!(check("[[hooks]]\nevent = \"run_start\"\ncomand = \"x\"\n")
            .unwrap_err()
            .starts_with("unknown key 'hooks[1].comand' in conf/run.toml:3; did you mean 'hooks[1].command'?"));
    }

    #[test]
    fn the_hooks_of_every_layer_run_lower_layers_first() {
        let lower = check("[[hooks]]\nevent = \"run_start\"\ncommand = \"settings\"\n").unwrap();
        let higher = check("[[hooks]]\nevent = \"run_start\"\ncommand = \"project\"\n").unwrap();
        let merged = higher.over(lower);
        let commands: Vec<_> = merged
            .hooks
            .iter()
            .map(|hook| hook.command.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(commands, ["settings", "project"]);
    }
}
