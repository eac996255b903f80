//! Acceptance 2 of issue 19: a response, command output, a goal and a workflow label
//! holding `<img src=x onerror=…>` and `<script>` are shown as text and run nothing (no
//! dialog, no console error, no such element); every page carries the headers of
//! SPEC 15; a cookie POST from another origin gets 403 and changes nothing.

use std::io::{Read, Write};
use std::net::TcpListener;

use fabro_test_support::TestEnv;

use crate::support::{cli_run, sign_in, Browser, Server};

const IMG: &str = "<img src=x onerror=alert(1)>";
const SCRIPT: &str = "<script>alert(2)</script>";

fn workflow() -> String {
    format!(
        r#"digraph hostile {{
  goal="goal {IMG}"
  start [shape=Mdiamond]
  ask [shape=box, label="label {IMG}", prompt="prompt {SCRIPT}"]
  shout [shape=parallelogram, script="printf '%s\n' 'out <img src=x onerror=alert(1)>' 'out <script>alert(2)</script>'"]
  exit [shape=Msquare]
  start -> ask -> shout -> exit
}}
"#
    )
}

fn responses() -> String {
    serde_json::json!({"default": {"text": format!("response {IMG} and {SCRIPT} [x](javascript:alert(3))")}}).to_string()
}

/// Serves one page on another origin of the same host whose form posts to `target`.
fn attacker(target: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("an address").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten().take(4) {
            let mut buffer = [0_u8; 4096];
            let _ = stream.read(&mut buffer);
            let page = format!(
                "<!doctype html><html><body><form id=f method=post action=\"{target}\"></form>\
                 <script>document.getElementById('f').submit();</script></body></html>"
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    port
}

async fn assert_nothing_ran(browser: &Browser, page: &str) {
    assert!(!browser.dialog_open().await, "{page}: a dialog opened");
    let found = browser
        .eval("return [document.querySelectorAll('img').length, document.scripts.length, \
               Array.from(document.scripts).every(function (s) { return s.src.endsWith('/ui/app.js'); }), \
               document.querySelectorAll('[onerror]').length];")
        .await;
    assert_eq!(found, serde_json::json!([0, 1, true, 0]), "{page}");
    let errors: Vec<serde_json::Value> = browser
        .console()
        .into_iter()
        .filter(|entry| entry["level"] == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "{page}: console errors {errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_stays_text_and_the_security_rules_hold() {
    let test = "hostile_text_stays_text_and_the_security_rules_hold";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let env = TestEnv::new("ui-security");
    env.write("hostile.fabro", &workflow());
    let responses = env.write("responses.json", &responses());
    let responses = responses.display().to_string();
    let responses = [("FABRO_SIMULATED_RESPONSES", responses.as_str())];
    let server = Server::start_with(&env, &responses);
    let mut child = cli_run(&env, &server, &["hostile.fabro"], &responses);
    assert!(child.wait().expect("fabro run ends").code().is_some());
    let run_id = server.api("/api/v1/runs")["runs"][0]["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    sign_in(&browser, &server).await;
    browser
        .wait_js(
            "the board lists the run",
            "return !!document.querySelector('#board tr[data-run]');",
        )
        .await;
    assert!(browser
        .text("#board")
        .await
        .contains(&format!("goal {IMG}")));
    assert_nothing_ran(&browser, "board").await;

    browser.goto(&server.url(&format!("/runs/{run_id}"))).await;
    browser
        .wait_js(
            "the log is complete",
            "return !!document.querySelector('#events li[data-event=WorkflowRunCompleted]');",
        )
        .await;
    let graph_text = browser
        .eval("return document.getElementById('node-ask').textContent;")
        .await;
    assert!(
        graph_text
            .as_str()
            .unwrap_or_default()
            .contains(&format!("label {IMG}")),
        "{graph_text}"
    );
    assert!(browser
        .text("#run-header")
        .await
        .contains(&format!("goal {IMG}")));
    assert_nothing_ran(&browser, "run page").await;

    browser
        .goto(&server.url(&format!("/runs/{run_id}/stages/2")))
        .await;
    let response = browser.text("#response .markdown").await;
    assert!(
        response.contains(IMG) && response.contains(SCRIPT),
        "{response}"
    );
    assert!(browser.text("#prompt .markdown").await.contains(SCRIPT));
    assert_eq!(
        browser
            .eval("return document.querySelector('#response .markdown a').getAttribute('href');")
            .await,
        "#"
    );
    assert_nothing_ran(&browser, "agent stage").await;

    browser
        .goto(&server.url(&format!("/runs/{run_id}/stages/3")))
        .await;
    let stdout = browser.text("#stdout").await;
    assert!(
        stdout.contains("out <img src=x onerror=alert(1)>")
            && stdout.contains("out <script>alert(2)</script>"),
        "{stdout}"
    );
    assert_nothing_ran(&browser, "command stage").await;

    // The headers of SPEC 15 on every page and asset, read by the browser itself.
    let paths = [
        "/".to_owned(),
        "/new".to_owned(),
        format!("/runs/{run_id}"),
        format!("/runs/{run_id}/live"),
        format!("/runs/{run_id}/stages/3"),
        "/ui/app.js".to_owned(),
        "/ui/app.css".to_owned(),
        "/api/v1/runs".to_owned(),
    ];
    for path in paths {
        let script = format!(
            "var done = arguments[arguments.length - 1]; fetch({path:?}).then(function (r) {{ done([r.status, \
             r.headers.get('content-security-policy'), r.headers.get('x-content-type-options'), \
             r.headers.get('referrer-policy')]); }});"
        );
        let headers = browser
            .client
            .execute_async(&script, Vec::new())
            .await
            .expect("fetch runs");
        assert_eq!(
            headers,
            serde_json::json!([200, "default-src 'self'", "nosniff", "same-origin"]),
            "{path}"
        );
    }

    // A cookie POST from another origin (another port of the same host, so the
    // SameSite=Strict cookie goes along) is refused.
    let port = attacker(server.url("/new"));
    browser.goto(&format!("http://127.0.0.1:{port}/")).await;
    browser
        .wait_js("the post was answered", "return location.pathname === '/new' && document.body.innerText.includes('cross-origin request refused');")
        .await;
    let port = attacker(server.url(&format!("/runs/{run_id}/resume")));
    browser.goto(&format!("http://127.0.0.1:{port}/")).await;
    browser
        .wait_js(
            "the resume was refused",
            "return document.body.innerText.includes('cross-origin request refused');",
        )
        .await;
    assert_eq!(
        server.api("/api/v1/runs")["runs"].as_array().map(Vec::len),
        Some(1)
    );
    browser.close().await;
}
