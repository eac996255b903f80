//! One shared reader of a run's stored events per followed run: the event streams of a
//! run subscribe to its feed instead of each reading and parsing the events on its own.
//!
//! The first stream of a run starts the feed's reader task; it reads the appended events
//! once (the store's `event_tail`, for files an open file), woken by the engine's sink
//! when this server executes the run (reading at most once per [`coalesce_for`] its
//! streams), else every [`POLL`], and publishes each event as an `Arc` on a broadcast
//! channel. It ends after the run's terminal event, when the run is executed nowhere any
//! more, or when its last subscriber left. A stream subscribes first, then replays the
//! store from its `Last-Event-ID`, then takes the live events, skipping ids it already
//! sent ([`Handover`]): nothing is missed and nothing sent twice. A stream that lags
//! behind the channel reads the store again from its last id.

use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use fabro_engine::{EventKind, Notice, RunId, RunStore};
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};

use crate::engine_bridge::records::{EventReader, StoredEvent};
pub use crate::feeds::{share, Feeds, Shared, SharedEvent};
use crate::state::AppState;

/// How often a reader looks for new events when nothing woke it.
pub const POLL: Duration = Duration::from_millis(50);
/// How often it looks on a store whose notices wake it (a shared store, SPEC 18.1): only
/// to learn that the run's process is gone, or what a lost connection hid.
pub const NOTICED_POLL: Duration = Duration::from_secs(1);
/// After a wake-up, the reader lets the run append for this long before it reads, so
/// the events of one stage (about four, appended within a fraction of a millisecond) are
/// read, published and written to each stream together. Woken per event, the reader
/// preempted the engine's thread once per append (its wake-up is a system call on that
/// thread, and with both cores busy the woken reader runs in the engine's place), and
/// each stream wrote and each client read once per event: 10 ms of a 40 ms run of 100
/// prompt stages (docs/benchmarks.md). An event waits at most this long more, plus
/// [`COALESCE_PER_STREAM`] for each stream of the run.
pub const COALESCE: Duration = Duration::from_millis(1);
/// What each stream adds to the pause, up to [`MAX_COALESCE`]: every batch costs a
/// write per stream and a read per client, so with 100 streams a batch per millisecond
/// cost more CPU than the 2 cores had beside the engine, and the streams fell behind.
pub const COALESCE_PER_STREAM: Duration = Duration::from_micros(20);
/// The longest pause.
pub const MAX_COALESCE: Duration = Duration::from_millis(4);

/// The pause before a read while `streams` streams follow the run.
pub fn coalesce_for(streams: usize) -> Duration {
    let per_stream = COALESCE_PER_STREAM.saturating_mul(u32::try_from(streams).unwrap_or(u32::MAX));
    COALESCE.saturating_add(per_stream).min(MAX_COALESCE)
}
/// Events a subscriber may fall behind before it reads the file instead.
const CAPACITY: usize = 4096;

/// The events `reader` has now; a store that fails to answer has none (the next read
/// asks again).
pub fn read_events(reader: &mut dyn EventReader) -> Vec<StoredEvent> {
    reader.read_new().unwrap_or_else(|error| {
        tracing::warn!(error = %fabro_engine::error_chain(&error), "cannot read a run's events");
        Vec::new()
    })
}

/// A receiver of the live events of run `run_id`, starting the run's feed if none
/// runs. Subscribed before the caller replays the store, so no event falls between.
pub async fn subscribe(state: &AppState, run_id: &str) -> broadcast::Receiver<Shared> {
    if let Some(sender) = state.feeds().map().get(run_id) {
        return sender.subscribe();
    }
    // Positioned after the stored events before it is published: whatever is appended
    // later reaches the subscribers.
    let store = Arc::clone(&state.stores().runs);
    let id = RunId::from(run_id);
    let tail = match tokio::task::spawn_blocking(move || store.event_tail(&id)).await {
        Ok(tail) => tail,
        Err(_) => state.run_store().event_tail(&RunId::from(run_id)),
    };
    let mut map = state.feeds().map();
    if let Some(sender) = map.get(run_id) {
        return sender.subscribe();
    }
    let (sender, receiver) = broadcast::channel(CAPACITY);
    map.insert(run_id.to_owned(), sender.clone());
    let reader = Reader {
        state: state.clone(),
        run_id: run_id.to_owned(),
        tail,
        sender,
    };
    // On a thread of its own: woken from the engine's task, a task would wait in that
    // worker's LIFO slot (which others cannot steal) until the engine yields, and the
    // streams it wakes would queue behind it; the waits are the run's event latency.
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || handle.block_on(reader.run()));
    receiver
}

/// Runs `step` whenever the run `run_id` may have appended events: at once, then after
/// each append notification of the run this server executes, after each notice of the
/// store that another process appended (a shared store), or every [`POLL`] for a run a
/// CLI process executes. `step` is told whether this server executes the run; the
/// wake-ups are armed before it runs, so an append during `step` is not missed. `None`
/// when the server shuts down first.
pub(super) async fn on_appends<T>(
    state: &AppState,
    run_id: &str,
    mut step: impl FnMut(bool) -> ControlFlow<T>,
) -> Option<T> {
    let mut notices = state.run_store().notices();
    let poll = if notices.is_some() {
        NOTICED_POLL
    } else {
        POLL
    };
    let id = RunId::from(run_id);
    loop {
        let notify = state
            .active(run_id)
            .map(|active| Arc::clone(&active.notify));
        let mut notified = notify.as_ref().map(|notify| Box::pin(notify.notified()));
        if let Some(notified) = notified.as_mut() {
            notified.as_mut().enable();
        }
        if let ControlFlow::Break(value) = step(notify.is_some()) {
            return Some(value);
        }
        let wake = async {
            match notified {
                Some(notified) => notified.await,
                None => std::future::pending().await,
            }
        };
        // The store's notices matter only for a run another process executes: this
        // server's own appends wake it through `notify` already.
        let elsewhere = notify.is_none();
        tokio::select! {
            () = wake => {}
            () = noticed(&mut notices, &id), if elsewhere => {}
            () = tokio::time::sleep(poll) => {}
            () = state.shutdown_token().cancelled() => return None,
        }
    }
}

/// Until the store's notices say that run `run_id` appended events, or that notices were
/// missed; forever without notices.
async fn noticed(notices: &mut Option<broadcast::Receiver<Notice>>, run_id: &RunId) {
    let Some(receiver) = notices.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match receiver.recv().await {
            Ok(Notice::Appended(id)) if id == *run_id => return,
            Ok(Notice::Missed) | Err(RecvError::Lagged(_)) => return,
            Ok(_) => {}
            Err(RecvError::Closed) => {
                *notices = None;
                return std::future::pending().await;
            }
        }
    }
}

/// The reader task of one feed.
struct Reader {
    state: AppState,
    run_id: String,
    tail: Box<dyn EventReader>,
    sender: broadcast::Sender<Shared>,
}

impl Reader {
    /// Runs on a thread of its own (see [`subscribe`]), so the coalescing pause blocks
    /// nothing else.
    async fn run(mut self) {
        let (state, run_id) = (self.state.clone(), self.run_id.clone());
        let mut first = true;
        // On a shared store every append of another process is noticed: those wake-ups
        // are let to gather too.
        let noticed = state.run_store().notices().is_some();
        let _ = on_appends(&state, &run_id, |executed_here| {
            if (executed_here || noticed) && !std::mem::take(&mut first) {
                std::thread::sleep(coalesce_for(self.sender.receiver_count()));
            }
            let mut finished = self.publish();
            if !finished
                && !executed_here
                && !state.run_store().is_active(&RunId::from(run_id.as_str()))
            {
                // Executed nowhere: what was appended before the lock was let go.
                self.publish();
                finished = true;
            }
            if finished || state.shutdown_token().is_cancelled() || self.unsubscribed() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await;
        self.leave();
    }

    /// Publishes the new events; whether the terminal one was among them.
    fn publish(&mut self) -> bool {
        let mut terminal = false;
        for event in read_events(self.tail.as_mut()) {
            terminal |= EventKind::is_terminal_name(&event.name);
            // No receiver now is no error: a stream subscribes before it replays.
            let _ = self.sender.send(Arc::new(SharedEvent::from(event)));
        }
        terminal
    }

    /// Whether the last subscriber left; the feed is then gone from the map, so the
    /// next stream starts a new one.
    fn unsubscribed(&self) -> bool {
        let mut map = self.state.feeds().map();
        if self.sender.receiver_count() > 0 {
            return false;
        }
        remove_own(&mut map, &self.run_id, &self.sender);
        true
    }

    fn leave(self) {
        let mut map = self.state.feeds().map();
        remove_own(&mut map, &self.run_id, &self.sender);
    }
}

fn remove_own(
    map: &mut HashMap<String, broadcast::Sender<Shared>>,
    run_id: &str,
    sender: &broadcast::Sender<Shared>,
) {
    if map
        .get(run_id)
        .is_some_and(|current| current.same_channel(sender))
    {
        map.remove(run_id);
    }
}

/// What the live side has for a stream that has sent everything it had.
#[derive(Debug, PartialEq, Eq)]
pub enum Live {
    /// Events are buffered.
    Ready,
    /// Nothing yet.
    Empty,
    /// The feed ended: the store has whatever remains.
    Closed,
}

/// A stream's hand-over from the replay of the stored events to the live ones.
pub struct Handover {
    tail: Box<dyn EventReader>,
    store: Arc<dyn RunStore>,
    run_id: RunId,
    live: broadcast::Receiver<Shared>,
    after: u64,
    buffer: VecDeque<Shared>,
}

impl Handover {
    /// Replays the events of run `run_id` stored after `after` behind `live`, which must
    /// have been subscribed before this call.
    pub fn new(
        store: Arc<dyn RunStore>,
        run_id: RunId,
        after: u64,
        live: broadcast::Receiver<Shared>,
    ) -> Handover {
        let mut tail = store.event_reader(&run_id, after);
        let buffer = share(read_events(tail.as_mut())).collect();
        Handover {
            tail,
            store,
            run_id,
            live,
            after,
            buffer,
        }
    }

    /// The id of the last event handed out.
    pub fn after(&self) -> u64 {
        self.after
    }

    /// The next buffered event above the last one handed out. A run's ids have no gaps
    /// (SPEC 18.1): an event past the next id means the events before it were not read
    /// (a read of the store that failed, the shared store's connection lost a moment),
    /// and they are read again from the store, which has them, before it.
    pub fn next_buffered(&mut self) -> Option<Shared> {
        let mut reread = false;
        while let Some(event) = self.buffer.pop_front() {
            if event.id <= self.after {
                continue;
            }
            if event.id > self.after + 1 && !reread {
                reread = true;
                self.buffer.push_front(event);
                let live = std::mem::take(&mut self.buffer);
                self.reread();
                // What the store does not have yet stays behind what it has.
                self.buffer.extend(live);
                continue;
            }
            self.after = event.id;
            return Some(event);
        }
        None
    }

    /// Whether events wait in the buffer (some may be ones already handed out).
    pub fn has_buffered(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// Buffers the live events received so far without waiting.
    pub fn poll_live(&mut self) -> Live {
        loop {
            match self.live.try_recv() {
                Ok(event) => self.buffer.push_back(event),
                Err(TryRecvError::Lagged(_)) => self.reread(),
                Err(TryRecvError::Empty) => return self.state(Live::Empty),
                Err(TryRecvError::Closed) => return self.state(Live::Closed),
            }
        }
    }

    /// Waits for the next live event (or the end of the feed).
    pub async fn wait_live(&mut self) -> Live {
        match self.live.recv().await {
            Ok(event) => {
                self.buffer.push_back(event);
                self.poll_live();
                Live::Ready
            }
            Err(RecvError::Lagged(_)) => {
                self.reread();
                self.poll_live();
                Live::Ready
            }
            Err(RecvError::Closed) => self.state(Live::Closed),
        }
    }

    fn state(&self, otherwise: Live) -> Live {
        if self.buffer.is_empty() {
            otherwise
        } else {
            Live::Ready
        }
    }

    /// Fell behind the channel: the missed events are in the store, after `after`.
    fn reread(&mut self) {
        self.tail = self.store.event_reader(&self.run_id, self.after);
        self.buffer.clear();
        self.buffer.extend(share(read_events(self.tail.as_mut())));
    }

    /// The stored events from the last one handed out, for a stream whose feed ended.
    pub fn into_tail(self) -> (Box<dyn EventReader>, VecDeque<Shared>) {
        (self.tail, self.buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_engine::local::RunPaths;
    use fabro_engine::FsRunStore;
    use std::io::Write;
    use std::path::Path;

    /// A file store over `root` and the directory of its run `r`.
    fn store(root: &Path) -> (Arc<dyn RunStore>, std::path::PathBuf) {
        let directory = RunPaths::new(root, "r").run_dir().to_path_buf();
        fs_err::create_dir_all(&directory).expect("run directory");
        (Arc::new(FsRunStore::new(root)), directory)
    }

    fn append(directory: &Path, ids: std::ops::RangeInclusive<u64>) -> Vec<Shared> {
        let mut file = fs_err::OpenOptions::new()
            .create(true)
            .append(true)
            .open(directory.join("events.jsonl"))
            .expect("open");
        ids.map(|id| {
            let line = format!(
                "{{\"id\":{id},\"ts\":\"t\",\"run_id\":\"r\",\"event\":\"E\",\"properties\":{{}}}}"
            );
            writeln!(file, "{line}").expect("append");
            Arc::new(SharedEvent::from(StoredEvent {
                id,
                name: "E".into(),
                line,
            }))
        })
        .collect()
    }

    fn drain(handover: &mut Handover, ids: &mut Vec<u64>) {
        while let Some(event) = handover.next_buffered() {
            ids.push(event.id);
        }
    }

    #[test]
    fn the_pause_grows_with_the_streams_up_to_its_limit() {
        assert_eq!(coalesce_for(0), Duration::from_millis(1));
        assert_eq!(coalesce_for(1), Duration::from_micros(1020));
        assert_eq!(coalesce_for(50), Duration::from_millis(2));
        assert_eq!(coalesce_for(100), Duration::from_millis(3));
        assert_eq!(coalesce_for(150), MAX_COALESCE);
        assert_eq!(coalesce_for(usize::MAX), MAX_COALESCE);
    }

    #[tokio::test]
    async fn events_between_subscribe_and_replay_are_sent_once_and_in_order() {
        let root = tempfile::tempdir().expect("temp dir");
        let (store, directory) = store(root.path());
        append(&directory, 1..=5);
        let (sender, receiver) = broadcast::channel(64);
        // Appended and published after the subscription, before the replay reads.
        for event in append(&directory, 6..=8) {
            sender.send(event).expect("send");
        }
        let mut handover = Handover::new(store, RunId::from("r"), 2, receiver);
        for event in append(&directory, 9..=10) {
            sender.send(event).expect("send");
        }
        let mut ids = Vec::new();
        drain(&mut handover, &mut ids);
        assert_eq!(handover.poll_live(), Live::Ready);
        drain(&mut handover, &mut ids);
        assert_eq!(handover.poll_live(), Live::Empty);
        for event in append(&directory, 11..=11) {
            sender.send(event).expect("send");
        }
        assert_eq!(handover.wait_live().await, Live::Ready);
        drain(&mut handover, &mut ids);
        drop(sender);
        assert_eq!(handover.wait_live().await, Live::Closed);
        assert_eq!(ids, (3..=11).collect::<Vec<_>>());
        assert_eq!(handover.after(), 11);
    }

    /// Issue 32: a replay that read nothing (the store failed a moment) is made up for
    /// from the store when a later live event shows the gap.
    #[tokio::test]
    async fn a_gap_before_a_live_event_is_read_from_the_store() {
        let root = tempfile::tempdir().expect("temp dir");
        let (store, directory) = store(root.path());
        let (sender, receiver) = broadcast::channel(64);
        // Nothing stored yet when the stream starts; the feed comes in at event 4.
        let mut handover = Handover::new(store, RunId::from("r"), 0, receiver);
        let stored = append(&directory, 1..=5);
        for event in stored.into_iter().skip(3) {
            sender.send(event).expect("send");
        }
        assert_eq!(handover.wait_live().await, Live::Ready);
        let mut ids = Vec::new();
        drain(&mut handover, &mut ids);
        assert_eq!(ids, (1..=5).collect::<Vec<_>>());
        assert_eq!(handover.after(), 5);
    }

    #[tokio::test]
    async fn a_subscriber_that_lags_reads_the_missed_events_from_the_file() {
        let root = tempfile::tempdir().expect("temp dir");
        let (store, directory) = store(root.path());
        append(&directory, 1..=3);
        let (sender, receiver) = broadcast::channel(4);
        let mut handover = Handover::new(store, RunId::from("r"), 0, receiver);
        let mut ids = Vec::new();
        drain(&mut handover, &mut ids);
        for event in append(&directory, 4..=40) {
            let _ = sender.send(event);
        }
        assert_eq!(handover.wait_live().await, Live::Ready);
        drain(&mut handover, &mut ids);
        assert_eq!(ids, (1..=40).collect::<Vec<_>>());
    }
}
