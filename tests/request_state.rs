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
    call_at(d, "/mcp", name, arguments, extra).await
}

/// The same, at `path` (a profile's `/mcp/NAME`).
async fn call_at(d: &Daemon, path: &str, name: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({"name": name, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}});
    if let (Value::Object(params), Value::Object(extra)) = (&mut params, extra) {
        params.extend(extra);
    }
    http()
        .post(d.api(path))
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

/// A daemon with the fixture as a 2025 server (`fx`, whose `roots` asks the
/// client for its roots), and two views of everything, `mine` and `theirs`.
async fn legacy_fixture_with_two_views() -> Daemon {
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO",
            "connection_config": {"command": FIXTURE, "args": ["--legacy-only"]}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    for profile in ["mine", "theirs"] {
        let put = http()
            .put(d.api(&format!("/api/v1/profiles/{profile}")))
            .json(&json!({"servers": ["*"]}))
            .send()
            .await
            .unwrap();
        assert!(put.status().is_success(), "{put:?}");
    }
    d
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
/// asks the client for its roots; a bare `ask_roots` is a's (priority).
async fn two_asking_servers() -> Daemon {
    let d = Daemon::start();
    for (name, priority) in [("a", 10), ("b", 0)] {
        register(
            &d,
            json!({"name": name, "transport_type": "STDIO", "priority": priority, "connection_config": {
                "command": FIXTURE, "args": ["--modern-only", "--extra-tool", "ask_roots"]}}),
        )
        .await;
        wait_status(&d, name, "CONNECTED", UP).await;
    }
    d
}

/// A state a client makes up, or one of another type, never reaches a
/// server: only a state we handed out is let through, and a 2025 session
/// (never handed one) has no answers to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_the_aggregator_did_not_issue_reaches_no_server() {
    let d = two_asking_servers().await;
    let answers = json!({"roots-1": {"roots": [{"uri": "file:///forged"}]}});
    for state in [
        json!("forged-by-client"),
        json!(12),
        json!(["x"]),
        json!({"v": 1}),
    ] {
        let sent = call(
            &d,
            "b__ask_roots",
            json!({}),
            json!({"inputResponses": answers, "requestState": state}),
        )
        .await;
        assert_eq!(sent["error"]["code"], -32602, "{state}: {sent}");
        assert!(sent.to_string().contains("requestState refused"), "{sent}");
    }
    // Without answers too: a state of the wrong type is not dropped in
    // silence (the call would run as a new one).
    let sent = call(&d, "b__ask_roots", json!({}), json!({"requestState": 5})).await;
    assert_eq!(sent["error"]["code"], -32602, "{sent}");
    let session = mcp_session_with(&d, json!({})).await;
    let sent = mcp_call(
        &d,
        &session,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "b__ask_roots", "arguments": {},
            "inputResponses": answers, "requestState": "forged-by-client"}}),
    )
    .await;
    assert_eq!(sent["error"]["code"], -32602, "a 2025 session: {sent}");
}

/// A state goes back to the server that issued it, not to whatever the
/// name the client retries with resolves to now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_is_not_taken_to_another_server_by_a_bare_name() {
    let d = two_asking_servers().await;
    let from_a = asked(&d, "ask_roots", json!({})).await;
    let disconnected = http()
        .post(d.api("/api/v1/aggregator/servers/a/disconnect"))
        .send()
        .await
        .unwrap();
    assert!(disconnected.status().is_success(), "{disconnected:?}");
    wait_status(&d, "a", "DISCONNECTED", UP).await;
    let sent = call(&d, "ask_roots", json!({}), retry(&from_a, "file:///x")).await;
    assert_eq!(sent["error"]["code"], -32602, "a's state reached b: {sent}");
    assert!(sent.to_string().contains("another server"), "{sent}");
}

/// A parked request resumes only for the client it was handed to (its
/// view here), and a wrong retry does not use up the right one's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_request_resumes_only_for_the_client_it_was_handed_to() {
    let d = legacy_fixture_with_two_views().await;
    let end = Instant::now() + UP;
    let mine = loop {
        let answer = call_at(&d, "/mcp/mine", "fx__roots", json!({}), json!({})).await;
        if answer["result"]["resultType"] == "input_required" {
            break answer["result"].clone();
        }
        assert!(Instant::now() < end, "never asked: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for path in ["/mcp/theirs", "/mcp"] {
        let taken = call_at(
            &d,
            path,
            "fx__roots",
            json!({}),
            retry(&mine, "file:///theirs"),
        )
        .await;
        assert_eq!(taken["error"]["code"], -32602, "{path}: {taken}");
        assert!(taken.to_string().contains("another client"), "{taken}");
    }
    // Still there for its own client.
    let done = call_at(
        &d,
        "/mcp/mine",
        "fx__roots",
        json!({}),
        retry(&mine, "file:///mine"),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(done.to_string().contains("file:///mine"), "{done}");
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

/// A parked request (its server's question is with a client that has not
/// retried yet) does not make another client's call on that server
/// ambiguous: the server is waiting for the parked one's answer, so its
/// new question is the other call's. Each client then gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_request_does_not_keep_other_clients_from_their_questions() {
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO",
            "connection_config": {"command": FIXTURE, "args": ["--legacy-only"]}}),
    )
    .await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    let first = asked(&d, "fx__roots", json!({})).await;
    // Left parked while a second client calls the same server.
    let second = asked(&d, "fx__roots", json!({})).await;
    assert_ne!(first["requestState"], second["requestState"]);
    for (parked, root) in [(&second, "file:///second"), (&first, "file:///first")] {
        let done = call(&d, "fx__roots", json!({}), retry(parked, root)).await;
        assert_eq!(done["result"]["resultType"], "complete", "{done}");
        assert!(done.to_string().contains(root), "{done}");
    }
}

/// One client (token and view) holds at most 16 parked requests: its own
/// oldest goes first, and another client's parked request stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_push_out_another_clients_parked_requests() {
    let d = legacy_fixture_with_two_views().await;
    let park = |path: &'static str| {
        let d = &d;
        async move {
            let answer = call_at(d, path, "fx__roots", json!({}), json!({})).await;
            assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
            answer["result"].clone()
        }
    };
    let theirs = park("/mcp/theirs").await;
    let mine_first = park("/mcp/mine").await;
    for _ in 0..16 {
        park("/mcp/mine").await;
    }
    let gone = call_at(
        &d,
        "/mcp/mine",
        "fx__roots",
        json!({}),
        retry(&mine_first, "file:///mine"),
    )
    .await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    let done = call_at(
        &d,
        "/mcp/theirs",
        "fx__roots",
        json!({}),
        retry(&theirs, "file:///theirs"),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(done.to_string().contains("file:///theirs"), "{done}");
}
