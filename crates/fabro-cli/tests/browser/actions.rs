//! Acceptance 1 and 3 of issue 19, actions: the new-run form shows an invalid
//! workflow's diagnostics with line and column and starts nothing; a valid one starts
//! and lands on the run page; human gates are answered by clicking an option and with
//! the keyboard alone (Tab to the button, Enter), and the run follows those edges;
//! a run is cancelled and resumed from its page.

use fabro_test_support::TestEnv;
use fantoccini::Locator;

use crate::support::{sign_in, Browser, Server};

const INVALID: &str = "digraph broken {\n  start [shape=Mdiamond]\n  start -> \n}\n";

const GATES: &str = r#"digraph gates {
  goal="Pick a path"
  start [shape=Mdiamond]
  review [shape=hexagon, label="Review the change"]
  approve [shape=parallelogram, script="echo approved"]
  revise [shape=parallelogram, script="echo revised"]
  confirm [shape=hexagon, label="Confirm", human.default_choice="yes"]
  exit [shape=Msquare]
  start -> review
  review -> approve [label="[A] Approve"]
  review -> revise [label="[R] Revise"]
  approve -> exit
  revise -> confirm
  confirm -> exit [label="[Y] Yes"]
  confirm -> revise [label="[N] No"]
}
"#;

const SLEEPY: &str = r#"digraph sleepy {
  goal="Take a nap"
  start [shape=Mdiamond]
  nap [shape=parallelogram, script="sleep 4"]
  exit [shape=Msquare]
  start -> nap -> exit
}
"#;

async fn start_from_form(browser: &Browser, server: &Server, source: &str) {
    browser.goto(&server.url("/new")).await;
    let field = browser
        .client
        .find(Locator::Css("#source"))
        .await
        .expect("the DOT field");
    field.send_keys(source).await.expect("typing DOT");
    browser
        .client
        .find(Locator::Css("#provider option[value=simulated]"))
        .await
        .expect("the simulated provider")
        .click()
        .await
        .expect("choosing a provider");
    browser.click("#start").await;
}

async fn run_id_of_page(browser: &Browser) -> String {
    browser
        .wait_js(
            "the run page",
            "return document.body.dataset.page === 'run';",
        )
        .await;
    browser
        .eval("return document.body.dataset.run;")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_started_answered_cancelled_and_resumed_from_the_pages() {
    let test = "runs_are_started_answered_cancelled_and_resumed_from_the_pages";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let env = TestEnv::new("ui-actions");
    let server = Server::start(&env);
    sign_in(&browser, &server).await;

    // An invalid workflow: diagnostics with line:column, nothing started.
    start_from_form(&browser, &server, INVALID).await;
    browser
        .wait_js(
            "diagnostics are shown",
            "return !!document.getElementById('diagnostics');",
        )
        .await;
    let diagnostics = browser.text("#diagnostics").await;
    assert!(
        diagnostics.lines().any(|line| {
            let position = line.split(' ').next().unwrap_or_default();
            let mut parts = position.split(':');
            parts
                .next()
                .is_some_and(|line| line.parse::<u32>().is_ok_and(|n| n >= 3))
                && parts
                    .next()
                    .is_some_and(|column| column.parse::<u32>().is_ok())
        }),
        "{diagnostics}"
    );
    assert!(browser
        .eval("return document.getElementById('source').value;")
        .await
        .as_str()
        .unwrap_or_default()
        .contains("digraph broken"));
    assert_eq!(
        server.api("/api/v1/runs")["runs"].as_array().map(Vec::len),
        Some(0)
    );

    // Human gates: click one option, answer the next with the keyboard alone.
    start_from_form(&browser, &server, GATES).await;
    let run_id = run_id_of_page(&browser).await;
    browser
        .wait_js(
            "the question shows its options",
            "return document.querySelectorAll('#question button[data-key]').length === 2;",
        )
        .await;
    let options = browser.text("#question .options").await;
    assert!(
        options.contains('A') && options.contains("Approve") && options.contains("Revise"),
        "{options}"
    );
    browser.click("#question button[data-key=R]").await;
    browser
        .wait_js(
            "the second question",
            "var b = document.querySelector('#question button[data-key=Y]'); return !!b;",
        )
        .await;
    assert!(browser
        .text("#question button.default")
        .await
        .contains("Yes"));
    assert!(browser
        .text("#question button.default")
        .await
        .contains("(default)"));
    let mut reached = false;
    for _ in 0..120 {
        let active = browser
            .client
            .active_element()
            .await
            .expect("an active element");
        if active.attr("data-key").await.ok().flatten().as_deref() == Some("Y") {
            if active.send_keys("\u{E007}").await.is_ok() {
                reached = true;
                break;
            }
            continue;
        }
        // The live refresh may replace the focused element (and focus its successor):
        // a stale reference is just asked again.
        let _ = active.send_keys("\u{E004}").await;
    }
    assert!(reached, "Tab never reached the Yes button");
    let document = server.wait_status(&run_id, &["success"]);
    let nodes: Vec<&str> = document["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|stage| stage["node_id"].as_str())
        .collect();
    assert_eq!(
        nodes,
        ["start", "review", "revise", "confirm", "exit"],
        "{document}"
    );
    browser
        .wait_js(
            "the page shows success",
            "return document.getElementById('run-status').textContent.includes('success');",
        )
        .await;

    // Cancel and resume from the run page.
    start_from_form(&browser, &server, SLEEPY).await;
    let run_id = run_id_of_page(&browser).await;
    browser
        .wait_js("nap is running", "var g = document.getElementById('node-nap'); return !!g && g.classList.contains('status-running');")
        .await;
    browser.click("#cancel").await;
    browser
        .wait_js("the run is canceled", "return document.getElementById('run-status').dataset.status === 'canceled' && !!document.getElementById('resume');")
        .await;
    assert_eq!(
        server.api(&format!("/api/v1/runs/{run_id}"))["status"],
        "canceled"
    );
    browser.click("#resume").await;
    browser
        .wait_js(
            "the resumed run succeeds",
            "return document.getElementById('run-status').dataset.status === 'success';",
        )
        .await;
    server.wait_status(&run_id, &["success"]);
    browser.close().await;
}
