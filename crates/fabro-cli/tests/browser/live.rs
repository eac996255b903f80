//! Acceptance 1 of issue 19, live parts: a run started by the CLI appears on the board
//! and changes status without a reload; the run page's graph marks the running node,
//! then success and fail per node; the stage page shows the prompt, the response, the
//! tool calls, a growing log tail of a running command and the diff of a stage that
//! changed a file.

use fabro_test_support::TestEnv;

use crate::support::{cli_run, git_init, sign_in, Browser, Server};

const WORKFLOW: &str = r#"digraph live {
  goal="Watch the board"
  start [shape=Mdiamond]
  ask [shape=box, prompt="Write **notes** for the <b>team</b>"]
  slow [shape=parallelogram, script="for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo line$i; sleep 0.5; done"]
  pause [shape=parallelogram, script="sleep 3"]
  edit [shape=parallelogram, script="echo changed >> tracked.txt"]
  bad [shape=parallelogram, script="echo broken; exit 1"]
  exit [shape=Msquare]
  start -> ask -> slow -> pause -> edit -> bad -> exit
}
"#;

const RESPONSES: &str = r#"{"nodes": {"ask": [
  {"tool_calls": [{"name": "write_file", "arguments": {"file_path": "notes.txt", "content": "hello notes\n"}}]},
  {"text": "Wrote the **notes** file."}]}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_run_is_followed_live_on_the_board_the_run_page_and_the_stage_page() {
    let test = "a_cli_run_is_followed_live_on_the_board_the_run_page_and_the_stage_page";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let env = TestEnv::new("ui-live");
    env.write("live.fabro", WORKFLOW);
    env.write("tracked.txt", "first\n");
    let responses = env.write("responses.json", RESPONSES);
    git_init(&env);
    let responses = responses.display().to_string();
    let responses = [("FABRO_SIMULATED_RESPONSES", responses.as_str())];
    let server = Server::start_with(&env, &responses);
    sign_in(&browser, &server).await;
    browser
        .eval("window.__sameDocument = true; return true;")
        .await;
    let mut child = cli_run(&env, &server, &["live.fabro"], &responses);
    // The board picks the run up and shows it running, without a reload.
    browser
        .wait_js("the run is running on the board",
            "var row = document.querySelector('#board tr[data-run]'); return !!row && row.dataset.status === 'running';")
        .await;
    let run_id = browser
        .eval("return document.querySelector('#board tr[data-run]').dataset.run;")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        browser.eval("return window.__sameDocument === true;").await,
        true
    );
    assert!(browser.text("[data-count=running]").await.contains('1'));
    browser.screenshot("board-1280x800").await;

    // The run page marks the running command node.
    browser.goto(&server.url(&format!("/runs/{run_id}"))).await;
    browser
        .wait_js("slow is marked running",
            "var g = document.getElementById('node-slow'); return !!g && g.classList.contains('status-running') && g.classList.contains('current');")
        .await;
    browser
        .wait_js(
            "the event log follows",
            "return document.querySelectorAll('#events li[data-event=StageStarted]').length >= 3;",
        )
        .await;
    browser.screenshot("run-page-1280x800").await;
    browser
        .client
        .set_window_size(390, 844)
        .await
        .expect("resize");
    browser.screenshot("run-page-390x844").await;
    browser
        .client
        .set_window_size(1280, 800)
        .await
        .expect("resize");

    // The stage page of the running command: its log tail grows without a reload.
    browser
        .goto(&server.url(&format!("/runs/{run_id}/stages/3")))
        .await;
    browser
        .eval("window.__sameDocument = true; return true;")
        .await;
    browser
        .wait_js(
            "stdout shows the first lines",
            "return document.getElementById('stdout').textContent.includes('line2');",
        )
        .await;
    let early = browser.text("#stdout").await;
    assert!(!early.contains("line12"), "{early}");
    browser
        .wait_js("stdout grows", "return window.__sameDocument === true && document.getElementById('stdout').textContent.includes('line6');")
        .await;

    // Back on the run page while `pause` runs: nodes turn success and fail live.
    browser
        .wait_js(
            "slow finished",
            "return document.body.dataset.status === 'success';",
        )
        .await;
    browser.goto(&server.url(&format!("/runs/{run_id}"))).await;
    browser
        .eval("window.__sameDocument = true; return true;")
        .await;
    browser
        .wait_js("pause is running", "var g = document.getElementById('node-pause'); return !!g && g.classList.contains('status-running');")
        .await;
    browser
        .wait_js("bad failed and the rest succeeded",
            "var ok = ['start','ask','slow','pause','edit','exit'].every(function (n) { return document.getElementById('node-' + n).classList.contains('status-success'); });\
             return ok && document.getElementById('node-bad').classList.contains('status-fail') && window.__sameDocument === true;")
        .await;
    // The stage table, loaded while `pause` ran, gains the later stages in place.
    browser
        .wait_js(
            "the stage table shows bad failed",
            "return !!document.querySelector('#stages tr[data-node=bad] [data-status=fail]') && window.__sameDocument === true;",
        )
        .await;
    browser
        .wait_js(
            "the header says partial_success",
            "return document.getElementById('run-status').textContent.includes('partial_success');",
        )
        .await;
    assert!(child.wait().expect("fabro run ends").code().is_some());

    // Each graph node links to its stage.
    browser
        .wait_js("nodes link to stages", "var a = document.getElementById('node-edit').parentNode; return a.nodeName.toLowerCase() === 'a' && a.getAttribute('href').endsWith('/stages/5');")
        .await;

    // The agent stage: prompt and response rendered, tool calls, the diff of its file.
    browser
        .goto(&server.url(&format!("/runs/{run_id}/stages/2")))
        .await;
    assert_eq!(browser.text("#prompt .markdown strong").await, "notes");
    assert!(browser
        .text("#prompt .markdown")
        .await
        .contains("<b>team</b>"));
    assert_eq!(browser.text("#response .markdown strong").await, "notes");
    assert!(browser.text(".calls").await.contains("write_file"));
    assert!(browser.text("pre.diff .add").await.contains("+hello notes"));

    // The command stage that changed a tracked file: its coloured diff.
    browser
        .goto(&server.url(&format!("/runs/{run_id}/stages/5")))
        .await;
    let added = browser.text("pre.diff .add").await;
    assert!(added.contains("+changed"), "{added}");
    let colour = browser
        .eval("return getComputedStyle(document.querySelector('pre.diff .add')).backgroundColor;")
        .await;
    assert_ne!(colour, "rgba(0, 0, 0, 0)");
    browser.screenshot("stage-diff-1280x800").await;
    browser
        .client
        .set_window_size(390, 844)
        .await
        .expect("resize");
    browser.screenshot("stage-diff-390x844").await;
    browser
        .client
        .set_window_size(1280, 800)
        .await
        .expect("resize");

    // The board's counters follow the finished run.
    sign_in(&browser, &server).await;
    browser
        .wait_js(
            "the board counts the finished run",
            "return document.querySelector('[data-count=partial_success]').textContent === '1';",
        )
        .await;
    browser
        .client
        .set_window_size(390, 844)
        .await
        .expect("resize");
    browser.screenshot("board-390x844").await;
    browser.close().await;
}
