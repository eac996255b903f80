//! The secrets of the process and the redaction of their values (SPEC 13.1, 13.5).
//!
//! The `fabro` binary moves every credential variable out of its environment at
//! start-up, before any thread exists, into one [`SecretStore`] that it [`install`]s for
//! the whole process. Credential lookups, the key a CLI backend gets back and
//! `[sandbox] env_passthrough` read the store ([`secrets`]); everything fabro captures or
//! writes passes through its [`Redactor`] ([`redactor`]), which replaces every secret
//! value of at least [`MIN_SECRET_LEN`] bytes by `[REDACTED]`. [`StreamRedactor`] does
//! the same for output read in chunks, holding back a possible start of a secret until
//! the next chunk decides it.
//!
//! Nothing here reads the environment: the binary hands the variables over.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use crate::secret::REDACTED;

/// Values shorter than this are not treated as secrets (SPEC 13.1): redacting short
/// values would mangle ordinary text.
pub const MIN_SECRET_LEN: usize = 8;

/// Replaces known secret values by `[REDACTED]`. Cheap to clone; an empty redactor
/// returns its input borrowed.
#[derive(Clone, Default)]
pub struct Redactor {
    patterns: Option<Arc<Patterns>>,
}

/// The byte sequences to find, longest first (so a secret containing another is
/// replaced whole), with a table of their first bytes for a fast scan.
struct Patterns {
    values: Vec<Vec<u8>>,
    first_bytes: [bool; 256],
    longest: usize,
}

impl Redactor {
    /// A redactor for `values`; values shorter than [`MIN_SECRET_LEN`] are ignored. Each
    /// value is also found in its JSON-escaped spelling, so serialised records are
    /// redacted even when a value holds quotes, backslashes or control characters.
    pub fn new<V: AsRef<[u8]>>(values: impl IntoIterator<Item = V>) -> Redactor {
        let mut found: Vec<Vec<u8>> = Vec::new();
        for value in values {
            let value = value.as_ref();
            if value.len() < MIN_SECRET_LEN {
                continue;
            }
            found.push(value.to_vec());
            if let Ok(text) = std::str::from_utf8(value) {
                if let Ok(json) = serde_json::to_string(text) {
                    let escaped = &json.as_bytes()[1..json.len() - 1];
                    if escaped != value {
                        found.push(escaped.to_vec());
                    }
                }
            }
        }
        if found.is_empty() {
            return Redactor::default();
        }
        found.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        found.dedup();
        let mut first_bytes = [false; 256];
        for value in &found {
            first_bytes[usize::from(value[0])] = true;
        }
        let longest = found.first().map_or(0, Vec::len);
        Redactor {
            patterns: Some(Arc::new(Patterns {
                values: found,
                first_bytes,
                longest,
            })),
        }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_none()
    }

    /// `bytes` with every secret replaced.
    pub fn redact_bytes<'b>(&self, bytes: &'b [u8]) -> Cow<'b, [u8]> {
        let Some(patterns) = &self.patterns else {
            return Cow::Borrowed(bytes);
        };
        let Some(first) = patterns.next_match(bytes, 0) else {
            return Cow::Borrowed(bytes);
        };
        let mut out = Vec::with_capacity(bytes.len());
        let mut start = 0;
        let mut found = Some(first);
        while let Some((at, len)) = found {
            out.extend_from_slice(&bytes[start..at]);
            out.extend_from_slice(REDACTED.as_bytes());
            start = at + len;
            found = patterns.next_match(bytes, start);
        }
        out.extend_from_slice(&bytes[start..]);
        Cow::Owned(out)
    }

    /// `text` with every secret replaced.
    pub fn redact_str<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match self.redact_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // A secret found in UTF-8 text was itself whole UTF-8 characters (UTF-8 is
            // self-synchronising), so replacing it keeps the text valid.
            Cow::Owned(bytes) => Cow::Owned(match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
            }),
        }
    }

    /// `text` with every secret replaced, in place.
    pub fn redact_string(&self, text: &mut String) {
        if let Cow::Owned(redacted) = self.redact_str(text) {
            *text = redacted;
        }
    }

    /// Every string (and object key) inside `value` with its secrets replaced.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        if self.is_empty() {
            return;
        }
        match value {
            serde_json::Value::String(text) => self.redact_string(text),
            serde_json::Value::Array(items) => {
                for item in items {
                    self.redact_json(item);
                }
            }
            serde_json::Value::Object(map) => self.redact_json_map(map),
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {
            }
        }
    }

    /// [`Redactor::redact_json`] for the entries of an object.
    pub fn redact_json_map(&self, map: &mut serde_json::Map<String, serde_json::Value>) {
        if self.is_empty() {
            return;
        }
        let renamed: Vec<String> = map
            .keys()
            .filter(|key| matches!(self.redact_str(key), Cow::Owned(_)))
            .cloned()
            .collect();
        for key in renamed {
            if let Some(item) = map.remove(&key) {
                map.insert(self.redact_str(&key).into_owned(), item);
            }
        }
        for item in map.values_mut() {
            self.redact_json(item);
        }
    }

    /// A redactor for one stream of chunks.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            redactor: self.clone(),
            pending: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self
            .patterns
            .as_ref()
            .map_or(0, |patterns| patterns.values.len());
        write!(formatter, "Redactor({count} patterns)")
    }
}

impl Patterns {
    /// The first complete match at or after `from`: its position and length.
    fn next_match(&self, bytes: &[u8], from: usize) -> Option<(usize, usize)> {
        (from..bytes.len()).find_map(|at| self.match_at(bytes, at).map(|len| (at, len)))
    }

    /// The length of the (longest) secret starting at `at`.
    fn match_at(&self, bytes: &[u8], at: usize) -> Option<usize> {
        if !self.first_bytes[usize::from(bytes[at])] {
            return None;
        }
        let rest = &bytes[at..];
        self.values
            .iter()
            .find(|value| rest.starts_with(value))
            .map(Vec::len)
    }

    /// Whether `tail` (shorter than the longest secret) could be the start of a secret
    /// that the next bytes complete.
    fn may_continue(&self, tail: &[u8]) -> bool {
        self.values
            .iter()
            .any(|value| value.len() > tail.len() && value.starts_with(tail))
    }
}

/// Redacts a stream read in chunks: a secret split across chunks is still replaced,
/// because bytes that may begin one are held back until the next chunk (or
/// [`finish`](StreamRedactor::finish)) decides.
#[derive(Debug)]
pub struct StreamRedactor {
    redactor: Redactor,
    pending: Vec<u8>,
}

impl StreamRedactor {
    /// Redacts `chunk` (after what was held back) and appends what is decided to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let Some(patterns) = &self.redactor.patterns else {
            out.extend_from_slice(chunk);
            return;
        };
        let owned;
        let bytes: &[u8] = if self.pending.is_empty() {
            chunk
        } else {
            self.pending.extend_from_slice(chunk);
            owned = std::mem::take(&mut self.pending);
            &owned
        };
        let mut start = 0;
        let mut at = 0;
        while at < bytes.len() {
            // Near the end, a (longer) secret may still be completed by the next chunk.
            if bytes.len() - at < patterns.longest
                && patterns.first_bytes[usize::from(bytes[at])]
                && patterns.may_continue(&bytes[at..])
            {
                break;
            }
            if let Some(len) = patterns.match_at(bytes, at) {
                out.extend_from_slice(&bytes[start..at]);
                out.extend_from_slice(REDACTED.as_bytes());
                at += len;
                start = at;
                continue;
            }
            at += 1;
        }
        out.extend_from_slice(&bytes[start..at]);
        self.pending = bytes[at..].to_vec();
    }

    /// Appends what is still held back, redacted: the stream has ended, so no secret can
    /// grow any longer.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        out.extend_from_slice(&self.redactor.redact_bytes(&pending));
    }
}

/// The credential variables taken out of the process environment, and the redactor of
/// their values.
#[derive(Debug, Default)]
pub struct SecretStore {
    variables: Vec<(OsString, OsString)>,
    redactor: Redactor,
}

impl SecretStore {
    /// A store of `variables` (name, value).
    pub fn new(variables: Vec<(OsString, OsString)>) -> SecretStore {
        let redactor = Redactor::new(variables.iter().map(|(_, value)| value.as_bytes()));
        SecretStore {
            variables,
            redactor,
        }
    }

    /// The value of variable `name`.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.variables
            .iter()
            .find(|(variable, _)| variable == name)
            .map(|(_, value)| value.as_os_str())
    }

    /// The value of variable `name` as text (`None` when absent or not UTF-8).
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(OsStr::to_str)
    }

    /// Every variable, for a child that must see them (the `--detach` worker, which
    /// takes them out of its own environment again) or for a passthrough filter.
    pub fn variables(&self) -> impl Iterator<Item = (&OsString, &OsString)> {
        self.variables.iter().map(|(name, value)| (name, value))
    }

    /// The redactor of the stored values.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }
}

/// The process's secrets: `None` until [`install`]ed or [`adopt`]ed. A store is never
/// freed (an adoption leaks the one it replaces, once per adopted variable), so readers
/// keep a plain `&'static` reference.
static CURRENT: RwLock<Option<&'static SecretStore>> = RwLock::new(None);
static EMPTY: LazyLock<SecretStore> = LazyLock::new(SecretStore::default);

/// Makes `store` the process's secrets; the first installation wins (a later one, or
/// one after an [`adopt`], is handed back).
pub fn install(store: SecretStore) -> Result<(), SecretStore> {
    let mut current = CURRENT.write().unwrap_or_else(PoisonError::into_inner);
    if current.is_some() {
        return Err(store);
    }
    *current = Some(Box::leak(Box::new(store)));
    Ok(())
}

/// The process's secrets (empty until [`install`]ed).
pub fn secrets() -> &'static SecretStore {
    let current = *CURRENT.read().unwrap_or_else(PoisonError::into_inner);
    current.unwrap_or(&EMPTY)
}

/// Adds variable `name` with `value` to the process's secrets, for a variable that only
/// the configuration marks as a credential (`api_key_env` or a `${VAR}` header of a
/// provider configured by name, SPEC 10.7): from then on its value is redacted
/// everywhere and child environments leave it out, like the variables taken at
/// start-up. A name already in the store is left as it is.
pub fn adopt(name: &str, value: &str) {
    let mut current = CURRENT.write().unwrap_or_else(PoisonError::into_inner);
    let store = current.unwrap_or(&EMPTY);
    if store.get(name).is_some() {
        return;
    }
    let mut variables = store.variables.clone();
    variables.push((OsString::from(name), OsString::from(value)));
    *current = Some(Box::leak(Box::new(SecretStore::new(variables))));
}

/// The redactor of the process's secrets.
pub fn redactor() -> &'static Redactor {
    secrets().redactor()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk-split-secret-0123456789";

    fn redactor() -> Redactor {
        Redactor::new([SECRET, "short", "another-secret-value"])
    }

    #[test]
    fn values_are_replaced_and_short_ones_ignored() {
        let text = format!("a {SECRET} b short c another-secret-value{SECRET}");
        assert_eq!(
            redactor().redact_str(&text),
            "a [REDACTED] b short c [REDACTED][REDACTED]"
        );
        assert!(matches!(
            redactor().redact_str("nothing here"),
            Cow::Borrowed(_)
        ));
        assert!(Redactor::new(["short"]).is_empty());
    }

    #[test]
    fn the_json_spelling_of_a_value_is_found_too() {
        let redactor = Redactor::new(["quote\"in-the-middle"]);
        let json = serde_json::to_string("x quote\"in-the-middle y").expect("json");
        assert_eq!(redactor.redact_str(&json), "\"x [REDACTED] y\"");
    }

    #[test]
    fn json_values_are_redacted_inside_strings_and_keys() {
        let mut value = serde_json::json!({
            "output": format!("key={SECRET}"),
            SECRET: [1, {"deep": SECRET}],
        });
        redactor().redact_json(&mut value);
        assert_eq!(
            value,
            serde_json::json!({"output": "key=[REDACTED]", "[REDACTED]": [1, {"deep": "[REDACTED]"}]})
        );
    }

    #[test]
    fn the_longer_of_two_overlapping_secrets_wins() {
        let redactor = Redactor::new(["abcdefgh", "abcdefgh-and-more"]);
        assert_eq!(redactor.redact_str("abcdefgh-and-more!"), "[REDACTED]!");
        for cut in 0..=18 {
            let mut stream = redactor.stream();
            let mut out = Vec::new();
            stream.push(&b"abcdefgh-and-more!"[..cut], &mut out);
            stream.push(&b"abcdefgh-and-more!"[cut..], &mut out);
            stream.finish(&mut out);
            assert_eq!(out, b"[REDACTED]!", "cut at {cut}");
        }
        let mut stream = redactor.stream();
        let mut out = Vec::new();
        stream.push(b"abcdefgh-an", &mut out);
        stream.finish(&mut out);
        assert_eq!(out, b"[REDACTED]-an");
    }

    /// Every way of cutting the text into two or three chunks redacts the secret that
    /// crosses the cuts, and loses and adds nothing else.
    #[test]
    fn a_secret_split_across_chunks_is_still_redacted() {
        let text = format!("env: ANTHROPIC_API_KEY={SECRET}\nsk-split-not-it\n{SECRET}");
        let expected = "env: ANTHROPIC_API_KEY=[REDACTED]\nsk-split-not-it\n[REDACTED]";
        let bytes = text.as_bytes();
        let redactor = redactor();
        for first in 0..=bytes.len() {
            for second in first..=bytes.len() {
                let mut stream = redactor.stream();
                let mut out = Vec::new();
                stream.push(&bytes[..first], &mut out);
                stream.push(&bytes[first..second], &mut out);
                stream.push(&bytes[second..], &mut out);
                stream.finish(&mut out);
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    expected,
                    "cut at {first} and {second}"
                );
            }
        }
    }

    #[test]
    fn a_stream_emits_what_cannot_start_a_secret_at_once() {
        let mut stream = redactor().stream();
        let mut out = Vec::new();
        stream.push(b"plain text then sk-spl", &mut out);
        assert_eq!(out, b"plain text then ");
        stream.push(b"ash", &mut out);
        assert_eq!(out, b"plain text then sk-splash");
        stream.finish(&mut out);
        assert_eq!(out, b"plain text then sk-splash");
    }

    #[test]
    fn an_empty_redactor_passes_chunks_through() {
        let mut stream = Redactor::default().stream();
        let mut out = Vec::new();
        stream.push(b"sk-split-secret-0123456789", &mut out);
        stream.finish(&mut out);
        assert_eq!(out, SECRET.as_bytes());
    }

    #[test]
    fn the_store_answers_by_name() {
        let store = SecretStore::new(vec![
            ("MY_TOKEN".into(), "token-value-1".into()),
            ("X_SECRET".into(), "tiny".into()),
        ]);
        assert_eq!(store.get_str("MY_TOKEN"), Some("token-value-1"));
        assert_eq!(store.get_str("X_SECRET"), Some("tiny"));
        assert_eq!(store.get("OTHER"), None);
        assert_eq!(
            store.redactor().redact_str("[token-value-1]"),
            "[[REDACTED]]"
        );
        assert_eq!(store.variables().count(), 2);
    }
}

#[cfg(test)]
mod adopt_tests {
    use super::*;

    #[test]
    fn an_adopted_variable_is_a_secret_from_then_on() {
        let value = "adopted-value-FAKE-2718281828";
        assert!(secrets().get("ADOPT_TEST_GATEWAY_KEY").is_none());
        adopt("ADOPT_TEST_GATEWAY_KEY", value);
        assert_eq!(
            secrets().get_str("ADOPT_TEST_GATEWAY_KEY"),
            Some(value),
            "the store knows the variable"
        );
        assert_eq!(
            redactor().redact_str(&format!("key {value} end")),
            "key [REDACTED] end"
        );
        // A second adoption of the name keeps the first value.
        adopt("ADOPT_TEST_GATEWAY_KEY", "another-value-FAKE-1414");
        assert_eq!(secrets().get_str("ADOPT_TEST_GATEWAY_KEY"), Some(value));
    }
}
