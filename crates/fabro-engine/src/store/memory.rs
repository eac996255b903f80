//! [`MemoryRunStore`]: every record of every run in memory, behind one mutex. The test
//! double of [`RunStore`], and the shape a database-backed store takes: one row per run,
//! checkpoints and events appended to it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::FiledAnswer;
use super::{
    EventReader, Notice, OpenedEvents, Opening, RecordParts, RunLease, RunRecords, RunStore,
    StageCopy, StoreError, StoredEvent, StoredStage, StoredWorkflow,
};
use crate::checkpoint::{CheckpointError, CheckpointLog};
use crate::config::RunConfig;
use crate::event::{read_events, EventEnvelope, EventLog};
use crate::id::RunId;
use crate::interviewer::Question;
use crate::journal::ChangeHint;
use crate::record::{Checkpoint, CheckpointView, Manifest, PendingRewind};
use crate::run_index::{RunRecord, RunStatus};
use crate::run_stages::StageDir;

/// Runs kept in memory. Clones share the runs, and each tells the others' readers what
/// it did through [`RunStore::notices`], as processes on a shared store do.
#[derive(Debug, Clone, Default)]
pub struct MemoryRunStore {
    runs: Arc<Mutex<BTreeMap<RunId, StoredRun>>>,
    notices: NoticeBoard,
}

/// The sender of a [`MemoryRunStore`]'s notices.
#[derive(Debug, Clone)]
struct NoticeBoard(tokio::sync::broadcast::Sender<Notice>);

impl Default for NoticeBoard {
    fn default() -> NoticeBoard {
        NoticeBoard(tokio::sync::broadcast::channel(1024).0)
    }
}

/// One run's records.
#[derive(Debug, Clone, Default)]
pub struct StoredRun {
    /// `graph.fabro`.
    pub graph: Option<String>,
    /// The stored child workflows, `(name, text)`.
    pub children: Vec<(String, String)>,
    /// `config.json`, as JSON.
    pub config: Option<serde_json::Value>,
    /// `manifest.json`.
    pub manifest: Option<Manifest>,
    /// Every checkpoint written, oldest first.
    pub checkpoints: Vec<Checkpoint>,
    /// `events.jsonl`.
    pub events: Vec<u8>,
    /// Whether an execution holds the lock.
    pub locked: bool,
    /// Fault injection for tests: the number of event appends that still succeed before
    /// every further one fails as a full disk would (`None`: never).
    pub event_appends_left: Option<u64>,
    /// The scratch directory given at start.
    pub run_dir: PathBuf,
    /// The indexed status and end time.
    pub status: Option<(RunStatus, Option<String>)>,
    /// A rewind begun and not finished.
    pub pending_rewind: Option<PendingRewind>,
    /// The stages as the engine last saved them, one per rank, by rank.
    pub stages: Vec<StageCopy>,
    /// The open human question.
    pub pending_question: Option<Question>,
    /// The answers filed and not yet taken, by question id.
    pub filed_answers: BTreeMap<String, FiledAnswer>,
    /// Whether a cancel was requested since the run last started.
    pub cancel_requested: bool,
    /// The stages each rewind moved away, `(k, stages)` by `k`.
    pub rewound: Vec<(u32, Vec<StageCopy>)>,
}

impl MemoryRunStore {
    /// An empty store.
    pub fn new() -> MemoryRunStore {
        MemoryRunStore::default()
    }

    /// A copy of run `run_id`'s records, for tests and inspection.
    pub fn run(&self, run_id: &RunId) -> Option<StoredRun> {
        self.runs().get(run_id).cloned()
    }

    fn runs(&self) -> MutexGuard<'_, BTreeMap<RunId, StoredRun>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fault injection for tests: after `appends` more events, every append to the
    /// run's event log fails as on a full disk (`None` lifts the fault).
    pub fn fail_event_appends_after(&self, run_id: &RunId, appends: Option<u64>) {
        self.with_run(run_id, |run| run.event_appends_left = appends);
    }

    fn with_run<T>(&self, run_id: &RunId, change: impl FnOnce(&mut StoredRun) -> T) -> T {
        change(self.runs().entry(run_id.clone()).or_default())
    }
}

/// The lock of a run in a [`MemoryRunStore`].
#[derive(Debug)]
struct MemoryLease {
    store: MemoryRunStore,
    run_id: RunId,
}

impl RunLease for MemoryLease {}

impl Drop for MemoryLease {
    fn drop(&mut self) {
        self.store.with_run(&self.run_id, |run| run.locked = false);
    }
}

/// Checkpoints appended to a run of a [`MemoryRunStore`].
#[derive(Debug)]
struct MemoryCheckpointLog {
    store: MemoryRunStore,
    run_id: RunId,
    last: Option<Checkpoint>,
    bytes: Vec<u8>,
}

impl CheckpointLog for MemoryCheckpointLog {
    fn write(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        _hint: &ChangeHint<'_>,
    ) -> Result<&[u8], CheckpointError> {
        let io = |error: serde_json::Error| CheckpointError::File {
            path: PathBuf::from(format!("memory:{}/checkpoint.json", self.run_id)),
            source: std::io::Error::from(error),
        };
        self.bytes = serde_json::to_vec(checkpoint).map_err(io)?;
        let owned: Checkpoint = serde_json::from_slice(&self.bytes).map_err(io)?;
        self.bytes.push(b'\n');
        self.store
            .with_run(&self.run_id, |run| run.checkpoints.push(owned.clone()));
        self.last = Some(owned);
        Ok(&self.bytes)
    }

    fn last(&self) -> Option<&Checkpoint> {
        self.last.as_ref()
    }
}

/// Events appended to a run of a [`MemoryRunStore`].
struct MemoryEventLog {
    store: MemoryRunStore,
    run_id: RunId,
}

impl EventLog for MemoryEventLog {
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.store.with_run(&self.run_id, |run| {
            if let Some(left) = &mut run.event_appends_left {
                if *left == 0 {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::ENOSPC));
                }
                *left -= 1;
            }
            run.events.extend_from_slice(line);
            Ok(())
        })?;
        // No receiver is no error: nobody follows the run.
        let _ = self
            .store
            .notices
            .0
            .send(Notice::Appended(self.run_id.clone()));
        Ok(())
    }
}

/// Reads the events of a run of a [`MemoryRunStore`] from a byte offset of its log.
struct MemoryEventReader {
    store: MemoryRunStore,
    run_id: RunId,
    offset: usize,
    after: u64,
}

impl EventReader for MemoryEventReader {
    fn read_new(&mut self) -> Result<Vec<StoredEvent>, StoreError> {
        let runs = self.store.runs();
        let Some(run) = runs.get(&self.run_id) else {
            return Ok(Vec::new());
        };
        // A log that shrank (a new run's, a resume's repair) is read from its end.
        self.offset = self.offset.min(run.events.len());
        let appended = &run.events[self.offset..];
        let Some(end) = appended.iter().rposition(|&byte| byte == b'\n') else {
            return Ok(Vec::new());
        };
        let complete = &appended[..=end];
        self.offset += complete.len();
        let after = self.after;
        Ok(complete
            .split(|&byte| byte == b'\n')
            .filter_map(StoredEvent::parse)
            .filter(|event| event.id > after)
            .collect())
    }
}

impl RunStore for MemoryRunStore {
    fn lock(&self, run_id: &RunId) -> Result<Box<dyn RunLease>, StoreError> {
        let taken = self.with_run(run_id, |run| !std::mem::replace(&mut run.locked, true));
        if !taken {
            return Err(StoreError::Locked {
                run_id: run_id.clone(),
            });
        }
        Ok(Box::new(MemoryLease {
            store: self.clone(),
            run_id: run_id.clone(),
        }))
    }

    fn is_active(&self, run_id: &RunId) -> bool {
        self.runs().get(run_id).is_some_and(|run| run.locked)
    }

    fn write_records(&self, run_id: &RunId, records: &RunRecords<'_>) -> Result<(), StoreError> {
        let config = serde_json::to_value(records.config).map_err(|error| StoreError::Io {
            action: "cannot serialise",
            path: PathBuf::from(format!("memory:{run_id}/config.json")),
            source: std::io::Error::from(error),
        })?;
        self.with_run(run_id, |run| {
            run.graph = Some(records.graph.to_owned());
            run.children = records.children.to_vec();
            run.config = Some(config);
            run.manifest = Some(records.manifest.clone());
        });
        Ok(())
    }

    fn read_manifest(&self, run_id: &RunId) -> Result<Manifest, StoreError> {
        self.runs()
            .get(run_id)
            .and_then(|run| run.manifest.clone())
            .ok_or_else(|| StoreError::Missing {
                run_id: run_id.clone(),
                record: "manifest",
            })
    }

    fn read_config(&self, run_id: &RunId) -> Result<RunConfig, StoreError> {
        let config = self
            .runs()
            .get(run_id)
            .and_then(|run| run.config.clone())
            .ok_or_else(|| StoreError::Missing {
                run_id: run_id.clone(),
                record: "config",
            })?;
        serde_json::from_value(config).map_err(|source| StoreError::Invalid {
            path: PathBuf::from(format!("memory:{run_id}/config.json")),
            source,
        })
    }

    fn read_workflow(&self, run_id: &RunId) -> Result<StoredWorkflow, StoreError> {
        let runs = self.runs();
        let run = runs.get(run_id);
        let graph = run
            .and_then(|run| run.graph.clone())
            .ok_or_else(|| StoreError::Missing {
                run_id: run_id.clone(),
                record: "graph",
            })?;
        let mut children = run.map(|run| run.children.clone()).unwrap_or_default();
        children.sort();
        Ok(StoredWorkflow { graph, children })
    }

    fn open_checkpoints(
        &self,
        run_id: &RunId,
        opening: Opening,
    ) -> Result<Box<dyn CheckpointLog>, StoreError> {
        let last = match opening {
            Opening::New => None,
            Opening::Resume => self.load_checkpoint(run_id)?,
        };
        Ok(Box::new(MemoryCheckpointLog {
            store: self.clone(),
            run_id: run_id.clone(),
            last,
            bytes: Vec::new(),
        }))
    }

    fn load_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self
            .runs()
            .get(run_id)
            .and_then(|run| run.checkpoints.last().cloned()))
    }

    /// Nothing to do: readers read the log itself.
    fn publish_checkpoint(
        &self,
        _run_id: &RunId,
        _checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn replay_checkpoints(
        &self,
        run_id: &RunId,
        visit: &mut dyn FnMut(&Checkpoint),
    ) -> Result<(), StoreError> {
        let checkpoints = self
            .runs()
            .get(run_id)
            .map(|run| run.checkpoints.clone())
            .unwrap_or_default();
        checkpoints.iter().for_each(visit);
        Ok(())
    }

    fn pending_rewind(&self, run_id: &RunId) -> Result<Option<PendingRewind>, StoreError> {
        Ok(self
            .runs()
            .get(run_id)
            .and_then(|run| run.pending_rewind.clone()))
    }

    fn set_pending_rewind(
        &self,
        run_id: &RunId,
        rewind: Option<&PendingRewind>,
    ) -> Result<(), StoreError> {
        self.with_run(run_id, |run| run.pending_rewind = rewind.cloned());
        Ok(())
    }

    fn open_events(&self, run_id: &RunId, opening: Opening) -> Result<OpenedEvents, StoreError> {
        let next_id = match opening {
            Opening::New => {
                self.with_run(run_id, |run| run.events.clear());
                1
            }
            Opening::Resume => self.with_run(run_id, |run| {
                // A torn last line (no newline) is cut off, as on disk.
                let keep = run
                    .events
                    .iter()
                    .rposition(|&byte| byte == b'\n')
                    .map_or(0, |end| end + 1);
                run.events.truncate(keep);
                read_events(&String::from_utf8_lossy(&run.events))
                    .last()
                    .map_or(1, |event| event.id + 1)
            }),
        };
        Ok(OpenedEvents {
            log: Box::new(MemoryEventLog {
                store: self.clone(),
                run_id: run_id.clone(),
            }),
            next_id,
        })
    }

    fn read_events(&self, run_id: &RunId, from_id: u64) -> Result<Vec<EventEnvelope>, StoreError> {
        let text = self
            .runs()
            .get(run_id)
            .map(|run| String::from_utf8_lossy(&run.events).into_owned())
            .unwrap_or_default();
        let mut events = read_events(&text);
        events.retain(|event| event.id >= from_id);
        Ok(events)
    }

    fn register_start(&self, manifest: &Manifest, run_dir: &Path) -> Result<(), StoreError> {
        let run_id = RunId::from(manifest.run_id.as_str());
        self.with_run(&run_id, |run| {
            run.run_dir = run_dir.to_path_buf();
            run.status = Some((RunStatus::Running, None));
            run.cancel_requested = false;
        });
        Ok(())
    }

    fn register_end(&self, run_id: &RunId, status: RunStatus) -> Result<(), StoreError> {
        let finished_at = crate::timestamp::now_rfc3339();
        self.with_run(run_id, |run| run.status = Some((status, Some(finished_at))));
        Ok(())
    }

    /// Runs with a manifest, newest first; a `running` run nobody holds is
    /// [`RunStatus::Interrupted`].
    fn list_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let mut records: Vec<RunRecord> = self
            .runs()
            .iter()
            .filter_map(|(run_id, run)| {
                let manifest = run.manifest.as_ref()?;
                let (status, finished_at) =
                    run.status.clone().unwrap_or((RunStatus::Running, None));
                let status = match status {
                    RunStatus::Running if !run.locked => RunStatus::Interrupted,
                    status => status,
                };
                Some(RunRecord {
                    run_id: run_id.as_str().to_owned(),
                    workflow_name: manifest.workflow_name.clone(),
                    workflow_path: manifest.workflow_path.clone(),
                    goal: manifest.goal.clone(),
                    status,
                    started_at: manifest.started_at.clone(),
                    finished_at,
                    run_dir: run.run_dir.clone(),
                    parent_run_id: manifest.parent_run_id.clone(),
                    reason: None,
                    worker: None,
                })
            })
            .collect();
        records.sort_by(|a, b| (&b.started_at, &b.run_id).cmp(&(&a.started_at, &a.run_id)));
        Ok(records)
    }

    fn record_parts(&self, record: &RunRecord) -> Result<RecordParts, StoreError> {
        super::stored_record_parts(self, record)
    }

    fn stages(&self, run_id: &RunId) -> Result<Vec<StoredStage>, StoreError> {
        Ok(self
            .runs()
            .get(run_id)
            .map(|run| run.stages.iter().map(|copy| copy.stage.clone()).collect())
            .unwrap_or_default())
    }

    fn stage_file(
        &self,
        run_id: &RunId,
        rank: u32,
        name: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.runs().get(run_id).and_then(|run| {
            let copy = run.stages.iter().find(|copy| copy.stage.rank == rank)?;
            copy.contents
                .iter()
                .find(|(file, _)| file == name)
                .map(|(_, bytes)| bytes.clone())
        }))
    }

    /// Copies the stage's row and files, replacing the stage saved under its rank before
    /// (the same stage, or one a resume runs again).
    fn save_stage(&self, run_id: &RunId, stage: &StageDir) -> Result<(), StoreError> {
        let copy = StageCopy::read(stage)?;
        self.with_run(run_id, |run| {
            match run
                .stages
                .binary_search_by_key(&copy.stage.rank, |stored| stored.stage.rank)
            {
                Ok(position) => run.stages[position] = copy,
                Err(position) => run.stages.insert(position, copy),
            }
        });
        Ok(())
    }

    fn event_reader(&self, run_id: &RunId, after: u64) -> Box<dyn EventReader> {
        Box::new(MemoryEventReader {
            store: self.clone(),
            run_id: run_id.clone(),
            offset: 0,
            after,
        })
    }

    fn event_tail(&self, run_id: &RunId) -> Box<dyn EventReader> {
        let offset = self
            .runs()
            .get(run_id)
            .and_then(|run| run.events.iter().rposition(|&byte| byte == b'\n'))
            .map_or(0, |end| end + 1);
        Box::new(MemoryEventReader {
            store: self.clone(),
            run_id: run_id.clone(),
            offset,
            after: 0,
        })
    }

    fn set_pending_question(
        &self,
        run_id: &RunId,
        question: Option<&Question>,
    ) -> Result<(), StoreError> {
        self.with_run(run_id, |run| run.pending_question = question.cloned());
        Ok(())
    }

    fn pending_question(&self, run_id: &RunId) -> Result<Option<Question>, StoreError> {
        Ok(self
            .runs()
            .get(run_id)
            .filter(|run| run.locked)
            .and_then(|run| run.pending_question.clone()))
    }

    fn file_answer(&self, run_id: &RunId, answer: &FiledAnswer) -> Result<(), StoreError> {
        self.with_run(run_id, |run| {
            if run.filed_answers.contains_key(&answer.question_id) {
                return Err(StoreError::AnswerFiled {
                    run_id: run_id.clone(),
                    question_id: answer.question_id.clone(),
                });
            }
            run.filed_answers
                .insert(answer.question_id.clone(), answer.clone());
            Ok(())
        })
    }

    fn take_answer(
        &self,
        run_id: &RunId,
        question_id: &str,
    ) -> Result<Option<FiledAnswer>, StoreError> {
        Ok(self.with_run(run_id, |run| run.filed_answers.remove(question_id)))
    }

    fn withdraw_answer(&self, run_id: &RunId, question_id: &str) -> Result<bool, StoreError> {
        Ok(self.with_run(run_id, |run| {
            run.filed_answers.remove(question_id).is_some()
        }))
    }

    fn answer_waiting(&self, run_id: &RunId, question_id: &str) -> Result<bool, StoreError> {
        Ok(self
            .runs()
            .get(run_id)
            .is_some_and(|run| run.filed_answers.contains_key(question_id)))
    }

    fn rewind_stages(&self, run_id: &RunId, k: u32, after: u32) -> Result<(), StoreError> {
        self.with_run(run_id, |run| {
            let split = run.stages.partition_point(|copy| copy.stage.rank <= after);
            let moved = run.stages.split_off(split);
            if moved.is_empty() {
                return;
            }
            match run.rewound.binary_search_by_key(&k, |(number, _)| *number) {
                Ok(position) => run.rewound[position].1.extend(moved),
                Err(position) => run.rewound.insert(position, (k, moved)),
            }
        });
        Ok(())
    }

    fn rewound_stages(&self, run_id: &RunId) -> Result<Vec<(u32, Vec<StoredStage>)>, StoreError> {
        Ok(self
            .runs()
            .get(run_id)
            .map(|run| {
                run.rewound
                    .iter()
                    .map(|(k, copies)| (*k, copies.iter().map(|copy| copy.stage.clone()).collect()))
                    .collect()
            })
            .unwrap_or_default())
    }

    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<Notice>> {
        Some(self.notices.0.subscribe())
    }

    fn request_cancel(&self, run_id: &RunId) -> Result<bool, StoreError> {
        let known = self.runs().get_mut(run_id).map(|run| {
            run.cancel_requested = true;
        });
        if known.is_some() {
            let _ = self.notices.0.send(Notice::CancelRequested(run_id.clone()));
        }
        Ok(known.is_some())
    }

    fn cancel_requested(&self, run_id: &RunId) -> Result<bool, StoreError> {
        Ok(self
            .runs()
            .get(run_id)
            .is_some_and(|run| run.cancel_requested))
    }

    fn last_event_id(&self, run_id: &RunId) -> u64 {
        self.event_reader(run_id, 0)
            .read_new()
            .ok()
            .and_then(|events| events.last().map(|event| event.id))
            .unwrap_or(0)
    }
}
