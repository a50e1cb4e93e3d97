//! Figures for sessions and discovery: connect + discover a 1,000-tool stdio
//! server (one page, and 50 per page), time until 10 servers of 100 tools are
//! all CONNECTED with their tools stored, and the daemon's RSS then.
//!
//! Run: `cargo bench --features fixture --bench sessions` (release build of
//! the daemon and of the rmcp fixture server). Prints a Markdown table.

use serde_json::json;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

mod common;

use common::{free_port, ms, rss_kib, stop};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const RUNS: usize = 5;

fn main() {
    if !common::is_bench_run("cargo bench --features fixture --bench sessions") {
        return;
    }
    let rt = common::bench_runtime();
    rt.block_on(async {
        let one_page = median(connect_big(&[]).await);
        let paged = median(connect_big(&["--page-size", "50"]).await);
        let (ten, rss) = ten_servers().await;
        println!("| figure | value |");
        println!("| --- | --- |");
        println!(
            "| connect + discover 1,000 tools, one page (median of {RUNS}) | {:.1} ms |",
            ms(one_page)
        );
        println!(
            "| connect + discover 1,000 tools, 50 per page (median of {RUNS}) | {:.1} ms |",
            ms(paged)
        );
        println!(
            "| 10 servers x 100 tools all CONNECTED, tools stored (median of {RUNS}) | {:.1} ms |",
            ms(ten)
        );
        println!(
            "| daemon RSS with those 10 connected | {:.1} MiB |",
            rss as f64 / 1024.0
        );
    });
}

async fn connect_big(extra: &[&str]) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let temp = tempfile::tempdir().expect("temp");
        let (mut daemon, base) = start(temp.path()).await;
        let mut args = vec!["--tools", "1000"];
        args.extend_from_slice(extra);
        register(&base, "big", &args).await;
        let began = Instant::now();
        post(&format!("{base}/api/v1/aggregator/servers/big/connect")).await;
        wait_tools(&base, "big", 1007).await;
        times.push(began.elapsed());
        stop(&mut daemon);
    }
    times
}

async fn ten_servers() -> (Duration, u64) {
    let mut times = Vec::new();
    let mut rss = 0;
    for _ in 0..RUNS {
        let temp = tempfile::tempdir().expect("temp");
        let (mut daemon, base) = start(temp.path()).await;
        for i in 0..10 {
            register(&base, &format!("s{i}"), &["--tools", "100"]).await;
        }
        let began = Instant::now();
        for i in 0..10 {
            post(&format!("{base}/api/v1/aggregator/servers/s{i}/connect")).await;
        }
        for i in 0..10 {
            wait_tools(&base, &format!("s{i}"), 107).await;
        }
        times.push(began.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
        rss = rss_kib(daemon.id());
        stop(&mut daemon);
    }
    (median(times), rss)
}

async fn start(data_dir: &Path) -> (Child, String) {
    let port = free_port();
    let child = common::start_daemon(data_dir, port).await;
    (child, format!("http://127.0.0.1:{port}"))
}

async fn register(base: &str, name: &str, args: &[&str]) {
    let body = json!({"name": name, "transport_type": "STDIO", "auto_connect": false,
        "connection_config": {"command": FIXTURE, "args": args}});
    let response = reqwest::Client::new()
        .post(format!("{base}/api/v1/aggregator/servers"))
        .json(&body)
        .send()
        .await
        .expect("register");
    assert_eq!(response.status(), 201);
}

async fn post(url: &str) {
    let response = reqwest::Client::new().post(url).send().await.expect("post");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
}

async fn wait_tools(base: &str, name: &str, count: u64) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let server = common::server_json(&client, base, name).await;
        if server["status"] == "CONNECTED" && server["tool_count"].as_u64() == Some(count) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} not ready: {server}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}
