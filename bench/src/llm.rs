//! LLM layer overhead (issue 5), in process against the twin.
//!
//! Streaming: the twin streams a 1 MB reply in 1 KiB text deltas (about 1,000 SSE
//! events). The baseline downloads the same reply with a bare `reqwest` POST and drops
//! the bytes; each provider client then decodes, assembles and forwards the deltas. The
//! overhead is the difference of process CPU time (client and twin share the process, so
//! the twin's work cancels out), median of nine runs. Concurrency: 100 calls at once
//! through one client per provider, counting errors. Then prompt caching (`caching`).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use fabro_llm::{Message, Provider, Request, StreamEvent};

use crate::twin_client::client;
use fabro_twin::{Reply, Turn, Twin};

const PROVIDERS: [(Provider, &str); 4] = [
    (Provider::Anthropic, "claude-sonnet-4-6"),
    (Provider::OpenAi, "gpt-5.4"),
    (Provider::Gemini, "gemini-3-flash-preview"),
    (Provider::OpenAiCompatible, "llama3.1:8b"),
];
const RUNS: usize = 9;
const REPLY_BYTES: usize = 1 << 20;

/// Runs both workloads and returns a Markdown report.
pub(crate) fn llm_benchmark() -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start tokio: {error}"))?;
    runtime.block_on(run())
}

async fn run() -> Result<String, String> {
    let twin = Twin::start()
        .await
        .map_err(|error| format!("cannot start the twin: {error}"))?;
    let text: String = "0123456789abcdef".repeat(REPLY_BYTES / 16);
    let mut big = Turn::text(&text);
    big.chunk_size = 1024;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| provider | raw transfer CPU | client CPU | overhead | wall (client) | deltas |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for (provider, model) in PROVIDERS {
        let client = client(provider, &twin)?;
        let bare = reqwest::Client::new();
        let request = request(model);
        let mut raw = Vec::new();
        let mut decoded = Vec::new();
        let mut walls = Vec::new();
        let mut deltas = 0;
        for run in 0..=RUNS {
            twin.set_fallback(Reply::Turn(big.clone()));
            let before = cpu();
            let bytes = raw_transfer(&bare, provider, &twin, &request).await?;
            let raw_cpu = cpu() - before;
            if bytes < REPLY_BYTES {
                return Err(format!("{provider}: raw transfer got only {bytes} bytes"));
            }
            let mut count = 0;
            let mut sink = |event: &StreamEvent| {
                if matches!(event, StreamEvent::TextDelta(_)) {
                    count += 1;
                }
            };
            let started = Instant::now();
            let before = cpu();
            let response = client
                .complete_streaming(&request, &mut sink)
                .await
                .map_err(|error| format!("{provider}: {error}"))?;
            let client_cpu = cpu() - before;
            let wall = started.elapsed();
            if response.text.len() != text.len() {
                return Err(format!("{provider}: reply truncated"));
            }
            // The first run warms connections and allocators.
            if run > 0 {
                raw.push(raw_cpu);
                decoded.push(client_cpu);
                walls.push(wall);
            }
            deltas = count;
        }
        let raw = median(&mut raw);
        let decoded = median(&mut decoded);
        let _ = writeln!(
            out,
            "| {provider} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {deltas} |",
            ms(raw),
            ms(decoded),
            ms(decoded.saturating_sub(raw)),
            ms(median(&mut walls)),
        );
    }
    twin.set_fallback(Reply::text("a short concurrent reply"));
    let _ = writeln!(out);
    let _ = writeln!(out, "| provider | concurrent calls | errors | wall |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (provider, model) in PROVIDERS {
        let client = client(provider, &twin)?;
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for index in 0..100 {
            let client = client.clone();
            let mut request = request(model);
            request.node_id = format!("n{index}");
            tasks.spawn(async move { client.complete(&request).await });
        }
        let mut errors = 0;
        let mut calls = 0;
        while let Some(result) = tasks.join_next().await {
            calls += 1;
            if !matches!(result, Ok(Ok(_))) {
                errors += 1;
            }
        }
        let _ = writeln!(
            out,
            "| {provider} | {calls} | {errors} | {:.1} ms |",
            ms(started.elapsed())
        );
    }
    let _ = writeln!(
        out,
        "\nPrompt caching, a 30-turn agent session per wire (SPEC 10.8):\n"
    );
    out.push_str(&crate::caching::caching_table().await?);
    Ok(out)
}

pub(crate) fn request(model: &str) -> Request {
    Request {
        model: model.to_owned(),
        messages: vec![Message::user("Stream a megabyte")],
        node_id: "bench".to_owned(),
        ..Request::default()
    }
}

/// The same request the client would send, read with a bare reqwest loop.
async fn raw_transfer(
    bare: &reqwest::Client,
    provider: Provider,
    twin: &Twin,
    request: &Request,
) -> Result<usize, String> {
    let path = match provider {
        Provider::Anthropic => "/v1/messages".to_owned(),
        Provider::OpenAi => "/v1/responses".to_owned(),
        Provider::Gemini => format!(
            "/v1beta/models/{}:streamGenerateContent?alt=sse",
            request.model
        ),
        Provider::OpenAiCompatible | Provider::Simulated => "/v1/chat/completions".to_owned(),
    };
    let body = format!("{{\"model\": \"{}\", \"stream\": true}}", request.model);
    let mut response = bare
        .post(format!("{}{path}", twin.base_url()))
        .body(body)
        .send()
        .await
        .map_err(|error| error.to_string())?;
    let mut bytes = 0;
    while let Some(chunk) = response.chunk().await.map_err(|error| error.to_string())? {
        bytes += chunk.len();
    }
    Ok(bytes)
}

fn cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

fn median(values: &mut [Duration]) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
