//! Soak: the release daemon under mixed work for a long stretch (10 minutes
//! by default, `SOAK_SECONDS` to change): tool calls over REST and `/mcp`,
//! searches, disconnects and reconnects, registrations and removals, and
//! servers crashing mid-call. Every 30 s it samples the daemon's RSS, open
//! descriptors and live child processes; at the end it checks that every
//! acknowledged registration (and removal) is in the store after a restart,
//! and that no server process outlived the daemon.
//!
//! Run: `cargo bench --features fixture --bench soak`. Prints a Markdown
//! table for BENCHMARKS.md. Bounded in time and in operations.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::Child;
use std::time::{Duration, Instant};

mod common;

use common::{free_port, rss_kib, start_daemon as start, stop};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const SERVERS: usize = 4;
/// Registrations that come and go, at most this many at a time.
const EXTRA: usize = 12;
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
/// Hard cap on operations, whatever the duration.
const MAX_OPERATIONS: u64 = 5_000_000;

fn main() {
    if !common::is_bench_run("cargo bench --features fixture --bench soak") {
        return;
    }
    let seconds: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let rt = common::bench_runtime();
    rt.block_on(soak(Duration::from_secs(seconds)));
}

struct Sample {
    at: Duration,
    rss_kib: u64,
    /// Heap and other anonymous memory (RSS less the mapped files).
    anon_kib: u64,
    servers: usize,
    fds: usize,
    children: usize,
    operations: u64,
    failures: u64,
}

async fn soak(length: Duration) {
    let temp = tempfile::tempdir().expect("temp");
    let port = free_port();
    let mut daemon = start(temp.path(), port).await;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for i in 0..SERVERS {
        register(&http, &base, &format!("fx{i}")).await;
    }
    for i in 0..SERVERS {
        wait_connected(&http, &base, &format!("fx{i}")).await;
    }
    let session = mcp_session(&http, &base).await;

    let mut rng = 0x2026_1126_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let began = Instant::now();
    let mut samples = vec![sample(&daemon, began, SERVERS, 0, 0)];
    let mut next_sample = SAMPLE_EVERY;
    let (mut operations, mut failures) = (0u64, 0u64);
    let mut present: BTreeSet<String> = BTreeSet::new();
    let mut removed: BTreeSet<String> = BTreeSet::new();
    let mut extra = 0usize;
    while began.elapsed() < length && operations < MAX_OPERATIONS {
        let server = format!("fx{}", next() % SERVERS as u64);
        let roll = next() % 100;
        let ok = match roll {
            0..=39 => {
                let answer = post(
                    &http,
                    &format!("{base}/api/v1/tools/call"),
                    json!({"name": format!("{server}.echo"), "arguments": {"n": operations}}),
                )
                .await;
                answer.is_some_and(|(s, _)| s == 200 || s == 503)
            }
            40..=64 => {
                let response = http
                    .post(format!("{base}/mcp"))
                    .header("mcp-session-id", &session)
                    .json(&json!({"jsonrpc": "2.0", "id": operations, "method": "tools/call", "params": {"name": format!("{server}__echo"), "arguments": {"n": operations}}}))
                    .send()
                    .await;
                response.is_ok_and(|r| r.status() == 200)
            }
            65..=79 => post(
                &http,
                &format!("{base}/api/v1/search"),
                json!({"query": "echo the arguments back", "limit": 5}),
            )
            .await
            .is_some_and(|(s, _)| s == 200),
            80..=84 => {
                // Disconnect, then connect again.
                let a = post(
                    &http,
                    &format!("{base}/api/v1/aggregator/servers/{server}/disconnect"),
                    json!({}),
                )
                .await;
                let b = post(
                    &http,
                    &format!("{base}/api/v1/aggregator/servers/{server}/connect"),
                    json!({}),
                )
                .await;
                a.is_some() && b.is_some()
            }
            85..=89 => {
                // The server dies mid-call; the supervisor brings it back.
                post(
                    &http,
                    &format!("{base}/api/v1/tools/call"),
                    json!({"name": format!("{server}.crash"), "arguments": {}}),
                )
                .await
                .is_some()
            }
            // Registrations come and go; at most `EXTRA` at a time.
            90..=94 if present.len() < EXTRA => {
                extra += 1;
                let name = format!("extra{extra}");
                let body = json!({"name": name, "transport_type": "STDIO", "auto_connect": next() % 2 == 0,
                    "connection_config": {"command": FIXTURE, "args": ["--tools", "5"]}});
                match post(&http, &format!("{base}/api/v1/aggregator/servers"), body).await {
                    Some((201, _)) => {
                        present.insert(name);
                        true
                    }
                    _ => false,
                }
            }
            _ => match present.iter().next().cloned() {
                Some(name) => {
                    let response = http
                        .delete(format!("{base}/api/v1/aggregator/servers/{name}"))
                        .send()
                        .await;
                    if response.is_ok_and(|r| r.status() == 204) {
                        present.remove(&name);
                        removed.insert(name);
                        true
                    } else {
                        false
                    }
                }
                None => true,
            },
        };
        operations += 1;
        if !ok {
            failures += 1;
        }
        if began.elapsed() >= next_sample {
            samples.push(sample(
                &daemon,
                began,
                SERVERS + present.len(),
                operations,
                failures,
            ));
            next_sample += SAMPLE_EVERY;
        }
    }
    samples.push(sample(
        &daemon,
        began,
        SERVERS + present.len(),
        operations,
        failures,
    ));

    // Restart on the same data dir: every acknowledged write is there.
    stop(&mut daemon);
    let orphans_after_stop = fixture_processes();
    let mut daemon = start(temp.path(), port).await;
    let listed: Vec<Value> = http
        .get(format!("{base}/api/v1/aggregator/servers"))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let names: BTreeSet<String> = listed
        .iter()
        .filter_map(|s| s["name"].as_str().map(str::to_owned))
        .collect();
    let lost: Vec<&String> = present.iter().filter(|n| !names.contains(*n)).collect();
    let resurrected: Vec<&String> = removed.iter().filter(|n| names.contains(*n)).collect();
    stop(&mut daemon);

    println!(
        "| elapsed | RSS | of which anonymous | servers registered | open fds | child processes | operations | failed |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for s in &samples {
        println!(
            "| {:.0} s | {:.1} MiB | {:.1} MiB | {} | {} | {} | {} | {} |",
            s.at.as_secs_f64(),
            s.rss_kib as f64 / 1024.0,
            s.anon_kib as f64 / 1024.0,
            s.servers,
            s.fds,
            s.children,
            s.operations,
            s.failures
        );
    }
    println!();
    println!(
        "acknowledged registrations kept: {} of {}; removals kept: {} of {}; server processes left after SIGTERM: {}",
        present.len() - lost.len(),
        present.len(),
        removed.len() - resurrected.len(),
        removed.len(),
        orphans_after_stop
    );
    assert!(lost.is_empty(), "acknowledged registrations lost: {lost:?}");
    assert!(
        resurrected.is_empty(),
        "removed servers came back: {resurrected:?}"
    );
    assert_eq!(
        orphans_after_stop, 0,
        "server processes outlived the daemon"
    );
}

fn sample(
    daemon: &Child,
    began: Instant,
    servers: usize,
    operations: u64,
    failures: u64,
) -> Sample {
    let pid = daemon.id();
    let anon = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    Sample {
        at: began.elapsed(),
        rss_kib: rss_kib(pid),
        anon_kib: anon,
        servers,
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count()),
        children: children_of(pid),
        operations,
        failures,
    }
}

/// Live (not zombie) processes whose parent is `pid`.
fn children_of(pid: u32) -> usize {
    processes()
        .filter(|(_, ppid, state, _)| *ppid == pid && state != "Z")
        .count()
}

/// Live fixture-server processes anywhere.
fn fixture_processes() -> usize {
    processes()
        .filter(|(_, _, state, cmdline)| state != "Z" && cmdline.starts_with(FIXTURE))
        .count()
}

/// (pid, parent pid, state, command line) of every process.
fn processes() -> impl Iterator<Item = (u32, u32, String, String)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let mut fields = stat.rsplit(')').next()?.split_whitespace();
            let state = fields.next()?.to_owned();
            let ppid = fields.next()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            Some((pid, ppid, state, cmdline))
        })
}

async fn register(http: &reqwest::Client, base: &str, name: &str) {
    let body = json!({"name": name, "transport_type": "STDIO", "auto_connect": true,
        "connection_config": {"command": FIXTURE, "args": ["--tools", "20"]}});
    let status = post(http, &format!("{base}/api/v1/aggregator/servers"), body)
        .await
        .map(|(s, _)| s);
    assert_eq!(status, Some(201), "register {name}");
}

async fn wait_connected(http: &reqwest::Client, base: &str, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let server = common::server_json(http, base, name).await;
        if server["status"] == "CONNECTED" {
            return;
        }
        assert!(Instant::now() < deadline, "{name} not connected: {server}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn mcp_session(http: &reqwest::Client, base: &str) -> String {
    let response = http
        .post(format!("{base}/mcp"))
        .json(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "soak", "version": "0"}}}))
        .send()
        .await
        .expect("initialize");
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .expect("session id")
        .to_owned();
    http.post(format!("{base}/mcp"))
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .expect("initialized");
    session
}

/// POSTs JSON; the status and body, or None when the request failed.
async fn post(http: &reqwest::Client, url: &str, body: Value) -> Option<(u16, Value)> {
    let response = http
        .post(url)
        .json(&body)
        .timeout(Duration::from_secs(90))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.unwrap_or(Value::Null)))
}
