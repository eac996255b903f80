//! The JSON form of `GET /api/v1/runs/{id}/events`: a page of stored event envelopes.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// A page of a run's stored events.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    /// The stored envelopes, each exactly as its line of `events.jsonl`.
    #[schema(value_type = Vec<StoredEvent>)]
    pub events: Vec<Box<RawValue>>,
    /// The `after` of the next page (the last id of this one, or the `after` asked for).
    pub next_after: u64,
}

/// An event envelope (SPEC 11.2), as stored and as the event stream's `data` carries it.
/// The typed form is `fabro_engine::EventEnvelope`; this one documents its shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StoredEvent {
    /// 1-based, increasing by one per event for the whole run.
    pub id: u64,
    /// RFC 3339 UTC with milliseconds.
    pub ts: String,
    /// The run.
    pub run_id: String,
    /// The event's name, e.g. `StageCompleted`.
    pub event: String,
    /// The node; absent for run-level events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The event's properties, which depend on `event` (SPEC 11.2).
    #[schema(value_type = Object)]
    pub properties: Map<String, Value>,
}
