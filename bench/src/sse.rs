//! The event streams' side of `fabro-bench server` (b): a Server-Sent Events scanner
//! that reads only what the latency needs, cheaply, beside the server it measures.

use std::time::{SystemTime, UNIX_EPOCH};

/// One event of the stream: its id, name, `ts` (seconds since the epoch, millisecond
/// precision) and the receipt time of the chunk that completed it.
pub(crate) struct Received<'a> {
    pub(crate) id: u64,
    pub(crate) name: &'a [u8],
    pub(crate) ts: f64,
    pub(crate) received: f64,
}

pub(crate) fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// A `ts` value in seconds since the epoch; NaN when it is not RFC 3339.
fn parse_ts(ts: &[u8]) -> f64 {
    std::str::from_utf8(ts)
        .ok()
        .and_then(fabro_agent::timestamp::parse_rfc3339)
        .map_or(f64::NAN, unix_seconds)
}

/// The bytes of the `ts` value of an event's JSON, found by its key rather than a full
/// parse (100 streams read every event).
fn ts_bytes(data: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\"ts\":\"";
    let at = memchr::memmem::find(data, KEY)?;
    let rest = &data[at + KEY.len()..];
    memchr::memchr(b'"', rest).map(|end| &rest[..end])
}

/// Splits a Server-Sent Events body into events as its chunks arrive. The harness shares
/// the 2 cores with the server it measures, so it parses as little as it can: lines are
/// found with `memchr` in the chunk itself (only a line cut by a chunk's end is copied),
/// and only the `id`, the `event` name and the data's `ts` are read; a `ts` equal to the
/// stream's previous one (most are: a stage's events share their millisecond) is not
/// parsed again. `perf record` put the first version, a byte loop over a copy of every
/// chunk that parsed every `ts`, at a fifth of the machine's CPU.
#[derive(Default)]
pub(crate) struct EventScanner {
    /// The start of a line cut by the end of the last chunk.
    partial: Vec<u8>,
    id: u64,
    name: Vec<u8>,
    ts: Option<f64>,
    /// The bytes of the last `ts` parsed, and its value.
    last_ts: (Vec<u8>, f64),
}

impl EventScanner {
    /// Scans `chunk`, received at `received`, calling `on_event` per completed event.
    pub(crate) fn scan(
        &mut self,
        chunk: &[u8],
        received: f64,
        on_event: &mut impl FnMut(Received<'_>),
    ) {
        let mut rest = chunk;
        if !self.partial.is_empty() {
            let Some(end) = memchr::memchr(b'\n', rest) else {
                self.partial.extend_from_slice(rest);
                return;
            };
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(&rest[..end]);
            self.line(&line, received, on_event);
            line.clear();
            self.partial = line;
            rest = &rest[end + 1..];
        }
        while let Some(end) = memchr::memchr(b'\n', rest) {
            self.line(&rest[..end], received, on_event);
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
    }

    fn line(&mut self, line: &[u8], received: f64, on_event: &mut impl FnMut(Received<'_>)) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if let Some(ts) = self.ts.take() {
                on_event(Received {
                    id: self.id,
                    name: &self.name,
                    ts,
                    received,
                });
            }
        } else if let Some(value) = line.strip_prefix(b"id:") {
            self.id = std::str::from_utf8(value)
                .ok()
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(0);
        } else if let Some(value) = line.strip_prefix(b"event:") {
            self.name.clear();
            self.name.extend_from_slice(value.trim_ascii());
        } else if let Some(value) = line.strip_prefix(b"data:") {
            if self.ts.is_none() {
                self.ts = Some(self.ts_of(value));
            }
        }
    }

    fn ts_of(&mut self, data: &[u8]) -> f64 {
        let Some(bytes) = ts_bytes(data) else {
            return f64::NAN;
        };
        if bytes != self.last_ts.0.as_slice() {
            self.last_ts.0.clear();
            self.last_ts.0.extend_from_slice(bytes);
            self.last_ts.1 = parse_ts(bytes);
        }
        self.last_ts.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event_ts(data: &[u8]) -> f64 {
        ts_bytes(data).map_or(f64::NAN, parse_ts)
    }

    #[test]
    fn event_ts_reads_the_envelope_timestamp_to_the_millisecond() {
        let data = r#"{"id":7,"ts":"2026-11-26T10:00:00.123Z","run_id":"r","event":"StageStarted","properties":{}}"#;
        let seconds = event_ts(data.as_bytes());
        assert!((seconds - 1_795_687_200.123).abs() < 1e-6, "{seconds}");
        assert!(event_ts(b"{}").is_nan());
        assert!(event_ts(br#"{"ts":"2026-11-26T10:00"#).is_nan());
    }

    #[test]
    fn the_scanner_reads_events_split_anywhere_across_chunks() {
        let body = concat!(
            ": keep-alive\n\n",
            "id: 7\nevent: StageStarted\ndata: {\"id\":7,\"ts\":\"2026-11-26T10:00:00.123Z\"}\n\n",
            "id: 8\r\nevent: StageCompleted\r\ndata: {\"id\":8,\"ts\":\"2026-11-26T10:00:00.123Z\"}\r\n\r\n",
            "id: 9\nevent: WorkflowRunCompleted\ndata: {\"id\":9,\"ts\":\"2026-11-26T10:00:01.5Z\"}\n\n",
        )
        .as_bytes();
        for size in [1, 2, 3, 7, 64, body.len()] {
            let mut scanner = EventScanner::default();
            let mut events = Vec::new();
            for (index, chunk) in body.chunks(size).enumerate() {
                scanner.scan(chunk, index as f64, &mut |event| {
                    events.push((
                        event.id,
                        String::from_utf8_lossy(event.name).into_owned(),
                        event.ts,
                        event.received,
                    ));
                });
            }
            let ids: Vec<u64> = events.iter().map(|event| event.0).collect();
            assert_eq!(ids, [7, 8, 9], "chunks of {size}");
            assert_eq!(events[1].1, "StageCompleted");
            assert_eq!(events[2].1, "WorkflowRunCompleted");
            assert!((events[1].2 - 1_795_687_200.123).abs() < 1e-6);
            assert!((events[2].2 - 1_795_687_201.5).abs() < 1e-6);
            // Received with the chunk that held the event's blank line.
            let last_blank = body.len() - 1;
            assert_eq!(events[2].3, (last_blank / size) as f64, "chunks of {size}");
        }
    }
}
