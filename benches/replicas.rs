//! Replicas behind a load balancer (issue 34): calls/s and latency through
//! 1, 2 and 3 `serve --store postgres://…` replicas on one PostgreSQL (the
//! distribution's server in a temporary directory), behind a round-robin
//! TCP balancer this bench runs (each client connection goes to the next
//! replica). Behind every replica: our raw echo server (no SDK), registered
//! once on the first replica and connected by each. The clients are
//! 2026-07-28 clients over HTTP (no session: any replica serves any
//! request), 32 of them with a connection each; and one sequential client.
//! Also counted: the PostgreSQL transactions the run cost per call, which
//! is the figure that says whether the database is on the hot path.
//!
//! Run: `cargo bench --features fixture,postgres --bench replicas`
//! (release builds; `scripts/setup.sh` installs PostgreSQL). Prints a
//! Markdown table. Every process runs on this machine's cores: the
//! balancer, the clients, each replica and its echo server share them.

use serde_json::{Value, json};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::{free_port, spawn_daemon_with, stop, wait_healthz};
use mcp_aggregator::store::postgres::test_cluster::TestCluster;

const ECHO: &str = env!("CARGO_BIN_EXE_mcp-echo-server");
const CLIENTS: usize = 32;
const CALLS_PER_ROUND: usize = 20_000;
const ROUNDS: usize = 3;
const SEQUENTIAL: usize = 3_000;

fn main() {
    if !common::is_bench_run("cargo bench --features fixture,postgres --bench replicas") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    mcp_aggregator::http_client::init();
    println!(
        "| replicas | calls/s, {CLIENTS} clients (median of {ROUNDS}) | p50 / p99 under load | sequential p50 / p99 | PostgreSQL transactions per 1,000 calls |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for replicas in 1..=3 {
        println!("{}", runtime.block_on(measure(replicas, true)));
    }
    println!("{}", runtime.block_on(measure(1, false)));
}

/// `count` replicas on one PostgreSQL; with `shared` off, one daemon on
/// its own file (the baseline).
async fn measure(count: usize, shared: bool) -> String {
    let cluster = TestCluster::start().expect("a PostgreSQL for the bench");
    let url = cluster.url();
    let store_flags = |id: String| -> Vec<String> {
        let mut flags = vec!["--search".to_owned(), "keyword".to_owned()];
        if shared {
            flags.extend([
                "--store".to_owned(),
                url.clone(),
                "--replica-id".to_owned(),
                id,
            ]);
        }
        flags
    };
    let dirs: Vec<tempfile::TempDir> = (0..count).map(|_| tempfile::tempdir().unwrap()).collect();
    let ports: Vec<u16> = (0..count).map(|_| free_port()).collect();
    let mut children: Vec<Child> = Vec::new();
    for (index, (dir, port)) in dirs.iter().zip(&ports).enumerate() {
        if index == 1 {
            for other in &dirs[1..] {
                let key = "secret.key";
                let _ = std::fs::copy(dirs[0].path().join(key), other.path().join(key));
            }
        }
        let flags = store_flags(format!("r{}", index + 1));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        children.push(spawn_daemon_with(dir.path(), *port, &flags));
        wait_healthz(*port).await;
    }
    let client = reqwest::Client::new();
    let registered = client
        .post(format!(
            "http://127.0.0.1:{}/api/v1/aggregator/servers",
            ports[0]
        ))
        .json(&json!({"name": "s0", "transport_type": "STDIO", "connection_config": {"command": ECHO}}))
        .send()
        .await
        .expect("register");
    assert_eq!(registered.status(), 201);
    for port in &ports {
        wait_routed(*port).await;
    }
    let balancer = Balancer::start(ports.clone()).await;
    let mcp = format!("http://{}/mcp", balancer.address);

    let commits_before = commits(&url).await;
    let mut rates = Vec::new();
    let mut loaded = Vec::new();
    let mut calls = 0;
    for _ in 0..ROUNDS {
        let (rate, mut times) = concurrent(&mcp).await;
        rates.push(rate);
        loaded.append(&mut times);
        calls += CALLS_PER_ROUND;
    }
    let mut sequential_times = sequential(&mcp).await;
    calls += SEQUENTIAL;
    // The statistics reach pg_stat_database within a second of a commit.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let commits = commits(&url).await.saturating_sub(commits_before);

    for child in &mut children {
        stop(child);
    }
    rates.sort_by(f64::total_cmp);
    loaded.sort();
    sequential_times.sort();
    let label = if shared {
        count.to_string()
    } else {
        "one daemon, file store (no PostgreSQL)".to_owned()
    };
    format!(
        "| {label} | {:.0} | {} / {} | {} / {} | {:.2} ({commits} over {calls} calls) |",
        rates[rates.len() / 2],
        micros(percentile(&loaded, 0.5)),
        micros(percentile(&loaded, 0.99)),
        micros(percentile(&sequential_times, 0.5)),
        micros(percentile(&sequential_times, 0.99)),
        commits as f64 * 1000.0 / calls as f64,
    )
}

/// Waits until replica `port` routes `s0__echo` (its own session is up).
async fn wait_routed(port: u16) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = client
            .post(format!("http://127.0.0.1:{port}/api/v1/tools/call"))
            .json(&json!({"name": "s0__echo", "arguments": {"message": "up?"}}))
            .send()
            .await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(Instant::now() < deadline, "replica {port} never routed s0");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Committed transactions of the database so far (the blocking client,
/// on a thread of its own).
async fn commits(url: &str) -> i64 {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        client
            .query_one(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .expect("pg_stat_database")
            .get(0)
    })
    .await
    .expect("the statistics query")
}

fn call(i: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
        "name": "s0__echo",
        "arguments": {"message": "hello", "i": i},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"}
        }
    }})
}

async fn send(client: &reqwest::Client, url: &str, i: usize) -> Duration {
    let began = Instant::now();
    let answer: Value = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "s0__echo")
        .json(&call(i))
        .send()
        .await
        .expect("post")
        .json()
        .await
        .expect("json");
    let took = began.elapsed();
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    took
}

/// `CALLS_PER_ROUND` calls from `CLIENTS` clients, each on a connection of
/// its own: calls per second, and each call's time.
async fn concurrent(url: &str) -> (f64, Vec<Duration>) {
    let next = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (next, url) = (Arc::clone(&next), url.to_owned());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .expect("client");
            let mut times = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= CALLS_PER_ROUND {
                    return times;
                }
                times.push(send(&client, &url, i).await);
            }
        }));
    }
    let mut times = Vec::with_capacity(CALLS_PER_ROUND);
    for task in tasks {
        times.extend(task.await.expect("client task"));
    }
    let rate = CALLS_PER_ROUND as f64 / began.elapsed().as_secs_f64();
    (rate, times)
}

async fn sequential(url: &str) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let mut times = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        times.push(send(&client, url, i).await);
    }
    times
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// A round-robin TCP balancer on a loopback port: each connection it
/// accepts goes to the next replica (the simplest balancer that needs no
/// stickiness, which 2026-07-28 requests do not).
struct Balancer {
    address: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    async fn start(ports: Vec<u16>) -> Balancer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the balancer");
        let address = listener.local_addr().expect("address");
        let task = tokio::spawn(async move {
            let mut turn = 0;
            while let Ok((mut inbound, _)) = listener.accept().await {
                let port = ports[turn % ports.len()];
                turn += 1;
                tokio::spawn(async move {
                    let _ = inbound.set_nodelay(true);
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    {
                        let _ = outbound.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Balancer { address, task }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
