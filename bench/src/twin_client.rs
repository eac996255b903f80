//! Provider clients of fabro-llm pointed at a twin, as the benchmarks make them.

use std::sync::Arc;

use fabro_llm::{http_client, ApiKey, HttpSettings, LlmClient, Provider};
use fabro_twin::Twin;

/// A client of `provider`'s wire format talking to `twin`.
pub(crate) fn client(provider: Provider, twin: &Twin) -> Result<Arc<dyn LlmClient>, String> {
    let settings = HttpSettings::new(base_url(provider, twin)).with_key(ApiKey::new("bench-key"));
    http_client(provider, settings)
        .ok_or("not an HTTP provider")?
        .map_err(|error| error.to_string())
}

fn base_url(provider: Provider, twin: &Twin) -> String {
    match provider {
        Provider::OpenAi | Provider::OpenAiCompatible => format!("{}/v1", twin.base_url()),
        Provider::Anthropic | Provider::Gemini | Provider::Simulated => twin.base_url(),
    }
}
