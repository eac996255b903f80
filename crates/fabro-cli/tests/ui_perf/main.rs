//! Acceptance 4 of issue 19, as a measurement: the run page of a 1,000-stage run and
//! the board of a root with 1,000 runs, timed by Chromium's own navigation timing.
//!
//! A measurement, not a test of the suite: this target has `test = false`, so `cargo
//! test` (and CI) never runs it; `cargo test -p fabro-cli --test ui_perf -- --nocapture`
//! does. The records take minutes to make, so they are made outside it:
//! `FABRO_UI_PERF_STAGES_HOME` (a `FABRO_HOME` whose newest run has 1,000 stages) and
//! `FABRO_UI_PERF_RUNS_HOME` (a `FABRO_HOME` with 1,000 runs) name them;
//! `FABRO_UI_PERF_BIN` names the `fabro` binary to serve them (default: the test's debug
//! build). The figures go to docs/benchmarks.md.

// The browser tests' helpers, of which this measurement uses a few.
#[path = "../browser/support.rs"]
#[allow(dead_code)]
mod support;

use std::path::PathBuf;

use fabro_test_support::TestEnv;
use serde_json::Value;

use support::{sign_in, Browser, Server};

/// Milliseconds from navigation start: the page's HTML received, parsed, DOMContentLoaded
/// (the deferred script has run: the page answers input), load, and the answer to the
/// script's first request for fresh data (the run page's `/live`, the board's first
/// fragment reload, made after a second), once `ready` holds; `refresh` tells that
/// request's resource timing entry `e` by its name.
async fn timings(browser: &Browser, ready: &str, refresh: &str) -> [f64; 5] {
    browser.wait_js("the page is live", ready).await;
    let value = browser
        .eval(&format!(
            "var n = performance.getEntriesByType('navigation')[0]; \
             var r = performance.getEntriesByType('resource').filter(function (e) {{ return e.initiatorType === 'fetch' && ({refresh}); }})[0]; \
             return [n.responseEnd, n.domInteractive, n.domContentLoadedEventEnd, n.loadEventEnd, r ? r.responseEnd : -1];"
        ))
        .await;
    let number = |index: usize| value[index].as_f64().unwrap_or(f64::MAX);
    [number(0), number(1), number(2), number(3), number(4)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_of_a_thousand_stages_and_a_thousand_runs_are_interactive_within_a_second() {
    let test = "the_pages_of_a_thousand_stages_and_a_thousand_runs_are_interactive_within_a_second";
    let (Ok(stages_home), Ok(runs_home)) = (
        std::env::var("FABRO_UI_PERF_STAGES_HOME"),
        std::env::var("FABRO_UI_PERF_RUNS_HOME"),
    ) else {
        panic!("{test}: FABRO_UI_PERF_STAGES_HOME and FABRO_UI_PERF_RUNS_HOME must name the records to measure (docs/benchmarks.md)");
    };
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let env = TestEnv::new("ui-perf");
    // `FABRO_UI_PERF_BIN` names another `fabro` to serve the pages (a release build).
    let program = std::env::var_os("FABRO_UI_PERF_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_fabro")), PathBuf::from);
    let serve = |home: &str| {
        let store = fabro_test_support::ServerStore::local();
        Server::start_program(
            &env,
            &program,
            "127.0.0.1:0",
            &[("FABRO_HOME", home)],
            store,
        )
    };
    let server = serve(&stages_home);
    let run: Value = server.api("/api/v1/runs");
    let run_id = run["runs"][0]["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    sign_in(&browser, &server).await;
    let mut report = Vec::new();
    // The first visit of each page warms the caches; the later ones are measured.
    let mut slowest: f64 = 0.0;
    for attempt in 0..3 {
        browser.goto(&server.url(&format!("/runs/{run_id}"))).await;
        let [html, parsed, loaded, load_end, live] = timings(
            &browser,
            "return document.querySelectorAll('#stages tr[data-rank]').length >= 1000 && document.body.dataset.status === 'success';",
            "e.name.indexOf('/live?') >= 0",
        )
        .await;
        report.push(format!("run page attempt {attempt}: HTML {html:.0} ms, parsed {parsed:.0} ms, DOMContentLoaded {loaded:.0} ms, load {load_end:.0} ms, /live answered {live:.0} ms"));
        if attempt > 0 {
            slowest = slowest.max(loaded).max(load_end).max(live);
        }
    }
    drop(server);
    let server = serve(&runs_home);
    sign_in(&browser, &server).await;
    for attempt in 0..3 {
        browser.goto(&server.url("/")).await;
        let [html, parsed, loaded, load_end, live] = timings(
            &browser,
            "return document.querySelector('[data-count=all]').textContent === '1000' && document.querySelectorAll('#board tr[data-run]').length === 50 && !!document.body.dataset.refreshed;",
            "e.name.endsWith('/')",
        )
        .await;
        report.push(format!("board attempt {attempt}: HTML {html:.0} ms, parsed {parsed:.0} ms, DOMContentLoaded {loaded:.0} ms, load {load_end:.0} ms, first refresh answered {live:.0} ms"));
        if attempt > 0 {
            slowest = slowest.max(loaded).max(load_end);
        }
    }
    for line in &report {
        eprintln!("{line}");
    }
    assert!(slowest < 1000.0, "{report:#?}");
    browser.close().await;
}
