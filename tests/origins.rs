//! Secrets never leave their origin, on the real binary: a Streamable HTTP
//! server that redirects its requests (or its health URL) elsewhere, a
//! legacy SSE server whose `endpoint` names another origin, and a chat
//! endpoint for the classifier that answers with an endless body. A
//! capturing server stands at the other origin and must receive nothing.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const UP: Duration = Duration::from_secs(30);
const SECRETS: [&str; 3] = ["Bearer tok-a1b2c3", "key-d4e5f6", "pt-g7h8i9"];

/// The other origin: records every request it gets (checked with one of
/// ours, then forgotten, so an empty record means nothing reached it).
fn capture(file: &Path) -> (Reaped, u16) {
    let (server, port) = hostile_listening(&["--capture", file.to_str().unwrap()], "--http");
    let (status, _) = raw_http(
        &format!("http://127.0.0.1:{port}"),
        &raw_request("GET", "/control", &[("Host", "127.0.0.1")], ""),
    );
    assert_eq!(status, 404);
    let seen = captured(file);
    assert!(
        seen.len() == 1 && seen[0]["path"] == "/control",
        "the capture server records what it gets: {seen:?}"
    );
    std::fs::remove_file(file).unwrap();
    (server, port)
}

fn captured(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn headers() -> Value {
    json!({"Authorization": SECRETS[0], "X-Api-Key": SECRETS[1], "Private-Token": SECRETS[2]})
}

/// Waits until the server's error message says `needle`.
async fn wait_error(d: &Daemon, name: &str, needle: &str) -> Value {
    let end = Instant::now() + UP;
    loop {
        let server: Value = get_json(&d.api(&format!("/api/v1/aggregator/servers/{name}"))).await;
        if server["error_message"]
            .as_str()
            .is_some_and(|m| m.contains(needle))
        {
            return server;
        }
        assert!(
            Instant::now() < end,
            "{name} never failed with {needle:?}: {server}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_origin_is_never_followed() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("captured.jsonl");
    let (_capture, other) = capture(&file);
    let steal = format!("http://localhost:{other}/steal");
    // Every request redirected, the handshake included.
    let (_all, all_port) =
        hostile_listening(&["--redirect-to", &steal, "--redirect-all"], "--http");
    // Only the calls (and the GET stream) redirected: the handshake works.
    let (_calls, calls_port) = hostile_listening(&["--redirect-to", &steal], "--http");
    let d = Daemon::start_in(&temp.path().join("data"), &["--health-interval", "1"]);
    register(
        &d,
        json!({"name": "moved", "transport_type": "HTTP",
               "connection_config": {"base_url": format!("http://127.0.0.1:{all_port}/mcp"), "headers": headers()},
               "auto_connect": true}),
    )
    .await;
    register(
        &d,
        json!({"name": "callsmoved", "transport_type": "HTTP",
               "connection_config": {"base_url": format!("http://127.0.0.1:{calls_port}/mcp"), "headers": headers()},
               "health_check_url": format!("http://127.0.0.1:{calls_port}/health"),
               "auto_connect": true}),
    )
    .await;
    let moved = wait_error(&d, "moved", "another origin").await;
    let message = moved["error_message"].as_str().unwrap();
    assert!(
        message.contains(&format!("localhost:{other}/steal")),
        "{moved}"
    );

    wait_status(&d, "callsmoved", "CONNECTED", UP).await;
    let (status, body) =
        rest_call(&d, "callsmoved.echo", json!({"secret": "argument-j1k2l3"})).await;
    assert_ne!(status, 200, "{body}");
    assert!(
        body.to_string().contains("another origin"),
        "{status} {body}"
    );
    // The health URL redirects too (a GET): a warning, never a hop.
    let end = Instant::now() + UP;
    loop {
        let server: Value = get_json(&d.api("/api/v1/aggregator/servers/callsmoved")).await;
        let health = &server["health"]["last_error"];
        if health
            .as_str()
            .is_some_and(|e| e.contains("another origin"))
        {
            break;
        }
        assert!(
            Instant::now() < end,
            "the health check never saw the redirect: {health}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = captured(&file);
    assert!(seen.is_empty(), "the other origin received {seen:?}");
    let log = std::fs::read_to_string(log_path(&d.data_dir)).unwrap_or_default();
    for secret in SECRETS {
        assert!(!log.contains(secret), "{secret} in the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_endpoint_on_another_origin_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("captured.jsonl");
    let (_capture, other) = capture(&file);
    let steal = format!("http://localhost:{other}/steal");
    let (_sse, port) = hostile_listening(&["--endpoint", &steal], "--sse");
    // The same server naming its own endpoint works: the refusal is about
    // the origin, not the transport.
    let (_good, good_port) = hostile_listening(&[], "--sse");
    let d = Daemon::start_in(&temp.path().join("data"), &[]);
    for (name, port) in [("sse", port), ("ssegood", good_port)] {
        register(
            &d,
            json!({"name": name, "transport_type": "SSE",
                   "connection_config": {"url": format!("http://127.0.0.1:{port}/sse"), "headers": headers()},
                   "auto_connect": true}),
        )
        .await;
    }
    let server = wait_error(&d, "sse", "another origin").await;
    assert!(
        server["error_message"]
            .as_str()
            .unwrap()
            .contains(&format!("localhost:{other}/steal")),
        "{server}"
    );
    wait_status(&d, "ssegood", "CONNECTED", UP).await;
    let (status, body) = rest_call(&d, "ssegood.echo", json!({"x": 1})).await;
    assert_eq!(status, 200, "{body}");
    let seen = captured(&file);
    assert!(seen.is_empty(), "the other origin received {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classifier_answering_endless_bodies_costs_bounded_memory() {
    let temp = tempfile::tempdir().unwrap();
    let (_chat, chat_port) = hostile_listening(&["--chat-mb", "300"], "--http");
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &[
            "--classifier-url",
            &format!("http://127.0.0.1:{chat_port}/v1"),
            "--classifier-timeout",
            "60",
        ],
    );
    let pid = d.pid() as u32;
    register(&d, hostile_server("many", &["--tools", "40"])).await;
    wait_status(&d, "many", "CONNECTED", UP).await;
    // Every tool is tried with the endpoint (and falls back to the local
    // classifier, saying why); memory is watched meanwhile.
    let end = Instant::now() + Duration::from_secs(240);
    let mut peak = 0;
    let tools = loop {
        peak = peak.max(rss_kib(pid));
        let tools: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers/many/tools")).await;
        let failed = tools
            .iter()
            .filter(|t| t["classification_error"].as_str().is_some())
            .count();
        if !tools.is_empty() && failed == tools.len() {
            break tools;
        }
        assert!(
            Instant::now() < end,
            "the classifier was tried for {failed} of {} tools",
            tools.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let error = tools[0]["classification_error"].as_str().unwrap();
    assert!(error.contains("limit"), "{error}");
    assert!(
        peak < 600 * 1024,
        "300 MB answers took the daemon to {peak} KiB"
    );
}
