//! Credentials that cannot be printed by accident (SPEC 13.1).
//!
//! [`ApiKey`] holds a provider key; its `Debug` and `Display` print `[REDACTED]`, and the
//! only way to read the value is [`ApiKey::expose`], used when building request headers.
//! [`redact_url`] and [`scrub`] clean URLs and provider error bodies before they reach an
//! error message, a log or an event.

/// What replaces a secret in anything shown or stored.
pub const REDACTED: &str = "[REDACTED]";

/// A provider API key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key value.
    pub fn new(value: impl Into<String>) -> ApiKey {
        ApiKey(value.into())
    }

    /// The key itself, for request headers only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(REDACTED)
    }
}

impl std::fmt::Display for ApiKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(REDACTED)
    }
}

/// Query parameters whose values are redacted in URLs (SPEC 13.1).
const SECRET_PARAMETERS: &[&str] = &[
    "key",
    "api_key",
    "apikey",
    "token",
    "access_token",
    "sig",
    "signature",
    "password",
];

/// `url` with its userinfo and the values of secret query parameters replaced by
/// `[REDACTED]`.
pub fn redact_url(url: &str) -> String {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((head, tail)) => (head, Some(tail)),
        None => (url, None),
    };
    let (base, query) = match before_fragment.split_once('?') {
        Some((head, tail)) => (head, Some(tail)),
        None => (before_fragment, None),
    };
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://{REDACTED}@{host}{path}"),
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(query) = query {
        out.push('?');
        let parts: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _))
                    if SECRET_PARAMETERS.contains(&name.to_ascii_lowercase().as_str()) =>
                {
                    format!("{name}={REDACTED}")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&parts.join("&"));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// `text` with every occurrence of `key` replaced by `[REDACTED]` and cut to `limit`
/// characters, for provider error bodies (which may echo a key back).
pub fn scrub(text: &str, key: Option<&ApiKey>, limit: usize) -> String {
    let cleaned = match key {
        Some(key) if !key.expose().is_empty() => text.replace(key.expose(), REDACTED),
        _ => text.to_owned(),
    };
    if cleaned.chars().count() > limit {
        let mut cut: String = cleaned.chars().take(limit).collect();
        cut.push('…');
        cut
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_print() {
        let key = ApiKey::new("sk-very-secret");
        assert_eq!(format!("{key} {key:?}"), "[REDACTED] [REDACTED]");
        assert_eq!(key.expose(), "sk-very-secret");
    }

    #[test]
    fn urls_lose_userinfo_and_secret_parameters() {
        assert_eq!(
            redact_url("https://user:pw@host.example/v1beta/models/x?alt=sse&key=AIza123&Token=t#f"),
            "https://[REDACTED]@host.example/v1beta/models/x?alt=sse&key=[REDACTED]&Token=[REDACTED]#f"
        );
        assert_eq!(
            redact_url("http://127.0.0.1:80/v1/messages"),
            "http://127.0.0.1:80/v1/messages"
        );
    }

    #[test]
    fn bodies_are_scrubbed_and_cut() {
        let key = ApiKey::new("sk-abc");
        assert_eq!(
            scrub("bad key sk-abc!", Some(&key), 100),
            "bad key [REDACTED]!"
        );
        assert_eq!(scrub("abcdef", None, 3), "abc…");
    }
}
