//! Integration tests of the provider clients against the twin (`fabro-twin`): every
//! provider's plain and streamed text, tool-call round trips, usage and cost, and every
//! injected fault with its retries, delays and failure class; then failover.

mod failover;
mod gateway;
mod provider;

use std::sync::Arc;
use std::time::Duration;

use fabro_llm::{
    http_client, ApiKey, FixedJitter, HttpSettings, LlmClient, Provider, RecordingSleeper,
    Resilient, Route,
};
use fabro_twin::Twin;

/// The fake key every test uses; it must never appear in an error.
pub(crate) const KEY: &str = "sk-twin-test-key-0123456789";

/// Settings pointing `provider` at `twin` (SPEC 10.1 base URL conventions).
pub(crate) fn settings(provider: Provider, twin: &Twin) -> HttpSettings {
    let base = match provider {
        Provider::OpenAi | Provider::OpenAiCompatible => format!("{}/v1", twin.base_url()),
        Provider::Anthropic | Provider::Gemini | Provider::Simulated => twin.base_url(),
    };
    let mut settings = HttpSettings::new(base).with_key(ApiKey::new(KEY));
    settings.idle_timeout = Duration::from_millis(300);
    settings
}

pub(crate) fn client(provider: Provider, twin: &Twin) -> Arc<dyn LlmClient> {
    http_client(provider, settings(provider, twin))
        .expect("an HTTP provider")
        .expect("the client builds")
}

/// A retrying client on one route whose sleeps are recorded, not waited.
pub(crate) fn resilient(
    provider: Provider,
    model: &str,
    twin: &Twin,
) -> (Resilient, Arc<RecordingSleeper>) {
    let sleeper = Arc::new(RecordingSleeper::default());
    let route = Route::new(provider, model.to_owned(), client(provider, twin));
    let resilient =
        Resilient::new(route, Vec::new()).with_timing(sleeper.clone(), Arc::new(FixedJitter(1.0)));
    (resilient, sleeper)
}

#[tokio::test]
async fn compatible_servers_get_extra_headers_and_work_without_a_key() {
    let twin = Twin::start().await.expect("twin starts");
    let mut settings = HttpSettings::new(format!("{}/v1", twin.base_url()));
    settings.headers = vec![("X-Gateway-Team".to_owned(), "fabro".to_owned())];
    let client = http_client(Provider::OpenAiCompatible, settings)
        .expect("an HTTP provider")
        .expect("builds");
    let request = fabro_llm::Request {
        model: "qwen2.5-coder".to_owned(),
        messages: vec![fabro_llm::Message::user("hi")],
        ..fabro_llm::Request::default()
    };
    let response = client.complete(&request).await.expect("succeeds");
    assert_eq!(response.text, "twin reply");
    assert_eq!(response.usage.cost_usd, None, "no catalog price");
    let recorded = &twin.requests()[0];
    assert_eq!(recorded.header("x-gateway-team"), Some("fabro"));
    assert_eq!(recorded.header("authorization"), None);
}

#[tokio::test]
async fn missing_keys_and_unreachable_servers_are_classified() {
    // A port nobody listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let settings = HttpSettings::new(format!("http://127.0.0.1:{port}")).with_key(ApiKey::new(KEY));
    let client = http_client(Provider::Anthropic, settings)
        .expect("an HTTP provider")
        .expect("builds");
    let request = fabro_llm::Request {
        model: "claude-sonnet-4-6".to_owned(),
        ..fabro_llm::Request::default()
    };
    let error = client.complete(&request).await.expect_err("refused");
    assert_eq!(error.kind, fabro_llm::LlmErrorKind::Network);
    assert_eq!(error.kind.failure_class().as_str(), "transient_infra");
    let keyless = http_client(Provider::Gemini, HttpSettings::new("http://127.0.0.1:9"))
        .expect("an HTTP provider")
        .expect("builds");
    let error = keyless.complete(&request).await.expect_err("no key");
    assert_eq!(error.kind, fabro_llm::LlmErrorKind::Configuration);
}
