//! Preambles (SPEC 6.4, 6.6): what an LLM stage is told about the run so far, rendered
//! for the stage's resolved fidelity.
//!
//! `full` has no preamble (the thread carries the conversation); `truncate` gives only
//! the goal and run id; `compact` a nested bullet list of the epoch's stages plus the
//! remaining context; the three `summary:*` modes per-stage summaries within a character
//! budget, collapsing the oldest stages to one line, then dropping them. Blob refs are
//! materialised into `{run_dir}/runtime/blobs/{hex}.json` and shown as `See: {path}`.

use std::path::{Path, PathBuf};

use fabro_language::model::Fidelity;
use fabro_language::{HandlerKind, Workflow};
use serde_json::Value;

use crate::blob::BlobStore;
use crate::context::Context;
use crate::id::BlobRef;
use crate::outcome::Outcome;

/// Output lines shown under a command stage in `compact`.
const COMPACT_TAIL_LINES: usize = 25;
/// Output lines shown under a command stage in `summary:high`.
const SUMMARY_TAIL_LINES: usize = 50;
/// Context values are cut at this many characters.
const CONTEXT_VALUE_LIMIT: usize = 500;
/// Characters of a `compact` preamble before its context section (SPEC 6.6).
const COMPACT_BUDGET: usize = 16_000;

/// What a preamble is rendered from.
pub(crate) struct PreambleInput<'a> {
    /// The workflow (handler and script of each stage).
    pub(crate) workflow: &'a Workflow,
    /// The run context before the stage.
    pub(crate) context: &'a Context,
    /// Stages of the current restart epoch in completion order (start and exit omitted).
    pub(crate) stages: &'a [(String, Outcome)],
    /// The run directory (blobs are materialised under `runtime/blobs/`).
    pub(crate) run_dir: &'a Path,
    /// The blob store.
    pub(crate) blobs: &'a dyn BlobStore,
}

/// The preamble for `fidelity`.
pub(crate) fn build(fidelity: Fidelity, input: &PreambleInput<'_>) -> String {
    let renderer = Renderer { input };
    match fidelity {
        Fidelity::Full => String::new(),
        Fidelity::Truncate => format!(
            "Goal: {}\nRun ID: {}\n",
            renderer.goal(),
            input.context.get_str("internal.run_id").unwrap_or("")
        ),
        Fidelity::Compact => renderer.compact(),
        Fidelity::SummaryHigh => renderer.summary(Detail::High, 12_000),
        Fidelity::SummaryMedium => renderer.summary(Detail::Medium, 6_000),
        Fidelity::SummaryLow => renderer.summary(Detail::Low, 2_400),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Detail {
    High,
    Medium,
    Low,
}

struct Renderer<'a, 'b> {
    input: &'b PreambleInput<'a>,
}

impl Renderer<'_, '_> {
    fn goal(&self) -> &str {
        self.input.context.get_str("graph.goal").unwrap_or("")
    }

    fn handler(&self, node_id: &str) -> Option<HandlerKind> {
        self.input
            .workflow
            .find(node_id)
            .map(|index| self.input.workflow.node(index).handler)
    }

    fn script(&self, node_id: &str) -> &str {
        self.input
            .workflow
            .find(node_id)
            .map_or("", |index| self.input.workflow.node(index).script())
    }

    /// The materialised path of a blob ref, or the ref itself when it cannot be copied.
    fn pointer(&self, reference: &str) -> String {
        match materialise(self.input.blobs, self.input.run_dir, reference) {
            Some(path) => format!("See: {}", path.display()),
            None => format!("See: {reference}"),
        }
    }

    /// `compact`: the goal, the stage list within [`COMPACT_BUDGET`] characters (goal
    /// line included), then the context.
    fn compact(&self) -> String {
        let head = format!("Goal: {}\n", self.goal());
        let list = self.stage_list(
            COMPACT_BUDGET.saturating_sub(head.chars().count()),
            |node_id, outcome| self.compact_stage(node_id, outcome),
            |_| true,
        );
        format!("{head}{list}{}", self.context_section())
    }

    fn compact_stage(&self, node_id: &str, outcome: &Outcome) -> String {
        let mut text = format!("- **{node_id}**: {}\n", outcome.condition_value());
        if let (Some(model), Some(usage)) = (&outcome.model, &outcome.usage) {
            text.push_str(&format!(
                "  - Model: {model}, {} tokens in / {} out\n",
                format_tokens(usage.input_tokens),
                format_tokens(usage.output_tokens)
            ));
        }
        if !outcome.files_touched.is_empty() {
            text.push_str(&format!(
                "  - Files: {}\n",
                outcome.files_touched.join(", ")
            ));
        }
        if let Some(Value::String(response)) =
            outcome.context_updates.get(&format!("response.{node_id}"))
        {
            if crate::blob::is_ref(response) {
                text.push_str(&format!("  - Response: {}\n", self.pointer(response)));
            }
        }
        if self.handler(node_id) == Some(HandlerKind::Command) {
            text.push_str(&format!("  - Script: `{}`\n", self.script(node_id)));
            text.push_str(&self.stream(
                "Stdout",
                outcome.context_updates.get("command.output"),
                COMPACT_TAIL_LINES,
                "  ",
            ));
            text.push_str(&self.stream(
                "Stderr",
                outcome.context_updates.get("command.stderr"),
                COMPACT_TAIL_LINES,
                "  ",
            ));
        }
        text
    }

    /// `{indent}- {label}: (empty)` or a pointer followed by a fenced tail.
    fn stream(&self, label: &str, value: Option<&Value>, lines: usize, indent: &str) -> String {
        let Some(Value::String(value)) = value else {
            return String::new();
        };
        let (content, header) = if let Some(reference) = BlobRef::parse(value) {
            let content = self
                .input
                .blobs
                .read_value(&reference)
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default();
            (content, self.pointer(value))
        } else {
            (value.clone(), String::new())
        };
        if content.is_empty() {
            return format!("{indent}- {label}: (empty)\n");
        }
        let all: Vec<&str> = content.lines().collect();
        let omitted = all.len().saturating_sub(lines);
        let mut text = if header.is_empty() {
            format!("{indent}- {label}:\n")
        } else {
            format!("{indent}- {label}: {header}\n")
        };
        if omitted > 0 {
            text.push_str(&format!("{indent}  ({omitted} lines omitted)\n"));
        }
        text.push_str(&format!("{indent}  ```\n"));
        for line in &all[omitted..] {
            text.push_str(&format!("{indent}  {line}\n"));
        }
        text.push_str(&format!("{indent}  ```\n"));
        text
    }

    fn context_section(&self) -> String {
        let rendered: Vec<String> = self
            .input
            .context
            .iter()
            .filter(|(key, _)| !is_internal_for_preamble(key))
            .map(|(key, value)| format!("- {key}: {}", self.context_value(value)))
            .collect();
        if rendered.is_empty() {
            String::new()
        } else {
            format!("\n## Context\n{}\n", rendered.join("\n"))
        }
    }

    fn context_value(&self, value: &Value) -> String {
        let text = match value {
            Value::String(text) if crate::blob::is_ref(text) => return self.pointer(text),
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        if text.chars().count() > CONTEXT_VALUE_LIMIT {
            let cut: String = text.chars().take(CONTEXT_VALUE_LIMIT).collect();
            format!("{cut}…")
        } else {
            text
        }
    }

    fn one_line(node_id: &str, outcome: &Outcome) -> String {
        format!("- {node_id}: {}\n", outcome.condition_value())
    }

    fn detailed(&self, detail: Detail, node_id: &str, outcome: &Outcome) -> String {
        match detail {
            Detail::Low => Self::one_line(node_id, outcome),
            Detail::Medium => {
                let mut text = format!("- **{node_id}**: {}\n", outcome.condition_value());
                if let Some(notes) = &outcome.notes {
                    text.push_str(&format!("  - Notes: {notes}\n"));
                }
                if let Some(failure) = &outcome.failure {
                    text.push_str(&format!("  - Failure: {}\n", failure.reason));
                }
                text
            }
            Detail::High => self.high_section(node_id, outcome),
        }
    }

    fn high_section(&self, node_id: &str, outcome: &Outcome) -> String {
        let mut text = format!(
            "\n## Stage: {node_id}\n- Status: {}\n",
            outcome.condition_value()
        );
        if let Some(handler) = self.handler(node_id) {
            text.push_str(&format!("- Handler: {}\n", handler.as_str()));
        }
        if let Some(model) = &outcome.model {
            text.push_str(&format!("- Model: {model}\n"));
        }
        if let Some(usage) = &outcome.usage {
            text.push_str(&format!(
                "- Tokens: {} in / {} out\n",
                format_tokens(usage.input_tokens),
                format_tokens(usage.output_tokens)
            ));
        }
        if !outcome.files_touched.is_empty() {
            text.push_str(&format!(
                "- Files touched: {}\n",
                outcome.files_touched.join(", ")
            ));
        }
        if let Some(notes) = &outcome.notes {
            text.push_str(&format!("- Notes: {notes}\n"));
        }
        if let Some(failure) = &outcome.failure {
            text.push_str(&format!("- Failure: {}\n", failure.reason));
        }
        if self.handler(node_id) == Some(HandlerKind::Command) {
            text.push_str(&format!("- Script: `{}`\n", self.script(node_id)));
            text.push_str(&self.stream(
                "Stdout",
                outcome.context_updates.get("command.output"),
                SUMMARY_TAIL_LINES,
                "",
            ));
            text.push_str(&self.stream(
                "Stderr",
                outcome.context_updates.get("command.stderr"),
                SUMMARY_TAIL_LINES,
                "",
            ));
        }
        if let Some(Value::String(response)) =
            outcome.context_updates.get(&format!("response.{node_id}"))
        {
            if crate::blob::is_ref(response) {
                text.push_str(&format!("\n{}\n", self.pointer(response)));
            } else if !response.is_empty() {
                text.push('\n');
                for line in response.lines() {
                    if line.is_empty() {
                        text.push_str(">\n");
                    } else {
                        text.push_str(&format!("> {line}\n"));
                    }
                }
            }
        }
        text
    }

    /// A `summary:*` preamble within `budget` characters: the oldest stages collapse
    /// to their one-line form first, then are dropped behind an omission line.
    fn summary(&self, detail: Detail, budget: usize) -> String {
        let head = format!("Goal: {}\n", self.goal());
        let context = if detail == Detail::Low {
            String::new()
        } else {
            self.context_section()
        };
        let fixed = head.chars().count() + context.chars().count();
        // summary:high gives every stage its own section; the list heading is needed
        // only for collapsed stages.
        let list = self.stage_list(
            budget.saturating_sub(fixed),
            |node_id, outcome| self.detailed(detail, node_id, outcome),
            |collapsed| detail != Detail::High || collapsed > 0,
        );
        format!("{head}{list}{context}")
    }

    /// The list of the epoch's stages within `budget` characters (SPEC 6.6): the newest
    /// keep their `full` form; older ones collapse to their one-line form, and the
    /// oldest are dropped behind a line `- ({n} earlier stages omitted)`. `heading(collapsed)`
    /// says whether the list starts with `## Completed stages`. Full forms are rendered
    /// only for the newest stages that can fit, so a run's thousandth stage costs no more
    /// than its tenth.
    fn stage_list(
        &self,
        budget: usize,
        full: impl Fn(&str, &Outcome) -> String,
        heading: impl Fn(usize) -> bool,
    ) -> String {
        const HEADING: &str = "\n## Completed stages\n";
        let stages = self.input.stages;
        let count = stages.len();
        if count == 0 {
            return String::new();
        }
        let short: Vec<String> = stages
            .iter()
            .map(|(node_id, outcome)| Self::one_line(node_id, outcome))
            .collect();
        let mut short_before = Vec::with_capacity(count + 1);
        short_before.push(0);
        for line in &short {
            short_before.push(short_before.last().copied().unwrap_or(0) + line.chars().count());
        }
        // Full forms of the newest stages, newest first, until they alone overflow.
        let mut full_newest: Vec<String> = Vec::new();
        let mut full_after = vec![0];
        for (node_id, outcome) in stages.iter().rev() {
            if full_after.last().is_some_and(|size| *size > budget) {
                break;
            }
            let section = full(node_id, outcome);
            full_after.push(full_after.last().copied().unwrap_or(0) + section.chars().count());
            full_newest.push(section);
        }
        let omitted = |dropped: usize| {
            if dropped > 0 {
                format!("- ({dropped} earlier stages omitted)\n")
            } else {
                String::new()
            }
        };
        // With stages [dropped, collapsed) on one line and [collapsed, count) in full.
        let size = |collapsed: usize, dropped: usize| {
            let heading = if heading(collapsed) { HEADING.len() } else { 0 };
            heading
                + omitted(dropped).len()
                + (short_before[collapsed] - short_before[dropped])
                + full_after[count - collapsed]
        };
        // As many of the newest stages in full as fit with every older one dropped, then
        // as many of the older ones on one line as still fit.
        let first_full = count - full_newest.len();
        let collapsed = (first_full..=count)
            .find(|&c| size(c, c) <= budget)
            .unwrap_or(count);
        let dropped = (0..=collapsed)
            .find(|&d| size(collapsed, d) <= budget)
            .unwrap_or(collapsed);
        let mut text = String::new();
        if heading(collapsed) {
            text.push_str(HEADING);
        }
        text.push_str(&omitted(dropped));
        for line in &short[dropped..collapsed] {
            text.push_str(line);
        }
        for section in full_newest[..count - collapsed].iter().rev() {
            text.push_str(section);
        }
        text
    }
}

/// Copies blob `reference` to `{run_dir}/runtime/blobs/{hex}.json` (once) and returns
/// that path (SPEC 7.7).
pub(crate) fn materialise(
    blobs: &dyn BlobStore,
    run_dir: &Path,
    reference: &str,
) -> Option<PathBuf> {
    let reference = BlobRef::parse(reference)?;
    let target = run_dir
        .join("runtime")
        .join("blobs")
        .join(format!("{}.json", reference.hex()));
    if !target.exists() {
        fs_err::create_dir_all(target.parent()?).ok()?;
        blobs.copy_to(&reference, &target).ok()?;
    }
    Some(target)
}

/// Keys never shown in preambles (SPEC 6.6); `command.*` values appear under their
/// stage instead.
fn is_internal_for_preamble(key: &str) -> bool {
    [
        "internal.",
        "current",
        "graph.",
        "thread.",
        "response.",
        "command.",
    ]
    .iter()
    .any(|prefix| key.starts_with(prefix))
        || matches!(
            key,
            "outcome"
                | "preferred_label"
                | "failure_class"
                | "failure_signature"
                | "last_stage"
                | "last_response"
        )
}

/// Token counts as preambles print them (SPEC 6.6).
pub(crate) fn format_tokens(count: u64) -> String {
    if count < 1000 {
        return count.to_string();
    }
    let thousands = (count as f64 / 100.0).round() / 10.0;
    if thousands < 1000.0 {
        return format!("{thousands:.1}k");
    }
    let millions = (count as f64 / 100_000.0).round() / 10.0;
    format!("{millions:.1}m")
}

#[cfg(test)]
mod tests;
