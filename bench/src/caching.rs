//! Prompt caching (issue 33, SPEC 10.8), in process against the twin: a 30-turn agent
//! session per wire (29 `write_file` calls, then an answer), through fabro's own agent
//! loop and provider clients.
//!
//! Anthropic: the twin bills each request by Anthropic's caching rules; the report is
//! the stage's input billed at cache prices (reads 0.1x, writes 1.25x) over its uncached
//! price (goal: at most 0.35). OpenAI Responses, Gemini and Chat Completions cache
//! implicitly on a stable prefix: the report is the share of requests after the first
//! whose tools, system prompt and every earlier message are byte-identical to the
//! previous request's (goal: all of them).

use std::fmt::Write as _;
use std::sync::Arc;

use fabro_agent::{AgentConfig, AgentSession, ToolProfile, ToolRegistry};
use fabro_llm::{Provider, Usage};
use fabro_twin::{Recorded, Reply, Turn, Twin};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::twin_client::client;

const TURNS: usize = 30;

const WIRES: [(Provider, &str); 4] = [
    (Provider::Anthropic, "claude-sonnet-4-6"),
    (Provider::OpenAi, "gpt-5.4"),
    (Provider::Gemini, "gemini-3-flash-preview"),
    (Provider::OpenAiCompatible, "llama3.1:8b"),
];

/// `fabro-bench caching`: the table alone.
pub(crate) fn caching_benchmark() -> Result<String, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start tokio: {error}"))?
        .block_on(caching_table())
}

/// The caching table, as Markdown.
pub(crate) async fn caching_table() -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| wire | requests | billed / uncached input (Anthropic) | requests with the previous prefix intact |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (provider, model) in WIRES {
        let (requests, usage) = session(provider, model).await?;
        let billed = match provider {
            Provider::Anthropic => format!("{:.3}x", billed_ratio(&usage)),
            _ => "–".to_owned(),
        };
        let stable = stable_prefixes(&requests);
        let _ = writeln!(
            out,
            "| {provider} | {} | {billed} | {stable} of {} |",
            requests.len(),
            requests.len().saturating_sub(1)
        );
    }
    Ok(out)
}

/// The requests of one 30-turn session on `provider`, and the session's usage.
async fn session(provider: Provider, model: &str) -> Result<(Vec<Recorded>, Usage), String> {
    let twin = Twin::start()
        .await
        .map_err(|error| format!("cannot start the twin: {error}"))?;
    if provider == Provider::Anthropic {
        twin.apply_prompt_caching();
    }
    let dir = std::env::temp_dir().join(format!(
        "fabro-bench-caching-{}-{provider}",
        std::process::id()
    ));
    fs_err::create_dir_all(&dir).map_err(|error| error.to_string())?;
    let turns = (1..TURNS)
        .map(|turn| {
            let arguments = serde_json::json!({"file_path": format!("notes/{turn}.txt"),
                                               "content": format!("note {turn}\n")});
            Turn::text("").with_tool_call(
                &format!("call_{turn}"),
                "write_file",
                &arguments.to_string(),
            )
        })
        .chain([Turn::text("Wrote the notes.")]);
    twin.enqueue(turns.map(Reply::Turn));
    twin.set_fallback(Reply::bad_request());
    let mut config = AgentConfig::new(provider, model, "bench", &dir);
    config.prompt_cache = Some("bench:bench".to_owned());
    config.project_memory = false;
    config.date = Some("2026-01-01".to_owned());
    let tools = ToolRegistry::for_profile(ToolProfile::for_provider(provider));
    let mut session = AgentSession::new(
        config,
        client(provider, &twin)?,
        tools,
        Arc::new(fabro_agent::NullSink),
    )
    .map_err(|error| error.to_string())?;
    let outcome = session
        .run("Write thirty notes.", &CancellationToken::new())
        .await
        .map_err(|error| error.to_string());
    let _ = fs_err::remove_dir_all(&dir);
    let outcome = outcome?;
    if let Some(failure) = outcome.failure {
        return Err(format!(
            "{provider}: the session failed: {}",
            failure.reason
        ));
    }
    Ok((twin.requests(), outcome.usage))
}

/// Input billed at cache prices (reads 0.1x, writes 1.25x) over its uncached price.
fn billed_ratio(usage: &Usage) -> f64 {
    if usage.input_tokens == 0 {
        return 1.0;
    }
    let plain = usage
        .input_tokens
        .saturating_sub(usage.cache_read_tokens + usage.cache_write_tokens);
    (plain as f64 + 0.1 * usage.cache_read_tokens as f64 + 1.25 * usage.cache_write_tokens as f64)
        / usage.input_tokens as f64
}

/// How many requests keep the previous request's tools, system prompt and messages
/// byte for byte (cache markers aside) and only append to them.
fn stable_prefixes(requests: &[Recorded]) -> usize {
    requests
        .windows(2)
        .filter(|pair| extends(&parts(&pair[0].body), &parts(&pair[1].body)))
        .count()
}

/// A request's prefix parts: everything but the conversation, and the conversation's
/// items, each serialised without cache markers.
fn parts(body: &Value) -> (String, Vec<String>) {
    let mut body = body.clone();
    strip_markers(&mut body);
    let key = ["messages", "input", "contents"]
        .into_iter()
        .find(|key| body.get(key).is_some())
        .unwrap_or("messages");
    let items = body
        .as_object_mut()
        .and_then(|object| object.remove(key))
        .and_then(|items| items.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(Value::to_string)
        .collect();
    (body.to_string(), items)
}

fn extends(previous: &(String, Vec<String>), next: &(String, Vec<String>)) -> bool {
    previous.0 == next.0 && next.1.starts_with(&previous.1)
}

fn strip_markers(value: &mut Value) {
    match value {
        Value::Object(object) => {
            object.remove("cache_control");
            object.values_mut().for_each(strip_markers);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_markers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_request_extends_the_previous_one_only_when_its_prefix_is_untouched() {
        let first = json!({"system": "s", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "go", "cache_control": {"type": "ephemeral"}}]}]});
        let appended = json!({"system": "s", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": "ok"}]});
        let rewritten = json!({"system": "s2", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "go"}]}]});
        let edited = json!({"system": "s", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "GO"}]}]});
        assert!(extends(&parts(&first), &parts(&appended)), "markers aside");
        assert!(!extends(&parts(&first), &parts(&rewritten)));
        assert!(!extends(&parts(&first), &parts(&edited)));
        let input = |items: Value| json!({"model": "m", "input": items});
        assert!(extends(
            &parts(&input(json!([1]))),
            &parts(&input(json!([1, 2])))
        ));
    }
}
