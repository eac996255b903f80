//! The server's shared state: the engine bridge and the engine's stores (every read of
//! a run's records goes through its `RunStore`), the token, the settings, and the runs
//! this process executes or holds `queued` (SPEC 14.2): at most `max_concurrent_runs`
//! execute at once, the rest wait first in, first out on a fair semaphore.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use fabro_api::{RunSummary, RunUsage};
use fabro_engine::{RunStore, Stores};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::doc_cache::DocCache;
use crate::engine_bridge::{AnswerHandle, EngineBridge, EventEnvelope, EventSink, SteeringQueue};
use crate::feeds::Feeds;
use crate::graph_cache::GraphCache;
use crate::settings::ServerSettings;
use crate::token::Token;

/// At most this many event streams are open at once (SPEC 14.3).
pub const MAX_EVENT_STREAMS: usize = 512;

/// Shared by every request handler.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    bridge: EngineBridge,
    token: Token,
    settings: ServerSettings,
    runs: Mutex<HashMap<String, Arc<ActiveRun>>>,
    slots: Arc<Semaphore>,
    streams: Arc<Semaphore>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    feeds: Feeds,
    documents: DocCache,
    graphs: GraphCache,
    stores: Stores,
    /// A standalone worker's runs go back to the queue when it stops (SPEC 18.2).
    hands_back: AtomicBool,
}

/// A run this server executes, or holds queued.
pub struct ActiveRun {
    /// The run id.
    pub run_id: String,
    /// The run directory.
    pub run_dir: PathBuf,
    /// Fired by the API's cancel and by shutdown.
    pub cancel: CancellationToken,
    /// Answers the run's human gates.
    pub answers: AnswerHandle,
    /// Takes steering messages for the run's agent stages (SPEC 20.1).
    pub steering: SteeringQueue,
    /// Wakes event streams when the run emits.
    pub notify: Arc<Notify>,
    /// The workflow as the request named it (for a queued run's summary).
    pub workflow_name: String,
    queued: AtomicBool,
    /// Emitted its terminal event: its task lets it go a moment later.
    ended: AtomicBool,
}

impl ActiveRun {
    /// A new, queued run.
    pub fn new(
        run_id: String,
        run_dir: PathBuf,
        answers: AnswerHandle,
        steering: SteeringQueue,
        workflow_name: String,
    ) -> ActiveRun {
        ActiveRun {
            run_id,
            run_dir,
            cancel: CancellationToken::new(),
            answers,
            steering,
            notify: Arc::new(Notify::new()),
            workflow_name,
            queued: AtomicBool::new(true),
            ended: AtomicBool::new(false),
        }
    }

    /// Still waiting for a slot.
    pub fn is_queued(&self) -> bool {
        self.queued.load(Ordering::SeqCst)
    }

    /// Got its slot.
    pub fn mark_started(&self) {
        self.queued.store(false, Ordering::SeqCst);
    }

    /// Emitted its terminal event: there is nothing left to cancel.
    pub fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// The summary of a run that is not in the run index yet.
    pub fn queued_summary(&self) -> RunSummary {
        RunSummary {
            run_id: self.run_id.clone(),
            workflow_name: self.workflow_name.clone(),
            workflow_path: None,
            status: if self.is_queued() {
                "queued"
            } else {
                "running"
            }
            .to_owned(),
            started_at: None,
            finished_at: None,
            run_dir: self.run_dir.display().to_string(),
            goal: String::new(),
            simulated_llm: false,
            reason: None,
            current_node: None,
            usage: RunUsage::default(),
            cost_usd: None,
            pending_question: None,
            worker: None,
        }
    }
}

/// Wakes a run's event streams after each event is appended to `events.jsonl`.
/// The sink of a run this server executes: wakes its event streams, and marks it ended
/// at its terminal event.
pub struct ActiveSink(pub Arc<ActiveRun>);

impl EventSink for ActiveSink {
    fn emit(&self, envelope: &EventEnvelope) {
        if envelope.kind.is_terminal() && envelope.run_id.as_str() == self.0.run_id {
            self.0.ended.store(true, Ordering::SeqCst);
        }
        self.0.notify.notify_waiters();
    }
}

impl AppState {
    /// The state of a server over `bridge`.
    pub fn new(bridge: EngineBridge, token: Token, settings: ServerSettings) -> AppState {
        let slots = Arc::new(Semaphore::new(settings.max_concurrent_runs.max(1)));
        AppState {
            inner: Arc::new(Inner {
                token,
                settings,
                runs: Mutex::new(HashMap::new()),
                slots,
                streams: Arc::new(Semaphore::new(MAX_EVENT_STREAMS)),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
                feeds: Feeds::default(),
                documents: DocCache::default(),
                graphs: GraphCache::default(),
                stores: bridge.stores().clone(),
                bridge,
                hands_back: AtomicBool::new(false),
            }),
        }
    }

    /// Makes the runs this process holds on a shared store go back to the queue when it
    /// stops, rather than end `canceled` (a standalone worker, SPEC 18.2).
    pub fn hand_back_on_stop(&self) {
        self.inner.hands_back.store(true, Ordering::SeqCst);
    }

    /// Whether the runs go back to the queue when this process stops.
    pub fn hands_back(&self) -> bool {
        self.inner.hands_back.load(Ordering::SeqCst)
    }

    /// The engine.
    pub fn bridge(&self) -> &EngineBridge {
        &self.inner.bridge
    }

    /// The token.
    pub fn token(&self) -> &Token {
        &self.inner.token
    }

    /// The settings.
    pub fn settings(&self) -> &ServerSettings {
        &self.inner.settings
    }

    /// Execution slots.
    pub fn slots(&self) -> Arc<Semaphore> {
        Arc::clone(&self.inner.slots)
    }

    /// Event-stream slots.
    pub fn streams(&self) -> Arc<Semaphore> {
        Arc::clone(&self.inner.streams)
    }

    /// Fired when the server shuts down.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// The run tasks, awaited at shutdown.
    pub fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    /// The shared event feeds of the runs being followed.
    pub fn feeds(&self) -> &Feeds {
        &self.inner.feeds
    }

    /// The engine's stores, the bridge's.
    pub fn stores(&self) -> &Stores {
        &self.inner.stores
    }

    /// The run store: the one path to run records.
    pub fn run_store(&self) -> &dyn RunStore {
        self.inner.stores.runs.as_ref()
    }

    /// The documents of runs that no process executes.
    pub fn documents(&self) -> &DocCache {
        &self.inner.documents
    }

    /// The laid-out graphs of the runs whose pages were shown.
    pub fn graphs(&self) -> &GraphCache {
        &self.inner.graphs
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ActiveRun>>> {
        self.inner
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `run`.
    pub fn insert(&self, run: Arc<ActiveRun>) {
        self.runs().insert(run.run_id.clone(), run);
    }

    /// Forgets run `run_id`.
    pub fn remove(&self, run_id: &str) {
        self.runs().remove(run_id);
    }

    /// The active run with this id.
    pub fn active(&self, run_id: &str) -> Option<Arc<ActiveRun>> {
        self.runs().get(run_id).cloned()
    }

    /// The active run whose id `run` is or uniquely starts (at least 4 characters).
    pub fn active_by_prefix(&self, run: &str) -> Option<Arc<ActiveRun>> {
        let runs = self.runs();
        if let Some(found) = runs.get(run) {
            return Some(Arc::clone(found));
        }
        if run.len() < 4 {
            return None;
        }
        let mut matching = runs
            .values()
            .filter(|active| active.run_id.starts_with(run));
        match (matching.next(), matching.next()) {
            (Some(found), None) => Some(Arc::clone(found)),
            _ => None,
        }
    }

    /// Every active run.
    pub fn all_active(&self) -> Vec<Arc<ActiveRun>> {
        self.runs().values().cloned().collect()
    }
}
