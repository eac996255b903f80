//! Integration tests of the provider clients against the twin (`fabro-twin`): every
//! provider's plain and streamed text, tool-call round trips, usage and cost, and every
//! injected fault with its retries, delays and failure class; then failover.

mod failover;
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
    let route = Route {
        provider,
        model: model.to_owned(),
        client: client(provider, twin),
    };
    let resilient =
        Resilient::new(route, Vec::new()).with_timing(sleeper.clone(), Arc::new(FixedJitter(1.0)));
    (resilient, sleeper)
}
