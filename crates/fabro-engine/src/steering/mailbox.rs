//! The steering queue in the run directory, shared by the run and other processes.
//!
//! The protocol, all within `{run_dir}/steering/`:
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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{message, target, SteerError, Steered, SteeringMessage, SteeringSource, WhenNoAgent};
use crate::run_dir::write_json_atomic;
use crate::run_index::RunLock;

const DIR: &str = "steering";
const ACTIVE: &str = "active.json";
const INBOX: &str = "inbox";
const QUEUED: &str = "queued";
const DELIVERED: &str = "delivered";

/// How often a sender looks whether the run accepted its message.
const POLL: Duration = Duration::from_millis(20);

/// An agent stage that runs, as `active.json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningAgentStage {
    /// The stage's node.
    pub node_id: String,
    /// `api`, `acp` or `cli`.
    pub backend: String,
}

impl RunningAgentStage {
    /// Whether its agent takes steering (every backend but `cli`).
    pub fn steerable(&self) -> bool {
        self.backend != "cli"
    }
}

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

/// The `steering/` directory of one run.
#[derive(Debug)]
pub(super) struct Mailbox {
    dir: PathBuf,
}

impl Mailbox {
    pub(super) fn new(run_dir: &Path) -> Mailbox {
        Mailbox {
            dir: run_dir.join(DIR),
        }
    }

    /// Writes `message` to `inbox/`, for the run to accept.
    pub(super) fn post(&self, message: &SteeringMessage) -> Result<PathBuf, SteerError> {
        self.write(INBOX, message)
    }

    /// Writes an accepted `message` to `queued/`.
    pub(super) fn store(&self, message: &SteeringMessage) -> Result<PathBuf, SteerError> {
        self.write(QUEUED, message)
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
    pub(super) fn posted(&self) -> Vec<PathBuf> {
        messages_in(&self.dir.join(INBOX))
    }

    /// Moves a posted message to `queued/` and reads it; `None` when the sender
    /// withdrew it first or it is no message (then it is set aside and logged).
    pub(super) fn accept(&self, posted: &Path) -> Option<(SteeringMessage, PathBuf)> {
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
    pub(super) fn restore(&self) -> Vec<(SteeringMessage, PathBuf)> {
        messages_in(&self.dir.join(QUEUED))
            .into_iter()
            .filter_map(|path| read(&path).map(|message| (message, path)))
            .collect()
    }

    /// Moves an accepted message to `delivered/`; whether this call did (so it is
    /// delivered now, and once).
    pub(super) fn deliver(&self, queued: &Path) -> bool {
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
    pub(super) fn publish(&self, running: &[RunningAgentStage]) {
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

/// Sends `text` to the run in `run_dir` from another process (`fabro steer`, or a
/// server for a run it does not execute): checks that an agent stage that takes
/// steering runs (or, `when`, that the run runs), posts the message and waits at most
/// `patience` for the run to accept it (it looks every 100 ms).
pub fn steer_run_dir(
    run_id: &str,
    run_dir: &Path,
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
    let running = running_agent_stages(run_dir).ok_or_else(not_running)?;
    let node_id = target(run_id, &running, when)?;
    let path = Mailbox::new(run_dir).post(&message)?;
    let deadline = Instant::now() + patience;
    loop {
        if !path.exists() {
            return Ok(Steered { node_id });
        }
        let alive = RunLock::is_held(run_dir);
        if !alive || Instant::now() >= deadline {
            // Withdraw the message, unless the run took it meanwhile.
            return match fs_err::remove_file(&path) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    Ok(Steered { node_id })
                }
                Err(source) => Err(SteerError::Io {
                    action: "cannot withdraw",
                    path,
                    source,
                }),
                Ok(()) if alive => Err(SteerError::NotTaken {
                    run_id: run_id.to_owned(),
                    waited: patience,
                }),
                Ok(()) => Err(not_running()),
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
