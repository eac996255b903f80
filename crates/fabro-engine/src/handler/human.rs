//! The human gate handler (SPEC 5.5): turns the gate's outgoing edges into a question,
//! gets an answer from the first applicable source (`--answer`, `--auto-approve`, the
//! console) and routes along the chosen edge through `preferred_label` and
//! `suggested_next_ids`.
//!
//! The question model and answer matching are pure functions; [`execute`] and the
//! console interview around them do the I/O.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, Write};
use std::sync::{Mutex, PoisonError};

use fabro_language::label::{accelerator_key, normalize_label};
use fabro_language::{NodeIndex, Workflow};
use serde_json::json;
use tokio::sync::mpsc;

use super::StageInput;
use crate::event::kind::{HumanAnswer, HumanOption, HumanQuestion};
use crate::event::Event;
use crate::failure::FailureClass;
use crate::outcome::Outcome;

/// Where human answers come from, first applicable wins (SPEC 5.5): `--answer` entries
/// per node (consumed in order, one per visit), `--auto-approve`, the console when stdin
/// and stderr are terminals, otherwise nothing (the gate fails closed).
#[derive(Debug, Default)]
pub(crate) struct Interviewer {
    /// `--answer NODE=LABEL` values per node id, in command-line order.
    answers: Mutex<BTreeMap<String, VecDeque<String>>>,
    /// `--auto-approve`.
    auto_approve: bool,
    /// Whether a console interview is possible (stdin and stderr are terminals).
    console: bool,
    /// The terminal, opened at the first console interview. The async lock also keeps
    /// two gates (parallel branches) from interviewing at once.
    terminal: tokio::sync::Mutex<Option<Terminal>>,
}

/// The console's two ends: stdin lines forwarded by a reader thread, and stderr.
struct Terminal {
    lines: mpsc::UnboundedReceiver<String>,
    output: Box<dyn Write + Send>,
    /// The last interview ended (timeout or cancellation) while waiting for a line.
    abandoned_read: bool,
}

impl Interviewer {
    /// An interviewer from the CLI's answer sources.
    pub(crate) fn new(
        answers: &[(String, String)],
        auto_approve: bool,
        console: bool,
    ) -> Interviewer {
        let mut by_node: BTreeMap<String, VecDeque<String>> = BTreeMap::new();
        for (node, answer) in answers {
            by_node
                .entry(node.clone())
                .or_default()
                .push_back(answer.clone());
        }
        Interviewer {
            answers: Mutex::new(by_node),
            auto_approve,
            console,
            terminal: tokio::sync::Mutex::new(None),
        }
    }

    /// Takes the next `--answer` value for `node_id`, if one is left.
    fn next_answer(&self, node_id: &str) -> Option<String> {
        self.answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(node_id)
            .and_then(VecDeque::pop_front)
    }

    /// Asks `question` on the console: prints it to stderr, reads lines from stdin and
    /// re-asks an input that matches nothing at most [`MAX_REASKS`] times.
    async fn interview(
        &self,
        question: &Question,
        last_response: &str,
    ) -> Result<Answer, Unanswered> {
        let mut terminal = self.terminal.lock().await;
        if terminal.is_none() {
            *terminal = Some(Terminal::stdio().map_err(|_| Unanswered::Unavailable)?);
        }
        let Some(terminal) = terminal.as_mut() else {
            return Err(Unanswered::Unavailable);
        };
        terminal.interview(question, last_response).await
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

    async fn interview(
        &mut self,
        question: &Question,
        last_response: &str,
    ) -> Result<Answer, Unanswered> {
        if self.abandoned_read {
            // Lines typed for a question that timed out or was cancelled answer nothing.
            while self.lines.try_recv().is_ok() {}
        }
        self.write(&render_question(question, last_response))?;
        let mut rejected = String::new();
        for _ in 0..=MAX_REASKS {
            self.write(question.kind.prompt())?;
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

    /// Writes interview text: the one place where a handler talks to the terminal
    /// directly, because the console interview is an interactive prompt.
    fn write(&mut self, text: &str) -> Result<(), Unanswered> {
        self.output
            .write_all(text.as_bytes())
            .and_then(|()| self.output.flush())
            .map_err(|_| Unanswered::Unavailable)
    }
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Terminal")
            .field("abandoned_read", &self.abandoned_read)
            .finish_non_exhaustive()
    }
}

/// SPEC 5.5: a gate with neither an option nor a freeform edge.
const NO_EDGES: &str = "No outgoing edges for human gate";
/// SPEC 5.5: no answer source applies.
const UNAVAILABLE: &str =
    "human input unavailable: no interactive terminal (use --answer or --auto-approve)";
/// SPEC 5.5: empty input.
const SKIPPED: &str = "human skipped interaction";
/// SPEC 5.5: a console timeout without `human.default_choice`.
const TIMEOUT_NO_DEFAULT: &str = "human gate timeout, no default";
/// SPEC 5.5: the freeform text of `--auto-approve` when the gate has no option.
const AUTO_APPROVED: &str = "auto-approved";
/// SPEC 5.5: `human.gate.selected` for a freeform answer.
const FREEFORM_KEY: &str = "freeform";
/// SPEC 5.5: an input matching nothing is re-asked at most three times.
const MAX_REASKS: usize = 3;

/// SPEC 5.5: an answer that matches no option of a gate without a freeform edge.
fn no_match_message(value: &str, node_id: &str) -> String {
    format!("answer '{value}' matches no option of gate {node_id}")
}

/// Asks the gate's question and routes along the chosen edge (SPEC 5.5); a dry run
/// answers like `--auto-approve` (SPEC 4.9).
pub(super) async fn execute(input: &StageInput<'_>) -> Outcome {
    let node = input.node;
    let Some(question) = Question::of_gate(input.workflow, input.node_index) else {
        return Outcome::fail(NO_EDGES, FailureClass::Deterministic);
    };
    let services = input.services;
    let question_id = format!("{}-{}-{}", node.id, input.attempt, ulid::Ulid::new());
    services.emitter.emit(question.event(
        &node.id,
        &question_id,
        node.default_choice(),
        node.timeout(),
    ));
    let interviewer = &services.interviewer;
    let default_choice = node.default_choice();
    // SPEC 4.9: a dry run answers like --auto-approve and reads no other source.
    let answered = if services.dry_run {
        question
            .automatic_answer(default_choice)
            .map(|answer| (answer, AnswerSource::AutoApprove))
    } else if let Some(value) = interviewer.next_answer(&node.id) {
        question
            .resolve(&value, Matching::Answer)
            .map(|answer| (answer, AnswerSource::AnswerFlag))
    } else if interviewer.auto_approve {
        question
            .automatic_answer(default_choice)
            .map(|answer| (answer, AnswerSource::AutoApprove))
    } else if interviewer.console {
        ask_console(input, &question).await
    } else {
        Err(Unanswered::Unavailable)
    };
    match answered {
        Ok((answer, source)) => {
            services
                .emitter
                .emit(question.answer_event(&node.id, &question_id, &answer, source));
            question.outcome(&answer)
        }
        Err(unanswered) => unanswered.into_outcome(&node.id),
    }
}

/// The console source with the node's `timeout` and cancellation around it.
async fn ask_console(
    input: &StageInput<'_>,
    question: &Question,
) -> Result<(Answer, AnswerSource), Unanswered> {
    let last_response = input.context.get_str("last_response").unwrap_or_default();
    let interview = input
        .services
        .interviewer
        .interview(question, last_response);
    let bounded = async {
        match input.node.timeout() {
            Some(limit) => tokio::time::timeout(limit, interview).await.ok(),
            None => Some(interview.await),
        }
    };
    tokio::select! {
        () = input.services.cancel.cancelled() => Err(Unanswered::Canceled),
        result = bounded => match result {
            Some(answered) => answered.map(|answer| (answer, AnswerSource::Console)),
            // SPEC 5.5: on timeout the default choice is used, otherwise the attempt
            // asks for a retry, which re-asks while retries remain.
            None => match input.node.default_choice() {
                Some(choice) => question
                    .resolve(choice, Matching::Default)
                    .map(|answer| (answer, AnswerSource::TimeoutDefault)),
                None => Err(Unanswered::TimedOut),
            },
        },
    }
}

/// The console text before the first prompt: `last_response` as context, the question,
/// one line per option and the freeform hint.
fn render_question(question: &Question, last_response: &str) -> String {
    let mut text = String::new();
    if !last_response.is_empty() {
        text.push_str(last_response);
        text.push_str("\n\n");
    }
    text.push_str(&format!("[?] {}\n", question.text));
    for option in &question.options {
        text.push_str(&format!("  [{}] {}\n", option.key, option.label));
    }
    if question.freeform.is_some() {
        text.push_str("  (or type a free-form answer)\n");
    }
    text
}

/// A gate's question: its text, type, options and freeform edge.
#[derive(Debug, Clone, PartialEq)]
struct Question {
    /// The node label.
    text: String,
    kind: QuestionType,
    /// In edge declaration order.
    options: Vec<GateOption>,
    freeform: Option<FreeformEdge>,
}

/// One option: an unconditional, non-freeform outgoing edge.
#[derive(Debug, Clone, PartialEq)]
struct GateOption {
    /// Accelerator key of `label`.
    key: String,
    /// The edge label, or the target id when the edge has none.
    label: String,
    /// The edge's `label` attribute as written (`human.gate.label`).
    edge_label: String,
    /// Target node id.
    target: String,
}

/// The edge that receives free-text answers.
#[derive(Debug, Clone, PartialEq)]
struct FreeformEdge {
    /// The edge's `label` attribute as written.
    edge_label: String,
    /// Target node id.
    target: String,
}

/// SPEC 5.5 question types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuestionType {
    Freeform,
    YesNo,
    Confirmation,
    MultipleChoice,
}

/// An accepted answer.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    /// The option at this index.
    Option(usize),
    /// Free text for the freeform edge.
    Freeform(String),
}

/// Which source answered (`HumanAnswer.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnswerSource {
    AnswerFlag,
    AutoApprove,
    Console,
    TimeoutDefault,
}

/// How a value is matched against the options (SPEC 5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Matching {
    /// `--answer`: key, normalised label, target id.
    Answer,
    /// `human.default_choice`: target id, key, normalised label.
    Default,
    /// Console input: key, normalised label, target id, 1-based option number.
    Console,
}

/// Why a gate got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unanswered {
    /// Empty input or end of input.
    Skipped,
    /// The (trimmed) value matched no option and there is no freeform edge.
    NoMatch(String),
    /// No source applies.
    Unavailable,
    /// The console timed out and there is no default choice.
    TimedOut,
    /// The run was cancelled while the question was open.
    Canceled,
}

impl Question {
    /// The question of the human gate at `node_index`; `None` when it has neither an
    /// option nor a freeform edge.
    fn of_gate(workflow: &Workflow, node_index: NodeIndex) -> Option<Question> {
        let mut options = Vec::new();
        let mut freeform = None;
        // SPEC 5.5 and decision 45: conditional edges are neither options nor the
        // freeform edge; routing could not follow them through suggested ids (4.5).
        for (_, edge) in workflow.outgoing(node_index) {
            if !edge.is_unconditional() {
                continue;
            }
            let target = workflow.node(edge.to).id.clone();
            if edge.freeform {
                freeform.get_or_insert(FreeformEdge {
                    edge_label: edge.label().to_owned(),
                    target,
                });
                continue;
            }
            let label = if edge.label().is_empty() {
                target.clone()
            } else {
                edge.label().to_owned()
            };
            let key = accelerator_key(&label).unwrap_or_default();
            options.push(GateOption {
                key,
                label,
                edge_label: edge.label().to_owned(),
                target,
            });
        }
        if options.is_empty() && freeform.is_none() {
            return None;
        }
        let text = workflow.node(node_index).label().to_owned();
        Some(Question::new(text, options, freeform))
    }

    fn new(text: String, options: Vec<GateOption>, freeform: Option<FreeformEdge>) -> Question {
        let kind = QuestionType::of(&options, freeform.as_ref());
        Question {
            text,
            kind,
            options,
            freeform,
        }
    }

    /// Matches `value` (trimmed) against the options; a value matching none goes to the
    /// freeform edge when there is one.
    fn resolve(&self, value: &str, matching: Matching) -> Result<Answer, Unanswered> {
        let value = value.trim();
        if value.is_empty() {
            return Err(Unanswered::Skipped);
        }
        if let Some(index) = self.find_option(value, matching) {
            return Ok(Answer::Option(index));
        }
        match self.freeform {
            Some(_) => Ok(Answer::Freeform(value.to_owned())),
            None => Err(Unanswered::NoMatch(value.to_owned())),
        }
    }

    /// The first option matched by `value`, trying each rule over all options before
    /// the next rule, so duplicate keys select the first option with that key.
    fn find_option(&self, value: &str, matching: Matching) -> Option<usize> {
        let by_key = || {
            let wanted = value.to_lowercase();
            self.options
                .iter()
                .position(|option| option.key.to_lowercase() == wanted)
        };
        let by_label = || {
            let wanted = normalize_label(value);
            self.options
                .iter()
                .position(|option| normalize_label(&option.label) == wanted)
        };
        let by_target = || {
            self.options
                .iter()
                .position(|option| option.target == value)
        };
        let by_number = || {
            value
                .parse::<usize>()
                .ok()
                .filter(|number| (1..=self.options.len()).contains(number))
                .map(|number| number - 1)
        };
        match matching {
            Matching::Answer => by_key().or_else(by_label).or_else(by_target),
            Matching::Default => by_target().or_else(by_key).or_else(by_label),
            Matching::Console => by_key()
                .or_else(by_label)
                .or_else(by_target)
                .or_else(by_number),
        }
    }

    /// The answer of `--auto-approve` and of a dry run: `human.default_choice` (target
    /// id first), else the first option, else the text `auto-approved`.
    fn automatic_answer(&self, default_choice: Option<&str>) -> Result<Answer, Unanswered> {
        match default_choice {
            Some(choice) => self.resolve(choice, Matching::Default),
            None if self.options.is_empty() => Ok(Answer::Freeform(AUTO_APPROVED.to_owned())),
            None => Ok(Answer::Option(0)),
        }
    }

    /// The selected key, the chosen edge's label attribute and the free text: the
    /// `human.gate.*` values of `answer`.
    fn gate_values<'a>(&'a self, answer: &'a Answer) -> (&'a str, &'a str, &'a str) {
        match answer {
            Answer::Option(index) => match self.options.get(*index) {
                Some(option) => (&option.key, &option.edge_label, ""),
                None => ("", "", ""),
            },
            Answer::Freeform(text) => {
                let label = self.freeform.as_ref().map_or("", |edge| &edge.edge_label);
                (FREEFORM_KEY, label, text)
            }
        }
    }

    /// The successful outcome of `answer` (SPEC 5.5 "Result").
    fn outcome(&self, answer: &Answer) -> Outcome {
        let (selected, label, text) = self.gate_values(answer);
        let mut outcome = Outcome::success()
            .with_update("human.gate.selected", json!(selected))
            .with_update("human.gate.label", json!(label))
            .with_update("human.gate.text", json!(text));
        match answer {
            Answer::Option(index) => {
                if let Some(option) = self.options.get(*index) {
                    outcome.preferred_label = Some(option.label.clone());
                    outcome.suggested_next_ids = vec![option.target.clone()];
                }
            }
            Answer::Freeform(_) => {
                if let Some(edge) = &self.freeform {
                    outcome.suggested_next_ids = vec![edge.target.clone()];
                }
            }
        }
        outcome
    }

    /// `HumanQuestion`.
    fn event(
        &self,
        node_id: &str,
        question_id: &str,
        default_choice: Option<&str>,
        timeout: Option<std::time::Duration>,
    ) -> Event {
        let options = self
            .options
            .iter()
            .map(|option| HumanOption {
                key: option.key.clone(),
                label: option.label.clone(),
                target: option.target.clone(),
            })
            .collect();
        let timeout_ms = timeout.map(|limit| u64::try_from(limit.as_millis()).unwrap_or(u64::MAX));
        Event::node(
            node_id,
            HumanQuestion {
                allow_freeform: self.freeform.is_some(),
                default_choice: default_choice.map(str::to_owned),
                options,
                question_id: question_id.to_owned(),
                question_type: self.kind.as_str().to_owned(),
                text: self.text.clone(),
                timeout_ms,
            },
        )
    }

    /// `HumanAnswer`: `label` is the chosen option's label (the freeform edge's label
    /// for free text).
    fn answer_event(
        &self,
        node_id: &str,
        question_id: &str,
        answer: &Answer,
        source: AnswerSource,
    ) -> Event {
        let (selected, edge_label, text) = self.gate_values(answer);
        let label = match answer {
            Answer::Option(index) => self.options.get(*index).map_or("", |option| &option.label),
            Answer::Freeform(_) => edge_label,
        };
        Event::node(
            node_id,
            HumanAnswer {
                label: label.to_owned(),
                question_id: question_id.to_owned(),
                selected_key: selected.to_owned(),
                source: source.as_str().to_owned(),
                text: text.to_owned(),
            },
        )
    }
}

impl QuestionType {
    /// SPEC 5.5: freeform without options; yes/no for exactly the options `yes` and
    /// `no`; confirmation for one option; otherwise multiple choice.
    fn of(options: &[GateOption], freeform: Option<&FreeformEdge>) -> QuestionType {
        let is = |option: &GateOption, label: &str| normalize_label(&option.label) == label;
        match options {
            [] if freeform.is_some() => QuestionType::Freeform,
            [first, second]
                if (is(first, "yes") && is(second, "no"))
                    || (is(first, "no") && is(second, "yes")) =>
            {
                QuestionType::YesNo
            }
            [_] => QuestionType::Confirmation,
            _ => QuestionType::MultipleChoice,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            QuestionType::Freeform => "freeform",
            QuestionType::YesNo => "yes_no",
            QuestionType::Confirmation => "confirmation",
            QuestionType::MultipleChoice => "multiple_choice",
        }
    }

    /// The console prompt.
    fn prompt(self) -> &'static str {
        match self {
            QuestionType::YesNo => "[Y/N]: ",
            QuestionType::Freeform => "> ",
            QuestionType::Confirmation | QuestionType::MultipleChoice => "Select: ",
        }
    }
}

impl AnswerSource {
    fn as_str(self) -> &'static str {
        match self {
            AnswerSource::AnswerFlag => "answer_flag",
            AnswerSource::AutoApprove => "auto_approve",
            AnswerSource::Console => "console",
            AnswerSource::TimeoutDefault => "timeout_default",
        }
    }
}

impl Unanswered {
    fn into_outcome(self, node_id: &str) -> Outcome {
        match self {
            Unanswered::Skipped => Outcome::fail(SKIPPED, FailureClass::Deterministic),
            Unanswered::NoMatch(value) => Outcome::fail(
                no_match_message(&value, node_id),
                FailureClass::Deterministic,
            ),
            Unanswered::Unavailable => Outcome::fail(UNAVAILABLE, FailureClass::Deterministic),
            Unanswered::TimedOut => Outcome::retry(TIMEOUT_NO_DEFAULT),
            Unanswered::Canceled => Outcome::fail("canceled", FailureClass::Canceled),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use std::sync::{Arc, Mutex};

    use fabro_language::{StageStatus, Workflow};
    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::context::Context;
    use crate::event::EventEnvelope;
    use crate::handler::test_support::{workflow, TestRun};

    /// A gate `gate` labelled "Ship it?" after `start`, with the edges in `edges`.
    fn gate_workflow(edges: &str, gate_attributes: &str) -> Workflow {
        workflow(&format!(
            "digraph t {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n gate [shape=hexagon, label=\"Ship it?\"{gate_attributes}]\n start -> gate\n {edges}\n}}"
        ))
    }

    fn question_of(edges: &str) -> Option<Question> {
        let workflow = gate_workflow(edges, "");
        let gate = workflow.find("gate").expect("gate node");
        Question::of_gate(&workflow, gate)
    }

    const MENU: &str = r#"gate -> exit [label="[A] Approve"]
        gate -> fix [label="[R] Retry"]
        gate -> later [label="Review later"]"#;
    const MENU_WITH_FREEFORM: &str = r#"gate -> exit [label="[A] Approve"]
        gate -> fix [label="[R] Retry"]
        gate -> notes [label="Comment", freeform=true]"#;

    /// What a pure function is asked about a gate.
    enum Probe<'a> {
        /// The question built from the edges.
        Question,
        /// The console text, with this `last_response`.
        Render(&'a str),
        /// A value matched with these rules.
        Match(Matching, &'a str),
        /// The `--auto-approve` / dry-run answer with this default choice.
        Auto(Option<&'a str>),
    }

    fn check(edges: &str, probe: Probe<'_>, expected: &str) {
        let question = question_of(edges);
        let actual = match (probe, &question) {
            (Probe::Question, None) => "none".to_owned(),
            (Probe::Question, Some(question)) => describe_question(question),
            (Probe::Render(last_response), Some(question)) => {
                render_question(question, last_response)
            }
            (Probe::Match(matching, value), Some(question)) => {
                describe_answer(question, question.resolve(value, matching))
            }
            (Probe::Auto(choice), Some(question)) => {
                describe_answer(question, question.automatic_answer(choice))
            }
            (_, None) => panic!("gate without a question: {edges}"),
        };
        assert_eq!(actual, expected, "edges:\n{edges}");
    }

    fn describe_question(question: &Question) -> String {
        let mut parts: Vec<String> = question
            .options
            .iter()
            .map(|option| format!("{}={}->{}", option.key, option.label, option.target))
            .collect();
        if let Some(edge) = &question.freeform {
            parts.push(format!("freeform->{}", edge.target));
        }
        format!("{}: {}", question.kind.as_str(), parts.join(", "))
    }

    fn describe_answer(question: &Question, answer: Result<Answer, Unanswered>) -> String {
        match answer {
            Ok(Answer::Option(index)) => {
                let option = &question.options[index];
                format!("option {}->{}", option.label, option.target)
            }
            Ok(Answer::Freeform(text)) => format!("freeform '{text}'"),
            Err(Unanswered::NoMatch(value)) => format!("no match '{value}'"),
            Err(other) => format!("{other:?}"),
        }
    }

    #[test]
    fn options_and_question_types() {
        check(
            MENU,
            Probe::Question,
            "multiple_choice: A=[A] Approve->exit, R=[R] Retry->fix, R=Review later->later",
        );
        check(
            "gate -> exit\n gate -> fix [label=\"AB) Fix it\"]\n gate -> x [label=\"q - Quit\"]",
            Probe::Question,
            "multiple_choice: e=exit->exit, AB=AB) Fix it->fix, q=q - Quit->x",
        );
        check(
            "gate -> exit",
            Probe::Question,
            "confirmation: e=exit->exit",
        );
        check(
            "gate -> exit [label=\"Yes\"]\n gate -> fix [label=\"No\"]",
            Probe::Question,
            "yes_no: Y=Yes->exit, N=No->fix",
        );
        check(
            "gate -> fix [label=\"[N] No\"]\n gate -> exit [label=\"[Y] yes\"]",
            Probe::Question,
            "yes_no: N=[N] No->fix, Y=[Y] yes->exit",
        );
        check(
            "gate -> exit [label=\"Yes\"]\n gate -> fix [label=\"Nope\"]",
            Probe::Question,
            "multiple_choice: Y=Yes->exit, N=Nope->fix",
        );
        check(
            "gate -> exit [label=\"Yes\"]\n gate -> fix [label=\"No\"]\n gate -> x [label=\"Maybe\"]",
            Probe::Question,
            "multiple_choice: Y=Yes->exit, N=No->fix, M=Maybe->x",
        );
        check(
            "gate -> notes [freeform=true]",
            Probe::Question,
            "freeform: freeform->notes",
        );
        check(
            MENU_WITH_FREEFORM,
            Probe::Question,
            "multiple_choice: A=[A] Approve->exit, R=[R] Retry->fix, freeform->notes",
        );
        check(
            "gate -> exit [label=\"Approve\"]\n gate -> notes [freeform=true]",
            Probe::Question,
            "confirmation: A=Approve->exit, freeform->notes",
        );
        // Conditional edges are neither options nor the freeform edge.
        check(
            "gate -> exit [label=\"Approve\"]\n gate -> fix [label=\"Abort\", condition=\"outcome=fail\"]\n gate -> notes [freeform=true, condition=\"x\"]",
            Probe::Question,
            "confirmation: A=Approve->exit",
        );
        check(
            "gate -> notes [freeform=true]\n gate -> other [freeform=true]",
            Probe::Question,
            "freeform: freeform->notes",
        );
        check(
            "gate -> exit [condition=\"outcome=success\"]",
            Probe::Question,
            "none",
        );
    }

    #[test]
    fn answers_match_key_then_label_then_target() {
        let answer = |value| Probe::Match(Matching::Answer, value);
        check(MENU, answer("a"), "option [A] Approve->exit");
        check(MENU, answer("A"), "option [A] Approve->exit");
        // A duplicate key selects the first option with it; the other stays reachable.
        check(MENU, answer("r"), "option [R] Retry->fix");
        check(
            MENU,
            answer("  REVIEW later "),
            "option Review later->later",
        );
        check(MENU, answer("[R] Retry"), "option [R] Retry->fix");
        check(MENU, answer("retry"), "option [R] Retry->fix");
        check(MENU, answer("later"), "option Review later->later");
        check(MENU, answer("fix"), "option [R] Retry->fix");
        check(MENU, answer("1"), "no match '1'");
        check(MENU, answer(" nope "), "no match 'nope'");
        check(MENU, answer(""), "Skipped");
        check(MENU, answer("   "), "Skipped");
        check(MENU_WITH_FREEFORM, answer("a"), "option [A] Approve->exit");
        check(
            MENU_WITH_FREEFORM,
            answer("ship it now"),
            "freeform 'ship it now'",
        );
        check(MENU_WITH_FREEFORM, answer(""), "Skipped");
        let label_before_target =
            "gate -> fix [label=\"later\"]\n gate -> later [label=\"Postpone\"]";
        check(label_before_target, answer("later"), "option later->fix");
        let key_before_label = "gate -> x [label=\"B) Alpha\"]\n gate -> y [label=\"b\"]";
        check(key_before_label, answer("b"), "option B) Alpha->x");
        check(key_before_label, answer("alpha"), "option B) Alpha->x");
    }

    #[test]
    fn default_choices_match_target_first() {
        let default = |value| Probe::Match(Matching::Default, value);
        let label_before_target =
            "gate -> fix [label=\"later\"]\n gate -> later [label=\"Postpone\"]";
        check(
            label_before_target,
            default("later"),
            "option Postpone->later",
        );
        check(label_before_target, default("p"), "option Postpone->later");
        check(label_before_target, default("LATER"), "option later->fix");
        check(MENU, default("a"), "option [A] Approve->exit");
        check(MENU, default("1"), "no match '1'");
        check(MENU_WITH_FREEFORM, default("lgtm"), "freeform 'lgtm'");
    }

    #[test]
    fn console_input_also_matches_option_numbers() {
        let console = |value| Probe::Match(Matching::Console, value);
        check(MENU, console("1"), "option [A] Approve->exit");
        check(MENU, console("3\n"), "option Review later->later");
        check(MENU, console("0"), "no match '0'");
        check(MENU, console("4"), "no match '4'");
        check(MENU, console("r\n"), "option [R] Retry->fix");
        check(MENU, console("\n"), "Skipped");
        // A key beats an option number.
        let numbered_keys =
            "gate -> x [label=\"First\"]\n gate -> y [label=\"1) Second\"]\n gate -> z [label=\"Third\"]";
        check(numbered_keys, console("1"), "option 1) Second->y");
        check(numbered_keys, console("3"), "option Third->z");
        check(MENU_WITH_FREEFORM, console("9"), "freeform '9'");
    }

    #[test]
    fn automatic_answers() {
        check(MENU, Probe::Auto(None), "option [A] Approve->exit");
        check(MENU, Probe::Auto(Some("fix")), "option [R] Retry->fix");
        check(
            MENU,
            Probe::Auto(Some("Review later")),
            "option Review later->later",
        );
        check(MENU, Probe::Auto(Some("zzz")), "no match 'zzz'");
        check(
            MENU_WITH_FREEFORM,
            Probe::Auto(Some("zzz")),
            "freeform 'zzz'",
        );
        check(
            "gate -> notes [freeform=true]",
            Probe::Auto(None),
            "freeform 'auto-approved'",
        );
    }

    #[test]
    fn console_rendering() {
        check(
            MENU_WITH_FREEFORM,
            Probe::Render(""),
            "[?] Ship it?\n  [A] [A] Approve\n  [R] [R] Retry\n  (or type a free-form answer)\n",
        );
        check(
            "gate -> exit [label=\"Yes\"]\n gate -> fix [label=\"No\"]",
            Probe::Render("The plan is ready."),
            "The plan is ready.\n\n[?] Ship it?\n  [Y] Yes\n  [N] No\n",
        );
    }

    /// A console fed from a channel instead of stdin, printing into a shared buffer.
    struct FakeConsole {
        lines: mpsc::UnboundedSender<String>,
        printed: Arc<Mutex<Vec<u8>>>,
    }

    impl FakeConsole {
        /// An interviewer with only the console source, and the console's other ends.
        fn interviewer() -> (Interviewer, FakeConsole) {
            let (sender, lines) = mpsc::unbounded_channel();
            let printed = Arc::new(Mutex::new(Vec::new()));
            let interviewer = Interviewer::new(&[], false, true);
            *interviewer.terminal.try_lock().expect("fresh lock") = Some(Terminal {
                lines,
                output: Box::new(SharedBuffer(Arc::clone(&printed))),
                abandoned_read: false,
            });
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

    fn answers(values: &[(&str, &str)]) -> Vec<(String, String)> {
        values
            .iter()
            .map(|(node, value)| ((*node).to_owned(), (*value).to_owned()))
            .collect()
    }

    /// Runs the gate of `workflow` once in `run`.
    async fn run_gate(run: &TestRun, workflow: &Workflow) -> Outcome {
        execute(&run.input(workflow, "gate")).await
    }

    fn human_events(run: &TestRun) -> Vec<EventEnvelope> {
        run.events()
            .into_iter()
            .filter(|event| event.name().starts_with("Human"))
            .collect()
    }

    /// The `HumanAnswer` properties that do not vary: source, key, label, text.
    fn answer_summary(run: &TestRun) -> Vec<Value> {
        human_events(run)
            .iter()
            .filter(|event| event.name() == "HumanAnswer")
            .map(|event| {
                let property =
                    |name: &str| event.properties().get(name).cloned().unwrap_or_default();
                json!([
                    property("source"),
                    property("selected_key"),
                    property("label"),
                    property("text")
                ])
            })
            .collect()
    }

    fn gate_context(outcome: &Outcome) -> Value {
        json!([
            outcome.context_updates.get("human.gate.selected"),
            outcome.context_updates.get("human.gate.label"),
            outcome.context_updates.get("human.gate.text"),
        ])
    }

    fn assert_failed(outcome: &Outcome, reason: &str, class: FailureClass) {
        assert_eq!(outcome.status, StageStatus::Fail, "{outcome:?}");
        assert_eq!(outcome.failure_reason(), reason);
        assert_eq!(outcome.failure_class(), Some(class));
        assert!(outcome.context_updates.is_empty(), "{outcome:?}");
        assert!(outcome.preferred_label.is_none() && outcome.suggested_next_ids.is_empty());
    }

    #[tokio::test]
    async fn answer_flag_selects_by_key_label_or_target() {
        let workflow = gate_workflow(MENU, "");
        let mut run = TestRun::new();
        run.services.interviewer = Interviewer::new(
            &answers(&[("gate", "a"), ("gate", "retry"), ("gate", "later")]),
            false,
            false,
        );
        let by_key = run_gate(&run, &workflow).await;
        assert_eq!(by_key.status, StageStatus::Success);
        assert_eq!(by_key.preferred_label.as_deref(), Some("[A] Approve"));
        assert_eq!(by_key.suggested_next_ids, ["exit"]);
        assert_eq!(gate_context(&by_key), json!(["A", "[A] Approve", ""]));
        let by_label = run_gate(&run, &workflow).await;
        assert_eq!(by_label.suggested_next_ids, ["fix"]);
        assert_eq!(gate_context(&by_label), json!(["R", "[R] Retry", ""]));
        let by_target = run_gate(&run, &workflow).await;
        assert_eq!(by_target.preferred_label.as_deref(), Some("Review later"));
        assert_eq!(by_target.suggested_next_ids, ["later"]);
        assert_eq!(
            answer_summary(&run),
            [
                json!(["answer_flag", "A", "[A] Approve", ""]),
                json!(["answer_flag", "R", "[R] Retry", ""]),
                json!(["answer_flag", "R", "Review later", ""]),
            ]
        );
    }

    #[tokio::test]
    async fn answers_are_consumed_one_per_visit() {
        let workflow = gate_workflow(MENU, "");
        let mut run = TestRun::new();
        run.services.interviewer = Interviewer::new(
            &answers(&[("other", "a"), ("gate", "r"), ("gate", "a")]),
            false,
            false,
        );
        let first = run_gate(&run, &workflow).await;
        let second = run_gate(&run, &workflow).await;
        let third = run_gate(&run, &workflow).await;
        assert_eq!(first.suggested_next_ids, ["fix"]);
        assert_eq!(second.suggested_next_ids, ["exit"]);
        assert_failed(&third, UNAVAILABLE, FailureClass::Deterministic);
    }

    #[tokio::test]
    async fn unmatched_answers_go_to_the_freeform_edge_or_fail() {
        let freeform = gate_workflow(MENU_WITH_FREEFORM, "");
        let mut run = TestRun::new();
        run.services.interviewer =
            Interviewer::new(&answers(&[("gate", "ship it on Monday")]), false, false);
        let outcome = run_gate(&run, &freeform).await;
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.preferred_label, None);
        assert_eq!(outcome.suggested_next_ids, ["notes"]);
        assert_eq!(
            gate_context(&outcome),
            json!(["freeform", "Comment", "ship it on Monday"])
        );
        assert_eq!(
            answer_summary(&run),
            [json!([
                "answer_flag",
                "freeform",
                "Comment",
                "ship it on Monday"
            ])]
        );

        let closed = gate_workflow(MENU, "");
        let mut run = TestRun::new();
        run.services.interviewer =
            Interviewer::new(&answers(&[("gate", "ship it"), ("gate", "")]), false, false);
        let unmatched = run_gate(&run, &closed).await;
        assert_failed(
            &unmatched,
            "answer 'ship it' matches no option of gate gate",
            FailureClass::Deterministic,
        );
        let empty = run_gate(&run, &closed).await;
        assert_failed(
            &empty,
            "human skipped interaction",
            FailureClass::Deterministic,
        );
        assert!(answer_summary(&run).is_empty());
    }

    #[tokio::test]
    async fn auto_approve_uses_the_default_choice_else_the_first_option() {
        let mut run = TestRun::new();
        run.services.interviewer = Interviewer::new(&[], true, true);
        let plain = run_gate(&run, &gate_workflow(MENU, "")).await;
        assert_eq!(plain.suggested_next_ids, ["exit"]);
        let with_default =
            run_gate(&run, &gate_workflow(MENU, ", human.default_choice=later")).await;
        assert_eq!(with_default.suggested_next_ids, ["later"]);
        assert_eq!(
            gate_context(&with_default),
            json!(["R", "Review later", ""])
        );
        let freeform_only =
            run_gate(&run, &gate_workflow("gate -> notes [freeform=true]", "")).await;
        assert_eq!(freeform_only.suggested_next_ids, ["notes"]);
        assert_eq!(
            gate_context(&freeform_only),
            json!(["freeform", "", "auto-approved"])
        );
        assert_eq!(
            answer_summary(&run),
            [
                json!(["auto_approve", "A", "[A] Approve", ""]),
                json!(["auto_approve", "R", "Review later", ""]),
                json!(["auto_approve", "freeform", "", "auto-approved"]),
            ]
        );
    }

    #[tokio::test]
    async fn answers_come_before_auto_approve() {
        let mut run = TestRun::new();
        run.services.interviewer = Interviewer::new(&answers(&[("gate", "r")]), true, false);
        let workflow = gate_workflow(MENU, "");
        assert_eq!(run_gate(&run, &workflow).await.suggested_next_ids, ["fix"]);
        assert_eq!(run_gate(&run, &workflow).await.suggested_next_ids, ["exit"]);
    }

    #[tokio::test]
    async fn without_a_source_the_gate_fails_closed() {
        let run = TestRun::new();
        let outcome = run_gate(&run, &gate_workflow(MENU, "")).await;
        assert_failed(
            &outcome,
            "human input unavailable: no interactive terminal (use --answer or --auto-approve)",
            FailureClass::Deterministic,
        );
        let names: Vec<_> = human_events(&run)
            .into_iter()
            .map(|event| event.name().to_owned())
            .collect();
        assert_eq!(names, ["HumanQuestion"]);
    }

    #[tokio::test]
    async fn a_gate_without_options_fails() {
        let mut run = TestRun::new();
        run.services.interviewer = Interviewer::new(&[], true, false);
        let workflow = gate_workflow("gate -> exit [condition=\"outcome=success\"]", "");
        let outcome = run_gate(&run, &workflow).await;
        assert_failed(
            &outcome,
            "No outgoing edges for human gate",
            FailureClass::Deterministic,
        );
        assert!(human_events(&run).is_empty());
    }

    #[tokio::test]
    async fn dry_run_picks_the_default_choice_else_the_first_option() {
        let mut run = TestRun::new();
        run.services.dry_run = true;
        run.services.interviewer = Interviewer::new(&answers(&[("gate", "r")]), false, false);
        let plain = run_gate(&run, &gate_workflow(MENU_WITH_FREEFORM, "")).await;
        assert_eq!(plain.suggested_next_ids, ["exit"]);
        let with_default = run_gate(
            &run,
            &gate_workflow(MENU, ", human.default_choice=\"Review later\""),
        )
        .await;
        assert_eq!(with_default.suggested_next_ids, ["later"]);
        assert_eq!(
            answer_summary(&run),
            [
                json!(["auto_approve", "A", "[A] Approve", ""]),
                json!(["auto_approve", "R", "Review later", ""]),
            ]
        );
        // The dry run did not consume the --answer entry.
        run.services.dry_run = false;
        assert_eq!(
            run_gate(&run, &gate_workflow(MENU, ""))
                .await
                .suggested_next_ids,
            ["fix"]
        );
    }

    #[tokio::test]
    async fn events_describe_the_question_and_the_answer() {
        let workflow = gate_workflow(
            MENU_WITH_FREEFORM,
            ", human.default_choice=fix, timeout=90s",
        );
        let mut run = TestRun::new();
        run.services.interviewer = Interviewer::new(&answers(&[("gate", "A")]), false, false);
        run_gate(&run, &workflow).await;
        let events = human_events(&run);
        assert_eq!(events.len(), 2);
        let (question, answer) = (&events[0], &events[1]);
        assert_eq!(question.name(), "HumanQuestion");
        assert_eq!(question.node_id.as_deref(), Some("gate"));
        let question_properties = question.properties();
        let question_id = question_properties["question_id"]
            .as_str()
            .expect("question id");
        assert!(question_id.starts_with("gate-1-"), "{question_id}");
        let mut properties = question.properties();
        properties.remove("question_id");
        assert_eq!(
            Value::Object(properties),
            json!({
                "text": "Ship it?",
                "question_type": "multiple_choice",
                "options": [
                    {"key": "A", "label": "[A] Approve", "target": "exit"},
                    {"key": "R", "label": "[R] Retry", "target": "fix"},
                ],
                "allow_freeform": true,
                "default_choice": "fix",
                "timeout_ms": 90_000,
            })
        );
        assert_eq!(answer.name(), "HumanAnswer");
        assert_eq!(
            Value::Object(answer.properties()),
            json!({"question_id": question_id, "source": "answer_flag", "selected_key": "A",
                   "label": "[A] Approve", "text": ""})
        );
    }

    #[tokio::test]
    async fn console_asks_and_re_asks() {
        let workflow = gate_workflow(MENU, "");
        let (interviewer, console) = FakeConsole::interviewer();
        let mut run = TestRun::new();
        run.services.interviewer = interviewer;
        let context = Context::from_values(
            [("last_response".to_owned(), json!("Plan written."))]
                .into_iter()
                .collect(),
        );
        console.type_line("nope");
        console.type_line("3");
        let input = StageInput {
            context: &context,
            ..run.input(&workflow, "gate")
        };
        let outcome = execute(&input).await;
        assert_eq!(outcome.suggested_next_ids, ["later"]);
        assert_eq!(
            console.printed(),
            "Plan written.\n\n[?] Ship it?\n  [A] [A] Approve\n  [R] [R] Retry\n  [R] Review later\nSelect:   'nope' matches no option\nSelect: "
        );
        assert_eq!(
            answer_summary(&run),
            [json!(["console", "R", "Review later", ""])]
        );
    }

    #[tokio::test]
    async fn console_gives_up_after_three_re_asks() {
        let workflow = gate_workflow(
            "gate -> exit [label=\"Yes\"]\n gate -> fix [label=\"No\"]",
            "",
        );
        let (interviewer, console) = FakeConsole::interviewer();
        let mut run = TestRun::new();
        run.services.interviewer = interviewer;
        for line in ["maybe", "perhaps", "later", "never", "yes"] {
            console.type_line(line);
        }
        let outcome = run_gate(&run, &workflow).await;
        assert_failed(
            &outcome,
            "answer 'never' matches no option of gate gate",
            FailureClass::Deterministic,
        );
        assert_eq!(console.printed().matches("[Y/N]: ").count(), 4);
    }

    #[tokio::test]
    async fn console_empty_input_or_end_of_input_skips() {
        let workflow = gate_workflow("gate -> notes [freeform=true]", "");
        let (interviewer, console) = FakeConsole::interviewer();
        let mut run = TestRun::new();
        run.services.interviewer = interviewer;
        console.type_line("");
        let empty = run_gate(&run, &workflow).await;
        assert_failed(
            &empty,
            "human skipped interaction",
            FailureClass::Deterministic,
        );
        assert!(console
            .printed()
            .ends_with("(or type a free-form answer)\n> "));
        drop(console);
        let closed = run_gate(&run, &workflow).await;
        assert_failed(
            &closed,
            "human skipped interaction",
            FailureClass::Deterministic,
        );
    }

    #[tokio::test(start_paused = true)]
    async fn console_timeout_uses_the_default_choice() {
        let workflow = gate_workflow(MENU, ", timeout=5m, human.default_choice=r");
        let (interviewer, console) = FakeConsole::interviewer();
        let mut run = TestRun::new();
        run.services.interviewer = interviewer;
        let outcome = run_gate(&run, &workflow).await;
        assert_eq!(outcome.suggested_next_ids, ["fix"]);
        assert_eq!(
            answer_summary(&run),
            [json!(["timeout_default", "R", "[R] Retry", ""])]
        );
        // A line typed for the timed-out question does not answer the next one.
        console.type_line("a");
        let next = run_gate(&run, &workflow).await;
        assert_eq!(next.suggested_next_ids, ["fix"]);
        assert_eq!(
            answer_summary(&run)[1],
            json!(["timeout_default", "R", "[R] Retry", ""])
        );
        drop(console);
    }

    #[tokio::test(start_paused = true)]
    async fn console_timeout_without_default_asks_for_a_retry() {
        let workflow = gate_workflow(MENU, ", timeout=30s");
        let (interviewer, _console) = FakeConsole::interviewer();
        let mut run = TestRun::new();
        run.services.interviewer = interviewer;
        let outcome = run_gate(&run, &workflow).await;
        assert_eq!(outcome.status, StageStatus::Retry);
        assert_eq!(outcome.failure_reason(), "human gate timeout, no default");
        assert!(answer_summary(&run).is_empty());
    }

    #[tokio::test]
    async fn cancellation_ends_an_open_question() {
        let workflow = gate_workflow(MENU, "");
        let (interviewer, _console) = FakeConsole::interviewer();
        let mut run = TestRun::new();
        run.services.interviewer = interviewer;
        run.services.cancel.cancel();
        let outcome = run_gate(&run, &workflow).await;
        assert_failed(&outcome, "canceled", FailureClass::Canceled);
    }
}
