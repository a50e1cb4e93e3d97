//! Search end to end through the real binary: the REST search contract,
//! the CLI, availability filtering, restarts and crashes mid-indexing, the
//! keyword-only fallback, and the MCP meta-tools on both front doors.

mod common;

use common::{BIN, Daemon, cli, everything_js, get_json, http, mcp_call, register, wait_status};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const UP: Duration = Duration::from_secs(120);

fn fixture(name: &str, args: &[&str]) -> Value {
    json!({"name": name, "transport_type": "STDIO", "connection_config": {"command": FIXTURE, "args": args}})
}

fn everything(name: &str) -> Value {
    json!({"name": name, "transport_type": "STDIO",
           "connection_config": {"command": "node", "args": [everything_js().to_str().unwrap(), "stdio"]}})
}

async fn search(d: &Daemon, body: Value) -> (u16, Value) {
    let response = http()
        .post(d.api("/api/v1/search"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn names(answer: &Value) -> Vec<String> {
    answer["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls the index status until nothing is pending and `tools` are indexed.
async fn wait_indexed(d: &Daemon, tools: u64) -> Value {
    let end = Instant::now() + UP;
    loop {
        let status: Value = get_json(&d.api("/api/v1/search/status")).await;
        if status["syncing"] == false
            && status["indexed_tools"] == tools
            && status["total_tools"] == tools
        {
            return status;
        }
        assert!(Instant::now() < end, "indexing did not settle: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for the index and then for classification over it: every tool
/// classified, skill vectors computed from the settled index.
async fn wait_settled(d: &Daemon, tools: u64) {
    let index = wait_indexed(d, tools).await;
    let end = Instant::now() + UP;
    loop {
        let skills: Value = get_json(&d.api("/api/v1/skills/status")).await;
        if skills["classified"] == tools && skills["index_generation"] == index["generation"] {
            return;
        }
        assert!(
            Instant::now() < end,
            "classification did not settle: {skills} {index}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls a search until `check` accepts its answer.
async fn search_until(d: &Daemon, body: Value, check: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + UP;
    loop {
        let (status, answer) = search(d, body.clone()).await;
        if status == 200 && check(&answer) {
            return answer;
        }
        assert!(
            Instant::now() < end,
            "search never matched: {status} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn rest_search_ranks_filters_and_follows_availability() {
    let d = Daemon::start();
    register(&d, everything("everything")).await;
    register(&d, fixture("fx", &[])).await;
    wait_status(&d, "everything", "CONNECTED", UP).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let fx_tools = common::FIXED as u64 + 3;
    // CONNECTED comes before the first listing is stored (in one write).
    let end = Instant::now() + UP;
    let everything_tools = loop {
        let tools: Vec<Value> =
            get_json(&d.api("/api/v1/aggregator/servers/everything/tools")).await;
        if !tools.is_empty() {
            break tools;
        }
        assert!(Instant::now() < end, "everything never listed its tools");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    wait_settled(&d, fx_tools + everything_tools.len() as u64).await;

    // A paraphrase finds server-everything's adder first; the search
    // contract's shape.
    let (status, answer) =
        search(&d, json!({"query": "add two numbers together", "limit": 5})).await;
    assert_eq!(status, 200, "{answer}");
    let top = &answer["tools"][0];
    assert_eq!(top["name"], "everything.get-sum", "{answer}");
    assert_eq!(top["original_name"], "get-sum");
    assert_eq!(top["wire_name"], "everything__get-sum");
    assert_eq!(top["source_server"]["name"], "everything");
    assert_eq!(top["source_server"]["status"], "CONNECTED");
    assert!(
        top["source_server"]["id"]
            .as_str()
            .is_some_and(|id| id.len() == 36)
    );
    assert!(top["score"].as_f64().is_some_and(|s| s > 0.0));
    assert!(top["skill_ids"].is_array());
    // The description is the stored one (read for the results, not held).
    let listed = everything_tools
        .iter()
        .find(|t| t["original_name"] == "get-sum")
        .expect("get-sum listed");
    assert!(
        top["description"].as_str().is_some_and(|d| !d.is_empty()),
        "{answer}"
    );
    assert_eq!(top["description"], listed["description"], "{answer}");
    assert_eq!(answer["metadata"]["servers_searched"], 2);
    assert_eq!(
        answer["metadata"]["total_tools_searched"],
        fx_tools + everything_tools.len() as u64
    );
    assert_eq!(answer["metadata"]["mode"], "hybrid");
    // Scores never go up down the list (ranked by relevance, not by server).
    let scores: Vec<f64> = answer["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");

    // Same-named tools on two servers both come back, each with its server.
    let (_, answer) = search(&d, json!({"query": "echo", "limit": 10, "mode": "keyword"})).await;
    let found = names(&answer);
    assert!(
        found.contains(&"everything.echo".to_owned()) && found.contains(&"fx.echo".to_owned()),
        "{found:?}"
    );

    // server_filter by name or id.
    let (_, answer) = search(&d, json!({"query": "echo", "server_filter": ["fx"]})).await;
    assert!(
        !names(&answer).is_empty() && names(&answer).iter().all(|n| n.starts_with("fx.")),
        "{answer}"
    );
    assert_eq!(answer["metadata"]["servers_searched"], 1);
    // An empty filter filters nothing, as `search_tools`' does; a limit
    // may be sent as a float, when it is whole.
    let (status, unfiltered) = search(
        &d,
        json!({"query": "echo", "limit": 10.0, "mode": "keyword", "server_filter": [], "skill_filter": []}),
    )
    .await;
    assert_eq!(status, 200, "{unfiltered}");
    assert!(
        names(&unfiltered).contains(&"everything.echo".to_owned())
            && names(&unfiltered).contains(&"fx.echo".to_owned()),
        "{unfiltered}"
    );
    let (status, answer) = search(&d, json!({"query": "echo", "server_filter": ["nope"]})).await;
    assert_eq!(status, 404, "{answer}");
    assert!(answer["detail"].as_str().unwrap().contains("nope"));

    // Bad input: clear 422s.
    for body in [
        json!({"query": "x", "limit": 2.5}),
        json!({"query": "x", "limit": -1}),
        json!({"query": "  "}),
        json!({"query": "x", "limit": 0}),
        json!({"query": "x", "limit": 101}),
        json!({"query": 5}),
        json!({"query": "x", "mode": "fuzzy"}),
        json!({"query": "x", "bogus": 1}),
    ] {
        let (status, answer) = search(&d, body.clone()).await;
        assert_eq!(status, 422, "{body} -> {answer}");
        assert!(answer["detail"].is_string(), "{answer}");
    }
    let (status, _) = search(&d, json!({"query": "x".repeat(3000)})).await;
    assert_eq!(status, 422);

    // A disconnected server's tools vanish at once and come back on reconnect.
    let response = http()
        .post(d.api("/api/v1/aggregator/servers/everything/disconnect"))
        .json(&json!({"force": true}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    let answer = search_until(&d, json!({"query": "add two numbers together"}), |a| {
        !names(a).iter().any(|n| n.starts_with("everything."))
    })
    .await;
    assert_eq!(answer["metadata"]["servers_searched"], 1);
    http()
        .post(d.api("/api/v1/aggregator/servers/everything/connect"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    search_until(&d, json!({"query": "add two numbers together"}), |a| {
        names(a).first().is_some_and(|n| n == "everything.get-sum")
    })
    .await;

    // A removed server's tools never come back, even from a rebuilt index.
    let response = http()
        .delete(d.api("/api/v1/aggregator/servers/everything"))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    wait_indexed(&d, fx_tools).await;
    let response = http()
        .post(d.api("/api/v1/search/reindex"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    wait_indexed(&d, fx_tools).await;
    for mode in ["hybrid", "keyword", "semantic"] {
        let (_, answer) = search(
            &d,
            json!({"query": "add two numbers together", "mode": mode, "limit": 100}),
        )
        .await;
        assert!(
            names(&answer).iter().all(|n| n.starts_with("fx.")),
            "{mode}: {answer}"
        );
    }
}

#[tokio::test]
async fn cli_search_and_reindex() {
    let d = Daemon::start();
    register(&d, fixture("fx", &[])).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    wait_indexed(&d, common::FIXED as u64 + 3).await;
    let data_dir = d.data_dir.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        cli(
            &data_dir,
            &["search", "repeat my arguments back to me", "--limit", "3"],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("SCORE")
            && out
                .lines()
                .nth(1)
                .is_some_and(|l| l.contains("fx.echo") || l.contains("fx.structured")),
        "{out}"
    );
    let data_dir = d.data_dir.clone();
    let (code, out, _) = tokio::task::spawn_blocking(move || {
        cli(
            &data_dir,
            &[
                "search", "sleep", "--server", "fx", "--json", "--mode", "keyword",
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 0);
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["tools"][0]["name"], "fx.sleep", "{answer}");
    let data_dir = d.data_dir.clone();
    let (code, _, err) =
        tokio::task::spawn_blocking(move || cli(&data_dir, &["search", "x", "--server", "nope"]))
            .await
            .unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nope"), "{err}");
    let data_dir = d.data_dir.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || cli(&data_dir, &["reindex"]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("indexed {} tool(s)", common::FIXED + 3)),
        "{out}"
    );
}

/// Top results per mode, ids and scores (rounded), for comparing builds.
async fn fingerprint(d: &Daemon) -> Vec<Value> {
    let mut out = Vec::new();
    for query in [
        "tool number 42",
        "echo the arguments",
        "wait some milliseconds",
        "generated 7",
    ] {
        for mode in ["hybrid", "keyword", "semantic"] {
            let (status, answer) =
                search(d, json!({"query": query, "mode": mode, "limit": 10})).await;
            assert_eq!(status, 200, "{answer}");
            let ranked: Vec<Value> = answer["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| json!([t["name"], (t["score"].as_f64().unwrap() * 1000.0).round()]))
                .collect();
            out.push(json!({"query": query, "mode": mode, "ranked": ranked}));
        }
    }
    out
}

#[tokio::test]
async fn killed_while_indexing_the_restart_rebuilds_to_the_same_results() {
    const TOOLS: &str = "600";
    let total = common::FIXED as u64 + 600;
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut d = Daemon::start_in(&data_dir, &[]);
    register(&d, fixture("fx", &["--tools", TOOLS])).await;
    // Kill it while the index is part-way.
    let end = Instant::now() + UP;
    loop {
        let status: Value = get_json(&d.api("/api/v1/search/status")).await;
        let indexed = status["indexed_tools"].as_u64().unwrap_or(0);
        if status["syncing"] == true
            && status["total_tools"] == total
            && indexed > 0
            && indexed < total
        {
            break;
        }
        assert!(
            Instant::now() < end,
            "never saw indexing under way: {status}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    d.kill9();

    let d = Daemon::start_in(&data_dir, &[]);
    wait_status(&d, "fx", "CONNECTED", UP).await;
    wait_settled(&d, total).await;
    let restarted = fingerprint(&d).await;
    drop(d);

    // A clean build of the same catalog in a fresh data dir.
    let clean = Daemon::start_in(&temp.path().join("clean"), &[]);
    register(&clean, fixture("fx", &["--tools", TOOLS])).await;
    wait_status(&clean, "fx", "CONNECTED", UP).await;
    wait_settled(&clean, total).await;
    assert_eq!(restarted, fingerprint(&clean).await);
}

#[tokio::test]
async fn without_the_runtime_search_falls_back_to_keywords_and_says_so() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_with_env(
        temp.path(),
        &[],
        &[
            ("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so"),
            ("MCP_AGGREGATOR_SKIP_EMBEDDED_RUNTIME", "1"),
        ],
    );
    register(&d, fixture("fx", &[])).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let status = wait_indexed(&d, common::FIXED as u64 + 3).await;
    assert_eq!(status["semantic"], false, "{status}");
    assert!(
        status["warning"]
            .as_str()
            .is_some_and(|w| w.contains("ONNX Runtime")),
        "{status}"
    );
    let (code, answer) = search(&d, json!({"query": "sleep"})).await;
    assert_eq!(code, 200);
    assert_eq!(answer["tools"][0]["name"], "fx.sleep", "{answer}");
    assert_eq!(answer["metadata"]["mode"], "keyword");
    assert!(
        answer["metadata"]["warning"]
            .as_str()
            .is_some_and(|w| w.contains("keyword only")),
        "{answer}"
    );
    let log = std::fs::read_to_string(common::log_path(temp.path())).unwrap();
    assert!(log.contains("falls back to keywords only"), "{log}");
}

/// A raw JSON-RPC client over `mcp-aggregator stdio`.
struct StdioClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl StdioClient {
    async fn start(args: &[&str]) -> StdioClient {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(BIN)
            .args(args)
            .env("MCP_AGGREGATOR_IDLE_EXIT", "0s")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut client = StdioClient {
            child,
            stdin,
            lines,
        };
        client.request(0, "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})).await;
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    async fn send(&mut self, message: Value) {
        use tokio::io::AsyncWriteExt;
        self.stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.answer(id).await
    }

    /// The result of request `id` (messages before it are dropped).
    async fn answer(&mut self, id: i64) -> Value {
        loop {
            let line = tokio::time::timeout(UP, self.lines.next_line())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message["result"].clone();
            }
        }
    }
}

fn tool_names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn meta_tools_over_stdio_with_expose_search() {
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"fx": {"command": FIXTURE}}}).to_string(),
    )
    .unwrap();
    let data = temp.path().join("data");
    let mut client = StdioClient::start(&[
        "stdio",
        "--expose",
        "search",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ])
    .await;
    // Only the meta-tools are listed.
    let list = client.request(1, "tools/list", json!({})).await;
    assert_eq!(tool_names(&list), ["search_tools", "call_tool"]);
    // search_tools finds fx's tools once they are indexed, with schemas.
    let end = Instant::now() + UP;
    let mut id = 10;
    let found = loop {
        id += 1;
        let result = client.request(id, "tools/call", json!({"name": "search_tools", "arguments": {"query": "wait a number of milliseconds", "limit": 3}})).await;
        if result["structuredContent"]["tools"][0]["name"] == "fx__sleep" {
            break result;
        }
        assert!(Instant::now() < end, "{result}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(found["isError"], false);
    assert_eq!(found["structuredContent"]["tools"][0]["server"], "fx");
    assert_eq!(
        found["structuredContent"]["tools"][0]["inputSchema"]["type"],
        "object"
    );
    assert!(
        found["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("fx__sleep")
    );
    // A limit sent as a float, and empty filters (models fill optional
    // lists with `[]`): the same search.
    let loose = client.request(99, "tools/call", json!({"name": "search_tools", "arguments": {"query": "wait a number of milliseconds", "limit": 3.0, "servers": [], "skills": []}})).await;
    assert_eq!(loose["isError"], false, "{loose}");
    assert_eq!(
        loose["structuredContent"]["tools"][0]["name"], "fx__sleep",
        "{loose}"
    );
    let fraction = client
        .request(
            98,
            "tools/call",
            json!({"name": "search_tools", "arguments": {"query": "x", "limit": 2.5}}),
        )
        .await;
    assert_eq!(fraction["isError"], true, "{fraction}");
    let unknown = client
        .request(
            97,
            "tools/call",
            json!({"name": "search_tools", "arguments": {"query": "x", "servers": ["nope"]}}),
        )
        .await;
    let message = unknown["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        message.contains("nope") && !message.contains("server_filter"),
        "the error names no REST field: {unknown}"
    );
    // call_tool calls it; the hidden tools are still callable by name.
    let result = client.request(100, "tools/call", json!({"name": "call_tool", "arguments": {"name": "fx__echo", "arguments": {"via": "meta"}}})).await;
    assert_eq!(
        result["content"][0]["text"], r#"{"via":"meta"}"#,
        "{result}"
    );
    let result = client
        .request(
            101,
            "tools/call",
            json!({"name": "fx__echo", "arguments": {"direct": true}}),
        )
        .await;
    assert_eq!(
        result["content"][0]["text"], r#"{"direct":true}"#,
        "{result}"
    );
    // Mistakes come back as tool errors the model can read.
    for (n, arguments) in [
        json!({}),
        json!({"query": "x", "limit": 0}),
        json!({"query": "x", "servers": "fx"}),
        json!({"query": "x", "servers": ["nope"]}),
    ]
    .into_iter()
    .enumerate()
    {
        let result = client
            .request(
                200 + n as i64,
                "tools/call",
                json!({"name": "search_tools", "arguments": arguments}),
            )
            .await;
        assert_eq!(result["isError"], true, "{arguments} -> {result}");
    }
    let result = client
        .request(
            300,
            "tools/call",
            json!({"name": "call_tool", "arguments": {}}),
        )
        .await;
    assert_eq!(result["isError"], true, "{result}");
    drop(client.stdin);
    let _ = tokio::time::timeout(UP, client.child.wait()).await;
}

#[tokio::test]
async fn meta_tools_over_http_with_expose_all_and_auto() {
    let d = Daemon::start();
    register(&d, fixture("fx", &[])).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    wait_indexed(&d, common::FIXED as u64 + 3).await;
    let session = mcp_session(&d).await;
    let list = list_over_http(&d, &session).await;
    let listed = tool_names(&list["result"]);
    assert_eq!(listed.len(), common::FIXED + 3 + common::META, "{listed:?}");
    assert!(listed.ends_with(&["search_tools".to_owned(), "call_tool".to_owned()]));
    let answer = mcp_call(&d, &session, json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "search_tools", "arguments": {"query": "echo the arguments back as structured content", "servers": ["fx"]}}})).await;
    assert_eq!(
        answer["result"]["structuredContent"]["tools"][0]["name"], "fx__structured",
        "{answer}"
    );
    let answer = mcp_call(&d, &session, json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "call_tool", "arguments": {"name": "fx__structured", "arguments": {"k": 1}}}})).await;
    assert_eq!(
        answer["result"]["structuredContent"],
        json!({"k": 1}),
        "{answer}"
    );
    drop(d);

    // auto: above the threshold only the meta-tools are listed.
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        temp.path(),
        &["--expose", "auto", "--expose-threshold", "5"],
    );
    register(&d, fixture("fx", &[])).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let session = mcp_session(&d).await;
    let list = list_over_http(&d, &session).await;
    assert_eq!(tool_names(&list["result"]), ["search_tools", "call_tool"]);
}

async fn mcp_session(d: &Daemon) -> String {
    common::mcp_session_with(d, json!({})).await
}

#[tokio::test]
async fn sigterm_during_a_long_indexing_stops_within_seconds_and_closes_the_store() {
    let temp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(temp.path(), &[]);
    register(&d, fixture("fx", &["--tools", "5000"])).await;
    let end = Instant::now() + UP;
    loop {
        let status: Value = get_json(&d.api("/api/v1/search/status")).await;
        if status["syncing"] == true && status["indexed_tools"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < end, "indexing never started: {status}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let exit = d.terminate(Duration::from_secs(10));
    assert!(exit.is_some_and(|s| s.success()), "{exit:?}");
    // The sync let go of the store before the process left, so the file
    // was closed cleanly: the next start does not check and repair it.
    let again = Daemon::start_in(temp.path(), &[]);
    let log = std::fs::read_to_string(common::log_path(temp.path())).unwrap();
    assert!(!log.contains("not closed cleanly"), "{log}");
    drop(again);
}

#[tokio::test]
async fn the_model_loads_only_when_needed_and_search_can_be_keyword_only_or_off() {
    // Hybrid: nothing to embed, nothing loaded.
    let temp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(temp.path(), &[]);
    let status: Value = get_json(&d.api("/api/v1/search/status")).await;
    assert_eq!(
        (&status["semantic"], &status["model_loaded"]),
        (&json!(true), &json!(false)),
        "{status}"
    );
    // Tools to embed load it.
    register(&d, fixture("fx", &[])).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let tools = common::FIXED as u64 + 3;
    let status = wait_indexed(&d, tools).await;
    assert_eq!(status["model_loaded"], true, "{status}");
    // Classification done, restart: every embedding is cached, every tool
    // classified, so the model stays out of memory until a query needs it.
    let end = Instant::now() + UP;
    loop {
        let skills: Value = get_json(&d.api("/api/v1/skills/status")).await;
        if skills["classified"] == tools {
            break;
        }
        assert!(Instant::now() < end, "{skills}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.terminate(Duration::from_secs(10));
    let d = Daemon::start_in(temp.path(), &[]);
    wait_status(&d, "fx", "CONNECTED", UP).await;
    wait_indexed(&d, tools).await;
    // The pass after the restart (which finds every tool classified) has
    // run: it too leaves the model out.
    let end = Instant::now() + UP;
    loop {
        let skills: Value = get_json(&d.api("/api/v1/skills/status")).await;
        if skills["classified"] == tools && skills["classifier"] != "" {
            break;
        }
        assert!(Instant::now() < end, "{skills}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status: Value = get_json(&d.api("/api/v1/search/status")).await;
    assert_eq!(status["model_loaded"], false, "{status}");
    let (code, answer) = search(&d, json!({"query": "wait a while"})).await;
    assert_eq!(code, 200);
    assert_eq!(answer["metadata"]["mode"], "hybrid", "{answer}");
    assert_eq!(answer["tools"][0]["name"], "fx.sleep", "{answer}");
    let status: Value = get_json(&d.api("/api/v1/search/status")).await;
    assert_eq!(status["model_loaded"], true, "{status}");

    // Keyword: the model never loads, searches say they are by keyword,
    // classification waits (no classifier).
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(temp.path(), &["--search", "keyword"]);
    register(&d, fixture("fx", &[])).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let status = wait_indexed(&d, tools).await;
    assert_eq!(status["semantic"], false, "{status}");
    assert_eq!(status["model_loaded"], false, "{status}");
    assert!(
        status["warning"]
            .as_str()
            .unwrap()
            .contains("--search keyword"),
        "{status}"
    );
    let (code, answer) = search(&d, json!({"query": "sleep"})).await;
    assert_eq!(code, 200);
    assert_eq!(answer["tools"][0]["name"], "fx.sleep", "{answer}");
    assert_eq!(answer["metadata"]["mode"], "keyword", "{answer}");
    assert!(
        answer["metadata"]["warning"]
            .as_str()
            .unwrap()
            .contains("--search keyword")
    );
    let skills: Value = get_json(&d.api("/api/v1/skills/status")).await;
    assert!(
        skills["waiting_for"]
            .as_str()
            .unwrap()
            .contains("--search keyword"),
        "{skills}"
    );
    let log = std::fs::read_to_string(common::log_path(temp.path())).unwrap();
    assert!(!log.contains("search model loaded"), "{log}");

    // Off: searching is refused with the reason, the API keeps working.
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(temp.path(), &["--search", "off"]);
    register(&d, fixture("fx", &[])).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let (code, answer) = search(&d, json!({"query": "sleep"})).await;
    assert_eq!(code, 503, "{answer}");
    assert!(
        answer["detail"].as_str().unwrap().contains("--search off"),
        "{answer}"
    );
    let (code, out, err) = cli(temp.path(), &["search", "sleep"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("--search off"), "{err}");
    let (code, _) = common::rest_call(&d, "fx.echo", json!({"text": "still routed"})).await;
    assert_eq!(code, 200);
}

/// The vector index as the status shows it.
async fn vector_index(d: &Daemon) -> Value {
    get_json::<Value>(&d.api("/api/v1/search/status")).await["vector_index"].clone()
}

/// Semantic top 10 per query, as names.
async fn semantic_top(d: &Daemon, queries: &[&str]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for query in queries {
        let (status, answer) =
            search(d, json!({"query": query, "mode": "semantic", "limit": 10})).await;
        assert_eq!(status, 200, "{answer}");
        out.push(names(&answer));
    }
    out
}

#[tokio::test]
async fn past_the_threshold_a_saved_graph_answers_like_the_scan_and_survives_a_crash() {
    const TOOLS: &str = "300";
    let total = common::FIXED as u64 + 300;
    let queries = [
        "tool number 42",
        "echo the arguments",
        "wait some milliseconds",
        "generated 7",
        "add two numbers",
        "tool 123",
    ];
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("graph");
    // About two vectors per tool: past 200 the index is a graph.
    let mut d = Daemon::start_in(&data_dir, &["--graph-from", "200"]);
    register(&d, fixture("fx", &["--tools", TOOLS])).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    wait_settled(&d, total).await;
    let shape = vector_index(&d).await;
    assert_eq!(shape["backend"], "graph", "{shape}");
    assert_eq!(shape["loaded"], false, "{shape}");
    assert!(shape["vectors"].as_u64().unwrap() >= total, "{shape}");
    let built = fingerprint(&d).await;
    let graph_top = semantic_top(&d, &queries).await;
    assert!(data_dir.join("index/vectors/meta.json").exists());
    d.kill9();

    // After a crash the saved graph is read back, not built again (its
    // vectors answer while it loads), and answers exactly as before.
    let d = Daemon::start_in(&data_dir, &["--graph-from", "200"]);
    wait_status(&d, "fx", "CONNECTED", UP).await;
    wait_settled(&d, total).await;
    let deadline = Instant::now() + UP;
    let shape = loop {
        let shape = vector_index(&d).await;
        if shape["backend"] != "loading" {
            break shape;
        }
        assert!(Instant::now() < deadline, "{shape}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(shape["backend"], "graph", "{shape}");
    assert_eq!(shape["loaded"], true, "{shape}");
    assert_eq!(shape["tombstones"], 0, "{shape}");
    assert_eq!(fingerprint(&d).await, built);

    // The exact scan of the same catalog (the oracle) finds the same
    // tools: recall@10 of the graph at least 0.9 over these queries.
    let exact = Daemon::start_in(&temp.path().join("exact"), &[]);
    register(&exact, fixture("fx", &["--tools", TOOLS])).await;
    wait_status(&exact, "fx", "CONNECTED", UP).await;
    wait_settled(&exact, total).await;
    assert_eq!(vector_index(&exact).await["backend"], "exact");
    let truth = semantic_top(&exact, &queries).await;
    let (mut hits, mut asked) = (0, 0);
    for (found, truth) in graph_top.iter().zip(&truth) {
        asked += truth.len();
        hits += truth.iter().filter(|t| found.contains(t)).count();
    }
    assert!(asked > 0 && hits * 10 >= asked * 9, "{hits} of {asked}");
    drop(exact);

    // Removing the server leaves nothing for the graph: back to the scan,
    // the saved graph removed, none of its tools found.
    let response = http()
        .delete(d.api("/api/v1/aggregator/servers/fx"))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    wait_indexed(&d, 0).await;
    let shape = vector_index(&d).await;
    assert_eq!(shape["backend"], "exact", "{shape}");
    assert_eq!(shape["vectors"], 0, "{shape}");
    assert!(!data_dir.join("index/vectors").exists());
    let (status, answer) = search(&d, json!({"query": "tool number 42", "mode": "semantic"})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(names(&answer).is_empty(), "{answer}");
}

fn tool_definition(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}})
}

const COMPOUND: &str = "Read the file notes.txt from disk. Also tell me the current time in Tokyo";

/// Two fixture servers with tools of their own, in a config file.
fn compound_config(dir: &std::path::Path) -> std::path::PathBuf {
    let servers = [
        (
            "files",
            json!([
                tool_definition(
                    "read_file",
                    "Read the complete contents of a file from disk."
                ),
                tool_definition(
                    "write_file",
                    "Create a new file or overwrite a file with new content."
                ),
                tool_definition(
                    "list_directory",
                    "List the files and folders in a directory."
                ),
                // Each of these says something of both things asked: one
                // search of the whole request ranks them first.
                tool_definition(
                    "file_times",
                    "Show the times a file on disk was created, last read and modified, in any timezone."
                ),
                tool_definition(
                    "touch_file",
                    "Set a file's access and modification time on disk to the current time."
                ),
            ]),
        ),
        (
            "clock",
            json!([
                tool_definition(
                    "get_current_time",
                    "Get the current time in a given timezone."
                ),
                tool_definition("convert_time", "Convert a time between two timezones."),
            ]),
        ),
    ];
    let mut entries = serde_json::Map::new();
    for (name, tools) in servers {
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, tools.to_string()).unwrap();
        entries.insert(
            name.to_owned(),
            json!({"command": FIXTURE, "args": ["--tools-file", file.to_str().unwrap()]}),
        );
    }
    let config = dir.join("servers.json");
    std::fs::write(&config, json!({"mcpServers": entries}).to_string()).unwrap();
    config
}

/// What search_tools found: the tool names in its structured result.
fn found_names(result: &Value) -> Vec<String> {
    names(&result["structuredContent"])
}

/// `tools/list` over /mcp.
async fn list_over_http(d: &Daemon, session: &str) -> Value {
    mcp_call(
        d,
        session,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// `--expose search` with pins: the pinned tools are listed beside the
/// meta-tools, and a request that asks for two things finds both tools in
/// its first two results — through /mcp, the REST search and stdio.
#[tokio::test]
async fn compound_requests_and_pinned_tools_through_both_front_doors() {
    let temp = tempfile::tempdir().unwrap();
    let config = compound_config(temp.path());
    let pins = ["--pin", "server:clock", "--pin", "files.read_*"];
    let pinned = [
        "clock__convert_time",
        "clock__get_current_time",
        "files__read_file",
        "search_tools",
        "call_tool",
    ];
    let both = ["clock__get_current_time", "files__read_file"];

    let mut args = vec!["--expose", "search", "--config", config.to_str().unwrap()];
    args.extend(pins);
    let d = Daemon::start_in(&temp.path().join("http"), &args);
    wait_status(&d, "files", "CONNECTED", UP).await;
    wait_status(&d, "clock", "CONNECTED", UP).await;
    wait_settled(&d, 7).await;
    let session = mcp_session(&d).await;
    let list = list_over_http(&d, &session).await;
    let listed = tool_names(&list["result"]);
    assert_eq!(
        sorted(listed.clone()),
        sorted(pinned.map(str::to_owned).to_vec())
    );
    assert!(listed.ends_with(&["search_tools".to_owned(), "call_tool".to_owned()]));
    // search_tools names the skills the catalog has.
    let search_tools = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "search_tools")
        .unwrap();
    assert!(
        search_tools["description"]
            .as_str()
            .unwrap()
            .contains("Skills present (tools): "),
        "{search_tools}"
    );
    assert!(search_tools["inputSchema"]["properties"]["skills"].is_object());
    let answer = mcp_call(
        &d,
        &session,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "search_tools", "arguments": {"query": COMPOUND, "limit": 2}}}),
    )
    .await;
    assert_eq!(sorted(found_names(&answer["result"])), both, "{answer}");
    // One call is enough: each result carries its schema.
    assert_eq!(
        answer["result"]["structuredContent"]["tools"][0]["inputSchema"]["type"],
        "object"
    );
    let (status, found) = search(&d, json!({"query": COMPOUND, "limit": 2})).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(
        sorted(names(&found)),
        ["clock.get_current_time", "files.read_file"],
        "{found}"
    );
    // A skill no tool has is a mistake the model can read and mend (the
    // skills present are named), as is a wrong type.
    let answer = mcp_call(&d, &session, json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "search_tools", "arguments": {"query": COMPOUND, "skills": ["no_such_skill"]}}})).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("'no_such_skill'") && text.contains("skills present are: "),
        "{answer}"
    );
    let answer = mcp_call(
        &d,
        &session,
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "search_tools", "arguments": {"query": COMPOUND, "skills": "files"}}}),
    )
    .await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    drop(d);

    // The same through stdio.
    let data = temp.path().join("stdio");
    let mut args = vec![
        "stdio",
        "--expose",
        "search",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ];
    args.extend(pins);
    let mut client = StdioClient::start(&args).await;
    let end = Instant::now() + UP;
    let mut id = 10;
    loop {
        id += 1;
        let list = client.request(id, "tools/list", json!({})).await;
        if tool_names(&list).len() == pinned.len() {
            assert_eq!(
                sorted(tool_names(&list)),
                sorted(pinned.map(str::to_owned).to_vec())
            );
            break;
        }
        assert!(Instant::now() < end, "{list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    loop {
        id += 1;
        let result = client
            .request(
                id,
                "tools/call",
                json!({"name": "search_tools", "arguments": {"query": COMPOUND, "limit": 2}}),
            )
            .await;
        if sorted(found_names(&result)) == both {
            break;
        }
        assert!(Instant::now() < end, "{result}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client.stdin);
    let _ = tokio::time::timeout(UP, client.child.wait()).await;

    // A selector of an unknown kind stops the daemon at start.
    let output = std::process::Command::new(BIN)
        .args(["serve", "--pin", "servr:clock", "--data-dir"])
        .arg(temp.path().join("bad"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown kind \"servr\""), "{stderr}");
}

/// A client offered only the meta-tools may search the moment it starts:
/// that search waits, as a first list does, for a server still starting,
/// then for the index to take its tools — through /mcp and through stdio.
#[tokio::test]
async fn a_search_made_at_start_finds_a_server_still_starting() {
    let temp = tempfile::tempdir().unwrap();
    let gate = temp.path().join("gate");
    let pids = temp.path().join("pids");
    let config = temp.path().join("servers.json");
    let (gate_arg, pids_arg) = (gate.display().to_string(), pids.display().to_string());
    std::fs::write(
        &config,
        json!({"mcpServers": {"slow": {"command": "python3",
            "args": [common::hostile_py(), "--wait-for", gate_arg, "--pid-file", pids_arg]}}})
        .to_string(),
    )
    .unwrap();
    // A start-up wait longer than any machine needs: the test must not
    // depend on how fast the server comes up or the index takes it.
    let args = [
        "--expose",
        "search",
        "--startup-wait",
        "600",
        "--config",
        config.to_str().unwrap(),
    ];
    let query = json!({"query": "answer with an SSE event that never ends", "limit": 3});
    let wanted = "slow__endless_event";
    // The server is running and held at its gate; only now may it start.
    let open_gate = || async {
        let end = Instant::now() + UP;
        while common::pids_in(&pids).is_empty() {
            assert!(Instant::now() < end, "the server never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::write(&gate, "").unwrap();
    };

    let d = Daemon::start_in(&temp.path().join("http"), &args);
    let session = mcp_session(&d).await;
    let asked = mcp_call(
        &d,
        &session,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "search_tools", "arguments": query}}),
    );
    let (answer, ()) = tokio::join!(asked, open_gate());
    let found = found_names(&answer["result"]);
    assert!(found.iter().any(|n| n == wanted), "{answer}");
    drop(d);
    std::fs::remove_file(&gate).unwrap();
    std::fs::remove_file(&pids).unwrap();

    let data = temp.path().join("stdio");
    let mut stdio_args = vec!["stdio", "--data-dir", data.to_str().unwrap()];
    stdio_args.extend(args);
    let mut client = StdioClient::start(&stdio_args).await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "search_tools", "arguments": query}}))
        .await;
    open_gate().await;
    let result = client.answer(4).await;
    let found = found_names(&result);
    assert!(found.iter().any(|n| n == wanted), "{result}");
    drop(client.stdin);
    let _ = tokio::time::timeout(UP, client.child.wait()).await;
}

/// A view's pattern that spells the server/tool boundary (`fx__*`) names
/// server `fx`'s tools only, never those of servers whose names begin
/// with `fx_` (server names may hold `__`); its search finds only them.
#[tokio::test]
async fn a_views_wire_pattern_keeps_to_its_server() {
    let d = Daemon::start();
    for name in ["fx", "fx__x", "fx_"] {
        register(&d, fixture(name, &[])).await;
    }
    for name in ["fx", "fx__x", "fx_"] {
        wait_status(&d, name, "CONNECTED", UP).await;
    }
    let fx_tools = common::FIXED + 3;
    let put = |name: &str, body: Value| {
        let url = d.api(&format!("/api/v1/profiles/{name}"));
        async move {
            let response = http().put(url).json(&body).send().await.unwrap();
            assert!(response.status().is_success(), "{}", response.status());
        }
    };
    put("fx-only", json!({"tools": ["fx__*"]})).await;
    put(
        "not-fx",
        json!({"servers": ["fx*"], "exclude_tools": ["fx__*"]}),
    )
    .await;
    let visible = |name: &'static str| {
        let url = d.api(&format!("/api/v1/profiles/{name}"));
        async move {
            let view: Value = get_json(&url).await;
            view["visible_tools"]
                .as_array()
                .unwrap_or_else(|| panic!("{view}"))
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect::<Vec<String>>()
        }
    };
    // Listings are stored a moment after CONNECTED: wait for all three.
    put("all", json!({"servers": ["*"]})).await;
    let end = Instant::now() + UP;
    let everything = loop {
        let all = visible("all").await;
        if all.len() == 3 * fx_tools || Instant::now() > end {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(everything.len(), 3 * fx_tools, "{everything:?}");
    let fx_only = visible("fx-only").await;
    assert_eq!(fx_only.len(), fx_tools, "{fx_only:?}");
    assert!(fx_only.iter().all(|t| t.starts_with("fx.")), "{fx_only:?}");
    let not_fx = visible("not-fx").await;
    assert_eq!(not_fx.len(), 2 * fx_tools, "{not_fx:?}");
    assert!(!not_fx.iter().any(|t| t.starts_with("fx.")), "{not_fx:?}");
}
