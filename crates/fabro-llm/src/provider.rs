//! LLM providers (SPEC 10.1).

/// A provider fabro can talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provider {
    /// Anthropic Messages API.
    Anthropic,
    /// OpenAI Responses API.
    OpenAi,
    /// Google Gemini generateContent.
    Gemini,
    /// Any server speaking OpenAI Chat Completions.
    OpenAiCompatible,
    /// The built-in deterministic offline provider.
    Simulated,
}

impl Provider {
    /// Every provider.
    pub const ALL: &'static [Provider] = &[
        Provider::Anthropic,
        Provider::OpenAi,
        Provider::Gemini,
        Provider::OpenAiCompatible,
        Provider::Simulated,
    ];

    /// The provider's name as written in workflows and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
            Provider::Gemini => "gemini",
            Provider::OpenAiCompatible => "openai_compatible",
            Provider::Simulated => "simulated",
        }
    }

    /// Parses a provider name; `google` is an alias of `gemini` everywhere a provider
    /// is named (SPEC 10.7, decision 62).
    pub fn parse(text: &str) -> Option<Provider> {
        if text == "google" {
            return Some(Provider::Gemini);
        }
        Provider::ALL
            .iter()
            .copied()
            .find(|provider| provider.as_str() == text)
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &provider in Provider::ALL {
            assert_eq!(Provider::parse(provider.as_str()), Some(provider));
        }
        assert_eq!(Provider::parse("Anthropic"), None);
        assert_eq!(Provider::parse("google"), Some(Provider::Gemini));
    }
}
