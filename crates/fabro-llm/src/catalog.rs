//! The model catalog shipped inside the binary (SPEC 10.2).

use crate::provider::Provider;

/// What fabro knows about one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// Canonical model id.
    pub id: &'static str,
    /// Provider serving it.
    pub provider: Provider,
    /// Context window in tokens.
    pub context_window: u32,
    /// Maximum output tokens per call.
    pub max_output: u32,
    /// USD per million input tokens.
    pub input_price: f64,
    /// USD per million output tokens.
    pub output_price: f64,
    /// Other names that resolve to this model.
    pub aliases: &'static [&'static str],
    /// Whether it is its provider's default model.
    pub default: bool,
    /// Supports tool calls.
    pub tools: bool,
    /// Accepts images.
    pub vision: bool,
    /// Supports reasoning effort.
    pub reasoning: bool,
}

macro_rules! model {
    ($id:literal, $provider:ident, $context:literal, $max_out:literal, $input:literal / $output:literal,
     aliases: [$($alias:literal),*], default: $default:literal, vision: $vision:literal, reasoning: $reasoning:literal) => {
        ModelInfo {
            id: $id,
            provider: Provider::$provider,
            context_window: $context,
            max_output: $max_out,
            input_price: $input,
            output_price: $output,
            aliases: &[$($alias),*],
            default: $default,
            tools: true,
            vision: $vision,
            reasoning: $reasoning,
        }
    };
}

/// Every model in the catalog, grouped by provider.
pub const CATALOG: &[ModelInfo] = &[
    model!("claude-opus-4-6", Anthropic, 1_000_000, 128_000, 5.0 / 25.0, aliases: ["opus"], default: false, vision: true, reasoning: true),
    model!("claude-sonnet-4-5", Anthropic, 200_000, 64_000, 3.0 / 15.0, aliases: [], default: false, vision: true, reasoning: true),
    model!("claude-sonnet-4-6", Anthropic, 200_000, 64_000, 3.0 / 15.0, aliases: ["sonnet"], default: true, vision: true, reasoning: true),
    model!("claude-haiku-4-5", Anthropic, 200_000, 8_192, 0.8 / 4.0, aliases: ["haiku"], default: false, vision: true, reasoning: false),
    model!("gpt-5.2", OpenAi, 1_047_576, 128_000, 1.75 / 14.0, aliases: ["gpt5"], default: false, vision: true, reasoning: true),
    model!("gpt-5.2-codex", OpenAi, 1_047_576, 128_000, 1.75 / 14.0, aliases: [], default: false, vision: true, reasoning: true),
    model!("gpt-5.4", OpenAi, 1_047_576, 128_000, 2.5 / 15.0, aliases: [], default: true, vision: true, reasoning: true),
    model!("gpt-5-mini", OpenAi, 1_047_576, 128_000, 0.25 / 2.0, aliases: [], default: false, vision: true, reasoning: true),
    model!("gemini-3.1-pro-preview", Gemini, 1_048_576, 65_536, 2.0 / 12.0, aliases: ["gemini-pro"], default: true, vision: true, reasoning: true),
    model!("gemini-3-flash-preview", Gemini, 1_048_576, 65_536, 0.5 / 3.0, aliases: ["gemini-flash"], default: false, vision: true, reasoning: true),
    model!("simulated", Simulated, 200_000, 8_192, 0.0 / 0.0, aliases: [], default: true, vision: false, reasoning: true),
];

/// The model with this id or alias.
pub fn find(name: &str) -> Option<&'static ModelInfo> {
    CATALOG
        .iter()
        .find(|model| model.id == name || model.aliases.contains(&name))
}

/// Whether `name` is a catalog id or alias.
pub fn is_known(name: &str) -> bool {
    find(name).is_some()
}

/// The default model of `provider`, if the catalog has one.
pub fn default_model(provider: Provider) -> Option<&'static ModelInfo> {
    CATALOG
        .iter()
        .find(|model| model.provider == provider && model.default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_to_ids() {
        assert_eq!(find("sonnet").map(|m| m.id), Some("claude-sonnet-4-6"));
        assert_eq!(find("gpt5").map(|m| m.id), Some("gpt-5.2"));
        assert_eq!(
            find("gemini-flash").map(|m| m.id),
            Some("gemini-3-flash-preview")
        );
        assert!(find("gpt-4").is_none());
    }

    #[test]
    fn every_provider_with_models_has_one_default() {
        for &provider in Provider::ALL {
            let defaults = CATALOG
                .iter()
                .filter(|model| model.provider == provider && model.default)
                .count();
            let any = CATALOG.iter().any(|model| model.provider == provider);
            assert_eq!(defaults, usize::from(any), "{provider}");
        }
        assert_eq!(
            default_model(Provider::OpenAi).map(|m| m.id),
            Some("gpt-5.4")
        );
    }

    #[test]
    fn capabilities_match_the_spec() {
        assert!(CATALOG.iter().all(|model| model.tools));
        assert!(CATALOG
            .iter()
            .all(|model| model.reasoning == (model.id != "claude-haiku-4-5")));
        assert!(CATALOG
            .iter()
            .all(|model| model.vision == (model.id != "simulated")));
    }
}
