//! Reading a run's event stream from a `fabro server` (SPEC 14.3) through the typed
//! client ([`fabro_api::client::EventStream`], whose bytes go through the workspace's
//! one SSE decoder, `fabro_llm::sse::SseDecoder`: any chunking, CRLF or CR line ends,
//! comment lines); a stream that breaks or ends before the run's
//! terminal event is opened again with `Last-Event-ID` (SPEC 14.4 1), after a delay that
//! grows with each attempt in a row that brings no event, a bounded number of times.

use std::time::Duration;

use fabro_api::client::{Client, ClientError, StreamError};

use super::refused;
use crate::error::CliError;

/// Attempts in a row without an event before the stream is given up.
const ATTEMPTS: u32 = 8;

/// The delay before the first new attempt; it doubles with each further one.
const FIRST_DELAY: Duration = Duration::from_millis(50);

/// The longest delay between two attempts.
const MAX_DELAY: Duration = Duration::from_secs(2);

/// The delay before attempt `failures + 1`, after `failures` attempts in a row that
/// brought no event (at least 1).
fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY)
}

/// How one connection to the stream ended.
enum Ended {
    /// `each` saw the terminal event.
    Terminal,
    /// The server closed the stream before it.
    Closed,
    /// The request or the transfer failed (or the server refused, for a while).
    Failed(String),
}

/// Hands the data of each event of the run's stream after event `after` (from the first
/// without it) to `each` (which says whether it was the terminal event), reconnecting
/// while the run is running or queued. Returns whether the terminal event came: `false`
/// when the stream ended and the run is no longer running (it was interrupted).
///
/// # Errors
/// The server refused the stream (e.g. an unknown run), or [`ATTEMPTS`] attempts in a
/// row failed or ended without an event while the run was still running.
pub(super) async fn stream_lines(
    remote: &Client,
    run_id: &str,
    after: Option<u64>,
    mut each: impl FnMut(&str) -> bool,
) -> Result<bool, CliError> {
    let mut last = after;
    let mut failures = 0;
    loop {
        let before = last;
        let ended = connect(remote, run_id, &mut last, &mut each).await?;
        let problem = match ended {
            Ended::Terminal => return Ok(true),
            Ended::Failed(problem) => problem,
            Ended::Closed => {
                // The server went away or the run was interrupted: look again, as a
                // reconnecting client does.
                let document = remote.peek_run(run_id).await.map_err(refused)?;
                if !document.as_ref().is_some_and(|document| {
                    matches!(document.status.as_str(), "running" | "queued")
                }) {
                    return Ok(false);
                }
                "the stream ended before the run's terminal event".to_owned()
            }
        };
        failures = if last == before { failures + 1 } else { 1 };
        if failures >= ATTEMPTS {
            return Err(CliError::Usage(format!(
                "lost the event stream of run {run_id} from the fabro server at {} after {ATTEMPTS} attempts: {problem}",
                remote.url()
            )));
        }
        tokio::time::sleep(retry_delay(failures)).await;
    }
}

/// One connection: feeds each event's data to `each` and `last` follows the events' ids.
async fn connect(
    remote: &Client,
    run_id: &str,
    last: &mut Option<u64>,
    each: &mut impl FnMut(&str) -> bool,
) -> Result<Ended, CliError> {
    let mut stream = match remote.event_stream(run_id, *last).await {
        Ok(stream) => stream,
        Err(ClientError::Unreachable { source, .. }) => {
            return Ok(Ended::Failed(fabro_engine::error_chain(&source)))
        }
        Err(error @ ClientError::Refused { status, .. }) if status.is_client_error() => {
            return Err(refused(error))
        }
        Err(ClientError::Refused { status, .. }) => {
            return Ok(Ended::Failed(format!("the server answered {status}")))
        }
        Err(error) => return Err(refused(error)),
    };
    loop {
        let events = match stream.next().await {
            Ok(Some(events)) => events,
            Ok(None) => return Ok(Ended::Closed),
            Err(StreamError::Transfer(error)) => {
                return Ok(Ended::Failed(fabro_engine::error_chain(&error)))
            }
            Err(error @ StreamError::Malformed(_)) => return Ok(Ended::Failed(error.to_string())),
        };
        for event in events {
            *last = event.id.as_deref().and_then(|id| id.parse().ok()).or(*last);
            if each(&event.data) {
                return Ok(Ended::Terminal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_up_to_its_cap() {
        let delays: Vec<Duration> = (1..=ATTEMPTS).map(retry_delay).collect();
        assert_eq!(delays[0], FIRST_DELAY);
        assert_eq!(delays[1], FIRST_DELAY * 2);
        assert!(
            delays.windows(2).all(|pair| pair[1] >= pair[0]),
            "{delays:?}"
        );
        assert_eq!(retry_delay(u32::MAX), MAX_DELAY);
        let total: Duration = delays.iter().sum();
        assert!(total < Duration::from_secs(15), "{total:?}");
    }
}
