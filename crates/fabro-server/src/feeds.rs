//! The feeds of the runs being followed: one broadcast channel per run, and the events
//! it carries, each formatted once as a Server-Sent Events frame for every stream. The
//! reader that fills a feed is `api/feed.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use tokio::sync::broadcast;

use crate::engine_bridge::records::StoredEvent;

/// A shared event, as read once from the file.
pub type Shared = Arc<SharedEvent>;

/// An event ready to be sent: what a stream needs to decide about it, and its Server-Sent
/// Events frame, formatted once for every stream of the run.
#[derive(Debug)]
pub struct SharedEvent {
    /// `id`.
    pub id: u64,
    /// `event`.
    pub name: String,
    /// `id: …`, `event: …` and `data: …` lines and the blank line that ends the event.
    pub frame: Bytes,
}

impl From<StoredEvent> for SharedEvent {
    fn from(event: StoredEvent) -> SharedEvent {
        let mut frame = Vec::with_capacity(event.line.len() + event.name.len() + 40);
        frame.extend_from_slice(b"id: ");
        frame.extend_from_slice(event.id.to_string().as_bytes());
        frame.extend_from_slice(b"\nevent: ");
        frame.extend_from_slice(event.name.as_bytes());
        frame.push(b'\n');
        // A stored line holds no newline; were there one, each part is a `data` line.
        for part in event.line.split('\n') {
            frame.extend_from_slice(b"data: ");
            frame.extend_from_slice(part.trim_end_matches('\r').as_bytes());
            frame.push(b'\n');
        }
        frame.push(b'\n');
        SharedEvent {
            id: event.id,
            name: event.name,
            frame: Bytes::from(frame),
        }
    }
}

/// Stored events as shared ones.
pub fn share(events: Vec<StoredEvent>) -> impl Iterator<Item = Shared> {
    events
        .into_iter()
        .map(|event| Arc::new(SharedEvent::from(event)))
}

/// The feeds of the runs being followed.
#[derive(Default)]
pub struct Feeds {
    map: Mutex<HashMap<String, broadcast::Sender<Shared>>>,
}

impl Feeds {
    pub(crate) fn map(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, broadcast::Sender<Shared>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
