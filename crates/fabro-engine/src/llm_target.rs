//! Which provider and model each LLM node talks to (SPEC 10.2), and the clients for them.

use std::collections::BTreeMap;
use std::sync::Arc;

use fabro_language::{HandlerKind, Workflow};
use fabro_llm::simulated::SimulatedClient;
use fabro_llm::{catalog, LlmClient, Provider};

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
}

/// A resolved provider, model and client for one node.
#[derive(Clone)]
pub struct LlmTarget {
    /// Provider.
    pub provider: Provider,
    /// Model id (aliases resolved).
    pub model: String,
    /// The client to call.
    pub client: Arc<dyn LlmClient>,
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
        /// The provider.
        provider: Provider,
        /// The variable to set.
        variable: &'static str,
    },
    /// The provider's HTTP client is not part of this build yet.
    #[error("the {provider} client is not available in this build yet; use --provider simulated")]
    ClientUnavailable {
        /// The provider.
        provider: Provider,
    },
}

/// The environment variable holding a provider's key.
pub fn credential_variable(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "ANTHROPIC_API_KEY",
        Provider::OpenAi => "OPENAI_API_KEY",
        Provider::Gemini => "GEMINI_API_KEY",
        Provider::OpenAiCompatible => "OPENAI_COMPATIBLE_API_KEY",
        Provider::Simulated => "",
    }
}

/// Per-node targets for a whole workflow.
pub struct LlmSetup {
    targets: BTreeMap<String, LlmTarget>,
    fallback: LlmTarget,
    simulated: Arc<SimulatedClient>,
    simulated_by_default: bool,
}

impl LlmSetup {
    /// Resolves every LLM node of `workflow`. With `dry_run`, credentials are not
    /// required and every node uses the simulated client.
    pub fn resolve(
        workflow: &Workflow,
        defaults: &LlmDefaults,
        simulated: Arc<SimulatedClient>,
        dry_run: bool,
    ) -> Result<LlmSetup, LlmSetupError> {
        let mut targets = BTreeMap::new();
        let mut simulated_by_default = false;
        let simulated_client: Arc<dyn LlmClient> = simulated.clone();
        for node in workflow.nodes() {
            let is_llm = node.handler.is_llm()
                || (node.handler == HandlerKind::FanIn && !node.llm.prompt.is_empty());
            if !is_llm {
                continue;
            }
            let model_choice = node
                .llm
                .model
                .clone()
                .or_else(|| node.llm.stylesheet_model.clone())
                .or_else(|| defaults.cli_model.clone())
                .or_else(|| defaults.env_model.clone())
                .or_else(|| defaults.config_model.clone())
                .or_else(|| workflow.settings.default_model.clone());
            let provider_choice = node
                .llm
                .provider
                .clone()
                .or_else(|| node.llm.stylesheet_provider.clone())
                .or_else(|| defaults.cli_provider.clone())
                .or_else(|| defaults.env_provider.clone())
                .or_else(|| defaults.config_provider.clone())
                .or_else(|| workflow.settings.default_provider.clone());
            let provider = match provider_choice {
                // A dry run calls no provider, so a provider this build does not know is
                // no obstacle there.
                Some(name) if dry_run => Provider::parse(&name).unwrap_or(Provider::Simulated),
                Some(name) => {
                    Provider::parse(&name).ok_or_else(|| LlmSetupError::UnknownProvider {
                        node_id: node.id.clone(),
                        provider: name.clone(),
                    })?
                }
                None => match model_choice.as_deref().and_then(infer_provider) {
                    Some(provider) => provider,
                    None => match [Provider::Anthropic, Provider::OpenAi, Provider::Gemini]
                        .into_iter()
                        .find(|provider| defaults.credentials.contains(provider))
                    {
                        Some(provider) => provider,
                        None => {
                            simulated_by_default = true;
                            Provider::Simulated
                        }
                    },
                },
            };
            let model = match model_choice {
                Some(model) => catalog::find(&model).map_or(model, |info| info.id.to_owned()),
                None => catalog::default_model(provider)
                    .map_or_else(|| provider.as_str().to_owned(), |info| info.id.to_owned()),
            };
            let client = if dry_run || provider == Provider::Simulated {
                simulated_client.clone()
            } else if !defaults.credentials.contains(&provider)
                && provider != Provider::OpenAiCompatible
            {
                return Err(LlmSetupError::MissingCredentials {
                    provider,
                    variable: credential_variable(provider),
                });
            } else {
                return Err(LlmSetupError::ClientUnavailable { provider });
            };
            targets.insert(
                node.id.clone(),
                LlmTarget {
                    provider,
                    model,
                    client,
                },
            );
        }
        Ok(LlmSetup {
            targets,
            fallback: LlmTarget {
                provider: Provider::Simulated,
                model: "simulated".to_owned(),
                client: simulated_client,
            },
            simulated,
            simulated_by_default,
        })
    }

    /// The target of `node` (the simulated fallback for nodes that were not resolved).
    pub fn target_for(&self, node: &fabro_language::Node) -> LlmTarget {
        self.targets
            .get(&node.id)
            .cloned()
            .unwrap_or_else(|| self.fallback.clone())
    }

    /// Whether the last fallback of SPEC 10.2 chose the simulated provider for some node.
    pub fn simulated_by_default(&self) -> bool {
        self.simulated_by_default
    }

    /// The simulated client, for saving and restoring its cursors.
    pub fn simulated(&self) -> &SimulatedClient {
        &self.simulated
    }
}

/// The provider of a model: the catalog entry, else the id's prefix (SPEC 10.2).
pub fn infer_provider(model: &str) -> Option<Provider> {
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
}
