//! The fabro run engine.

pub mod asset_capture;
pub mod blob;
pub mod budget;
mod catch_panic;
pub mod checkpoint;
pub mod config;
pub mod context;
pub mod dump;
pub mod event;
pub mod failure;
pub mod gc;
pub mod git;
mod handler;
pub mod id;
pub mod interviewer;
pub mod journal;
pub mod llm_target;
pub mod outcome;
pub mod output_schema;
mod preamble;
pub mod record;
pub mod retry;
pub mod routing;
pub mod run;
pub mod run_diff;
pub mod run_dir;
pub mod run_index;
pub mod run_stages;
pub mod run_status;
pub mod sandbox;
pub mod source;
pub mod stage_log;
mod thread;
pub mod timestamp;
pub mod transition;
pub mod traversal;

pub use context::Context;

/// `error` and its sources, joined with `: `, for one-line messages.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
pub use outcome::{Failure, Outcome, Signal};
