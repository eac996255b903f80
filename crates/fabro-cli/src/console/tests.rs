//! Unit tests of the console interviewer with a fake terminal: the 17.5 rendering,
//! re-asks, end of input and lines typed for an abandoned question.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabro_engine::gate::Answer;
use serde_json::json;

use super::*;

/// A question as `pending.json` stores it.
fn question(options: &[(&str, &str, &str)], extra: serde_json::Value) -> Question {
    let mut value = json!({
        "question_id": "gate-1-x",
        "node_id": "gate",
        "text": "Ship it?",
        "question_type": "multiple_choice",
        "options": options
            .iter()
            .map(|(key, label, target)| json!({"key": key, "label": label, "edge_label": label, "target": target}))
            .collect::<Vec<_>>(),
        "freeform": null,
        "default_choice": null,
        "timeout_ms": null,
    });
    if let (Some(base), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        base.extend(extra.clone());
    }
    serde_json::from_value(value).expect("a question")
}

const MENU: &[(&str, &str, &str)] = &[
    ("A", "[A] Approve", "exit"),
    ("R", "[R] Retry", "fix"),
    ("R", "Review later", "later"),
];

/// A console fed from a channel instead of stdin, printing into a shared buffer.
struct FakeConsole {
    lines: mpsc::UnboundedSender<String>,
    printed: Arc<Mutex<Vec<u8>>>,
}

impl FakeConsole {
    fn interviewer() -> (ConsoleInterviewer, FakeConsole) {
        let (sender, lines) = mpsc::unbounded_channel();
        let printed = Arc::new(Mutex::new(Vec::new()));
        let interviewer = ConsoleInterviewer {
            terminal: tokio::sync::Mutex::new(Some(Terminal {
                lines,
                output: Box::new(SharedBuffer(Arc::clone(&printed))),
                abandoned_read: false,
            })),
        };
        let console = FakeConsole {
            lines: sender,
            printed,
        };
        (interviewer, console)
    }

    fn type_line(&self, line: &str) {
        self.lines
            .send(format!("{line}\n"))
            .expect("console is open");
    }

    fn printed(&self) -> String {
        String::from_utf8(self.printed.lock().expect("test lock").clone()).expect("utf-8")
    }
}

struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("test lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn rendering_shows_each_key_once_and_marks_the_default() {
    assert_eq!(
        render_question(&question(MENU, json!({"default_choice": "later"}))),
        "[?] Ship it?\n  [A] Approve\n  [R] Retry\n  [R] Review later (default)\n  type a key, a label, or a number\n"
    );
    assert_eq!(
        render_question(&question(
            &[("Y", "Yes", "exit"), ("N", "No", "fix")],
            json!({"question_type": "yes_no", "context": "The plan is ready.",
                   "freeform": {"edge_label": "Comment", "target": "notes"}})
        )),
        "The plan is ready.\n\n[?] Ship it?\n  [Y] Yes\n  [N] No\n  (or type a free-form answer)\n  type a key, a label, or a number\n"
    );
    assert_eq!(
        render_question(&question(
            &[],
            json!({"question_type": "freeform", "freeform": {"edge_label": "", "target": "notes"}})
        )),
        "[?] Ship it?\n  (or type a free-form answer)\n"
    );
}

#[tokio::test]
async fn asks_and_re_asks() {
    let (interviewer, console) = FakeConsole::interviewer();
    console.type_line("nope");
    console.type_line("3");
    let question = question(MENU, json!({"context": "Plan written."}));
    assert_eq!(
        interviewer.ask(&question).await,
        Reply::Answered(Answer::Option(2), AnswerSource::Console)
    );
    assert_eq!(
        console.printed(),
        "Plan written.\n\n[?] Ship it?\n  [A] Approve\n  [R] Retry\n  [R] Review later\n  type a key, a label, or a number\nSelect:   'nope' matches no option\nSelect: "
    );
}

#[tokio::test]
async fn gives_up_after_three_re_asks() {
    let (interviewer, console) = FakeConsole::interviewer();
    for line in ["maybe", "perhaps", "later", "never", "yes"] {
        console.type_line(line);
    }
    let question = question(
        &[("Y", "Yes", "exit"), ("N", "No", "fix")],
        json!({"question_type": "yes_no"}),
    );
    assert_eq!(
        interviewer.ask(&question).await,
        Reply::Unanswered(Unanswered::NoMatch("never".to_owned()))
    );
    assert_eq!(console.printed().matches("[Y/N]: ").count(), 4);
}

#[tokio::test]
async fn empty_input_or_end_of_input_skips() {
    let (interviewer, console) = FakeConsole::interviewer();
    let question = question(
        &[],
        json!({"question_type": "freeform", "freeform": {"edge_label": "", "target": "notes"}}),
    );
    console.type_line("");
    assert_eq!(
        interviewer.ask(&question).await,
        Reply::Unanswered(Unanswered::Skipped)
    );
    assert!(console
        .printed()
        .ends_with("(or type a free-form answer)\n> "));
    drop(console);
    assert_eq!(
        interviewer.ask(&question).await,
        Reply::Unanswered(Unanswered::Skipped)
    );
}

#[tokio::test(start_paused = true)]
async fn lines_typed_for_an_abandoned_question_answer_nothing() {
    let (interviewer, console) = FakeConsole::interviewer();
    let question = question(MENU, json!({}));
    // The gate's timeout drops the question while the console waits for a line.
    let abandoned = tokio::time::timeout(Duration::from_secs(60), interviewer.ask(&question)).await;
    assert!(abandoned.is_err());
    console.type_line("a");
    let next = tokio::time::timeout(Duration::from_secs(60), interviewer.ask(&question)).await;
    assert!(next.is_err(), "the stale line did not answer: {next:?}");
    // A line typed while the question is asked answers it.
    let (reply, ()) = tokio::join!(interviewer.ask(&question), async {
        tokio::task::yield_now().await;
        console.type_line("r");
    });
    assert_eq!(
        reply,
        Reply::Answered(Answer::Option(1), AnswerSource::Console)
    );
}
