//! The performance headline: direct (client → server) against through the
//! aggregator (client → aggregator → server), in the same run, alternating,
//! with the fixture's `echo` tool on a stdio server; both front doors.
//! Sequential p50/p99, throughput with 32 calls in flight, aggregator CPU
//! time per call, RSS, and tools/list latency with 10 × 100 and 1,000 tools.
//!
//! Run: `cargo bench --features fixture --bench mcp_latency` (release
//! builds). Prints a Markdown table. `MCP_BENCH_DOWNSTREAM=modern` has the
//! aggregator speak 2026-07-28 to the fixture (2025 by default, as the
//! direct client does).

use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

mod common;

use common::{cpu_seconds, wait_until_idle};

/// Under 1 % of a core: start-up work over.
const IDLE_SHARE: f64 = 0.01;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-aggregator");
const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const SEQUENTIAL: usize = 3000;
const ROUNDS: usize = 3;
const CONCURRENT_CALLS: usize = 20_000;
const IN_FLIGHT: usize = 32;

/// A raw JSON-RPC client on a child's stdio (the same client for both paths).
struct Stdio_ {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
}

impl Stdio_ {
    async fn spawn(command: &str, args: &[&str]) -> Stdio_ {
        let mut child = tokio::process::Command::new(command)
            .args(args)
            .env("RUST_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut client = Stdio_ {
            child,
            stdin,
            lines,
            next_id: 0,
        };
        client
            .request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}))
            .await;
        client
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    async fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("json");
        line.push(b'\n');
        self.stdin.write_all(&line).await.expect("write");
        self.stdin.flush().await.expect("flush");
    }

    async fn read_answer(&mut self) -> Value {
        loop {
            let line = self.lines.next_line().await.expect("read").expect("a line");
            let message: Value = serde_json::from_str(&line).expect("json");
            if message.get("id").is_some() {
                return message;
            }
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.read_answer().await
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

async fn wait_for_tool(client: &mut Stdio_, name: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = client.request("tools/list", json!({})).await;
        let tools = answer["result"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if tools.len() >= count && tools.iter().any(|t| t["name"] == name) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never listed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The fixture behind the aggregator speaks the 2025 revision the direct
/// client speaks (`--legacy-only`), so both paths do the same work; with
/// `MCP_BENCH_DOWNSTREAM=modern` the aggregator speaks 2026-07-28 to it.
fn config(dir: &Path, servers: usize, tools: usize) -> String {
    let modern = std::env::var("MCP_BENCH_DOWNSTREAM").is_ok_and(|v| v == "modern");
    let mut map = serde_json::Map::new();
    for i in 0..servers {
        let mut args = vec!["--tools".to_owned(), tools.to_string()];
        if !modern {
            args.push("--legacy-only".to_owned());
        }
        map.insert(format!("s{i}"), json!({"command": FIXTURE, "args": args}));
    }
    let path = dir.join(format!("config-{servers}x{tools}.json"));
    std::fs::write(&path, json!({"mcpServers": map}).to_string()).expect("config");
    path.display().to_string()
}

fn echo(name: &str, i: usize) -> Value {
    json!({"name": name, "arguments": {"message": "hello", "i": i}})
}

/// The same call from a 2026-07-28 client: its protocol in `_meta`.
fn echo_modern(name: &str, i: usize) -> Value {
    json!({"name": name, "arguments": {"message": "hello", "i": i}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"}
    }})
}

async fn sequential_modern(client: &mut Stdio_, tool: &str) -> Vec<Duration> {
    let mut times = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let began = Instant::now();
        let answer = client.request("tools/call", echo_modern(tool, i)).await;
        times.push(began.elapsed());
        assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    }
    times
}

/// Sequential calls from a 2026-07-28 client over HTTP: no session, the
/// request's headers mirroring its body.
async fn http_sequential_modern(url: &str, tool: &str) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let mut times = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let body = json!({"jsonrpc": "2.0", "id": i + 10, "method": "tools/call", "params": echo_modern(tool, i)});
        let began = Instant::now();
        let answer: Value = client
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .json(&body)
            .send()
            .await
            .expect("post")
            .json()
            .await
            .expect("json");
        times.push(began.elapsed());
        assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    }
    times
}

async fn sequential(client: &mut Stdio_, tool: &str) -> Vec<Duration> {
    let mut times = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let began = Instant::now();
        let answer = client.request("tools/call", echo(tool, i)).await;
        times.push(began.elapsed());
        assert!(answer.get("result").is_some(), "{answer}");
    }
    times
}

/// Calls per second with `IN_FLIGHT` requests outstanding on one connection.
async fn pipelined(client: &mut Stdio_, tool: &str) -> f64 {
    let began = Instant::now();
    let mut sent = 0;
    let mut done = 0;
    while sent < IN_FLIGHT {
        client.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": client.next_id, "method": "tools/call", "params": echo(tool, sent)});
        client.send(&message).await;
        sent += 1;
    }
    while done < CONCURRENT_CALLS {
        let answer = client.read_answer().await;
        assert!(answer.get("result").is_some(), "{answer}");
        done += 1;
        if sent < CONCURRENT_CALLS {
            client.next_id += 1;
            let message = json!({"jsonrpc": "2.0", "id": client.next_id, "method": "tools/call", "params": echo(tool, sent)});
            client.send(&message).await;
            sent += 1;
        }
    }
    CONCURRENT_CALLS as f64 / began.elapsed().as_secs_f64()
}

async fn http_sequential(url: &str, session: &str, tool: &str) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let mut times = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let body = json!({"jsonrpc": "2.0", "id": i + 10, "method": "tools/call", "params": echo(tool, i)});
        let began = Instant::now();
        let answer: Value = client
            .post(url)
            .header("mcp-session-id", session)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .expect("post")
            .json()
            .await
            .expect("json");
        times.push(began.elapsed());
        assert!(answer.get("result").is_some(), "{answer}");
    }
    times
}

async fn http_concurrent(url: &str, session: &str, tool: &str) -> f64 {
    let client = reqwest::Client::new();
    let began = Instant::now();
    let per_worker = CONCURRENT_CALLS / IN_FLIGHT;
    let workers: Vec<_> = (0..IN_FLIGHT)
        .map(|w| {
            let (client, url, session, tool) = (client.clone(), url.to_owned(), session.to_owned(), tool.to_owned());
            tokio::spawn(async move {
                for i in 0..per_worker {
                    let body = json!({"jsonrpc": "2.0", "id": w * per_worker + i, "method": "tools/call", "params": echo(&tool, i)});
                    let answer: Value = client
                        .post(&url)
                        .header("mcp-session-id", &session)
                        .json(&body)
                        .send()
                        .await
                        .expect("post")
                        .json()
                        .await
                        .expect("json");
                    assert!(answer.get("result").is_some());
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker");
    }
    (per_worker * IN_FLIGHT) as f64 / began.elapsed().as_secs_f64()
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    if !common::is_bench_run("cargo bench --features fixture --bench mcp_latency") {
        return;
    }
    let rt = common::bench_runtime();
    rt.block_on(run());
}

async fn run() {
    let temp = tempfile::tempdir().expect("temp");
    let one = config(temp.path(), 1, 3);

    // Stdio: direct and through, alternating rounds.
    let mut direct = Stdio_::spawn(FIXTURE, &[]).await;
    let data = temp.path().join("stdio-data");
    let mut through = Stdio_::spawn(
        BIN,
        &[
            "stdio",
            "--config",
            &one,
            "--data-dir",
            data.to_str().expect("utf-8"),
        ],
    )
    .await;
    wait_for_tool(&mut through, "s0__echo", 8).await;
    wait_until_idle(through.pid(), IDLE_SHARE).await;
    let (mut d_times, mut t_times, mut m_times) = (Vec::new(), Vec::new(), Vec::new());
    let mut agg_cpu = 0.0;
    for _ in 0..ROUNDS {
        d_times.extend(sequential(&mut direct, "echo").await);
        let cpu = cpu_seconds(through.pid());
        t_times.extend(sequential(&mut through, "s0__echo").await);
        agg_cpu += cpu_seconds(through.pid()) - cpu;
        m_times.extend(sequential_modern(&mut through, "s0__echo").await);
    }
    d_times.sort();
    t_times.sort();
    m_times.sort();
    let cpu_per_call_us = agg_cpu / (ROUNDS * SEQUENTIAL) as f64 * 1e6;
    let d_tput = pipelined(&mut direct, "echo").await;
    let cpu = cpu_seconds(through.pid());
    let t_tput = pipelined(&mut through, "s0__echo").await;
    let cpu_pipelined_us = (cpu_seconds(through.pid()) - cpu) / CONCURRENT_CALLS as f64 * 1e6;
    let rss = common::rss_kib(through.pid()) as f64 / 1024.0;
    drop(through);
    drop(direct);

    // HTTP front door, over the same stdio fixture.
    let port = common::free_port();
    let http_data = temp.path().join("http-data");
    let mut daemon = tokio::process::Command::new(BIN)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
            &one,
            "--data-dir",
        ])
        .arg(&http_data)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("serve");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let session = loop {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
        if let Ok(response) = client.post(&url).json(&init).send().await
            && let Some(session) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        {
            let list: Value = client
                .post(&url)
                .header("mcp-session-id", &session)
                .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
                .send()
                .await
                .expect("list")
                .json()
                .await
                .expect("json");
            if list["result"]["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["name"] == "s0__echo"))
            {
                break session;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the daemon never listed s0__echo"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let daemon_pid = daemon.id().unwrap_or(0);
    wait_until_idle(daemon_pid, IDLE_SHARE).await;
    let cpu = cpu_seconds(daemon_pid);
    let mut h_times = http_sequential(&url, &session, "s0__echo").await;
    let http_cpu_us = (cpu_seconds(daemon_pid) - cpu) / SEQUENTIAL as f64 * 1e6;
    h_times.sort();
    let mut hm_times = http_sequential_modern(&url, "s0__echo").await;
    hm_times.sort();
    let h_tput = http_concurrent(&url, &session, "s0__echo").await;
    let _ = daemon.kill().await;

    // tools/list: 10 servers x 100 tools, and 1 x 1,000.
    let mut list_times = Vec::new();
    for (servers, tools) in [(10, 100), (1, 1000)] {
        let cfg = config(temp.path(), servers, tools);
        let data = temp.path().join(format!("list-{servers}"));
        let mut through = Stdio_::spawn(
            BIN,
            &[
                "stdio",
                "--config",
                &cfg,
                "--data-dir",
                data.to_str().expect("utf-8"),
            ],
        )
        .await;
        // Each fixture adds 7 fixed tools; the aggregator adds its 2 meta-tools.
        let expected = servers * (tools + 7) + 2;
        wait_for_tool(
            &mut through,
            &format!("s{}__tool_{:04}", servers - 1, tools - 1),
            expected,
        )
        .await;
        wait_until_idle(through.pid(), IDLE_SHARE).await;
        let mut times = Vec::new();
        for _ in 0..200 {
            let began = Instant::now();
            let answer = through.request("tools/list", json!({})).await;
            times.push(began.elapsed());
            assert_eq!(
                answer["result"]["tools"].as_array().map(Vec::len),
                Some(expected)
            );
        }
        times.sort();
        list_times.push((servers, tools, pct(&times, 0.5)));
    }

    println!("| figure | direct | through stdio front door | through HTTP `/mcp` |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| sequential p50 ({} calls) | {:.0} µs | {:.0} µs (+{:.0} µs) | {:.0} µs |",
        ROUNDS * SEQUENTIAL,
        pct(&d_times, 0.5),
        pct(&t_times, 0.5),
        pct(&t_times, 0.5) - pct(&d_times, 0.5),
        pct(&h_times, 0.5)
    );
    println!(
        "| sequential p99 | {:.0} µs | {:.0} µs | {:.0} µs |",
        pct(&d_times, 0.99),
        pct(&t_times, 0.99),
        pct(&h_times, 0.99)
    );
    println!(
        "| sequential p50 / p99, 2026-07-28 client | - | {:.0} µs / {:.0} µs | {:.0} µs / {:.0} µs (no session) |",
        pct(&m_times, 0.5),
        pct(&m_times, 0.99),
        pct(&hm_times, 0.5),
        pct(&hm_times, 0.99)
    );
    println!(
        "| throughput, {IN_FLIGHT} in flight ({CONCURRENT_CALLS} calls) | {:.0}/s | {:.0}/s ({:.0}% of direct) | {:.0}/s |",
        d_tput,
        t_tput,
        t_tput / d_tput * 100.0,
        h_tput
    );
    println!(
        "| aggregator CPU per call (sequential / {IN_FLIGHT} in flight) | - | {:.1} µs / {:.1} µs | {:.1} µs (sequential) |",
        cpu_per_call_us, cpu_pipelined_us, http_cpu_us
    );
    println!("| aggregator RSS after the runs | - | {rss:.1} MiB | - |");
    for (servers, tools, p50) in list_times {
        println!(
            "| tools/list p50, {servers} x {tools} tools | - | {:.2} ms | - |",
            p50 / 1000.0
        );
    }
}
