//! Unit tests of names and result rendering; connections to real servers are tested in
//! `tests/it/mcp.rs`.
use super::*;

#[test]
fn tool_names_keep_letters_digits_and_underscores() {
    assert_eq!(mcp_tool_name("everything", "echo"), "mcp__everything__echo");
    assert_eq!(
        mcp_tool_name("my-files", "read.text file"),
        "mcp__my_files__read_text_file"
    );
    let long = mcp_tool_name("tracker", &"search_".repeat(12));
    assert_eq!(long.len(), 64);
    assert!(long.starts_with("mcp__tracker__search_search_"), "{long}");
    assert_ne!(long, mcp_tool_name("tracker", &"search_".repeat(13)));
}

/// `target/mcp/node_modules/.bin/{name}` (installed by `.ci/run`), or a skip (a failure
/// where `CI` is set).
fn installed(test: &str, name: &str) -> Option<std::path::PathBuf> {
    let path = fabro_test_support::workspace_root()
        .join("target/mcp/node_modules/.bin")
        .join(name);
    if path.exists() {
        Some(path)
    } else {
        fabro_test_support::skip(test, &format!("{} is missing: run .ci/run", path.display()));
        None
    }
}

fn stdio(name: &str, command: Vec<String>) -> McpServerConfig {
    McpServerConfig {
        name: name.to_owned(),
        transport: McpTransport::Stdio {
            command,
            env: BTreeMap::new(),
        },
        startup_timeout: Duration::from_secs(20),
        tool_timeout: Duration::from_secs(20),
        required: false,
    }
}

#[tokio::test]
async fn a_stdio_server_lists_and_runs_its_tools_once_per_pool() {
    let Some(program) = installed("mcp_stdio_echo", "mcp-server-everything") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = stdio("everything", vec![program.display().to_string()]);
    let pool = McpPool::default();
    let env = ProcessEnv::inherit();
    let connection = pool.connect(&config, &env, dir.path()).await.unwrap();
    let again = pool.connect(&config, &env, dir.path()).await.unwrap();
    assert!(Arc::ptr_eq(&connection, &again), "one connection per pool");
    let tools = connection.tools();
    let echo = tools
        .iter()
        .find(|tool| tool.name() == "mcp__everything__echo")
        .expect("echo is offered");
    assert_eq!(echo.server(), Some("everything"));
    let (_tree, context) = crate::tool::test_support::context();
    let output = echo
        .execute(serde_json::json!({"message": "hi there"}), &context)
        .await
        .unwrap();
    assert_eq!(output, "Echo: hi there");
    pool.close().await;
}

#[tokio::test]
async fn a_server_that_exits_is_unavailable_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let config = stdio(
        "broken",
        vec![
            "sh".into(),
            "-c".into(),
            "echo cannot start >&2; exit 3".into(),
        ],
    );
    let error = McpPool::default()
        .connect(&config, &ProcessEnv::inherit(), dir.path())
        .await
        .unwrap_err();
    assert_eq!(error.server, "broken");
    assert!(error.reason.contains("cannot start"), "{}", error.reason);
}

#[test]
fn claude_gets_its_mcp_config_json() {
    let mut servers = vec![stdio(
        "files",
        vec!["mcp-server-filesystem".into(), ".".into()],
    )];
    servers.push(McpServerConfig {
        name: "tracker".to_owned(),
        transport: McpTransport::Http {
            url: "https://mcp.example.com/mcp".to_owned(),
            headers: vec![("Authorization".to_owned(), "Bearer t".to_owned())],
        },
        startup_timeout: DEFAULT_STARTUP_TIMEOUT,
        tool_timeout: DEFAULT_TOOL_TIMEOUT,
        required: true,
    });
    let config: serde_json::Value = serde_json::from_str(&claude_mcp_config(&servers)).unwrap();
    assert_eq!(
        config,
        serde_json::json!({"mcpServers": {
            "files": {"type": "stdio", "command": "mcp-server-filesystem", "args": ["."], "env": {}},
            "tracker": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer t"}}
        }})
    );
}

#[test]
fn codex_gets_config_overrides() {
    let mut files = stdio("files", vec!["npx".into(), "-y".into(), "server".into()]);
    if let McpTransport::Stdio { env, .. } = &mut files.transport {
        env.insert("LOG".to_owned(), "warn".to_owned());
    }
    let tracker = McpServerConfig {
        name: "tracker".to_owned(),
        transport: McpTransport::Http {
            url: "https://mcp.example.com/mcp".to_owned(),
            headers: vec![("Authorization".to_owned(), "Bearer \"t\"".to_owned())],
        },
        startup_timeout: DEFAULT_STARTUP_TIMEOUT,
        tool_timeout: DEFAULT_TOOL_TIMEOUT,
        required: false,
    };
    assert_eq!(
        codex_mcp_overrides(&[files, tracker]),
        [
            "-c",
            r#"mcp_servers.files.command="npx""#,
            "-c",
            r#"mcp_servers.files.args=["-y","server"]"#,
            "-c",
            r#"mcp_servers.files.env={"LOG" = "warn"}"#,
            "-c",
            r#"mcp_servers.tracker.url="https://mcp.example.com/mcp""#,
            "-c",
            r#"mcp_servers.tracker.http_headers={"Authorization" = "Bearer \"t\""}"#,
        ]
    );
}
