//! The live view of a run on stderr (SPEC 17.5), and the `--json` event stream on stdout
//! (SPEC 12.1).
//!
//! One line per finished stage, per loop-control event and per budget stop, naming nodes
//! by their labels; a summary line at the end. On a colour terminal a live line below
//! them shows the running stage with a spinner, its elapsed time and, for commands, the
//! last line of output ([`live`]); elsewhere the lines are plain.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabro_engine::event_kind::HumanAnswer;
use fabro_engine::{EventEnvelope, EventKind, EventSink};

mod line;
mod live;

/// Prints the progress of a run to stderr; see the module documentation.
pub(crate) struct ProgressSink {
    shared: Arc<Shared>,
    ticker: Mutex<Option<JoinHandle<()>>>,
}

/// What the event side and the live line's thread share.
struct Shared {
    /// A colour terminal: colours and the live line.
    terminal: bool,
    state: Mutex<State>,
    /// Wakes the live line's thread when it must stop.
    wake: Condvar,
}

/// Everything the lines are made of. Held while a line is written, so lines never
/// interleave.
#[derive(Default)]
struct State {
    /// The answers of human gates whose stage has not completed yet, by node.
    choices: HashMap<String, String>,
    /// How lines name nodes: `Label (id)`, by id (from the run's `graph.fabro`).
    names: HashMap<String, String>,
    run_dir: Option<PathBuf>,
    /// Stages started and not completed, oldest first.
    running: Vec<Running>,
    /// A human question is being asked: the console owns the terminal.
    question_open: bool,
    /// The live line is on the screen.
    drawn: bool,
    /// The spinner frame drawn last.
    frame: usize,
    stopped: bool,
    totals: Totals,
}

/// A stage that has started and not completed.
struct Running {
    rank: u32,
    name: String,
    started: Instant,
    /// The stage directory of a command stage, whose output the live line shows.
    command_dir: Option<PathBuf>,
}

/// What the summary line sums up.
#[derive(Default)]
struct Totals {
    stages: usize,
    tokens: u64,
    /// `None` when no stage reported a cost.
    cost: Option<f64>,
    duration_ms: Option<u64>,
    started: Option<Instant>,
}

/// How often the live line is redrawn (SPEC 17.5: at least twice a second).
const TICK: Duration = Duration::from_millis(100);

impl ProgressSink {
    /// A sink for stderr; `terminal` when stderr is a terminal that takes colour.
    pub(crate) fn new(terminal: bool) -> ProgressSink {
        let shared = Arc::new(Shared {
            terminal,
            state: Mutex::new(State {
                totals: Totals {
                    started: Some(Instant::now()),
                    ..Totals::default()
                },
                ..State::default()
            }),
            wake: Condvar::new(),
        });
        let ticker = terminal.then(|| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || live::tick(&shared))
        });
        ProgressSink {
            shared,
            ticker: Mutex::new(ticker),
        }
    }

    /// Stops the live line and returns the summary line (SPEC 17.5):
    /// `{n} stages in {duration}; {tokens} tokens; ${cost}`, the cost omitted when unknown.
    pub(crate) fn finish(&self) -> String {
        {
            let mut state = self.shared.lock();
            state.stopped = true;
            live::clear(&mut state);
        }
        self.shared.wake.notify_all();
        let ticker = self
            .ticker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(ticker) = ticker {
            let _ = ticker.join();
        }
        summary_line(&self.shared.lock().totals)
    }
}

impl ProgressSink {
    /// Names the nodes as the workflow file `workflow` does, until the run's own
    /// `graph.fabro` says otherwise: the file a client started a server's run from.
    pub(crate) fn name_nodes_from(&self, workflow: &Path) {
        self.shared.lock().names = node_names(workflow);
    }
}

impl Drop for ProgressSink {
    fn drop(&mut self) {
        self.shared.lock().stopped = true;
        self.shared.wake.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl EventSink for ProgressSink {
    fn emit(&self, envelope: &EventEnvelope) {
        let mut state = self.shared.lock();
        let node = envelope.node_id.as_deref().unwrap_or_default().to_owned();
        let choice = match &envelope.kind {
            EventKind::WorkflowRunStarted(started) => {
                let run_dir = PathBuf::from(&started.run_dir);
                let names = node_names(&run_dir.join("graph.fabro"));
                // A run whose records are elsewhere (a shared store) keeps the names of
                // the workflow file it was started from, if any.
                if !names.is_empty() {
                    state.names = names;
                }
                state.run_dir = Some(run_dir);
                return;
            }
            EventKind::StageStarted(stage) => {
                let command_dir = state
                    .run_dir
                    .as_ref()
                    .filter(|_| stage.handler == "command")
                    .map(|run_dir| stage_dir(run_dir, stage.rank, &node, stage.visit));
                let name = line::name(&state.names, &node).to_owned();
                state.running.push(Running {
                    rank: stage.rank,
                    name,
                    started: Instant::now(),
                    command_dir,
                });
                return;
            }
            EventKind::HumanQuestion(_) => {
                state.question_open = true;
                live::clear(&mut state);
                return;
            }
            EventKind::HumanAnswer(answer) => {
                state.question_open = false;
                state.choices.insert(node, gate_choice(answer));
                return;
            }
            EventKind::StageCompleted(stage) => {
                state.running.retain(|running| running.rank != stage.rank);
                // A gate that ended without an answer (a timeout) asks nothing any more.
                state.question_open = false;
                let totals = &mut state.totals;
                totals.stages += 1;
                if let Some(usage) = &stage.usage {
                    totals.tokens += usage.input_tokens + usage.output_tokens;
                    if let Some(cost) = usage.cost_usd {
                        totals.cost = Some(totals.cost.unwrap_or(0.0) + cost);
                    }
                }
                state.choices.remove(&node)
            }
            EventKind::WorkflowRunCompleted(completed) => {
                state.totals.duration_ms = Some(completed.duration_ms);
                state.running.clear();
                None
            }
            EventKind::WorkflowRunFailed(failed) => {
                state.totals.duration_ms = Some(failed.duration_ms);
                state.running.clear();
                None
            }
            _ => None,
        };
        let Some(text) = line::progress_line(
            envelope,
            self.shared.terminal,
            choice.as_deref(),
            &state.names,
        ) else {
            return;
        };
        live::clear(&mut state);
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{text}");
        let _ = stderr.flush();
    }
}

/// `stages/{rank:03}-{node_id}@{visit}` of the run (SPEC 7.5).
fn stage_dir(run_dir: &Path, rank: u32, node: &str, visit: u32) -> PathBuf {
    run_dir
        .join("stages")
        .join(format!("{rank:03}-{node}@{visit}"))
}

/// How progress lines name the nodes of the run's `graph.fabro`: `Label (id)` for nodes
/// with a label of their own, by id. Empty when the file cannot be read: lines then use
/// the ids.
fn node_names(path: &Path) -> HashMap<String, String> {
    let Ok(text) = fs_err::read_to_string(path) else {
        return HashMap::new();
    };
    let variables = fabro_language::Variables::new("", std::collections::BTreeMap::new());
    let options = fabro_language::CheckOptions {
        loader: &fabro_language::NoFiles,
        variables: &variables,
        models: &fabro_language::AnyModel,
    };
    let checked = fabro_language::check(path, &text, &options);
    let Some(workflow) = checked.workflow else {
        return HashMap::new();
    };
    workflow
        .nodes()
        .iter()
        .filter(|node| node.has_label())
        .filter_map(|node| {
            let label = node.label().lines().next().unwrap_or("").trim();
            (!label.is_empty() && label != node.id)
                .then(|| (node.id.clone(), format!("{label} ({})", node.id)))
        })
        .collect()
}

/// What a human gate's answer chose, as its progress line shows it (SPEC 17.5):
/// `[R] Revise`, or the free text in quotes.
fn gate_choice(answer: &HumanAnswer) -> String {
    match answer.selected_key.as_str() {
        "freeform" => format!("\"{}\"", answer.text),
        key => format!(
            "[{key}] {}",
            fabro_language::label::strip_accelerator(&answer.label)
        ),
    }
}

/// `{n} stages in {duration}; {tokens} tokens; ${cost}`.
fn summary_line(totals: &Totals) -> String {
    let duration = totals.duration_ms.map_or_else(
        || {
            totals
                .started
                .map(|started| started.elapsed())
                .unwrap_or_default()
        },
        Duration::from_millis,
    );
    let mut text = format!(
        "{} stages in {}; {} tokens",
        totals.stages,
        crate::command::format_elapsed(duration),
        totals.tokens
    );
    if let Some(cost) = totals.cost {
        text.push_str(&format!("; ${cost:.4}"));
    }
    text
}

/// Prints every event envelope as one JSON line on stdout (`--json`).
pub(crate) struct JsonSink {
    lock: Mutex<()>,
}

impl JsonSink {
    pub(crate) fn new() -> JsonSink {
        JsonSink {
            lock: Mutex::new(()),
        }
    }
}

impl EventSink for JsonSink {
    fn emit(&self, envelope: &EventEnvelope) {
        let Ok(line) = serde_json::to_string(envelope) else {
            return;
        };
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelopes(lines: &[&str]) -> Vec<EventEnvelope> {
        fabro_engine::backend::read_events(&lines.join("\n"))
    }

    const STARTED: &str = r#"{"id":1,"ts":"2026-11-26T07:00:00.000Z","run_id":"r","event":"StageStarted","node_id":"gate","properties":{"attempt":1,"handler":"human","rank":2,"visit":1}}"#;
    const QUESTION: &str = r#"{"id":2,"ts":"2026-11-26T07:00:00.000Z","run_id":"r","event":"HumanQuestion","node_id":"gate","properties":{"allow_freeform":false,"default_choice":null,"options":[],"question_id":"q","question_type":"confirmation","text":"Ship?","timeout_ms":10}}"#;
    const COMPLETED: &str = r#"{"id":3,"ts":"2026-11-26T07:00:00.000Z","run_id":"r","event":"StageCompleted","node_id":"gate","properties":{"attempts":1,"duration_ms":12,"failure_class":"deterministic","failure_reason":"human gate timeout, no default","files_touched":[],"model":null,"outcome":"fail","provider":null,"rank":2,"status":"fail","usage":{"cache_read_tokens":0,"cache_write_tokens":0,"cost_usd":0.25,"input_tokens":7,"output_tokens":3,"reasoning_tokens":0},"visit":1}}"#;

    #[test]
    fn a_gate_that_ends_unanswered_gives_the_terminal_back_and_counts_in_the_summary() {
        let sink = ProgressSink::new(false);
        let events = envelopes(&[STARTED, QUESTION]);
        assert_eq!(events.len(), 2);
        for event in &events {
            sink.emit(event);
        }
        {
            let state = sink.shared.lock();
            assert!(state.question_open);
            assert_eq!(state.running.len(), 1);
        }
        for event in &envelopes(&[COMPLETED]) {
            sink.emit(event);
        }
        {
            let state = sink.shared.lock();
            assert!(!state.question_open, "the live line may draw again");
            assert!(state.running.is_empty());
        }
        let summary = sink.finish();
        assert!(summary.starts_with("1 stages in "), "{summary}");
        assert!(summary.ends_with("; 10 tokens; $0.2500"), "{summary}");
    }

    #[test]
    fn the_summary_omits_an_unknown_cost() {
        let totals = Totals {
            stages: 3,
            tokens: 0,
            cost: None,
            duration_ms: Some(2500),
            started: None,
        };
        assert_eq!(summary_line(&totals), "3 stages in 2.5s; 0 tokens");
    }
}
