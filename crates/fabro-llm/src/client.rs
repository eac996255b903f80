//! The provider interface.

use std::future::Future;
use std::pin::Pin;

use crate::error::LlmError;
use crate::message::{Request, Response};

/// A boxed future, so that [`LlmClient`] stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One provider endpoint. Implementations assemble streamed responses into a
/// [`Response`]; callers handle retries, failover and cancellation (dropping the future
/// cancels the call).
pub trait LlmClient: Send + Sync {
    /// Sends one request and returns the complete assistant turn.
    fn complete<'a>(&'a self, request: &'a Request) -> BoxFuture<'a, Result<Response, LlmError>>;
}
