//! The external backends: agent CLIs (`cli`) and Agent Client Protocol agents (`acp`),
//! and what both report beyond an [`AgentOutcome`]: the model the program says it
//! used, its stderr, and whether every tool call it made failed for a sandbox reason.

pub(crate) mod acp;
pub(crate) mod cli;

use std::time::Duration;

use fabro_llm::Usage;

use crate::failure::AgentFailure;
use crate::session::AgentOutcome;

/// Lines of stderr quoted in a failure's reason.
pub(crate) const STDERR_TAIL_LINES: usize = 20;

/// What one run of an external agent produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExternalOutcome {
    /// The response: the text of the agent's final turn (SPEC 5.2).
    pub text: String,
    /// Usage as the program reported it; `None` when it reported none (SPEC 5.2.3).
    pub usage: Option<Usage>,
    /// The model the program said it used (decision 69).
    pub model: Option<String>,
    /// Paths written, relative to the working directory (SPEC 7.6).
    pub files_touched: Vec<String>,
    /// The "last touched" file for routing fallbacks (SPEC 7.2).
    pub last_touched: Option<String>,
    /// Why the run failed; `None` on success.
    pub failure: Option<AgentFailure>,
    /// The program's standard error, as written (the engine redacts it into
    /// `stderr.log`).
    pub stderr: String,
    /// Set when the program made tool calls and every one failed for a sandbox reason
    /// by its own report: what to warn about.
    pub sandboxed_tools: Option<String>,
    /// The text of the turns before the final one (an ACP agent's plan before its tool
    /// calls): kept in the stage's events, never in the response (SPEC 5.2.3).
    pub earlier_turns: Vec<String>,
}

impl ExternalOutcome {
    /// The outcome as an [`AgentOutcome`] (usage zero when none was reported).
    pub fn into_agent_outcome(self) -> AgentOutcome {
        AgentOutcome {
            text: self.text,
            usage: self.usage.unwrap_or_default(),
            turns: 1,
            files_touched: self.files_touched,
            last_touched: self.last_touched,
            failure: self.failure,
        }
    }
}

/// The last `count` lines of `text`.
pub(crate) fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// The reason of a stage timeout, the same for every handler (SPEC 2.10): `stage timed
/// out after {d}`, the duration in the largest unit that divides it.
pub(crate) fn timeout_reason(timeout: Option<Duration>) -> String {
    let millis = timeout.unwrap_or_default().as_millis();
    let duration = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ]
    .into_iter()
    .find(|(_, size)| millis > 0 && millis.is_multiple_of(*size))
    .map_or_else(
        || {
            if millis == 0 {
                "0s".to_owned()
            } else {
                format!("{millis}ms")
            }
        },
        |(unit, size)| format!("{}{unit}", millis / size),
    );
    format!("stage timed out after {duration}")
}

/// Tool calls an agent reported, and which of them failed for a sandbox reason.
#[derive(Debug, Default)]
pub(crate) struct ToolTally {
    calls: usize,
    sandboxed: usize,
    example: Option<String>,
}

impl ToolTally {
    /// Counts one finished tool call; `failure` is the error text of a failed one.
    pub(crate) fn record(&mut self, failure: Option<&str>) {
        self.calls += 1;
        if let Some(text) = failure.filter(|text| is_sandbox_failure(text)) {
            self.sandboxed += 1;
            if self.example.is_none() {
                let line = text
                    .lines()
                    .find(|line| is_sandbox_failure(line))
                    .unwrap_or(text);
                self.example = Some(line.trim().chars().take(200).collect());
            }
        }
    }

    /// The warning when every call failed for a sandbox reason.
    pub(crate) fn warning(&self) -> Option<String> {
        (self.calls > 0 && self.sandboxed == self.calls).then(|| {
            format!(
                "all {} tool calls failed for a sandbox reason (e.g. {}); the agent's own sandbox may not start inside fabro's isolation",
                self.calls,
                self.example.as_deref().unwrap_or("permission denied")
            )
        })
    }
}

/// Whether a tool's error text names a sandbox or permission refusal.
fn is_sandbox_failure(text: &str) -> bool {
    let lower = text.to_lowercase();
    [
        "permission denied",
        "operation not permitted",
        "read-only file system",
        "sandbox",
        "uid map",
        "bwrap",
    ]
    .iter()
    .any(|marker| lower.contains(marker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_in_the_largest_whole_unit() {
        let reason = |millis| timeout_reason(Some(Duration::from_millis(millis)));
        assert_eq!(reason(500), "stage timed out after 500ms");
        assert_eq!(reason(5_000), "stage timed out after 5s");
        assert_eq!(reason(120_000), "stage timed out after 2m");
        assert_eq!(reason(1_500), "stage timed out after 1500ms");
    }

    #[test]
    fn only_tool_calls_that_all_failed_for_a_sandbox_reason_warn() {
        let mut tally = ToolTally::default();
        assert_eq!(tally.warning(), None);
        tally.record(Some("bwrap: setting up uid map: Permission denied"));
        assert!(tally
            .warning()
            .is_some_and(|w| w.contains("all 1 tool calls")));
        tally.record(None);
        assert_eq!(tally.warning(), None);
        let mut tally = ToolTally::default();
        tally.record(Some("command not found"));
        assert_eq!(tally.warning(), None);
    }
}
