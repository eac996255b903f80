//! Where a run's steering messages wait between their sender and the run: the run
//! directory (a run of the local store, one machine), or the shared store's
//! [`SteeringStore`] (SPEC 18.2: a worker executes the run, any server steers it).
//!
//! The protocol of the run directory, all within `{run_dir}/steering/`:
//! - `active.json` lists the agent stages running now (node and backend), written by
//!   the run whenever one starts or ends; absent when none runs. Other processes trust
//!   it only while the run holds its lock.
//! - A sender writes a message to `inbox/{name}.json` (a temporary file renamed into
//!   place, so the run never reads half a file). Names sort in posting order.
//! - The run accepts a message by renaming it to `queued/{name}.json`: either the run
//!   takes it or the sender withdraws it (when the run stopped first), never both; the
//!   sender succeeds once its file is gone from `inbox/`.
//! - Delivery renames `queued/` to `delivered/` before the agent sees the message, so a
//!   crash loses at most one delivery and never repeats one; messages left in `queued/`
//!   are delivered after a resume.
//!
//! The shared store keeps the same three states as rows, each change a conditional
//! write, and trusts the published stages only while the run's lease is live.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{message, target, SteerError, Steered, SteeringMessage, SteeringSource, WhenNoAgent};
use crate::id::RunId;
use crate::run_dir::write_json_atomic;
use crate::run_index::RunLock;
use crate::store::{MessageId, Notice, RunStore, RunningAgentStage};

const DIR: &str = "steering";
const ACTIVE: &str = "active.json";
const INBOX: &str = "inbox";
const QUEUED: &str = "queued";
const DELIVERED: &str = "delivered";

/// How often a sender looks whether the run accepted its message.
const POLL: Duration = Duration::from_millis(20);

/// `active.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Active {
    stages: Vec<RunningAgentStage>,
}

/// One message file.
#[derive(Debug, Serialize, Deserialize)]
struct MessageFile {
    /// `cli`, `api` or `ui`.
    source: String,
    /// The text, redacted.
    text: String,
}

/// One message of a [`Mailbox`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Key {
    /// Its file in the run directory.
    File(PathBuf),
    /// Its row in the shared store.
    Row(MessageId),
}

/// The steering messages of one run, where its store keeps them.
pub(super) enum Mailbox {
    /// The run directory's `steering/`.
    Files(Files),
    /// The shared store's [`SteeringStore`](crate::store::SteeringStore).
    Stored {
        /// The store; its `steering()` is `Some`.
        runs: Arc<dyn RunStore>,
        /// The run.
        run_id: RunId,
    },
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mailbox::Files(files) => formatter.debug_tuple("Files").field(&files.dir).finish(),
            Mailbox::Stored { run_id, .. } => {
                formatter.debug_tuple("Stored").field(run_id).finish()
            }
        }
    }
}

impl Mailbox {
    /// The mailbox of run `run_id`: in `runs` when it keeps steering, else in `run_dir`.
    pub(super) fn of(runs: &Arc<dyn RunStore>, run_id: &RunId, run_dir: &Path) -> Mailbox {
        if runs.steering().is_some() {
            Mailbox::Stored {
                runs: Arc::clone(runs),
                run_id: run_id.clone(),
            }
        } else {
            Mailbox::Files(Files::new(run_dir))
        }
    }

    /// The run directory's mailbox.
    pub(super) fn files(run_dir: &Path) -> Mailbox {
        Mailbox::Files(Files::new(run_dir))
    }

    /// The shared store's steering, with the run.
    fn stored(&self) -> Option<(&dyn crate::store::SteeringStore, &RunId)> {
        match self {
            Mailbox::Files(_) => None,
            Mailbox::Stored { runs, run_id } => Some((runs.steering()?, run_id)),
        }
    }

    /// The shared store's notices, which tell the run of posted messages (so it need not
    /// poll often); `None` for the run directory.
    pub(super) fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<Notice>> {
        match self {
            Mailbox::Files(_) => None,
            Mailbox::Stored { runs, .. } => runs.notices(),
        }
    }

    /// Whether `notice` says a message was posted to this mailbox.
    pub(super) fn is_posted(&self, notice: &Notice) -> bool {
        matches!((self, notice), (Mailbox::Stored { run_id, .. }, Notice::Steered(id)) if id == run_id)
    }

    /// Posts `message` for the run to accept.
    pub(super) fn post(&self, message: &SteeringMessage) -> Result<Key, SteerError> {
        match (self, self.stored()) {
            (Mailbox::Files(files), _) => files.write(INBOX, message).map(Key::File),
            (_, Some((store, run_id))) => Ok(Key::Row(store.post_steering(run_id, message)?)),
            (_, None) => Err(unkept()),
        }
    }

    /// Stores a `message` the run accepted itself.
    pub(super) fn store(&self, message: &SteeringMessage) -> Result<Key, SteerError> {
        match (self, self.stored()) {
            (Mailbox::Files(files), _) => files.write(QUEUED, message).map(Key::File),
            (_, Some((store, run_id))) => Ok(Key::Row(store.queue_steering(run_id, message)?)),
            (_, None) => Err(unkept()),
        }
    }

    /// Accepts the messages other processes posted, oldest first.
    pub(super) fn accept_posted(&self) -> Vec<(SteeringMessage, Key)> {
        match (self, self.stored()) {
            (Mailbox::Files(files), _) => files
                .posted()
                .iter()
                .filter_map(|posted| files.accept(posted))
                .map(|(message, path)| (message, Key::File(path)))
                .collect(),
            (_, Some((store, run_id))) => rows(store.accept_steering(run_id), "accept"),
            (_, None) => Vec::new(),
        }
    }

    /// The accepted messages a previous process left undelivered, oldest first.
    pub(super) fn restore(&self) -> Vec<(SteeringMessage, Key)> {
        match (self, self.stored()) {
            (Mailbox::Files(files), _) => files
                .restore()
                .into_iter()
                .map(|(message, path)| (message, Key::File(path)))
                .collect(),
            (_, Some((store, run_id))) => rows(store.queued_steering(run_id), "restore"),
            (_, None) => Vec::new(),
        }
    }

    /// Marks an accepted message delivered; whether this call did (so it is delivered
    /// now, and once).
    pub(super) fn deliver(&self, key: &Key) -> bool {
        match (self, self.stored(), key) {
            (Mailbox::Files(files), _, Key::File(path)) => files.deliver(path),
            (_, Some((store, run_id)), Key::Row(id)) => match store.deliver_steering(run_id, *id) {
                Ok(delivered) => delivered,
                Err(error) => {
                    tracing::warn!(error = %crate::error_chain(&error), "cannot deliver a steering message");
                    false
                }
            },
            _ => false,
        }
    }

    /// Publishes the agent stages running now.
    pub(super) fn publish(&self, running: &[RunningAgentStage]) {
        match (self, self.stored()) {
            (Mailbox::Files(files), _) => files.publish(running),
            (_, Some((store, run_id))) => {
                if let Err(error) = store.publish_agent_stages(run_id, running) {
                    tracing::warn!(error = %crate::error_chain(&error), "cannot publish the running agent stages");
                }
            }
            (_, None) => {}
        }
    }

    /// The agent stages the run runs now; `None` when it does not run.
    pub(super) fn running(&self) -> Result<Option<Vec<RunningAgentStage>>, SteerError> {
        match (self, self.stored()) {
            (Mailbox::Files(files), _) => Ok(files.running()),
            (_, Some((store, run_id))) => Ok(store.running_agent_stages(run_id)?),
            (_, None) => Ok(None),
        }
    }

    /// Whether the run waits in the shared store's queue: a message for its next agent
    /// stage is accepted when it starts (a run of the local store waits in its server,
    /// which takes the message itself).
    fn queued(&self) -> bool {
        match self {
            Mailbox::Files(_) => false,
            Mailbox::Stored { runs, run_id } => runs
                .resolve(run_id.as_str())
                .is_ok_and(|record| record.status == crate::run_index::RunStatus::Queued),
        }
    }

    /// Whether the run still runs (a sender waits for it only then).
    fn alive(&self) -> bool {
        match self {
            Mailbox::Files(files) => RunLock::is_held(files.run_dir()),
            Mailbox::Stored { runs, run_id } => runs.is_active(run_id),
        }
    }

    /// Whether posted message `key` still waits for the run.
    fn waiting(&self, key: &Key) -> Result<bool, SteerError> {
        match (self.stored(), key) {
            (_, Key::File(path)) => Ok(path.exists()),
            (Some((store, run_id)), Key::Row(id)) => Ok(store.steering_posted(run_id, *id)?),
            (None, Key::Row(_)) => Ok(false),
        }
    }

    /// Withdraws posted message `key`: `false` when the run accepted it first.
    fn withdraw(&self, key: &Key) -> Result<bool, SteerError> {
        match (self.stored(), key) {
            (_, Key::File(path)) => match fs_err::remove_file(path) {
                Ok(()) => Ok(true),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(source) => Err(SteerError::Io {
                    action: "cannot withdraw",
                    path: path.clone(),
                    source,
                }),
            },
            (Some((store, run_id)), Key::Row(id)) => Ok(store.withdraw_steering(run_id, *id)?),
            (None, Key::Row(_)) => Ok(false),
        }
    }
}

/// The messages a store call returned, or none (the failure logged).
fn rows(
    found: Result<Vec<(MessageId, SteeringMessage)>, crate::store::StoreError>,
    what: &str,
) -> Vec<(SteeringMessage, Key)> {
    match found {
        Ok(rows) => rows
            .into_iter()
            .map(|(id, message)| (message, Key::Row(id)))
            .collect(),
        Err(error) => {
            tracing::warn!(error = %crate::error_chain(&error), "cannot {what} steering messages");
            Vec::new()
        }
    }
}

/// A store that answered `steering()` once and not again (never: it is fixed).
fn unkept() -> SteerError {
    SteerError::Store(crate::store::StoreError::backend(
        "cannot reach the steering messages",
        std::io::Error::other("the store keeps no steering messages"),
    ))
}

/// The `steering/` directory of one run.
#[derive(Debug)]
pub(super) struct Files {
    dir: PathBuf,
}

impl Files {
    fn new(run_dir: &Path) -> Files {
        Files {
            dir: run_dir.join(DIR),
        }
    }

    fn run_dir(&self) -> &Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    /// The agent stages the run runs now, if its process holds the run lock.
    fn running(&self) -> Option<Vec<RunningAgentStage>> {
        running_agent_stages(self.run_dir())
    }

    fn write(&self, folder: &str, message: &SteeringMessage) -> Result<PathBuf, SteerError> {
        let directory = self.dir.join(folder);
        let path = directory.join(file_name());
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| SteerError::Io {
                action,
                path,
                source,
            }
        };
        fs_err::create_dir_all(&directory).map_err(io("cannot create", &directory))?;
        let file = MessageFile {
            source: message.source.as_str().to_owned(),
            text: message.text.clone(),
        };
        write_json_atomic(&path, &file).map_err(io("cannot write", &path))?;
        Ok(path)
    }

    /// The messages in `inbox/`, oldest first.
    fn posted(&self) -> Vec<PathBuf> {
        messages_in(&self.dir.join(INBOX))
    }

    /// Moves a posted message to `queued/` and reads it; `None` when the sender
    /// withdrew it first or it is no message (then it is set aside and logged).
    fn accept(&self, posted: &Path) -> Option<(SteeringMessage, PathBuf)> {
        let name = posted.file_name()?;
        let queued = self.dir.join(QUEUED).join(name);
        fs_err::create_dir_all(self.dir.join(QUEUED)).ok()?;
        if let Err(error) = fs_err::rename(posted, &queued) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%error, "cannot accept a steering message");
            }
            return None;
        }
        match read(&queued) {
            Some(message) => Some((message, queued)),
            None => {
                let _ = fs_err::rename(&queued, queued.with_extension("invalid"));
                tracing::warn!(path = %posted.display(), "ignored a steering file that is no message");
                None
            }
        }
    }

    /// The accepted messages a previous process left undelivered, oldest first.
    fn restore(&self) -> Vec<(SteeringMessage, PathBuf)> {
        messages_in(&self.dir.join(QUEUED))
            .into_iter()
            .filter_map(|path| read(&path).map(|message| (message, path)))
            .collect()
    }

    /// Moves an accepted message to `delivered/`; whether this call did (so it is
    /// delivered now, and once).
    fn deliver(&self, queued: &Path) -> bool {
        let Some(name) = queued.file_name() else {
            return false;
        };
        let directory = self.dir.join(DELIVERED);
        if let Err(error) = fs_err::create_dir_all(&directory) {
            tracing::warn!(%error, "cannot deliver a steering message");
            return false;
        }
        match fs_err::rename(queued, directory.join(name)) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "cannot deliver a steering message");
                false
            }
        }
    }

    /// Writes `active.json` listing `running`, or removes it when none runs.
    fn publish(&self, running: &[RunningAgentStage]) {
        let path = self.dir.join(ACTIVE);
        let result = if running.is_empty() {
            match fs_err::remove_file(&path) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        } else {
            let active = Active {
                stages: running.to_vec(),
            };
            fs_err::create_dir_all(&self.dir).and_then(|()| write_json_atomic(&path, &active))
        };
        if let Err(error) = result {
            tracing::warn!(%error, "cannot publish the running agent stages");
        }
    }
}

/// The agent stages the run in `run_dir` runs now, if its process holds the run lock;
/// `None` when the run does not run.
pub fn running_agent_stages(run_dir: &Path) -> Option<Vec<RunningAgentStage>> {
    if !RunLock::is_held(run_dir) {
        return None;
    }
    let text = fs_err::read_to_string(run_dir.join(DIR).join(ACTIVE)).unwrap_or_default();
    Some(
        serde_json::from_str::<Active>(&text)
            .map(|active| active.stages)
            .unwrap_or_default(),
    )
}

/// Sends `text` to run `run_id` of `runs` that another process executes (`fabro steer`,
/// a server steering a run it does not execute): through the store when it keeps
/// steering (a worker, SPEC 18.2), else through `run_dir`. See [`steer_posted`].
pub fn steer_elsewhere(
    runs: &Arc<dyn RunStore>,
    run_id: &RunId,
    run_dir: &Path,
    text: &str,
    source: SteeringSource,
    when: WhenNoAgent,
    patience: Duration,
) -> Result<Steered, SteerError> {
    let mailbox = Mailbox::of(runs, run_id, run_dir);
    steer_posted(&mailbox, run_id.as_str(), text, source, when, patience)
}

/// The agent stages run `run_id` of `runs` runs now, wherever its store keeps them;
/// `None` when the run does not run (or the store cannot say).
pub fn agent_stages_elsewhere(
    runs: &Arc<dyn RunStore>,
    run_id: &RunId,
    run_dir: &Path,
) -> Option<Vec<RunningAgentStage>> {
    Mailbox::of(runs, run_id, run_dir)
        .running()
        .inspect_err(|error| tracing::warn!(error = %crate::error_chain(error), "cannot read the running agent stages"))
        .ok()
        .flatten()
}

/// Checks that an agent stage that takes steering runs (or, `when`, that the run
/// runs), posts the message and waits at most `patience` for the run to accept it.
fn steer_posted(
    mailbox: &Mailbox,
    run_id: &str,
    text: &str,
    source: SteeringSource,
    when: WhenNoAgent,
    patience: Duration,
) -> Result<Steered, SteerError> {
    let message = message(text, source)?;
    let not_running = || match when {
        WhenNoAgent::Refuse => SteerError::NoAgentStage {
            run_id: run_id.to_owned(),
        },
        WhenNoAgent::WaitForNext => SteerError::NotRunning {
            run_id: run_id.to_owned(),
        },
    };
    let Some(running) = mailbox.running()? else {
        if when == WhenNoAgent::WaitForNext && mailbox.queued() {
            // Accepted by the worker that claims the run, before its first stage.
            mailbox.post(&message)?;
            return Ok(Steered { node_id: None });
        }
        return Err(not_running());
    };
    let node_id = target(run_id, &running, when)?;
    let key = mailbox.post(&message)?;
    let deadline = Instant::now() + patience;
    loop {
        if !mailbox.waiting(&key)? {
            return Ok(Steered { node_id });
        }
        let alive = mailbox.alive();
        if !alive || Instant::now() >= deadline {
            // Withdraw the message, unless the run took it meanwhile.
            return match mailbox.withdraw(&key)? {
                false => Ok(Steered { node_id }),
                true if alive => Err(SteerError::NotTaken {
                    run_id: run_id.to_owned(),
                    waited: patience,
                }),
                true => Err(not_running()),
            };
        }
        std::thread::sleep(POLL);
    }
}

/// The `.json` files of `directory` (not the temporary files of a write in progress),
/// sorted by name.
fn messages_in(directory: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs_err::read_dir(directory) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
                && !path
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

fn read(path: &Path) -> Option<SteeringMessage> {
    let file: MessageFile = serde_json::from_slice(&fs_err::read(path).ok()?).ok()?;
    Some(SteeringMessage {
        source: SteeringSource::parse(&file.source)?,
        text: file.text,
    })
}

/// A name that sorts in posting order and is unique across processes.
fn file_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!(
        "{nanos:024}-{:010}-{:06}.json",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}
