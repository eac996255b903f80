//! The provider interface.

use std::future::Future;
use std::pin::Pin;

use crate::error::LlmError;
use crate::message::{Request, Response};
use crate::stream::{StreamEvent, StreamSink};

/// A boxed future, so that [`LlmClient`] stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One provider endpoint. Implementations assemble streamed responses into a
/// [`Response`]; callers handle retries and failover ([`crate::Resilient`]) and
/// cancellation (dropping the future cancels the call).
///
/// An implementation writes [`LlmClient::complete_streaming`] only; one that does not
/// stream reports the finished turn with [`crate::replay_response`].
pub trait LlmClient: Send + Sync {
    /// Sends one request and returns the complete assistant turn, passing text deltas and
    /// tool-call pieces to `sink` as they arrive.
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>>;

    /// Like [`LlmClient::complete_streaming`], for callers that only want the complete
    /// turn.
    fn complete<'a>(&'a self, request: &'a Request) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(async move {
            let mut ignore = |_: &StreamEvent| {};
            self.complete_streaming(request, &mut ignore).await
        })
    }
}
