//! [`FsRunStore`]: a run's records as files in its run directory and the index
//! `runs.db` under the storage root (SPEC 11).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::answer_files;
use super::event_cursor::EventsAfter;
use super::FiledAnswer;
use super::{
    EventCursor, EventReader, FileStamp, OpenedEvents, Opening, RecordParts, RecordStamps,
    RunLease, RunRecords, RunStore, StoreError, StoredStage, StoredWorkflow, STAGE_FILES,
};
use crate::checkpoint::{CheckpointLog, FsCheckpointLog};
use crate::config::RunConfig;
use crate::event::{EventEnvelope, FsEventLog};
use crate::id::RunId;
use crate::interviewer::Question;
use crate::record::{Checkpoint, Manifest, PendingRewind};
use crate::run_dir::{write_atomic, write_json_atomic, RunPaths, REWIND_FILE};
use crate::run_index::{
    Listing, RunCatalog, RunIndex, RunIndexError, RunLock, RunRecord, RunStatus, INDEX_FILE,
};
use crate::run_stages::{list_stages, StageDir, StageLookupError};

/// The directory of stored child workflows inside a run directory.
pub(crate) const CHILDREN_DIR: &str = "children";

/// The run store of a storage root (`$FABRO_HOME`): run `R` lives in `scratch/R/`.
/// Clones share the [`RunCatalog`] that answers [`RunStore::listing`] and
/// [`RunStore::resolve`] (opened on first use).
#[derive(Clone)]
pub struct FsRunStore {
    root: PathBuf,
    catalog: Arc<OnceLock<RunCatalog>>,
    /// The index written by [`RunStore::register_start`] and
    /// [`RunStore::register_end`], kept open between them (opening `runs.db` costs
    /// more than the write), with the inode of the file it opened.
    index: Arc<Mutex<Option<KeptIndex>>>,
}

/// An open index and the inode of the file it opened.
type KeptIndex = (RunIndex, Option<u64>);

impl std::fmt::Debug for FsRunStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("FsRunStore")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl FsRunStore {
    /// The store under `root`.
    pub fn new(root: &Path) -> FsRunStore {
        FsRunStore {
            root: root.to_path_buf(),
            catalog: Arc::default(),
            index: Arc::default(),
        }
    }

    /// Runs `write` on the kept index: opened when none is kept or `runs.db` was
    /// replaced or removed since, and let go when `write` fails (the next call opens the
    /// file again, which repairs a damaged one).
    fn write_index(
        &self,
        write: impl FnOnce(&mut RunIndex) -> Result<(), RunIndexError>,
    ) -> Result<(), StoreError> {
        let inode = || {
            std::fs::metadata(self.root.join(INDEX_FILE))
                .ok()
                .map(|metadata| std::os::unix::fs::MetadataExt::ino(&metadata))
        };
        let mut kept = self
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = inode();
        if current.is_none() || kept.as_ref().is_some_and(|(_, opened)| *opened != current) {
            *kept = None;
        }
        let (index, _) = match kept.as_mut() {
            Some(entry) => entry,
            None => kept.insert((RunIndex::open(&self.root)?, inode())),
        };
        let written = write(index);
        if written.is_err() {
            *kept = None;
        }
        Ok(written?)
    }

    /// The catalog of the root, kept open with a snapshot of its listing.
    fn catalog(&self) -> &RunCatalog {
        self.catalog.get_or_init(|| RunCatalog::new(&self.root))
    }

    /// The paths of run `run_id`.
    pub fn paths(&self, run_id: &RunId) -> RunPaths {
        RunPaths::new(&self.root, run_id.as_str())
    }
}

/// Writes `graph.fabro` and the child workflows (SPEC 4.1: recursively, as the stored
/// graphs name them) into the run directory of `paths`.
pub(super) fn write_workflow(
    paths: &RunPaths,
    graph: &str,
    children: &[(String, String)],
) -> Result<(), StoreError> {
    let path = paths.graph();
    fs_err::write(&path, graph.as_bytes()).map_err(io("cannot write", &path))?;
    for (name, text) in children {
        let path = paths.run_dir().join(CHILDREN_DIR).join(name);
        if let Some(parent) = path.parent() {
            fs_err::create_dir_all(parent).map_err(io("cannot create", parent))?;
        }
        fs_err::write(&path, text.as_bytes()).map_err(io("cannot write", &path))?;
    }
    Ok(())
}

/// Collects the files under `directory` as `(path relative to base, text)`.
fn read_children(
    base: &Path,
    directory: &Path,
    children: &mut Vec<(String, String)>,
) -> Result<(), StoreError> {
    let entries = fs_err::read_dir(directory).map_err(io("cannot read", directory))?;
    for entry in entries {
        let path = entry.map_err(io("cannot read", directory))?.path();
        if path.is_dir() {
            read_children(base, &path, children)?;
        } else {
            let text = fs_err::read_to_string(&path).map_err(io("cannot read", &path))?;
            let name = path.strip_prefix(base).unwrap_or(&path);
            children.push((name.to_string_lossy().into_owned(), text));
        }
    }
    Ok(())
}

/// `action` on `path` failed.
fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

impl RunStore for FsRunStore {
    fn lock(&self, run_id: &RunId) -> Result<Box<dyn RunLease>, StoreError> {
        // A live holder is `RunIndexError::Locked`, with the holder's pid.
        Ok(Box::new(RunLock::acquire(self.paths(run_id).run_dir())?))
    }

    fn is_active(&self, run_id: &RunId) -> bool {
        RunLock::is_held(self.paths(run_id).run_dir())
    }

    fn write_records(&self, run_id: &RunId, records: &RunRecords<'_>) -> Result<(), StoreError> {
        let paths = self.paths(run_id);
        write_workflow(&paths, records.graph, records.children)?;
        write_json_atomic(&paths.config(), records.config)
            .map_err(io("cannot write", &paths.config()))?;
        write_json_atomic(&paths.manifest(), records.manifest)
            .map_err(io("cannot write", &paths.manifest()))
    }

    fn read_manifest(&self, run_id: &RunId) -> Result<Manifest, StoreError> {
        Ok(crate::run_index::read_manifest(
            self.paths(run_id).run_dir(),
        )?)
    }

    fn read_workflow(&self, run_id: &RunId) -> Result<StoredWorkflow, StoreError> {
        let paths = self.paths(run_id);
        let graph = paths.graph();
        let graph = fs_err::read_to_string(&graph).map_err(io("cannot read", &graph))?;
        let mut children = Vec::new();
        let directory = paths.run_dir().join(CHILDREN_DIR);
        if directory.is_dir() {
            read_children(&directory, &directory, &mut children)?;
        }
        children.sort();
        Ok(StoredWorkflow { graph, children })
    }

    fn open_checkpoints(
        &self,
        run_id: &RunId,
        opening: Opening,
    ) -> Result<Box<dyn CheckpointLog>, StoreError> {
        let paths = self.paths(run_id);
        Ok(match opening {
            Opening::New => Box::new(FsCheckpointLog::new(paths.run_dir())),
            Opening::Resume => Box::new(FsCheckpointLog::resume(paths.run_dir())?),
        })
    }

    fn read_config(&self, run_id: &RunId) -> Result<RunConfig, StoreError> {
        let path = self.paths(run_id).config();
        let bytes = fs_err::read(&path).map_err(io("cannot read run configuration", &path))?;
        serde_json::from_slice(&bytes).map_err(|source| StoreError::Invalid { path, source })
    }

    fn load_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError> {
        let paths = self.paths(run_id);
        let manifest = crate::run_index::read_manifest(paths.run_dir()).ok();
        Ok(super::git_checkpoint::newest(
            manifest.as_ref(),
            paths.run_dir(),
            run_id.as_str(),
        )?)
    }

    /// Replaces `checkpoint.json` unless it says the same already.
    fn publish_checkpoint(
        &self,
        run_id: &RunId,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        let path = self.paths(run_id).checkpoint();
        let mut bytes = serde_json::to_vec(checkpoint).map_err(|error| StoreError::Io {
            action: "cannot serialise",
            path: path.clone(),
            source: std::io::Error::from(error),
        })?;
        bytes.push(b'\n');
        if fs_err::read(&path).ok().as_deref() == Some(bytes.as_slice()) {
            return Ok(());
        }
        write_atomic(&path, &bytes).map_err(io("cannot write", &path))
    }

    /// The journal's states; a run without a journal (written before there was one)
    /// has its `checkpoint.json`.
    fn replay_checkpoints(
        &self,
        run_id: &RunId,
        visit: &mut dyn FnMut(&Checkpoint),
    ) -> Result<(), StoreError> {
        let paths = self.paths(run_id);
        if paths.journal().exists() {
            return crate::journal::replay_each(&paths.journal(), visit)
                .map_err(|error| StoreError::Load(error.into()));
        }
        if let Some(checkpoint) = crate::checkpoint::load_newest(paths.run_dir())? {
            visit(&checkpoint);
        }
        Ok(())
    }

    fn pending_rewind(&self, run_id: &RunId) -> Result<Option<PendingRewind>, StoreError> {
        let path = self.paths(run_id).run_dir().join(REWIND_FILE);
        let bytes = match fs_err::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(io("cannot read", &path)(error)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Invalid { path, source })
    }

    /// `rewind.json`, written to a temporary file, synced, renamed into place and the
    /// directory synced; removed (and the directory synced) when cleared.
    fn set_pending_rewind(
        &self,
        run_id: &RunId,
        rewind: Option<&PendingRewind>,
    ) -> Result<(), StoreError> {
        let paths = self.paths(run_id);
        let path = paths.run_dir().join(REWIND_FILE);
        match rewind {
            Some(rewind) => {
                let bytes = serde_json::to_vec_pretty(rewind).map_err(|error| StoreError::Io {
                    action: "cannot serialise",
                    path: path.clone(),
                    source: std::io::Error::from(error),
                })?;
                let temporary = paths.run_dir().join(format!(".{REWIND_FILE}.tmp"));
                let mut file =
                    fs_err::File::create(&temporary).map_err(io("cannot write", &temporary))?;
                std::io::Write::write_all(&mut file, &bytes)
                    .and_then(|()| file.sync_all())
                    .map_err(io("cannot write", &temporary))?;
                fs_err::rename(&temporary, &path).map_err(io("cannot write", &path))?;
            }
            None => match fs_err::remove_file(&path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(error) => return Err(io("cannot remove", &path)(error)),
            },
        }
        crate::journal::sync_directory(paths.run_dir()).map_err(io("cannot sync", paths.run_dir()))
    }

    fn open_events(&self, run_id: &RunId, opening: Opening) -> Result<OpenedEvents, StoreError> {
        let path = self.paths(run_id).events();
        Ok(match opening {
            Opening::New => OpenedEvents {
                log: Box::new(FsEventLog::open(&path)?),
                next_id: 1,
            },
            Opening::Resume => {
                let (log, last_id) = FsEventLog::reopen(&path)?;
                OpenedEvents {
                    log: Box::new(log),
                    next_id: last_id + 1,
                }
            }
        })
    }

    fn read_events(&self, run_id: &RunId, from_id: u64) -> Result<Vec<EventEnvelope>, StoreError> {
        // Seeks to `from_id` by a binary search over the file instead of reading it all:
        // a follower asking for the newest events reads only those.
        let run_dir = self.paths(run_id).run_dir().to_path_buf();
        let path = run_dir.join(crate::run_dir::EVENTS_FILE);
        match fs_err::File::open(&path) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(io("cannot read", &path)(error)),
        }
        let mut cursor = EventCursor::after(&run_dir, from_id.saturating_sub(1));
        let mut stored = cursor.read_new();
        stored.extend(cursor.finish());
        Ok(stored
            .iter()
            .filter(|event| event.id >= from_id)
            .filter_map(|event| serde_json::from_str::<EventEnvelope>(&event.line).ok())
            .collect())
    }

    fn register_start(&self, manifest: &Manifest, run_dir: &Path) -> Result<(), StoreError> {
        self.write_index(|index| index.record_start(manifest, run_dir))
    }

    fn register_end(&self, run_id: &RunId, status: RunStatus) -> Result<(), StoreError> {
        let finished_at = crate::timestamp::now_rfc3339();
        self.write_index(|index| index.record_status(run_id.as_str(), status, Some(&finished_at)))
    }

    fn list_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        Ok(RunIndex::open(&self.root)?.list()?)
    }

    /// The catalog's snapshot, rebuilt when the index or the run directories changed.
    fn listing(&self) -> Result<Listing, StoreError> {
        Ok(self.catalog().list()?)
    }

    fn cached_listing(&self) -> Option<Listing> {
        self.catalog().list_cached()
    }

    fn resolve(&self, run: &str) -> Result<Arc<RunRecord>, StoreError> {
        Ok(self.catalog().resolve(run)?)
    }

    fn resolve_cached(&self, run: &str) -> Option<Result<Arc<RunRecord>, StoreError>> {
        self.catalog()
            .resolve_cached(run)
            .map(|found| found.map_err(StoreError::from))
    }

    fn record_parts(&self, record: &RunRecord) -> Result<RecordParts, StoreError> {
        Ok(super::read_record_parts(record)?)
    }

    /// The stage directories `stages/{rank:03}-{node_id}@{visit}/`.
    fn stages(&self, run_id: &RunId) -> Result<Vec<StoredStage>, StoreError> {
        let stages = list_stages(self.paths(run_id).run_dir()).map_err(lookup_error)?;
        Ok(stages
            .into_iter()
            .map(|stage| StoredStage {
                status: stage.status(),
                files: STAGE_FILES
                    .iter()
                    .filter(|name| stage.path.join(name).is_file())
                    .map(|name| (*name).to_owned())
                    .collect(),
                rank: stage.rank,
                node_id: stage.node_id,
                visit: stage.visit,
            })
            .collect())
    }

    fn stage_file(
        &self,
        run_id: &RunId,
        rank: u32,
        name: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        if !STAGE_FILES.contains(&name) {
            return Ok(None);
        }
        let stages = list_stages(self.paths(run_id).run_dir()).map_err(lookup_error)?;
        let Some(stage) = stages.into_iter().find(|stage| stage.rank == rank) else {
            return Ok(None);
        };
        let path = stage.path.join(name);
        match fs_err::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io("cannot read", &path)(error)),
        }
    }

    /// Nothing to copy: the stage directory is the record.
    fn save_stage(&self, _run_id: &RunId, _stage: &StageDir) -> Result<(), StoreError> {
        Ok(())
    }

    /// An [`EventCursor`] placed by a binary search for `after`.
    fn event_reader(&self, run_id: &RunId, after: u64) -> Box<dyn EventReader> {
        Box::new(EventsAfter {
            cursor: EventCursor::after(self.paths(run_id).run_dir(), after),
            after,
        })
    }

    /// An [`EventCursor`] that keeps `events.jsonl` open, past its complete lines.
    fn event_tail(&self, run_id: &RunId) -> Box<dyn EventReader> {
        let mut cursor = EventCursor::new(self.paths(run_id).run_dir()).kept_open();
        cursor.read_new();
        Box::new(cursor)
    }

    /// Read from the end of `events.jsonl`.
    fn last_event_id(&self, run_id: &RunId) -> u64 {
        super::last_event_id(self.paths(run_id).run_dir())
    }

    /// The length and modification time of `events.jsonl`, `checkpoint.json`,
    /// `manifest.json` and `stages/`: one `stat` each.
    fn record_stamps(&self, run_id: &RunId) -> Option<RecordStamps> {
        Some(RecordStamps::of(self.paths(run_id).run_dir()))
    }

    fn checkpoint_stamp(&self, run_id: &RunId) -> Option<FileStamp> {
        Some(RecordStamps::checkpoint_of(self.paths(run_id).run_dir()))
    }

    /// `answers/pending.json`.
    fn set_pending_question(
        &self,
        run_id: &RunId,
        question: Option<&Question>,
    ) -> Result<(), StoreError> {
        answer_files::publish(self.paths(run_id).run_dir(), question)
    }

    /// `answers/pending.json` while the run's lock is held.
    fn pending_question(&self, run_id: &RunId) -> Result<Option<Question>, StoreError> {
        let paths = self.paths(run_id);
        if !RunLock::is_held(paths.run_dir()) {
            return Ok(None);
        }
        answer_files::pending(paths.run_dir())
    }

    /// `answers/{question}.json`, created by an exclusive hard link.
    fn file_answer(&self, run_id: &RunId, answer: &FiledAnswer) -> Result<(), StoreError> {
        answer_files::file(self.paths(run_id).run_dir(), run_id.as_str(), answer)
    }

    fn take_answer(
        &self,
        run_id: &RunId,
        question_id: &str,
    ) -> Result<Option<FiledAnswer>, StoreError> {
        answer_files::take(self.paths(run_id).run_dir(), question_id)
    }

    fn withdraw_answer(&self, run_id: &RunId, question_id: &str) -> Result<bool, StoreError> {
        answer_files::withdraw(self.paths(run_id).run_dir(), question_id)
    }

    fn answer_waiting(&self, run_id: &RunId, question_id: &str) -> Result<bool, StoreError> {
        Ok(answer_files::waiting(
            self.paths(run_id).run_dir(),
            question_id,
        ))
    }
}

/// A stage directory listing that failed, as a store error.
fn lookup_error(error: StageLookupError) -> StoreError {
    match error {
        StageLookupError::Io { path, source } => StoreError::Io {
            action: "cannot list",
            path,
            source,
        },
        error @ (StageLookupError::UnknownNode { .. }
        | StageLookupError::NotRun { .. }
        | StageLookupError::NoStages { .. }) => {
            StoreError::backend("cannot list the stages", error)
        }
    }
}
