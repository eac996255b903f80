//! The request bodies prompt and agent nodes send to each provider (SPEC 2.10, 10.1
//! item 2): the reasoning-effort mapping (`high` when unset, nothing for models without
//! reasoning) and the catalog's max output as the default `max_tokens`.

use fabro_twin::{Turn, Twin};
use serde_json::Value;

use super::*;
use crate::llm_target::ProviderSettings;

/// Runs node `n` (`shape` `tab` is a prompt node, `box` an agent, `tripleoctagon` a
/// fan-in over branches `a` and `b`) with `attributes`
/// against a twin standing in for `provider` that answers `replies`, then `done`.
async fn run_node(
    provider: &str,
    shape: &str,
    attributes: &str,
    replies: Vec<fabro_twin::Reply>,
) -> (Outcome, Vec<fabro_twin::Recorded>, TestRun) {
    let twin = Twin::start().await.expect("twin");
    twin.enqueue(replies);
    twin.set_fallback(fabro_twin::Reply::Turn(Turn::text("done")));
    let (key, base, base_url) = match provider {
        "anthropic" => ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", twin.base_url()),
        "openai" => (
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            format!("{}/v1", twin.base_url()),
        ),
        "gemini" => ("GEMINI_API_KEY", "GEMINI_BASE_URL", twin.base_url()),
        other => panic!("no provider {other}"),
    };
    let vars = [(key, "fake-key-0001".to_owned()), (base, base_url)];
    let env = |name: &str| {
        vars.iter()
            .find(|(variable, _)| *variable == name)
            .map(|(_, value)| value.clone())
    };
    let providers = ProviderSettings::from_env(&env, &crate::config::LlmConfig::default());
    let defaults = LlmDefaults {
        credentials: providers.credentials(),
        providers,
        ..LlmDefaults::default()
    };
    let workflow = workflow(&format!(
        r#"digraph {{ n [shape={shape}, provider={provider}, prompt="Say done", {attributes}] }}"#
    ));
    let mut run = TestRun::new();
    run.services.llm =
        LlmSetup::resolve(&workflow, &defaults, Arc::default(), false).expect("llm setup");
    run.context.set(
        "parallel.results",
        serde_json::json!([{"id": "a", "status": "success"}, {"id": "b", "status": "success"}]),
    );
    let input = run.input(&workflow, "n");
    let outcome = if shape == "tripleoctagon" {
        crate::handler::fan_in::execute(&input).await
    } else {
        execute(&input).await
    };
    (outcome, twin.requests(), run)
}

/// The body of the first request of a node that succeeds.
async fn first_body(provider: &str, shape: &str, attributes: &str) -> Value {
    let (outcome, requests, _run) = run_node(provider, shape, attributes, Vec::new()).await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert!(!requests.is_empty(), "no request reached the twin");
    requests[0].body.clone()
}

/// The efforts a node can have: each value, and unset (which means `high`).
const EFFORTS: [(&str, &str); 4] = [
    ("reasoning_effort=low", "low"),
    ("reasoning_effort=medium", "medium"),
    ("reasoning_effort=high", "high"),
    ("", "high"),
];

#[tokio::test]
async fn anthropic_requests_carry_the_thinking_budget_and_the_catalog_max_tokens() {
    for shape in ["tab", "box"] {
        for (attribute, effort) in EFFORTS {
            let budget = match effort {
                "low" => 2_048,
                "medium" => 8_192,
                _ => 16_384,
            };
            let body = first_body(
                "anthropic",
                shape,
                &format!("model=\"claude-sonnet-4-6\", {attribute}"),
            )
            .await;
            let context = format!("{shape} node, {attribute:?}: {body}");
            assert_eq!(
                body["thinking"],
                serde_json::json!({"type": "enabled", "budget_tokens": budget}),
                "{context}"
            );
            assert_eq!(body["max_tokens"], 64_000, "{context}");
        }
        // claude-haiku-4-5 has no reasoning: no thinking block, its 8,192 output cap.
        let body = first_body(
            "anthropic",
            shape,
            "model=\"claude-haiku-4-5\", reasoning_effort=high",
        )
        .await;
        assert!(body.get("thinking").is_none(), "{shape}: {body}");
        assert_eq!(body["max_tokens"], 8_192, "{shape}: {body}");
    }
}

#[tokio::test]
async fn openai_requests_carry_the_reasoning_effort_and_the_catalog_max_tokens() {
    for shape in ["tab", "box"] {
        for (attribute, effort) in EFFORTS {
            let body =
                first_body("openai", shape, &format!("model=\"gpt-5.4\", {attribute}")).await;
            let context = format!("{shape} node, {attribute:?}: {body}");
            assert_eq!(
                body["reasoning"],
                serde_json::json!({"effort": effort}),
                "{context}"
            );
            assert_eq!(body["max_output_tokens"], 128_000, "{context}");
        }
        // A model outside the catalog has no known reasoning: no effort, 8,192 tokens.
        let body = first_body("openai", shape, "model=\"gpt-4.1\", reasoning_effort=low").await;
        assert!(body.get("reasoning").is_none(), "{shape}: {body}");
        assert_eq!(body["max_output_tokens"], 8_192, "{shape}: {body}");
    }
}

#[tokio::test]
async fn gemini_requests_carry_the_thinking_budget_and_the_catalog_max_tokens() {
    for shape in ["tab", "box"] {
        for (attribute, effort) in EFFORTS {
            let budget = match effort {
                "low" => 1_024,
                "medium" => 8_192,
                _ => 24_576,
            };
            let body = first_body(
                "gemini",
                shape,
                &format!("model=\"gemini-3.1-pro-preview\", {attribute}"),
            )
            .await;
            let context = format!("{shape} node, {attribute:?}: {body}");
            let generation = &body["generationConfig"];
            assert_eq!(
                generation["thinkingConfig"],
                serde_json::json!({"thinkingBudget": budget}),
                "{context}"
            );
            assert_eq!(generation["maxOutputTokens"], 65_536, "{context}");
        }
        let body = first_body(
            "gemini",
            shape,
            "model=\"gemini-2.0-flash\", reasoning_effort=medium",
        )
        .await;
        let generation = &body["generationConfig"];
        assert!(
            generation.get("thinkingConfig").is_none(),
            "{shape}: {body}"
        );
        assert_eq!(generation["maxOutputTokens"], 8_192, "{shape}: {body}");
    }
}

#[tokio::test]
async fn an_explicit_max_tokens_wins_and_stays_above_the_thinking_budget() {
    let body = first_body(
        "anthropic",
        "tab",
        "model=\"claude-sonnet-4-6\", max_tokens=4000, reasoning_effort=medium",
    )
    .await;
    assert_eq!(body["thinking"]["budget_tokens"], 8_192, "{body}");
    // Anthropic requires max_tokens > budget_tokens: the budget is added on top.
    assert_eq!(body["max_tokens"], 12_192, "{body}");
    let body = first_body("openai", "box", "model=\"gpt-5.4\", max_tokens=4000").await;
    assert_eq!(body["max_output_tokens"], 4_000, "{body}");
    assert_eq!(body["reasoning"]["effort"], "high", "{body}");
}

#[tokio::test]
async fn anthropic_thinking_blocks_go_back_with_the_tool_results() {
    // The real API rejects a tool-use continuation whose assistant turn lost its
    // thinking block; the twin does the same (SPEC 10.1 item 1).
    let first = Turn::text("Writing it.")
        .with_thinking("The user wants a file.", "sig-0001")
        .with_tool_call(
            "toolu_1",
            "write_file",
            r#"{"file_path": "a.txt", "content": "hi"}"#,
        );
    let (outcome, requests, run) = run_node(
        "anthropic",
        "box",
        r#"model="claude-sonnet-4-6""#,
        vec![fabro_twin::Reply::Turn(first)],
    )
    .await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert_eq!(outcome.files_touched, ["a.txt"]);
    assert_eq!(
        fs_err::read_to_string(run.work_dir.join("a.txt")).unwrap(),
        "hi"
    );
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().expect("messages");
    let assistant = &messages[1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"][0],
        serde_json::json!({"type": "thinking", "thinking": "The user wants a file.", "signature": "sig-0001"})
    );
    assert_eq!(assistant["content"][1]["type"], "text");
    assert_eq!(assistant["content"][2]["type"], "tool_use");
}

#[tokio::test]
async fn fan_in_evaluation_carries_the_effort_too() {
    let (outcome, requests, _run) = run_node(
        "openai",
        "tripleoctagon",
        r#"model="gpt-5.4", reasoning_effort=low"#,
        vec![fabro_twin::Reply::text(r#"{"best_id": "b"}"#)],
    )
    .await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert_eq!(outcome.context_updates["parallel.fan_in.best_id"], "b");
    assert_eq!(requests[0].body["reasoning"]["effort"], "low");
    assert_eq!(requests[0].body["max_output_tokens"], 128_000);
}
