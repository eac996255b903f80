//! HTTP hooks (SPEC 20.4): `POST {url}` with the event envelope as a JSON body and the
//! configured headers, whose `${VAR}` values are read from the environment here and
//! become secrets (redacted everywhere, never written). A 2xx answer is a success; any
//! other status, a failure to connect and the timeout are failures. The answer's body,
//! up to [`BODY_LIMIT`] bytes, goes to `hooks.log`.

use tokio_util::sync::CancellationToken;

use super::{HookResult, Status};
use crate::config::{expand_secret_variables, variable_value, HookConfig};

/// Bytes of an answer's body kept for `hooks.log`.
const BODY_LIMIT: usize = 64 * 1024;

/// POSTs `body` to the hook's URL, until its timeout or the run's cancellation.
pub(super) async fn post(
    client: &reqwest::Client,
    hook: &HookConfig,
    body: &[u8],
    cancel: &CancellationToken,
) -> HookResult {
    let url = hook.url.as_deref().unwrap_or_default();
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_vec())
        .timeout(hook.timeout());
    for (name, value) in &hook.headers {
        match expand_secret_variables(value, &variable_value) {
            Ok(value) => request = request.header(name, value),
            Err(missing) => {
                return HookResult::failed(format!(
                    "header {name} needs the unset variable {}",
                    missing.join(", ")
                ))
            }
        }
    }
    let exchange = async {
        let mut response = request.send().await?;
        let status = response.status();
        let mut answer = Vec::new();
        while answer.len() < BODY_LIMIT {
            match response.chunk().await? {
                Some(chunk) => answer.extend_from_slice(&chunk),
                None => break,
            }
        }
        answer.truncate(BODY_LIMIT);
        Ok::<_, reqwest::Error>((status, answer))
    };
    let answered = tokio::select! {
        answered = exchange => answered,
        () = cancel.cancelled() => return HookResult::canceled(),
    };
    match answered {
        Ok((status, answer)) => answered_result(status, &answer),
        Err(error) if error.is_timeout() => HookResult::timed_out(hook.timeout()),
        Err(error) => HookResult::failed(format!(
            "cannot POST to {}: {}",
            fabro_llm::redact_url(url),
            crate::error_chain(&error.without_url())
        )),
    }
}

/// The result of an answer with `status` and (the start of) its body.
fn answered_result(status: reqwest::StatusCode, answer: &[u8]) -> HookResult {
    let mut log = format!("HTTP {}\n", status.as_u16());
    if !answer.is_empty() {
        log.push_str("--- response ---\n");
        log.push_str(&String::from_utf8_lossy(answer));
        if !log.ends_with('\n') {
            log.push('\n');
        }
    }
    let (status_kind, reason) = if status.is_success() {
        (Status::Success, None)
    } else {
        (Status::Fail, Some(format!("HTTP {status}")))
    };
    HookResult {
        status: status_kind,
        status_code: Some(status.as_u16()),
        reason,
        log,
        ..HookResult::default()
    }
}
