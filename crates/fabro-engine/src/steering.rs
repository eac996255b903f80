//! Steering (SPEC 20.1): messages a person sends to the agent stage that runs. Every run
//! has one [`SteeringQueue`]: messages are accepted into it (`SteeringQueued`), agent
//! stages register with it while they run, and each api or acp agent takes the queued
//! messages at its next delivery point (`Agent.SteeringDelivered`; see
//! [`fabro_agent::Steering`]). A message is delivered once: to whichever agent stage
//! takes it first, or, with [`WhenNoAgent::WaitForNext`], to the next agent stage that
//! starts. A message accepted just as its stage ended goes to the next agent stage too.
//!
//! The queue is one type over its storage ([`mailbox`]): the run directory for a run of
//! the local store, the shared store's rows for a run a worker executes (SPEC 18.2).
//! The process that executes the run takes messages in process
//! ([`SteeringQueue::send`]); other processes post them ([`steer_elsewhere`]: `fabro
//! steer`, a server steering a run it does not execute). The run accepts them within
//! 100 ms from its directory, or at once on the shared store's notice (within a second
//! if the notice is missed). Accepted messages are kept until delivered, so a run that
//! crashes or is taken over delivers them after its resume, and never twice. Delivered
//! text is appended to the stage's `prompt.md`, redacted like every prompt.

mod mailbox;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use fabro_agent::SteeringInbox;
pub use fabro_agent::SteeringMessage;
pub use fabro_agent::SteeringSource;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::event::kind::SteeringQueued;
use crate::event::{Emitter, Event};
use crate::id::RunId;
use crate::store::RunStore;
pub use crate::store::RunningAgentStage;
pub use mailbox::{agent_stages_elsewhere, running_agent_stages, steer_elsewhere};
use mailbox::{Key, Mailbox};

/// How often a run looks for messages posted by other processes into its directory.
const POLL: Duration = Duration::from_millis(100);

/// How often a run of a store with notices looks for posted messages no notice told of
/// (one can be missed while the store's connection is lost).
const STORE_POLL: Duration = Duration::from_secs(1);

/// What to do with a message when no agent stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenNoAgent {
    /// Refuse it (`no agent stage is running in run {id}`).
    Refuse,
    /// Queue it for the next agent stage of the run (`--next`).
    WaitForNext,
}

/// Why a message was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    /// Nothing to send.
    #[error("the steering text is empty")]
    Empty,
    /// No agent stage runs (and the message may not wait for the next one).
    #[error("no agent stage is running in run {run_id}")]
    NoAgentStage {
        /// The run.
        run_id: String,
    },
    /// The agent stage that runs has a backend that takes no steering (`cli`).
    #[error(
        "agent stage {node_id} of run {run_id} runs the {backend} backend, which cannot be steered"
    )]
    NotSteerable {
        /// The run.
        run_id: String,
        /// The running stage's node.
        node_id: String,
        /// Its backend.
        backend: String,
    },
    /// The run does not run (a message for its next agent stage would never arrive).
    #[error("run {run_id} is not running")]
    NotRunning {
        /// The run.
        run_id: String,
    },
    /// The run did not accept a posted message in time; the message was withdrawn.
    #[error("run {run_id} did not accept the message within {}s", .waited.as_secs())]
    NotTaken {
        /// The run.
        run_id: String,
        /// How long the sender waited.
        waited: Duration,
    },
    /// The shared store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A steering file could not be written or read.
    #[error("{action} {}", .path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl SteerError {
    /// Whether the run's state refused the message (exit 2, API 409), as opposed to a
    /// bad request ([`SteerError::Empty`]) or fabro's own storage failing.
    pub fn is_conflict(&self) -> bool {
        match self {
            SteerError::NoAgentStage { .. }
            | SteerError::NotSteerable { .. }
            | SteerError::NotRunning { .. }
            | SteerError::NotTaken { .. } => true,
            SteerError::Empty | SteerError::Io { .. } | SteerError::Store(_) => false,
        }
    }
}

/// An accepted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steered {
    /// The running agent stage's node that will receive it; `None` when it waits for
    /// the next agent stage.
    pub node_id: Option<String>,
}

/// The steering queue of one run (a cheap handle: clones share it).
#[derive(Clone)]
pub struct SteeringQueue {
    shared: Arc<Shared>,
}

struct Shared {
    run_id: String,
    mailbox: Mailbox,
    state: Mutex<State>,
    /// Set when the run starts executing: accepted messages are announced through it.
    /// Weak: the emitter's sinks may hold this queue (a server's run), and the run's end
    /// drops the emitter.
    emitter: OnceLock<std::sync::Weak<Emitter>>,
}

#[derive(Default)]
struct State {
    /// Accepted, not yet delivered, oldest first; each is kept in the mailbox.
    pending: Vec<(SteeringMessage, Key)>,
    /// The agent stages running now.
    running: Vec<Registered>,
    next_id: u64,
}

struct Registered {
    id: u64,
    stage: RunningAgentStage,
}

impl std::fmt::Debug for SteeringQueue {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SteeringQueue")
            .field("run_id", &self.shared.run_id)
            .finish_non_exhaustive()
    }
}

impl SteeringQueue {
    /// The queue of run `run_id`, kept in `run_dir`.
    pub fn new(run_id: &str, run_dir: &Path) -> SteeringQueue {
        SteeringQueue::with(run_id, Mailbox::files(run_dir))
    }

    /// The queue of run `run_id` of `runs`: kept by the store when it keeps steering
    /// (a shared store), else in `run_dir`.
    pub fn of(runs: &Arc<dyn RunStore>, run_id: &RunId, run_dir: &Path) -> SteeringQueue {
        SteeringQueue::with(run_id.as_str(), Mailbox::of(runs, run_id, run_dir))
    }

    fn with(run_id: &str, mailbox: Mailbox) -> SteeringQueue {
        SteeringQueue {
            shared: Arc::new(Shared {
                run_id: run_id.to_owned(),
                mailbox,
                state: Mutex::new(State::default()),
                emitter: OnceLock::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The agent stages running now.
    pub fn running(&self) -> Vec<RunningAgentStage> {
        self.state()
            .running
            .iter()
            .map(|entry| entry.stage.clone())
            .collect()
    }

    /// Accepts `text` from `source` for the agent stage that runs, or (`when`) for the
    /// next one; announces it as `SteeringQueued`. Before the run executes, a message
    /// for the next agent stage is posted and accepted when the run starts.
    pub fn send(
        &self,
        text: &str,
        source: SteeringSource,
        when: WhenNoAgent,
    ) -> Result<Steered, SteerError> {
        let message = message(text, source)?;
        let Some(emitter) = self.shared.emitter.get().and_then(std::sync::Weak::upgrade) else {
            if when == WhenNoAgent::Refuse {
                return Err(SteerError::NoAgentStage {
                    run_id: self.shared.run_id.clone(),
                });
            }
            self.shared.mailbox.post(&message)?;
            return Ok(Steered { node_id: None });
        };
        let mut state = self.state();
        let running: Vec<RunningAgentStage> = state
            .running
            .iter()
            .map(|entry| entry.stage.clone())
            .collect();
        let node_id = target(&self.shared.run_id, &running, when)?;
        let key = self.shared.mailbox.store(&message)?;
        announce(&emitter, node_id.as_deref(), &message);
        state.pending.push((message, key));
        Ok(Steered { node_id })
    }

    /// Starts announcing accepted messages through `emitter`: the run executes. Messages
    /// accepted before a crash are queued again, and those posted meanwhile accepted.
    pub(crate) fn attach(&self, emitter: &Arc<Emitter>) {
        if self.shared.emitter.set(Arc::downgrade(emitter)).is_err() {
            return;
        }
        let leftovers = self.shared.mailbox.restore();
        self.state().pending.extend(leftovers);
        self.shared.mailbox.publish(&[]);
        self.accept_posted();
    }

    /// Accepts the messages other processes posted, oldest first.
    fn accept_posted(&self) {
        let Some(emitter) = self.shared.emitter.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let mut state = self.state();
        for (message, key) in self.shared.mailbox.accept_posted() {
            // The sender checked for a running stage; the announcement names it.
            let node_id = state
                .running
                .iter()
                .find(|entry| entry.stage.steerable())
                .map(|entry| entry.stage.node_id.clone());
            announce(&emitter, node_id.as_deref(), &message);
            state.pending.push((message, key));
        }
    }

    /// Accepts posted messages until `stop` fires: every 100 ms from the run
    /// directory; from a shared store on its notice, and every second in any case.
    pub(crate) async fn watch(self, stop: CancellationToken) {
        let mut notices = self.shared.mailbox.notices();
        let every = if notices.is_some() { STORE_POLL } else { POLL };
        loop {
            if notices.is_some() {
                // The store's calls block; the run's runtime threads do not wait for them.
                let queue = self.clone();
                let _ = tokio::task::spawn_blocking(move || queue.accept_posted()).await;
            } else {
                self.accept_posted();
            }
            let poll = tokio::time::sleep(every);
            tokio::pin!(poll);
            loop {
                let notice = async {
                    match notices.as_mut() {
                        Some(notices) => Some(notices.recv().await),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = &mut poll => break,
                    notice = notice => match notice {
                        Some(Ok(notice)) if self.shared.mailbox.is_posted(&notice) => break,
                        Some(Ok(crate::store::Notice::Missed) | Err(RecvError::Lagged(_))) => break,
                        Some(Err(RecvError::Closed)) => notices = None,
                        _ => {}
                    },
                }
            }
        }
    }

    /// Registers a running agent stage of `node_id` with `backend` (`api`, `acp`,
    /// `cli`), whose records are in `stage_dir`, until the returned guard is dropped.
    pub(crate) fn begin(&self, node_id: &str, backend: &str, stage_dir: &Path) -> AgentStage {
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        state.running.push(Registered {
            id,
            stage: RunningAgentStage {
                node_id: node_id.to_owned(),
                backend: backend.to_owned(),
            },
        });
        self.publish(&state);
        AgentStage {
            queue: self.clone(),
            id,
            inbox: Arc::new(StageInbox {
                queue: self.clone(),
                stage_dir: stage_dir.to_path_buf(),
                open: AtomicBool::new(true),
            }),
        }
    }

    fn publish(&self, state: &State) {
        let running: Vec<RunningAgentStage> = state
            .running
            .iter()
            .map(|entry| entry.stage.clone())
            .collect();
        self.shared.mailbox.publish(&running);
    }

    /// Takes every pending message for delivery: each is marked delivered first, so no
    /// message is delivered twice, even across a crash. Messages posted to the run
    /// directory are accepted first; a shared store's are accepted on its notice, so an
    /// LLM call with nothing pending asks the store nothing.
    fn take(&self) -> Vec<SteeringMessage> {
        if matches!(self.shared.mailbox, Mailbox::Files(_)) {
            self.accept_posted();
        }
        let pending = std::mem::take(&mut self.state().pending);
        pending
            .into_iter()
            .filter(|(_, key)| self.shared.mailbox.deliver(key))
            .map(|(message, _)| message)
            .collect()
    }
}

/// A running agent stage's registration; dropping it ends the registration.
pub(crate) struct AgentStage {
    queue: SteeringQueue,
    id: u64,
    inbox: Arc<StageInbox>,
}

impl AgentStage {
    /// Where the stage's agent takes its messages from.
    pub(crate) fn inbox(&self) -> Arc<dyn SteeringInbox> {
        Arc::clone(&self.inbox) as Arc<dyn SteeringInbox>
    }
}

impl Drop for AgentStage {
    fn drop(&mut self) {
        // A thread's session outlives its stage: its inbox closes with the stage.
        self.inbox.open.store(false, Ordering::SeqCst);
        let mut state = self.queue.state();
        state.running.retain(|entry| entry.id != self.id);
        self.queue.publish(&state);
    }
}

/// The inbox of one agent stage: takes from the run's queue while the stage runs, and
/// appends what it delivers to the stage's `prompt.md`.
struct StageInbox {
    queue: SteeringQueue,
    stage_dir: PathBuf,
    open: AtomicBool,
}

impl SteeringInbox for StageInbox {
    fn take(&self) -> Vec<SteeringMessage> {
        if !self.open.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let messages = self.queue.take();
        if !messages.is_empty() {
            let record = format!("\n\n{}\n", fabro_agent::delivery_text(&messages));
            let path = self.stage_dir.join("prompt.md");
            let written = fs_err::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut file| std::io::Write::write_all(&mut file, record.as_bytes()));
            if let Err(error) = written {
                tracing::warn!(%error, "cannot record steering in prompt.md");
            }
        }
        messages
    }
}

/// A redacted message, or [`SteerError::Empty`].
fn message(text: &str, source: SteeringSource) -> Result<SteeringMessage, SteerError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SteerError::Empty);
    }
    Ok(SteeringMessage {
        source,
        text: fabro_llm::redact::redactor().redact_str(text).into_owned(),
    })
}

/// The node a message goes to among `running` stages: the first steerable one, else
/// `None` when it may wait for the next agent stage; else why it is refused.
fn target(
    run_id: &str,
    running: &[RunningAgentStage],
    when: WhenNoAgent,
) -> Result<Option<String>, SteerError> {
    if let Some(stage) = running.iter().find(|stage| stage.steerable()) {
        return Ok(Some(stage.node_id.clone()));
    }
    match (when, running.first()) {
        (WhenNoAgent::WaitForNext, _) => Ok(None),
        (WhenNoAgent::Refuse, Some(stage)) => Err(SteerError::NotSteerable {
            run_id: run_id.to_owned(),
            node_id: stage.node_id.clone(),
            backend: stage.backend.clone(),
        }),
        (WhenNoAgent::Refuse, None) => Err(SteerError::NoAgentStage {
            run_id: run_id.to_owned(),
        }),
    }
}

/// Emits `SteeringQueued`, about the stage that will receive the message if one runs.
fn announce(emitter: &Emitter, node_id: Option<&str>, message: &SteeringMessage) {
    let queued = SteeringQueued {
        source: message.source.as_str().to_owned(),
        text: message.text.clone(),
    };
    emitter.emit(match node_id {
        Some(node_id) => Event::node(node_id, queued),
        None => Event::run(queued),
    });
}

#[cfg(test)]
mod tests;
