//! `fabro events RUN [--follow] [--json]` (SPEC 12.1, 11.3): print a run's events, as
//! `{ts} {event} {node_id} {key=value …}` lines or as the stored envelopes verbatim.
//!
//! The events are read through the store's [`EventCursor`]; only newline-terminated
//! lines count as events, so a line still being written (or left truncated by a crash)
//! is never printed half. With `--follow` the cursor is polled until the run's terminal
//! event.

use std::path::Path;
use std::time::Duration;

use fabro_engine::local::RunLock;
use fabro_engine::{EventCursor, EventEnvelope, StoreError};
use serde_json::Value;

use crate::args::EventsArgs;
use crate::command::resolve_run;
use crate::error::{CliError, Status};
use crate::output::Output;

/// How often `--follow` looks for new events. The engine appends and flushes per event,
/// so polling the file is all a follower needs.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

pub(crate) fn run(args: &EventsArgs, output: &mut Output) -> Result<Status, CliError> {
    let record = resolve_run(&args.run)?;
    let mut reader = EventReader::open(&record.run_dir)?;
    let format = if args.json {
        Format::Verbatim
    } else {
        Format::Human
    };
    if !args.follow {
        let mut text = reader.read_available(format)?;
        // At rest, a final line that parses is a whole event that only lacks its newline.
        text.push_str(&reader.finish(format));
        output.out(&text);
        return Ok(Status::Success);
    }
    loop {
        output.out(&reader.read_available(format)?);
        if reader.ended_with_terminal_event() {
            return Ok(Status::Success);
        }
        if !RunLock::is_held(&record.run_dir) {
            // The engine writes the terminal event before releasing the lock: read once
            // more, and if it is still missing the process died mid-run.
            output.out(&reader.read_available(format)?);
            if reader.ended_with_terminal_event() {
                return Ok(Status::Success);
            }
            output.error(&CliError::Usage(format!(
                "run {} is interrupted: no process holds its lock and it has no terminal event",
                record.run_id
            )));
            return Ok(Status::Failure);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[derive(Debug, Clone, Copy)]
enum Format {
    /// `{ts} {event} {node_id} {key=value …}`.
    Human,
    /// The stored line, byte for byte.
    Verbatim,
}

/// The run's events read through the store's cursor, which holds back an unterminated
/// final line.
struct EventReader {
    cursor: EventCursor,
    last_event: Option<String>,
}

impl EventReader {
    fn open(run_dir: &Path) -> Result<EventReader, CliError> {
        let cursor = EventCursor::open(run_dir).map_err(|error| match error {
            StoreError::Io { path, source, .. } => CliError::io("cannot read events", path, source),
            other => CliError::Usage(other.to_string()),
        })?;
        Ok(EventReader {
            cursor,
            last_event: None,
        })
    }

    /// Formats every complete line appended since the last call.
    fn read_available(&mut self, format: Format) -> Result<String, CliError> {
        let mut text = String::new();
        for event in self.cursor.read_new() {
            self.format_line(&event.line, format, &mut text);
        }
        Ok(text)
    }

    /// Formats the unterminated final line if it is a whole event.
    fn finish(&mut self, format: Format) -> String {
        let mut text = String::new();
        if let Some(event) = self.cursor.finish() {
            self.format_line(&event.line, format, &mut text);
        }
        text
    }

    /// Whether the last event read is `WorkflowRunCompleted` or `WorkflowRunFailed`.
    fn ended_with_terminal_event(&self) -> bool {
        self.last_event
            .as_deref()
            .is_some_and(fabro_engine::EventKind::is_terminal_name)
    }

    /// Appends `line` in `format` to `text`; lines that are not event envelopes (blank,
    /// truncated, foreign) are skipped, as readers of the events must (SPEC 11.3).
    fn format_line(&mut self, line: &str, format: Format, text: &mut String) {
        if let Some((formatted, name)) = format_event(line, matches!(format, Format::Verbatim)) {
            text.push_str(&formatted);
            self.last_event = Some(name);
        }
    }
}

/// One stored event line as printed (verbatim or human, with its newline) and its event
/// name; `None` for a line that is not an event envelope.
pub(crate) fn format_event(line: &str, verbatim: bool) -> Option<(String, String)> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.trim().is_empty() {
        return None;
    }
    let envelope = serde_json::from_str::<EventEnvelope>(line).ok()?;
    let mut text = if verbatim {
        line.to_owned()
    } else {
        human_line(&envelope)
    };
    text.push('\n');
    Some((text, envelope.name().to_owned()))
}

/// `{ts} {event} {node_id} {key=value …}`; `-` stands for the node of run-level events.
fn human_line(envelope: &EventEnvelope) -> String {
    let mut line = format!(
        "{} {} {}",
        envelope.ts,
        envelope.name(),
        envelope.node_id.as_deref().unwrap_or("-")
    );
    for (key, value) in &envelope.properties() {
        line.push(' ');
        line.push_str(key);
        line.push('=');
        line.push_str(&property_value(value));
    }
    line
}

/// Strings print bare when that stays unambiguous (no spaces, quotes or `=`), else as
/// JSON strings; other values print as compact JSON.
fn property_value(value: &Value) -> String {
    match value {
        Value::String(text)
            if !text.is_empty()
                && !text
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '=')) =>
        {
            text.clone()
        }
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn property_values_stay_one_token() {
        let check = |value: Value, expected: &str| assert_eq!(property_value(&value), expected);
        check(json!("plan"), "plan");
        check(json!("a b"), "\"a b\"");
        check(json!(""), "\"\"");
        check(json!("k=v"), "\"k=v\"");
        check(json!("line\nbreak"), "\"line\\nbreak\"");
        check(json!(null), "null");
        check(json!(12), "12");
        check(json!(true), "true");
        check(json!({"input_tokens": 3}), "{\"input_tokens\":3}");
    }

    #[test]
    fn human_lines_show_time_event_node_and_properties() {
        let envelope: EventEnvelope = serde_json::from_value(json!({
            "id": 2, "ts": "2026-01-01T00:00:00.000Z", "run_id": "r", "event": "StageStarted",
            "node_id": "plan", "properties": {"handler": "agent", "visit": 1}
        }))
        .expect("valid envelope");
        assert_eq!(
            human_line(&envelope),
            "2026-01-01T00:00:00.000Z StageStarted plan handler=agent visit=1"
        );
        let envelope: EventEnvelope = serde_json::from_value(json!({
            "id": 1, "ts": "2026-01-01T00:00:00.000Z", "run_id": "r",
            "event": "WorkflowRunFailed", "properties": {"reason": "boom now"}
        }))
        .expect("valid envelope");
        assert_eq!(
            human_line(&envelope),
            "2026-01-01T00:00:00.000Z WorkflowRunFailed - reason=\"boom now\""
        );
    }
}
