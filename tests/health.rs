//! The health monitor against the rmcp fixture over stdio, driven through
//! its control files: probes it leaves unanswered (DEGRADED, back to
//! CONNECTED, ERROR and reconnected, in both protocol eras), a health URL
//! answering 200/404/500, passive inference (a busy server is never
//! pinged), calls that fail or slow down (DEGRADED, a warning in the
//! result's `_meta`), the circuit breaker, the wait while a server
//! reconnects, `/metrics` read with a Prometheus parser, and the audit
//! trail's filters. Short intervals are set per test; every wait is on a
//! state, with a deadline.

#![cfg(feature = "fixture")]

mod common;

use common::{Daemon, http, register, rest_call, wait_status};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const UP: Duration = Duration::from_secs(30);
/// Long enough for a few checks at the intervals these tests use, on a busy
/// machine.
const CHANGE: Duration = Duration::from_secs(60);
/// A check every 300 ms; an answer may take 2 s (a busy machine is slow,
/// not failing).
const FAST_CHECKS: [&str; 4] = ["--health-interval", "0.3", "--health-timeout", "2"];

fn fixture(name: &str, args: &[&str]) -> Value {
    json!({
        "name": name,
        "transport_type": "STDIO",
        "connection_config": {"command": FIXTURE, "args": args},
    })
}

fn path_arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

/// The server's connection history, oldest first: (status entered, trigger).
async fn history(d: &Daemon, server: &str) -> Vec<(String, String, String)> {
    let entries: Vec<Value> = common::get_json(&d.api(&format!(
        "/api/v1/aggregator/servers/{server}/history?limit=1000"
    )))
    .await;
    entries
        .iter()
        .map(|h| {
            (
                h["event_type"].as_str().unwrap_or_default().to_owned(),
                h["trigger"].as_str().unwrap_or_default().to_owned(),
                h["details"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits until the history holds `count` entries entering `status` by
/// `trigger`; returns the history.
async fn wait_history(
    d: &Daemon,
    server: &str,
    status: &str,
    trigger: &str,
    count: usize,
) -> Vec<(String, String, String)> {
    let end = Instant::now() + CHANGE;
    loop {
        let seen = history(d, server).await;
        let matching = seen
            .iter()
            .filter(|(s, t, _)| s == status && t == trigger)
            .count();
        if matching >= count {
            return seen;
        }
        assert!(
            Instant::now() < end,
            "{server} never entered {status} by {trigger} ({count}×) within {CHANGE:?}: {seen:#?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

async fn wait_lines(path: &Path, at_least: usize) {
    let end = Instant::now() + CHANGE;
    while lines(path) < at_least {
        assert!(
            Instant::now() < end,
            "{} never reached {at_least} lines",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn server(d: &Daemon, name: &str) -> Value {
    common::get_json(&d.api(&format!("/api/v1/aggregator/servers/{name}"))).await
}

/// Probes left unanswered: two make the server DEGRADED and an answer
/// brings it back; three in a row make it ERROR, and it is reconnected.
async fn unanswered_probes(era: &[&str]) {
    let temp = tempfile::tempdir().unwrap();
    let control = temp.path().join("control");
    let pings = temp.path().join("pings");
    let d = Daemon::start_in(&temp.path().join("data"), &FAST_CHECKS);
    let mut args = vec![
        "--ping-control",
        path_arg(&control),
        "--ping-log",
        path_arg(&pings),
    ];
    args.extend_from_slice(era);
    register(&d, fixture("fx", &args)).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;
    // An idle server is probed.
    wait_lines(&pings, 2).await;

    std::fs::write(&control, "stall 2").unwrap();
    let seen = wait_history(&d, "fx", "CONNECTED", "health_recovered", 1).await;
    let degraded = seen
        .iter()
        .position(|(s, t, _)| s == "DEGRADED" && t == "health_degraded")
        .unwrap_or_else(|| panic!("DEGRADED before the recovery: {seen:#?}"));
    assert!(
        seen[degraded].2.contains("2 health checks failed"),
        "{seen:#?}"
    );
    assert!(
        !seen.iter().any(|(s, _, _)| s == "ERROR"),
        "two failures never make ERROR: {seen:#?}"
    );

    std::fs::write(&control, "stall").unwrap();
    let seen = wait_history(&d, "fx", "ERROR", "health_failed", 1).await;
    let failed = seen.iter().find(|(s, _, _)| s == "ERROR").unwrap();
    assert!(failed.2.contains("3 health checks failed"), "{failed:?}");
    std::fs::remove_file(&control).unwrap();
    wait_history(&d, "fx", "CONNECTED", "connect_succeeded", 2).await;
    wait_status(&d, "fx", "CONNECTED", UP).await;

    let shown = server(&d, "fx").await;
    let health = &shown["health"];
    assert!(health["checks_failed"].as_u64().unwrap() >= 5, "{shown:#}");
    assert!(health["checks_passed"].as_u64().unwrap() >= 2, "{shown:#}");
    assert!(
        health["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("within")),
        "{shown:#}"
    );
    assert!(shown["last_health_check"].is_string(), "{shown:#}");
    let uptime = health["uptime_ratio"].as_f64().unwrap();
    assert!(uptime > 0.0 && uptime < 1.0, "{shown:#}");

    // The CLI shows the same: a HEALTH column, and the details.
    let data = temp.path().join("data");
    let (code, listed, stderr) = common::cli(&data, &["servers", "list"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        listed.contains("HEALTH") && listed.contains("% up"),
        "{listed}"
    );
    let (code, details, stderr) = common::cli(&data, &["servers", "show", "fx"]);
    assert_eq!(code, 0, "{stderr}");
    for line in ["response_time", "health_checks", "uptime", "last_error"] {
        assert!(details.contains(line), "{line} missing from {details}");
    }

    // The health monitor's changes are in the audit trail, as its own.
    let audit: Vec<Value> = common::get_json(
        &d.api("/api/v1/aggregator/audit?server=fx&action=status&actor=health-monitor&limit=100"),
    )
    .await;
    let details: Vec<&str> = audit
        .iter()
        .map(|e| e["details"].as_str().unwrap_or_default())
        .collect();
    for change in [
        "CONNECTED -> DEGRADED (health_degraded)",
        "DEGRADED -> CONNECTED (health_recovered)",
        "-> ERROR (health_failed)",
    ] {
        assert!(
            details.iter().any(|d| d.contains(change)),
            "{change} missing from {details:#?}"
        );
    }
    assert!(audit.iter().all(|e| e["actor"] == "health-monitor"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_pings_degrade_then_fail_a_2025_server() {
    unanswered_probes(&["--legacy-only"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_discover_probes_degrade_then_fail_a_2026_server() {
    unanswered_probes(&[]).await;
}

/// An HTTP endpoint served by the test (a health URL, an OTLP collector):
/// answers with the status set, counts its hits and keeps the bodies.
struct HealthUrl {
    status: Arc<AtomicU16>,
    hits: Arc<AtomicUsize>,
    bodies: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    url: String,
}

impl HealthUrl {
    async fn start() -> HealthUrl {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/health", listener.local_addr().unwrap());
        let status = Arc::new(AtomicU16::new(200));
        let hits = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (answer, count, kept) = (Arc::clone(&status), Arc::clone(&hits), Arc::clone(&bodies));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (answer, count, kept) =
                    (Arc::clone(&answer), Arc::clone(&count), Arc::clone(&kept));
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 8192];
                    let head_end = loop {
                        if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                            break end + 4;
                        }
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&request[..head_end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while request.len() < head_end + length {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    if let Ok(mut kept) = kept.lock() {
                        kept.push(request[head_end..].to_vec());
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let status = answer.load(Ordering::SeqCst);
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        HealthUrl {
            status,
            hits,
            bodies,
            url,
        }
    }

    async fn wait_hits(&self, more_than: usize) {
        let end = Instant::now() + CHANGE;
        while self.hits.load(Ordering::SeqCst) <= more_than {
            assert!(Instant::now() < end, "the health URL was not checked");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_url_decides_instead_of_pings_and_a_404_only_warns() {
    let temp = tempfile::tempdir().unwrap();
    let pings = temp.path().join("pings");
    let url = HealthUrl::start().await;
    let d = Daemon::start_in(&temp.path().join("data"), &FAST_CHECKS);
    let mut body = fixture("web", &["--ping-log", path_arg(&pings)]);
    body["health_check_url"] = json!(url.url);
    register(&d, body).await;
    wait_status(&d, "web", "CONNECTED", UP).await;
    url.wait_hits(2).await;
    assert_eq!(lines(&pings), 0, "the health URL replaces the ping");

    // 404: the URL is wrong, not the server down.
    url.status.store(404, Ordering::SeqCst);
    let end = Instant::now() + CHANGE;
    loop {
        let shown = server(&d, "web").await;
        if shown["health"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("404"))
        {
            break;
        }
        assert!(Instant::now() < end, "no 404 warning: {shown:#}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let hits = url.hits.load(Ordering::SeqCst);
    url.wait_hits(hits + 3).await;
    let shown = server(&d, "web").await;
    assert_eq!(shown["status"], "CONNECTED", "{shown:#}");
    assert_eq!(shown["health"]["consecutive_failures"], 0, "{shown:#}");
    assert_eq!(shown["health"]["checks_failed"], 0, "{shown:#}");

    // 500: a failure; three make ERROR (through DEGRADED).
    url.status.store(500, Ordering::SeqCst);
    let seen = wait_history(&d, "web", "ERROR", "health_failed", 1).await;
    assert!(
        seen.iter()
            .any(|(s, _, details)| s == "DEGRADED" && details.contains("500")),
        "{seen:#?}"
    );
    url.status.store(200, Ordering::SeqCst);
    wait_history(&d, "web", "CONNECTED", "connect_succeeded", 2).await;
    wait_status(&d, "web", "CONNECTED", UP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_steady_traffic_is_never_pinged() {
    let temp = tempfile::tempdir().unwrap();
    let pings = temp.path().join("pings");
    let d = Daemon::start_in(&temp.path().join("data"), &["--health-interval", "1"]);
    register(
        &d,
        fixture("busy", &["--legacy-only", "--ping-log", path_arg(&pings)]),
    )
    .await;
    wait_status(&d, "busy", "CONNECTED", UP).await;
    let (status, _) = rest_call(&d, "busy__echo", json!({"n": 0})).await;
    assert_eq!(status, 200);
    let before = lines(&pings);
    let passed_before = server(&d, "busy").await["health"]["checks_passed"]
        .as_u64()
        .unwrap_or(0);
    // Calls back to back for well over three intervals.
    let end = Instant::now() + Duration::from_millis(3500);
    let mut calls = 0;
    while Instant::now() < end && calls < 100_000 {
        let (status, _) = rest_call(&d, "busy__echo", json!({"n": calls})).await;
        assert_eq!(status, 200);
        calls += 1;
    }
    assert_eq!(
        lines(&pings),
        before,
        "a server answering {calls} calls was pinged"
    );
    let passed = server(&d, "busy").await["health"]["checks_passed"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        passed >= passed_before + 2,
        "its answers count as passed checks ({passed_before} -> {passed})"
    );
    // Idle, it is pinged: the count above could have moved.
    wait_lines(&pings, before + 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_calls_degrade_a_server_and_its_results_say_so() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &FAST_CHECKS);
    register(&d, fixture("flaky", &[])).await;
    wait_status(&d, "flaky", "CONNECTED", UP).await;
    for _ in 0..15 {
        let (status, body) = rest_call(&d, "flaky__fail", json!({})).await;
        assert_eq!(status, 502, "{body}");
    }
    let seen = wait_history(&d, "flaky", "DEGRADED", "health_degraded", 1).await;
    assert!(
        seen.iter()
            .any(|(_, _, details)| details.contains("calls failed")),
        "{seen:#?}"
    );
    // While DEGRADED its tools are served, with a warning.
    let mut warned = None;
    for n in 0..10 {
        let (status, body) = rest_call(&d, "flaky__echo", json!({"n": n})).await;
        assert_eq!(status, 200, "a DEGRADED server's tools are served: {body}");
        if let Some(warning) = body["_meta"]["io.github.mcp-aggregator/warning"].as_str() {
            warned = Some(warning.to_owned());
            break;
        }
    }
    let warning = warned.expect("a result of a DEGRADED server carries a warning");
    assert!(
        warning.contains("flaky") && warning.contains("DEGRADED"),
        "{warning}"
    );
    // Good calls push the failures out of the window: back to CONNECTED.
    let end = Instant::now() + CHANGE;
    while server(&d, "flaky").await["status"] != "CONNECTED" {
        assert!(Instant::now() < end, "never recovered");
        let (status, _) = rest_call(&d, "flaky__echo", json!({})).await;
        assert_eq!(status, 200);
    }
    let seen = history(&d, "flaky").await;
    assert!(
        seen.iter()
            .any(|(s, t, _)| s == "CONNECTED" && t == "health_recovered"),
        "{seen:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_far_slower_than_usual_degrade_a_server() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &FAST_CHECKS);
    register(&d, fixture("slowing", &[])).await;
    wait_status(&d, "slowing", "CONNECTED", UP).await;
    // Its usual latency: fast calls, then a check that takes them in.
    for n in 0..10 {
        let (status, _) = rest_call(&d, "slowing__echo", json!({"n": n})).await;
        assert_eq!(status, 200);
    }
    let passed = server(&d, "slowing").await["health"]["checks_passed"]
        .as_u64()
        .unwrap_or(0);
    let end = Instant::now() + CHANGE;
    while server(&d, "slowing").await["health"]["checks_passed"]
        .as_u64()
        .unwrap_or(0)
        <= passed
    {
        assert!(Instant::now() < end, "no check after the calls");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Now its calls take over a second each.
    let slow = (0..10).map(|_| rest_call(&d, "slowing__sleep", json!({"ms": 1200})));
    for (status, body) in futures_util::future::join_all(slow).await {
        assert_eq!(status, 200, "{body}");
    }
    let seen = wait_history(&d, "slowing", "DEGRADED", "health_degraded", 1).await;
    assert!(
        seen.iter()
            .any(|(_, _, details)| details.contains("calls slowed down")),
        "{seen:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_server_that_cannot_start_fail_fast() {
    let temp = tempfile::tempdir().unwrap();
    let refuse = temp.path().join("refuse");
    let d = Daemon::start_in(&temp.path().join("data"), &["--breaker-cooldown", "600"]);
    register(
        &d,
        fixture("dead", &["--refuse-start-if", path_arg(&refuse)]),
    )
    .await;
    wait_status(&d, "dead", "CONNECTED", UP).await;
    std::fs::write(&refuse, "").unwrap();
    let (status, _) = rest_call(&d, "dead__crash", json!({})).await;
    assert_eq!(status, 503, "the server died during the call");
    // Its restart fails: the breaker opens.
    wait_history(&d, "dead", "ERROR", "connect_failed", 1).await;

    let attempts = |seen: &[(String, String, String)]| {
        seen.iter().filter(|(s, _, _)| s == "CONNECTING").count()
    };
    let before = attempts(&history(&d, "dead").await);
    for _ in 0..10 {
        let (status, body) = rest_call(&d, "dead__echo", json!({})).await;
        assert_eq!(status, 503, "{body}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("dead") && detail.contains("ERROR"),
            "the result names the server and its status: {body}"
        );
        assert_eq!(body["server"]["status"], "ERROR", "{body}");
    }
    let after = attempts(&history(&d, "dead").await);
    assert!(
        after - before < 10,
        "each call asked the dead server to reconnect ({before} -> {after} attempts)"
    );

    // Back: an admin's connect goes through at once.
    std::fs::remove_file(&refuse).unwrap();
    let response = http()
        .post(d.api("/api/v1/aggregator/servers/dead/connect"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success() || response.status() == 409);
    wait_status(&d, "dead", "CONNECTED", UP).await;
    let (status, body) = rest_call(&d, "dead__echo", json!({"back": true})).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_a_server_that_is_reconnecting() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &[]);
    register(&d, fixture("slow", &["--start-delay-ms", "1500"])).await;
    wait_status(&d, "slow", "CONNECTED", UP).await;
    let (status, _) = rest_call(&d, "slow__crash", json!({})).await;
    assert_eq!(status, 503);
    // It takes 1.5 s to start again: the call waits instead of failing.
    let (status, body) = rest_call(&d, "slow__echo", json!({"after": "crash"})).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("crash")),
        "{body}"
    );
    let seen = history(&d, "slow").await;
    assert!(
        seen.iter().filter(|(s, _, _)| s == "CONNECTING").count() >= 2,
        "{seen:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_right_after_registration_waits_for_the_first_connect() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &[]);
    // Registered after start-up: only the registration's connect is in
    // flight, and the server takes 1.5 s before it answers anything.
    register(&d, fixture("late", &["--start-delay-ms", "1500"])).await;
    let (status, body) = rest_call(&d, "late__echo", json!({"first": true})).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_does_not_wait_for_a_server_registered_while_it_connects() {
    let temp = tempfile::tempdir().unwrap();
    // Lists wait for auto-connect servers at start-up (none here) as long
    // as an hour; a server registered later must not hold them up.
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &["--startup-wait", "3600", "--connect-timeout", "3600"],
    );
    // Still silent when the list's deadline (UP) has passed; a minute at
    // most, should the test fail before it stops the daemon.
    register(&d, fixture("stuck", &["--start-delay-ms", "60000"])).await;
    let session = common::mcp_session_with(&d, json!({})).await;
    let listed = tokio::time::timeout(
        UP,
        http()
            .post(d.api("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .send(),
    )
    .await
    .expect("tools/list answered while the server is still connecting")
    .unwrap();
    assert_eq!(listed.status(), 200);
    let body = listed.text().await.unwrap();
    assert!(body.contains("search_tools"), "{body}");
    assert!(!body.contains("stuck__"), "{body}");
    let server: Value = common::get_json(&d.api("/api/v1/aggregator/servers/stuck")).await;
    assert_eq!(server["status"], "CONNECTING", "{server}");
    // Stopped, the daemon ends the server it is still waiting for.
    let mut d = d;
    assert!(d.terminate(UP).is_some());
}

/// The values of the samples named `name` whose labels include `labels`.
fn values<'a>(
    scrape: &'a prometheus_parse::Scrape,
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = &'a prometheus_parse::Value> + 'a {
    scrape
        .samples
        .iter()
        .filter(move |s| s.metric == name)
        .filter(move |s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| &s.value)
}

/// A counter's or gauge's value.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    values(scrape, name, labels).find_map(|value| match value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => Some(*v),
        _ => None,
    })
}

/// How many observations a histogram holds.
fn histogram_count(
    scrape: &prometheus_parse::Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    values(scrape, name, labels).find_map(|value| match value {
        prometheus_parse::Value::Histogram(buckets) => buckets.last().map(|b| b.count),
        _ => None,
    })
}

async fn scrape(d: &Daemon, token: Option<&str>) -> prometheus_parse::Scrape {
    let mut request = http().get(d.api("/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.contains("openmetrics-text"), "{content_type}");
    let text = response.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"));
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("the Prometheus parser reads /metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_exposed_protected_and_moving() {
    let temp = tempfile::tempdir().unwrap();
    let token = "metrics-token-0123456789";
    let d = Daemon::start_with_env(
        &temp.path().join("data"),
        &["--require-token", "--health-interval", "0.3"],
        &[("MCP_AGGREGATOR_TOKEN", token)],
    );
    let unauthorised = http().get(d.api("/metrics")).send().await.unwrap();
    assert_eq!(unauthorised.status(), 401, "protected like every route");

    let authed = |path: &str| http().post(d.api(path)).bearer_auth(token);
    let registered = authed("/api/v1/aggregator/servers")
        .json(&fixture("m", &[]))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 201);
    let call = |n: u32| {
        authed("/api/v1/tools/call")
            .json(&json!({"name": "m__echo", "arguments": {"n": n}}))
            .send()
    };
    // Its first call waits for it to connect.
    for n in 0..3 {
        assert_eq!(call(n).await.unwrap().status(), 200);
    }
    let first = scrape(&d, Some(token)).await;
    let server = [("server", "m")];
    let calls = sample(&first, "mcp_aggregator_calls_total", &server).expect("calls_total");
    assert!(calls >= 3.0, "{calls}");
    assert_eq!(
        sample(
            &first,
            "mcp_aggregator_server_status",
            &[("server", "m"), ("status", "CONNECTED")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &first,
            "mcp_aggregator_server_status",
            &[("server", "m"), ("status", "ERROR")]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&first, "mcp_aggregator_catalog_tools", &[]),
        Some((common::FIXED + 3) as f64)
    );
    assert!(sample(&first, "mcp_aggregator_process_child_processes", &[]).unwrap() >= 1.0);
    assert!(sample(&first, "mcp_aggregator_process_open_fds", &[]).unwrap() > 0.0);
    assert!(sample(&first, "mcp_aggregator_process_resident_memory_bytes", &[]).unwrap() > 0.0);
    for name in [
        "mcp_aggregator_call_errors_total",
        "mcp_aggregator_notifications_dropped_total",
        "mcp_aggregator_resource_cache_hits_total",
        "mcp_aggregator_resource_cache_misses_total",
        "mcp_aggregator_resource_cache_evictions_total",
        "mcp_aggregator_index_documents",
    ] {
        assert!(
            first.samples.iter().any(|s| s.metric == name),
            "{name} missing from {:#?}",
            first.samples.iter().map(|s| &s.metric).collect::<Vec<_>>()
        );
    }
    assert!(
        histogram_count(&first, "mcp_aggregator_call_duration_seconds", &server).unwrap() >= 3.0
    );
    let searches_before =
        histogram_count(&first, "mcp_aggregator_search_duration_seconds", &[]).unwrap_or(0.0);

    for n in 3..5 {
        assert_eq!(call(n).await.unwrap().status(), 200);
    }
    let searched = authed("/api/v1/search")
        .json(&json!({"query": "echo the arguments"}))
        .send()
        .await
        .unwrap();
    assert_eq!(searched.status(), 200);
    // An idle server is pinged: the health-check histogram fills.
    let end = Instant::now() + CHANGE;
    let second = loop {
        let second = scrape(&d, Some(token)).await;
        if histogram_count(
            &second,
            "mcp_aggregator_health_check_duration_seconds",
            &server,
        )
        .is_some_and(|n| n >= 1.0)
        {
            break second;
        }
        assert!(Instant::now() < end, "no health check was measured");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        sample(&second, "mcp_aggregator_calls_total", &server).unwrap() >= calls + 2.0,
        "calls_total moves"
    );
    assert!(
        histogram_count(&second, "mcp_aggregator_search_duration_seconds", &[]).unwrap()
            > searches_before,
        "searches are timed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_trail_filters_by_server_action_actor_result_and_time() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let d = Daemon::start_in(&data, &[]);
    let started = chrono::Utc::now();
    register(&d, fixture("a", &[])).await;
    register(
        &d,
        json!({"name": "b", "transport_type": "STDIO", "auto_connect": false,
        "connection_config": {"command": FIXTURE}}),
    )
    .await;
    wait_status(&d, "a", "CONNECTED", UP).await;
    // A refused registration is audited as an error.
    let refused = http()
        .post(d.api("/api/v1/aggregator/servers"))
        .json(&fixture("a", &[]))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 409);
    // The CLI acts as itself.
    let (code, _, stderr) = common::cli(&data, &["servers", "connect", "b"]);
    assert_eq!(code, 0, "{stderr}");
    wait_status(&d, "b", "CONNECTED", UP).await;
    let (code, _, stderr) = common::cli(&data, &["servers", "disconnect", "a"]);
    assert_eq!(code, 0, "{stderr}");
    wait_status(&d, "a", "DISCONNECTED", UP).await;
    let (code, _, stderr) = common::cli(&data, &["servers", "remove", "b"]);
    assert_eq!(code, 0, "{stderr}");

    let audit = |query: &str| {
        let url = d.api(&format!("/api/v1/aggregator/audit?{query}"));
        async move { common::get_json::<Vec<Value>>(&url).await }
    };
    let a_status = audit("server=a&action=status").await;
    let changes: Vec<&str> = a_status
        .iter()
        .rev()
        .map(|e| e["details"].as_str().unwrap_or_default())
        .collect();
    assert!(
        changes
            .iter()
            .any(|c| c.starts_with("CONNECTING -> CONNECTED (connect_succeeded)")),
        "{changes:#?}"
    );
    assert!(
        changes
            .last()
            .is_some_and(|c| c.starts_with("CONNECTED -> DISCONNECTED (disconnect)")),
        "{changes:#?}"
    );
    assert!(
        a_status
            .iter()
            .all(|e| e["server"] == "a" && e["action"] == "status")
    );

    let errors = audit("result=error").await;
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0]["action"], "register");
    assert_eq!(errors[0]["server"], "a");
    let oks = audit("result=ok&action=register").await;
    assert_eq!(oks.len(), 2, "{oks:#?}");

    let by_cli = audit("actor=cli").await;
    let actions: Vec<&str> = by_cli
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["remove", "disconnect", "connect"], "{by_cli:#?}");
    let removed = audit("action=remove").await;
    assert_eq!(removed.len(), 1, "{removed:#?}");
    assert_eq!(removed[0]["server"], "b");
    assert_eq!(removed[0]["result"], "ok");

    let since = urlencoding(&started.to_rfc3339());
    assert!(!audit(&format!("since={since}")).await.is_empty());
    assert!(audit(&format!("until={since}")).await.is_empty());
    let later = urlencoding(&(chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339());
    assert!(audit(&format!("since={later}")).await.is_empty());

    // A bad filter is a 422 with a detail.
    let bad = http()
        .get(d.api("/api/v1/aggregator/audit?result=maybe"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    let body: Value = bad.json().await.unwrap();
    assert!(body["detail"].is_string(), "{body}");

    // The CLI has the same filters.
    let (code, stdout, stderr) = common::cli(
        &data,
        &[
            "audit", "--server", "b", "--action", "status", "--since", "1h", "--json",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let entries: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert!(!entries.is_empty());
    assert!(
        entries
            .iter()
            .all(|e| e["server"] == "b" && e["action"] == "status")
    );
    let (code, stdout, _) = common::cli(&data, &["audit", "--result", "error"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("register") && stdout.contains("DETAILS"),
        "{stdout}"
    );
    let (code, _, stderr) = common::cli(&data, &["audit", "--since", "yesterday"]);
    assert_eq!(code, 2, "a bad time is a usage error");
    assert!(stderr.contains("RFC 3339"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_traced_over_otlp_when_an_endpoint_is_set() {
    let temp = tempfile::tempdir().unwrap();
    let collector = HealthUrl::start().await;
    let endpoint = collector.url.trim_end_matches("/health").to_owned();
    let d = Daemon::start_with_env(
        &temp.path().join("data"),
        &["--otlp-endpoint", &endpoint],
        // Export every 100 ms instead of 5 s.
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    register(&d, fixture("traced", &[])).await;
    wait_status(&d, "traced", "CONNECTED", UP).await;
    let (status, body) = rest_call(&d, "traced__echo", json!({"value": "t"})).await;
    assert_eq!(status, 200, "{body}");

    // The spans of that call: REST front door -> router -> server request.
    let end = Instant::now() + CHANGE;
    let spans = loop {
        let spans: Vec<Value> = collector
            .bodies
            .lock()
            .unwrap()
            .iter()
            .filter_map(|body| serde_json::from_slice::<Value>(body).ok())
            .flat_map(|export| {
                let mut spans = Vec::new();
                for resource in export["resourceSpans"].as_array().into_iter().flatten() {
                    assert!(
                        resource["resource"]["attributes"]
                            .to_string()
                            .contains("mcp-aggregator"),
                        "the service is named: {resource}"
                    );
                    for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                        spans.extend(scope["spans"].as_array().into_iter().flatten().cloned());
                    }
                }
                spans
            })
            .collect();
        if spans.iter().any(|s| s["name"] == "rest tools/call") {
            break spans;
        }
        assert!(
            Instant::now() < end,
            "no trace of the call arrived: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let named = |name: &str| {
        spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} span in {spans:#?}"))
    };
    let (front, route, request) = (
        named("rest tools/call"),
        named("route"),
        spans
            .iter()
            .find(|s| s["name"] == "server request" && s["traceId"] == named("route")["traceId"])
            .unwrap_or_else(|| panic!("no server request in the call's trace: {spans:#?}")),
    );
    assert_eq!(route["parentSpanId"], front["spanId"], "{spans:#?}");
    assert_eq!(request["parentSpanId"], route["spanId"], "{spans:#?}");
    assert_eq!(front["traceId"], request["traceId"]);
}

fn urlencoding(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
