//! The performance headline: direct (client → server) against through the
//! aggregator (client → aggregator → server), in the same run, alternating
//! rounds, for two servers behind it: a raw echo server of ours (no SDK,
//! never the bottleneck) and the rmcp fixture. The realistic setting: the
//! npm reference server connected beside it (it notifies on its own), the
//! search model loaded, the index synced. Both front doors (stdio, `/mcp`)
//! and both protocol eras: sequential p50/p99, throughput with 32 calls in
//! flight (median of per-round ratios to direct), the aggregator's own CPU
//! per call (children excluded), RSS; tools/list with 10 × 100 and 1,000
//! tools.
//!
//! Run: `cargo bench --features fixture --bench mcp_latency` (release
//! builds, after scripts/setup.sh). Prints Markdown tables.
//! `MCP_BENCH_DOWNSTREAM=modern` has the aggregator speak 2026-07-28 to the
//! rmcp fixture (2025 by default, as the direct client does).
//! `MCP_BENCH_AGGREGATOR=path` measures another build of the aggregator
//! (an A/B of two commits on the same machine, minutes apart);
//! `MCP_BENCH_QUICK=1` measures the raw echo backend only;
//! `MCP_BENCH_VALIDATION=1` only what `--validate-arguments` costs per call.
//! `stdio` relays to the daemon it starts (the aggregator's CPU is both
//! processes'); `MCP_BENCH_STDIO_IN_PROCESS=1` measures `stdio
//! --in-process` instead.

use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};

mod common;

use common::{cpu_seconds, wait_until_idle};

/// Under 1 % of a core: start-up work over.
const IDLE_SHARE: f64 = 0.01;

const BUILT: &str = env!("CARGO_BIN_EXE_mcp-aggregator");

/// The aggregator measured: this build, or `MCP_BENCH_AGGREGATOR`.
fn aggregator() -> String {
    std::env::var("MCP_BENCH_AGGREGATOR").unwrap_or_else(|_| BUILT.to_owned())
}
const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const ECHO: &str = env!("CARGO_BIN_EXE_mcp-echo-server");
const RELAY: &str = env!("CARGO_BIN_EXE_mcp-line-relay");
const SEQUENTIAL: usize = 3000;
const ROUNDS: usize = 3;
const CONCURRENT_CALLS: usize = 20_000;
const IN_FLIGHT: usize = 32;

/// A raw JSON-RPC client on a child's stdio (the same client for both paths).
struct Stdio_ {
    child: tokio::process::Child,
    stdin: Box<dyn AsyncWrite + Unpin + Send>,
    lines: tokio::io::Lines<BufReader<Box<dyn AsyncRead + Unpin + Send>>>,
    next_id: u64,
}

/// How the client connects to the child's stdio.
#[derive(Clone, Copy, PartialEq)]
enum Wire {
    /// Pipes (Python, Rust, shells).
    Pipe,
    /// One Unix socketpair for stdin and stdout (Node and Electron clients:
    /// Claude Desktop, VS Code, Cursor).
    Socket,
}

impl Stdio_ {
    async fn spawn(command: &str, args: &[&str]) -> Stdio_ {
        Stdio_::spawn_on(command, args, Wire::Pipe).await
    }

    async fn spawn_on(command: &str, args: &[&str], wire: Wire) -> Stdio_ {
        let mut builder = tokio::process::Command::new(command);
        builder
            .args(args)
            .env("RUST_LOG", "error")
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let (stdin, output): (
            Box<dyn AsyncWrite + Unpin + Send>,
            Box<dyn AsyncRead + Unpin + Send>,
        );
        let child = match wire {
            Wire::Pipe => {
                let mut child = builder
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn");
                stdin = Box::new(child.stdin.take().expect("stdin"));
                output = Box::new(child.stdout.take().expect("stdout"));
                child
            }
            Wire::Socket => {
                let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
                let theirs_out = theirs.try_clone().expect("clone");
                let child = builder
                    .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
                    .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_out)))
                    .spawn()
                    .expect("spawn");
                ours.set_nonblocking(true).expect("nonblocking");
                let (read, write) = tokio::net::UnixStream::from_std(ours)
                    .expect("socket")
                    .into_split();
                stdin = Box::new(write);
                output = Box::new(read);
                child
            }
        };
        let lines = BufReader::new(output).lines();
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

/// The server behind the aggregator (and called directly for the baseline).
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    /// `mcp-echo-server`: no SDK, one read and one write per call.
    RawEcho,
    /// The rmcp fixture (`mcp-fixture-server`).
    Rmcp,
}

impl Backend {
    fn label(self) -> &'static str {
        match self {
            Backend::RawEcho => "raw echo server (no SDK)",
            Backend::Rmcp => "rmcp fixture",
        }
    }

    fn command(self) -> (&'static str, Vec<String>) {
        match self {
            Backend::RawEcho => (ECHO, Vec::new()),
            Backend::Rmcp => {
                let mut args = vec!["--tools".to_owned(), "3".to_owned()];
                if std::env::var("MCP_BENCH_DOWNSTREAM").is_ok_and(|v| v == "modern") {
                    return (FIXTURE, args);
                }
                args.push("--legacy-only".to_owned());
                (FIXTURE, args)
            }
        }
    }
}

/// The realistic setting: the backend as `s0`, and the npm reference
/// server beside it (it sends log notifications and resource updates on
/// its own every few seconds).
fn realistic_config(dir: &Path, backend: Backend) -> String {
    let (command, args) = backend.command();
    let everything = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        everything.exists(),
        "{} is missing: run scripts/setup.sh",
        everything.display()
    );
    let config = json!({"mcpServers": {
        "s0": {"command": command, "args": args},
        "everything": {"command": "node", "args": [everything, "stdio"]},
    }});
    let path = dir.join(format!("config-{}.json", backend as u8));
    std::fs::write(&path, config.to_string()).expect("config");
    path.display().to_string()
}

/// Waits for the backend's echo and the reference server's tools, loads the
/// search model (a `search_tools` call) and waits until the aggregator is
/// idle: the index synced, start-up work over.
async fn settle_stdio(through: &mut Stdio_) {
    wait_for_tool(through, "s0__echo", 3).await;
    wait_for_tool(through, "everything__echo", 3).await;
    let answer = through
        .request(
            "tools/call",
            json!({"name": "search_tools", "arguments": {"query": "echo a message"}}),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    wait_until_idle(through.pid(), IDLE_SHARE).await;
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The stdio front door's figures over one kind of wire.
struct StdioFigures {
    wire: Wire,
    direct: Vec<Duration>,
    legacy: Vec<Duration>,
    modern: Vec<Duration>,
    legacy_cpu_us: f64,
    /// The relaying `stdio` process's own share (none in-process).
    relay_cpu_us: Option<f64>,
    /// Its CPU at rest, as a share of a core.
    relay_idle_share: f64,
    modern_cpu_us: f64,
    direct_tput: f64,
    tput: f64,
    /// Median over rounds of through / direct.
    ratio: f64,
    tput_cpu_us: f64,
    rss_mib: f64,
    /// A byte relay in the aggregator's place: what any process in the
    /// middle adds.
    floor: Vec<Duration>,
    floor_ratio: f64,
}

/// What one backend's runs measured.
struct Figures {
    backend: Backend,
    stdio: Vec<StdioFigures>,
    http: Vec<Duration>,
    http_modern: Vec<Duration>,
    http_cpu_us: f64,
    http_modern_cpu_us: f64,
    http_tput: f64,
    http_tput_cpu_us: f64,
}

/// The stdio front door against direct calls, alternating rounds.
async fn measure_stdio(
    temp: &Path,
    backend: Backend,
    config: &str,
    direct: &mut Stdio_,
    wire: Wire,
) -> StdioFigures {
    let data = temp.join(format!("stdio-data-{}-{}", backend as u8, wire as u8));
    let mut args = vec![
        "stdio",
        "--config",
        config,
        "--data-dir",
        data.to_str().expect("utf-8"),
        // The daemon it starts leaves with it.
        "--idle-exit",
        "0s",
    ];
    if std::env::var_os("MCP_BENCH_STDIO_IN_PROCESS").is_some() {
        args.push("--in-process");
    }
    let mut through = Stdio_::spawn_on(&aggregator(), &args, wire).await;
    settle_stdio(&mut through).await;
    // `stdio` relays to the daemon it started: the aggregator's CPU is
    // both processes', the relay's own shown apart.
    let daemon: Option<u32> = std::fs::read_to_string(data.join("daemon.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|info| info["pid"].as_u64())
        .and_then(|pid| u32::try_from(pid).ok());
    if let Some(pid) = daemon {
        wait_until_idle(pid, IDLE_SHARE).await;
    }
    let relay_pid = through.pid();
    let serving_cpu = move || cpu_seconds(relay_pid) + daemon.map_or(0.0, cpu_seconds);
    // The relay at rest: its CPU over a few idle seconds.
    let idle_from = cpu_seconds(relay_pid);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let relay_idle_share = (cpu_seconds(relay_pid) - idle_from) / 3.0;
    let (command, args) = backend.command();
    let relayed: Vec<&str> = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .collect();
    let mut relay = Stdio_::spawn_on(RELAY, &relayed, wire).await;
    let (mut d_times, mut t_times, mut m_times) = (Vec::new(), Vec::new(), Vec::new());
    let mut f_times = Vec::new();
    let (mut t_cpu, mut m_cpu, mut r_cpu) = (0.0, 0.0, 0.0);
    for _ in 0..ROUNDS {
        d_times.extend(sequential(direct, "echo").await);
        f_times.extend(sequential(&mut relay, "echo").await);
        let (cpu, relay_cpu) = (serving_cpu(), cpu_seconds(relay_pid));
        t_times.extend(sequential(&mut through, "s0__echo").await);
        t_cpu += serving_cpu() - cpu;
        r_cpu += cpu_seconds(relay_pid) - relay_cpu;
        let cpu = serving_cpu();
        m_times.extend(sequential_modern(&mut through, "s0__echo").await);
        m_cpu += serving_cpu() - cpu;
    }
    d_times.sort();
    t_times.sort();
    m_times.sort();
    f_times.sort();
    let calls = (ROUNDS * SEQUENTIAL) as f64;
    let (mut d_tputs, mut t_tputs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut floor_ratios = Vec::new();
    let mut tput_cpu = 0.0;
    for _ in 0..ROUNDS {
        let d = pipelined(direct, "echo").await;
        floor_ratios.push(pipelined(&mut relay, "echo").await / d);
        let cpu = serving_cpu();
        let t = pipelined(&mut through, "s0__echo").await;
        tput_cpu += serving_cpu() - cpu;
        d_tputs.push(d);
        t_tputs.push(t);
        ratios.push(t / d);
    }
    let rss_mib = common::rss_kib(daemon.unwrap_or(relay_pid)) as f64 / 1024.0;
    StdioFigures {
        wire,
        direct: d_times,
        legacy: t_times,
        modern: m_times,
        legacy_cpu_us: t_cpu / calls * 1e6,
        relay_cpu_us: daemon.map(|_| r_cpu / calls * 1e6),
        relay_idle_share,
        modern_cpu_us: m_cpu / calls * 1e6,
        direct_tput: median(d_tputs),
        tput: median(t_tputs),
        ratio: median(ratios),
        tput_cpu_us: tput_cpu / (ROUNDS * CONCURRENT_CALLS) as f64 * 1e6,
        rss_mib,
        floor: f_times,
        floor_ratio: median(floor_ratios),
    }
}

async fn measure(temp: &Path, backend: Backend) -> Figures {
    let config = realistic_config(temp, backend);
    let (command, args) = backend.command();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut direct = Stdio_::spawn(command, &args).await;
    let mut stdio = Vec::new();
    for wire in [Wire::Pipe, Wire::Socket] {
        stdio.push(measure_stdio(temp, backend, &config, &mut direct, wire).await);
    }
    drop(direct);

    // HTTP front door, the same servers behind it.
    let port = common::free_port();
    let http_data = temp.join(format!("http-data-{}", backend as u8));
    let mut daemon = spawn_serve(&config, &http_data, port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let session = http_session(&url).await;
    let daemon_pid = daemon.id().unwrap_or(0);
    wait_until_idle(daemon_pid, IDLE_SHARE).await;
    let (mut h_times, mut hm_times) = (Vec::new(), Vec::new());
    let (mut h_cpu, mut hm_cpu) = (0.0, 0.0);
    for _ in 0..ROUNDS {
        let cpu = cpu_seconds(daemon_pid);
        h_times.extend(http_sequential(&url, &session, "s0__echo").await);
        h_cpu += cpu_seconds(daemon_pid) - cpu;
        let cpu = cpu_seconds(daemon_pid);
        hm_times.extend(http_sequential_modern(&url, "s0__echo").await);
        hm_cpu += cpu_seconds(daemon_pid) - cpu;
    }
    h_times.sort();
    hm_times.sort();
    let mut h_tputs = Vec::new();
    let cpu = cpu_seconds(daemon_pid);
    for _ in 0..ROUNDS {
        h_tputs.push(http_concurrent(&url, &session, "s0__echo").await);
    }
    let http_tput_cpu_us = (cpu_seconds(daemon_pid) - cpu)
        / (ROUNDS * (CONCURRENT_CALLS / IN_FLIGHT) * IN_FLIGHT) as f64
        * 1e6;
    let _ = daemon.kill().await;

    Figures {
        backend,
        stdio,
        http: h_times,
        http_modern: hm_times,
        http_cpu_us: h_cpu / (ROUNDS * SEQUENTIAL) as f64 * 1e6,
        http_modern_cpu_us: hm_cpu / (ROUNDS * SEQUENTIAL) as f64 * 1e6,
        http_tput: median(h_tputs),
        http_tput_cpu_us,
    }
}

/// `mcp-aggregator serve` on `config`, its MCP at `http://127.0.0.1:{port}/mcp`.
fn spawn_serve(config: &str, data_dir: &Path, port: u16) -> tokio::process::Child {
    tokio::process::Command::new(aggregator())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
            config,
            "--data-dir",
        ])
        .arg(data_dir)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("serve")
}

/// Opens a 2025 session on `/mcp` and lists its tools (None while the
/// daemon is not answering yet).
async fn session_and_tools(client: &reqwest::Client, url: &str) -> Option<(String, Vec<Value>)> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
    let response = client.post(url).json(&init).send().await.ok()?;
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)?;
    let list: Value = client
        .post(url)
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let tools = list["result"]["tools"].as_array()?.clone();
    Some((session, tools))
}

/// Opens a 2025 session on `/mcp` once the daemon lists both servers' tools,
/// and loads the search model with a `search_tools` call.
async fn http_session(url: &str) -> String {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((session, tools)) = session_and_tools(&client, url).await {
            let listed = |name: &str| tools.iter().any(|t| t["name"] == name);
            if listed("s0__echo") && listed("everything__echo") {
                let search = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "search_tools", "arguments": {"query": "echo a message"}}});
                let answer: Value = client
                    .post(url)
                    .header("mcp-session-id", &session)
                    .json(&search)
                    .send()
                    .await
                    .expect("search")
                    .json()
                    .await
                    .expect("json");
                assert!(answer.get("result").is_some(), "{answer}");
                return session;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the daemon never listed both servers' tools"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// CPU share of one core an idle daemon with 20 connected servers uses
/// over `IDLE_WINDOW` (nothing should poll).
async fn idle_daemon(temp: &Path) -> f64 {
    const SERVERS: usize = 20;
    const TOOLS: usize = 20;
    let cfg = config(temp, SERVERS, TOOLS);
    let port = common::free_port();
    let mut daemon = spawn_serve(&cfg, &temp.join("idle-data"), port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let client = reqwest::Client::new();
    // Each fixture adds 7 fixed tools; the aggregator adds its 2 meta-tools.
    let expected = SERVERS * (TOOLS + 7) + 2;
    let deadline = Instant::now() + Duration::from_secs(60);
    while session_and_tools(&client, &url)
        .await
        .is_none_or(|(_, tools)| tools.len() != expected)
    {
        assert!(
            Instant::now() < deadline,
            "the {SERVERS} servers never all connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = daemon.id().unwrap_or(0);
    wait_until_idle(pid, IDLE_SHARE).await;
    let cpu = cpu_seconds(pid);
    tokio::time::sleep(IDLE_WINDOW).await;
    let share = (cpu_seconds(pid) - cpu) / IDLE_WINDOW.as_secs_f64();
    let _ = daemon.kill().await;
    share
}

/// How long the idle daemon is watched.
const IDLE_WINDOW: Duration = Duration::from_secs(30);

fn print(figures: &Figures) {
    let f = figures;
    let direct = &f.stdio[0].direct;
    println!("\n### Behind it: {}\n", f.backend.label());
    println!(
        "| figure | direct | stdio, client on pipes | stdio, client on a socketpair (Node) | HTTP `/mcp` |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let cell = |times: &[Duration], direct: &[Duration]| {
        format!(
            "{:.0} / {:.0} µs (+{:.0})",
            pct(times, 0.5),
            pct(times, 0.99),
            pct(times, 0.5) - pct(direct, 0.5)
        )
    };
    let [pipe, socket] = [&f.stdio[0], &f.stdio[1]];
    println!(
        "| 2025 client, sequential p50 / p99 (+ added at p50), {} calls | {:.0} / {:.0} µs | {} | {} | {} |",
        pipe.legacy.len(),
        pct(direct, 0.5),
        pct(direct, 0.99),
        cell(&pipe.legacy, &pipe.direct),
        cell(&socket.legacy, &socket.direct),
        cell(&f.http, direct),
    );
    println!(
        "| 2026-07-28 client, sequential p50 / p99 | - | {} | {} | {} (no session) |",
        cell(&pipe.modern, &pipe.direct),
        cell(&socket.modern, &socket.direct),
        cell(&f.http_modern, direct),
    );
    println!(
        "| aggregator CPU per sequential call, 2025 / 2026-07-28 | - | {:.1} / {:.1} µs | {:.1} / {:.1} µs | {:.1} / {:.1} µs |",
        pipe.legacy_cpu_us,
        pipe.modern_cpu_us,
        socket.legacy_cpu_us,
        socket.modern_cpu_us,
        f.http_cpu_us,
        f.http_modern_cpu_us
    );
    let relay_cell = |f: &StdioFigures| match f.relay_cpu_us {
        Some(us) => format!(
            "{us:.1} µs; at rest {:.2} % of a core",
            f.relay_idle_share * 100.0
        ),
        None => "in-process".to_owned(),
    };
    println!(
        "| of which the relaying `stdio` process, per sequential 2025 call | - | {} | {} | - |",
        relay_cell(pipe),
        relay_cell(socket)
    );
    println!(
        "| throughput, {IN_FLIGHT} in flight, median of {ROUNDS} rounds (x direct: median of per-round ratios) | {:.0}/s | {:.0}/s ({:.2}x) | {:.0}/s ({:.2}x) | {:.0}/s ({IN_FLIGHT} clients) |",
        pipe.direct_tput, pipe.tput, pipe.ratio, socket.tput, socket.ratio, f.http_tput
    );
    println!(
        "| aggregator CPU per call at {IN_FLIGHT} in flight | - | {:.1} µs | {:.1} µs | {:.1} µs |",
        pipe.tput_cpu_us, socket.tput_cpu_us, f.http_tput_cpu_us
    );
    println!(
        "| the floor: a byte relay (two threads, no parsing) in the aggregator's place — p50 / p99 (+ added), throughput x direct | - | {}, {:.2}x | {}, {:.2}x | - |",
        cell(&pipe.floor, &pipe.direct),
        pipe.floor_ratio,
        cell(&socket.floor, &socket.direct),
        socket.floor_ratio,
    );
    println!(
        "| aggregator RSS (model loaded) | - | {:.1} MiB | {:.1} MiB | - |",
        pipe.rss_mib, socket.rss_mib
    );
    debug_assert!(pipe.wire == Wire::Pipe && socket.wire == Wire::Socket);
}

/// Arguments a real schema accepts (GitHub's `add_issue_comment`).
fn comment(i: usize) -> Value {
    json!({"name": "s0__echo", "arguments": {"owner": "o", "repo": "r", "issue_number": i, "body": "hello"}})
}

/// What checking arguments costs per call: the rmcp fixture serving a real
/// schema (GitHub's `add_issue_comment`, from `eval/catalog`) as `echo`,
/// through `stdio --in-process` with and without `--validate-arguments`,
/// alternating rounds. Returns p50 and CPU per call, off then on.
async fn validation_cost(temp: &Path) -> [(f64, f64); 2] {
    let catalog: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("eval/catalog/github.json"),
        )
        .expect("eval/catalog/github.json"),
    )
    .expect("catalog");
    let real = catalog["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == "add_issue_comment"))
        .expect("add_issue_comment");
    let tools = temp.join("strict-tools.json");
    let strict = json!([{"name": "echo", "description": real["description"], "inputSchema": real["inputSchema"]}]);
    std::fs::write(&tools, strict.to_string()).expect("tools");
    let config = temp.join("config-validation.json");
    let servers = json!({"mcpServers": {"s0": {"command": FIXTURE, "args": ["--tools-file", tools, "--legacy-only"]}}});
    std::fs::write(&config, servers.to_string()).expect("config");
    let mut clients = Vec::new();
    for checked in [false, true] {
        let data = temp.join(format!("validation-{checked}"));
        let mut args = vec![
            "stdio",
            "--in-process",
            "--search",
            "off",
            "--config",
            config.to_str().expect("utf-8"),
            "--data-dir",
            data.to_str().expect("utf-8"),
        ];
        if checked {
            args.push("--validate-arguments");
        }
        let mut client = Stdio_::spawn(&aggregator(), &args).await;
        wait_for_tool(&mut client, "s0__echo", 1).await;
        // A call that does not match: refused only where checked.
        let refused = client
            .request(
                "tools/call",
                json!({"name": "s0__echo", "arguments": {"owner": 1}}),
            )
            .await;
        assert_eq!(refused.get("error").is_some(), checked, "{refused}");
        wait_until_idle(client.pid(), IDLE_SHARE).await;
        clients.push(client);
    }
    let mut times = [Vec::new(), Vec::new()];
    let mut cpu = [0.0; 2];
    for _ in 0..ROUNDS {
        for (which, client) in clients.iter_mut().enumerate() {
            let from = cpu_seconds(client.pid());
            for i in 0..SEQUENTIAL {
                let began = Instant::now();
                let answer = client.request("tools/call", comment(i)).await;
                times[which].push(began.elapsed());
                assert!(answer.get("result").is_some(), "{answer}");
            }
            cpu[which] += cpu_seconds(client.pid()) - from;
        }
    }
    let calls = (ROUNDS * SEQUENTIAL) as f64;
    let mut out = [(0.0, 0.0); 2];
    for which in 0..2 {
        times[which].sort();
        out[which] = (pct(&times[which], 0.5), cpu[which] / calls * 1e6);
    }
    for mut client in clients {
        let _ = client.child.kill().await;
    }
    out
}

fn print_validation(figures: [(f64, f64); 2]) {
    let [(off_p50, off_cpu), (on_p50, on_cpu)] = figures;
    println!(
        "\n| `--validate-arguments`, a real schema (GitHub `add_issue_comment`), stdio in-process, {} calls each | p50 | aggregator CPU per call |",
        ROUNDS * SEQUENTIAL
    );
    println!("| --- | --- | --- |");
    println!("| off | {off_p50:.0} µs | {off_cpu:.1} µs |");
    println!("| on | {on_p50:.0} µs | {on_cpu:.1} µs |");
    println!(
        "| cost of the check | {:+.0} µs | {:+.1} µs |",
        on_p50 - off_p50,
        on_cpu - off_cpu
    );
}

async fn run() {
    let temp = tempfile::tempdir().expect("temp");
    if std::env::var_os("MCP_BENCH_VALIDATION").is_some() {
        print_validation(validation_cost(temp.path()).await);
        return;
    }
    let mut all = Vec::new();
    for backend in [Backend::RawEcho, Backend::Rmcp] {
        all.push(measure(temp.path(), backend).await);
        if std::env::var_os("MCP_BENCH_QUICK").is_some() {
            for figures in &all {
                print(figures);
            }
            return;
        }
    }
    let idle = idle_daemon(temp.path()).await;
    // tools/list: 10 servers x 100 tools, and 1 x 1,000.
    let mut list_times = Vec::new();
    for (servers, tools) in [(10, 100), (1, 1000)] {
        let cfg = config(temp.path(), servers, tools);
        let data = temp.path().join(format!("list-{servers}"));
        let mut through = Stdio_::spawn(
            &aggregator(),
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

    println!(
        "Settings: the backend as `s0` and server-everything (stdio) beside it, the model loaded, the index synced; aggregator CPU is its own process (children excluded)."
    );
    for figures in &all {
        print(figures);
    }
    println!(
        "\nIdle daemon, 20 fixture servers connected (20 tools each), over {} s: {:.2} % of a core.",
        IDLE_WINDOW.as_secs(),
        idle * 100.0
    );
    print_validation(validation_cost(temp.path()).await);
    println!("\n| tools/list | through stdio front door |");
    println!("| --- | --- |");
    for (servers, tools, p50) in list_times {
        println!(
            "| p50, {servers} x {tools} tools | {:.2} ms |",
            p50 / 1000.0
        );
    }
}
