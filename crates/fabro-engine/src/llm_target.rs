//! Which provider and model each LLM node talks to (SPEC 10.2), and the clients for them.
//!
//! [`ProviderSettings`] gathers keys (redacted [`ApiKey`]s), base URLs, extra headers and
//! `[llm.fallbacks]` chains from the environment and configuration (SPEC 12.3, 12.4).
//! [`LlmSetup::resolve`] builds one HTTP client per provider in use and, per node, an
//! [`LlmTarget`] with its failover routes (closest catalog model per fallback provider,
//! SPEC 9.4). Handlers call through [`LlmTarget::budgeted_client`], which applies the
//! retries and failover of `fabro_llm::Resilient` and reports them as `Agent.LlmRetry`
//! and `Agent.Failover` events.

use std::collections::BTreeMap;
use std::sync::Arc;

use fabro_language::model::Backend;
use fabro_language::{HandlerKind, Workflow};
use fabro_llm::simulated::SimulatedClient;
use fabro_llm::{
    catalog, http_client, ApiKey, CallObserver, FailoverNotice, HttpSettings, Jitter, LlmClient,
    Provider, RandomJitter, Resilient, RetryNotice, Route, Sleeper, TokioSleeper,
};

use crate::config::LlmConfig;
pub(crate) use named::{ModelLimits, NamedProvider};
mod named;
use crate::event::kind::{AgentFailover, AgentLlmRetry};
use crate::event::{Emitter, Event};

/// Keys, endpoints and failover chains of the providers (SPEC 10.1, 12.3, 12.4).
/// `Debug` prints keys redacted and header names only.
#[derive(Clone, Default)]
pub struct ProviderSettings {
    keys: BTreeMap<Provider, ApiKey>,
    base_urls: BTreeMap<Provider, String>,
    headers: Vec<(String, String)>,
    fallbacks: BTreeMap<String, Vec<String>>,
    /// The presets and configured providers (SPEC 10.7).
    named: BTreeMap<String, NamedProvider>,
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ProviderSettings")
            .field("keys", &self.keys)
            .field("base_urls", &self.base_urls)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(name, _)| name)
                    .collect::<Vec<_>>(),
            )
            .field("fallbacks", &self.fallbacks)
            .field("named", &self.named)
            .finish()
    }
}

impl ProviderSettings {
    /// Reads the key and base-URL variables of SPEC 12.4 through `env` (which returns
    /// `None` for unset or empty variables) and the `[llm]` configuration: `base_url` for
    /// openai_compatible (below `OPENAI_COMPATIBLE_BASE_URL`), `headers`, `fallbacks`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>, config: &LlmConfig) -> ProviderSettings {
        let mut settings = ProviderSettings {
            headers: config
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            fallbacks: config.fallbacks.clone(),
            named: named::named_providers(env, config),
            ..ProviderSettings::default()
        };
        for provider in [
            Provider::Anthropic,
            Provider::OpenAi,
            Provider::Gemini,
            Provider::OpenAiCompatible,
        ] {
            let key = env(credential_variable(provider)).or_else(|| {
                (provider == Provider::Gemini)
                    .then(|| env("GOOGLE_API_KEY"))
                    .flatten()
            });
            if let Some(key) = key {
                settings.keys.insert(provider, ApiKey::new(key));
            }
            let base_url = env(base_url_variable(provider)).or_else(|| {
                (provider == Provider::OpenAiCompatible)
                    .then(|| config.base_url.clone())
                    .flatten()
            });
            if let Some(base_url) = base_url {
                settings.base_urls.insert(provider, base_url);
            }
        }
        settings
    }

    /// Providers whose key is set.
    pub fn credentials(&self) -> Vec<Provider> {
        self.keys.keys().copied().collect()
    }

    /// Every key value, for scrubbing.
    pub fn keys(&self) -> impl Iterator<Item = &ApiKey> {
        self.keys.values()
    }

    /// The presets and configured providers, by name.
    pub fn named(&self) -> &BTreeMap<String, NamedProvider> {
        &self.named
    }

    /// The wire of the provider called `name` and its canonical name: a built-in
    /// provider (or alias), a preset or a configured one.
    pub fn resolve_name(&self, name: &str) -> Option<(Provider, String)> {
        if let Some(provider) = Provider::parse(name) {
            return Some((provider, provider.as_str().to_owned()));
        }
        self.named
            .get(name)
            .map(|named| (named.wire, name.to_owned()))
    }

    fn usable_name(&self, name: &str, provider: Provider) -> bool {
        match self.named.get(name) {
            Some(named) => named.missing_variable().is_none(),
            None => self.usable(provider),
        }
    }

    fn usable(&self, provider: Provider) -> bool {
        match provider {
            Provider::Simulated => true,
            Provider::OpenAiCompatible => self.base_urls.contains_key(&provider),
            Provider::Anthropic | Provider::OpenAi | Provider::Gemini => {
                self.keys.contains_key(&provider)
            }
        }
    }

    fn http_settings(&self, provider: Provider) -> Result<HttpSettings, LlmSetupError> {
        let base_url = match (self.base_urls.get(&provider), provider) {
            (Some(url), _) => url.clone(),
            (None, Provider::Anthropic) => "https://api.anthropic.com".to_owned(),
            (None, Provider::OpenAi) => "https://api.openai.com/v1".to_owned(),
            (None, Provider::Gemini) => "https://generativelanguage.googleapis.com".to_owned(),
            (None, Provider::OpenAiCompatible | Provider::Simulated) => {
                return Err(LlmSetupError::MissingBaseUrl)
            }
        };
        let mut settings = HttpSettings::new(base_url);
        settings.api_key = self.keys.get(&provider).cloned();
        if provider == Provider::OpenAiCompatible {
            settings.headers.clone_from(&self.headers);
        }
        Ok(settings)
    }
}

/// The environment variable overriding a provider's base URL.
pub(crate) fn base_url_variable(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "ANTHROPIC_BASE_URL",
        Provider::OpenAi => "OPENAI_BASE_URL",
        Provider::Gemini => "GEMINI_BASE_URL",
        Provider::OpenAiCompatible => "OPENAI_COMPATIBLE_BASE_URL",
        Provider::Simulated => "",
    }
}

/// The model and provider layers below node attributes and the stylesheet, highest first.
#[derive(Debug, Clone, Default)]
pub struct LlmDefaults {
    /// `--model`.
    pub cli_model: Option<String>,
    /// `--provider`.
    pub cli_provider: Option<String>,
    /// `FABRO_MODEL`.
    pub env_model: Option<String>,
    /// `FABRO_PROVIDER`.
    pub env_provider: Option<String>,
    /// `[llm] model`.
    pub config_model: Option<String>,
    /// `[llm] provider`.
    pub config_provider: Option<String>,
    /// Providers whose credentials are set, in any order.
    pub credentials: Vec<Provider>,
    /// Keys, endpoints and failover chains.
    pub providers: ProviderSettings,
}

/// A resolved provider, model and client for one node.
#[derive(Clone)]
pub(crate) struct LlmTarget {
    /// The wire of the provider: its client and tool profile.
    pub provider: Provider,
    /// The provider's name, recorded as the stage's provider: a built-in name, a preset
    /// or a configured one (SPEC 10.7).
    pub name: String,
    /// Model id (aliases resolved).
    pub model: String,
    /// The client of the provider itself, without retries.
    pub client: Arc<dyn LlmClient>,
    /// Failover routes in `[llm.fallbacks]` order (SPEC 9.4).
    pub fallbacks: Vec<Route>,
    /// `simulated` was chosen for every node by flag, environment or configuration
    /// (SPEC 17.3): external agents (`cli`, `acp`) run fabro's own loop on it too.
    pub simulated_everywhere: bool,
    /// The limits of the model's entry in a configured provider's model table (SPEC
    /// 10.7); both `None` for catalog models, whose limits the catalog gives.
    pub limits: ModelLimits,
    timing: Timing,
}

/// How retries wait: real sleeps and random jitter, or injected ones in tests.
#[derive(Clone)]
struct Timing {
    sleeper: Arc<dyn Sleeper>,
    jitter: Arc<dyn Jitter>,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            sleeper: Arc::new(TokioSleeper),
            jitter: Arc::new(RandomJitter),
        }
    }
}

impl LlmTarget {
    /// [`LlmTarget::budgeted_client`] without a budget.
    #[cfg(test)]
    pub(crate) fn stage_client(&self, emitter: Arc<Emitter>, node_id: &str) -> Resilient {
        self.client_with_budget(emitter, None, node_id)
    }

    /// A stage's client: retries (9.2) and failover (9.4) reported as `Agent.LlmRetry` and
    /// `Agent.Failover` events of `node_id`, completed calls counted against the budget
    /// (17.1); a fresh one per stage, so a failover lasts for the rest of the stage only.
    pub(crate) fn budgeted_client(
        &self,
        emitter: Arc<Emitter>,
        budget: &Arc<crate::budget::Budget>,
        node_id: &str,
    ) -> Resilient {
        self.client_with_budget(emitter, Some(Arc::clone(budget)), node_id)
    }

    fn client_with_budget(
        &self,
        emitter: Arc<Emitter>,
        budget: Option<Arc<crate::budget::Budget>>,
        node_id: &str,
    ) -> Resilient {
        let primary = Route {
            provider: self.provider,
            name: self.name.clone(),
            model: self.model.clone(),
            client: self.client.clone(),
        };
        Resilient::new(primary, self.fallbacks.clone())
            .with_timing(self.timing.sleeper.clone(), self.timing.jitter.clone())
            .with_observer(Arc::new(EventObserver {
                emitter,
                node_id: node_id.to_owned(),
                budget,
            }))
    }
}

/// Emits retry and failover events for one stage.
struct EventObserver {
    emitter: Arc<Emitter>,
    node_id: String,
    /// The run's budget, charged with every completed call.
    budget: Option<Arc<crate::budget::Budget>>,
}

impl CallObserver for EventObserver {
    fn retrying(&self, notice: &RetryNotice) {
        self.emitter.emit(Event::node(
            &self.node_id,
            AgentLlmRetry {
                attempt: notice.attempt,
                delay_ms: u64::try_from(notice.delay.as_millis()).unwrap_or(u64::MAX),
                error_kind: notice.error_kind.as_str().to_owned(),
                status_code: notice.status_code,
            },
        ));
    }

    fn failing_over(&self, notice: &FailoverNotice) {
        self.emitter.emit(Event::node(
            &self.node_id,
            AgentFailover {
                error_kind: notice.error_kind.as_str().to_owned(),
                from_model: notice.from_model.clone(),
                from_provider: notice.from_name.clone(),
                to_model: notice.to_model.clone(),
                to_provider: notice.to_name.clone(),
            },
        ));
    }

    fn completed(&self, model: &str, usage: &fabro_llm::Usage) {
        if let Some(budget) = &self.budget {
            let cost = usage
                .cost_usd
                .or_else(|| fabro_llm::catalog::cost_usd(model, usage))
                .unwrap_or(0.0);
            budget.record_call(usage.input_tokens.saturating_add(usage.output_tokens), cost);
        }
    }
}

/// Why the LLM setup cannot run a workflow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmSetupError {
    /// A node names a provider fabro does not know.
    #[error("unknown provider '{provider}' on node {node_id}")]
    UnknownProvider {
        /// The node.
        node_id: String,
        /// The value.
        provider: String,
    },
    /// A node resolves to a provider without credentials (SPEC 4.1 step 3).
    #[error("missing credentials for provider {provider} (set {variable})")]
    MissingCredentials {
        /// The provider's name.
        provider: String,
        /// The variable to set.
        variable: String,
    },
    /// openai_compatible without a base URL.
    #[error("missing base URL for provider openai_compatible (set OPENAI_COMPATIBLE_BASE_URL or [llm] base_url)")]
    MissingBaseUrl,
    /// A `[llm.fallbacks]` chain names an unknown provider.
    #[error("unknown provider '{0}' in [llm.fallbacks]")]
    UnknownFallbackProvider(String),
    /// The HTTP client could not be built.
    #[error("cannot set up the {provider} client: {message}")]
    Client {
        /// The provider's name.
        provider: String,
        /// Why.
        message: String,
    },
}

/// The environment variable holding a provider's key.
pub(crate) fn credential_variable(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "ANTHROPIC_API_KEY",
        Provider::OpenAi => "OPENAI_API_KEY",
        Provider::Gemini => "GEMINI_API_KEY",
        Provider::OpenAiCompatible => "OPENAI_COMPATIBLE_API_KEY",
        Provider::Simulated => "",
    }
}

/// Per-node targets for a whole workflow.
pub(crate) struct LlmSetup {
    targets: BTreeMap<String, LlmTarget>,
    fallback: LlmTarget,
    simulated: Arc<SimulatedClient>,
    simulated_by_default: bool,
}

impl LlmSetup {
    /// Resolves every LLM node of `workflow`. With `dry_run`, credentials are not
    /// required and every node uses the simulated client.
    pub(crate) fn resolve(
        workflow: &Workflow,
        defaults: &LlmDefaults,
        simulated: Arc<SimulatedClient>,
        dry_run: bool,
    ) -> Result<LlmSetup, LlmSetupError> {
        // SPEC 17.3: `simulated` chosen by flag, environment or configuration applies to
        // every LLM node, even those that name a provider or model of their own; each keeps
        // the model it would have used.
        let simulate_all = defaults
            .cli_provider
            .as_deref()
            .or(defaults.env_provider.as_deref())
            .or(defaults.config_provider.as_deref())
            .and_then(Provider::parse)
            == Some(Provider::Simulated);
        let simulated_client: Arc<dyn LlmClient> = simulated.clone();
        let mut resolver = Resolver {
            defaults,
            simulated_client: simulated_client.clone(),
            clients: BTreeMap::from([(
                Provider::Simulated.as_str().to_owned(),
                simulated_client.clone(),
            )]),
            dry_run,
            simulate_all,
        };
        let mut targets = BTreeMap::new();
        let mut simulated_by_default = false;
        for node in workflow.nodes() {
            let is_llm = node.handler.is_llm()
                || (node.handler == HandlerKind::FanIn && !node.llm.prompt.is_empty());
            if !is_llm {
                continue;
            }
            let (target, by_default) = resolver.target(node, workflow)?;
            simulated_by_default |= by_default;
            targets.insert(node.id.clone(), target);
        }
        Ok(LlmSetup {
            targets,
            fallback: LlmTarget {
                provider: Provider::Simulated,
                name: Provider::Simulated.as_str().to_owned(),
                model: "simulated".to_owned(),
                client: simulated_client,
                fallbacks: Vec::new(),
                simulated_everywhere: simulate_all,
                limits: ModelLimits::default(),
                timing: Timing::default(),
            },
            simulated,
            simulated_by_default,
        })
    }

    /// The target of `node` (the simulated fallback for nodes that were not resolved).
    pub(crate) fn target_for(&self, node: &fabro_language::Node) -> LlmTarget {
        self.targets
            .get(&node.id)
            .cloned()
            .unwrap_or_else(|| self.fallback.clone())
    }

    /// Whether the last fallback of SPEC 10.2 chose the simulated provider for some node.
    pub(crate) fn simulated_by_default(&self) -> bool {
        self.simulated_by_default
    }

    /// Replaces how retries wait, for every target (tests pass a recording sleeper).
    #[cfg(test)]
    pub(crate) fn set_timing(&mut self, sleeper: Arc<dyn Sleeper>, jitter: Arc<dyn Jitter>) {
        let timing = Timing { sleeper, jitter };
        for target in self.targets.values_mut() {
            target.timing = timing.clone();
        }
        self.fallback.timing = timing;
    }

    /// The simulated client, for saving and restoring its cursors.
    pub(crate) fn simulated(&self) -> &SimulatedClient {
        &self.simulated
    }
}

/// Resolves the LLM nodes of one workflow, building one HTTP client per provider in use.
struct Resolver<'a> {
    defaults: &'a LlmDefaults,
    simulated_client: Arc<dyn LlmClient>,
    /// The clients built so far by provider name, the simulated one included.
    clients: BTreeMap<String, Arc<dyn LlmClient>>,
    dry_run: bool,
    /// The run simulates every node (SPEC 17.3).
    simulate_all: bool,
}

impl Resolver<'_> {
    /// The target of one LLM node, and whether the last fallback of SPEC 10.2 chose the
    /// simulated provider for it (in a way that makes the run a simulated one).
    fn target(
        &mut self,
        node: &fabro_language::Node,
        workflow: &Workflow,
    ) -> Result<(LlmTarget, bool), LlmSetupError> {
        let defaults = self.defaults;
        let model_choice = model_choice(node, workflow, defaults);
        let named = provider_choice(node, workflow, defaults, self.simulate_all);
        let no_calls = self.dry_run || self.simulate_all;
        let mut simulated_by_default = false;
        let (provider, name) =
            match node_provider(node, named, model_choice.as_deref(), defaults, no_calls)? {
                Some(resolved) => resolved,
                None => {
                    // An acp agent does not use the provider it resolves to, so it does
                    // not make the run a simulated one; nor does simulating everything.
                    if external_backend(node) != Some(Backend::Acp) && !self.simulate_all {
                        simulated_by_default = true;
                    }
                    (Provider::Simulated, Provider::Simulated.as_str().to_owned())
                }
            };
        let table_model = defaults
            .providers
            .named
            .get(&name)
            .and_then(|named| named.models.keys().next().cloned());
        let model = match model_choice {
            Some(model) => catalog::find(&model).map_or(model, |info| info.id.to_owned()),
            None => match table_model {
                Some(model) => model,
                None => catalog::default_model(provider)
                    .filter(|_| Provider::parse(&name).is_some())
                    .map_or_else(|| name.clone(), |info| info.id.to_owned()),
            },
        };
        let (provider, name) = if self.simulate_all {
            (Provider::Simulated, Provider::Simulated.as_str().to_owned())
        } else {
            (provider, name)
        };
        let (client, fallbacks) = self.connection(node, provider, &name, &model)?;
        let limits = self
            .defaults
            .providers
            .named
            .get(&name)
            .map(|named| named.limits_of(&model))
            .unwrap_or_default();
        let target = LlmTarget {
            provider,
            name,
            model,
            client,
            fallbacks,
            simulated_everywhere: self.simulate_all,
            limits,
            timing: Timing::default(),
        };
        Ok((target, simulated_by_default))
    }

    /// The client a node calls `model` of `provider` through, and its failover routes.
    fn connection(
        &mut self,
        node: &fabro_language::Node,
        provider: Provider,
        name: &str,
        model: &str,
    ) -> Result<(Arc<dyn LlmClient>, Vec<Route>), LlmSetupError> {
        if self.dry_run || provider == Provider::Simulated {
            return Ok((self.simulated_client.clone(), Vec::new()));
        }
        if let Some(backend) = external_backend(node) {
            // SPEC 5.2.2, 5.2.3: an external agent brings its own credentials and
            // calls no provider API through fabro, so it needs no key, no client
            // and no failover chain.
            let client: Arc<dyn LlmClient> = Arc::new(NoApiClient { backend, provider });
            return Ok((client, Vec::new()));
        }
        match self.defaults.providers.named.get(name) {
            // SPEC 10.7: a missing `api_key_env` (or `${VAR}` header) variable fails
            // the run before its first stage, naming the variable.
            Some(named) => {
                if let Some(variable) = named.missing_variable() {
                    return Err(LlmSetupError::MissingCredentials {
                        provider: name.to_owned(),
                        variable,
                    });
                }
            }
            None if !self.defaults.credentials.contains(&provider)
                && provider != Provider::OpenAiCompatible =>
            {
                return Err(LlmSetupError::MissingCredentials {
                    provider: name.to_owned(),
                    variable: credential_variable(provider).to_owned(),
                });
            }
            None => {}
        }
        let client = self.client_for(provider, name)?;
        let fallbacks = self.fallback_routes(node, name, model)?;
        Ok((client, fallbacks))
    }

    /// The failover routes of `[llm.fallbacks]` for `provider`: per usable fallback
    /// provider, its model closest to `model` (SPEC 9.4).
    fn fallback_routes(
        &mut self,
        node: &fabro_language::Node,
        provider: &str,
        model: &str,
    ) -> Result<Vec<Route>, LlmSetupError> {
        let defaults = self.defaults;
        let settings = &defaults.providers;
        let mut fallbacks = Vec::new();
        let chain = settings
            .fallbacks
            .get(provider)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for entry in chain {
            let (wire, name) = settings
                .resolve_name(entry)
                .ok_or_else(|| LlmSetupError::UnknownFallbackProvider(entry.clone()))?;
            if name == provider || !settings.usable_name(&name, wire) {
                continue;
            }
            let require_tools = node.handler == HandlerKind::Agent;
            // SPEC 9.4: a provider without a qualifying model is skipped.
            let closest = match settings.named.get(&name) {
                Some(named) => named.closest_model(model),
                None => catalog::closest_model(model, wire, require_tools)
                    .map(|info| info.id.to_owned()),
            };
            let Some(closest) = closest else {
                continue;
            };
            fallbacks.push(Route {
                provider: wire,
                name: name.clone(),
                model: closest,
                client: self.client_for(wire, &name)?,
            });
        }
        Ok(fallbacks)
    }

    /// The client of the provider `name` speaking `provider`, built on first use.
    fn client_for(
        &mut self,
        provider: Provider,
        name: &str,
    ) -> Result<Arc<dyn LlmClient>, LlmSetupError> {
        if let Some(client) = self.clients.get(name) {
            return Ok(client.clone());
        }
        let named = self.defaults.providers.named.get(name);
        let http = match named {
            Some(named) => {
                let mut http = HttpSettings::new(named.base_url.clone());
                http.api_key = named.key.clone();
                http.headers.clone_from(&named.headers);
                http
            }
            None => self.defaults.providers.http_settings(provider)?,
        };
        let mut client = http_client(provider, http)
            .unwrap_or_else(|| Ok(self.simulated_client.clone()))
            .map_err(|error| LlmSetupError::Client {
                provider: name.to_owned(),
                message: error.message,
            })?;
        if let Some(named) = named.filter(|named| !named.models.is_empty()) {
            client = Arc::new(named::PricedClient {
                inner: client,
                models: named.models.clone(),
            });
        }
        self.clients.insert(name.to_owned(), client.clone());
        Ok(client)
    }
}

/// The backend of an agent node that runs an external agent instead of fabro's own
/// loop: `cli` (whose provider has a CLI, SPEC 5.2.2; with `simulated` it runs like
/// `api`, which [`LlmSetup::resolve`] handles before asking) and `acp` (SPEC 5.2.3).
/// `None` for every other node: prompt nodes ignore `backend` (SPEC 2.10).
fn external_backend(node: &fabro_language::Node) -> Option<Backend> {
    if node.handler != HandlerKind::Agent {
        return None;
    }
    match node.llm.backend {
        Backend::Cli | Backend::Acp => Some(node.llm.backend),
        Backend::Api => None,
    }
}

/// The model a node asks for: its own, the stylesheet's, then the CLI, environment,
/// configuration and workflow defaults (SPEC 10.2).
fn model_choice(
    node: &fabro_language::Node,
    workflow: &Workflow,
    defaults: &LlmDefaults,
) -> Option<String> {
    node.llm
        .model()
        .map(str::to_owned)
        .or_else(|| node.llm.stylesheet_model.as_deref().map(str::to_owned))
        .or_else(|| defaults.cli_model.clone())
        .or_else(|| defaults.env_model.clone())
        .or_else(|| defaults.config_model.clone())
        .or_else(|| workflow.settings.default_model.clone())
}

/// The provider a node names, in the same order of layers as [`model_choice`]; when the
/// run simulates everything (SPEC 17.3), the provider the node would have used without it.
fn provider_choice(
    node: &fabro_language::Node,
    workflow: &Workflow,
    defaults: &LlmDefaults,
    simulate_all: bool,
) -> Option<String> {
    let run_provider = || {
        defaults
            .cli_provider
            .clone()
            .or_else(|| defaults.env_provider.clone())
            .or_else(|| defaults.config_provider.clone())
    };
    node.llm
        .provider()
        .map(str::to_owned)
        .or_else(|| node.llm.stylesheet_provider.as_deref().map(str::to_owned))
        .or_else(|| (!simulate_all).then(run_provider).flatten())
        .or_else(|| workflow.settings.default_provider.clone())
}

/// The provider of a node: the one it names, else the one its model implies, else the
/// first with credentials; `None` when nothing decides, and the node runs simulated.
fn node_provider(
    node: &fabro_language::Node,
    named: Option<String>,
    model: Option<&str>,
    defaults: &LlmDefaults,
    no_calls: bool,
) -> Result<Option<(Provider, String)>, LlmSetupError> {
    let settings = &defaults.providers;
    Ok(match named {
        // A dry run or a run simulated everywhere calls no provider, so a provider this
        // build does not know is no obstacle there.
        Some(name) if no_calls => Some(
            settings
                .resolve_name(&name)
                .unwrap_or((Provider::Simulated, Provider::Simulated.as_str().to_owned())),
        ),
        Some(name) => {
            Some(
                settings
                    .resolve_name(&name)
                    .ok_or_else(|| LlmSetupError::UnknownProvider {
                        node_id: node.id.clone(),
                        provider: name.clone(),
                    })?,
            )
        }
        None => model
            .and_then(|model| named::infer_named(model, &settings.named))
            .or_else(|| model.and_then(infer_provider).map(named::built_in))
            .or_else(|| {
                [Provider::Anthropic, Provider::OpenAi, Provider::Gemini]
                    .into_iter()
                    .find(|provider| defaults.credentials.contains(provider))
                    .map(named::built_in)
            }),
    })
}

/// The client of a node whose external agent talks to its provider itself. Nothing
/// calls it; if something did, it would fail as a configuration error instead of
/// reaching a provider without credentials.
struct NoApiClient {
    backend: Backend,
    provider: Provider,
}

impl LlmClient for NoApiClient {
    fn complete_streaming<'a>(
        &'a self,
        _request: &'a fabro_llm::Request,
        _sink: &'a mut fabro_llm::StreamSink<'_>,
    ) -> fabro_llm::BoxFuture<'a, Result<fabro_llm::Response, fabro_llm::LlmError>> {
        Box::pin(async move {
            Err(fabro_llm::LlmError::new(
                fabro_llm::LlmErrorKind::Configuration,
                self.provider.as_str(),
                format!(
                    "the {} backend makes no provider API calls through fabro",
                    self.backend.as_str()
                ),
            ))
        })
    }
}

/// The provider of a model: the catalog entry, else the id's prefix (SPEC 10.2).
pub(crate) fn infer_provider(model: &str) -> Option<Provider> {
    if let Some(info) = catalog::find(model) {
        return Some(info.provider);
    }
    if model.starts_with("claude-") {
        Some(Provider::Anthropic)
    } else if ["gpt-", "o1", "o3", "o4"]
        .iter()
        .any(|prefix| model.starts_with(prefix))
    {
        Some(Provider::OpenAi)
    } else if model.starts_with("gemini-") {
        Some(Provider::Gemini)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_language::{check, AnyModel, CheckOptions, NoFiles, Variables};

    fn workflow(text: &str) -> Workflow {
        let variables = Variables::default();
        let options = CheckOptions {
            loader: &NoFiles,
            variables: &variables,
            models: &AnyModel,
        };
        check("w.fabro".as_ref(), text, &options)
            .workflow
            .expect("parses")
    }

    #[test]
    fn without_credentials_everything_falls_back_to_simulated() {
        let workflow = workflow("digraph { start [shape=Mdiamond] a [prompt=x] exit [shape=Msquare] start -> a -> exit }");
        let setup = LlmSetup::resolve(&workflow, &LlmDefaults::default(), Arc::default(), false)
            .expect("resolves");
        assert!(setup.simulated_by_default());
        let node = workflow.node(workflow.find("a").expect("a"));
        let target = setup.target_for(node);
        assert_eq!(target.provider, Provider::Simulated);
        assert_eq!(target.model, "simulated");
    }

    #[test]
    fn explicit_providers_need_credentials() {
        let workflow = workflow("digraph { start [shape=Mdiamond] a [model=sonnet] exit [shape=Msquare] start -> a -> exit }");
        let error =
            LlmSetup::resolve(&workflow, &LlmDefaults::default(), Arc::default(), false).err();
        assert_eq!(
            error.map(|e| e.to_string()).as_deref(),
            Some("missing credentials for provider anthropic (set ANTHROPIC_API_KEY)")
        );
        let dry = LlmSetup::resolve(&workflow, &LlmDefaults::default(), Arc::default(), true)
            .expect("dry runs need no keys");
        let target = dry.target_for(workflow.node(workflow.find("a").expect("a")));
        assert_eq!(target.model, "claude-sonnet-4-6");
        assert!(!dry.simulated_by_default());
    }

    #[tokio::test]
    async fn external_agents_need_no_credentials() {
        let workflow = workflow(
            r#"digraph { start [shape=Mdiamond] exit [shape=Msquare]
                c [shape=box, backend="cli", provider="anthropic"]
                x [shape=box, backend="cli", model="gpt5"]
                g [shape=box, backend="acp", provider="gemini", acp_command="agent"]
                start -> c -> x -> g -> exit }"#,
        );
        let mut defaults = LlmDefaults {
            // Keys that would make an openai fallback usable; `credentials` stays empty, so
            // every node resolves without credentials.
            providers: settings(
                &[
                    ("ANTHROPIC_API_KEY", "sk-a".to_owned()),
                    ("OPENAI_API_KEY", "sk-o".to_owned()),
                ],
                &LlmConfig::default(),
            ),
            ..LlmDefaults::default()
        };
        defaults.providers.fallbacks =
            BTreeMap::from([("anthropic".to_owned(), vec!["openai".to_owned()])]);
        let setup = LlmSetup::resolve(&workflow, &defaults, Arc::default(), false)
            .expect("cli and acp agents bring their own credentials");
        assert!(!setup.simulated_by_default());
        let target = |id: &str| setup.target_for(workflow.node(workflow.find(id).expect("node")));
        let cli = target("c");
        assert_eq!(
            (cli.provider, cli.model.as_str()),
            (Provider::Anthropic, "claude-sonnet-4-6")
        );
        assert!(cli.fallbacks.is_empty(), "failover is api-only");
        assert_eq!(target("x").provider, Provider::OpenAi);
        assert_eq!(target("g").provider, Provider::Gemini);
        // The placeholder client never reaches a provider.
        let request = fabro_llm::Request::default();
        let error = cli.client.complete(&request).await.expect_err("no calls");
        assert_eq!(error.kind, fabro_llm::LlmErrorKind::Configuration);
    }

    #[test]
    fn api_agents_and_prompt_nodes_still_need_their_key() {
        for text in [
            r#"digraph { start [shape=Mdiamond] a [shape=box, provider="openai"] exit [shape=Msquare] start -> a -> exit }"#,
            r#"digraph { start [shape=Mdiamond] a [shape=box, backend="api", provider="openai"] exit [shape=Msquare] start -> a -> exit }"#,
            // Prompt nodes ignore `backend` (SPEC 2.10).
            r#"digraph { start [shape=Mdiamond] a [shape=tab, backend="cli", provider="openai"] exit [shape=Msquare] start -> a -> exit }"#,
        ] {
            let error = LlmSetup::resolve(
                &workflow(text),
                &LlmDefaults::default(),
                Arc::default(),
                false,
            )
            .err();
            assert_eq!(
                error.map(|e| e.to_string()).as_deref(),
                Some("missing credentials for provider openai (set OPENAI_API_KEY)"),
                "{text}"
            );
        }
    }

    #[test]
    fn acp_agents_do_not_make_a_run_simulated_but_cli_agents_do() {
        let acp = workflow(
            r#"digraph { start [shape=Mdiamond] a [shape=box, backend="acp", acp_command="agent"] exit [shape=Msquare] start -> a -> exit }"#,
        );
        let setup = LlmSetup::resolve(&acp, &LlmDefaults::default(), Arc::default(), false)
            .expect("resolves");
        assert!(!setup.simulated_by_default());
        // SPEC 5.2.2: a cli agent whose provider falls back to simulated runs like api.
        let cli = workflow(
            r#"digraph { start [shape=Mdiamond] a [shape=box, backend="cli"] exit [shape=Msquare] start -> a -> exit }"#,
        );
        let setup = LlmSetup::resolve(&cli, &LlmDefaults::default(), Arc::default(), false)
            .expect("resolves");
        assert!(setup.simulated_by_default());
    }

    #[test]
    fn cli_model_and_provider_apply_below_node_attributes() {
        let workflow = workflow("digraph { start [shape=Mdiamond] a b [provider=simulated, model=mine] exit [shape=Msquare] start -> a -> b -> exit }");
        let defaults = LlmDefaults {
            cli_provider: Some("simulated".to_owned()),
            cli_model: Some("gpt5".to_owned()),
            ..LlmDefaults::default()
        };
        let setup =
            LlmSetup::resolve(&workflow, &defaults, Arc::default(), false).expect("resolves");
        assert_eq!(
            setup
                .target_for(workflow.node(workflow.find("a").expect("a")))
                .model,
            "gpt-5.2"
        );
        assert_eq!(
            setup
                .target_for(workflow.node(workflow.find("b").expect("b")))
                .model,
            "mine"
        );
        assert_eq!(infer_provider("o3-mini"), Some(Provider::OpenAi));
        assert_eq!(infer_provider("llama3"), None);
    }

    fn settings(vars: &[(&str, String)], config: &LlmConfig) -> ProviderSettings {
        let env = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.clone())
        };
        ProviderSettings::from_env(&env, config)
    }

    #[test]
    fn settings_come_from_the_environment_and_config() {
        let config = LlmConfig {
            base_url: Some("http://config/v1".to_owned()),
            headers: BTreeMap::from([("X-Gateway-Key".to_owned(), "gw-secret".to_owned())]),
            ..LlmConfig::default()
        };
        let providers = settings(
            &[
                ("GOOGLE_API_KEY", "g-key".to_owned()),
                ("ANTHROPIC_API_KEY", "a-key".to_owned()),
                ("ANTHROPIC_BASE_URL", "http://anthropic".to_owned()),
            ],
            &config,
        );
        assert_eq!(
            providers.credentials(),
            [Provider::Anthropic, Provider::Gemini]
        );
        assert!(
            !format!("{providers:?}").contains("a-key"),
            "keys print redacted"
        );
        let http = providers
            .http_settings(Provider::Anthropic)
            .expect("settings");
        assert_eq!(http.base_url, "http://anthropic");
        let compatible = providers
            .http_settings(Provider::OpenAiCompatible)
            .expect("settings");
        assert_eq!(compatible.base_url, "http://config/v1");
        assert_eq!(
            compatible.headers,
            [("X-Gateway-Key".to_owned(), "gw-secret".to_owned())]
        );
        assert!(!format!("{compatible:?}").contains("gw-secret"));
        assert_eq!(
            ProviderSettings::default()
                .http_settings(Provider::OpenAiCompatible)
                .err(),
            Some(LlmSetupError::MissingBaseUrl)
        );
    }

    #[tokio::test]
    async fn quota_errors_fail_over_and_emit_an_event_naming_both() {
        use fabro_twin::{Reply, Twin};
        let anthropic = Twin::start().await.expect("twin");
        let gemini = Twin::start().await.expect("twin");
        anthropic.set_fallback(Reply::quota());
        gemini.enqueue([Reply::text("from gemini")]);
        let config = LlmConfig {
            fallbacks: BTreeMap::from([(
                "anthropic".to_owned(),
                vec!["openai".to_owned(), "gemini".to_owned()],
            )]),
            ..LlmConfig::default()
        };
        // openai has no key, so the chain skips it.
        let providers = settings(
            &[
                ("ANTHROPIC_API_KEY", "sk-ant-fake-0001".to_owned()),
                ("ANTHROPIC_BASE_URL", anthropic.base_url()),
                ("GEMINI_API_KEY", "gm-fake-0002".to_owned()),
                ("GEMINI_BASE_URL", gemini.base_url()),
            ],
            &config,
        );
        let defaults = LlmDefaults {
            credentials: providers.credentials(),
            providers,
            ..LlmDefaults::default()
        };
        let workflow = workflow("digraph { start [shape=Mdiamond] a [model=opus, prompt=x] exit [shape=Msquare] start -> a -> exit }");
        let setup =
            LlmSetup::resolve(&workflow, &defaults, Arc::default(), false).expect("resolves");
        let target = setup.target_for(workflow.node(workflow.find("a").expect("a")));
        assert_eq!(target.fallbacks.len(), 1);
        assert_eq!(target.fallbacks[0].model, "gemini-3.1-pro-preview");
        let dir = tempfile::tempdir().expect("temp dir");
        let events_path = dir.path().join("events.jsonl");
        let emitter =
            Arc::new(Emitter::open("run", &events_path, 1, Vec::new()).expect("emitter opens"));
        let request = fabro_llm::Request {
            model: target.model.clone(),
            messages: vec![fabro_llm::Message::user("hi")],
            node_id: "a".to_owned(),
            ..fabro_llm::Request::default()
        };
        let response = target
            .stage_client(emitter, "a")
            .complete(&request)
            .await
            .expect("fails over");
        assert_eq!(response.text, "from gemini");
        assert_eq!(anthropic.request_count(), 1);
        let text = fs_err::read_to_string(&events_path).expect("events");
        let events = crate::event::read_events(&text);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].name(), "Agent.Failover");
        assert_eq!(events[0].node_id.as_deref(), Some("a"));
        assert_eq!(
            serde_json::Value::Object(events[0].properties()),
            serde_json::json!({"from_provider": "anthropic", "from_model": "claude-opus-4-6",
                               "to_provider": "gemini", "to_model": "gemini-3.1-pro-preview",
                               "error_kind": "quota"})
        );
        assert!(!text.contains("sk-ant-fake-0001"));
    }

    #[tokio::test]
    async fn retries_emit_events_with_their_delays() {
        use fabro_twin::{Reply, Twin};
        let openai = Twin::start().await.expect("twin");
        openai.enqueue([Reply::rate_limited(Some("3")), Reply::text("ok")]);
        let providers = settings(
            &[
                ("OPENAI_API_KEY", "sk-oa-fake-0003".to_owned()),
                ("OPENAI_BASE_URL", format!("{}/v1", openai.base_url())),
            ],
            &LlmConfig::default(),
        );
        let defaults = LlmDefaults {
            credentials: providers.credentials(),
            providers,
            ..LlmDefaults::default()
        };
        let workflow = workflow("digraph { start [shape=Mdiamond] a [model=gpt5, prompt=x] exit [shape=Msquare] start -> a -> exit }");
        let mut setup =
            LlmSetup::resolve(&workflow, &defaults, Arc::default(), false).expect("resolves");
        let sleeper = Arc::new(fabro_llm::RecordingSleeper::default());
        setup.set_timing(sleeper.clone(), Arc::new(fabro_llm::FixedJitter(1.0)));
        let target = setup.target_for(workflow.node(workflow.find("a").expect("a")));
        let dir = tempfile::tempdir().expect("temp dir");
        let events_path = dir.path().join("events.jsonl");
        let emitter =
            Arc::new(Emitter::open("run", &events_path, 1, Vec::new()).expect("emitter opens"));
        let request = fabro_llm::Request {
            model: target.model.clone(),
            messages: vec![fabro_llm::Message::user("hi")],
            ..fabro_llm::Request::default()
        };
        let response = target
            .stage_client(emitter, "a")
            .complete(&request)
            .await
            .expect("retries");
        assert_eq!(response.text, "ok");
        assert_eq!(sleeper.delays(), [std::time::Duration::from_secs(3)]);
        let text = fs_err::read_to_string(&events_path).expect("events");
        let events = crate::event::read_events(&text);
        assert_eq!(events[0].name(), "Agent.LlmRetry");
        assert_eq!(
            serde_json::Value::Object(events[0].properties()),
            serde_json::json!({"attempt": 1, "delay_ms": 3000, "error_kind": "rate_limit", "status_code": 429})
        );
    }
}
