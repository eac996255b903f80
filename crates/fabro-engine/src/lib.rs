//! The fabro run engine.

pub mod asset_capture;
pub mod blob;
mod catch_panic;
pub mod config;
pub mod context;
pub mod event;
pub mod failure;
pub mod git;
mod handler;
pub mod llm_target;
pub mod outcome;
mod parallel;
pub mod record;
pub mod retry;
pub mod routing;
pub mod run;
pub mod run_dir;
pub mod run_index;
pub mod sandbox;
pub mod source;
pub mod timestamp;
pub mod transition;
pub mod traversal;

pub use context::Context;
pub use outcome::{Failure, Outcome};
