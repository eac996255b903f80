//! The live view of a run on stderr (one line per stage), and the `--json` event stream
//! on stdout (SPEC 12.1).

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use fabro_engine::event::kind::HumanAnswer;
use fabro_engine::event::{EventEnvelope, EventKind, EventSink};

/// Prints one line per finished stage to stderr.
pub(crate) struct ProgressSink {
    color: bool,
    /// The answers of human gates whose stage has not completed yet, by node (SPEC 17.5).
    /// Held while a line is written, so lines never interleave.
    choices: Mutex<HashMap<String, String>>,
}

impl ProgressSink {
    pub(crate) fn new(color: bool) -> ProgressSink {
        ProgressSink {
            color,
            choices: Mutex::new(HashMap::new()),
        }
    }
}

impl EventSink for ProgressSink {
    fn emit(&self, envelope: &EventEnvelope) {
        let mut choices = self
            .choices
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let node = envelope
            .node_id
            .as_deref()
            .map(str::to_owned)
            .unwrap_or_default();
        let choice = match &envelope.kind {
            EventKind::HumanAnswer(answer) => {
                choices.insert(node, gate_choice(answer));
                return;
            }
            EventKind::StageCompleted(_) => choices.remove(&node),
            _ => None,
        };
        let Some(line) = progress_line(envelope, self.color, choice.as_deref()) else {
            return;
        };
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{line}");
    }
}

/// What a human gate's answer chose, as its progress line shows it (SPEC 17.5):
/// `[R] Revise`, or the free text in quotes.
fn gate_choice(answer: &HumanAnswer) -> String {
    match answer.selected_key.as_str() {
        "freeform" => format!("\"{}\"", answer.text),
        key => format!(
            "[{key}] {}",
            fabro_language::label::strip_accelerator(&answer.label)
        ),
    }
}

/// The progress line for an event, if it gets one; `choice` is what a human gate's
/// answer chose, for its `StageCompleted`.
pub(crate) fn progress_line(
    envelope: &EventEnvelope,
    color: bool,
    choice: Option<&str>,
) -> Option<String> {
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
            let duration = format_duration_ms(stage.duration_ms);
            let mut line = match choice {
                Some(choice) => format!("{mark} {node} → {choice} ({duration})"),
                None => format!("{mark} {node} {status} ({duration})"),
            };
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
