//! The body of `GET /api/v1/workers` (SPEC 18.2): the workers of a shared store.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /api/v1/workers`: empty on the local store, which has no workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkerList {
    /// The workers the store knows, by name.
    pub workers: Vec<WorkerDocument>,
}

/// A worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkerDocument {
    /// Its name (`fabro worker --name`).
    pub name: String,
    /// The machine it runs on.
    pub host: String,
    /// Runs it executes at once.
    pub concurrency: u32,
    /// The runs it holds a live lease of.
    pub runs: Vec<String>,
    /// When it last said it was alive, RFC 3339.
    pub last_renewal: String,
}
