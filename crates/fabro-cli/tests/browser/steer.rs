//! Issue 35 acceptance 1, the run page (SPEC 20.1): while an agent stage's tool runs,
//! the page of a run that `fabro run` executes (through the server on PostgreSQL) shows
//! a steering box; what is typed into it and sent is queued (`SteeringQueued`, source
//! `ui`) and read by the agent, once, in the request after the tool result as
//! `[Steering from ui] {text}`. The agent talks
//! to the LLM twin; its `shell` call waits for a file the test creates.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use fabro_twin::{Reply, Turn, Twin};
use fantoccini::Locator;
use serde_json::{json, Value};

use crate::support::{sign_in, Browser, Server, PATIENCE};

const KEY: &str = "sk-ant-ui-steer-key";

const AGENT: &str = r#"digraph steer {
  goal="Fix the parser"
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [provider="anthropic", model="sonnet", prompt="Fix the parser"]
  start -> work -> exit
}
"#;

fn named(server: &Server, run_id: &str, name: &str) -> Vec<Value> {
    server
        .events(run_id)
        .into_iter()
        .filter(|event| event["event"] == name)
        .collect()
}

/// Waits until the run has an event `name`.
async fn wait_event(server: &Server, run_id: &str, name: &str) -> Value {
    let deadline = Instant::now() + PATIENCE * 2;
    loop {
        if let Some(event) = named(server, run_id, name).into_iter().next() {
            return event;
        }
        assert!(
            Instant::now() < deadline,
            "no {name} in {:#?}",
            server.events(run_id)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A `fabro run` in the background, killed if the test fails before it ends.
struct Running(Child);

impl Running {
    async fn exit_code(&mut self) -> i32 {
        let deadline = Instant::now() + PATIENCE * 2;
        loop {
            if let Some(status) = self.0.try_wait().expect("the run can be waited for") {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "the run did not end");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_page_steers_the_running_agent() {
    let test = "the_run_page_steers_the_running_agent";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let twin = Twin::start().await.expect("the twin starts");
    twin.set_fallback(Reply::bad_request());
    let env = TestEnv::new("ui-steer");
    env.write("w.fabro", AGENT);
    let gate = env
        .work_dir()
        .parent()
        .expect("the test root")
        .join("tool-gate");
    let wait = format!(
        "while [ ! -f '{}' ]; do sleep 0.05; done; echo released",
        gate.display()
    );
    let arguments = json!({"command": wait, "timeout_ms": 300_000}).to_string();
    twin.enqueue([
        Reply::Turn(Turn::text("").with_tool_call("toolu_1", "shell", &arguments)),
        Reply::text("Fixed."),
    ]);
    let base_url = twin.base_url();
    let credentials = [
        ("ANTHROPIC_API_KEY", KEY),
        ("ANTHROPIC_BASE_URL", base_url.as_str()),
    ];
    let server = Server::start_with(&env, &credentials);
    sign_in(&browser, &server).await;

    // `fabro run` executes the run and the server steers it through its run directory;
    // on PostgreSQL, which the CLI does not write, through the server, which executes it.
    let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
    command
        .args(["run", "w.fabro", "--run-id", "ui-steer-1"])
        .envs(credentials)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if !server.shares_home() {
        // The harness's server defaults to the simulated provider (`FABRO_PROVIDER`).
        command.args(["--provider", "anthropic", "--server", &server.url("")]);
    }
    let mut run = Running(command.spawn().expect("fabro run starts"));
    let started = wait_event(&server, "ui-steer-1", "Agent.ToolCallStarted").await;
    assert_eq!(started["properties"]["call_id"], "toolu_1", "{started}");

    browser.goto(&server.url("/runs/ui-steer-1")).await;
    browser
        .wait_js(
            "the steering box",
            "return !!document.getElementById('steer-text');",
        )
        .await;
    assert!(
        browser.text("#steer label").await.contains("work"),
        "{}",
        browser.text("#steer").await
    );
    browser
        .client
        .find(Locator::Css("#steer-text"))
        .await
        .expect("the steering box")
        .send_keys("Use the v2 API")
        .await
        .expect("typing the guidance");
    browser.click("#steer-send").await;
    let queued = wait_event(&server, "ui-steer-1", "SteeringQueued").await;
    assert_eq!(queued["node_id"], "work", "{queued}");
    assert_eq!(
        queued["properties"],
        json!({"source": "ui", "text": "Use the v2 API"}),
        "{queued}"
    );
    // Back on the run page, which lists the event.
    browser
        .wait_js(
            "the queued message in the event log",
            "return document.body.dataset.page === 'run' && document.querySelectorAll('#events li[data-event=SteeringQueued]').length === 1;",
        )
        .await;
    assert_eq!(twin.request_count(), 1, "the tool still runs");

    fs_err::write(&gate, "go").expect("the gate is written");
    assert_eq!(run.exit_code().await, 0);
    let requests = twin.requests();
    assert_eq!(requests.len(), 2, "the tool call, then the answer");
    assert!(!requests[0].body.to_string().contains("Steering from"));
    let messages = requests[1].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let last = messages.last().expect("a last message");
    assert_eq!(last["role"], "user", "{last}");
    let content = last["content"].as_array().cloned().unwrap_or_default();
    let [.., result, text] = content.as_slice() else {
        panic!("too few blocks: {last}");
    };
    assert_eq!(result["type"], "tool_result", "{last}");
    assert_eq!(result["tool_use_id"], "toolu_1", "{last}");
    assert_eq!(text["text"], "[Steering from ui] Use the v2 API", "{last}");
    assert_eq!(
        requests[1]
            .body
            .to_string()
            .matches("Steering from")
            .count(),
        1
    );
    let delivered = named(&server, "ui-steer-1", "Agent.SteeringDelivered");
    assert_eq!(delivered.len(), 1, "{delivered:#?}");
    assert_eq!(delivered[0]["properties"]["count"], 1);

    // The box goes once the agent stage has ended.
    browser
        .wait_js(
            "the steering box is gone",
            "return !document.getElementById('steer-text');",
        )
        .await;
    browser.close().await;
}
