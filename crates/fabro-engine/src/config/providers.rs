//! `[llm.providers.NAME]`: providers configured by name (SPEC 10.7), with the wire that
//! speaks to them, their base URL, the variable holding their key, extra headers and a
//! model table with limits and prices. The presets of SPEC 10.7 are named here too, so
//! that a configuration may add models to one without repeating its endpoint.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ConfigError, CostLimit, Section};

/// The wires a configured provider may use (`wire`), as `(value, provider)`.
pub(crate) const WIRES: [(&str, &str); 4] = [
    ("chat", "openai_compatible"),
    ("responses", "openai"),
    ("anthropic", "anthropic"),
    ("gemini", "gemini"),
];

/// One preset of SPEC 10.7: an OpenAI-compatible Chat Completions endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Preset {
    /// Its name.
    pub name: &'static str,
    /// The default base URL (with `/v1` or the vendor's equivalent).
    pub base_url: &'static str,
    /// The variable holding its key, if it takes one.
    pub key_env: Option<&'static str>,
    /// Whether a run fails without the key (LiteLLM and Ollama run without one).
    pub key_required: bool,
}

/// The presets of SPEC 10.7.
pub(crate) const PRESETS: [Preset; 8] = [
    preset(
        "kimi",
        "https://api.moonshot.ai/v1",
        Some("KIMI_API_KEY"),
        true,
    ),
    preset(
        "zai",
        "https://api.z.ai/api/coding/paas/v4",
        Some("ZAI_API_KEY"),
        true,
    ),
    preset(
        "minimax",
        "https://api.minimax.io/v1",
        Some("MINIMAX_API_KEY"),
        true,
    ),
    preset(
        "inception",
        "https://api.inceptionlabs.ai/v1",
        Some("INCEPTION_API_KEY"),
        true,
    ),
    preset(
        "openrouter",
        "https://openrouter.ai/api/v1",
        Some("OPENROUTER_API_KEY"),
        true,
    ),
    preset(
        "fireworks",
        "https://api.fireworks.ai/inference/v1",
        Some("FIREWORKS_API_KEY"),
        true,
    ),
    preset("ollama", "http://127.0.0.1:11434/v1", None, false),
    preset(
        "litellm",
        "http://127.0.0.1:4000/v1",
        Some("LITELLM_API_KEY"),
        false,
    ),
];

const fn preset(
    name: &'static str,
    base_url: &'static str,
    key_env: Option<&'static str>,
    key_required: bool,
) -> Preset {
    Preset {
        name,
        base_url,
        key_env,
        key_required,
    }
}

/// The preset named `name`.
pub(crate) fn preset_named(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|preset| preset.name == name)
}

/// The built-in provider names, which a configuration cannot redefine.
const BUILT_IN: [&str; 6] = [
    "anthropic",
    "openai",
    "gemini",
    "google",
    "openai_compatible",
    "simulated",
];

/// `[llm.providers.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderConfig {
    /// `wire`: `chat`, `responses`, `anthropic` or `gemini` (`chat` for presets).
    pub wire: String,
    /// `base_url`; presets default to theirs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// `api_key_env`: the variable holding the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// `headers`; a value `${VAR}` is read from the environment. Recorded redacted.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "super::redacted_values"
    )]
    pub headers: BTreeMap<String, String>,
    /// `[llm.providers.NAME.models."ID"]`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, ModelConfig>,
}

/// `[llm.providers.NAME.models."ID"]`: limits and USD prices per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    /// `context_window`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// `max_output`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output: Option<u64>,
    /// `input_price`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_price: Option<CostLimit>,
    /// `output_price`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_price: Option<CostLimit>,
    /// `cache_read_price`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_price: Option<CostLimit>,
    /// `reasoning`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<bool>,
}

pub(super) const PROVIDER_KEYS: &[&str] = &["wire", "base_url", "api_key_env", "headers", "models"];
pub(super) const MODEL_KEYS: &[&str] = &[
    "context_window",
    "max_output",
    "input_price",
    "output_price",
    "cache_read_price",
    "reasoning",
];

/// Reads `[llm.providers]`.
pub(super) fn providers(
    llm: &Section<'_, '_>,
) -> Result<BTreeMap<String, ProviderConfig>, ConfigError> {
    let mut providers = BTreeMap::new();
    let Some(value) = llm.get("providers") else {
        return Ok(providers);
    };
    let table = llm.expect_table("providers", value)?;
    let section = Section::free(llm.context, llm.child("providers"), table)?;
    for (name, entry) in table {
        let name = name.get_ref().to_string();
        let Some(provider) = section.section(&name, PROVIDER_KEYS)? else {
            continue;
        };
        let invalid = |key: &str, reason: String| ConfigError::Provider {
            key: provider.child(key),
            file: llm.context.file.to_path_buf(),
            line: llm.context.line(entry.span().start),
            reason,
        };
        if BUILT_IN.contains(&name.as_str()) {
            return Err(invalid("wire", format!("'{name}' is a built-in provider")));
        }
        let preset = preset_named(&name);
        let wire = match (provider.string("wire")?, preset) {
            (Some(wire), _) => wire,
            (None, Some(_)) => "chat".to_owned(),
            (None, None) => return Err(invalid("wire", "missing wire".to_owned())),
        };
        if !WIRES.iter().any(|(known, _)| *known == wire) {
            return Err(invalid(
                "wire",
                format!("unknown wire '{wire}'; expected chat, responses, anthropic or gemini"),
            ));
        }
        let base_url = provider.string("base_url")?;
        if base_url.is_none() && preset.is_none() {
            return Err(invalid("base_url", "missing base_url".to_owned()));
        }
        let mut models = BTreeMap::new();
        if let Some(value) = provider.get("models") {
            let table = provider.expect_table("models", value)?;
            let listed = Section::free(llm.context, provider.child("models"), table)?;
            for (id, _) in table {
                let id = id.get_ref().to_string();
                if let Some(model) = listed.section(&id, MODEL_KEYS)? {
                    models.insert(
                        id,
                        ModelConfig {
                            context_window: model.count("context_window")?,
                            max_output: model.count("max_output")?,
                            input_price: model.cost("input_price")?,
                            output_price: model.cost("output_price")?,
                            cache_read_price: model.cost("cache_read_price")?,
                            reasoning: model.boolean("reasoning")?,
                        },
                    );
                }
            }
        }
        // A key travels only in variables fabro takes out of the environment at start-up
        // and redacts everywhere (SPEC 13.1, 13.5): a variable named otherwise would reach
        // child processes and records unredacted.
        let api_key_env = provider.string("api_key_env")?;
        let headers = provider.string_table("headers")?;
        providers.insert(
            name,
            ProviderConfig {
                wire,
                base_url,
                api_key_env,
                headers,
                models,
            },
        );
    }
    Ok(providers)
}
