//! A run's stages and captured artifacts as SPEC 14.3 lists them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /api/v1/runs/{id}/stages`: stages in rank order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StageList {
    /// One row per stage, by rank.
    pub stages: Vec<StageRow>,
}

/// One stage visit, from its `status.json` (SPEC 7.5). A stage without one has not
/// finished: its status is `running` while the run runs, `incomplete` otherwise, and
/// the fields only `status.json` knows are null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StageRow {
    /// The stage's rank (its order in the run).
    pub rank: u32,
    /// The stage's node.
    pub node_id: String,
    /// Which visit of the node this stage is.
    pub visit: u32,
    /// The node's handler.
    pub handler: Option<String>,
    /// The stage's status (`success`, `fail`, …, `running` or `incomplete`).
    pub status: String,
    /// The final attempt number.
    pub attempts: Option<u32>,
    /// When the stage started (RFC 3339 UTC).
    pub started_at: Option<String>,
    /// When the stage finished.
    pub finished_at: Option<String>,
    /// Wall time in milliseconds.
    pub duration_ms: Option<u64>,
    /// The model of the stage's LLM calls.
    pub model: Option<String>,
    /// Tokens of the stage's LLM calls; null for a stage that made none.
    pub usage: Option<StageUsage>,
    /// Cost in US dollars, when known.
    pub cost_usd: Option<f64>,
    /// Files the stage changed.
    pub files_touched: Vec<String>,
    /// The stage files of SPEC 11.1 that exist (`prompt.md`, `response.md`, …).
    pub files: Vec<String>,
}

/// The tokens of one stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StageUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Reasoning tokens (part of the output).
    pub reasoning_tokens: u64,
    /// Input tokens read from the provider's prompt cache (SPEC 10.8).
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
}

/// `GET /api/v1/runs/{id}/artifacts`: the run's captured assets (SPEC 7.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArtifactList {
    /// Assets, sorted by path.
    pub artifacts: Vec<Artifact>,
}

/// One captured asset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Artifact {
    /// Its path relative to the run's `artifacts/files/` (the `{path}` of its download).
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// The node whose stage captured it.
    pub node_id: String,
    /// The attempt that captured it, for assets of a retried stage (`retry_{n}`).
    pub attempt: Option<u32>,
}
