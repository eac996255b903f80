//! `HookStarted` and `HookCompleted` (SPEC 20.4): one pair per hook that runs, about the
//! node of a stage or question hook, run-level for run hooks. A failed or timed-out
//! non-blocking hook adds `Warning {code: "hook_failed", event, reason}`.

use serde::{Deserialize, Serialize};

/// `HookStarted {event, hook, type, target, blocking, timeout_ms}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookStarted {
    /// Whether the stage waits for it and fails with it (`stage_start` only).
    pub blocking: bool,
    /// The hook event: `run_start`, `run_complete`, `run_failed`, `stage_start`,
    /// `stage_complete` or `human_question`.
    pub event: String,
    /// Its place among the run's `[[hooks]]`, from 1.
    pub hook: u32,
    /// The command, or the URL with credentials redacted.
    pub target: String,
    /// Its time limit.
    pub timeout_ms: u64,
    /// `command` or `http`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// `HookCompleted {event, hook, status, exit_code, status_code, timed_out, reason,
/// duration_ms}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookCompleted {
    /// Run time.
    pub duration_ms: u64,
    /// The hook event, as in [`HookStarted`].
    pub event: String,
    /// Exit code of a command hook that exited (`-1` for death by a signal).
    pub exit_code: Option<i32>,
    /// Its place among the run's `[[hooks]]`, from 1.
    pub hook: u32,
    /// Why it failed; `None` on success.
    pub reason: Option<String>,
    /// `success`, `fail` or `canceled` (the run was cancelled while it ran).
    pub status: String,
    /// HTTP status of an http hook that got an answer.
    pub status_code: Option<u16>,
    /// Whether its time limit ended it.
    pub timed_out: bool,
}
