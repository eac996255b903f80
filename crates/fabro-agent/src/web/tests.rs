//! The web tools against a loopback server: Markdown, the cut, the limits, Brave's
//! wire format.
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::tool::test_support::{context, run};

const PAGE: &str = "<html><head><title>t</title><style>p{}</style></head><body><h1>Release notes</h1><p>Fabro now speaks <b>MCP</b>.</p><script>alert(1)</script></body></html>";

/// Serves `/page`, `/loop` (redirects to itself), `/big` (10 MB, no length), `/slow`
/// (headers, then nothing) and Brave's search path; returns the base URL.
async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0_u8; 1024];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                let request = String::from_utf8_lossy(&request).into_owned();
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let head = |status: &str, kind: &str, extra: &str| {
                    format!("HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nConnection: close\r\n{extra}\r\n")
                };
                if path == "/page" {
                    let _ = stream
                        .write_all(
                            format!(
                                "{}{PAGE}",
                                head(
                                    "200 OK",
                                    "text/html; charset=utf-8",
                                    &format!("Content-Length: {}\r\n", PAGE.len())
                                )
                            )
                            .as_bytes(),
                        )
                        .await;
                } else if path == "/loop" {
                    let _ = stream
                        .write_all(
                            head(
                                "302 Found",
                                "text/plain",
                                "Location: /loop\r\nContent-Length: 0\r\n",
                            )
                            .as_bytes(),
                        )
                        .await;
                } else if path == "/big" {
                    let _ = stream
                        .write_all(head("200 OK", "text/plain", "").as_bytes())
                        .await;
                    let chunk = vec![b'x'; 64 * 1024];
                    for _ in 0..160 {
                        if stream.write_all(&chunk).await.is_err() {
                            return;
                        }
                    }
                } else if path == "/slow" {
                    let _ = stream
                        .write_all(head("200 OK", "text/plain", "").as_bytes())
                        .await;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                } else if path.starts_with("/res/v1/web/search?q=fabro+mcp&count=2")
                    && request.contains("x-subscription-token: brave-key")
                {
                    let body = r#"{"web":{"results":[{"title":"Fabro","url":"https://fabro.example/","description":"Workflows for agents"},{"title":"MCP","url":"https://modelcontextprotocol.io/","description":"The protocol"}]}}"#;
                    let _ = stream
                        .write_all(
                            format!(
                                "{}{body}",
                                head(
                                    "200 OK",
                                    "application/json",
                                    &format!("Content-Length: {}\r\n", body.len())
                                )
                            )
                            .as_bytes(),
                        )
                        .await;
                } else {
                    let _ = stream
                        .write_all(
                            head("404 Not Found", "text/plain", "Content-Length: 0\r\n").as_bytes(),
                        )
                        .await;
                }
            });
        }
    });
    base
}

#[tokio::test]
async fn a_page_becomes_markdown_cut_at_max_chars() {
    let base = serve().await;
    let (_dir, context) = context();
    let fetch = Arc::new(WebFetch::default());
    let result = run(
        fetch.clone(),
        json!({"url": format!("{base}/page")}),
        &context,
    )
    .await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        result.output,
        "# Release notes\n\nFabro now speaks **MCP**."
    );
    let result = run(
        fetch,
        json!({"url": format!("{base}/page"), "max_chars": 15}),
        &context,
    )
    .await;
    assert_eq!(result.output, "# Release notes\n[cut: 15 of 42 characters]");
}

#[tokio::test]
async fn redirect_loops_large_bodies_and_slow_servers_are_tool_errors() {
    let base = serve().await;
    let (_dir, context) = context();
    let fetch = Arc::new(WebFetch::default());
    let looped = run(
        fetch.clone(),
        json!({"url": format!("{base}/loop")}),
        &context,
    )
    .await;
    assert!(looped.is_error);
    assert_eq!(
        looped.output,
        "Tool error (web_fetch): more than 5 redirects"
    );
    let big = run(fetch, json!({"url": format!("{base}/big")}), &context).await;
    assert!(big.is_error);
    assert_eq!(
        big.output,
        "Tool error (web_fetch): the response is larger than 5242880 bytes"
    );
    let started = std::time::Instant::now();
    let quick = Arc::new(WebFetch::with_limits(
        Duration::from_millis(300),
        MAX_BODY_BYTES,
    ));
    let slow = run(quick, json!({"url": format!("{base}/slow")}), &context).await;
    assert!(slow.is_error);
    assert_eq!(
        slow.output,
        "Tool error (web_fetch): no complete answer within 0.3s"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let file = run(
        Arc::new(WebFetch::default()),
        json!({"url": "file:///etc/passwd"}),
        &context,
    )
    .await;
    assert!(file.is_error);
    assert_eq!(FETCH_TIMEOUT, Duration::from_secs(15));
}

#[tokio::test]
async fn search_speaks_braves_wire_format() {
    let base = serve().await;
    let (_dir, context) = context();
    let search = Arc::new(WebSearch::brave(base, "brave-key"));
    let result = run(search, json!({"query": "fabro mcp", "count": 2}), &context).await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        result.output,
        "1. Fabro\n   https://fabro.example/\n   Workflows for agents\n2. MCP\n   https://modelcontextprotocol.io/\n   The protocol\n"
    );
}
