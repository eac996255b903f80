//! Scripted runs of the agent loop against a fake [`LlmClient`].

use std::collections::VecDeque;
use std::sync::Mutex;

use fabro_llm::{replay_response, BoxFuture, LlmError, LlmErrorKind, Response, Role};
use serde_json::{json, Value};

use super::*;

/// A client answering tool-using calls from `turns` and tool-less (summary) calls
/// from `summaries`, recording every request.
#[derive(Default)]
struct FakeClient {
    turns: Mutex<VecDeque<Result<Response, LlmError>>>,
    summaries: Mutex<VecDeque<Result<Response, LlmError>>>,
    requests: Mutex<Vec<Request>>,
}

impl FakeClient {
    fn new(turns: Vec<Result<Response, LlmError>>) -> Arc<FakeClient> {
        Arc::new(FakeClient {
            turns: Mutex::new(turns.into()),
            ..FakeClient::default()
        })
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl LlmClient for FakeClient {
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut fabro_llm::StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(async move {
            let response: Result<Response, LlmError> = {
                self.requests.lock().unwrap().push(request.clone());
                let queue = if request.tools.is_empty() {
                    &self.summaries
                } else {
                    &self.turns
                };
                queue.lock().unwrap().pop_front().unwrap_or_else(|| {
                    Err(error(
                        LlmErrorKind::Configuration,
                        "fake client script exhausted",
                    ))
                })
            };
            if let Ok(response) = &response {
                replay_response(response, sink);
            }
            response
        })
    }
}

fn error(kind: LlmErrorKind, message: &str) -> LlmError {
    LlmError {
        kind,
        provider: "fake".to_owned(),
        message: message.to_owned(),
        status: None,
        retry_after: None,
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn text(answer: &str) -> Result<Response, LlmError> {
    Ok(Response {
        text: answer.to_owned(),
        tool_calls: Vec::new(),
        usage: usage(10, 2),
        model: "fake".to_owned(),
        thinking: Vec::new(),
    })
}

fn calls(calls: &[(&str, &str, Value)]) -> Result<Response, LlmError> {
    Ok(Response {
        text: String::new(),
        tool_calls: calls
            .iter()
            .map(|(id, name, arguments)| ToolCall {
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                arguments: arguments.clone(),
            })
            .collect(),
        usage: usage(10, 2),
        model: "fake".to_owned(),
        thinking: Vec::new(),
    })
}

type Events = Arc<Mutex<Vec<AgentEvent>>>;

struct Fixture {
    dir: tempfile::TempDir,
    events: Events,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        fs_err::create_dir(dir.path().join("work")).unwrap();
        Fixture {
            dir,
            events: Arc::default(),
        }
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    fn config(&self) -> AgentConfig {
        let mut config = AgentConfig::new(
            Provider::Anthropic,
            "claude-sonnet-4-6",
            "implement",
            self.work(),
        );
        config.project_memory = false;
        config.date = Some("2026-01-02".to_owned());
        config
    }

    fn session(&self, config: AgentConfig, client: Arc<impl LlmClient + 'static>) -> AgentSession {
        let events = Arc::clone(&self.events);
        let sink = move |event: AgentEvent| events.lock().unwrap().push(event);
        let tools = ToolRegistry::for_profile(ToolProfile::for_provider(config.provider));
        AgentSession::new(config, client, tools, Arc::new(sink)).unwrap()
    }

    fn event_names(&self) -> Vec<&'static str> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(AgentEvent::name)
            .collect()
    }
}

#[tokio::test]
async fn tool_call_then_final_answer() {
    let fixture = Fixture::new();
    let client = FakeClient::new(vec![
        calls(&[(
            "call_1",
            "write_file",
            json!({"file_path": "src/a.txt", "content": "hi"}),
        )]),
        text("Wrote the file."),
    ]);
    let mut session = fixture.session(fixture.config(), Arc::clone(&client));
    let outcome = session
        .run("Write a.txt", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.text, "Wrote the file.");
    assert_eq!(outcome.turns, 2);
    assert_eq!(outcome.usage, usage(20, 4));
    assert_eq!(outcome.files_touched, ["src/a.txt"]);
    assert_eq!(outcome.last_touched.as_deref(), Some("src/a.txt"));
    assert_eq!(
        fs_err::read_to_string(fixture.work().join("src/a.txt")).unwrap(),
        "hi"
    );
    assert_eq!(
        fixture.event_names(),
        [
            "Agent.AssistantMessage",
            "Agent.ToolCallStarted",
            "Agent.ToolCallCompleted",
            "Agent.AssistantMessage"
        ]
    );
    let requests = client.requests();
    assert_eq!(requests.len(), 2);
    let system = requests[0].system.as_deref().unwrap();
    assert!(system.contains("Git repository: no"));
    assert!(system.contains("Today's date: 2026-01-02\nModel: claude-sonnet-4-6"));
    assert_eq!(requests[0].node_id, "implement");
    let names: Vec<&str> = requests[0]
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "edit_file",
            "shell",
            "grep",
            "glob"
        ]
    );
    let second = &requests[1].messages;
    assert_eq!(second.len(), 3);
    assert_eq!(second[0].text, "Write a.txt");
    assert_eq!(second[1].tool_calls[0].id, "call_1");
    assert_eq!(second[2].role, Role::Tool);
    assert_eq!(second[2].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(second[2].text, "Wrote 2 bytes to src/a.txt");
}

#[tokio::test]
async fn several_calls_answer_in_call_order_and_errors_go_back_to_the_model() {
    let fixture = Fixture::new();
    fs_err::write(fixture.work().join("a.txt"), "alpha").unwrap();
    let client = FakeClient::new(vec![
        calls(&[
            ("c1", "shell", json!({"command": "sleep 0.2; echo slow"})),
            ("c2", "read_file", json!({"file_path": "a.txt"})),
            ("c3", "teleport", json!({})),
            ("c4", "write_file", json!({"file_path": "b.txt"})),
        ]),
        text("ok"),
    ]);
    let mut session = fixture.session(fixture.config(), Arc::clone(&client));
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome.failure, None);
    assert!(outcome.files_touched.is_empty());
    let results = &client.requests()[1].messages[2..];
    let summary: Vec<(&str, &str, bool)> = results
        .iter()
        .map(|message| {
            (
                message.tool_call_id.as_deref().unwrap(),
                message.text.as_str(),
                message.is_error,
            )
        })
        .collect();
    assert_eq!(summary[0], ("c1", "slow\n", false));
    assert_eq!(summary[1], ("c2", "1 | alpha", false));
    assert_eq!(summary[2], ("c3", "Unknown tool: teleport", true));
    assert_eq!(summary[3].0, "c4");
    assert!(summary[3]
        .1
        .starts_with("Invalid arguments for tool: write_file: "));
}

#[tokio::test]
async fn turn_limit_is_budget_exhausted() {
    let fixture = Fixture::new();
    let turns = (0..5)
        .map(|index| {
            calls(&[(
                &format!("c{index}") as &str,
                "glob",
                json!({"pattern": format!("*.{index}")}),
            )])
        })
        .collect();
    let client = FakeClient::new(turns);
    let mut config = fixture.config();
    config.max_turns = 2;
    let mut session = fixture.session(config, Arc::clone(&client));
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    let failure = outcome.failure.unwrap();
    assert_eq!(failure.class, FailureClass::BudgetExhausted);
    assert_eq!(failure.reason, "turn limit reached (2)");
    assert_eq!(outcome.turns, 2);
    assert_eq!(client.requests().len(), 2);
}

#[tokio::test]
async fn repeated_calls_get_the_steering_message() {
    let fixture = Fixture::new();
    let mut turns: Vec<_> = (0..10)
        .map(|index| {
            calls(&[(
                &format!("c{index}") as &str,
                "read_file",
                json!({"file_path": "missing.txt"}),
            )])
        })
        .collect();
    turns.push(text("I will stop."));
    let client = FakeClient::new(turns);
    let mut session = fixture.session(fixture.config(), Arc::clone(&client));
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.text, "I will stop.");
    let detected: Vec<AgentEvent> = fixture
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|event| matches!(event, AgentEvent::LoopDetected { .. }))
        .cloned()
        .collect();
    assert_eq!(detected, [AgentEvent::LoopDetected { pattern_length: 1 }]);
    let requests = client.requests();
    assert_eq!(requests.len(), 11);
    let last = requests[10].messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert_eq!(
        last.text,
        "WARNING: Loop detected. You appear to be repeating the same tool calls. Please try a different approach or ask for clarification."
    );
    // Nothing was steered before the tenth turn.
    assert!(requests[9]
        .messages
        .iter()
        .all(|message| message.text != LOOP_STEERING_MESSAGE));
}

/// Turns that write one file, then read distinct lines of a long file.
fn long_session(reads: usize) -> Vec<Result<Response, LlmError>> {
    let mut turns = vec![calls(&[(
        "w",
        "write_file",
        json!({"file_path": "notes.md", "content": "n"}),
    )])];
    for index in 0..reads {
        turns.push(calls(&[(
            &format!("r{index}") as &str,
            "read_file",
            json!({"file_path": "big.txt", "offset": index + 1, "limit": 1}),
        )]));
    }
    turns.push(text("finished"));
    turns
}

#[tokio::test]
async fn compaction_at_the_threshold_replaces_older_entries() {
    let fixture = Fixture::new();
    fs_err::write(
        fixture.work().join("big.txt"),
        format!("{}\n", "x".repeat(400)).repeat(40),
    )
    .unwrap();
    let client = FakeClient::new(long_session(12));
    client.summaries.lock().unwrap().push_back(Ok(Response {
        text: "## Goal\nRead the file.\n## Progress\nRead lines.".to_owned(),
        tool_calls: Vec::new(),
        usage: usage(100, 20),
        model: "fake".to_owned(),
        thinking: Vec::new(),
    }));
    let mut config = fixture.config();
    config.context_window = Some(1_000);
    config.reasoning_effort = Some(ReasoningEffort::Medium);
    let mut session = fixture.session(config, Arc::clone(&client));
    let window = session.context_window();
    assert_eq!(window, 1_000);
    let outcome = session
        .run("Read big.txt", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.text, "finished");

    let events = fixture.events.lock().unwrap().clone();
    let warning = events
        .iter()
        .position(|event| matches!(event, AgentEvent::ContextWindowWarning { .. }))
        .unwrap();
    let AgentEvent::ContextWindowWarning {
        estimated_tokens,
        context_window_size,
        usage_percent,
    } = events[warning].clone()
    else {
        unreachable!()
    };
    assert!(estimated_tokens > 800, "{estimated_tokens}");
    assert_eq!(context_window_size, 1_000);
    assert!((usage_percent - estimated_tokens as f64 / 10.0).abs() < 1e-9);
    assert_eq!(
        events[warning + 1],
        AgentEvent::CompactionStarted {
            estimated_tokens,
            context_window_size: 1_000
        }
    );
    let AgentEvent::CompactionCompleted {
        original_turn_count,
        preserved_turn_count,
        tracked_file_count,
        summary_token_estimate,
    } = events[warning + 2].clone()
    else {
        panic!(
            "expected CompactionCompleted, got {:?}",
            events[warning + 2]
        )
    };
    // After an assistant turn the history ends [.., results, assistant]: six entries
    // from the end is a tool-results entry, so the split moves back one.
    assert_eq!(preserved_turn_count, 7);
    assert_eq!(original_turn_count % 2, 0);
    assert_eq!(tracked_file_count, 1);
    assert!(summary_token_estimate > 0);

    // The summary call: no tools, the older entries rendered.
    let requests = client.requests();
    let summary_index = requests
        .iter()
        .position(|request| request.tools.is_empty())
        .unwrap();
    // Every call, the summary included, carries the node's effort (SPEC 10.1 item 2).
    assert!(requests
        .iter()
        .all(|request| request.reasoning_effort == Some(ReasoningEffort::Medium)));
    let rendered = &requests[summary_index].messages[0].text;
    assert!(rendered.contains("[User]\nRead big.txt"));
    assert!(rendered.contains("[Tool call write_file]"));
    // The next turn starts with the summary, followed by the preserved entries.
    let next = &requests[summary_index + 1].messages;
    assert_eq!(next[0].role, Role::User);
    assert_eq!(
        next[0].text,
        "[Context Summary]\n## Goal\nRead the file.\n## Progress\nRead lines.\n\n## File Operations\n- modified: notes.md"
    );
    assert_eq!(next[1].role, Role::Assistant);
    assert_eq!(next.len(), 1 + preserved_turn_count + 1);
    // Summary usage counts toward the run.
    assert_eq!(outcome.usage.input_tokens, 10 * 14 + 100);
}

#[tokio::test]
async fn failed_summary_is_not_fatal_and_is_retried_next_turn() {
    let fixture = Fixture::new();
    fs_err::write(
        fixture.work().join("big.txt"),
        format!("{}\n", "x".repeat(400)).repeat(40),
    )
    .unwrap();
    let client = FakeClient::new(long_session(12));
    {
        let mut summaries = client.summaries.lock().unwrap();
        summaries.push_back(Err(error(LlmErrorKind::Server, "summary exploded")));
        summaries.push_back(text("## Goal\nsecond try"));
    }
    let mut config = fixture.config();
    config.context_window = Some(1_000);
    let mut session = fixture.session(config, Arc::clone(&client));
    let outcome = session
        .run("Read big.txt", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.failure, None);
    let names = fixture.event_names();
    let first_error = names
        .iter()
        .position(|name| *name == "Agent.Error")
        .unwrap();
    assert_eq!(
        names[first_error - 2..=first_error],
        [
            "Agent.ContextWindowWarning",
            "Agent.CompactionStarted",
            "Agent.Error"
        ]
    );
    let AgentEvent::Error { message } = fixture.events.lock().unwrap()[first_error].clone() else {
        unreachable!()
    };
    assert_eq!(
        message,
        "context compaction failed: fake server: summary exploded"
    );
    // The next assistant turn tried again and succeeded.
    let after: Vec<&&str> = names[first_error + 1..]
        .iter()
        .filter(|name| {
            name.starts_with("Agent.Compaction") || **name == "Agent.ContextWindowWarning"
        })
        .collect();
    assert_eq!(
        after[..3],
        [
            &"Agent.ContextWindowWarning",
            &"Agent.CompactionStarted",
            &"Agent.CompactionCompleted"
        ]
    );
    // The history was untouched by the failed attempt: the request after it still
    // starts with the original prompt.
    let requests = client.requests();
    let failed = requests
        .iter()
        .position(|request| request.tools.is_empty())
        .unwrap();
    assert_eq!(requests[failed + 1].messages[0].text, "Read big.txt");
}

#[tokio::test]
async fn refused_writes_outside_the_working_tree_are_tool_errors_only() {
    let fixture = Fixture::new();
    fs_err::create_dir(fixture.dir.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(
        fixture.dir.path().join("elsewhere"),
        fixture.work().join("link"),
    )
    .unwrap();
    let client = FakeClient::new(vec![
        calls(&[
            (
                "c1",
                "write_file",
                json!({"file_path": "../escape.txt", "content": "x"}),
            ),
            (
                "c2",
                "write_file",
                json!({"file_path": "link/evil.txt", "content": "x"}),
            ),
            (
                "c3",
                "write_file",
                json!({"file_path": "fine.txt", "content": "x"}),
            ),
        ]),
        text("done"),
    ]);
    let mut session = fixture.session(fixture.config(), Arc::clone(&client));
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    // Nothing changed outside the tree, so the refusals do not fail the run (SPEC 13.4).
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.text, "done");
    assert_eq!(outcome.files_touched, ["fine.txt"]);
    assert!(!fixture.dir.path().join("escape.txt").exists());
    assert!(!fixture.dir.path().join("elsewhere/evil.txt").exists());
    let results = &client.requests()[1].messages[2..];
    assert!(results[0].is_error);
    assert_eq!(
        results[0].text,
        "Tool error (write_file): write scope violation: ../escape.txt is outside the allowed scope"
    );
    assert!(results[1].is_error);
    assert!(!results[2].is_error);
}

#[tokio::test]
async fn llm_errors_end_the_run_with_their_class() {
    let fixture = Fixture::new();
    let client = FakeClient::new(vec![
        calls(&[("c1", "glob", json!({"pattern": "*"}))]),
        Err(error(LlmErrorKind::RateLimit, "slow down")),
    ]);
    let mut session = fixture.session(fixture.config(), client);
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    let failure = outcome.failure.unwrap();
    assert_eq!(failure.class, FailureClass::TransientInfra);
    assert_eq!(failure.reason, "fake rate_limit: slow down");
    assert_eq!(failure.llm_error.unwrap().kind, LlmErrorKind::RateLimit);
    assert_eq!(outcome.turns, 1);
    assert_eq!(outcome.usage, usage(10, 2));
}

#[tokio::test]
async fn cancellation_stops_a_running_shell_call() {
    let fixture = Fixture::new();
    let client = FakeClient::new(vec![calls(&[(
        "c1",
        "shell",
        json!({"command": "touch started; sleep 30"}),
    )])]);
    let mut session = fixture.session(fixture.config(), client);
    let cancel = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        let started = fixture.work().join("started");
        tokio::spawn(async move {
            for _ in 0..1000 {
                if started.exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cancel.cancel();
        })
    };
    let began = Instant::now();
    let outcome = session.run("go", &cancel).await.unwrap();
    canceller.await.unwrap();
    assert_eq!(outcome.failure.unwrap().class, FailureClass::Canceled);
    assert!(began.elapsed() < Duration::from_secs(10));
    // Every call got an answer, so the session can continue.
    let last = session.messages().pop().unwrap();
    assert_eq!(last.role, Role::Tool);
    assert_eq!(last.tool_call_id.as_deref(), Some("c1"));
    assert_eq!(last.text, "Tool error (shell): canceled");
}

#[tokio::test]
async fn a_session_continues_its_conversation() {
    let fixture = Fixture::new();
    let client = FakeClient::new(vec![text("first answer"), text("{\"ok\": true}")]);
    let mut session = fixture.session(fixture.config(), Arc::clone(&client));
    let first = session
        .run("plan it", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(first.text, "first answer");
    session.set_node_id("review");
    let second = session
        .run(
            "Your previous response did not match",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(second.text, "{\"ok\": true}");
    assert_eq!(second.turns, 1);
    assert_eq!(second.usage, usage(10, 2));
    let request = &client.requests()[1];
    assert_eq!(request.node_id, "review");
    let texts: Vec<&str> = request
        .messages
        .iter()
        .map(|message| message.text.as_str())
        .collect();
    assert_eq!(
        texts,
        [
            "plan it",
            "first answer",
            "Your previous response did not match"
        ]
    );
    assert_eq!(session.messages().len(), 4);
}

#[tokio::test]
async fn simulated_provider_drives_the_loop() {
    let fixture = Fixture::new();
    let script = fabro_llm::simulated::Script::parse(
        r#"{"nodes": {"implement": [
            {"tool_calls": [{"name": "write_file", "arguments": {"file_path": "a.txt", "content": "hi"}}]},
            {"text": "done"}]}}"#,
    )
    .unwrap();
    let client = Arc::new(fabro_llm::simulated::SimulatedClient::new(script));
    let mut config = fixture.config();
    config.provider = Provider::Simulated;
    config.model = "simulated".to_owned();
    let tools = ToolRegistry::for_profile(ToolProfile::for_provider(Provider::Simulated));
    let mut session = AgentSession::new(config, client, tools, Arc::new(crate::NullSink)).unwrap();
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome.text, "done");
    assert_eq!(outcome.files_touched, ["a.txt"]);
    assert_eq!(session.context_window(), 200_000);
}

#[tokio::test]
async fn shell_writes_outside_write_scope_are_found_by_git_snapshots() {
    let repo = crate::snapshot::tests::repository();
    let client = FakeClient::new(vec![
        calls(&[(
            "c1",
            "shell",
            json!({"command": "echo x > outside.txt; mkdir -p src; echo y > src/in.rs"}),
        )]),
        text("done"),
    ]);
    let events: Events = Arc::default();
    let mut config = AgentConfig::new(
        Provider::Anthropic,
        "claude-sonnet-4-6",
        "implement",
        repo.path(),
    );
    config.project_memory = false;
    config.write_scope = vec!["src/**".to_owned()];
    let tools = ToolRegistry::for_profile(ToolProfile::Anthropic);
    let sink = move |event: AgentEvent| events.lock().unwrap().push(event);
    let mut session = AgentSession::new(config, client, tools, Arc::new(sink)).unwrap();
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    let failure = outcome.failure.unwrap();
    assert_eq!(failure.class, FailureClass::Structural);
    assert_eq!(failure.reason, "write scope violation: outside.txt");
    assert!(outcome.files_touched.is_empty());
}

#[tokio::test]
async fn simulated_compaction_consumes_no_scripted_entries() {
    let fixture = Fixture::new();
    fs_err::write(
        fixture.work().join("big.txt"),
        format!("{}\n", "x".repeat(400)).repeat(40),
    )
    .unwrap();
    let mut entries: Vec<String> = (0..12)
        .map(|index| {
            format!(
                r#"{{"tool_calls": [{{"name": "read_file", "arguments": {{"file_path": "big.txt", "offset": {}, "limit": 1}}}}]}}"#,
                index + 1
            )
        })
        .collect();
    entries.push(r#"{"text": "finished"}"#.to_owned());
    let script = fabro_llm::simulated::Script::parse(&format!(
        r#"{{"nodes": {{"implement": [{}]}}}}"#,
        entries.join(",")
    ))
    .unwrap();
    let client = Arc::new(fabro_llm::simulated::SimulatedClient::new(script));
    let mut config = fixture.config();
    config.provider = Provider::Simulated;
    config.model = "simulated".to_owned();
    config.context_window = Some(1_000);
    let mut session = fixture.session(config, Arc::clone(&client));
    let outcome = session
        .run("Read big.txt", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.failure, None);
    // Every scripted entry went to an agent turn: 12 reads and the final answer.
    assert_eq!(outcome.text, "finished");
    assert_eq!(outcome.turns, 13);
    assert_eq!(client.cursors()["implement"], 13);
    assert!(fixture.event_names().contains(&"Agent.CompactionCompleted"));
    let summary = session
        .messages()
        .into_iter()
        .find(|message| message.text.starts_with("[Context Summary]"))
        .unwrap();
    assert_eq!(summary.role, Role::System);
    assert_eq!(summary.text, "[Context Summary]\n[Simulated] summary");
}

mod steering;
