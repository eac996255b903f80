//! LLM retries (SPEC 9.2) and provider failover (SPEC 9.4) around any [`LlmClient`].
//!
//! [`Resilient`] is itself an [`LlmClient`]: a chain of [`Route`]s (the primary provider
//! and model, then the `[llm.fallbacks]` providers with their closest models). Each call
//! retries transient errors on the current route with [`RetryPolicy`] delays, then moves
//! to the next route when the error allows failover; the switch is sticky for the rest of
//! the client's life (one stage). Waiting and jitter go through [`Sleeper`] and
//! [`Jitter`] so tests observe the delays without waiting; an [`CallObserver`] hears of
//! every retry and failover so the engine can emit `Agent.LlmRetry` and `Agent.Failover`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::client::{BoxFuture, LlmClient};
use crate::error::{LlmError, LlmErrorKind};
use crate::message::{Request, Response};
use crate::provider::Provider;
use crate::stream::StreamSink;

/// The retry schedule of SPEC 9.2.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (3).
    pub max_retries: u32,
    /// Delay before the first retry, before jitter (1 s).
    pub initial_delay: Duration,
    /// Growth per retry (2).
    pub factor: f64,
    /// Cap on every delay, and the largest Retry-After that is waited for (60 s).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            initial_delay: Duration::from_secs(1),
            factor: 2.0,
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The delay before retry `retry` (1-based) after `error`, or `None` when the call
    /// must fail now: the kind is not retried, the retries are used up, or Retry-After
    /// asks for more than the cap. `jitter` is the U(0.5, 1.5) factor.
    pub fn delay(&self, retry: u32, error: &LlmError, jitter: f64) -> Option<Duration> {
        if !error.kind.is_retryable() || retry > self.max_retries || retry == 0 {
            return None;
        }
        if let Some(retry_after) = error.retry_after {
            // SPEC 9.2: Retry-After replaces the computed delay, without jitter; above the
            // cap the call fails at once.
            return (retry_after <= self.max_delay).then_some(retry_after);
        }
        let exponent = i32::try_from(retry - 1).unwrap_or(i32::MAX);
        let seconds = self.initial_delay.as_secs_f64() * self.factor.powi(exponent) * jitter;
        Some(Duration::from_secs_f64(
            seconds.clamp(0.0, self.max_delay.as_secs_f64()),
        ))
    }
}

/// Waits between retries.
pub trait Sleeper: Send + Sync {
    /// Sleeps for `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()>;
}

/// The real sleeper.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A sleeper that returns at once and records what it was asked, for tests and
/// benchmarks.
#[derive(Debug, Default)]
pub struct RecordingSleeper {
    delays: Mutex<Vec<Duration>>,
}

impl RecordingSleeper {
    /// Every requested delay, in order.
    pub fn delays(&self) -> Vec<Duration> {
        self.delays
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()> {
        self.delays
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(duration);
        Box::pin(std::future::ready(()))
    }
}

/// The source of jitter factors in [0.5, 1.5).
pub trait Jitter: Send + Sync {
    /// The next factor.
    fn factor(&self) -> f64;
}

/// Uniformly random jitter.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomJitter;

impl Jitter for RandomJitter {
    fn factor(&self) -> f64 {
        0.5 + rand::random::<f64>()
    }
}

/// A fixed factor, for tests.
#[derive(Debug, Clone, Copy)]
pub struct FixedJitter(pub f64);

impl Jitter for FixedJitter {
    fn factor(&self) -> f64 {
        self.0
    }
}

/// A retry about to happen (`Agent.LlmRetry`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// Provider retried.
    pub provider: Provider,
    /// Model retried.
    pub model: String,
    /// 1-based retry number.
    pub attempt: u32,
    /// Wait before it.
    pub delay: Duration,
    /// What failed.
    pub error_kind: LlmErrorKind,
    /// HTTP status of the failure, if any.
    pub status_code: Option<u16>,
}

/// A switch to the next provider (`Agent.Failover`).
#[derive(Debug, Clone, PartialEq)]
pub struct FailoverNotice {
    /// The provider given up (its client's wire).
    pub from_provider: Provider,
    /// Its name, as workflows and configuration name it (SPEC 10.7: e.g. `kimi`).
    pub from_name: String,
    /// Its model.
    pub from_model: String,
    /// The provider used next (its client's wire).
    pub to_provider: Provider,
    /// Its name.
    pub to_name: String,
    /// Its model.
    pub to_model: String,
    /// The error that caused the switch.
    pub error_kind: LlmErrorKind,
}

/// Hears of retries and failovers.
pub trait CallObserver: Send + Sync {
    /// Before a retry's delay.
    fn retrying(&self, notice: &RetryNotice);
    /// Before the first call on the next provider.
    fn failing_over(&self, notice: &FailoverNotice);
    /// After a call that completed, with the model it was sent to and its usage.
    fn completed(&self, _model: &str, _usage: &crate::message::Usage) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct IgnoreCalls;

impl CallObserver for IgnoreCalls {
    fn retrying(&self, _notice: &RetryNotice) {}
    fn failing_over(&self, _notice: &FailoverNotice) {}
}

/// One provider and model to try.
#[derive(Clone)]
pub struct Route {
    /// Provider: the wire its client speaks.
    pub provider: Provider,
    /// The provider's name (a built-in name, a preset or a configured one, SPEC 10.7).
    pub name: String,
    /// Model id sent on this route.
    pub model: String,
    /// The client.
    pub client: Arc<dyn LlmClient>,
}

impl Route {
    /// A route to a built-in provider, named as the provider.
    pub fn new(provider: Provider, model: impl Into<String>, client: Arc<dyn LlmClient>) -> Route {
        Route {
            provider,
            name: provider.as_str().to_owned(),
            model: model.into(),
            client,
        }
    }
}

/// Retries and failover over a chain of routes; see the module docs.
pub struct Resilient {
    routes: Vec<Route>,
    current: AtomicUsize,
    policy: RetryPolicy,
    sleeper: Arc<dyn Sleeper>,
    jitter: Arc<dyn Jitter>,
    observer: Arc<dyn CallObserver>,
}

impl Resilient {
    /// A chain starting at `primary` and failing over along `fallbacks`, with the SPEC
    /// policy, real sleeps, random jitter and no observer.
    pub fn new(primary: Route, fallbacks: Vec<Route>) -> Resilient {
        let mut routes = vec![primary];
        routes.extend(fallbacks);
        Resilient {
            routes,
            current: AtomicUsize::new(0),
            policy: RetryPolicy::default(),
            sleeper: Arc::new(TokioSleeper),
            jitter: Arc::new(RandomJitter),
            observer: Arc::new(IgnoreCalls),
        }
    }

    /// Replaces the retry schedule.
    pub fn with_policy(mut self, policy: RetryPolicy) -> Resilient {
        self.policy = policy;
        self
    }

    /// Replaces the sleeper and the jitter source.
    pub fn with_timing(mut self, sleeper: Arc<dyn Sleeper>, jitter: Arc<dyn Jitter>) -> Resilient {
        self.sleeper = sleeper;
        self.jitter = jitter;
        self
    }

    /// Sets the observer.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Resilient {
        self.observer = observer;
        self
    }

    /// The route calls go to now (after any failover).
    pub fn current_route(&self) -> &Route {
        let index = self
            .current
            .load(Ordering::Relaxed)
            .min(self.routes.len() - 1);
        &self.routes[index]
    }

    async fn run(
        &self,
        request: &Request,
        sink: &mut StreamSink<'_>,
    ) -> Result<Response, LlmError> {
        let mut index = self
            .current
            .load(Ordering::Relaxed)
            .min(self.routes.len() - 1);
        loop {
            let route = &self.routes[index];
            let routed;
            let request = if index == 0 || route.model == request.model {
                request
            } else {
                routed = Request {
                    model: route.model.clone(),
                    ..request.clone()
                };
                &routed
            };
            let error = match self.with_retries(route, request, sink).await {
                Ok(response) => {
                    self.observer.completed(&request.model, &response.usage);
                    return Ok(response);
                }
                Err(error) => error,
            };
            let Some(next) = self
                .routes
                .get(index + 1)
                .filter(|_| error.kind.allows_failover())
            else {
                return Err(error);
            };
            tracing::debug!(from = %route.provider, to = %next.provider, kind = error.kind.as_str(), "failing over");
            self.observer.failing_over(&FailoverNotice {
                from_provider: route.provider,
                from_name: route.name.clone(),
                from_model: request.model.clone(),
                to_provider: next.provider,
                to_name: next.name.clone(),
                to_model: next.model.clone(),
                error_kind: error.kind,
            });
            index += 1;
            self.current.store(index, Ordering::Relaxed);
        }
    }

    async fn with_retries(
        &self,
        route: &Route,
        request: &Request,
        sink: &mut StreamSink<'_>,
    ) -> Result<Response, LlmError> {
        let mut retry = 0;
        loop {
            let error = match route.client.complete_streaming(request, &mut *sink).await {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
            retry += 1;
            let Some(delay) = self.policy.delay(retry, &error, self.jitter.factor()) else {
                return Err(error);
            };
            tracing::debug!(provider = %route.provider, retry, delay_ms = delay.as_millis() as u64, "retrying LLM call");
            self.observer.retrying(&RetryNotice {
                provider: route.provider,
                model: request.model.clone(),
                attempt: retry,
                delay,
                error_kind: error.kind,
                status_code: error.status,
            });
            self.sleeper.sleep(delay).await;
        }
    }
}

impl LlmClient for Resilient {
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(self.run(request, sink))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: LlmErrorKind, retry_after: Option<u64>) -> LlmError {
        let mut error = LlmError::new(kind, "test", "x");
        error.retry_after = retry_after.map(Duration::from_secs);
        error
    }

    #[test]
    fn delays_follow_spec_9_2() {
        let policy = RetryPolicy::default();
        let server = error(LlmErrorKind::Server, None);
        let delays: Vec<_> = (1..=4).map(|n| policy.delay(n, &server, 1.0)).collect();
        assert_eq!(
            delays,
            [
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(2)),
                Some(Duration::from_secs(4)),
                None
            ]
        );
        assert_eq!(
            policy.delay(1, &server, 0.5),
            Some(Duration::from_millis(500))
        );
        assert_eq!(policy.delay(3, &server, 1.5), Some(Duration::from_secs(6)));
        let capped = RetryPolicy {
            max_retries: 10,
            ..policy
        };
        assert_eq!(capped.delay(8, &server, 1.5), Some(Duration::from_secs(60)));
        assert_eq!(
            policy.delay(1, &error(LlmErrorKind::RateLimit, Some(7)), 1.4),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            policy.delay(1, &error(LlmErrorKind::RateLimit, Some(60)), 1.0),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            policy.delay(1, &error(LlmErrorKind::RateLimit, Some(61)), 1.0),
            None
        );
        assert_eq!(
            policy.delay(1, &error(LlmErrorKind::Quota, None), 1.0),
            None
        );
        assert_eq!(policy.delay(1, &error(LlmErrorKind::Auth, None), 1.0), None);
    }

    #[test]
    fn random_jitter_stays_in_range() {
        for _ in 0..1000 {
            let factor = RandomJitter.factor();
            assert!((0.5..1.5).contains(&factor), "{factor}");
        }
    }
}
