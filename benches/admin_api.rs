//! End-to-end figures for the core (issue: store, registry, admin API):
//! release binary size, start-up until `/healthz` answers, idle RSS, and
//! `POST /api/v1/aggregator/servers` latency over 1,000 registrations, and
//! what the request guard costs per request.
//!
//! Run: `cargo bench --bench admin_api` (builds the release binary). The
//! output is a Markdown table for BENCHMARKS.md.

use serde_json::json;
use std::time::{Duration, Instant};

mod common;

use common::{BIN, free_port, ms, rss_kib, spawn_daemon as spawn, stop, wait_healthz};

const STARTS: usize = 10;
const REGISTRATIONS: usize = 1000;

fn main() {
    // `cargo test --all-targets` runs bench targets too, without `--bench`;
    // the figures only mean something from the release build.
    if !common::is_bench_run("cargo bench --bench admin_api") {
        return;
    }
    let guard_ns = guard_cost_ns();
    let rt = common::bench_runtime();
    let size = std::fs::metadata(BIN).expect("binary").len();

    let mut start_times = Vec::new();
    let mut idle_rss = Vec::new();
    for _ in 0..STARTS {
        let temp = tempfile::tempdir().expect("temp");
        let port = free_port();
        let began = Instant::now();
        let mut child = spawn(temp.path(), port);
        rt.block_on(wait_healthz(port));
        start_times.push(began.elapsed());
        // Let the runtime settle before reading idle memory.
        std::thread::sleep(Duration::from_millis(300));
        idle_rss.push(rss_kib(child.id()));
        stop(&mut child);
    }

    let temp = tempfile::tempdir().expect("temp");
    let port = free_port();
    let mut child = spawn(temp.path(), port);
    rt.block_on(wait_healthz(port));
    let url = format!("http://127.0.0.1:{port}/api/v1/aggregator/servers");
    let client = reqwest::Client::new();
    let mut latencies = Vec::with_capacity(REGISTRATIONS);
    rt.block_on(async {
        for i in 0..REGISTRATIONS {
            let body = json!({
                "name": format!("bench-{i:04}"),
                "transport_type": "STDIO",
                "connection_config": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"TOKEN": "secret"}},
                "auto_connect": false
            });
            let began = Instant::now();
            let response = client.post(&url).json(&body).send().await.expect("post");
            assert_eq!(response.status(), 201);
            latencies.push(began.elapsed());
        }
    });
    let rss_after = rss_kib(child.id());
    let list_began = Instant::now();
    let listed: Vec<serde_json::Value> = rt.block_on(async {
        client
            .get(&url)
            .send()
            .await
            .expect("list")
            .json()
            .await
            .expect("json")
    });
    let list_time = list_began.elapsed();
    assert_eq!(listed.len(), REGISTRATIONS);
    stop(&mut child);

    start_times.sort();
    idle_rss.sort();
    latencies.sort();
    println!("| figure | value |");
    println!("| --- | --- |");
    println!(
        "| release binary size | {:.1} MiB |",
        size as f64 / 1048576.0
    );
    println!(
        "| start to `/healthz` answering (median of {STARTS}) | {:.1} ms |",
        ms(start_times[STARTS / 2])
    );
    println!(
        "| idle RSS (median of {STARTS}) | {:.1} MiB |",
        idle_rss[STARTS / 2] as f64 / 1024.0
    );
    println!(
        "| `POST /servers` p50 ({REGISTRATIONS} sequential) | {:.2} ms |",
        ms(percentile(&latencies, 0.50))
    );
    println!(
        "| `POST /servers` p99 | {:.2} ms |",
        ms(percentile(&latencies, 0.99))
    );
    println!(
        "| `POST /servers` max | {:.2} ms |",
        ms(*latencies.last().expect("latencies"))
    );
    println!(
        "| RSS after {REGISTRATIONS} registrations | {:.1} MiB |",
        rss_after as f64 / 1024.0
    );
    println!(
        "| `GET /servers` with {REGISTRATIONS} servers | {:.2} ms |",
        ms(list_time)
    );
    println!("| request guard (Host, Origin, content type), per request | {guard_ns:.0} ns |");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// What the request guard costs per request (Host, Origin, content type of
/// a JSON POST), median of 5 rounds of 1,000,000 checks.
fn guard_cost_ns() -> f64 {
    use axum::http::{HeaderMap, HeaderValue, Method};
    let policy = mcp_aggregator::api::guard::HostPolicy::new(["box.lan".to_owned()]);
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("127.0.0.1:8765"));
    headers.insert("origin", HeaderValue::from_static("http://localhost:6274"));
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("content-length", HeaderValue::from_static("120"));
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let began = Instant::now();
        for _ in 0..1_000_000 {
            assert!(
                std::hint::black_box(&policy)
                    .check(&Method::POST, std::hint::black_box(&headers))
                    .is_ok()
            );
        }
        rounds.push(began.elapsed().as_nanos() as f64 / 1_000_000.0);
    }
    rounds.sort_by(f64::total_cmp);
    rounds[2]
}
