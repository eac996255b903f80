//! Workers on one shared store (SPEC 18.2 and 18.4, issue 32): a server started with
//! `--no-worker` queues the runs it accepts in PostgreSQL, and `fabro worker` processes
//! (each with a storage directory of its own, as on several machines) claim them by
//! priority then age, hold them under two-second leases and take over the runs of a
//! worker that was killed or paused. What the tests read is the database's rows, the
//! runs' stored events and an execution log that every stage appends to.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fabro_test_support::{ServerStore, TestDatabase, TestEnv};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::server::Server;

/// The lease of every worker of these tests.
pub(crate) const LEASE_TTL: &str = "2s";

/// The database and the blob directory the server and the workers share.
pub(crate) struct Shared {
    database: TestDatabase,
    /// `FABRO_BLOBS` and the variables of its object store.
    blobs: Vec<(&'static str, String)>,
}

impl Shared {
    pub(crate) fn create(test: &str, env: &TestEnv) -> Option<Shared> {
        let blobs = env.fabro_home().with_file_name("shared-blobs");
        Shared::with_blobs(
            test,
            vec![("FABRO_BLOBS", format!("file://{}", blobs.display()))],
        )
    }

    /// A database of the test's own, with the blobs `FABRO_BLOBS` and its variables in
    /// `blobs` name.
    pub(crate) fn with_blobs(test: &str, blobs: Vec<(&'static str, String)>) -> Option<Shared> {
        let database = TestDatabase::create(test)?;
        Some(Shared { database, blobs })
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let mut variables = vec![("FABRO_STORE", self.database.url())];
        variables.extend(self.blobs.iter().cloned());
        variables
    }

    /// A server that queues the runs it accepts and executes none.
    pub(crate) fn queueing_server(&self, env: &TestEnv) -> Server {
        let variables = self.env();
        let pairs: Vec<(&str, &str)> = variables
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        Server::start_with(env, &["--no-worker"], &pairs, ServerStore::local())
    }

    /// A server that executes runs through its embedded worker (SPEC 18.2), on the
    /// home `env`.
    pub(crate) fn executing_server(&self, env: &TestEnv) -> Server {
        let variables = self.env();
        let pairs: Vec<(&str, &str)> = variables
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        Server::start_with(env, &[], &pairs, ServerStore::local())
    }

    /// One value of the database (`psql`'s unaligned output).
    pub(crate) fn query(&self, sql: &str) -> String {
        self.database.query(sql)
    }
}

/// A `fabro worker` process, killed when dropped.
pub(crate) struct Worker {
    child: Child,
    name: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Worker {
    /// Starts worker `name` with a state directory of its own and waits until it
    /// claims.
    pub(crate) fn start(env: &TestEnv, shared: &Shared, name: &str, concurrency: u16) -> Worker {
        Worker::start_with(env, shared, name, concurrency, &[])
    }

    /// [`Worker::start`] with the variables `extra` set as well (provider credentials).
    pub(crate) fn start_with(
        env: &TestEnv,
        shared: &Shared,
        name: &str,
        concurrency: u16,
        extra: &[(&str, String)],
    ) -> Worker {
        let state_dir = env.fabro_home().with_file_name(format!("state-{name}"));
        let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
        command
            .args(["worker", "--name", name, "--lease-ttl", LEASE_TTL])
            .args(["--concurrency", &concurrency.to_string()])
            .arg("--state-dir")
            .arg(&state_dir)
            .envs(shared.env())
            .envs(extra.iter().map(|(name, value)| (*name, value.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("fabro worker starts");
        let pipe = child.stderr.take().expect("stderr is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let collected = Arc::clone(&lines);
        let (ready, started) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if line.contains("claiming runs") {
                    let _ = ready.send(());
                }
                collected
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line);
            }
        });
        let worker = Worker {
            child,
            name: name.to_owned(),
            lines,
        };
        assert!(
            started.recv_timeout(Duration::from_secs(30)).is_ok(),
            "worker {name} did not start: {}",
            worker.stderr()
        );
        worker
    }

    /// Waits (at most `limit`) until `done` holds; fails saying `what` did not happen,
    /// with the worker's log.
    pub(crate) fn wait_until(&self, limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !done() {
            assert!(Instant::now() < deadline, "{what}: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn signal(&self, signal: Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        nix::sys::signal::kill(pid, signal).expect("the worker is signalled");
    }

    pub(crate) fn stderr(&self) -> String {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .join("\n")
    }

    /// Waits (at most `limit`) for the worker to exit; its exit code.
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "worker {} did not exit within {limit:?}: {}",
                self.name,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Queues run `run_id` of `workflow` through `server`, its variable `mark` set to the
/// run id.
fn queue(server: &Server, workflow: &str, run_id: &str, priority: i32) {
    post_queued(
        server,
        &json!({
            "workflow": workflow,
            "run_id": run_id,
            "vars": {"mark": run_id},
            "priority": priority,
        }),
    );
}

/// Posts the start request `request` to `server`, which queues it.
pub(crate) fn post_queued(server: &Server, request: &Value) {
    let (status, body) = server.request("POST", "/api/v1/runs", Some(request));
    assert_eq!(status, 201, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(answer["status"], "queued", "{body}");
}

/// Waits (at most `limit`) until `sql` answers `expected`.
pub(crate) fn wait_for(
    shared: &Shared,
    sql: &str,
    expected: &str,
    limit: Duration,
    workers: &[&Worker],
) {
    let deadline = Instant::now() + limit;
    loop {
        let answer = shared.query(sql);
        if answer == expected {
            return;
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = workers
                .iter()
                .map(|worker| format!("{}:\n{}", worker.name, worker.stderr()))
                .collect();
            panic!(
                "{sql} answered {answer}, not {expected}; runs:\n{}\nhow runs ended early:\n{}\n{}",
                shared.query(
                    "SELECT string_agg(run_id || ' ' || status || ' ' || coalesce(owner, '-'), E'\\n') FROM runs"
                ),
                shared.query(
                    "SELECT string_agg(run_id || ' ' || envelope, E'\\n') FROM run_events \
                     WHERE envelope::jsonb ->> 'event' IN ('WorkflowRunCanceled', 'WorkflowRunFailed')"
                ),
                logs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The workers `GET /api/v1/workers` lists.
fn workers_of(server: &Server) -> Vec<Value> {
    let (status, body) = server.request("GET", "/api/v1/workers", None);
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).expect("JSON");
    listed["workers"]
        .as_array()
        .cloned()
        .expect("a list of workers")
}

/// How long run `run_id` waited for a new worker at most: for each resumed start, the
/// time since the event before it (the last one of the killed worker, written at most a
/// stage's length before the kill).
pub(crate) fn longest_takeover(shared: &Shared, run_id: &str) -> Duration {
    let events = events_of(shared, run_id);
    let at = |event: &Value| {
        fabro_engine::parse_rfc3339(event["ts"].as_str().unwrap_or_default())
            .unwrap_or_else(|| panic!("a timestamp: {event}"))
    };
    events
        .windows(2)
        .filter(|pair| {
            pair[1]["event"] == "WorkflowRunStarted" && pair[1]["properties"]["resumed"] == true
        })
        .map(|pair| {
            at(&pair[1])
                .duration_since(at(&pair[0]))
                .unwrap_or_default()
        })
        .max()
        .unwrap_or_default()
}

/// SPEC 18.4.1's bound: a killed worker's run continues on another within `lease_ttl` +
/// 5 s.
pub(crate) const TAKEOVER_BOUND: Duration = Duration::from_secs(2 + 5);

/// The lines of the execution log.
pub(crate) fn log_lines(path: &Path) -> Vec<String> {
    fs_err::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// SPEC 18.4.5: queued runs drained by three workers each end once with their status,
/// no stage executes twice, and runs are claimed by priority, then age.
#[test]
fn queued_runs_are_drained_by_three_workers_once_each_by_priority_then_age() {
    const RUNS: usize = 1000;
    let env = TestEnv::new("workers-drain");
    let Some(shared) = Shared::create("workers_drain", &env) else {
        return;
    };
    let log = env.work_dir().join("executions.log");
    env.write(
        "drain.fabro",
        &format!(
            "digraph drain {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  mark [shape=parallelogram, script=\"echo $mark >> {log}\"]
  start -> mark -> exit
}}
",
            log = log.display()
        ),
    );
    let server = shared.queueing_server(&env);
    // Every third run has a higher priority; the rest come in the order they were made.
    let mut expected_high = Vec::new();
    let mut expected_low = Vec::new();
    for index in 0..RUNS {
        let run_id = format!("drain-{index:04}");
        let priority = i32::from(index % 3 == 2);
        queue(&server, "drain.fabro", &run_id, priority);
        if priority == 1 {
            expected_high.push(run_id);
        } else {
            expected_low.push(run_id);
        }
    }
    assert_eq!(
        shared.query("SELECT count(*) FROM runs WHERE status = 'queued'"),
        RUNS.to_string(),
        "a server with --no-worker executes nothing"
    );
    let workers: Vec<Worker> = (1..=3)
        .map(|number| Worker::start(&env, &shared, &format!("drain-{number}"), 2))
        .collect();
    let watched: Vec<&Worker> = workers.iter().collect();
    wait_for(
        &shared,
        "SELECT count(*) FROM runs WHERE status = 'success'",
        &RUNS.to_string(),
        Duration::from_secs(600),
        &watched,
    );
    assert_eq!(shared.query("SELECT count(*) FROM runs"), RUNS.to_string());

    let mut executed = log_lines(&log);
    executed.sort();
    let mut everyone: Vec<String> = expected_high.iter().chain(&expected_low).cloned().collect();
    everyone.sort();
    assert_eq!(executed, everyone, "each run's stage executed exactly once");
    assert_eq!(
        shared.query("SELECT count(DISTINCT owner) FROM runs"),
        "3",
        "all three workers took runs"
    );
    // A worker lets a lease go right after the run's end is registered, in a statement
    // of its own: every lease ends with its run, moments after the status says so.
    wait_for(
        &shared,
        "SELECT count(*) FROM runs WHERE lease_expires_at IS NOT NULL",
        "0",
        Duration::from_secs(30),
        &watched,
    );
    let listed = workers_of(&server);
    let names: Vec<&str> = listed
        .iter()
        .map(|worker| worker["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["drain-1", "drain-2", "drain-3"]);
    for worker in &listed {
        assert_eq!(worker["concurrency"], 2, "{worker}");
        assert_eq!(worker["runs"], json!([]), "{worker}");
    }

    // Claims by priority, then age: two claims at the same moment may commit in either
    // order, so a run may be displaced by at most the number of workers.
    let claimed = shared.query("SELECT string_agg(run_id, ',' ORDER BY claimed_at) FROM runs");
    let claimed: Vec<&str> = claimed.split(',').collect();
    let expected: Vec<&str> = expected_high
        .iter()
        .chain(&expected_low)
        .map(String::as_str)
        .collect();
    for (position, run_id) in claimed.iter().enumerate() {
        let wanted = expected
            .iter()
            .position(|candidate| candidate == run_id)
            .expect("a queued run");
        assert!(
            position.abs_diff(wanted) <= workers.len(),
            "run {run_id} was claimed {position}th, not about {wanted}th: {claimed:?}"
        );
    }
}

/// A run of five stages that each append their start and end to `log` and sleep.
fn staged_workflow(log: &Path) -> String {
    stages_workflow(log, 5, "")
}

/// A workflow of `count` stages in a row, each running `first` (with `{stage}` as its
/// name), then logging its start and end to `log` around a pause of 0.4 s.
pub(crate) fn stages_workflow(log: &Path, count: usize, first: &str) -> String {
    let mut nodes = String::new();
    for stage in 1..=count {
        nodes.push_str(&format!(
            "  s{stage} [shape=parallelogram, script=\"{first}echo $mark s{stage} start >> {log}; sleep 0.4; echo $mark s{stage} end >> {log}\"]\n",
            first = first.replace("{stage}", &format!("s{stage}")),
            log = log.display()
        ));
    }
    let chain: Vec<String> = (1..=count).map(|stage| format!("s{stage}")).collect();
    format!(
        "digraph staged {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
{nodes}  start -> {} -> exit
}}
",
        chain.join(" -> ")
    )
}

/// The stored event envelopes of `run_id`, in id order.
pub(crate) fn events_of(shared: &Shared, run_id: &str) -> Vec<Value> {
    let rows = shared.query(&format!(
        "SELECT string_agg(envelope, E'\\n' ORDER BY id) FROM run_events WHERE run_id = '{run_id}'"
    ));
    rows.lines()
        .map(|line| serde_json::from_str(line).expect("an envelope"))
        .collect()
}

/// What a run's stored events must show after takeovers: ids 1, 2, … without a gap or
/// a repeat; each stage checkpointed at most once (a stage whose checkpoint was stored
/// is never executed again; the event of a checkpoint may die with its worker) and
/// completed successfully at least once. A stage whose worker died after it ended but
/// before its checkpoint was stored runs again, as on one machine (SPEC 8.7), so its
/// `StageCompleted` may be stored twice.
fn check_events(shared: &Shared, run_id: &str) {
    let events = events_of(shared, run_id);
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["id"], index + 1, "run {run_id}: ids have no gap");
    }
    for stage in 1..=5 {
        let node = format!("s{stage}");
        let count = |name: &str| {
            events
                .iter()
                .filter(|event| {
                    event["event"] == name
                        && event["node_id"] == node
                        && (name != "StageCompleted" || event["properties"]["status"] == "success")
                })
                .count()
        };
        assert!(
            count("CheckpointCompleted") <= 1,
            "run {run_id}: stage {node} is checkpointed once: {events:?}"
        );
        assert!(
            count("StageCompleted") >= 1,
            "run {run_id}: stage {node} completed"
        );
    }
}

/// Workers killed with SIGKILL at random moments, each replaced by a new one.
pub(crate) struct Killings<'a> {
    pub(crate) env: &'a TestEnv,
    pub(crate) shared: &'a Shared,
    /// Workers are named `{prefix}1`, `{prefix}2`, ….
    pub(crate) prefix: &'a str,
    /// How many work at once.
    pub(crate) workers: usize,
    /// The concurrency of each.
    pub(crate) concurrency: u16,
    /// How many are killed at most.
    pub(crate) kills: usize,
    /// The pause before each kill: at least the first, plus a random part below the
    /// second (milliseconds).
    pub(crate) pause_ms: (u64, u64),
}

impl Killings<'_> {
    /// Kills until every one of `runs` runs succeeded or the kills are spent, then waits
    /// (at most 240 s) until every run succeeded; the workers left.
    pub(crate) fn until_all_succeed(self, runs: usize) -> Vec<Worker> {
        let mut seed = u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |elapsed| elapsed.subsec_nanos()),
        ) | 1;
        let mut random = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        let mut started = 0;
        let mut start = || {
            started += 1;
            let name = format!("{}{started}", self.prefix);
            Worker::start(self.env, self.shared, &name, self.concurrency)
        };
        let mut workers: Vec<Worker> = (0..self.workers).map(|_| start()).collect();
        let succeeded = "SELECT count(*) FROM runs WHERE status = 'success'";
        let mut killed = Vec::new();
        while killed.len() < self.kills && self.shared.query(succeeded) != runs.to_string() {
            std::thread::sleep(Duration::from_millis(
                self.pause_ms.0 + random(self.pause_ms.1),
            ));
            // Kill a worker that holds a run in the middle of a stage, and start another.
            let index = usize::try_from(random(workers.len() as u64)).unwrap_or(0);
            let mut victim = workers.swap_remove(index);
            victim.signal(Signal::SIGKILL);
            let _ = victim.wait_exit(Duration::from_secs(10));
            killed.push(victim);
            workers.push(start());
        }
        // What the killed workers said is shown too when the runs do not finish.
        let watched: Vec<&Worker> = killed.iter().chain(&workers).collect();
        wait_for(
            self.shared,
            succeeded,
            &runs.to_string(),
            Duration::from_secs(240),
            &watched,
        );
        workers
    }
}

/// SPEC 18.4.1: workers killed with SIGKILL at random moments of their stages; their
/// runs finish on the other workers, no stage recorded complete is executed again, and
/// every run ends `success`.
#[test]
fn runs_of_workers_killed_at_random_moments_finish_on_the_others() {
    const RUNS: usize = 12;
    const KILLS: usize = 20;
    let env = TestEnv::new("workers-sigkill");
    let Some(shared) = Shared::create("workers_sigkill", &env) else {
        return;
    };
    let log = env.work_dir().join("executions.log");
    env.write("staged.fabro", &staged_workflow(&log));
    let server = shared.queueing_server(&env);
    for index in 0..RUNS {
        queue(&server, "staged.fabro", &format!("killed-{index:02}"), 0);
    }
    let workers = Killings {
        env: &env,
        shared: &shared,
        prefix: "k",
        workers: 3,
        concurrency: 4,
        kills: KILLS,
        pause_ms: (200, 900),
    }
    .until_all_succeed(RUNS);
    drop(workers);
    let resumed = shared.query(
        "SELECT count(*) FROM run_events WHERE envelope::jsonb ->> 'event' = 'WorkflowRunStarted' \
         AND (envelope::jsonb -> 'properties' ->> 'resumed')::boolean",
    );
    assert!(
        resumed.parse::<usize>().expect("a count") >= 1,
        "the kills took runs over ({resumed} resumed starts)"
    );
    let lines = log_lines(&log);
    for index in 0..RUNS {
        let run_id = format!("killed-{index:02}");
        check_events(&shared, &run_id);
        let waited = longest_takeover(&shared, &run_id);
        assert!(
            waited <= TAKEOVER_BOUND,
            "run {run_id} waited {waited:?} for a new worker"
        );
        for stage in 1..=5 {
            let ended = format!("{run_id} s{stage} end");
            assert!(
                lines.contains(&ended),
                "run {run_id}: stage s{stage} ran to its end"
            );
        }
    }
}

/// SPEC 18.4.2: a worker paused longer than its lease: another worker finishes its
/// run, and the paused one, continued, writes nothing more for it and kills the stage's
/// processes.
#[test]
fn a_paused_worker_loses_its_run_and_writes_nothing_when_it_continues() {
    let env = TestEnv::new("workers-sigstop");
    let Some(shared) = Shared::create("workers_sigstop", &env) else {
        return;
    };
    let log = env.work_dir().join("executions.log");
    let first = env.work_dir().join("first-execution");
    let pid_file = env.work_dir().join("first-execution.pid");
    env.write(
        "paused.fabro",
        &format!(
            "digraph paused {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  long [shape=parallelogram, script=\"if [ -e {first} ]; then echo second >> {log}; else touch {first}; echo $$ > {pid}; sleep 30; echo first >> {log}; fi\"]
  start -> long -> exit
}}
",
            first = first.display(),
            log = log.display(),
            pid = pid_file.display()
        ),
    );
    let server = shared.queueing_server(&env);
    let paused = Worker::start(&env, &shared, "paused", 1);
    queue(&server, "paused.fabro", "paused-run", 0);
    paused.wait_until(Duration::from_secs(60), "the stage never started", || {
        fs_err::read_to_string(&pid_file).is_ok_and(|pid| !pid.trim().is_empty())
    });
    let stage_pid: i32 = fs_err::read_to_string(&pid_file)
        .expect("the pid")
        .trim()
        .parse()
        .expect("a pid");
    assert_eq!(shared.query("SELECT owner FROM runs"), "paused");
    paused.signal(Signal::SIGSTOP);
    let other = Worker::start(&env, &shared, "other", 1);
    wait_for(
        &shared,
        "SELECT status || ' ' || owner FROM runs",
        "success other",
        Duration::from_secs(60),
        &[&paused, &other],
    );
    let events_before = shared.query("SELECT count(*) || ' ' || max(id) FROM run_events");
    let row_before = shared.query("SELECT revision || ' ' || status FROM runs");
    paused.signal(Signal::SIGCONT);
    // Continued, it finds its lease gone: it says so and kills the stage's processes.
    paused.wait_until(
        Duration::from_secs(15),
        "the paused worker's stage still runs or it said nothing",
        || {
            !Path::new(&format!("/proc/{stage_pid}")).exists()
                && paused.stderr().contains("lost the lease of run paused-run")
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        shared.query("SELECT count(*) || ' ' || max(id) FROM run_events"),
        events_before,
        "no event of the paused worker is stored"
    );
    assert_eq!(
        shared.query("SELECT revision || ' ' || status FROM runs"),
        row_before,
        "the run's row is not written again"
    );
    assert_eq!(
        log_lines(&log),
        ["second"],
        "the first execution never finished"
    );
    check_resumed(&shared, "paused-run", ["paused", "other"]);
}

/// The run's events say that it was started by the first of `workers`, then resumed
/// once, by the second.
pub(crate) fn check_resumed(shared: &Shared, run_id: &str, workers: [&str; 2]) {
    let events = events_of(shared, run_id);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|event| event["event"] == "WorkflowRunStarted")
        .collect();
    assert_eq!(starts.len(), 2, "{events:?}");
    assert_eq!(starts[1]["properties"]["resumed"], true);
    assert_eq!(starts[0]["properties"]["worker"], workers[0]);
    assert_eq!(starts[1]["properties"]["worker"], workers[1]);
}

/// SPEC 18.2: SIGTERM hands a worker's runs back to the queue, and another worker
/// resumes them at once; the worker exits 0 within 10 s.
#[test]
fn a_worker_stopped_with_sigterm_hands_its_run_back() {
    let env = TestEnv::new("workers-sigterm");
    let Some(shared) = Shared::create("workers_sigterm", &env) else {
        return;
    };
    let log = env.work_dir().join("executions.log");
    env.write("staged.fabro", &staged_workflow(&log));
    let server = shared.queueing_server(&env);
    let mut leaving = Worker::start(&env, &shared, "leaving", 1);
    queue(&server, "staged.fabro", "handed-back", 0);
    leaving.wait_until(Duration::from_secs(60), "s1 never started", || {
        log_lines(&log).iter().any(|line| line.contains("s1 start"))
    });
    let listed = workers_of(&server);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["name"], "leaving");
    assert_eq!(listed[0]["runs"], json!(["handed-back"]));
    // Busy with its one run, it still says every third of its lease that it lives.
    std::thread::sleep(Duration::from_millis(900));
    assert_ne!(
        workers_of(&server)[0]["last_renewal"],
        listed[0]["last_renewal"]
    );
    leaving.signal(Signal::SIGTERM);
    assert_eq!(leaving.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(
        shared.query("SELECT status || ' ' || coalesce(owner, '-') FROM runs"),
        "queued -",
        "the run is back in the queue"
    );
    let taking = Worker::start(&env, &shared, "taking", 1);
    wait_for(
        &shared,
        "SELECT status || ' ' || owner FROM runs",
        "success taking",
        Duration::from_secs(60),
        &[&taking],
    );
    check_events(&shared, "handed-back");
}

/// SPEC 18.2: a human gate pending while its worker is killed: the worker that takes
/// the run over asks the same question (same id), and an answer posted during the
/// takeover is applied, once.
#[test]
fn a_gate_pending_at_a_takeover_is_asked_again_and_answered_once() {
    let env = TestEnv::new("workers-gate");
    let Some(shared) = Shared::create("workers_gate", &env) else {
        return;
    };
    let log = env.work_dir().join("executions.log");
    env.write(
        "gated.fabro",
        &format!(
            "digraph gated {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  review [shape=hexagon, label=\"Ship it?\"]
  ship [shape=parallelogram, script=\"echo shipped >> {log}\"]
  drop [shape=parallelogram, script=\"echo dropped >> {log}\"]
  start -> review
  review -> ship [label=\"[A] Approve\"]
  review -> drop [label=\"[R] Reject\"]
  ship -> exit
  drop -> exit
}}
",
            log = log.display()
        ),
    );
    let server = shared.queueing_server(&env);
    let mut first = Worker::start(&env, &shared, "gate-1", 1);
    queue(&server, "gated.fabro", "gated", 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let question_id = loop {
        let (_, body) = server.request("GET", "/api/v1/runs/gated/questions", None);
        let listed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if let Some(id) = listed["questions"][0]["question_id"].as_str() {
            break id.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no question: {body}; {}",
            first.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    first.signal(Signal::SIGKILL);
    let _ = first.wait_exit(Duration::from_secs(10));
    std::thread::scope(|scope| {
        // Posted while no worker asks: the server files it and waits for the run to
        // take it.
        let answering = scope.spawn(|| {
            server.request(
                "POST",
                &format!("/api/v1/runs/gated/questions/{question_id}/answer"),
                Some(&json!({"key": "A"})),
            )
        });
        std::thread::sleep(Duration::from_millis(500));
        let second = Worker::start(&env, &shared, "gate-2", 1);
        let (status, body) = answering.join().expect("the answer is posted");
        assert_eq!(status, 200, "{body}; {}", second.stderr());
        wait_for(
            &shared,
            "SELECT status || ' ' || owner FROM runs",
            "success gate-2",
            Duration::from_secs(60),
            &[&second],
        );
    });
    let events = events_of(&shared, "gated");
    // The first worker's question event may have died with it; its question was open.
    let resumed_at = events
        .iter()
        .position(|event| {
            event["event"] == "WorkflowRunStarted" && event["properties"]["resumed"] == true
        })
        .expect("the run was resumed");
    let asked_again: Vec<&Value> = events[resumed_at..]
        .iter()
        .filter(|event| event["event"] == "HumanQuestion")
        .map(|event| &event["properties"]["question_id"])
        .collect();
    assert_eq!(
        asked_again,
        [&Value::from(question_id.as_str())],
        "asked again under the same id: {events:?}"
    );
    let answered = events
        .iter()
        .filter(|event| event["event"] == "HumanAnswer")
        .count();
    assert_eq!(answered, 1, "the answer is applied once");
    assert_eq!(log_lines(&log), ["shipped"]);
}

/// A run queued for the workers and cancelled before any worker claims it ends
/// `canceled` before its first stage; resumed through the server, it is queued again,
/// and a worker finishes it.
#[test]
fn a_run_cancelled_in_the_queue_ends_canceled_and_resumes_through_the_queue() {
    let env = TestEnv::new("workers-queued-cancel");
    let Some(shared) = Shared::create("workers_queued_cancel", &env) else {
        return;
    };
    let log = env.work_dir().join("executions.log");
    env.write(
        "one.fabro",
        &format!(
            "digraph one {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=parallelogram, script=\"echo $mark >> {log}\"]
  start -> work -> exit
}}
",
            log = log.display()
        ),
    );
    let server = shared.queueing_server(&env);
    queue(&server, "one.fabro", "early", 0);
    let (status, body) = server.request("POST", "/api/v1/runs/early/cancel", None);
    assert!((200..300).contains(&status), "{status} {body}");
    let worker = Worker::start(&env, &shared, "late", 1);
    wait_for(
        &shared,
        "SELECT status FROM runs",
        "canceled",
        Duration::from_secs(60),
        &[&worker],
    );
    assert!(log_lines(&log).is_empty(), "no stage ran");
    let (status, body) = server.request("POST", "/api/v1/runs/early/resume", Some(&json!({})));
    assert!((200..300).contains(&status), "{status} {body}");
    let resumed: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(resumed["status"], "queued", "{body}");
    wait_for(
        &shared,
        "SELECT status FROM runs",
        "success",
        Duration::from_secs(60),
        &[&worker],
    );
    assert_eq!(log_lines(&log), ["early"]);
}

/// Ends every connection of the processes on the test's database, as a database restart
/// does; returns how many it ended.
fn terminate_connections(shared: &Shared) -> usize {
    shared
        .query(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .parse()
        .expect("a count")
}

/// SPEC 18.4.3: every connection of the servers and workers ended three times while 10
/// runs execute: they reconnect, all runs finish, their events have no gap and no
/// repeat, and an event stream that follows one with `Last-Event-ID` receives each
/// event once.
#[test]
fn runs_finish_when_every_database_connection_is_ended_while_they_execute() {
    const RUNS: usize = 10;
    const STAGES: usize = 40;
    let env = TestEnv::new("workers-terminated");
    let Some(shared) = Shared::create("workers_terminated", &env) else {
        return;
    };
    // Short stages, so that the workers write all the time.
    let mut chain =
        String::from("digraph chain {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    for stage in 1..=STAGES {
        chain.push_str(&format!(
            "  s{stage} [shape=parallelogram, script=\"true\"]\n"
        ));
    }
    chain.push_str("  start");
    for stage in 1..=STAGES {
        chain.push_str(&format!(" -> s{stage}"));
    }
    chain.push_str(" -> exit\n}\n");
    env.write("chain.fabro", &chain);
    let server = shared.queueing_server(&env);
    for index in 0..RUNS {
        queue(&server, "chain.fabro", &format!("cut-{index:02}"), 0);
    }
    let workers = [
        Worker::start(&env, &shared, "cut-1", 5),
        Worker::start(&env, &shared, "cut-2", 5),
    ];
    let streamed = std::thread::scope(|scope| {
        let follower = scope.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(180);
            let mut received: Vec<crate::server_stream::SseEvent> = Vec::new();
            loop {
                let last = received.last().map(|event| event.0);
                let (events, ended) =
                    crate::server_stream::connect(&server, "cut-00", last, usize::MAX);
                received.extend(events);
                let terminal = received
                    .last()
                    .is_some_and(|event| event.1 == "WorkflowRunCompleted");
                if ended && terminal {
                    return received;
                }
                assert!(
                    Instant::now() < deadline,
                    "the stream never ended: {received:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(150));
            assert!(
                terminate_connections(&shared) > 0,
                "the processes are connected"
            );
        }
        let watched: Vec<&Worker> = workers.iter().collect();
        wait_for(
            &shared,
            "SELECT count(*) FROM runs WHERE status = 'success'",
            &RUNS.to_string(),
            Duration::from_secs(120),
            &watched,
        );
        follower.join().expect("the stream is followed")
    });
    for index in 0..RUNS {
        let run_id = format!("cut-{index:02}");
        let events = events_of(&shared, &run_id);
        for (position, event) in events.iter().enumerate() {
            assert_eq!(event["id"], position + 1, "run {run_id}: ids have no gap");
        }
        let completed = events
            .iter()
            .filter(|event| event["event"] == "StageCompleted")
            .count();
        assert_eq!(
            completed,
            STAGES + 2,
            "run {run_id}: each stage completed once"
        );
    }
    let ids: Vec<u64> = streamed.iter().map(|event| event.0).collect();
    let stored = events_of(&shared, "cut-00").len();
    assert_eq!(
        ids,
        (1..=u64::try_from(stored).expect("a count")).collect::<Vec<_>>(),
        "the stream received each stored event once"
    );
}

/// SPEC 18.2: `fabro server --store` without `--no-worker` executes runs through an
/// embedded worker: it claims the runs another server queued, holds the runs it accepts
/// itself under a lease of its own (so a worker takes them over if it dies), and is
/// listed among the workers.
#[test]
fn a_server_on_the_store_claims_and_holds_runs_like_a_worker() {
    let env = TestEnv::new("workers-embedded");
    let Some(shared) = Shared::create("workers_embedded", &env) else {
        return;
    };
    env.write(
        "one.fabro",
        "digraph one {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
         work [shape=parallelogram, script=\"true\"]\n  start -> work -> exit\n}\n",
    );
    let queueing = shared.queueing_server(&env);
    post_queued(
        &queueing,
        &json!({"workflow": "one.fabro", "run_id": "from-queue"}),
    );
    // The same home, so the same roots: a server checks the paths of a run it claims
    // against its own (a `fabro worker` trusts the server that queued it).
    let executing = shared.executing_server(&env);
    wait_for(
        &shared,
        "SELECT status FROM runs WHERE run_id = 'from-queue'",
        "success",
        Duration::from_secs(60),
        &[],
    );
    let (status, body) = executing.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "one.fabro", "run_id": "accepted"})),
    );
    assert_eq!(status, 201, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(answer["status"], "running", "{body}");
    executing.wait_status("accepted", &["success"]);
    // The lease is let go right after the end is registered, in a statement of its own.
    wait_for(
        &shared,
        "SELECT count(*) FROM runs WHERE lease_expires_at IS NOT NULL",
        "0",
        Duration::from_secs(30),
        &[],
    );
    assert_eq!(
        shared.query(
            "SELECT string_agg(run_id || ' ' || lease_epoch || ' ' || \
             (lease_expires_at IS NULL)::text, ',' ORDER BY run_id) FROM runs"
        ),
        "accepted 1 true,from-queue 1 true",
        "each claimed once, its lease released at its end"
    );
    let owners = shared.query("SELECT string_agg(DISTINCT owner, ',') FROM runs");
    let listed: Vec<Value> = workers_of(&executing)
        .into_iter()
        .map(|worker| worker["name"].clone())
        .collect();
    assert_eq!(listed, [json!(owners)], "the server's worker holds both");
}
