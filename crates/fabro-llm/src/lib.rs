//! The LLM layer of fabro: the models fabro knows and the providers that serve them.
//!
//! Everything that talks to a model goes through [`LlmClient`], one object-safe trait
//! with one request/response model ([`Request`], [`Response`], [`Usage`]) and one error
//! type whose [`LlmErrorKind`] drives retries and failure classes. Today the crate holds
//! the [`catalog`] (SPEC 10.2) and the [`simulated`] provider (SPEC 10.1.5), the
//! deterministic offline provider that also serves as the test double; the HTTP clients
//! for Anthropic, OpenAI, Gemini and OpenAI-compatible servers arrive with issue 5.
//!
//! This crate depends on no other fabro crate and is the only one that will talk to
//! providers.

pub mod catalog;
mod client;
mod error;
mod message;
pub mod provider;
pub mod simulated;

pub use catalog::{ModelInfo, CATALOG};
pub use client::{BoxFuture, LlmClient};
pub use error::{LlmError, LlmErrorKind};
pub use message::{Message, Request, Response, Role, ToolCall, ToolDefinition, Usage};
pub use provider::Provider;
