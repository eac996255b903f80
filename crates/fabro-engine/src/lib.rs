//! The fabro run engine.
pub mod blob;
pub mod context;
pub mod event;
pub mod failure;
pub mod outcome;
pub mod timestamp;
pub mod transition;

pub use context::Context;
pub use outcome::{Failure, Outcome};
