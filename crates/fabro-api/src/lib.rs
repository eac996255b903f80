//! The HTTP contract of `fabro server` (SPEC 14.3), defined once: every request body and
//! every response body of `/api/v1` as a serde type with its OpenAPI schema (utoipa's
//! `ToSchema`). The server builds its answers from these types and documents them in
//! `/api/v1/openapi.json`; the CLI's `--server` commands send and read them through
//! [`client::Client`] (feature `client`).
//!
//! The JSON field names and values are those of the CLI's `--json` output: a run's
//! document ([`RunDocument`]) is `fabro inspect --json` (the engine's
//! [`fabro_engine::local::InspectView`], which derives its schema with the engine's
//! `schema` feature) plus `pending_question`; a run summary ([`RunSummary`]) is
//! `fabro runs --json` plus the live columns of the board.
//!
//! ```
//! use fabro_api::{RunUsage, Started};
//!
//! let started: Started = serde_json::from_str(
//!     r#"{"run_id": "01J", "status": "queued", "url": "/api/v1/runs/01J"}"#,
//! ).unwrap();
//! assert_eq!(started.status, "queued");
//! assert_eq!(RunUsage::default().tokens, 0);
//! ```

#[cfg(feature = "client")]
pub mod client;
mod error;
mod event;
mod question;
mod request;
mod run;
mod stage;
mod steer;
mod worker;
mod workflow;

pub use error::{ErrorBody, ErrorDetail};
pub use event::{EventPage, StoredEvent};
pub use question::{Answered, HumanQuestion, QuestionList, QuestionOption};
pub use request::{
    AnswerLabels, AnswerRequest, ConfigFile, ForkRequest, RepositoryRef, ResumeRequest,
    RewindRequest, StartRequest,
};
pub use run::{
    Canceling, Health, InspectDocument, Rewound, RunDocument, RunHeader, RunList, RunSummary,
    RunUsage, Started,
};
pub use stage::{Artifact, ArtifactList, StageList, StageRow, StageUsage};
pub use steer::{SteerAccepted, SteerRequest};
pub use worker::{WorkerDocument, WorkerList};
pub use workflow::{Diagnostic, DiagnosticEdge, DiagnosticSpan, WorkflowEntry, WorkflowList};
