//! The live view of a run on stderr (one line per stage), and the `--json` event stream
//! on stdout (SPEC 12.1).

use std::io::Write;
use std::sync::Mutex;

use fabro_engine::event::{EventEnvelope, EventKind, EventSink};

/// Prints one line per finished stage to stderr.
pub(crate) struct ProgressSink {
    color: bool,
    lock: Mutex<()>,
}

impl ProgressSink {
    pub(crate) fn new(color: bool) -> ProgressSink {
        ProgressSink {
            color,
            lock: Mutex::new(()),
        }
    }
}

impl EventSink for ProgressSink {
    fn emit(&self, envelope: &EventEnvelope) {
        let Some(line) = progress_line(envelope, self.color) else {
            return;
        };
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{line}");
    }
}

/// The progress line for an event, if it gets one.
pub(crate) fn progress_line(envelope: &EventEnvelope, color: bool) -> Option<String> {
    let node = envelope.node_id.as_deref().unwrap_or("");
    match &envelope.kind {
        EventKind::StageCompleted(stage) => {
            let status = stage.status.as_str();
            let (mark, paint) = match status {
                "success" => ("✓", "\x1b[32m"),
                "partial_success" | "skipped" => ("~", "\x1b[33m"),
                _ => ("✗", "\x1b[31m"),
            };
            let mark = if color {
                format!("{paint}{mark}\x1b[0m")
            } else {
                mark.to_owned()
            };
            let mut line = format!(
                "{mark} {node} {status} ({})",
                format_duration_ms(stage.duration_ms)
            );
            if let (Some(model), Some(usage)) = (&stage.model, &stage.usage) {
                line.push_str(&format!(
                    " {model} {} in / {} out",
                    usage.input_tokens, usage.output_tokens
                ));
            }
            if let Some(reason) = &stage.failure_reason {
                let first = reason.lines().next().unwrap_or("");
                line.push_str(&format!(": {first}"));
            }
            Some(line)
        }
        EventKind::StageRetrying(retry) => Some(format!(
            "↻ {node} retrying (attempt {} in {})",
            retry.next_attempt,
            format_duration_ms(retry.delay_ms)
        )),
        EventKind::Warning(warning) => Some(format!("warning: {}", warning.message)),
        _ => None,
    }
}

fn format_duration_ms(milliseconds: u64) -> String {
    if milliseconds < 1000 {
        format!("{milliseconds}ms")
    } else {
        format!("{:.1}s", milliseconds as f64 / 1000.0)
    }
}

/// Prints every event envelope as one JSON line on stdout (`--json`).
pub(crate) struct JsonSink {
    lock: Mutex<()>,
}

impl JsonSink {
    pub(crate) fn new() -> JsonSink {
        JsonSink {
            lock: Mutex::new(()),
        }
    }
}

impl EventSink for JsonSink {
    fn emit(&self, envelope: &EventEnvelope) {
        let Ok(line) = serde_json::to_string(envelope) else {
            return;
        };
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
}
