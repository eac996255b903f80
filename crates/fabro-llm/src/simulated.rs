//! The simulated provider (SPEC 10.1.5): deterministic, offline, scriptable per node.
//!
//! Without a script every call answers `[Simulated] Response for stage: {node_id}`. A
//! responses file scripts calls per node; each call for a node consumes that node's next
//! entry, the last entry repeating once the list is exhausted. The per-node cursors are
//! exposed so that checkpoints can save and restore them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;

use crate::client::{BoxFuture, LlmClient};
use crate::error::{LlmError, LlmErrorKind};
use crate::message::{Request, Response, ToolCall, Usage};
use crate::stream::{replay_response, StreamSink};

/// The text returned when nothing is scripted for a node.
pub fn unscripted_text(node_id: &str) -> String {
    format!("[Simulated] Response for stage: {node_id}")
}

/// A parsed responses file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Context window the simulated model reports.
    #[serde(default)]
    pub context_window: Option<u32>,
    /// Scripted entries per node id.
    #[serde(default)]
    pub nodes: HashMap<String, Vec<Entry>>,
    /// Entry for nodes without a list.
    #[serde(default)]
    pub default: Option<Entry>,
}

/// One scripted reply.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Reply text.
    #[serde(default)]
    pub text: Option<String>,
    /// A JSON value replied as compact JSON text (structured output); `text` wins.
    #[serde(default)]
    pub json: Option<serde_json::Value>,
    /// Tool calls to request.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedToolCall>,
    /// An error to fail with instead of replying.
    #[serde(default)]
    pub error: Option<ScriptedError>,
    /// Delay before replying.
    #[serde(default)]
    pub delay_ms: Option<u64>,
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    /// Tool name.
    pub name: String,
    /// Arguments.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// A scripted error.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedError {
    /// Error kind, e.g. `rate_limit`.
    pub kind: String,
    /// Retry-After in seconds.
    #[serde(default)]
    pub retry_after: Option<u64>,
}

/// Why a responses file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// Not valid JSON of the expected shape.
    #[error("invalid simulated responses file at line {line}, column {column}: {message}")]
    Invalid {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// An error entry names an unknown kind.
    #[error("invalid simulated responses file: unknown error kind '{0}'")]
    UnknownErrorKind(String),
}

impl Script {
    /// Parses a responses file.
    pub fn parse(text: &str) -> Result<Script, ScriptError> {
        let script: Script = serde_json::from_str(text).map_err(|error| ScriptError::Invalid {
            line: error.line(),
            column: error.column(),
            message: error.to_string(),
        })?;
        let entries = script.nodes.values().flatten().chain(script.default.iter());
        for entry in entries {
            if let Some(error) = &entry.error {
                if LlmErrorKind::parse(&error.kind).is_none() {
                    return Err(ScriptError::UnknownErrorKind(error.kind.clone()));
                }
            }
        }
        Ok(script)
    }
}

/// The simulated provider.
#[derive(Debug, Default)]
pub struct SimulatedClient {
    script: Script,
    cursors: Mutex<BTreeMap<String, u64>>,
}

impl SimulatedClient {
    /// A client following `script` (an empty script answers every call unscripted).
    pub fn new(script: Script) -> SimulatedClient {
        SimulatedClient {
            script,
            cursors: Mutex::new(BTreeMap::new()),
        }
    }

    /// Entries consumed per node, for checkpoints.
    pub fn cursors(&self) -> BTreeMap<String, u64> {
        self.lock().clone()
    }

    /// Restores cursors saved by [`SimulatedClient::cursors`].
    pub fn restore_cursors(&self, cursors: BTreeMap<String, u64>) {
        *self.lock() = cursors;
    }

    /// The context window the script declares, if any.
    pub fn context_window(&self) -> Option<u32> {
        self.script.context_window
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        // A poisoned lock only means another call panicked mid-update of a counter map,
        // which stays consistent; keep using it.
        self.cursors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entry the next call for `node_id` gets, advancing its cursor.
    fn next_entry(&self, node_id: &str) -> Option<Entry> {
        if let Some(entries) = self
            .script
            .nodes
            .get(node_id)
            .filter(|entries| !entries.is_empty())
        {
            let mut cursors = self.lock();
            let cursor = cursors.entry(node_id.to_owned()).or_insert(0);
            let index = usize::try_from(*cursor)
                .unwrap_or(usize::MAX)
                .min(entries.len() - 1);
            *cursor += 1;
            return Some(entries[index].clone());
        }
        self.script.default.clone()
    }
}

impl LlmClient for SimulatedClient {
    /// The scripted turn, reported to `sink` once complete ([`replay_response`]).
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(async move {
            let entry = self.next_entry(&request.node_id).unwrap_or_default();
            if let Some(delay) = entry.delay_ms {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if let Some(error) = &entry.error {
                let kind = LlmErrorKind::parse(&error.kind).unwrap_or(LlmErrorKind::Server);
                return Err(LlmError {
                    kind,
                    provider: "simulated".to_owned(),
                    message: format!("simulated {} error", kind.as_str()),
                    status: None,
                    retry_after: error.retry_after.map(Duration::from_secs),
                });
            }
            let tool_calls: Vec<ToolCall> = entry
                .tool_calls
                .iter()
                .enumerate()
                .map(|(index, call)| ToolCall {
                    id: format!("call_sim_{index}"),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                })
                .collect();
            let text = match entry
                .text
                .or_else(|| entry.json.as_ref().map(ToString::to_string))
            {
                Some(text) => text,
                None if tool_calls.is_empty() => unscripted_text(&request.node_id),
                None => String::new(),
            };
            let usage = Usage {
                input_tokens: request.characters().div_ceil(4) as u64,
                output_tokens: text.chars().count().div_ceil(4) as u64,
                cost_usd: Some(0.0),
                ..Usage::default()
            };
            let response = Response {
                text,
                tool_calls,
                usage,
                model: request.model.clone(),
                thinking: Vec::new(),
            };
            replay_response(&response, sink);
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    fn request(node_id: &str) -> Request {
        Request {
            model: "simulated".to_owned(),
            system: None,
            messages: vec![Message::user("12345678")],
            node_id: node_id.to_owned(),
            ..Request::default()
        }
    }

    #[tokio::test]
    async fn unscripted_calls_answer_deterministically() {
        let client = SimulatedClient::default();
        let response = client.complete(&request("plan")).await.expect("succeeds");
        assert_eq!(response.text, "[Simulated] Response for stage: plan");
        assert_eq!(response.usage.input_tokens, 2);
        assert_eq!(response.usage.output_tokens, 9);
    }

    #[tokio::test]
    async fn scripts_advance_per_node_and_repeat_the_last_entry() {
        let script = Script::parse(
            r#"{"nodes": {"review": [{"text": "one"}, {"error": {"kind": "rate_limit", "retry_after": 1}}, {"text": "last"}]},
                "default": {"text": "ok"}}"#,
        )
        .expect("valid script");
        let client = SimulatedClient::new(script);
        let texts = [
            client.complete(&request("review")).await.map(|r| r.text),
            client.complete(&request("review")).await.map(|r| r.text),
            client.complete(&request("review")).await.map(|r| r.text),
            client.complete(&request("review")).await.map(|r| r.text),
            client.complete(&request("other")).await.map(|r| r.text),
        ];
        assert_eq!(texts[0].as_deref(), Ok("one"));
        let error = texts[1].as_ref().expect_err("scripted error");
        assert_eq!(error.kind, LlmErrorKind::RateLimit);
        assert_eq!(error.retry_after, Some(Duration::from_secs(1)));
        assert_eq!(texts[2].as_deref(), Ok("last"));
        assert_eq!(texts[3].as_deref(), Ok("last"));
        assert_eq!(texts[4].as_deref(), Ok("ok"));
        assert_eq!(client.cursors(), BTreeMap::from([("review".to_owned(), 4)]));
        client.restore_cursors(BTreeMap::from([("review".to_owned(), 0)]));
        assert_eq!(
            client
                .complete(&request("review"))
                .await
                .map(|r| r.text)
                .as_deref(),
            Ok("one")
        );
    }

    #[test]
    fn invalid_scripts_are_rejected_with_positions() {
        let error = Script::parse("{\n  \"nodes\": 5 }").expect_err("invalid");
        assert!(error.to_string().contains("line 2"), "{error}");
        let error =
            Script::parse(r#"{"default": {"error": {"kind": "meteor"}}}"#).expect_err("invalid");
        assert!(error.to_string().contains("meteor"));
        assert!(Script::parse(r#"{"nodez": {}}"#).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn json_entries_delays_and_streaming() {
        let script = Script::parse(
            r#"{"nodes": {"n": [{"json": {"verdict": "ok", "score": 3}, "delay_ms": 5000},
                                {"tool_calls": [{"name": "shell", "arguments": {"command": "ls"}}]}]}}"#,
        )
        .expect("valid script");
        let client = SimulatedClient::new(script);
        let started = tokio::time::Instant::now();
        let mut deltas = Vec::new();
        let mut sink = |event: &crate::stream::StreamEvent| deltas.push(event.clone());
        let response = client
            .complete_streaming(&request("n"), &mut sink)
            .await
            .expect("succeeds");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&response.text).ok(),
            Some(serde_json::json!({"verdict": "ok", "score": 3}))
        );
        assert_eq!(
            deltas,
            [crate::stream::StreamEvent::TextDelta(response.text.clone())]
        );
        let second = client.complete(&request("n")).await.expect("succeeds");
        assert_eq!(second.tool_calls[0].name, "shell");
        assert_eq!(second.tool_calls[0].arguments["command"], "ls");
        assert_eq!(second.text, "");
    }
}
