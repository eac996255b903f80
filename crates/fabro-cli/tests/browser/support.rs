//! The browser harness: a real `fabro server` on port 0 in a temporary `{root}` (its
//! runs in PostgreSQL with `FABRO_TEST_STORE=postgres`, see [`ServerStore`]), and
//! headless Chromium driven through chromedriver (on a free loopback port, with a fresh
//! profile). Without `chromium`/`chromedriver` the tests fail when `CI` is set and
//! otherwise say that they skipped. Browser tests take a global lock, so at most one
//! Chromium runs at a time on the small CI machine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro_test_support::{ServerProcess, ServerStore, TestEnv};
use fantoccini::error::{CmdError, ErrorStatus};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// One browser at a time.
static BROWSER_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a condition may take to hold.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|directory| directory.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// A running `fabro server`, stopped with SIGTERM when dropped.
pub(crate) struct Server {
    process: ServerProcess,
    store: Arc<ServerStore>,
}

impl std::ops::Deref for Server {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}

impl Server {
    /// Starts `fabro server --bind 127.0.0.1:0` in `env`, on the store
    /// `FABRO_TEST_STORE` names (see [`ServerStore::for_test`]).
    pub(crate) fn start(env: &TestEnv) -> Server {
        Server::start_with(env, &[])
    }

    /// [`Server::start`] with `extra_env` (what the runs it executes need).
    pub(crate) fn start_with(env: &TestEnv, extra_env: &[(&str, &str)]) -> Server {
        let store = ServerStore::for_test(env);
        Server::start_program(
            env,
            Path::new(env!("CARGO_BIN_EXE_fabro")),
            "127.0.0.1:0",
            extra_env,
            store,
        )
    }

    /// Starts the server on `bind` (a restarted server takes its predecessor's port) on
    /// the files of the home, whatever `FABRO_TEST_STORE` says.
    pub(crate) fn start_local_at(env: &TestEnv, bind: &str, extra_env: &[(&str, &str)]) -> Server {
        let program = Path::new(env!("CARGO_BIN_EXE_fabro"));
        Server::start_program(env, program, bind, extra_env, ServerStore::local())
    }

    /// Starts `program` (a `fabro` binary, e.g. a release build) as the server on `store`.
    pub(crate) fn start_program(
        env: &TestEnv,
        program: &Path,
        bind: &str,
        extra_env: &[(&str, &str)],
        store: Arc<ServerStore>,
    ) -> Server {
        let mut command = env.command(program);
        command
            .args(["server", "--bind", bind])
            .env("FABRO_PROVIDER", "simulated")
            .envs(store.server_env())
            .envs(extra_env.iter().copied());
        Server {
            process: ServerProcess::spawn(command),
            store,
        }
    }

    /// Whether local `fabro` commands see this server's runs (its store is the home).
    pub(crate) fn shares_home(&self) -> bool {
        self.store.is_home()
    }

    /// The run's stored events, read through the API page by page; none while the
    /// server does not know the run yet.
    pub(crate) fn events(&self, run_id: &str) -> Vec<Value> {
        let mut events: Vec<Value> = Vec::new();
        loop {
            let after = events
                .last()
                .and_then(|event| event["id"].as_u64())
                .unwrap_or(0);
            let path = format!("/api/v1/runs/{run_id}/events?after={after}");
            let bearer = format!("Bearer {}", self.token);
            let (status, _, body) = http(
                &self.address,
                "GET",
                &path,
                &[("Authorization", &bearer)],
                "",
            );
            if status == 404 && events.is_empty() {
                return events;
            }
            assert_eq!(status, 200, "GET {path}: {body}");
            let page: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let Some(more) = page["events"].as_array().filter(|more| !more.is_empty()) else {
                return events;
            };
            events.extend(more.iter().cloned());
        }
    }

    /// `http://{address}{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// A GET over the API with the bearer token, as JSON.
    pub(crate) fn api(&self, path: &str) -> Value {
        let (status, _, body) = http(
            &self.address,
            "GET",
            path,
            &[("Authorization", &format!("Bearer {}", self.token))],
            "",
        );
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    /// Waits until the run's status is one of `statuses`.
    pub(crate) fn wait_status(&self, run_id: &str, statuses: &[&str]) -> Value {
        let deadline = Instant::now() + PATIENCE * 2;
        loop {
            let document = self.api(&format!("/api/v1/runs/{run_id}"));
            if statuses.iter().any(|status| document["status"] == *status) {
                return document;
            }
            assert!(
                Instant::now() < deadline,
                "run {run_id} never reached {statuses:?}: {document}; server: {:?}",
                self.stderr_lines()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.process.pid()).unwrap_or(0)),
            nix::sys::signal::Signal::SIGTERM,
        );
        // Killed when still running after that.
        let _ = self.process.exit_within(Duration::from_secs(10));
    }
}

/// One HTTP/1.1 request on loopback: status, headers (lower-case names) and body.
pub(crate) fn http(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(address).expect("the server accepts connections");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream
        .write_all(request.as_bytes())
        .expect("the request is sent");
    let _ = stream.set_read_timeout(Some(PATIENCE));
    // Read the head, then exactly Content-Length bytes (some servers keep the
    // connection open despite `Connection: close`).
    let mut response = Vec::new();
    let mut chunk = [0_u8; 8192];
    let head_end = loop {
        if let Some(end) = response.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break response.len(),
            Ok(read) => response.extend_from_slice(&chunk[..read]),
        }
    };
    let head = String::from_utf8_lossy(&response[..head_end.min(response.len())]).into_owned();
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok());
    let body_start = (head_end + 4).min(response.len());
    let mut body_bytes = response[body_start..].to_vec();
    while length.is_none_or(|length| body_bytes.len() < length) {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(read) => body_bytes.extend_from_slice(&chunk[..read]),
        }
    }
    let body = String::from_utf8_lossy(&body_bytes).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, body)
}

/// Headless Chromium behind chromedriver.
pub(crate) struct Browser {
    driver: Child,
    driver_address: String,
    /// The WebDriver client.
    pub(crate) client: Client,
    session: String,
    _profile: tempfile::TempDir,
    _lock: tokio::sync::MutexGuard<'static, ()>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

impl Browser {
    /// Starts a browser, or `None` (after saying why) when Chromium is not installed and
    /// `CI` is not set; with `CI` set a missing browser fails the test.
    pub(crate) async fn start(test: &str) -> Option<Browser> {
        let chromium = find_program(&["chromium", "chromium-browser"]);
        let driver = find_program(&["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let why = "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)";
            assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
            fabro_test_support::skip(test, why);
            return None;
        };
        let lock = BROWSER_LOCK.lock().await;
        let port = free_port();
        let mut command = Command::new(driver);
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let driver = command.spawn().expect("chromedriver starts");
        let driver_address = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&driver_address).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver never listened on {driver_address}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::Builder::new()
            .prefix("fabro-chromium-")
            .tempdir()
            .expect("a temporary profile directory");
        let client = connect(&driver_address, &chromium, profile.path()).await;
        let session = client
            .session_id()
            .await
            .ok()
            .flatten()
            .expect("a WebDriver session id");
        Some(Browser {
            driver,
            driver_address,
            client,
            session,
            _profile: profile,
            _lock: lock,
        })
    }

    /// Navigates to `url` and waits for the document to load.
    pub(crate) async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigation works");
    }

    /// Runs `script` (a function body) in the page.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|error| panic!("script {script:?} failed: {error}"))
    }

    /// Waits until `script` returns true.
    pub(crate) async fn wait_js(&self, what: &str, script: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if self.client.execute(script, Vec::new()).await.ok() == Some(Value::Bool(true)) {
                return;
            }
            if Instant::now() > deadline {
                let html = self.client.source().await.unwrap_or_default();
                panic!(
                    "never true: {what} ({script}); page: {}",
                    html.chars().take(4000).collect::<String>()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The text of the first element `css` matches, or empty.
    pub(crate) async fn text(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Clicks the first element `css` matches. A live page may replace the element
    /// between finding and clicking it (the run page renders its buttons again on each
    /// status change): the new one is found and clicked.
    pub(crate) async fn click(&self, css: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let element = self
                .client
                .wait()
                .at_most(PATIENCE)
                .for_element(Locator::Css(css))
                .await
                .unwrap_or_else(|error| panic!("no element {css}: {error}"));
            match element.click().await {
                Ok(()) => return,
                Err(CmdError::Standard(error))
                    if error.error == ErrorStatus::StaleElementReference
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(error) => panic!("cannot click {css}: {error}"),
            }
        }
    }

    /// The browser console's entries so far (chromedriver's log endpoint).
    pub(crate) fn console(&self) -> Vec<Value> {
        let (status, _, body) = http(
            &self.driver_address,
            "POST",
            &format!("/session/{}/se/log", self.session),
            &[("Content-Type", "application/json")],
            &json!({"type": "browser"}).to_string(),
        );
        assert_eq!(status, 200, "browser log: {body}");
        let value: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        value["value"].as_array().cloned().unwrap_or_default()
    }

    /// Whether a JavaScript dialog (alert, confirm, prompt) is open.
    pub(crate) async fn dialog_open(&self) -> bool {
        self.client.get_alert_text().await.is_ok()
    }

    /// Saves a PNG screenshot as `docs/ui/{name}.png` when `FABRO_UI_SCREENSHOTS=1`.
    pub(crate) async fn screenshot(&self, name: &str) {
        if std::env::var("FABRO_UI_SCREENSHOTS").as_deref() != Ok("1") {
            return;
        }
        let png = self.client.screenshot().await.expect("a screenshot");
        let directory = fabro_test_support::workspace_root().join("docs").join("ui");
        fs_err::create_dir_all(&directory).expect("docs/ui is writable");
        fs_err::write(directory.join(format!("{name}.png")), png)
            .expect("the screenshot is written");
    }

    /// Ends the session and the driver.
    pub(crate) async fn close(self) {
        // Ending the session can wait on the client's other handle; the driver's
        // process group is killed on drop in any case.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.client.clone().close()).await;
    }
}

async fn connect(driver: &str, chromium: &Path, profile: &Path) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--disable-dev-shm-usage", "--window-size=1280,800",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    capabilities.insert("unhandledPromptBehavior".to_owned(), json!("ignore"));
    capabilities.insert("goog:loggingPrefs".to_owned(), json!({"browser": "ALL"}));
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://{driver}"))
        .await
        .expect("chromedriver opens a Chromium session")
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the Chromium it started share a process group.
        let group = nix::unistd::Pid::from_raw(i32::try_from(self.driver.id()).unwrap_or(0));
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

/// Signs the browser in through `/?token=`.
pub(crate) async fn sign_in(browser: &Browser, server: &Server) {
    browser
        .goto(&server.url(&format!("/?token={}", server.token)))
        .await;
    browser
        .wait_js(
            "the board",
            "return document.body.dataset.page === 'board';",
        )
        .await;
}

/// Makes the test's working directory a git repository with one commit.
pub(crate) fn git_init(env: &TestEnv) {
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &["commit", "-q", "-m", "init", "--allow-empty"],
    ] {
        let output = env.command("git").args(args).output().expect("git runs");
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Starts `fabro run {args}` in the background in `env`: a CLI process that executes the
/// run in the home when `server` keeps its runs there (the server follows it), else with
/// `--server`, so that the server, on PostgreSQL, executes it. `extra_env` is for the
/// process that executes the run: the server must have been started with it too.
pub(crate) fn cli_run(
    env: &TestEnv,
    server: &Server,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> Child {
    let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
    command
        .arg("run")
        .args(args)
        .args(["--provider", "simulated", "--auto-approve"])
        .envs(extra_env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if !server.shares_home() {
        command.args(["--server", &server.url("")]);
    }
    command.spawn().expect("fabro run starts")
}
