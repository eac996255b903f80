//! The `cli` backend (SPEC 5.2.2): an external agent CLI run in the working directory
//! with the prompt on stdin; files touched come from git snapshots.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fabro_llm::{Provider, Usage};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::{last_lines, timeout_reason, ExternalOutcome, ToolTally, STDERR_TAIL_LINES};
use crate::change_tracking::FileTracking;
use crate::environment::ProcessEnv;
use crate::failure::{AgentError, AgentFailure};
use crate::process::{Capture, ProcessGroup};
use crate::scope::{scope_failure_reason, WorkTree};
use crate::snapshot::touched;
use fabro_llm::FailureClass;

/// How the CLI reports its result on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliOutputFormat {
    /// `claude --output-format stream-json`: the `result` field of the final
    /// `result` record; usage from that record.
    ClaudeStreamJson,
    /// `codex exec --json`: the last agent message; usage from `turn.completed`.
    CodexJson,
    /// `gemini -o json`: the `response` field.
    GeminiJson,
    /// Any other command: stdout as the response.
    Text,
}

/// How to run one CLI agent.
#[derive(Debug, Clone)]
pub struct CliAgentConfig {
    /// Program (looked up on `PATH` unless it contains a `/`).
    pub program: String,
    /// Arguments before `--model`.
    pub args: Vec<String>,
    /// Appended as `--model {model}` when set.
    pub model: Option<String>,
    /// How stdout is read.
    pub format: CliOutputFormat,
    /// Working directory (cwd of the CLI).
    pub working_dir: PathBuf,
    /// Environment (filtered, plus the provider's own key, SPEC 13.5).
    pub env: ProcessEnv,
    /// Ends the run as `transient_infra` when exceeded.
    pub timeout: Option<Duration>,
    /// `write_scope` globs checked against the touched files.
    pub write_scope: Vec<String>,
    /// How the touched files are found (git snapshots, or a run's change feed).
    pub file_tracking: FileTracking,
}

impl CliAgentConfig {
    /// The SPEC 5.2.2 command of `provider`; `Err` for providers without a CLI
    /// (`simulated` behaves like `api`, `openai_compatible` has no CLI). Under fabro's
    /// confinement (`env` confined, SPEC 16) fabro is the program's sandbox (decision
    /// 68): codex runs with `--sandbox danger-full-access` (else `workspace-write`) and
    /// claude gets `IS_SANDBOX=1`; gemini always gets `GEMINI_CLI_TRUST_WORKSPACE=true`
    /// (every run's worktree is new).
    pub fn for_provider(
        provider: Provider,
        model: impl Into<String>,
        working_dir: impl Into<PathBuf>,
        mut env: ProcessEnv,
    ) -> Result<CliAgentConfig, AgentError> {
        let confined = env.is_confined();
        let (program, args, format): (&str, &[&str], CliOutputFormat) = match provider {
            Provider::Anthropic => {
                if confined {
                    env.set("IS_SANDBOX", "1");
                }
                (
                    "claude",
                    &[
                        "-p",
                        "--verbose",
                        "--output-format",
                        "stream-json",
                        "--dangerously-skip-permissions",
                    ],
                    CliOutputFormat::ClaudeStreamJson,
                )
            }
            Provider::OpenAi => (
                "codex",
                if confined {
                    &["exec", "--json", "--sandbox", "danger-full-access"]
                } else {
                    &["exec", "--json", "--sandbox", "workspace-write"]
                },
                CliOutputFormat::CodexJson,
            ),
            Provider::Gemini => {
                env.set("GEMINI_CLI_TRUST_WORKSPACE", "true");
                (
                    "gemini",
                    &["-o", "json", "--yolo"],
                    CliOutputFormat::GeminiJson,
                )
            }
            Provider::OpenAiCompatible | Provider::Simulated => {
                return Err(AgentError::Configuration {
                    message: format!("provider {provider} has no agent CLI"),
                })
            }
        };
        Ok(CliAgentConfig {
            program: program.to_owned(),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            model: Some(model.into()),
            format,
            working_dir: working_dir.into(),
            env,
            timeout: None,
            write_scope: Vec::new(),
            file_tracking: FileTracking::default(),
        })
    }

    /// A configured command (argv) whose stdout is the response.
    pub fn command(
        argv: Vec<String>,
        working_dir: impl Into<PathBuf>,
        env: ProcessEnv,
    ) -> Result<CliAgentConfig, AgentError> {
        let mut argv = argv.into_iter();
        let program = argv.next().ok_or_else(|| AgentError::Configuration {
            message: "empty agent command".to_owned(),
        })?;
        Ok(CliAgentConfig {
            program,
            args: argv.collect(),
            model: None,
            format: CliOutputFormat::Text,
            working_dir: working_dir.into(),
            env,
            timeout: None,
            write_scope: Vec::new(),
            file_tracking: FileTracking::default(),
        })
    }
}

/// Runs the CLI once with `prompt` on stdin. A missing program is
/// [`AgentError::MissingProgram`]; a non-zero exit is a `deterministic` failure with
/// the exit code and the error the CLI reported in its JSON output, else the last 20
/// lines of stderr (the output is never classified); a timeout is `transient_infra`;
/// cancellation kills the process group.
pub async fn run_cli_agent(
    config: &CliAgentConfig,
    prompt: &str,
    cancel: &CancellationToken,
) -> Result<ExternalOutcome, AgentError> {
    let tree = WorkTree::new(&config.working_dir, &config.write_scope)?;
    let before = config
        .file_tracking
        .snapshot(tree.root(), &config.env)
        .await;
    let mut command = config
        .env
        .command(&config.program, tree.root())
        .map_err(|error| AgentError::Configuration {
            message: error.to_string(),
        })?;
    command.args(&config.args);
    if let Some(model) = &config.model {
        command.arg("--model").arg(model);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child =
        crate::isolation::spawn_fenced(&mut command).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => AgentError::MissingProgram {
                backend: "cli",
                program: config.program.clone(),
            },
            _ => AgentError::Spawn {
                program: config.program.clone(),
                source,
            },
        })?;
    let group = ProcessGroup::of(&child);
    if let Some(mut stdin) = child.stdin.take() {
        let prompt = prompt.to_owned();
        tokio::spawn(async move {
            // A CLI that exits without reading its stdin is not an error here.
            let _ = stdin.write_all(prompt.as_bytes()).await;
            let _ = stdin.shutdown().await;
        });
    }
    let stdout = Capture::start(child.stdout.take());
    let stderr = Capture::start(child.stderr.take());
    let timeout = async {
        match config.timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    let status = tokio::select! {
        status = child.wait() => Some(status.map_err(|source| AgentError::ChildIo {
            program: config.program.clone(),
            source,
        })?),
        () = timeout => None,
        () = cancel.cancelled() => None,
    };
    if status.is_none() {
        group.terminate(&mut child).await;
    }
    let stdout = stdout.finish().await;
    let stderr = stderr.finish().await;
    drop(group);
    let after = config
        .file_tracking
        .snapshot(tree.root(), &config.env)
        .await;
    let (files_touched, last_touched) = touched(before.as_ref(), after.as_ref());
    let report = parse_output(config.format, &stdout, &stderr);
    let failure = match status {
        None if cancel.is_cancelled() => Some(AgentFailure::canceled()),
        None => Some(AgentFailure::new(
            FailureClass::TransientInfra,
            timeout_reason(config.timeout),
        )),
        Some(status) if !status.success() => Some(AgentFailure::new(
            FailureClass::Deterministic,
            format!(
                "{} exited with {}: {}",
                config.program,
                status
                    .code()
                    .map_or_else(|| "a signal".to_owned(), |code| format!("code {code}")),
                report
                    .error
                    .clone()
                    .unwrap_or_else(|| last_lines(&stderr, STDERR_TAIL_LINES))
            ),
        )),
        Some(_) => {
            let outside = tree.out_of_scope(&files_touched);
            (!outside.is_empty()).then(|| {
                AgentFailure::new(FailureClass::Structural, scope_failure_reason(&outside))
            })
        }
    };
    Ok(ExternalOutcome {
        text: report.text,
        usage: report.usage,
        model: report.model,
        files_touched,
        last_touched,
        failure,
        stderr,
        sandboxed_tools: report.tools.warning(),
        earlier_turns: Vec::new(),
    })
}

/// What a CLI's output says.
#[derive(Debug, Default)]
struct CliReport {
    /// The response text.
    text: String,
    /// Usage, when the CLI reported some (all-zero counts are none).
    usage: Option<Usage>,
    /// The model the CLI said it used.
    model: Option<String>,
    /// The error the CLI reported.
    error: Option<String>,
    /// Its tool calls.
    tools: ToolTally,
}

/// `usage` unless it counts nothing.
fn reported(usage: Usage) -> Option<Usage> {
    let counted = usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens
        + usage.reasoning_tokens;
    (counted > 0).then_some(usage)
}

/// A model name as reported, without placeholders such as claude's `<synthetic>`.
fn model_name(value: &Value) -> Option<String> {
    value
        .as_str()
        .map(str::trim)
        .filter(|name| !name.is_empty() && !name.starts_with('<'))
        .map(str::to_owned)
}

/// What the CLI's stdout (and, for gemini's errors, stderr) reports.
fn parse_output(format: CliOutputFormat, stdout: &str, stderr: &str) -> CliReport {
    match format {
        CliOutputFormat::Text => CliReport {
            text: stdout.to_owned(),
            ..CliReport::default()
        },
        CliOutputFormat::ClaudeStreamJson => parse_claude(stdout),
        CliOutputFormat::CodexJson => parse_codex(stdout),
        CliOutputFormat::GeminiJson => parse_gemini(stdout, stderr),
    }
}

/// The JSON records of a JSON-lines stream (other lines skipped).
fn records(stdout: &str) -> impl Iterator<Item = Value> + '_ {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
}

/// `claude --output-format stream-json`: the final `result` record (its text, usage,
/// cost, and `is_error`), the model of the `init` record or of `modelUsage`, and the
/// tool results of `user` records.
fn parse_claude(stdout: &str) -> CliReport {
    let mut report = CliReport::default();
    let mut result = None;
    for record in records(stdout) {
        match record["type"].as_str() {
            Some("system") if record["subtype"] == "init" => {
                report.model = model_name(&record["model"]).or(report.model);
            }
            Some("user") => {
                let content = record["message"]["content"].as_array();
                for block in content.into_iter().flatten() {
                    if block["type"] == "tool_result" {
                        let failed = block["is_error"] == true;
                        let text = tool_result_text(&block["content"]);
                        report.tools.record(failed.then_some(text.as_str()));
                    }
                }
            }
            Some("result") => result = Some(record),
            _ => {}
        }
    }
    let Some(record) = result else {
        return report;
    };
    let text = record["result"].as_str().unwrap_or_default().to_owned();
    if record["is_error"] == true {
        report.error = Some(text.clone()).filter(|text| !text.is_empty());
    }
    let models = record["modelUsage"].as_object();
    if let Some(model) = models.and_then(|models| models.keys().next()) {
        report.model = model_name(&Value::String(model.clone())).or(report.model);
    }
    let usage = &record["usage"];
    report.usage = reported(Usage {
        input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        cache_read_tokens: usage["cache_read_input_tokens"].as_u64().unwrap_or(0),
        cache_write_tokens: usage["cache_creation_input_tokens"].as_u64().unwrap_or(0),
        reasoning_tokens: 0,
        cost_usd: record["total_cost_usd"].as_f64(),
    });
    report.text = text;
    report
}

/// A tool result's content as text (a string or a list of text blocks).
fn tool_result_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `codex exec --json`: the last agent message, usage from `turn.completed`, the error
/// of `error` or `turn.failed` events, and command and file-change items.
fn parse_codex(stdout: &str) -> CliReport {
    let mut report = CliReport::default();
    let mut usage = Usage::default();
    for record in records(stdout) {
        let item = &record["item"];
        match record["type"].as_str() {
            Some("item.completed") => match item["type"].as_str() {
                Some("agent_message") => {
                    report.text = item["text"].as_str().unwrap_or_default().to_owned();
                }
                Some("command_execution" | "file_change" | "mcp_tool_call") => {
                    let failed = item["status"] == "failed";
                    let output = item["aggregated_output"]
                        .as_str()
                        .or_else(|| item["error"]["message"].as_str())
                        .unwrap_or("failed");
                    report.tools.record(failed.then_some(output));
                }
                _ => {}
            },
            Some("turn.completed") => {
                let turn = &record["usage"];
                usage.add(&Usage {
                    input_tokens: turn["input_tokens"].as_u64().unwrap_or(0),
                    output_tokens: turn["output_tokens"].as_u64().unwrap_or(0),
                    cache_read_tokens: turn["cached_input_tokens"].as_u64().unwrap_or(0),
                    ..Usage::default()
                });
            }
            Some("error") => {
                report.error = record["message"].as_str().map(str::to_owned);
            }
            Some("turn.failed") => {
                report.error = record["error"]["message"]
                    .as_str()
                    .map(str::to_owned)
                    .or(report.error);
            }
            // Older versions: {"msg": {"type": "agent_message", "message": ...}}.
            _ if record["msg"]["type"] == "agent_message" => {
                report.text = record["msg"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
            }
            _ => {}
        }
    }
    report.usage = reported(usage);
    report
}

/// `gemini -o json`: the `response` field, usage and model from `stats.models`, the
/// `error` object (on stdout, or pretty-printed at the end of stderr).
fn parse_gemini(stdout: &str, stderr: &str) -> CliReport {
    let mut report = CliReport::default();
    let document: Option<Value> = serde_json::from_str(stdout.trim()).ok();
    let error_document = || {
        // The last line that opens a JSON object, parsed with what follows it.
        let lines: Vec<&str> = stderr.lines().collect();
        (0..lines.len())
            .rev()
            .filter(|index| lines[*index].starts_with('{'))
            .find_map(|index| serde_json::from_str::<Value>(&lines[index..].join("\n")).ok())
    };
    let error = document
        .as_ref()
        .filter(|document| document["error"].is_object())
        .cloned()
        .or_else(error_document);
    report.error =
        error.and_then(|document| document["error"]["message"].as_str().map(str::to_owned));
    let Some(document) = document else {
        return report;
    };
    report.text = document["response"].as_str().unwrap_or_default().to_owned();
    // `stats.models.{model}.tokens`: prompt (cache reads included), cached, candidates
    // and thoughts, mapped as the gemini API adapter maps its usage block (thoughts
    // count as output and as reasoning). The main model is the one with most prompt
    // tokens (routing and summaries use smaller ones).
    let mut usage = Usage::default();
    let mut main: Option<(u64, String)> = None;
    let models = document["stats"]["models"].as_object();
    for (name, model) in models.into_iter().flatten() {
        let tokens = &model["tokens"];
        let thoughts = tokens["thoughts"].as_u64().unwrap_or(0);
        let prompt = tokens["prompt"].as_u64().unwrap_or(0);
        usage.add(&Usage {
            input_tokens: prompt,
            output_tokens: tokens["candidates"].as_u64().unwrap_or(0) + thoughts,
            reasoning_tokens: thoughts,
            cache_read_tokens: tokens["cached"].as_u64().unwrap_or(0),
            ..Usage::default()
        });
        if main.as_ref().is_none_or(|(most, _)| prompt > *most) {
            main = Some((prompt, name.clone()));
        }
    }
    report.model = main.map(|(_, name)| name);
    report.usage = reported(usage);
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::tests::repository;

    /// Writes a shell script into `dir`. Tests run it as `/bin/sh {script}`, since
    /// executing a freshly written file races with forks of parallel tests (ETXTBSY).
    fn script(dir: &std::path::Path, name: &str, body: &str) -> String {
        let path = dir.join(name);
        fs_err::write(&path, body).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn sh(script: String, working_dir: &std::path::Path) -> CliAgentConfig {
        CliAgentConfig::command(
            vec!["/bin/sh".to_owned(), script],
            working_dir,
            ProcessEnv::inherit(),
        )
        .unwrap()
    }

    fn claude_like(script: String, working_dir: &std::path::Path) -> CliAgentConfig {
        let mut config = CliAgentConfig::for_provider(
            Provider::Anthropic,
            "claude-sonnet-4-6",
            working_dir,
            ProcessEnv::inherit(),
        )
        .unwrap();
        config.program = "/bin/sh".to_owned();
        config.args.insert(0, script);
        config
    }

    #[tokio::test]
    async fn fake_claude_writes_files_and_reports_a_result() {
        let bin = tempfile::tempdir().unwrap();
        let repo = repository();
        let program = script(
            bin.path(),
            "claude",
            r#"prompt=$(cat)
printf '%s' "$prompt" > prompt-seen.txt
echo changed >> tracked.txt
mkdir -p src && echo new > src/new.rs
echo "{\"type\":\"system\",\"args\":\"$*\"}"
echo '{"type":"assistant","message":"working"}'
echo '{"type":"result","result":"All done {\"outcome\":\"success\"}","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2},"total_cost_usd":0.5}'
"#,
        );
        let config = claude_like(program, repo.path());
        let outcome = run_cli_agent(&config, "do the thing", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.failure, None);
        assert_eq!(outcome.text, "All done {\"outcome\":\"success\"}");
        let usage = outcome.usage.unwrap();
        assert_eq!(usage.input_tokens, 10);
        assert_eq!(usage.output_tokens, 5);
        assert_eq!(usage.cache_read_tokens, 2);
        assert_eq!(usage.cost_usd, Some(0.5));
        assert_eq!(
            outcome.files_touched,
            ["prompt-seen.txt", "src/new.rs", "tracked.txt"]
        );
        assert!(outcome.last_touched.is_some());
        assert_eq!(
            fs_err::read_to_string(repo.path().join("prompt-seen.txt")).unwrap(),
            "do the thing"
        );
    }

    #[tokio::test]
    async fn model_flag_is_appended() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let program = script(bin.path(), "args", r#"cat > /dev/null; echo "$*""#);
        let mut config = sh(program, dir.path());
        config.args.push("exec".to_owned());
        config.model = Some("gpt-5.4".to_owned());
        let outcome = run_cli_agent(&config, "", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.text, "exec --model gpt-5.4\n");
        assert!(outcome.files_touched.is_empty());
    }

    #[tokio::test]
    async fn non_zero_exit_is_deterministic_with_stderr_tail() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let program = script(bin.path(), "failing", "cat > /dev/null; for i in $(seq 1 30); do echo \"line $i\" >&2; done; echo 'HTTP 503 timeout'; exit 4");
        let config = sh(program, dir.path());
        let outcome = run_cli_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        let failure = outcome.failure.unwrap();
        assert_eq!(failure.class, FailureClass::Deterministic);
        let expected_tail: Vec<String> = (11..=30).map(|i| format!("line {i}")).collect();
        assert_eq!(
            failure.reason,
            format!("/bin/sh exited with code 4: {}", expected_tail.join("\n"))
        );
    }

    #[tokio::test]
    async fn missing_program_and_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let config = CliAgentConfig::command(
            vec!["fabro-no-such-agent-cli".to_owned()],
            dir.path(),
            ProcessEnv::inherit(),
        )
        .unwrap();
        let error = run_cli_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "cli backend requires 'fabro-no-such-agent-cli' on PATH"
        );
        let bin = tempfile::tempdir().unwrap();
        let program = script(bin.path(), "slow", "sleep 30");
        let mut config = sh(program, dir.path());
        config.timeout = Some(Duration::from_millis(200));
        let started = std::time::Instant::now();
        let outcome = run_cli_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.failure.unwrap().class, FailureClass::TransientInfra);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn writes_outside_the_scope_are_structural() {
        let bin = tempfile::tempdir().unwrap();
        let repo = repository();
        let program = script(bin.path(), "agent", "cat > /dev/null; echo x > README.md; echo y > status.json; mkdir -p src; echo z > src/a.rs");
        let mut config = sh(program, repo.path());
        config.write_scope = vec!["src/**".to_owned()];
        let outcome = run_cli_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        let failure = outcome.failure.unwrap();
        assert_eq!(failure.class, FailureClass::Structural);
        assert_eq!(failure.reason, "write scope violation: README.md");
    }

    #[test]
    fn codex_and_gemini_outputs() {
        let codex = "{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"first\"}}\nnot json\n{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"last\"}}\n{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":7,\"cached_input_tokens\":3,\"output_tokens\":2}}";
        let report = parse_output(CliOutputFormat::CodexJson, codex, "");
        let (text, usage) = (report.text, report.usage.unwrap());
        assert_eq!(text, "last");
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens
            ),
            (7, 2, 3)
        );
        let report = parse_output(
            CliOutputFormat::GeminiJson,
            "{\"response\": \"hi\", \"stats\": {}}",
            "",
        );
        assert_eq!(report.text, "hi");
        assert_eq!(report.usage, None);
        let gemini = r#"{"response": "done", "stats": {"models": {
            "gemini-3.1-pro-preview": {"api": {"totalRequests": 2},
                "tokens": {"prompt": 2000, "candidates": 20, "total": 2174, "cached": 1500, "thoughts": 154, "tool": 0}},
            "gemini-3-flash-preview": {"tokens": {"prompt": 100, "candidates": 10}}}}}"#;
        let report = parse_output(CliOutputFormat::GeminiJson, gemini, "");
        assert_eq!(report.model.as_deref(), Some("gemini-3.1-pro-preview"));
        let (text, usage) = (report.text, report.usage.unwrap());
        assert_eq!(text, "done");
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.reasoning_tokens,
                usage.cache_read_tokens
            ),
            (2100, 184, 154, 1500)
        );
        let report = parse_output(CliOutputFormat::ClaudeStreamJson, "garbage", "");
        assert_eq!(report.text, "");
        assert!(
            CliAgentConfig::for_provider(Provider::Simulated, "m", ".", ProcessEnv::inherit())
                .is_err()
        );
    }
    /// A stage environment confined as under `agent_isolation = "workspace"` (no kernel
    /// mechanism is needed to ask whether it is confined).
    fn confined_env(tmp: &std::path::Path) -> ProcessEnv {
        use crate::isolation::{IsolationMode, IsolationSettings, KernelSupport, ProcessKind};
        empty_env()
            .with_isolation(IsolationSettings::new(
                IsolationMode::Workspace,
                IsolationMode::None,
                KernelSupport::detect_only(&[]),
            ))
            .for_stage(
                ProcessKind::Agent,
                &crate::isolation::PrivateTmpDir::new(tmp.join("tmp")),
            )
    }

    /// An environment with no variables (the test process's own may set `IS_SANDBOX`).
    fn empty_env() -> ProcessEnv {
        ProcessEnv::new(Vec::new(), &[], &std::collections::BTreeMap::new())
    }

    #[test]
    fn commands_and_environments_follow_fabros_isolation() {
        let tmp = tempfile::tempdir().unwrap();
        let confined = confined_env(tmp.path());
        assert!(confined.is_confined());
        let config = |provider, env: &ProcessEnv| {
            CliAgentConfig::for_provider(provider, "m", ".", env.clone()).unwrap()
        };
        // Decision 68: fabro is codex's sandbox when it confines it.
        let codex = config(Provider::OpenAi, &confined);
        assert_eq!(
            codex.args,
            ["exec", "--json", "--sandbox", "danger-full-access"]
        );
        let codex = config(Provider::OpenAi, &empty_env());
        assert_eq!(
            codex.args,
            ["exec", "--json", "--sandbox", "workspace-write"]
        );
        let claude = config(Provider::Anthropic, &confined);
        assert_eq!(
            claude.env.get("IS_SANDBOX").map(|v| v.to_str()),
            Some(Some("1"))
        );
        let claude = config(Provider::Anthropic, &empty_env());
        assert_eq!(claude.env.get("IS_SANDBOX"), None);
        for env in [&confined, &empty_env()] {
            let gemini = config(Provider::Gemini, env);
            assert_eq!(
                gemini
                    .env
                    .get("GEMINI_CLI_TRUST_WORKSPACE")
                    .map(|v| v.to_str()),
                Some(Some("true"))
            );
        }
    }

    #[tokio::test]
    async fn a_failed_claude_reports_the_error_of_its_result_record() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        // Claude Code writes its errors to stdout, nothing to stderr.
        let program = script(
            bin.path(),
            "claude",
            r#"cat > /dev/null
echo '{"type":"system","subtype":"init","model":"claude-sonnet-4-5"}'
echo '{"type":"result","is_error":true,"result":"API Error: 500 overloaded upstream","usage":{"input_tokens":0,"output_tokens":0},"total_cost_usd":0,"modelUsage":{}}'
exit 1
"#,
        );
        let config = claude_like(program, dir.path());
        let outcome = run_cli_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        let failure = outcome.failure.unwrap();
        assert_eq!(failure.class, FailureClass::Deterministic);
        assert_eq!(
            failure.reason,
            "/bin/sh exited with code 1: API Error: 500 overloaded upstream"
        );
    }

    #[tokio::test]
    async fn codex_and_gemini_errors_come_from_their_json() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let codex = script(
            bin.path(),
            "codex",
            r#"cat > /dev/null
echo '{"type":"thread.started","thread_id":"t"}'
echo '{"type":"error","message":"We are currently experiencing high demand"}'
echo '{"type":"turn.failed","error":{"message":"We are currently experiencing high demand"}}'
echo 'Reading prompt from stdin...' >&2
exit 1
"#,
        );
        let mut config = sh(codex, dir.path());
        config.format = CliOutputFormat::CodexJson;
        let outcome = run_cli_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            outcome.failure.unwrap().reason,
            "/bin/sh exited with code 1: We are currently experiencing high demand"
        );
        // gemini prints its error object (pretty-printed) on stderr.
        let gemini = script(
            bin.path(),
            "gemini",
            r#"cat > /dev/null
echo 'YOLO mode is enabled.' >&2
printf '{\n  "session_id": "s",\n  "error": {\n    "type": "Error",\n    "message": "Quota exceeded for model",\n    "code": 1\n  }\n}\n' >&2
exit 1
"#,
        );
        let mut config = sh(gemini, dir.path());
        config.format = CliOutputFormat::GeminiJson;
        let outcome = run_cli_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            outcome.failure.unwrap().reason,
            "/bin/sh exited with code 1: Quota exceeded for model"
        );
    }

    #[tokio::test]
    async fn a_timeout_reads_like_every_stage_timeout() {
        let bin = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let program = script(bin.path(), "slow", "sleep 30");
        let mut config = sh(program, dir.path());
        config.timeout = Some(Duration::from_millis(200));
        let outcome = run_cli_agent(&config, "x", &CancellationToken::new())
            .await
            .unwrap();
        let failure = outcome.failure.unwrap();
        assert_eq!(failure.class, FailureClass::TransientInfra);
        assert_eq!(failure.reason, "stage timed out after 200ms");
    }
}
