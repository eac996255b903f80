//! The web tools (SPEC 19.3): `web_fetch` ([`WebFetch`]) fetches an `http`/`https` URL
//! with at most 5 redirects, 15 s and 5 MB, turns HTML into Markdown (`htmd`) and cuts
//! the text at `max_chars`; `web_search` ([`WebSearch`]) asks Brave's web search API.
//! They run in this process, not in the sandbox; the engine offers them only when the
//! configuration allows network access.

use std::time::Duration;

use fabro_llm::BoxFuture;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::tool::{parse_arguments, Tool, ToolContext, ToolError};
use crate::truncate::{OutputLimit, TruncationMode};

/// Redirects `web_fetch` follows.
pub const MAX_REDIRECTS: usize = 5;
/// Time limit of one fetch, body included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest body `web_fetch` reads.
pub const MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// `max_chars` when the call gives none.
pub const DEFAULT_MAX_CHARS: usize = 20_000;
/// Brave's endpoint when `BRAVE_BASE_URL` is unset.
pub const BRAVE_BASE_URL: &str = "https://api.search.brave.com";

/// `web_fetch {url, max_chars}`.
#[derive(Debug, Clone)]
pub struct WebFetch {
    timeout: Duration,
    max_body: usize,
}

impl Default for WebFetch {
    fn default() -> WebFetch {
        WebFetch {
            timeout: FETCH_TIMEOUT,
            max_body: MAX_BODY_BYTES,
        }
    }
}

impl WebFetch {
    /// A fetch with other limits (tests of the limits use short ones).
    pub fn with_limits(timeout: Duration, max_body: usize) -> WebFetch {
        WebFetch { timeout, max_body }
    }
}

#[derive(Deserialize)]
struct FetchArguments {
    url: String,
    max_chars: Option<usize>,
}

impl Tool for WebFetch {
    fn name(&self) -> &'static str {
        "web_fetch"
    }

    fn description(&self) -> &'static str {
        "Fetches an http or https URL and returns its text; HTML pages are converted to Markdown. Long pages are cut at max_chars characters."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The http or https URL."},
                "max_chars": {"type": "integer", "minimum": 1, "description": "Most characters returned (default 20000)."}
            },
            "required": ["url"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(200_000, TruncationMode::HeadTail)
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: FetchArguments = parse_arguments(arguments)?;
            let url = reqwest::Url::parse(&arguments.url)
                .map_err(|error| ToolError::InvalidArguments(format!("invalid url: {error}")))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(ToolError::InvalidArguments(format!(
                    "only http and https URLs can be fetched, not {}",
                    url.scheme()
                )));
            }
            let (text, content_type) = tokio::time::timeout(self.timeout, self.fetch(url))
                .await
                .map_err(|_| {
                ToolError::Failed(format!(
                    "no complete answer within {}s",
                    self.timeout.as_secs_f64()
                ))
            })??;
            let text = if content_type.contains("html") {
                htmd::HtmlToMarkdown::builder()
                    .skip_tags(vec!["script", "style", "head", "noscript"])
                    .build()
                    .convert(&text)
                    .map_err(|error| ToolError::Failed(format!("cannot convert HTML: {error}")))?
            } else {
                text
            };
            Ok(cut(
                text.trim(),
                arguments.max_chars.unwrap_or(DEFAULT_MAX_CHARS),
            ))
        })
    }
}

impl WebFetch {
    /// The body as text (at most `max_body` bytes) and its content type.
    async fn fetch(&self, url: reqwest::Url) -> Result<(String, String), ToolError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
            .user_agent(concat!("fabro/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| ToolError::Failed(error.to_string()))?;
        let response = client.get(url).send().await.map_err(|error| {
            if error.is_redirect() {
                ToolError::Failed(format!("more than {MAX_REDIRECTS} redirects"))
            } else {
                ToolError::Failed(format!("request failed: {error}"))
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(ToolError::Failed(format!("HTTP status {status}")));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        if response
            .content_length()
            .is_some_and(|length| length > self.max_body as u64)
        {
            return Err(self.too_large());
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|error| ToolError::Failed(format!("read failed: {error}")))?;
            if body.len() + chunk.len() > self.max_body {
                return Err(self.too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok((String::from_utf8_lossy(&body).into_owned(), content_type))
    }

    fn too_large(&self) -> ToolError {
        ToolError::Failed(format!(
            "the response is larger than {} bytes",
            self.max_body
        ))
    }
}

/// `text` cut at `max_chars` characters, followed when cut by
/// `[cut: {shown} of {total} characters]` (SPEC 19.3).
fn cut(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    let shown: String = text.chars().take(max_chars).collect();
    format!("{shown}\n[cut: {max_chars} of {total} characters]")
}

/// `web_search {query, count}` on Brave's web search API (`X-Subscription-Token`).
pub struct WebSearch {
    base_url: String,
    key: String,
}

impl std::fmt::Debug for WebSearch {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WebSearch")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl WebSearch {
    /// Searches through `base_url` (Brave's, or `BRAVE_BASE_URL`) with `key`.
    pub fn brave(base_url: impl Into<String>, key: impl Into<String>) -> WebSearch {
        WebSearch {
            base_url: base_url.into(),
            key: key.into(),
        }
    }
}

#[derive(Deserialize)]
struct SearchArguments {
    query: String,
    count: Option<u32>,
}

impl Tool for WebSearch {
    fn name(&self) -> &'static str {
        "web_search"
    }

    fn description(&self) -> &'static str {
        "Searches the web; returns titles, URLs and snippets of the results."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "count": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Results wanted (default 10)."}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(20_000, TruncationMode::Tail)
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: SearchArguments = parse_arguments(arguments)?;
            let count = arguments.count.unwrap_or(10).clamp(1, 20).to_string();
            let client = reqwest::Client::builder()
                .timeout(FETCH_TIMEOUT)
                .build()
                .map_err(|error| ToolError::Failed(error.to_string()))?;
            let url = format!("{}/res/v1/web/search", self.base_url.trim_end_matches('/'));
            let response = client
                .get(url)
                .query(&[("q", arguments.query.as_str()), ("count", count.as_str())])
                .header("Accept", "application/json")
                .header("X-Subscription-Token", &self.key)
                .send()
                .await
                .map_err(|error| {
                    ToolError::Failed(format!("search failed: {}", error.without_url()))
                })?;
            let status = response.status();
            if !status.is_success() {
                return Err(ToolError::Failed(format!(
                    "search failed: HTTP status {status}"
                )));
            }
            let bytes = response.bytes().await.map_err(|error| {
                ToolError::Failed(format!("search failed: {}", error.without_url()))
            })?;
            let body: Value = serde_json::from_slice(&bytes)
                .map_err(|error| ToolError::Failed(format!("search failed: {error}")))?;
            Ok(render_results(&body))
        })
    }
}

/// Brave's `web.results` as a numbered list of title, URL and snippet.
fn render_results(body: &Value) -> String {
    let results = body["web"]["results"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if results.is_empty() {
        return "No results.".to_owned();
    }
    let mut text = String::new();
    for (index, result) in results.iter().enumerate() {
        let field = |key: &str| result[key].as_str().unwrap_or_default();
        text.push_str(&format!(
            "{}. {}\n   {}\n   {}\n",
            index + 1,
            field("title"),
            field("url"),
            field("description")
        ));
    }
    text
}

#[cfg(test)]
mod tests;
