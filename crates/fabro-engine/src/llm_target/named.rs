//! Providers known by name beyond the built-in ones (SPEC 10.7): the presets and the
//! `[llm.providers.NAME]` of the configuration, each spoken to by one of the four HTTP
//! clients (its wire). [`named_providers`] reads their keys and `${VAR}` header values
//! from the environment; [`PricedClient`] prices calls of models the catalog does not
//! know from the provider's model table.

use std::collections::BTreeMap;
use std::sync::Arc;

use fabro_llm::{ApiKey, BoxFuture, LlmClient, LlmError, Provider, Request, Response, StreamSink};

use crate::config::{preset_named, LlmConfig, ModelConfig, PRESETS, WIRES};

/// A preset or configured provider, with its key and headers read from the environment.
/// `Debug` prints the key redacted and header names only.
#[derive(Clone)]
pub struct NamedProvider {
    /// The wire (client) that speaks to it.
    pub wire: Provider,
    /// Its base URL (`{NAME}_BASE_URL` over the configuration over the preset's).
    pub base_url: String,
    /// The variable holding its key.
    pub key_env: Option<String>,
    /// Whether a run fails without the key.
    pub key_required: bool,
    /// The key, when its variable is set.
    pub key: Option<ApiKey>,
    /// Extra headers, `${VAR}` values read from the environment.
    pub headers: Vec<(String, String)>,
    /// The `${VAR}` header variables that are not set.
    pub missing_header_variables: Vec<String>,
    /// The model table.
    pub models: BTreeMap<String, ModelConfig>,
}

impl std::fmt::Debug for NamedProvider {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("NamedProvider")
            .field("wire", &self.wire)
            .field("base_url", &self.base_url)
            .field("key_env", &self.key_env)
            .field("key", &self.key)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(name, _)| name)
                    .collect::<Vec<_>>(),
            )
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl NamedProvider {
    /// The limits its model table gives `model` (none for a model it does not list).
    pub fn limits_of(&self, model: &str) -> ModelLimits {
        self.models
            .get(model)
            .map(|table| ModelLimits {
                context_window: table.context_window,
                max_output: table
                    .max_output
                    .map(|tokens| u32::try_from(tokens).unwrap_or(u32::MAX)),
            })
            .unwrap_or_default()
    }

    /// The variable a run lacks to use this provider: the key's (when required) or a
    /// `${VAR}` of its headers.
    pub fn missing_variable(&self) -> Option<String> {
        match (&self.key, &self.key_env) {
            (None, Some(variable)) if self.key_required => Some(variable.clone()),
            _ => self.missing_header_variables.first().cloned(),
        }
    }

    /// The table model closest to `original` by input+output price (SPEC 9.4): the
    /// original's price from the catalog, unpriced models count as 0; ties go to the
    /// smallest id. `None` for an empty table.
    pub fn closest_model(&self, original: &str) -> Option<String> {
        let price = |input: f64, output: f64| input + output;
        let target = fabro_llm::catalog::find(original)
            .map_or(0.0, |info| price(info.input_price, info.output_price));
        self.models
            .iter()
            .map(|(id, model)| {
                let usd = price(
                    model.input_price.map_or(0.0, |p| p.usd()),
                    model.output_price.map_or(0.0, |p| p.usd()),
                );
                ((usd - target).abs(), id)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)))
            .map(|(_, id)| id.clone())
    }
}

/// `context_window` and `max_output` of a configured model (SPEC 10.7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelLimits {
    /// Tokens the model reads: the agent session compacts before it (SPEC 6.8).
    pub context_window: Option<u64>,
    /// Tokens the model writes: the output cap of requests that set none.
    pub max_output: Option<u32>,
}

impl ModelLimits {
    /// The output cap of a request: the node's `max_tokens`, else the model table's.
    pub fn max_tokens(&self, node: Option<u32>) -> Option<u32> {
        node.or(self.max_output)
    }
}

/// The variable overriding a preset's or configured provider's base URL.
pub(crate) fn base_url_variable(name: &str) -> String {
    format!("{}_BASE_URL", name.to_ascii_uppercase().replace('-', "_"))
}

/// The value of a variable that holds a credential of a configured provider (its
/// `api_key_env`, or a `${VAR}` header), added to the process's secrets whatever its
/// name (SPEC 10.7's `GATEWAY_KEY`): redacted everywhere, left out of child
/// environments like the variables taken at start-up (13.1, 13.5).
fn credential(env: &dyn Fn(&str) -> Option<String>, variable: &str) -> Option<String> {
    let value = env(variable)?;
    fabro_llm::redact::adopt(variable, &value);
    Some(value)
}

/// The presets and the configured providers of `config`, by name.
pub(super) fn named_providers(
    env: &dyn Fn(&str) -> Option<String>,
    config: &LlmConfig,
) -> BTreeMap<String, NamedProvider> {
    let mut providers = BTreeMap::new();
    for preset in PRESETS {
        if config.providers.contains_key(preset.name) {
            continue;
        }
        let key_env = preset.key_env.map(str::to_owned);
        providers.insert(
            preset.name.to_owned(),
            NamedProvider {
                wire: Provider::OpenAiCompatible,
                base_url: env(&base_url_variable(preset.name))
                    .unwrap_or_else(|| preset.base_url.to_owned()),
                key: key_env.as_deref().and_then(env).map(ApiKey::new),
                key_env,
                key_required: preset.key_required,
                headers: Vec::new(),
                missing_header_variables: Vec::new(),
                models: BTreeMap::new(),
            },
        );
    }
    for (name, configured) in &config.providers {
        let preset = preset_named(name);
        let wire = WIRES
            .iter()
            .find(|(wire, _)| *wire == configured.wire)
            .and_then(|(_, provider)| Provider::parse(provider))
            .unwrap_or(Provider::OpenAiCompatible);
        let key_env = configured
            .api_key_env
            .clone()
            .or_else(|| preset.and_then(|preset| preset.key_env).map(str::to_owned));
        let mut headers = Vec::new();
        let mut missing = Vec::new();
        for (header, value) in &configured.headers {
            match value
                .strip_prefix("${")
                .and_then(|rest| rest.strip_suffix('}'))
            {
                Some(variable) => match credential(env, variable) {
                    Some(value) => headers.push((header.clone(), value)),
                    None => missing.push(variable.to_owned()),
                },
                None => headers.push((header.clone(), value.clone())),
            }
        }
        let base_url = env(&base_url_variable(name))
            .or_else(|| configured.base_url.clone())
            .or_else(|| preset.map(|preset| preset.base_url.to_owned()))
            .unwrap_or_default();
        providers.insert(
            name.clone(),
            NamedProvider {
                wire,
                base_url,
                key: key_env
                    .as_deref()
                    .and_then(|variable| credential(env, variable))
                    .map(ApiKey::new),
                // A configured `api_key_env` must be set; a preset's optional key stays so.
                key_required: configured.api_key_env.is_some()
                    || preset.is_none_or(|preset| preset.key_required),
                key_env,
                headers,
                missing_header_variables: missing,
                models: configured.models.clone(),
            },
        );
    }
    providers
}

/// A client that prices calls of models its provider's table prices and the catalog
/// does not (SPEC 10.7).
pub(super) struct PricedClient {
    /// The provider's client.
    pub(super) inner: Arc<dyn LlmClient>,
    /// The provider's model table.
    pub models: BTreeMap<String, ModelConfig>,
}

impl PricedClient {
    fn price(&self, request: &Request, response: &mut Response) {
        if response.usage.cost_usd.is_some() {
            return;
        }
        let Some(model) = self
            .models
            .get(&response.model)
            .or_else(|| self.models.get(&request.model))
        else {
            return;
        };
        let (Some(input), Some(output)) = (model.input_price, model.output_price) else {
            return;
        };
        let usage = &response.usage;
        let cache_read = model.cache_read_price.unwrap_or(input).usd();
        let uncached = usage.input_tokens.saturating_sub(usage.cache_read_tokens);
        let dollars = uncached as f64 * input.usd()
            + usage.cache_read_tokens as f64 * cache_read
            + usage.output_tokens as f64 * output.usd();
        response.usage.cost_usd = Some(dollars / 1_000_000.0);
    }
}

impl LlmClient for PricedClient {
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(async move {
            let mut response = self.inner.complete_streaming(request, sink).await?;
            self.price(request, &mut response);
            Ok(response)
        })
    }
}

/// A built-in provider with its name.
pub(super) fn built_in(provider: Provider) -> (Provider, String) {
    (provider, provider.as_str().to_owned())
}

/// The configured provider whose model table lists `model` (SPEC 10.2: a model implies
/// its provider), the first by name when several do.
pub(super) fn infer_named(
    model: &str,
    named: &BTreeMap<String, NamedProvider>,
) -> Option<(Provider, String)> {
    named
        .iter()
        .find(|(_, provider)| provider.models.contains_key(model))
        .map(|(name, provider)| (provider.wire, name.clone()))
}
