//! The MCP front doors end to end: rmcp's client (an independent
//! implementation) and a raw JSON-RPC client drive `mcp-aggregator stdio`
//! and `serve`'s `/mcp`, with the rmcp fixture behind them.

#![cfg(feature = "fixture")]

mod common;

use common::{BIN, Daemon, http, register, wait_status};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::{Map, Value, json};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const UP: Duration = Duration::from_secs(30);

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

/// A config file with fixtures `fx` (dotted names) and `fy`.
/// `mcp-aggregator stdio` on a config, as a desktop client launches it.
fn stdio_command(config: &std::path::Path, data: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(BIN);
    command
        .arg("stdio")
        .arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        // The daemon it starts leaves with its last client.
        .env("MCP_AGGREGATOR_IDLE_EXIT", "0s")
        .stderr(Stdio::null());
    command
}

/// A raw JSON-RPC client on the aggregator's stdin/stdout (pipes or a
/// socketpair), as a desktop client speaks to it.
struct LineClient<W, R> {
    write: W,
    lines: tokio::io::Lines<BufReader<R>>,
}

impl<W: tokio::io::AsyncWrite + Unpin, R: tokio::io::AsyncRead + Unpin> LineClient<W, R> {
    fn new(write: W, read: R) -> Self {
        LineClient {
            write,
            lines: BufReader::new(read).lines(),
        }
    }

    /// Sends a request; its answer's line exactly as the aggregator wrote it.
    async fn ask_line(&mut self, id: i64, method: &str, params: Value) -> String {
        let line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        self.ask_text(id, &line).await
    }

    /// Sends `line` as written (its id is `id`); the answer's line.
    async fn ask_text(&mut self, id: i64, line: &str) -> String {
        self.write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        loop {
            let line = tokio::time::timeout(UP, self.lines.next_line())
                .await
                .expect("an answer within 30 s")
                .unwrap()
                .expect("the aggregator closed its stdout");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return line;
            }
        }
    }

    async fn ask(&mut self, id: i64, method: &str, params: Value) -> Value {
        serde_json::from_str(&self.ask_line(id, method, params).await).unwrap()
    }
}

/// `fx` is a 2025 server (it asks its client for roots the 2025 way); `fy`
/// speaks both eras, so the aggregator speaks 2026-07-28 to it.
fn write_config(dir: &std::path::Path, extra: &[&str]) -> std::path::PathBuf {
    let mut fx_args = vec!["--dotted", "--legacy-only"];
    fx_args.extend_from_slice(extra);
    let config = json!({"mcpServers": {
        // Tools added at run time are what these tests watch: let them
        // through (flagged) instead of holding them back for approval.
        "fx": {"command": FIXTURE, "args": fx_args, "trust": {"pinning": "warn"}},
        "fy": {"command": FIXTURE, "args": ["--prefix", "y_"]}
    }});
    let path = dir.join("servers.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// Waits until the client lists `count` tools.
async fn wait_tools(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    count: usize,
) -> Vec<rmcp::model::Tool> {
    let end = Instant::now() + UP;
    loop {
        let tools = client.list_all_tools().await.unwrap();
        if tools.len() >= count {
            return tools;
        }
        assert!(Instant::now() < end, "only {} tools listed", tools.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_over_stdio_lists_and_calls_with_payloads_unchanged() {
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &[]);
    let command = stdio_command(&config, &temp.path().join("data"));
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    let client = ().serve(transport).await.expect("the aggregator answers initialize");
    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("mcp-aggregator")
    );

    // fx: fixed + 3 generated + dotted; fy: fixed + 3 generated.
    let tools = wait_tools(&client, 2 * (common::FIXED + 3) + 1 + common::META).await;
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    for expected in ["fx__echo", "fy__echo", "fx__api_v2_create", "fy__y_0002"] {
        assert!(
            names.contains(&expected.to_owned()),
            "{expected} missing from {names:?}"
        );
    }
    assert!(names.iter().all(|n| {
        n.len() <= 48
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }));
    let echo = tools.iter().find(|t| t.name == "fx__echo").unwrap();
    assert_eq!(
        echo.description.as_deref(),
        Some("Echo the arguments back as text")
    );
    assert_eq!(
        echo.input_schema["properties"]["value"]["type"], "string",
        "schemas unchanged"
    );

    // Arguments arrive unchanged: unicode, nesting, numbers at the edges, empty objects.
    let arguments = json!({
        "text": "héllo wörld ✓ 日本語 🎉 \u{0000}\u{001f}",
        "nested": {"a": [1, [2, [3, {"b": {}}]]], "empty": {}, "list": []},
        "i64_min": i64::MIN, "i64_max": i64::MAX, "u64_max": u64::MAX,
        "f64_max": f64::MAX, "f64_min_positive": f64::MIN_POSITIVE, "tenth": 0.1, "negative": -1.5e-300,
        "flags": [true, false, null]
    });
    let result = client
        .call_tool(CallToolRequestParams::new("fx__echo").with_arguments(object(arguments.clone())))
        .await
        .unwrap();
    let echoed: Value =
        serde_json::from_str(result.content[0].as_text().unwrap().text.as_str()).unwrap();
    assert_eq!(echoed, arguments);

    // A 1 MiB request and a 1 MiB response.
    let big = "x".repeat(1024 * 1024);
    let result = client
        .call_tool(
            CallToolRequestParams::new("fy__echo").with_arguments(object(json!({"big": big}))),
        )
        .await
        .unwrap();
    let echoed: Value =
        serde_json::from_str(result.content[0].as_text().unwrap().text.as_str()).unwrap();
    assert_eq!(echoed["big"].as_str().map(str::len), Some(1024 * 1024));

    // structuredContent and _meta pass through.
    let result = client
        .call_tool(
            CallToolRequestParams::new("fx__structured")
                .with_arguments(object(json!({"k": [1, 2]}))),
        )
        .await
        .unwrap();
    assert_eq!(result.structured_content, Some(json!({"k": [1, 2]})));
    assert_eq!(
        result.meta.as_ref().and_then(|m| m.0.get("fixture/echoed")),
        Some(&json!(true))
    );

    // Every way of naming a tool.
    for name in ["fx.api.v2.create", "fx__api_v2_create", "api.v2.create"] {
        let result = client
            .call_tool(CallToolRequestParams::new(name))
            .await
            .unwrap();
        assert_eq!(
            result.content[0].as_text().unwrap().text,
            "called api.v2.create",
            "{name}"
        );
    }
    let unknown = client
        .call_tool(CallToolRequestParams::new("no_such_tool"))
        .await
        .unwrap_err();
    assert!(
        unknown.to_string().contains("Tool not found: no_such_tool"),
        "{unknown}"
    );
    let ambiguous = client
        .call_tool(CallToolRequestParams::new("echo"))
        .await
        .unwrap_err();
    let text = ambiguous.to_string();
    assert!(
        text.contains("ambiguous") && text.contains("fx.echo") && text.contains("fy.echo"),
        "{text}"
    );
    client.cancel().await.unwrap();
}

/// rmcp 3.11 as a 2026-07-28 client (`server/discover`, the protocol in
/// every request's `_meta`, no session) of both front doors: it lists every
/// server's tools and calls one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_as_a_2026_client_of_both_front_doors() {
    use rmcp::service::{ClientLifecycleMode, serve_client_with_lifecycle};
    let modern = || ClientLifecycleMode::Discover {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
    };
    // Lists every server's tools and calls one, then leaves.
    async fn exercise(client: rmcp::service::RunningService<rmcp::RoleClient, ()>) {
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert!(
            names.contains(&"fx__echo") && names.contains(&"fy__echo"),
            "{names:?}"
        );
        let answer = client
            .call_tool(
                CallToolRequestParams::new("fx__echo")
                    .with_arguments(object(json!({"era": "2026-07-28"}))),
            )
            .await
            .unwrap();
        assert_eq!(
            answer.content[0].as_text().unwrap().text,
            r#"{"era":"2026-07-28"}"#
        );
        client.cancel().await.unwrap();
    }
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &[]);
    let command = stdio_command(&config, &temp.path().join("stdio-data"));
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    exercise(
        serve_client_with_lifecycle((), transport, modern())
            .await
            .expect("server/discover over stdio"),
    )
    .await;

    let d = Daemon::start_in(
        &temp.path().join("daemon"),
        &["--config", config.to_str().unwrap()],
    );
    mcp_aggregator::http_client::init();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(d.api("/mcp"));
    exercise(
        serve_client_with_lifecycle((), transport, modern())
            .await
            .expect("server/discover over /mcp"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_over_streamable_http_sees_list_changed() {
    let d = Daemon::start();
    register(
        &d,
        // A tool added at run time is what this test watches: let it
        // through (flagged) instead of holding it back for approval.
        json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE}, "trust": {"pinning": "warn"}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(d.api("/mcp"));
    let client = ().serve(transport).await.expect("initialize over /mcp");
    let tools = wait_tools(&client, common::FIXED + 3 + common::META).await;
    assert!(tools.iter().any(|t| t.name == "fx__echo"));
    let result = client
        .call_tool(CallToolRequestParams::new("fx__echo").with_arguments(object(json!({"v": "ü"}))))
        .await
        .unwrap();
    assert_eq!(result.content[0].as_text().unwrap().text, r#"{"v":"ü"}"#);

    // The server adds a tool and says so; the aggregator rediscovers and
    // tells its clients, whose cached list is then refreshed.
    client
        .call_tool(
            CallToolRequestParams::new("fx__add_tool")
                .with_arguments(object(json!({"name": "fresh"}))),
        )
        .await
        .unwrap();
    let tools = wait_tools(&client, common::FIXED + 4 + common::META).await;
    assert!(
        tools.iter().any(|t| t.name == "fx__fresh"),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    client.cancel().await.unwrap();
}

/// A bare JSON-RPC client on a child's stdio, for what rmcp's client hides.
struct RawClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    backlog: Vec<Value>,
}

impl RawClient {
    async fn start(config: &std::path::Path, data_dir: &std::path::Path) -> RawClient {
        RawClient::start_with(config, data_dir, json!({})).await
    }

    async fn start_with(
        config: &std::path::Path,
        data_dir: &std::path::Path,
        capabilities: Value,
    ) -> RawClient {
        RawClient::start_args(config, data_dir, capabilities, &[]).await
    }

    async fn start_args(
        config: &std::path::Path,
        data_dir: &std::path::Path,
        capabilities: Value,
        extra: &[&str],
    ) -> RawClient {
        let mut client = RawClient::spawn(config, data_dir, extra);
        client
            .send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "0"}}}))
            .await;
        client.answer(0).await;
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    /// `mcp-aggregator stdio` with no handshake sent (a 2026-07-28 client
    /// never sends one).
    fn spawn(config: &std::path::Path, data_dir: &std::path::Path, extra: &[&str]) -> RawClient {
        let mut child = tokio::process::Command::new(BIN)
            .arg("stdio")
            .arg("--config")
            .arg(config)
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("MCP_AGGREGATOR_IDLE_EXIT", "0s")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        RawClient {
            child,
            stdin,
            lines,
            backlog: Vec::new(),
        }
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(UP, self.lines.next_line())
            .await
            .expect("a message within 30 s")
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// The answer to request `id`; everything else read meanwhile is kept.
    async fn answer(&mut self, id: i64) -> Value {
        if let Some(pos) = self.backlog.iter().position(|m| m["id"] == id) {
            return self.backlog.remove(pos);
        }
        loop {
            let message = self.next().await;
            if message["id"] == id {
                return message;
            }
            self.backlog.push(message);
        }
    }

    async fn call(&mut self, id: i64, name: &str, arguments: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})).await;
        self.answer(id).await
    }

    async fn wait_for_tool(&mut self, name: &str) {
        let end = Instant::now() + UP;
        let mut id = 1000;
        loop {
            id += 1;
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
                .await;
            let answer = self.answer(id).await;
            if answer["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == name)
            {
                return;
            }
            assert!(Instant::now() < end, "{name} never listed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A 2025 `/mcp` session's call answered as plain JSON (no progress, no
/// log level): `notifications/cancelled` on another POST still ends it
/// here and on the server, and the POST gets its answer at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_answered_as_json_is_cancelled_over_http() {
    let temp = tempfile::tempdir().unwrap();
    let cancel_file = temp.path().join("cancelled");
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO", "connection_config": {
        "command": FIXTURE, "args": ["--cancel-file", cancel_file.to_str().unwrap()]}}),
    )
    .await;
    common::wait_status(&d, "fx", "CONNECTED", UP).await;
    let session = common::mcp_session_with(&d, json!({})).await;
    let call = {
        let (url, session) = (d.api("/mcp"), session.clone());
        tokio::spawn(async move {
            let response = common::http()
                .post(url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .json(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                    "params": {"name": "fx__sleep", "arguments": {"ms": 60000}}}))
                .send()
                .await
                .unwrap();
            let json = response.headers().get("content-type").is_some_and(|t| {
                t.to_str()
                    .unwrap_or_default()
                    .starts_with("application/json")
            });
            (json, response.json::<Value>().await.unwrap_or(Value::Null))
        })
    };
    let started = common::wait_for(UP, || {
        std::fs::read_to_string(&cancel_file)
            .ok()
            .filter(|s| s.contains("started"))
    });
    assert!(started.is_some(), "the call never reached the server");
    let accepted = common::http()
        .post(d.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 8, "reason": "user gave up"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let (json_answer, answer) = tokio::time::timeout(UP, call)
        .await
        .expect("the cancelled call was answered")
        .unwrap();
    assert!(json_answer, "{answer}");
    assert_eq!(answer["id"], 8, "{answer}");
    assert!(answer.get("error").is_some(), "{answer}");
    let cancelled = common::wait_for(UP, || {
        std::fs::read_to_string(&cancel_file)
            .ok()
            .filter(|s| s.contains("cancelled"))
    });
    assert!(cancelled.is_some(), "the server never saw the cancellation");
    // It reached the server: the audit log has it.
    let end = Instant::now() + UP;
    loop {
        let audit: Value =
            common::get_json(&d.api("/api/v1/aggregator/audit?action=call&limit=100")).await;
        let found = audit.as_array().into_iter().flatten().any(|e| {
            e["result"]
                .as_str()
                .is_some_and(|r| r.starts_with("cancelled"))
                && e["details"]
                    .as_str()
                    .is_some_and(|t| t.contains("fx__sleep"))
        });
        if found {
            break;
        }
        assert!(
            Instant::now() < end,
            "the cancelled call was not audited: {audit}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_comes_back_with_the_clients_token_and_cancellation_reaches_the_server() {
    let temp = tempfile::tempdir().unwrap();
    let cancel_file = temp.path().join("cancelled");
    let config = write_config(
        temp.path(),
        &["--cancel-file", cancel_file.to_str().unwrap()],
    );
    let mut client = RawClient::start(&config, &temp.path().join("data")).await;
    client.wait_for_tool("fx__sleep").await;

    client
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "fx__sleep", "arguments": {"ms": 300}, "_meta": {"progressToken": "client-token-42"}}}))
        .await;
    let mut progress = Vec::new();
    let answer = loop {
        let message = client.next().await;
        if message["id"] == 7 {
            break message;
        }
        if message["method"] == "notifications/progress" {
            progress.push(message["params"].clone());
        }
    };
    assert_eq!(answer["result"]["content"][0]["text"], "slept 300 ms");
    assert_eq!(progress.len(), 3, "{progress:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["progressToken"] == "client-token-42"),
        "{progress:?}"
    );
    assert_eq!(progress[2]["progress"].as_f64(), Some(3.0));
    assert_eq!(progress[2]["message"], "step 3 of 3");

    // Cancel a long call: the fixture sees its handler dropped.
    client.send(json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "fx__sleep", "arguments": {"ms": 60000}}})).await;
    // Cancel only once the server is working on it.
    let started = common::wait_for(UP, || {
        std::fs::read_to_string(&cancel_file)
            .ok()
            .filter(|s| s.matches("started").count() == 2)
    });
    assert!(started.is_some(), "the long call never reached the server");
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 8, "reason": "user gave up"}})).await;
    let cancelled = common::wait_for(UP, || {
        std::fs::read_to_string(&cancel_file)
            .ok()
            .filter(|s| s.contains("cancelled"))
    });
    assert!(cancelled.is_some(), "the server never saw the cancellation");
    // The session is still usable.
    let answer = client.call(9, "fx__echo", json!({"after": "cancel"})).await;
    assert_eq!(
        answer["result"]["content"][0]["text"],
        r#"{"after":"cancel"}"#
    );
    let _ = client.child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_is_reconnected_by_the_next_call_and_bad_input_gets_errors() {
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &[]);
    let mut client = RawClient::start(&config, &temp.path().join("data")).await;
    client.wait_for_tool("fx__crash").await;

    // The call that kills the server gets a readable error result.
    let answer = client.call(1, "fx__crash", json!({})).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("fx"), "{text}");
    // The next call finds the server in ERROR (or reconnecting) and still succeeds.
    let answer = client.call(2, "fx.echo", json!({"again": 1})).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], r#"{"again":1}"#,
        "{answer}"
    );

    // Malformed input gets JSON-RPC errors, and the session goes on.
    client.stdin.write_all(b"{not json\n").await.unwrap();
    // (list_changed notifications from the reconnect may come first.)
    let parse_error = loop {
        let message = client.next().await;
        if message.get("error").is_some() {
            break message;
        }
    };
    assert_eq!(parse_error["error"]["code"], -32700);
    assert_eq!(parse_error["id"], Value::Null);
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"arguments": {}}}),
        )
        .await;
    assert_eq!(client.answer(3).await["error"]["code"], -32602);
    client
        .send(json!({"jsonrpc": "2.0", "id": 4, "method": "no/such/method"}))
        .await;
    assert_eq!(client.answer(4).await["error"]["code"], -32601);
    client
        .send(json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}))
        .await;
    assert_eq!(client.answer(5).await["result"], json!({}));
    let _ = client.child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_calls_and_a_slow_server_blocks_nobody() {
    let d = Daemon::start();
    for name in ["a", "b", "c", "slow"] {
        register(&d, json!({"name": name, "transport_type": "STDIO", "connection_config": {"command": FIXTURE}})).await;
    }
    for name in ["a", "b", "c", "slow"] {
        wait_status(&d, name, "CONNECTED", UP).await;
    }
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(d.api("/mcp"));
    let client = std::sync::Arc::new(().serve(transport).await.unwrap());
    wait_tools(&client, 4 * (common::FIXED + 3) + common::META).await;
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    for i in 0..64 {
        let (client, order) = (
            std::sync::Arc::clone(&client),
            std::sync::Arc::clone(&order),
        );
        let server = ["a", "b", "c", "slow"][i % 4];
        calls.push(tokio::spawn(async move {
            let (tool, arguments) = if server == "slow" {
                ("slow__sleep".to_owned(), json!({"ms": 3000}))
            } else {
                (format!("{server}__echo"), json!({"call": i}))
            };
            let result = client
                .call_tool(
                    CallToolRequestParams::new(tool).with_arguments(object(arguments.clone())),
                )
                .await
                .unwrap();
            let text = result.content[0].as_text().unwrap().text.clone();
            if server != "slow" {
                assert_eq!(
                    serde_json::from_str::<Value>(&text).unwrap(),
                    arguments,
                    "each answer matches its call"
                );
            }
            order.lock().unwrap().push(server);
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 64);
    let first_slow = order.iter().position(|s| *s == "slow").unwrap();
    assert_eq!(
        first_slow, 48,
        "all 48 fast calls finished before any slow one: {order:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_call_routes_reports_and_refuses() {
    let d = Daemon::start();
    register(&d, json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE, "args": ["--dotted"]}})).await;
    register(
        &d,
        json!({"name": "fy", "transport_type": "STDIO", "connection_config": {"command": FIXTURE}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    wait_status(&d, "fy", "CONNECTED", UP).await;
    let call = |body: Value| {
        let url = d.api("/api/v1/tools/call");
        async move {
            let response = http().post(url).json(&body).send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    // Wait until the routing table has fx's tools.
    let end = Instant::now() + UP;
    while call(json!({"name": "fx.echo", "arguments": {}})).await.0 != 200 {
        assert!(Instant::now() < end);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) =
        call(json!({"name": "fx.echo", "arguments": {"x": [1, {"y": null}]}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], r#"{"x":[1,{"y":null}]}"#);
    assert_eq!(body["isError"], false);
    assert_eq!(body["metadata"]["routed_to"], "fx");
    assert!(body["metadata"]["routing_time_ms"].as_f64().unwrap() >= 0.0);
    assert!(body["metadata"]["execution_time_ms"].as_f64().unwrap() >= 0.0);

    let (status, body) = call(json!({"name": "echo", "server_id": "fy", "arguments": {}})).await;
    assert_eq!(
        (status, body["metadata"]["routed_to"].clone()),
        (200, json!("fy")),
        "a call by original name + server_id"
    );
    let (status, body) = call(json!({"name": "echo"})).await;
    assert_eq!(status, 409);
    assert_eq!(body["candidates"], json!(["fx.echo", "fy.echo"]));
    let conflicts: Value = common::get_json(&d.api("/api/v1/aggregator/conflicts")).await;
    assert_eq!(conflicts["strategy"], "PRIORITY_BASED");
    let echo = conflicts["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "echo")
        .expect("echo conflict");
    assert_eq!(
        echo["resolved_to"],
        Value::Null,
        "equal priorities tie: {echo}"
    );
    assert_eq!(echo["candidates"].as_array().unwrap().len(), 2);
    let (status, body) = call(json!({"name": "nope.tool"})).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["detail"], "Tool not found: nope.tool");
    let (status, _) = call(json!({"arguments": {}})).await;
    assert_eq!(status, 422);

    let response = http()
        .post(d.api("/api/v1/aggregator/servers/fx/disconnect"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (status, body) = call(json!({"name": "fx.echo", "arguments": {}})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["server"]["name"], "fx");
    assert_eq!(body["server"]["status"], "DISCONNECTED");
    assert!(body["server"]["id"].is_string());

    // The CLI uses the same endpoint.
    let dir = d.data_dir.clone();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        common::cli(&dir, &["call", "fy__echo", r#"{"from": "cli"}"#])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), r#"{"from":"cli"}"#);
    assert!(stderr.contains("routed to fy"), "{stderr}");
    let dir = d.data_dir.clone();
    let (code, _, stderr) =
        tokio::task::spawn_blocking(move || common::cli(&dir, &["call", "fy__echo", "not json"]))
            .await
            .unwrap();
    assert_eq!(code, 2);
    assert!(stderr.contains("not JSON"), "{stderr}");
}

/// The official Python SDK (from PyPI, installed by scripts/setup.sh) as a
/// client nobody here wrote.
fn python() -> std::path::PathBuf {
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/.venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup.sh",
        python.display()
    );
    python
}

fn run_interop(args: &[&str]) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/interop.py");
    let output = std::process::Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python client failed:\n{}\n{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls_through_both_front_doors() {
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &[]);
    let data_dir = temp.path().join("stdio-data");
    let (config_arg, data_arg) = (
        config.to_str().unwrap().to_owned(),
        data_dir.to_str().unwrap().to_owned(),
    );
    let out = tokio::task::spawn_blocking(move || {
        run_interop(&["stdio", BIN, &config_arg, &data_arg, "fx__echo"])
    })
    .await
    .unwrap();
    assert!(
        out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fy__echo"),
        "{out}"
    );
    assert_eq!(
        out["result"]["content"][0]["text"], r#"{"from":"python","n":[1,2.5,null]}"#,
        "{out}"
    );

    let d = Daemon::start();
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let url = d.api("/mcp");
    let out = tokio::task::spawn_blocking(move || run_interop(&["http", &url, "fx__echo"]))
        .await
        .unwrap();
    assert!(
        out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fx__structured"),
        "{out}"
    );
    assert_eq!(
        out["result"]["content"][0]["text"], r#"{"from":"python","n":[1,2.5,null]}"#,
        "{out}"
    );
    assert_eq!(out["result"]["isError"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_templates_prompts_and_subscriptions_of_the_reference_server() {
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("servers.json");
    let everything = common::everything_js();
    std::fs::write(
        &config,
        json!({"mcpServers": {"ev": {"command": "node", "args": [everything, "stdio"]}}})
            .to_string(),
    )
    .unwrap();
    let mut client = RawClient::start(&config, &temp.path().join("data")).await;
    client.wait_for_tool("ev__echo").await;

    // Resources come back namespaced `ev:<uri>`, and are read through it.
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}))
        .await;
    let resources = client.answer(1).await["result"]["resources"]
        .as_array()
        .cloned()
        .unwrap();
    assert!(!resources.is_empty());
    assert!(
        resources
            .iter()
            .all(|r| r["uri"].as_str().unwrap().starts_with("ev:")),
        "{resources:?}"
    );
    let uri = resources[0]["uri"].as_str().unwrap().to_owned();
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": uri}}),
        )
        .await;
    let first = client.answer(2).await;
    assert_eq!(
        first["result"]["contents"][0]["uri"],
        uri.as_str(),
        "{first}"
    );
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": uri}}),
        )
        .await;
    assert_eq!(
        client.answer(3).await["result"],
        first["result"],
        "the cached read is the same"
    );
    client.send(json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "nope:thing"}})).await;
    assert_eq!(client.answer(4).await["error"]["code"], -32602);

    client
        .send(json!({"jsonrpc": "2.0", "id": 5, "method": "resources/templates/list"}))
        .await;
    let templates = client.answer(5).await["result"]["resourceTemplates"]
        .as_array()
        .cloned()
        .unwrap();
    assert!(
        !templates.is_empty()
            && templates
                .iter()
                .all(|t| t["uriTemplate"].as_str().unwrap().starts_with("ev:"))
    );

    client
        .send(json!({"jsonrpc": "2.0", "id": 6, "method": "prompts/list"}))
        .await;
    let prompts = client.answer(6).await["result"]["prompts"]
        .as_array()
        .cloned()
        .unwrap();
    assert!(
        prompts.iter().any(|p| p["name"] == "ev.simple-prompt"),
        "{prompts:?}"
    );
    client.send(json!({"jsonrpc": "2.0", "id": 7, "method": "prompts/get", "params": {"name": "ev.simple-prompt"}})).await;
    let prompt = client.answer(7).await;
    assert_eq!(
        prompt["result"]["messages"][0]["content"]["text"],
        "This is a simple prompt without arguments."
    );

    // The server's own URI and prompt name work too when one server
    // offers them, and answers speak in the form the client used.
    let own_uri = uri.strip_prefix("ev:").unwrap().to_owned();
    client
        .send(json!({"jsonrpc": "2.0", "id": 20, "method": "resources/read", "params": {"uri": own_uri}}))
        .await;
    let own = client.answer(20).await;
    assert_eq!(
        own["result"]["contents"][0]["uri"],
        own_uri.as_str(),
        "{own}"
    );
    // A URI built from the server's own template reaches it.
    client
        .send(json!({"jsonrpc": "2.0", "id": 21, "method": "resources/read", "params": {"uri": "demo://resource/dynamic/text/7"}}))
        .await;
    let built = client.answer(21).await;
    assert_eq!(
        built["result"]["contents"][0]["uri"], "demo://resource/dynamic/text/7",
        "{built}"
    );
    client
        .send(json!({"jsonrpc": "2.0", "id": 22, "method": "prompts/get", "params": {"name": "simple-prompt"}}))
        .await;
    assert_eq!(
        client.answer(22).await["result"]["messages"][0]["content"]["text"],
        "This is a simple prompt without arguments."
    );
    // Completions go to the server owning the prompt or template.
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 23, "method": "completion/complete", "params": {
            "ref": {"type": "ref/prompt", "name": "ev.completable-prompt"},
            "argument": {"name": "department", "value": "S"}}}),
        )
        .await;
    let completed = client.answer(23).await;
    assert_eq!(
        completed["result"]["completion"]["values"],
        json!(["Sales", "Support"]),
        "{completed}"
    );
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 24, "method": "completion/complete", "params": {
            "ref": {"type": "ref/resource", "uri": "ev:demo://resource/dynamic/text/{resourceId}"},
            "argument": {"name": "resourceId", "value": "12"}}}),
        )
        .await;
    let completed = client.answer(24).await;
    assert_eq!(
        completed["result"]["completion"]["values"],
        json!(["12"]),
        "{completed}"
    );
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 25, "method": "completion/complete", "params": {
            "ref": {"type": "ref/prompt", "name": "nobody-has-it"},
            "argument": {"name": "x", "value": ""}}}),
        )
        .await;
    assert_eq!(client.answer(25).await["error"]["code"], -32602);

    // Subscribe, ask the server to send updates, see one with our URI.
    client.send(json!({"jsonrpc": "2.0", "id": 8, "method": "resources/subscribe", "params": {"uri": uri}})).await;
    assert_eq!(client.answer(8).await["result"], json!({}));
    client
        .call(9, "ev__toggle-subscriber-updates", json!({}))
        .await;
    let end = Instant::now() + UP;
    let updated = loop {
        if let Some(pos) = client
            .backlog
            .iter()
            .position(|m| m["method"] == "notifications/resources/updated")
        {
            break client.backlog.remove(pos);
        }
        let message = client.next().await;
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
        assert!(Instant::now() < end, "no update notification");
    };
    assert_eq!(updated["params"]["uri"], uri.as_str());
    // Subscribed by the server's own URI as well: that subscription's
    // updates carry the server's own URI.
    client.send(json!({"jsonrpc": "2.0", "id": 30, "method": "resources/subscribe", "params": {"uri": own_uri}})).await;
    assert_eq!(client.answer(30).await["result"], json!({}));
    let end = Instant::now() + UP;
    loop {
        let message = client.next().await;
        if message["method"] == "notifications/resources/updated"
            && message["params"]["uri"] == own_uri.as_str()
        {
            break;
        }
        assert!(Instant::now() < end, "no update in the server's own form");
    }
    let _ = client.child.kill().await;
}

/// A server's log messages during a call reach the caller before the
/// result, filtered by the level the client set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_during_a_call_reach_the_caller_at_its_level() {
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &["--extra-tool", "log"]);
    let mut client = RawClient::start(&config, &temp.path().join("data")).await;
    client.wait_for_tool("fx__log").await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "info"}}))
        .await;
    assert_eq!(client.answer(1).await["result"], json!({}));
    client
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "loud"}}))
        .await;
    assert_eq!(client.answer(2).await["error"]["code"], -32602);

    client.backlog.clear();
    client
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "fx__log", "arguments": {}}}))
        .await;
    let mut logged = Vec::new();
    let answer = loop {
        let message = client.next().await;
        if message["id"] == 3 {
            break message;
        }
        if message["method"] == "notifications/message" {
            logged.push((
                message["params"]["level"].as_str().unwrap().to_owned(),
                message["params"]["data"].clone(),
                message["params"]["logger"].clone(),
            ));
        }
    };
    assert_eq!(answer["result"]["content"][0]["text"], "logged", "{answer}");
    assert_eq!(
        logged,
        vec![
            ("info".to_owned(), json!("an info line"), json!("fixture")),
            (
                "warning".to_owned(),
                json!("a warning line"),
                json!("fixture")
            ),
        ],
        "the debug line is below the level set; the others come before the result"
    );
    let _ = client.child.kill().await;
}

/// Desktop clients launch the aggregator, list once and ignore
/// `list_changed`: that first list (and a call made before the server is
/// up) waits for the servers still starting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_lists_once_at_start_sees_a_slow_starting_server() {
    let temp = tempfile::tempdir().unwrap();
    let gate = temp.path().join("gate");
    let pids = temp.path().join("pids");
    let config = temp.path().join("servers.json");
    let hostile = common::hostile_py().display().to_string();
    let gate_arg = gate.display().to_string();
    let pids_arg = pids.display().to_string();
    std::fs::write(
        &config,
        json!({"mcpServers": {"slow": {"command": "python3",
            "args": [hostile, "--wait-for", gate_arg, "--pid-file", pids_arg]}}})
        .to_string(),
    )
    .unwrap();
    // A start-up wait longer than any machine needs: the test must not
    // depend on how fast the server comes up.
    let mut client = RawClient::start_args(
        &config,
        &temp.path().join("data"),
        json!({}),
        &["--startup-wait", "600"],
    )
    .await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "slow__echo", "arguments": {"said": "early"}}}))
        .await;
    // The server is running and held at its gate; only now may it start.
    let end = Instant::now() + UP;
    while common::pids_in(&pids).is_empty() {
        assert!(Instant::now() < end, "the server never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(&gate, "").unwrap();
    let listed = client.answer(1).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"slow__echo"), "{names:?}");
    let called = client.answer(2).await;
    assert_eq!(
        called["result"]["content"][0]["text"], r#"{"said": "early"}"#,
        "{called}"
    );
    let _ = client.child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_requests_reach_the_client_that_called_it() {
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &[]);
    let mut client = RawClient::start_with(
        &config,
        &temp.path().join("data"),
        json!({"roots": {"listChanged": false}}),
    )
    .await;
    client.wait_for_tool("fx__roots").await;
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fx__roots", "arguments": {}}})).await;
    // The server asks for roots while it works for us; we answer.
    let asked = loop {
        let message = client.next().await;
        if message["method"] == "roots/list" {
            break message;
        }
        client.backlog.push(message);
    };
    assert!(
        asked["id"].is_string() || asked["id"].is_number(),
        "{asked}"
    );
    client
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"roots": [{"uri": "file:///work/project", "name": "project"}]}}))
        .await;
    let answer = client.answer(1).await;
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("file:///work/project"), "{answer}");

    // A client without the capability gets an empty list, not a hang.
    let temp2 = tempfile::tempdir().unwrap();
    let config2 = write_config(temp2.path(), &[]);
    let mut plain = RawClient::start(&config2, &temp2.path().join("data")).await;
    plain.wait_for_tool("fx__roots").await;
    let answer = plain.call(1, "fx__roots", json!({})).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], r#"{"roots":[]}"#,
        "{answer}"
    );
    let _ = client.child.kill().await;
    let _ = plain.child.kill().await;
}

/// An rmcp client that offers roots.
#[derive(Clone)]
struct RootsClient;

impl rmcp::ClientHandler for RootsClient {
    #[allow(deprecated)] // roots are still what clients offer today
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut config = rmcp::model::ClientConfig::default();
        config.capabilities = rmcp::model::ClientCapabilities::builder()
            .enable_roots()
            .build();
        config
    }

    #[allow(deprecated)] // roots are still what clients offer today
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        Ok(rmcp::model::ListRootsResult::new(vec![
            rmcp::model::Root::new("file:///over/http"),
        ]))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_request_reaches_an_http_client_too() {
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE, "args": ["--legacy-only"]}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(d.api("/mcp"));
    let client = RootsClient
        .serve(transport)
        .await
        .expect("initialize over /mcp");
    let end = Instant::now() + UP;
    while !client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .any(|t| t.name == "fx__roots")
    {
        assert!(Instant::now() < end);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // rmcp's client opens its GET stream after initialize; give the call a
    // few tries while that settles.
    let end = Instant::now() + UP;
    loop {
        let result = client
            .call_tool(CallToolRequestParams::new("fx__roots"))
            .await
            .unwrap();
        let text = result.content[0].as_text().unwrap().text.clone();
        if text.contains("file:///over/http") {
            break;
        }
        assert!(
            Instant::now() < end,
            "roots never reached the HTTP client: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_on_a_daemons_data_dir_relays_to_the_daemon() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let d = Daemon::start_in(&data_dir, &[]);
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    // No config: the daemon's servers are what the client sees.
    let empty = temp.path().join("empty.json");
    std::fs::write(&empty, r#"{"mcpServers": {}}"#).unwrap();
    let mut client = RawClient::start(&empty, &data_dir).await;
    client.wait_for_tool("fx__echo").await;
    let answer = client.call(1, "fx__echo", json!({"via": "daemon"})).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], r#"{"via":"daemon"}"#,
        "{answer}"
    );
    let _ = client.child.kill().await;
    // One set of children: the daemon's.
    let state: Value = common::get_json(&d.api("/api/v1/aggregator/state")).await;
    assert_eq!(state["connected_servers"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_details_progress_stream_batches_sessions_and_origin() {
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let url = d.api("/mcp");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let response = http().post(&url).json(&init).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["result"]["protocolVersion"], "2025-06-18");
    let post = |body: Value| {
        http()
            .post(&url)
            .header("mcp-session-id", &session)
            .json(&body)
            .send()
    };

    // Wait until the tools are routed.
    let end = Instant::now() + UP;
    loop {
        let list: Value = post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "fx__sleep")
        {
            break;
        }
        assert!(Instant::now() < end);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A call that reports progress answers as an SSE stream: progress first, then the result.
    let body = http()
        .post(&url)
        .header("mcp-session-id", &session)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "fx__sleep", "arguments": {"ms": 150}, "_meta": {"progressToken": "p1"}}}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let messages: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    assert_eq!(messages.len(), 4, "{body}");
    assert!(
        messages[..3].iter().all(
            |m| m["method"] == "notifications/progress" && m["params"]["progressToken"] == "p1"
        )
    );
    assert_eq!(messages[3]["id"], 3);

    // A batch gets an array of answers; a notification alone gets 202.
    let answers: Value = post(json!([
        {"jsonrpc": "2.0", "id": 4, "method": "ping"},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "fx__echo", "arguments": {"b": 1}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}
    ]))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(answers[0]["result"], json!({}));
    assert_eq!(answers[1]["result"]["content"][0]["text"], r#"{"b":1}"#);
    assert_eq!(
        post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .unwrap()
            .status(),
        202
    );

    // No session, a foreign Origin, an ended session.
    let response = http()
        .post(&url)
        .json(&json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let response = http()
        .post(&url)
        .header("origin", "http://evil.example")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let response = http()
        .delete(&url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(
        post(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}))
            .await
            .unwrap()
            .status(),
        404
    );
}

/// `_meta` of a 2026-07-28 request.
fn modern_meta(extra: Value) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "modern", "version": "1"}
    });
    if let (Value::Object(meta), Value::Object(extra)) = (&mut meta, extra) {
        meta.extend(extra);
    }
    meta
}

/// A 2026-07-28 client on stdio (no initialize): discover, lists with
/// resultType and caching hints, calls with and without a log level, the
/// version and metadata errors, and a subscription that sees a new tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_on_stdio_is_served_statelessly() {
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &["--extra-tool", "log"]);
    let mut client = RawClient::spawn(&config, &temp.path().join("data"), &[]);
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta(json!({}))}}))
        .await;
    let discovered = client.answer(1).await["result"].clone();
    assert_eq!(discovered["resultType"], "complete", "{discovered}");
    assert!(
        discovered["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28")),
        "{discovered}"
    );
    assert!(
        discovered["capabilities"]["tools"].is_object(),
        "{discovered}"
    );
    assert_eq!(
        discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-aggregator"
    );

    // The first list waits for the servers starting with us.
    client
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": modern_meta(json!({}))}}))
        .await;
    let listed = client.answer(2).await["result"].clone();
    assert_eq!(listed["resultType"], "complete");
    assert!(listed["ttlMs"].as_u64().is_some(), "{listed}");
    assert_eq!(listed["cacheScope"], "private");
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"fx__log"), "{names:?}");

    // No log level: no log messages; a level: those at or above it.
    for (id, level, expected) in [(3, Value::Null, 0), (4, json!("warning"), 1)] {
        let meta = modern_meta(json!({"io.modelcontextprotocol/logLevel": level}));
        client
            .send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "fx__log", "arguments": {}, "_meta": meta}}))
            .await;
        let mut logs = 0;
        let answer = loop {
            let message = client.next().await;
            if message["id"] == id {
                break message;
            }
            if message["method"] == "notifications/message" {
                logs += 1;
            }
        };
        assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
        assert_eq!(answer["result"]["content"][0]["text"], "logged");
        assert_eq!(logs, expected, "log level {level}");
    }

    // Malformed or unsupported: the errors the revision names.
    client
        .send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}))
        .await;
    assert_eq!(client.answer(5).await["error"]["code"], -32602);
    let old = json!({"io.modelcontextprotocol/protocolVersion": "1999-01-01", "io.modelcontextprotocol/clientCapabilities": {}});
    client
        .send(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"_meta": old}}))
        .await;
    let refused = client.answer(6).await;
    assert_eq!(refused["error"]["code"], -32022, "{refused}");
    assert_eq!(refused["error"]["data"]["requested"], "1999-01-01");
    client
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "logging/setLevel", "params": {"level": "info", "_meta": modern_meta(json!({}))}}))
        .await;
    assert_eq!(client.answer(7).await["error"]["code"], -32601);

    // A subscription: acknowledged, then a tool added downstream shows up
    // as tools/list_changed tagged with the subscription; prompts were not
    // asked for and never come.
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 8, "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": modern_meta(json!({}))}}),
        )
        .await;
    let ack = loop {
        let message = client.next().await;
        if message["method"] == "notifications/subscriptions/acknowledged" {
            break message;
        }
    };
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        8
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    client.send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "fx__add_tool", "arguments": {"name": "fresh"}, "_meta": modern_meta(json!({}))}})).await;
    let changed = loop {
        let message = client.next().await;
        assert_ne!(message["method"], "notifications/prompts/list_changed");
        if message["method"] == "notifications/tools/list_changed" {
            break message;
        }
    };
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        8
    );
    // Cancelling the listen ends it; the connection still serves.
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 8}})).await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list", "params": {"_meta": modern_meta(json!({}))}}))
        .await;
    assert_eq!(client.answer(10).await["result"]["resultType"], "complete");
    let _ = client.child.kill().await;
}

/// The `requestState` a 2026-07-28 client gets for a server's own state is
/// sealed with a key kept in the data dir (0600): the client's retry still
/// completes after the aggregator restarted, and an altered state is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_state_handed_to_a_client_survives_a_restart() {
    use std::os::unix::fs::PermissionsExt as _;
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let server = json!({"name": "fx", "transport_type": "STDIO", "connection_config": {
        "command": FIXTURE, "args": ["--modern-only", "--extra-tool", "ask_roots"]}});
    let call = |id: i64, extra: Value| {
        let mut params = json!({"name": "fx__ask_roots", "arguments": {},
            "_meta": modern_meta(json!({"roots": {}}))});
        if let (Value::Object(params), Value::Object(extra)) = (&mut params, extra) {
            params.extend(extra);
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    let post = |d: &Daemon, body: Value| {
        let request = http()
            .post(d.api("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "fx__ask_roots")
            .json(&body);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let asked = {
        let d = Daemon::start_in(&data, &[]);
        register(&d, server).await;
        wait_status(&d, "fx", "CONNECTED", UP).await;
        let end = Instant::now() + UP;
        loop {
            let answer = post(&d, call(1, json!({}))).await;
            if answer["result"]["resultType"] == "input_required" {
                break answer["result"].clone();
            }
            assert!(Instant::now() < end, "{answer}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let mode = std::fs::metadata(data.join("state.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let state = asked["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state, "fixture-state", "the server's state travels sealed");
    let roots = json!({"client_roots": {"roots": [{"uri": "file:///after/restart"}]}});

    let d = Daemon::start_in(&data, &[]);
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let mut altered = state.clone();
    altered.replace_range(..1, if altered.starts_with('A') { "B" } else { "A" });
    let refused = post(
        &d,
        call(2, json!({"inputResponses": roots, "requestState": altered})),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let done = post(
        &d,
        call(3, json!({"inputResponses": roots, "requestState": state})),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("file:///after/restart"),
        "{done}"
    );
}

/// A 2026-07-28 client over HTTP: no session, headers checked against the
/// body, errors with their HTTP statuses, and a 2025 session beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_over_http_beside_a_2025_session() {
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE, "args": []}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let post = |body: Value, headers: Vec<(&'static str, &'static str)>| {
        let mut request = http()
            .post(d.api("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let modern = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "fx__echo"),
    ];
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "fx__echo", "arguments": {"said": "hi"}, "_meta": modern_meta(json!({}))}});
    let end = Instant::now() + UP;
    let (status, answer) = loop {
        let (status, answer) = post(call.clone(), modern.clone()).await;
        if status != 400 || Instant::now() > end {
            break (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], r#"{"said":"hi"}"#);

    // That revision has no batches: told so, whether the batch says its
    // revision in a request, a notification, or the header alone.
    let bare_call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "fx__echo", "arguments": {}}});
    let notification = json!({"jsonrpc": "2.0", "method": "notifications/initialized",
        "params": {"_meta": modern_meta(json!({}))}});
    for (batch, headers) in [
        (json!([call.clone()]), modern.clone()),
        (json!([notification]), vec![]),
        (
            json!([bare_call]),
            vec![("mcp-protocol-version", "2026-07-28")],
        ),
    ] {
        let (status, answer) = post(batch.clone(), headers).await;
        assert_eq!(status, 400, "{batch} -> {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no batches")),
            "{batch} -> {answer}"
        );
    }

    // The name in the header is not the one in the body: refused.
    let (status, answer) = post(
        call.clone(),
        vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "fx__crash"),
        ],
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (400, json!(-32020)),
        "{answer}"
    );
    // Base64-encoded names are decoded before comparing.
    let (status, _) = post(
        call.clone(),
        vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?ZnhfX2VjaG8=?="),
        ],
    )
    .await;
    assert_eq!(status, 200);
    // No `_meta`: -32602 with 400; unknown method: -32601 with 404.
    let (status, answer) = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ],
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (400, json!(-32602)),
        "{answer}"
    );
    let (status, answer) = post(
        json!({"jsonrpc": "2.0", "id": 3, "method": "nope/nothing", "params": {"_meta": modern_meta(json!({}))}}),
        vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", "nope/nothing")],
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (404, json!(-32601)),
        "{answer}"
    );
    // A request that could have streamed (a progress token), refused
    // before it ran: the same status as without the token, as JSON.
    let (status, answer) = post(
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "fx__nope", "arguments": {},
                "_meta": modern_meta(json!({"progressToken": "p-5"}))}}),
        vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "fx__nope"),
        ],
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"]["code"].is_i64(), "{answer}");
    // No GET stream without a 2025 session.
    let get = http()
        .get(d.api("/mcp"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);

    // A 2025 client opens a session beside it and is served as before.
    let session = common::mcp_session_with(&d, json!({})).await;
    let response = http()
        .post(d.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    let listed: Value = response.json().await.unwrap();
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    assert!(listed["result"].get("resultType").is_none(), "{listed}");
}

/// A 2025 server asks a 2026-07-28 client something during a call: the
/// client gets the question as an input-required result with a sealed
/// state, and its retry with the answer completes the call. An altered or
/// replayed state is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_servers_question_reaches_a_2026_client_as_input_required() {
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &[]);
    let mut client = RawClient::spawn(&config, &temp.path().join("data"), &[]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}}
    });
    let call = |id: i64, extra: Value| {
        let mut params = json!({"name": "fx__roots", "arguments": {}, "_meta": meta.clone()});
        if let (Value::Object(params), Value::Object(extra)) = (&mut params, extra) {
            params.extend(extra);
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    client.send(call(1, json!({}))).await;
    let first = client.answer(1).await["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let requests = first["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let (key, asked) = requests.iter().next().unwrap();
    assert_eq!(asked["method"], "roots/list", "{first}");
    let state = first["requestState"].as_str().unwrap().to_owned();

    // An altered state opens nothing.
    let mut altered = state.clone();
    altered.replace_range(0..1, if altered.starts_with('A') { "B" } else { "A" });
    let answers =
        json!({key.clone(): {"roots": [{"uri": "file:///from-the-client", "name": "mine"}]}});
    client
        .send(call(
            2,
            json!({"inputResponses": answers.clone(), "requestState": altered}),
        ))
        .await;
    assert_eq!(client.answer(2).await["error"]["code"], -32602);

    client
        .send(call(
            3,
            json!({"inputResponses": answers.clone(), "requestState": state.clone()}),
        ))
        .await;
    let done = client.answer(3).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("file:///from-the-client"),
        "{done}"
    );
    // Used once: a replay finds nothing.
    client
        .send(call(
            4,
            json!({"inputResponses": answers, "requestState": state}),
        ))
        .await;
    assert_eq!(client.answer(4).await["error"]["code"], -32602);
    let _ = client.child.kill().await;
}

/// The Python SDK 2.x's interpreter (its own virtualenv, from setup.sh).
fn python_v2() -> std::path::PathBuf {
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/.venv-v2/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup.sh",
        python.display()
    );
    python
}

fn python_script(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

/// The Python SDK 2.x (PyPI `mcp==2.3.0`) in each of its connect modes —
/// `auto`, `legacy` and `2026-07-28` — over both front doors, launched as a
/// desktop client would: it lists every server's tools at once (nothing
/// waits for it to retry), calls one, and answers a server's roots request
/// (as a 2025 request, or as an input-required round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_v2_in_every_mode_through_both_front_doors() {
    interop_in_every_mode(
        python_v2(),
        python_script("interop_v2.py"),
        "python-v2",
        "file:///from-the-python-v2-client",
    )
    .await;
}

/// The TypeScript SDK v2 client (npm `@modelcontextprotocol/client` 2.4.0)
/// in each of its negotiation modes — `legacy`, `auto` and pinned to
/// 2026-07-28 — over both front doors, as the Python one above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_v2_in_every_mode_through_both_front_doors() {
    interop_in_every_mode(
        common::node22(),
        common::conformance_dir().join("interop_client_v2.mjs"),
        "ts-v2",
        "file:///from-the-typescript-v2-client",
    )
    .await;
}

/// Runs an SDK's interop script (`SCRIPT stdio BIN CONFIG DATA` and
/// `SCRIPT http URL`, one JSON line per connect mode) through both front
/// doors: each mode lists every server's tools at once (nothing waits for
/// it to retry), calls one, and answers a 2025 server's roots request (as a
/// 2025 request, or as an input-required round).
async fn interop_in_every_mode(
    program: std::path::PathBuf,
    script: std::path::PathBuf,
    from: &'static str,
    root: &'static str,
) {
    let run = move |args: Vec<String>| {
        let output = std::process::Command::new(&program)
            .arg(&script)
            .args(&args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{} failed:\n{stdout}\n{}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .collect::<Vec<_>>()
    };
    let check = move |runs: Vec<Value>, needs: &str| {
        assert_eq!(runs.len(), 3, "{runs:?}");
        for out in runs {
            assert!(
                out["tools"].as_array().unwrap().iter().any(|t| t == needs),
                "{out}"
            );
            assert_eq!(
                out["echo"],
                format!(r#"{{"from":"{from}","n":[1,2.5,null]}}"#),
                "{out}"
            );
            assert_eq!(out["echo_error"], false, "{out}");
            assert!(
                out["roots"].as_str().unwrap_or_default().contains(root),
                "{out}"
            );
        }
    };

    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &[]);
    let data = temp.path().join("stdio-data");
    let args = vec![
        "stdio".to_owned(),
        BIN.to_owned(),
        config.display().to_string(),
        data.display().to_string(),
    ];
    let runs = {
        let run = run.clone();
        tokio::task::spawn_blocking(move || run(args))
            .await
            .unwrap()
    };
    // fy starts with fx: a client that lists once sees it anyway.
    check(runs, "fy__echo");

    let d = Daemon::start_in(
        &temp.path().join("daemon"),
        &["--config", config.to_str().unwrap()],
    );
    let args = vec!["http".to_owned(), d.api("/mcp")];
    let runs = tokio::task::spawn_blocking(move || run(args))
        .await
        .unwrap();
    check(runs, "fy__echo");
}

/// A server that speaks only 2026-07-28 (it refuses `initialize`) behind
/// the aggregator: connected statelessly (`server/discover`, `_meta` on
/// every request), its list changes followed through a subscription, and
/// its input-required results reaching a 2025 client as requests and a
/// 2026-07-28 client as they are (the server's state sealed in ours).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_only_server_serves_clients_of_both_eras() {
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"fx": {"command": FIXTURE,
            "args": ["--modern-only", "--extra-tool", "ask_roots"], "trust": {"pinning": "warn"}}}})
        .to_string(),
    )
    .unwrap();
    let mut client = RawClient::start_with(
        &config,
        &temp.path().join("data"),
        json!({"roots": {"listChanged": false}}),
    )
    .await;
    client.wait_for_tool("fx__ask_roots").await;
    let echoed = client.call(1, "fx__echo", json!({"said": "hi"})).await;
    assert_eq!(
        echoed["result"]["content"][0]["text"], r#"{"said":"hi"}"#,
        "{echoed}"
    );

    // A 2025 client: the server's question comes as a roots/list request.
    client
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "fx__ask_roots", "arguments": {}}}))
        .await;
    let asked = loop {
        let message = client.next().await;
        if message["method"] == "roots/list" {
            break message;
        }
        client.backlog.push(message);
    };
    client
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"roots": [{"uri": "file:///legacy-client"}]}}))
        .await;
    let answered = client.answer(2).await;
    let text = answered["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("file:///legacy-client"), "{answered}");

    // A 2026-07-28 client: the question as the server put it, its state
    // sealed; the retry brings the answer back to the server.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}}});
    client
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "fx__ask_roots", "arguments": {}, "_meta": meta}}))
        .await;
    let first = client.answer(3).await["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert_eq!(
        first["inputRequests"]["client_roots"]["method"], "roots/list",
        "{first}"
    );
    let state = first["requestState"].as_str().unwrap().to_owned();
    assert_ne!(
        state, "fixture-state",
        "the server's own state never reaches the client"
    );
    client
        .send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "fx__ask_roots", "arguments": {}, "_meta": meta,
            "inputResponses": {"client_roots": {"roots": [{"uri": "file:///modern-client"}]}},
            "requestState": "fixture-state"}}))
        .await;
    assert_eq!(
        client.answer(4).await["error"]["code"],
        -32602,
        "a state we did not issue"
    );
    client
        .send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "fx__ask_roots", "arguments": {}, "_meta": meta,
            "inputResponses": {"client_roots": {"roots": [{"uri": "file:///modern-client"}]}},
            "requestState": state}}))
        .await;
    let done = client.answer(5).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("file:///modern-client"),
        "{done}"
    );

    // A tool the server adds shows up: its list change came on the
    // subscription the aggregator holds.
    client
        .call(6, "fx__add_tool", json!({"name": "fresh"}))
        .await;
    client.wait_for_tool("fx__fresh").await;
    let _ = client.child.kill().await;
}

/// A real 2026-07-28-only server (the Python SDK 2.x `MCPServer`) behind
/// the aggregator over stdio: listed and called by clients of both eras.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_v2_server_is_served_to_both_eras() {
    let python = python_v2();
    let script = python_script("modern_server.py");
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"py": {"command": python, "args": [script]}}}).to_string(),
    )
    .unwrap();
    let mut client = RawClient::start(&config, &temp.path().join("data")).await;
    client.wait_for_tool("py__greet").await;
    let legacy = client.call(1, "py__greet", json!({"name": "ada"})).await;
    assert_eq!(
        legacy["result"]["content"][0]["text"], "hello ada, from a 2026-07-28 server",
        "{legacy}"
    );
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "py__greet", "arguments": {"name": "grace"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}}),
        )
        .await;
    let modern = client.answer(2).await;
    assert_eq!(modern["result"]["resultType"], "complete", "{modern}");
    assert_eq!(
        modern["result"]["content"][0]["text"], "hello grace, from a 2026-07-28 server",
        "{modern}"
    );
    let _ = client.child.kill().await;
}

/// The same 2026-07-28-only Python server over Streamable HTTP: its
/// `initialize` refusal (an HTTP 400) turns the aggregator to the modern
/// revision, whose requests mirror their method and tool into headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_v2_server_over_http_is_served() {
    let python = python_v2();
    let script = python_script("modern_server.py");
    let mut server = std::process::Command::new(python);
    server.arg(script);
    let (_server, port) = common::http_test_server(server);
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "py", "transport_type": "HTTP",
            "connection_config": {"base_url": format!("http://127.0.0.1:{port}/mcp")}}),
    )
    .await;
    wait_status(&d, "py", "CONNECTED", UP).await;
    let (status, body) = common::rest_call(&d, "py.greet", json!({"name": "lin"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["content"][0]["text"], "hello lin, from a 2026-07-28 server",
        "{body}"
    );
}

/// Node and Electron clients (Claude Desktop, VS Code, Cursor) give a child
/// Unix socketpairs for its stdio, not pipes: the front door reads and
/// writes them through epoll, answers as over pipes, and ends cleanly when
/// the client closes its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_over_a_socketpair_as_node_clients_launch_us() {
    let temp = tempfile::tempdir().unwrap();
    let config = write_config(temp.path(), &[]);
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs_out = theirs.try_clone().unwrap();
    let mut child = stdio_command(&config, &temp.path().join("data"))
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_out)))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    ours.set_nonblocking(true).unwrap();
    let (read, write) = tokio::net::UnixStream::from_std(ours).unwrap().into_split();
    let mut client = LineClient::new(write, read);
    let init = client.ask(
        0,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "socket", "version": "0"}}),
    )
    .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    let end = Instant::now() + UP;
    let mut id = 1;
    loop {
        id += 1;
        let listed = client.ask(id, "tools/list", json!({})).await;
        if listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "fx__echo"))
        {
            break;
        }
        assert!(Instant::now() < end, "fx__echo never listed: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in 0..50 {
        id += 1;
        let answer = client
            .ask(
                id,
                "tools/call",
                json!({"name": "fx__echo", "arguments": {"n": n}}),
            )
            .await;
        assert!(
            answer["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains(&format!("\"n\":{n}"))),
            "{answer}"
        );
    }
    // The client closes its end: the aggregator sees the end of its input.
    drop(client.write);
    let status = tokio::time::timeout(UP, child.wait())
        .await
        .expect("the aggregator exits when its client closes the socket")
        .unwrap();
    assert!(status.success(), "{status}");
}

/// A call's result passes through as its server wrote it: escapes, number
/// spellings and spaces that a JSON library would rewrite come out byte for
/// byte to a 2025 client, and below the top level of the 2026-07-28
/// envelope (the top level is the aggregator's to complete).
#[tokio::test]
async fn a_call_result_passes_through_byte_for_byte() {
    const ECHO: &str = env!("CARGO_BIN_EXE_mcp-echo-server");
    // As `tests/fixture/echo.rs` writes it.
    const CONTENT: &str = r#"[{"type": "text", "text": "caf\u00e9 \ud83d\ude00"}]"#;
    const STRUCTURED: &str =
        r#"{"z": 1.50, "a": 1e400, "big": 123456789012345678901234567890, "s": "\u00e9\n"}"#;
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"raw": {"command": ECHO}}}).to_string(),
    )
    .unwrap();
    let mut child = stdio_command(&config, &temp.path().join("data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut client = LineClient::new(child.stdin.take().unwrap(), child.stdout.take().unwrap());
    client.ask_line(
        0,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    )
    .await;
    let end = Instant::now() + UP;
    let mut id = 0;
    loop {
        id += 1;
        let listed: Value =
            serde_json::from_str(&client.ask_line(id, "tools/list", json!({})).await).unwrap();
        if listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "raw__verbatim"))
        {
            break;
        }
        assert!(Instant::now() < end, "raw__verbatim never listed: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let answer = client
        .ask_line(100, "tools/call", json!({"name": "raw__verbatim"}))
        .await;
    let whole =
        format!(r#""result":{{"content": {CONTENT}, "structuredContent": {STRUCTURED}}}}}"#);
    assert!(answer.ends_with(&whole), "{answer}");

    let modern = client
        .ask_line(
            101,
            "tools/call",
            json!({"name": "raw__verbatim", "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"}
            }}),
        )
        .await;
    for member in [
        format!(r#""content":{CONTENT}"#),
        format!(r#""structuredContent":{STRUCTURED}"#),
        r#""resultType":"complete""#.to_owned(),
    ] {
        assert!(modern.contains(&member), "{member} in {modern}");
    }
    let parsed: Value = serde_json::from_str(&modern).unwrap();
    assert!(
        parsed["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string(),
        "{modern}"
    );

    // A call's arguments reach the server as the client wrote them.
    let written = r#"{"s": "caf\u00e9", "n": 1.50e3, "k" : [ ]}"#;
    let answer = client
        .ask_text(
            102,
            &format!(
                r#"{{"jsonrpc":"2.0","id":102,"method":"tools/call","params":{{"name":"raw__echo","arguments":{written}}}}}"#
            ),
        )
        .await;
    let parsed: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(parsed["result"]["content"][0]["text"], written, "{answer}");
}

/// A 2025 client whose notification stream dropped opens another: the
/// new GET takes over (the old stream ends, even if the server never
/// noticed its connection go), and notifications reach the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_get_stream_takes_over_from_one_that_dropped() {
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE}, "trust": {"pinning": "warn"}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let session = common::mcp_session_with(&d, json!({})).await;
    let open_stream = || {
        http()
            .get(d.api("/mcp"))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .send()
    };
    // Reads the stream until it holds `needle`, ends, or a minute passes.
    #[derive(Debug, PartialEq)]
    enum Read {
        Seen,
        Ended,
        TimedOut,
    }
    async fn read_until(stream: &mut reqwest::Response, needle: &str) -> Read {
        let end = Instant::now() + Duration::from_secs(60);
        let mut seen = String::new();
        while Instant::now() < end {
            match tokio::time::timeout(Duration::from_secs(5), stream.chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    seen.push_str(&String::from_utf8_lossy(&chunk));
                    if seen.contains(needle) {
                        return Read::Seen;
                    }
                }
                Ok(_) => return Read::Ended,
                Err(_) => {}
            }
        }
        Read::TimedOut
    }
    let add_tool = |id: i64, name: &str| {
        http()
            .post(d.api("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "fx__add_tool", "arguments": {"name": name}}}))
            .send()
    };

    let mut first = open_stream().await.unwrap();
    assert_eq!(first.status(), 200);
    // The first stays open (its client gone quiet); a second takes over.
    let mut second = open_stream().await.unwrap();
    assert_eq!(second.status(), 200, "{:?}", second.text().await);
    assert_eq!(read_until(&mut first, "list_changed").await, Read::Ended);
    assert_eq!(add_tool(2, "fresh").await.unwrap().status(), 200);
    assert_eq!(
        read_until(&mut second, "notifications/tools/list_changed").await,
        Read::Seen
    );

    // Dropped: the next GET gets the notifications back.
    drop(second);
    let mut third = open_stream().await.unwrap();
    assert_eq!(third.status(), 200);
    assert_eq!(add_tool(3, "fresher").await.unwrap().status(), 200);
    assert_eq!(
        read_until(&mut third, "notifications/tools/list_changed").await,
        Read::Seen
    );

    // A request naming a revision nobody speaks: 400, as the transport asks.
    let list_with = |version: &'static str| {
        http()
            .post(d.api("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", version)
            .json(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))
            .send()
    };
    let refused = list_with("2099-01-01").await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2099-01-01")),
        "{body}"
    );
    assert_eq!(list_with("2025-06-18").await.unwrap().status(), 200);
}

/// A subscription is answered only when it ends: asked for over HTTP by a
/// client that takes no event stream, it is refused (406) instead of
/// leaving the client waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_asked_for_without_an_event_stream_is_refused() {
    let d = Daemon::start();
    let response = http()
        .post(d.api("/mcp"))
        .header("accept", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}, "_meta": modern_meta(json!({}))}}))
        .timeout(std::time::Duration::from_secs(30))
        .send()
        .await
        .expect("an answer, not a wait");
    assert_eq!(response.status(), 406);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("text/event-stream"),
        "{body}"
    );
}
