//! A server's lists, on the real binary: however large or deep its
//! definitions, discovery costs bounded memory, the store keeps its size
//! and what it held, and a bad definition is refused alone — shown with
//! its reason, offered to nobody — while the server's other tools work.

mod common;

use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const UP: Duration = Duration::from_secs(60);

/// Samples a process's RSS every few milliseconds until dropped; `peak`
/// reads the largest seen.
struct RssWatch {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    fn start(pid: u32) -> RssWatch {
        let (peak, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (p, s) = (Arc::clone(&peak), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        RssWatch {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits until the server lists a tool named `name` (refused or not).
async fn wait_tool(d: &Daemon, server: &str, name: &str) -> Vec<Value> {
    let end = Instant::now() + UP;
    loop {
        let tools: Vec<Value> =
            get_json(&d.api(&format!("/api/v1/aggregator/servers/{server}/tools"))).await;
        if tools.iter().any(|t| t["original_name"] == name) {
            return tools;
        }
        assert!(
            Instant::now() < end,
            "{server} never showed {name}: {} tools",
            tools.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["original_name"] == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_pages_of_twenty_megabyte_tools_cost_bounded_memory() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &[]);
    // What the store held before must still be there after.
    for n in 0..3 {
        register(&d, stdio_server(&format!("kept{n}"))).await;
    }
    let watch = RssWatch::start(d.pid() as u32);
    register(
        &d,
        hostile_server("huge", &["--huge-pages", "30", "--huge-mb", "20"]),
    )
    .await;
    wait_status(&d, "huge", "CONNECTED", UP).await;
    let tools = wait_tool(&d, "huge", "huge_0").await;
    let refused = tool(&tools, "huge_0");
    assert_eq!(refused["wire_name"], Value::Null, "{refused}");
    let reason = refused["rejected_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("bytes"), "{refused}");
    // The server's ordinary tools (the first page) are offered, and work.
    let (status, body) = rest_call(&d, "huge.echo", json!({"x": 1})).await;
    assert_eq!(status, 200, "{body}");
    // Past the discovery budget the pages were not even read.
    assert!(tools.len() < 30, "{} tools kept", tools.len());
    wait_index_settled(&d).await;
    let session = mcp_session_with(&d, json!({})).await;
    let listed = http()
        .post(d.api("/mcp"))
        .header("mcp-session-id", &session)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        listed.contains("huge__echo"),
        "{}",
        &listed[..listed.len().min(500)]
    );
    assert!(
        !listed.contains("huge__huge_0"),
        "a refused tool was listed"
    );
    assert!(
        listed.len() < 1024 * 1024,
        "tools/list returned {} bytes",
        listed.len()
    );
    let peak = watch.peak();
    drop(watch);
    eprintln!("peak RSS while listing and indexing: {peak} KiB");
    assert!(peak < 400 * 1024, "discovery took the daemon to {peak} KiB");
    let store = std::fs::metadata(d.data_dir.join("store.redb"))
        .unwrap()
        .len();
    assert!(store < 64 * 1024 * 1024, "the store grew to {store} bytes");
    let servers: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers")).await;
    for n in 0..3 {
        assert!(
            servers.iter().any(|s| s["name"] == format!("kept{n}")),
            "kept{n} is gone: {servers:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_schema_or_a_bad_header_annotation_refuses_that_tool_alone() {
    let d = Daemon::start();
    register(
        &d,
        hostile_server("odd", &["--deep", "3000", "--bad-header"]),
    )
    .await;
    wait_status(&d, "odd", "CONNECTED", UP).await;
    let tools = wait_tool(&d, "odd", "deep").await;
    let deep = tool(&tools, "deep");
    assert!(
        deep["rejected_reason"]
            .as_str()
            .is_some_and(|r| r.contains("nested")),
        "{deep}"
    );
    let header = tool(&tools, "bad_header");
    assert!(
        header["rejected_reason"]
            .as_str()
            .is_some_and(|r| r.contains("x-mcp-header")),
        "{header}"
    );
    // Every other tool is there and offered.
    let echo = tool(&tools, "echo");
    assert_eq!(echo["rejected_reason"], Value::Null, "{echo}");
    let (status, body) = rest_call(&d, "odd.echo", json!({})).await;
    assert_eq!(status, 200, "{body}");
    // The refused ones are neither callable nor found.
    let (status, body) = rest_call(&d, "odd.deep", json!({})).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not offered")),
        "{body}"
    );
    wait_index_settled(&d).await;
    let found: Value = post_json(
        &d.api("/api/v1/search"),
        &json!({"query": "tool with a deep schema", "limit": 50}),
    )
    .await;
    assert!(!found.to_string().contains("odd.deep"), "{found}");
    let server: Value = get_json(&d.api("/api/v1/aggregator/servers/odd")).await;
    assert!(server["tool_count"].as_u64().unwrap_or(0) > 10, "{server}");
}

/// A refusal is said in the log when a listing first refuses it, not again
/// at every relisting that refuses the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_logged_once_not_at_every_relisting() {
    let d = Daemon::start();
    register(&d, hostile_server("odd", &["--deep", "3000"])).await;
    wait_status(&d, "odd", "CONNECTED", UP).await;
    wait_tool(&d, "odd", "deep").await;
    for n in 1..=2 {
        let (status, body) = rest_call(&d, "odd.grow", json!({})).await;
        assert_eq!(status, 200, "{body}");
        wait_tool(&d, "odd", &format!("grown_{n}")).await;
    }
    let log = std::fs::read_to_string(log_path(&d.data_dir)).unwrap_or_default();
    let said = log
        .lines()
        .filter(|line| line.contains("item=deep") && line.contains("refused"))
        .count();
    assert_eq!(said, 1, "{log}");
}

/// A server that answers a later tools/list with something that is not a
/// list: its stored tools stay (a broken answer is no empty list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_list_answer_keeps_the_stored_tools() {
    let d = Daemon::start();
    register(&d, hostile_server("odd", &[])).await;
    wait_status(&d, "odd", "CONNECTED", UP).await;
    let before = wait_tool(&d, "odd", "break_list").await.len();
    let (status, body) = rest_call(&d, "odd.break_list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let log = log_path(&d.data_dir);
    let end = Instant::now() + UP;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("has no `tools` array")
    {
        assert!(Instant::now() < end, "the broken list was never read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tools: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers/odd/tools")).await;
    assert_eq!(tools.len(), before);
    let (status, body) = rest_call(&d, "odd.echo", json!({"still": "here"})).await;
    assert_eq!(status, 200, "{body}");
}

/// A server that never answers tools/list (with an hour to answer each
/// request): its disconnect and its removal are carried out at once, not
/// after its listing gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stuck_in_its_listing_is_disconnected_and_removed_at_once() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &["--request-timeout", "3600"]);
    register(&d, hostile_server("stuck", &["--hang-list"])).await;
    wait_status(&d, "stuck", "CONNECTED", UP).await;
    let server: Value = get_json(&d.api("/api/v1/aggregator/servers/stuck")).await;
    assert_eq!(server["discovering"], true, "{server}");
    // Liveness, not speed: each answer comes long before the hour.
    let disconnected = tokio::time::timeout(
        UP,
        http()
            .post(d.api("/api/v1/aggregator/servers/stuck/disconnect"))
            .json(&json!({}))
            .send(),
    )
    .await
    .expect("the disconnect waited for the listing")
    .unwrap();
    assert_eq!(disconnected.status(), 200);
    wait_status(&d, "stuck", "DISCONNECTED", UP).await;
    let connected = http()
        .post(d.api("/api/v1/aggregator/servers/stuck/connect"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert!(connected.status().is_success(), "{connected:?}");
    wait_status(&d, "stuck", "CONNECTED", UP).await;
    let removed = tokio::time::timeout(
        UP,
        http()
            .delete(d.api("/api/v1/aggregator/servers/stuck"))
            .send(),
    )
    .await
    .expect("the removal waited for the listing")
    .unwrap();
    assert!(removed.status().is_success(), "{removed:?}");
    let gone = http()
        .get(d.api("/api/v1/aggregator/servers/stuck"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
}

/// An HTTP server whose listening GET fails with 500 while its requests
/// work: the link stays up without the stream, instead of being torn
/// down and reconnected over and over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_listening_stream_does_not_end_a_working_link() {
    let d = Daemon::start();
    let (_server, port) = common::hostile_listening(&["--get-status", "500"], "--http");
    register(
        &d,
        json!({"name": "noget", "transport_type": "HTTP",
            "connection_config": {"base_url": format!("http://127.0.0.1:{port}/mcp")},
            "auto_connect": true}),
    )
    .await;
    wait_status(&d, "noget", "CONNECTED", UP).await;
    let log = log_path(&d.data_dir);
    let end = Instant::now() + UP;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("listening stream keeps failing")
    {
        assert!(
            Instant::now() < end,
            "the failing stream was never given up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = rest_call(&d, "noget.echo", json!({"still": "up"})).await;
    assert_eq!(status, 200, "{body}");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!text.contains("lost the connection"), "{text}");
    let server: Value = get_json(&d.api("/api/v1/aggregator/servers/noget")).await;
    assert_eq!(server["status"], "CONNECTED", "{server}");
}
