//! The question a human gate asks and how answers match it (SPEC 5.5): options from the
//! gate's unconditional edges, the question type, and matching by key, label, target id
//! and option number. Pure functions; no interviewer does its own matching.

use std::time::Duration;

use fabro_language::label::{accelerator_key, normalize_label, strip_accelerator};
use fabro_language::{NodeIndex, Workflow};
use serde::{Deserialize, Serialize};

/// SPEC 5.5: the freeform text of `--auto-approve` when the gate has no option.
const AUTO_APPROVED: &str = "auto-approved";
/// SPEC 5.5: `human.gate.selected` for a freeform answer.
pub(crate) const FREEFORM_KEY: &str = "freeform";

/// A human gate's question: its text, type, options and freeform edge, with the gate's
/// default choice and timeout. Also the format of `{run_dir}/answers/pending.json`
/// (SPEC 17.4), written while a detached run waits for `fabro answer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// `{node_id}-{attempt}-{ulid}`, as in the `HumanQuestion` event.
    question_id: String,
    /// The gate.
    node_id: String,
    /// The node label.
    text: String,
    question_type: QuestionType,
    /// In edge declaration order.
    options: Vec<GateOption>,
    freeform: Option<FreeformEdge>,
    /// `human.default_choice`.
    default_choice: Option<String>,
    /// The node's `timeout`, in milliseconds.
    timeout_ms: Option<u64>,
    /// `last_response`, shown as context above the question (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    context: String,
}

/// One option: an unconditional, non-freeform outgoing edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateOption {
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct FreeformEdge {
    /// The edge's `label` attribute as written.
    edge_label: String,
    /// Target node id.
    target: String,
}

/// SPEC 5.5 question types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionType {
    /// Only a freeform edge.
    Freeform,
    /// Exactly the options `yes` and `no`.
    YesNo,
    /// Exactly one option.
    Confirmation,
    /// Anything else.
    MultipleChoice,
}

/// An accepted answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The option at this index of [`Question::options`].
    Option(usize),
    /// Free text for the freeform edge.
    Freeform(String),
}

/// How a value is matched against the options (SPEC 5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matching {
    /// `--answer`, `fabro answer` and the API: key, normalised label, target id.
    Answer,
    /// `human.default_choice`: target id, key, normalised label.
    Default,
    /// Console input: key, normalised label, target id, 1-based option number.
    Console,
}

/// Why a gate got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// Empty input, end of input or an explicit skip.
    Skipped,
    /// The (trimmed) value matched no option and there is no freeform edge.
    NoMatch(String),
    /// Free text was given for a gate without a freeform edge.
    NoFreeform,
    /// No answer source applies.
    Unavailable,
    /// No answer came in time and there is no default choice.
    TimedOut,
    /// The run was cancelled while the question was open.
    Canceled,
}

impl Question {
    /// The question of the human gate at `node_index`; `None` when it has neither an
    /// option nor a freeform edge.
    pub(crate) fn of_gate(
        workflow: &Workflow,
        node_index: NodeIndex,
        question_id: String,
        context: &str,
    ) -> Option<Question> {
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
            options.push(GateOption::new(edge.label(), target));
        }
        if options.is_empty() && freeform.is_none() {
            return None;
        }
        let node = workflow.node(node_index);
        let timeout_ms = node
            .timeout()
            .map(|limit| u64::try_from(limit.as_millis()).unwrap_or(u64::MAX));
        Some(Question {
            question_id,
            node_id: node.id.clone(),
            text: node.label().to_owned(),
            question_type: QuestionType::of(&options, freeform.as_ref()),
            options,
            freeform,
            default_choice: node.default_choice().map(str::to_owned),
            timeout_ms,
            context: context.to_owned(),
        })
    }

    /// The question id of the `HumanQuestion` event.
    pub fn id(&self) -> &str {
        &self.question_id
    }

    /// The gate's node id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The question text (the node label).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The question type.
    pub fn question_type(&self) -> QuestionType {
        self.question_type
    }

    /// The options, in edge declaration order.
    pub fn options(&self) -> &[GateOption] {
        &self.options
    }

    /// Whether free text is accepted (a freeform edge exists).
    pub fn allows_freeform(&self) -> bool {
        self.freeform.is_some()
    }

    /// `human.default_choice`, as written.
    pub fn default_choice(&self) -> Option<&str> {
        self.default_choice.as_deref()
    }

    /// The option the default choice selects, if it selects one.
    pub fn default_option(&self) -> Option<usize> {
        let choice = self.default_choice.as_deref()?;
        self.find_option(choice.trim(), Matching::Default)
    }

    /// The gate's `timeout`.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_ms.map(Duration::from_millis)
    }

    /// `last_response`, shown as context above the question; empty when there is none.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// Matches `value` (trimmed) against the options; a value matching none goes to the
    /// freeform edge when there is one.
    pub fn resolve(&self, value: &str, matching: Matching) -> Result<Answer, Unanswered> {
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

    /// Free `text` for the freeform edge that `label` names (its label, its target id or
    /// `freeform`): `fabro answer RUN LABEL --text T`.
    pub fn resolve_text(&self, label: &str, text: &str) -> Result<Answer, Unanswered> {
        let Some(edge) = &self.freeform else {
            return Err(Unanswered::NoFreeform);
        };
        let label = label.trim();
        let names_edge = label == edge.target
            || label.eq_ignore_ascii_case(FREEFORM_KEY)
            || (!edge.edge_label.is_empty()
                && normalize_label(label) == normalize_label(&edge.edge_label));
        if !names_edge {
            return Err(Unanswered::NoMatch(label.to_owned()));
        }
        let text = text.trim();
        if text.is_empty() {
            return Err(Unanswered::Skipped);
        }
        Ok(Answer::Freeform(text.to_owned()))
    }

    /// The answer of `--auto-approve` and of a dry run: `human.default_choice` (target
    /// id first), else the first option, else the text `auto-approved`.
    pub fn automatic_answer(&self) -> Result<Answer, Unanswered> {
        match &self.default_choice {
            Some(choice) => self.resolve(choice, Matching::Default),
            None if self.options.is_empty() => Ok(Answer::Freeform(AUTO_APPROVED.to_owned())),
            None => Ok(Answer::Option(0)),
        }
    }

    /// The answer as a person reads it: `[R] Revise` for an option, the text in quotes
    /// for free text.
    pub fn describe(&self, answer: &Answer) -> String {
        match answer {
            Answer::Option(index) => self
                .options
                .get(*index)
                .map(|option| format!("[{}] {}", option.key, option.display_label()))
                .unwrap_or_default(),
            Answer::Freeform(text) => format!("\"{text}\""),
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

    /// The selected key, the chosen edge's label attribute and the free text: the
    /// `human.gate.*` values of `answer`.
    pub(crate) fn gate_values<'a>(&'a self, answer: &'a Answer) -> (&'a str, &'a str, &'a str) {
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

    /// The chosen option's label, or the freeform edge's label for free text
    /// (`HumanAnswer.label`).
    pub(crate) fn answer_label<'a>(&'a self, answer: &'a Answer) -> &'a str {
        match answer {
            Answer::Option(index) => self.options.get(*index).map_or("", |option| &option.label),
            Answer::Freeform(_) => self.freeform.as_ref().map_or("", |edge| &edge.edge_label),
        }
    }

    /// The node that `answer` routes to.
    pub(crate) fn target_of(&self, answer: &Answer) -> Option<&str> {
        match answer {
            Answer::Option(index) => self
                .options
                .get(*index)
                .map(|option| option.target.as_str()),
            Answer::Freeform(_) => self.freeform.as_ref().map(|edge| edge.target.as_str()),
        }
    }
}

impl GateOption {
    fn new(edge_label: &str, target: String) -> GateOption {
        let label = if edge_label.is_empty() {
            target.clone()
        } else {
            edge_label.to_owned()
        };
        GateOption {
            key: accelerator_key(&label).unwrap_or_default(),
            label,
            edge_label: edge_label.to_owned(),
            target,
        }
    }

    /// The accelerator key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The edge label, or the target id when the edge has none.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The label without its accelerator prefix, for display beside the key (SPEC 17.5).
    pub fn display_label(&self) -> &str {
        strip_accelerator(&self.label)
    }

    /// The target node id.
    pub fn target(&self) -> &str {
        &self.target
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

    /// The name in `HumanQuestion.question_type`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionType::Freeform => "freeform",
            QuestionType::YesNo => "yes_no",
            QuestionType::Confirmation => "confirmation",
            QuestionType::MultipleChoice => "multiple_choice",
        }
    }
}

impl Unanswered {
    /// The failure reason of the gate `node_id` (SPEC 5.5).
    pub fn reason(&self, node_id: &str) -> String {
        match self {
            Unanswered::Skipped => "human skipped interaction".to_owned(),
            Unanswered::NoMatch(value) => {
                format!("answer '{value}' matches no option of gate {node_id}")
            }
            Unanswered::NoFreeform => format!("gate {node_id} takes no free-form answer"),
            Unanswered::Unavailable => {
                "human input unavailable: no interactive terminal (use --answer or --auto-approve)"
                    .to_owned()
            }
            Unanswered::TimedOut => "human gate timeout, no default".to_owned(),
            Unanswered::Canceled => "canceled".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests;
