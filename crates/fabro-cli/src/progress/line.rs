//! The lines of the progress view (SPEC 17.5): finished stages, retries, loop control,
//! budget stops and warnings.

use std::collections::HashMap;

use fabro_engine::{EventEnvelope, EventKind};

use crate::output::paint;

const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const RED: &str = "\x1b[31m";

/// How a line names `node`: `Label (id)` when it has a label, else its id.
pub(crate) fn name<'a>(names: &'a HashMap<String, String>, node: &'a str) -> &'a str {
    names.get(node).map_or(node, String::as_str)
}

/// The progress line for an event, if it gets one; `choice` is what a human gate's
/// answer chose, for its `StageCompleted`; `names` how to name nodes.
pub(crate) fn progress_line(
    envelope: &EventEnvelope,
    color: bool,
    choice: Option<&str>,
    names: &HashMap<String, String>,
) -> Option<String> {
    let node = name(names, envelope.node_id.as_deref().unwrap_or(""));
    let mark = |mark: &str, tone: &str| paint(mark, tone, color);
    match &envelope.kind {
        EventKind::StageCompleted(stage) => {
            let status = stage.status.as_str();
            let mark = match status {
                "success" => mark("✓", GREEN),
                "partial_success" | "skipped" => mark("~", YELLOW),
                _ => mark("✗", RED),
            };
            let duration = format_duration_ms(stage.duration_ms);
            let mut line = match choice {
                Some(choice) => format!("{mark} {node} → {choice} ({duration})"),
                None => format!("{mark} {node} {status} ({duration})"),
            };
            if let (Some(model), Some(usage)) = (&stage.model, &stage.usage) {
                // SPEC 17.3: a simulated stage keeps the model the node would have used.
                let simulated =
                    stage.provider.as_deref() == Some("simulated") && model.as_str() != "simulated";
                let marker = if simulated { " (simulated)" } else { "" };
                line.push_str(&format!(
                    " {model}{marker} {} in / {} out",
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
        EventKind::GoalGateUnsatisfied(gate) => Some(format!(
            "{} goal gate {} unsatisfied; back to {}",
            mark("↺", YELLOW),
            name(names, &gate.gate_node),
            name(names, &gate.retry_target)
        )),
        EventKind::LoopRestart(restart) => Some(format!(
            "{} loop restart {}: {} → {}",
            mark("↺", YELLOW),
            restart.restart_count,
            name(names, &restart.from),
            name(names, &restart.to)
        )),
        EventKind::CircuitBreakerTripped(breaker) => Some(format!(
            "{} circuit breaker tripped: {} repeated {} times (limit {})",
            mark("✗", RED),
            breaker.signature,
            breaker.count,
            breaker.limit
        )),
        EventKind::BudgetExhausted(budget) => Some(format!(
            "{} budget exhausted: {} {} of {}",
            mark("■", RED),
            budget.kind,
            budget.used,
            budget.limit
        )),
        EventKind::Warning(warning) => Some(format!("warning: {}", warning.message)),
        _ => None,
    }
}

/// `850ms`, `2.5s`.
pub(crate) fn format_duration_ms(milliseconds: u64) -> String {
    if milliseconds < 1000 {
        format!("{milliseconds}ms")
    } else {
        format!("{:.1}s", milliseconds as f64 / 1000.0)
    }
}
