//! The model catalog shipped inside the binary (SPEC 10.2).

use crate::message::{ReasoningEffort, Request, Usage};
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
    /// USD per million input tokens read from the prompt cache.
    pub cache_read_price: f64,
    /// USD per million input tokens written to the prompt cache.
    pub cache_write_price: f64,
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
            // Published cache prices: reads cost a tenth of input everywhere; Anthropic
            // charges writes at 1.25x input, the others at the input price.
            cache_read_price: $input * 0.1,
            cache_write_price: if matches!(Provider::$provider, Provider::Anthropic) { $input * 1.25 } else { $input },
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

/// The output cap of a model outside the catalog (SPEC 2.10).
pub const DEFAULT_MAX_OUTPUT: u32 = 8_192;

/// The catalog's max output for `name`, else [`DEFAULT_MAX_OUTPUT`].
pub fn max_output(name: &str) -> u32 {
    find(name).map_or(DEFAULT_MAX_OUTPUT, |model| model.max_output)
}

/// Whether `name` is a catalog model with reasoning; reasoning effort is sent only to
/// those (SPEC 10.1 item 2).
pub fn supports_reasoning(name: &str) -> bool {
    find(name).is_some_and(|model| model.reasoning)
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

impl Request {
    /// The reasoning effort to send: [`Request::reasoning_effort`] when the catalog
    /// entry of the model supports reasoning, else none (SPEC 10.1 item 2).
    pub fn effective_reasoning_effort(&self) -> Option<ReasoningEffort> {
        self.reasoning_effort
            .filter(|_| supports_reasoning(&self.model))
    }

    /// The output cap to send: [`Request::max_tokens`], else the catalog's max output
    /// for the model, else 8,192 (SPEC 2.10).
    pub fn effective_max_tokens(&self) -> u32 {
        self.max_tokens.unwrap_or_else(|| max_output(&self.model))
    }
}

/// The cost of `usage` on `model` (SPEC 10.1.4): uncached input at the input price, cache
/// reads and writes at the cache prices, output (reasoning included) at the output
/// price. `None` for models the catalog does not price.
pub fn cost_usd(model: &str, usage: &Usage) -> Option<f64> {
    let info = find(model)?;
    let cached = usage.cache_read_tokens + usage.cache_write_tokens;
    let uncached = usage.input_tokens.saturating_sub(cached);
    let dollars = uncached as f64 * info.input_price
        + usage.cache_read_tokens as f64 * info.cache_read_price
        + usage.cache_write_tokens as f64 * info.cache_write_price
        + usage.output_tokens as f64 * info.output_price;
    Some(dollars / 1_000_000.0)
}

/// The fallback model on `provider` closest to `original` (SPEC 9.4): among the
/// provider's models with every capability the original has (tools always when
/// `require_tools`), the smallest difference of input+output price; ties go to the
/// provider's default, then the smallest id. An original outside the catalog maps to the
/// provider's default model. `None` when no model qualifies.
pub fn closest_model(
    original: &str,
    provider: Provider,
    require_tools: bool,
) -> Option<&'static ModelInfo> {
    let Some(original) = find(original) else {
        return default_model(provider).filter(|model| model.tools || !require_tools);
    };
    let price = original.input_price + original.output_price;
    CATALOG
        .iter()
        .filter(|model| model.provider == provider)
        .filter(|model| {
            (model.tools || !(original.tools || require_tools))
                && (model.vision || !original.vision)
                && (model.reasoning || !original.reasoning)
        })
        .min_by(|a, b| {
            let distance =
                |model: &ModelInfo| (model.input_price + model.output_price - price).abs();
            distance(a)
                .total_cmp(&distance(b))
                .then(b.default.cmp(&a.default))
                .then(a.id.cmp(b.id))
        })
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
    fn cost_uses_cache_and_output_prices() {
        let usage = crate::message::Usage {
            input_tokens: 1_500_000,
            output_tokens: 100_000,
            cache_read_tokens: 400_000,
            cache_write_tokens: 100_000,
            ..Default::default()
        };
        // 1M uncached × 3 + 0.4M × 0.3 + 0.1M × 3.75 + 0.1M × 15.
        let cost = cost_usd("sonnet", &usage).expect("priced");
        assert!((cost - (3.0 + 0.12 + 0.375 + 1.5)).abs() < 1e-9, "{cost}");
        assert_eq!(cost_usd("llama3", &usage), None);
    }

    #[test]
    fn closest_models_follow_capabilities_then_price() {
        let pick = |model: &str, provider| closest_model(model, provider, true).map(|m| m.id);
        // Sonnet (18 $) → gpt-5.4 (17.5) beats gpt-5.2 (15.75).
        assert_eq!(pick("claude-sonnet-4-6", Provider::OpenAi), Some("gpt-5.4"));
        // Opus (30 $) → gemini pro (14).
        assert_eq!(
            pick("opus", Provider::Gemini),
            Some("gemini-3.1-pro-preview")
        );
        // Haiku (4.8 $) → flash (3.5), the cheapest distance.
        assert_eq!(
            pick("haiku", Provider::Gemini),
            Some("gemini-3-flash-preview")
        );
        // gpt-5-mini (2.25) with reasoning: haiku lacks it, so sonnet-4-5/4-6 tie → default.
        assert_eq!(
            pick("gpt-5-mini", Provider::Anthropic),
            Some("claude-sonnet-4-6")
        );
        assert_eq!(
            pick("unknown-model", Provider::Anthropic),
            Some("claude-sonnet-4-6")
        );
        assert_eq!(pick("sonnet", Provider::OpenAiCompatible), None);
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
