//! Failover (SPEC 9.4): quota errors move to the next provider without retries, with the
//! closest model, and the observer hears of it.

use std::sync::{Arc, Mutex};

use fabro_llm::{
    catalog, CallObserver, FailoverNotice, FixedJitter, LlmClient, LlmErrorKind, Provider,
    RecordingSleeper, Resilient, RetryNotice, Route,
};
use fabro_twin::{Reply, Twin};

use super::client;
use super::provider::request;

#[derive(Default)]
struct Notes {
    retries: Mutex<Vec<RetryNotice>>,
    failovers: Mutex<Vec<FailoverNotice>>,
}

impl CallObserver for Notes {
    fn retrying(&self, notice: &RetryNotice) {
        self.retries
            .lock()
            .expect("not poisoned")
            .push(notice.clone());
    }
    fn failing_over(&self, notice: &FailoverNotice) {
        self.failovers
            .lock()
            .expect("not poisoned")
            .push(notice.clone());
    }
}

#[tokio::test]
async fn quota_fails_over_to_the_closest_model_without_retrying() {
    let anthropic = Twin::start().await.expect("twin starts");
    let openai = Twin::start().await.expect("twin starts");
    anthropic.set_fallback(Reply::quota());
    openai.enqueue([Reply::text("answered by openai")]);
    let closest =
        catalog::closest_model("claude-sonnet-4-6", Provider::OpenAi, true).expect("a model");
    let notes = Arc::new(Notes::default());
    let sleeper = Arc::new(RecordingSleeper::default());
    let client = Resilient::new(
        Route::new(
            Provider::Anthropic,
            "claude-sonnet-4-6".to_owned(),
            client(Provider::Anthropic, &anthropic),
        ),
        vec![Route::new(
            Provider::OpenAi,
            closest.id.to_owned(),
            client(Provider::OpenAi, &openai),
        )],
    )
    .with_timing(sleeper.clone(), Arc::new(FixedJitter(1.0)))
    .with_observer(notes.clone());
    let response = client
        .complete(&request("claude-sonnet-4-6"))
        .await
        .expect("succeeds on the fallback");
    assert_eq!(response.text, "answered by openai");
    assert_eq!(response.model, "gpt-5.4");
    assert_eq!(anthropic.request_count(), 1, "quota is not retried");
    assert!(sleeper.delays().is_empty());
    assert_eq!(openai.requests()[0].body["model"], "gpt-5.4");
    let failovers = notes.failovers.lock().expect("not poisoned").clone();
    assert_eq!(
        failovers,
        [FailoverNotice {
            from_provider: Provider::Anthropic,
            from_name: "anthropic".to_owned(),
            from_model: "claude-sonnet-4-6".to_owned(),
            to_provider: Provider::OpenAi,
            to_name: "openai".to_owned(),
            to_model: "gpt-5.4".to_owned(),
            error_kind: LlmErrorKind::Quota,
        }]
    );
    // The switch is sticky: the next call goes straight to OpenAI.
    let again = client
        .complete(&request("claude-sonnet-4-6"))
        .await
        .expect("succeeds");
    assert_eq!(again.text, "twin reply");
    assert_eq!(anthropic.request_count(), 1);
    assert_eq!(client.current_route().provider, Provider::OpenAi);
}

#[tokio::test]
async fn transient_errors_retry_before_failing_over_and_auth_never_fails_over() {
    let gemini = Twin::start().await.expect("twin starts");
    let anthropic = Twin::start().await.expect("twin starts");
    gemini.set_fallback(Reply::server_error());
    let notes = Arc::new(Notes::default());
    let routes = |gemini: &Twin, anthropic: &Twin| {
        (
            Route::new(
                Provider::Gemini,
                "gemini-3.1-pro-preview".to_owned(),
                client(Provider::Gemini, gemini),
            ),
            vec![Route::new(
                Provider::Anthropic,
                "claude-sonnet-4-6".to_owned(),
                client(Provider::Anthropic, anthropic),
            )],
        )
    };
    let (primary, fallbacks) = routes(&gemini, &anthropic);
    let client_chain = Resilient::new(primary, fallbacks)
        .with_timing(
            Arc::new(RecordingSleeper::default()),
            Arc::new(FixedJitter(1.0)),
        )
        .with_observer(notes.clone());
    let response = client_chain
        .complete(&request("gemini-3.1-pro-preview"))
        .await
        .expect("fails over");
    assert_eq!(response.text, "twin reply");
    assert_eq!(gemini.request_count(), 4, "retried three times first");
    assert_eq!(notes.retries.lock().expect("not poisoned").len(), 3);
    let retry = notes.retries.lock().expect("not poisoned")[0].clone();
    assert_eq!((retry.attempt, retry.status_code), (1, Some(500)));
    assert_eq!(
        notes.failovers.lock().expect("not poisoned")[0].error_kind,
        LlmErrorKind::Server
    );

    let gemini = Twin::start().await.expect("twin starts");
    let anthropic = Twin::start().await.expect("twin starts");
    gemini.set_fallback(Reply::unauthorized());
    let (primary, fallbacks) = routes(&gemini, &anthropic);
    let error = Resilient::new(primary, fallbacks)
        .complete(&request("gemini-3.1-pro-preview"))
        .await
        .expect_err("auth does not fail over");
    assert_eq!(error.kind, LlmErrorKind::Auth);
    assert_eq!(anthropic.request_count(), 0);
}
