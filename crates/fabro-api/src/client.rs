//! A typed client of `fabro server` (feature `client`): each route of SPEC 14.3 as a
//! method that sends the request type and returns the response type, and the event
//! stream decoded by the workspace's one SSE decoder ([`fabro_llm::sse::SseDecoder`]).
//! The CLI's `--server` commands use it; it prints nothing and decides no exit code.

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use fabro_llm::sse::{MalformedSse, SseDecoder, SseEvent};

use crate::{
    AnswerRequest, Answered, ArtifactList, Canceling, ErrorBody, EventPage, ForkRequest, Health,
    QuestionList, ResumeRequest, RewindRequest, Rewound, RunDocument, RunHeader, RunList,
    StageList, StartRequest, Started, SteerAccepted, SteerRequest, WorkflowList,
};

/// Why a request to the server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The request was not sent, or its answer not received.
    #[error("cannot reach the fabro server at {url}")]
    Unreachable {
        /// The server's URL.
        url: String,
        /// What failed.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with another status than the route's success.
    #[error("the fabro server at {url} answered {status}")]
    Refused {
        /// The server's URL.
        url: String,
        /// The status.
        status: StatusCode,
        /// The JSON error body, when the answer had one.
        body: Option<ErrorBody>,
    },
    /// The answer's body is not the document the route returns.
    #[error("the fabro server at {url} sent a document this fabro cannot read")]
    Undecodable {
        /// The server's URL.
        url: String,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// The API's message of a refusal (`error.message` of its body), if it sent one.
    pub fn api_message(&self) -> Option<&str> {
        match self {
            ClientError::Refused {
                body: Some(body), ..
            } => Some(&body.error.message),
            _ => None,
        }
    }
}

/// A client of one server.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
}

/// The filters and page of `GET /api/v1/runs`.
#[derive(Debug, Clone, Default)]
pub struct RunQuery<'a> {
    /// Statuses to keep (all when empty).
    pub statuses: &'a [&'a str],
    /// Workflow name to keep.
    pub workflow: Option<&'a str>,
    /// Page size (the server clamps it to 200).
    pub limit: Option<usize>,
    /// Runs older than this run id (the `next` of the previous page).
    pub before: Option<&'a str>,
}

impl Client {
    /// A client of the server at `url` (without a trailing slash), sending `token` as
    /// the bearer token when there is one.
    pub fn new(url: &str, token: Option<String>) -> Client {
        Client {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            token,
        }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `GET /api/v1/health`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.get("/api/v1/health").await
    }

    /// `GET /api/v1/runs`.
    pub async fn list_runs(&self, query: &RunQuery<'_>) -> Result<RunList, ClientError> {
        let mut parameters: Vec<String> = Vec::new();
        if let Some(limit) = query.limit {
            parameters.push(format!("limit={limit}"));
        }
        parameters.extend(
            query
                .statuses
                .iter()
                .map(|status| format!("status={}", encode(status))),
        );
        if let Some(workflow) = query.workflow {
            parameters.push(format!("workflow={}", encode(workflow)));
        }
        if let Some(before) = query.before {
            parameters.push(format!("before={}", encode(before)));
        }
        let query = if parameters.is_empty() {
            String::new()
        } else {
            format!("?{}", parameters.join("&"))
        };
        self.get(&format!("/api/v1/runs{query}")).await
    }

    /// `POST /api/v1/runs`.
    pub async fn start(&self, request: &StartRequest) -> Result<Started, ClientError> {
        self.call(
            Method::POST,
            "/api/v1/runs",
            Some(request),
            StatusCode::CREATED,
        )
        .await
    }

    /// `GET /api/v1/runs/{id}`.
    pub async fn run(&self, run: &str) -> Result<RunDocument, ClientError> {
        self.get(&run_path(run, "")).await
    }

    /// `GET /api/v1/runs/{id}`, reading only the run's id, status and directory.
    pub async fn run_header(&self, run: &str) -> Result<RunHeader, ClientError> {
        self.get(&run_path(run, "")).await
    }

    /// [`Client::run_header`] when the server answers with the run's document; `None`
    /// for any other answer (an unknown run, a server error, a body that does not
    /// decode).
    ///
    /// # Errors
    /// Only when the server cannot be reached.
    pub async fn peek_run(&self, run: &str) -> Result<Option<RunHeader>, ClientError> {
        match self.run_header(run).await {
            Ok(document) => Ok(Some(document)),
            Err(error @ ClientError::Unreachable { .. }) => Err(error),
            Err(_) => Ok(None),
        }
    }

    /// `POST /api/v1/runs/{id}/cancel`.
    pub async fn cancel(&self, run: &str) -> Result<Canceling, ClientError> {
        let path = run_path(run, "/cancel");
        self.call(Method::POST, &path, Some(&Empty {}), StatusCode::ACCEPTED)
            .await
    }

    /// `POST /api/v1/runs/{id}/resume`.
    pub async fn resume(&self, run: &str, request: &ResumeRequest) -> Result<Started, ClientError> {
        let path = run_path(run, "/resume");
        self.call(Method::POST, &path, Some(request), StatusCode::ACCEPTED)
            .await
    }

    /// `POST /api/v1/runs/{id}/fork` (SPEC 20.2): the fork's id.
    pub async fn fork(&self, run: &str, request: &ForkRequest) -> Result<Started, ClientError> {
        let path = run_path(run, "/fork");
        self.call(Method::POST, &path, Some(request), StatusCode::CREATED)
            .await
    }

    /// `POST /api/v1/runs/{id}/rewind` (SPEC 20.3).
    pub async fn rewind(&self, run: &str, request: &RewindRequest) -> Result<Rewound, ClientError> {
        let path = run_path(run, "/rewind");
        self.call(Method::POST, &path, Some(request), StatusCode::OK)
            .await
    }

    /// `POST /api/v1/runs/{id}/steer` (SPEC 20.1).
    pub async fn steer(
        &self,
        run: &str,
        request: &SteerRequest,
    ) -> Result<SteerAccepted, ClientError> {
        let path = run_path(run, "/steer");
        self.call(Method::POST, &path, Some(request), StatusCode::ACCEPTED)
            .await
    }

    /// `GET /api/v1/runs/{id}/events?after=&limit=`: a page of stored events.
    pub async fn events(
        &self,
        run: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, ClientError> {
        self.get(&format!(
            "{}?after={after}&limit={limit}",
            run_path(run, "/events")
        ))
        .await
    }

    /// `GET /api/v1/runs/{id}/events` as Server-Sent Events, after `last_event_id`
    /// (from the first event without it).
    pub async fn event_stream(
        &self,
        run: &str,
        last_event_id: Option<u64>,
    ) -> Result<EventStream, ClientError> {
        let mut request = self
            .request(Method::GET, &run_path(run, "/events"), None)
            .header("accept", "text/event-stream");
        if let Some(last) = last_event_id {
            request = request.header("last-event-id", last.to_string());
        }
        let response = request
            .send()
            .await
            .map_err(|source| self.unreachable(source))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(ClientError::Refused {
                url: self.url.clone(),
                status,
                body: serde_json::from_str(&text).ok(),
            });
        }
        Ok(EventStream {
            response,
            decoder: SseDecoder::default(),
        })
    }

    /// `GET /api/v1/runs/{id}/stages`.
    pub async fn stages(&self, run: &str) -> Result<StageList, ClientError> {
        self.get(&run_path(run, "/stages")).await
    }

    /// `GET /api/v1/runs/{id}/artifacts`.
    pub async fn artifacts(&self, run: &str) -> Result<ArtifactList, ClientError> {
        self.get(&run_path(run, "/artifacts")).await
    }

    /// `GET /api/v1/runs/{id}/questions`.
    pub async fn questions(&self, run: &str) -> Result<QuestionList, ClientError> {
        self.get(&run_path(run, "/questions")).await
    }

    /// `POST /api/v1/runs/{id}/questions/{question_id}/answer`.
    pub async fn answer(
        &self,
        run: &str,
        question_id: &str,
        request: &AnswerRequest,
    ) -> Result<Answered, ClientError> {
        let path = run_path(run, &format!("/questions/{}/answer", encode(question_id)));
        self.call(Method::POST, &path, Some(request), StatusCode::OK)
            .await
    }

    /// `GET /api/v1/workflows`.
    pub async fn workflows(&self) -> Result<WorkflowList, ClientError> {
        self.get("/api/v1/workflows").await
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call::<(), T>(Method::GET, path, None, StatusCode::OK)
            .await
    }

    /// `method path` with `body`: the answer's document when the status is
    /// `expected`, else the refusal.
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        expected: StatusCode,
    ) -> Result<T, ClientError> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|source| self.undecodable(source))?;
        let response = self
            .request(method, path, body)
            .send()
            .await
            .map_err(|source| self.unreachable(source))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|source| self.unreachable(source))?;
        if status != expected {
            return Err(ClientError::Refused {
                url: self.url.clone(),
                status,
                body: serde_json::from_slice(&bytes).ok(),
            });
        }
        serde_json::from_slice(&bytes).map_err(|source| self.undecodable(source))
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        request
    }

    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.url.clone(),
            source,
        }
    }

    fn undecodable(&self, source: serde_json::Error) -> ClientError {
        ClientError::Undecodable {
            url: self.url.clone(),
            source,
        }
    }
}

/// The empty JSON object, the body of a cancel.
#[derive(Serialize)]
struct Empty {}

/// `/api/v1/runs/{run}{rest}`, the run id percent-encoded.
fn run_path(run: &str, rest: &str) -> String {
    format!("/api/v1/runs/{}{rest}", encode(run))
}

/// Percent-encodes everything but unreserved characters (RFC 3986), so that an id or a
/// name stays one path segment or query value.
fn encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// An open event stream of a run.
#[derive(Debug)]
pub struct EventStream {
    response: reqwest::Response,
    decoder: SseDecoder,
}

/// Why an open event stream failed.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The transfer broke.
    #[error("the event stream broke")]
    Transfer(#[source] reqwest::Error),
    /// The bytes are not an event stream.
    #[error(transparent)]
    Malformed(#[from] MalformedSse),
}

impl EventStream {
    /// The events completed by the next chunk the server sends (often one, maybe none);
    /// `None` once the server closed the stream. Each event's `data` is a stored
    /// envelope, its `id` the envelope's id.
    pub async fn next(&mut self) -> Result<Option<Vec<SseEvent>>, StreamError> {
        match self.response.chunk().await.map_err(StreamError::Transfer)? {
            Some(chunk) => Ok(Some(self.decoder.feed(&chunk)?)),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_stay_one_segment() {
        assert_eq!(encode("01J-abc_1.x~"), "01J-abc_1.x~");
        assert_eq!(encode("a/b c?é"), "a%2Fb%20c%3F%C3%A9");
        assert_eq!(run_path("r/1", "/events"), "/api/v1/runs/r%2F1/events");
    }
}
