//! The one writer of terminal output: stdout for results, stderr for everything else
//! (SPEC 12.2).
//!
//! A closed stdout pipe (`fabro validate x | head -1`) is not an error worth reporting:
//! further stdout writes are dropped and the command finishes with its normal status.

use std::io::{IsTerminal, Write};

use crate::error::CliError;

/// Stream handles plus what we know about them.
pub(crate) struct Output {
    stdout: std::io::Stdout,
    stderr: std::io::Stderr,
    stdout_terminal: bool,
    stderr_terminal: bool,
    color_allowed: bool,
    stdout_closed: bool,
}

impl Output {
    pub(crate) fn new() -> Output {
        let stdout = std::io::stdout();
        let stderr = std::io::stderr();
        let color_allowed = std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
        Output {
            stdout_terminal: stdout.is_terminal(),
            stderr_terminal: stderr.is_terminal(),
            stdout,
            stderr,
            color_allowed,
            stdout_closed: false,
        }
    }

    /// Whether stdout is a terminal (source snippets are shown only there).
    pub(crate) fn stdout_is_terminal(&self) -> bool {
        self.stdout_terminal
    }

    /// Whether stderr is a terminal.
    pub(crate) fn stderr_is_terminal(&self) -> bool {
        self.stderr_terminal
    }

    /// Whether to colour text written to stdout.
    pub(crate) fn stdout_color(&self) -> bool {
        self.stdout_terminal && self.color_allowed
    }

    /// Whether to colour text written to stderr.
    pub(crate) fn stderr_color(&self) -> bool {
        self.stderr_terminal && self.color_allowed
    }

    /// Writes result text to stdout.
    pub(crate) fn out(&mut self, text: &str) {
        self.out_bytes(text.as_bytes());
    }

    /// Writes result bytes (a stage's output, a patch) to stdout unchanged.
    pub(crate) fn out_bytes(&mut self, bytes: &[u8]) {
        if self.stdout_closed || bytes.is_empty() {
            return;
        }
        let mut handle = self.stdout.lock();
        if handle
            .write_all(bytes)
            .and_then(|()| handle.flush())
            .is_err()
        {
            // Broken pipe or a closed descriptor: nobody reads the rest.
            self.stdout_closed = true;
        }
    }

    /// Writes progress or diagnostic text to stderr.
    pub(crate) fn err(&mut self, text: &str) {
        let mut handle = self.stderr.lock();
        let _ = handle.write_all(text.as_bytes());
        let _ = handle.flush();
    }

    /// Prints an error as `error: {message}` with one indented line per cause.
    pub(crate) fn error(&mut self, error: &CliError) {
        let (message, mut source) = error.report();
        let mut text = format!("{}: {message}\n", self.paint_stderr("error", RED));
        while let Some(cause) = source {
            text.push_str(&format!("  caused by: {cause}\n"));
            source = cause.source();
        }
        self.err(&text);
    }

    fn paint_stderr(&self, text: &str, color: &str) -> String {
        paint(text, color, self.stderr_color())
    }
}

/// ANSI red, bold.
pub(crate) const RED: &str = "\x1b[1;31m";
/// ANSI yellow, bold.
pub(crate) const YELLOW: &str = "\x1b[1;33m";
/// ANSI blue, bold.
pub(crate) const BLUE: &str = "\x1b[1;34m";

/// Wraps `text` in `color` when `enabled`.
pub(crate) fn paint(text: &str, color: &str, enabled: bool) -> String {
    if enabled {
        format!("{color}{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}
