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
pub trait LlmClient: Send + Sync {
    /// Sends one request and returns the complete assistant turn.
    fn complete<'a>(&'a self, request: &'a Request) -> BoxFuture<'a, Result<Response, LlmError>>;

    /// Like [`LlmClient::complete`], passing text deltas and tool-call pieces to `sink` as
    /// they arrive. The default, for clients that do not stream, reports the whole turn
    /// once it is complete.
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(async move {
            let response = self.complete(request).await?;
            if !response.text.is_empty() {
                sink(&StreamEvent::TextDelta(response.text.clone()));
            }
            for call in &response.tool_calls {
                sink(&StreamEvent::ToolCallStarted {
                    id: call.id.clone(),
                    name: call.name.clone(),
                });
                sink(&StreamEvent::ToolCallDelta {
                    id: call.id.clone(),
                    arguments: call.arguments.to_string(),
                });
            }
            Ok(response)
        })
    }
}
