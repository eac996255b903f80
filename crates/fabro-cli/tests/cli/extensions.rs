//! Skills, tool sets and the validation of the extension settings (SPEC 19.2, 19.4,
//! issue 34 acceptance 3 and 5): what the model is offered, what a scripted call does,
//! and the diagnostics and configuration errors of unknown names.

use fabro_test_support::TestEnv;
use fabro_twin::Reply;

use crate::backends::{events, events_named, json, stage_dir};
use crate::mcp::{call, offered, repository, run, twin};
use crate::{code, fabro, stderr, stdout};

fn workflow(attributes: &str) -> String {
    format!(
        r#"digraph w {{
    graph [default_model="sonnet"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, prompt="Review the change"{attributes}]
    start -> work -> exit
}}
"#
    )
}

const REVIEW_SKILL: &str = "---\nname: review\ndescription: Review a diff hunk by hunk\n---\n\nRead every hunk and list the risks first.\n";

/// Acceptance 3: a skill in `.fabro/skills/review/SKILL.md` is listed in the system
/// prompt and `use_skill` returns its body; `skills=""` removes the list and the tool.
#[test]
fn a_repository_skill_is_listed_and_served_by_use_skill() {
    let env = TestEnv::new("skills_listed");
    env.write(".fabro/skills/review/SKILL.md", REVIEW_SKILL);
    env.write(".fabro/skills/review/checklist.md", "- tests\n");
    env.write(".fabro/skills/broken/SKILL.md", "no front matter\n");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(
        &runtime,
        vec![
            call(
                "toolu_1",
                "use_skill",
                &serde_json::json!({"name": "review"}),
            ),
            Reply::text("Reviewed."),
        ],
    );
    repository(&env, &workflow(""), "");
    let output = run(&env, &twin, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let requests = twin.requests();
    let first = requests[0].body.to_string();
    assert!(
        first.contains("- review: Review a diff hunk by hunk"),
        "{first}"
    );
    assert!(offered(&requests[0]).contains(&"use_skill".to_owned()));
    let second = requests[1].body.to_string();
    assert!(
        second.contains("Read every hunk and list the risks first."),
        "{second}"
    );
    assert!(second.contains("checklist.md"), "{second}");
    let events = events(&env);
    let invalid: Vec<_> = events_named(&events, "Warning")
        .into_iter()
        .filter(|event| event["properties"]["code"] == "skill_invalid")
        .collect();
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert!(invalid[0]["properties"]["path"]
        .as_str()
        .unwrap_or_default()
        .ends_with(".fabro/skills/broken/SKILL.md"));

    let env = TestEnv::new("skills_disabled");
    env.write(".fabro/skills/review/SKILL.md", REVIEW_SKILL);
    let twin = crate::mcp::twin(&runtime, vec![Reply::text("No skills.")]);
    repository(&env, &workflow(", skills=\"\""), "");
    let output = run(&env, &twin, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let requests = twin.requests();
    let first = requests[0].body.to_string();
    assert!(!first.contains("Review a diff hunk by hunk"), "{first}");
    assert!(!offered(&requests[0]).contains(&"use_skill".to_owned()));
}

/// Acceptance 5: with `tools="read-only"` the request offers only the read tools, and
/// a scripted `write_file` call is a tool error that leaves the file unchanged.
#[test]
fn a_read_only_stage_is_offered_read_tools_and_cannot_write() {
    let env = TestEnv::new("tools_read_only");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(
        &runtime,
        vec![
            call(
                "toolu_1",
                "write_file",
                &serde_json::json!({"file_path": "notes.txt", "content": "overwritten"}),
            ),
            Reply::text("Could not write."),
        ],
    );
    repository(&env, &workflow(", tools=\"read-only\""), "");
    let output = run(&env, &twin, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let requests = twin.requests();
    assert_eq!(offered(&requests[0]), ["read_file", "grep", "glob"]);
    let second = requests[1].body.to_string();
    assert!(
        second.contains("not available with tools=\\\"read-only\\\""),
        "{second}"
    );
    let status = json(&stage_dir(&env, "work").join("status.json"));
    assert_eq!(status["status"], "success");
    assert_eq!(status["files_touched"], serde_json::json!([]));
    // The run branch holds the file as committed.
    let notes = crate::backends::git(&env, &["show", "fabro/run/r1:notes.txt"]);
    assert_eq!(notes, "the notes of the worktree\n");
}

/// Unknown MCP servers and skills are diagnostics at the attribute's line and column;
/// an unknown tool set is an error there.
#[test]
fn unknown_extension_names_are_diagnostics_with_positions() {
    let env = TestEnv::new("extensions_validate");
    env.write(".fabro/skills/review/SKILL.md", REVIEW_SKILL);
    env.write(
        "w.fabro",
        "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  work [prompt=\"p\", mcp_servers=\"files,tracker\", skills=\"review,deploy\"]\n  check [prompt=\"p\", tools=\"admin\"]\n  start -> work -> check -> exit\n}\n",
    );
    env.write(
        "workflow.toml",
        "[mcp_servers.files]\ncommand = [\"mcp-server-filesystem\", \".\"]\n",
    );
    let output = fabro(&env, &["validate", "w.fabro"]);
    let text = stdout(&output);
    assert_eq!(code(&output), 1, "{text}{}", stderr(&output));
    assert!(
        text.contains("w.fabro:4:21: warning[mcp_server_known]: node 'work' names unknown MCP server 'tracker' in mcp_servers"),
        "{text}"
    );
    assert!(
        text.contains("w.fabro:4:50: warning[skill_known]: node 'work' names unknown skill 'deploy' in skills"),
        "{text}"
    );
    assert!(
        text.contains("w.fabro:5:22: error[attribute_type]"),
        "{text}"
    );
    assert!(
        !text.contains("'files'") && !text.contains("'review'"),
        "{text}"
    );
}

/// A stdio server without `command` and an HTTP one without `url` are configuration
/// errors (exit 2) naming the key.
#[test]
fn a_server_without_command_or_url_exits_2_naming_the_key() {
    let env = TestEnv::new("extensions_config_error");
    env.write("w.fabro", &workflow(""));
    env.write("workflow.toml", "[mcp_servers.tracker]\ntype = \"http\"\n");
    let output = fabro(&env, &["run", "w.fabro", "--dry-run"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("an http server needs a url: key 'mcp_servers.tracker.url'"),
        "{}",
        stderr(&output)
    );
    env.write(
        "workflow.toml",
        "[mcp_servers.files]\nenv = { A = \"1\" }\n",
    );
    let output = fabro(&env, &["validate", "w.fabro"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("a stdio server needs a command: key 'mcp_servers.files.command'"),
        "{}",
        stderr(&output)
    );
}

/// Serves `page` as HTML to every request on a loopback port, from a thread, until the
/// test ends; returns the page's URL.
fn serve_page(page: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!("http://{}/notes", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0_u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    url
}

/// Acceptance 4: with `web="true"` the agent fetches a loopback page as Markdown cut at
/// `max_chars`; with `[sandbox] network = false` the web tools are not offered, and
/// without `web` neither.
#[test]
fn web_fetch_returns_markdown_and_is_withheld_without_network() {
    let url = serve_page(
        "<html><body><h2>Changelog</h2><p>Added <i>skills</i> and web tools.</p></body></html>",
    );
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let env = TestEnv::new("web_fetch_markdown");
    let twin = twin(
        &runtime,
        vec![
            call(
                "toolu_1",
                "web_fetch",
                &serde_json::json!({"url": url, "max_chars": 20}),
            ),
            Reply::text("Fetched."),
        ],
    );
    repository(&env, &workflow(", web=\"true\""), "");
    let output = run(&env, &twin, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let requests = twin.requests();
    assert!(offered(&requests[0]).contains(&"web_fetch".to_owned()));
    let second = requests[1].body.to_string();
    assert!(
        second.contains("## Changelog\\n\\nAdded \\n[cut: 20 of 43 characters]"),
        "{second}"
    );

    let env = TestEnv::new("web_fetch_no_network");
    let twin = crate::mcp::twin(&runtime, vec![Reply::text("No web.")]);
    repository(
        &env,
        &workflow(", web=\"true\""),
        "[agent]\nweb = true\n\n[sandbox]\nnetwork = false\n",
    );
    let output = run(&env, &twin, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let tools = offered(&twin.requests()[0]);
    assert!(
        !tools.iter().any(|tool| tool.starts_with("web_")),
        "{tools:?}"
    );

    let env = TestEnv::new("web_fetch_off");
    let twin = crate::mcp::twin(&runtime, vec![Reply::text("No web.")]);
    repository(&env, &workflow(""), "");
    let output = run(&env, &twin, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(!offered(&twin.requests()[0]).contains(&"web_fetch".to_owned()));
}

/// SPEC 19.1: a `cli` agent gets the servers where its program has a documented flag:
/// Claude Code's `--mcp-config`.
#[test]
fn claude_cli_agents_get_the_servers_through_mcp_config() {
    use crate::backends::{fake_program, path_with, read, side_dir};
    let env = TestEnv::new("claude_mcp_config");
    let bin = side_dir(&env, "bin");
    let log = side_dir(&env, "log");
    fake_program(
        &bin,
        "claude",
        &format!(
            r#"printf '%s\n' "$@" > '{}/args.txt'
cat > /dev/null
echo '{{"type":"result","subtype":"success","result":"Done","usage":{{"input_tokens":1,"output_tokens":1}}}}'
"#,
            log.display()
        ),
    );
    repository(
        &env,
        "digraph cli {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  work [backend=\"cli\", provider=\"anthropic\", model=\"sonnet\", prompt=\"p\"]\n  start -> work -> exit\n}\n",
        "[mcp_servers.files]\ncommand = [\"mcp-server-filesystem\", \".\"]\n",
    );
    let output = crate::backends::run(&env, &path_with(&bin));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let args: Vec<String> = read(&log.join("args.txt"))
        .lines()
        .map(str::to_owned)
        .collect();
    let at = args
        .iter()
        .position(|arg| arg == "--mcp-config")
        .unwrap_or_else(|| panic!("no --mcp-config in {args:?}"));
    let config: serde_json::Value = serde_json::from_str(&args[at + 1]).expect("JSON");
    assert_eq!(
        config["mcpServers"]["files"],
        serde_json::json!({"type": "stdio", "command": "mcp-server-filesystem", "args": ["."], "env": {}})
    );
}

/// SPEC 19.1: codex gets the servers as `-c mcp_servers...` overrides of its documented
/// configuration.
#[test]
fn codex_cli_agents_get_the_servers_as_config_overrides() {
    use crate::backends::{fake_program, path_with, read, side_dir};
    let env = TestEnv::new("codex_mcp_overrides");
    let bin = side_dir(&env, "bin");
    let log = side_dir(&env, "log");
    fake_program(
        &bin,
        "codex",
        &format!(
            r#"printf '%s\n' "$@" > '{}/args.txt'
cat > /dev/null
echo '{{"type":"item.completed","item":{{"id":"i1","type":"agent_message","text":"Done"}}}}'
echo '{{"type":"turn.completed","usage":{{"input_tokens":1,"output_tokens":1}}}}'
"#,
            log.display()
        ),
    );
    repository(
        &env,
        "digraph cli {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  work [backend=\"cli\", provider=\"openai\", model=\"gpt-5.1\", prompt=\"p\"]\n  start -> work -> exit\n}\n",
        "[mcp_servers.files]\ncommand = [\"mcp-server-filesystem\", \".\"]\n",
    );
    let output = crate::backends::run(&env, &path_with(&bin));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let args = read(&log.join("args.txt"));
    assert!(
        args.contains("-c\nmcp_servers.files.command=\"mcp-server-filesystem\"\n-c\nmcp_servers.files.args=[\".\"]\n"),
        "{args}"
    );
}
