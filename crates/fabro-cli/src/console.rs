//! The console interviewer (SPEC 5.5 source 3, 17.5): asks a human gate's question on
//! stderr and reads the answer from stdin, when both are terminals. The engine applies
//! the gate's timeout and cancellation around it.

use std::io::{BufRead, Write};

use fabro_engine::gate::{
    AnswerSource, BoxFuture, Matching, Question, QuestionType, Reply, Unanswered,
};
use fabro_engine::Interviewer;
use tokio::sync::mpsc;

/// An input matching nothing is re-asked at most three times (SPEC 5.5).
const MAX_REASKS: usize = 3;

/// Asks on the terminal. The terminal is opened at the first question; its async lock
/// also keeps two gates (parallel branches) from asking at once.
pub(crate) struct ConsoleInterviewer {
    terminal: tokio::sync::Mutex<Option<Terminal>>,
}

/// The console's two ends: stdin lines forwarded by a reader thread, and stderr.
struct Terminal {
    lines: mpsc::UnboundedReceiver<String>,
    output: Box<dyn Write + Send>,
    /// The last question ended (timeout or cancellation) while waiting for a line.
    abandoned_read: bool,
}

impl ConsoleInterviewer {
    /// An interviewer on stdin and stderr, which the caller found to be terminals.
    pub(crate) fn new() -> ConsoleInterviewer {
        ConsoleInterviewer {
            terminal: tokio::sync::Mutex::new(None),
        }
    }
}

impl Interviewer for ConsoleInterviewer {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            let mut terminal = self.terminal.lock().await;
            if terminal.is_none() {
                match Terminal::stdio() {
                    Ok(opened) => *terminal = Some(opened),
                    Err(_) => return Reply::Unanswered(Unanswered::Unavailable),
                }
            }
            let Some(terminal) = terminal.as_mut() else {
                return Reply::Unanswered(Unanswered::Unavailable);
            };
            match terminal.interview(question).await {
                Ok(answer) => Reply::Answered(answer, AnswerSource::Console),
                Err(unanswered) => Reply::Unanswered(unanswered),
            }
        })
    }
}

impl Terminal {
    /// Stdin and stderr. Stdin is read by a detached thread rather than `spawn_blocking`:
    /// a read that never returns must not hold up runtime shutdown.
    fn stdio() -> std::io::Result<Terminal> {
        let (sender, lines) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("fabro-stdin".to_owned())
            .spawn(move || {
                let stdin = std::io::stdin();
                loop {
                    let mut line = String::new();
                    match stdin.lock().read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if sender.send(line).is_err() {
                                break;
                            }
                        }
                    }
                }
            })?;
        Ok(Terminal {
            lines,
            output: Box::new(std::io::stderr()),
            abandoned_read: false,
        })
    }

    /// Prints the question, reads lines and re-asks an input that matches nothing at
    /// most [`MAX_REASKS`] times.
    async fn interview(
        &mut self,
        question: &Question,
    ) -> Result<fabro_engine::gate::Answer, Unanswered> {
        if self.abandoned_read {
            // Lines typed for a question that timed out or was cancelled answer nothing.
            while self.lines.try_recv().is_ok() {}
        }
        self.write(&render_question(question))?;
        let mut rejected = String::new();
        for _ in 0..=MAX_REASKS {
            self.write(prompt(question.question_type()))?;
            self.abandoned_read = true;
            let line = self.lines.recv().await;
            self.abandoned_read = false;
            let Some(line) = line else {
                // End of input: nobody will answer.
                return Err(Unanswered::Skipped);
            };
            match question.resolve(&line, Matching::Console) {
                Err(Unanswered::NoMatch(value)) => {
                    self.write(&format!("  '{value}' matches no option\n"))?;
                    rejected = value;
                }
                answered => return answered,
            }
        }
        Err(Unanswered::NoMatch(rejected))
    }

    fn write(&mut self, text: &str) -> Result<(), Unanswered> {
        self.output
            .write_all(text.as_bytes())
            .and_then(|()| self.output.flush())
            .map_err(|_| Unanswered::Unavailable)
    }
}

/// The text before the first prompt (SPEC 5.5, 17.5): `last_response` as context, the
/// question, one line per option with its key once and the default marked, the freeform
/// hint, and how to answer.
fn render_question(question: &Question) -> String {
    let mut text = String::new();
    if !question.context().is_empty() {
        text.push_str(question.context());
        text.push_str("\n\n");
    }
    text.push_str(&format!("[?] {}\n", question.text()));
    let default = question.default_option();
    for (index, option) in question.options().iter().enumerate() {
        let mark = if default == Some(index) {
            " (default)"
        } else {
            ""
        };
        text.push_str(&format!(
            "  [{}] {}{mark}\n",
            option.key(),
            option.display_label()
        ));
    }
    if question.allows_freeform() {
        text.push_str("  (or type a free-form answer)\n");
    }
    if !question.options().is_empty() {
        text.push_str("  type a key, a label, or a number\n");
    }
    text
}

/// The prompt of a question type (SPEC 5.5).
fn prompt(question_type: QuestionType) -> &'static str {
    match question_type {
        QuestionType::YesNo => "[Y/N]: ",
        QuestionType::Freeform => "> ",
        QuestionType::Confirmation | QuestionType::MultipleChoice => "Select: ",
    }
}

#[cfg(test)]
mod tests;
