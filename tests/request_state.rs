//! A sealed `requestState` opens only for the request it was issued to, on
//! the real binary: not again once used, not after a restart for another
//! client's parked request (request numbers start again, the key does
//! not), and a server's own state never reaches another server's tool.

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const UP: Duration = Duration::from_secs(30);
const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");

/// A 2026-07-28 client's `tools/call` of `name` over `/mcp`, with `extra`
/// params (its answers and state).
async fn call(d: &Daemon, name: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({"name": name, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}});
    if let (Value::Object(params), Value::Object(extra)) = (&mut params, extra) {
        params.extend(extra);
    }
    http()
        .post(d.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Calls until the server's question comes back as input required.
async fn asked(d: &Daemon, name: &str, arguments: Value) -> Value {
    let end = Instant::now() + UP;
    loop {
        let answer = call(d, name, arguments.clone(), json!({})).await;
        if answer["result"]["resultType"] == "input_required" {
            return answer["result"].clone();
        }
        assert!(Instant::now() < end, "{name} never asked: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The answers to every question of an input-required result, with
/// `uri` as the client's root.
fn answers(asked: &Value, uri: &str) -> Value {
    let mut answers = serde_json::Map::new();
    for key in asked["inputRequests"].as_object().unwrap().keys() {
        answers.insert(key.clone(), json!({"roots": [{"uri": uri}]}));
    }
    Value::Object(answers)
}

fn retry(asked: &Value, uri: &str) -> Value {
    json!({"inputResponses": answers(asked, uri), "requestState": asked["requestState"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_state_replayed_after_a_restart_resumes_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let server = json!({"name": "fx", "transport_type": "STDIO",
        "connection_config": {"command": FIXTURE, "args": ["--legacy-only"]}});
    // The attacker's own request, answered and used once.
    let used = {
        let d = Daemon::start_in(&data, &[]);
        register(&d, server).await;
        wait_status(&d, "fx", "CONNECTED", UP).await;
        let first = asked(&d, "fx__roots", json!({})).await;
        let done = call(
            &d,
            "fx__roots",
            json!({}),
            retry(&first, "file:///attacker"),
        )
        .await;
        assert_eq!(done["result"]["resultType"], "complete", "{done}");
        let again = call(
            &d,
            "fx__roots",
            json!({}),
            retry(&first, "file:///attacker"),
        )
        .await;
        assert_eq!(
            again["error"]["code"], -32602,
            "a replay before the restart: {again}"
        );
        first
    };
    let d = Daemon::start_in(&data, &[]);
    wait_status(&d, "fx", "CONNECTED", UP).await;
    // The victim's request is parked: the first one of this process.
    let victim = asked(&d, "fx__roots", json!({"note": "victim"})).await;
    let replay = call(&d, "fx__roots", json!({}), retry(&used, "file:///injected")).await;
    assert_eq!(
        replay["error"]["code"], -32602,
        "an old state resumed another client's request: {replay}"
    );
    assert!(
        replay.to_string().contains("requestState refused"),
        "{replay}"
    );
    // The victim's own retry still completes, with its own answer.
    let done = call(
        &d,
        "fx__roots",
        json!({"note": "victim"}),
        retry(&victim, "file:///victim"),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("file:///victim") && !text.contains("injected"),
        "{done}"
    );
}

/// A daemon with two 2026-07-28 servers, `a` and `b`, whose `ask_roots`
/// asks the client for its roots.
async fn two_asking_servers() -> Daemon {
    let d = Daemon::start();
    for name in ["a", "b"] {
        register(
            &d,
            json!({"name": name, "transport_type": "STDIO", "connection_config": {
                "command": FIXTURE, "args": ["--modern-only", "--extra-tool", "ask_roots"]}}),
        )
        .await;
        wait_status(&d, name, "CONNECTED", UP).await;
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_state_goes_back_only_to_the_tool_that_issued_it() {
    let d = two_asking_servers().await;
    let from_a = asked(&d, "a__ask_roots", json!({})).await;
    let sent_to_b = call(&d, "b__ask_roots", json!({}), retry(&from_a, "file:///x")).await;
    assert_eq!(
        sent_to_b["error"]["code"], -32602,
        "a's state reached b: {sent_to_b}"
    );
    // Where it belongs, it completes.
    let done = call(&d, "a__ask_roots", json!({}), retry(&from_a, "file:///x")).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_issued_through_call_tool_resumes_that_call_only() {
    let d = two_asking_servers().await;
    let through = |tool: &str| json!({"name": tool, "arguments": {}});
    let first = asked(&d, "call_tool", through("a__ask_roots")).await;
    // The same meta-call for another tool does not take it.
    let elsewhere = call(
        &d,
        "call_tool",
        through("b__ask_roots"),
        retry(&first, "file:///x"),
    )
    .await;
    assert_eq!(elsewhere["error"]["code"], -32602, "{elsewhere}");
    let done = call(
        &d,
        "call_tool",
        through("a__ask_roots"),
        retry(&first, "file:///x"),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(done.to_string().contains("file:///x"), "{done}");
}
