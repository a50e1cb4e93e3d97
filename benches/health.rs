//! Figures for the health monitor (issue 11): how long a dead or hung server
//! takes to be marked ERROR and to be CONNECTED again; call latency with 50
//! servers checked every second against the same 50 servers unchecked, in
//! the same run; and the CPU an idle daemon spends watching 50 servers.
//!
//! Run: `cargo bench --features fixture --bench health` (release builds of
//! the daemon and the rmcp fixture). Prints Markdown tables.

use serde_json::json;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

mod common;

use common::{cpu_seconds, free_port, ms, stop, wait_until_idle};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const RUNS: usize = 5;
const SERVERS: usize = 50;
const CALLS_PER_ROUND: usize = 2000;
const ROUNDS: usize = 3;
const IDLE: Duration = Duration::from_secs(30);

fn main() {
    if !common::is_bench_run("cargo bench --features fixture --bench health") {
        return;
    }
    let rt = common::bench_runtime();
    rt.block_on(async {
        let temp = tempfile::tempdir().expect("temp");
        let detection = detection(temp.path()).await;
        println!("| event (health interval 1 s, check timeout 1 s; median of {RUNS}) | to ERROR | to CONNECTED again |");
        println!("| --- | --- | --- |");
        for (what, to_error, back) in &detection {
            println!("| {what} | {:.0} ms | {:.0} ms |", ms(*to_error), ms(*back));
        }
        println!();
        fifty(temp.path()).await;
    });
}

struct Daemon {
    child: Child,
    base: String,
}

impl Daemon {
    async fn start(dir: &Path, extra: &[&str]) -> Daemon {
        let port = free_port();
        let child = common::spawn_daemon_with(dir, port, extra);
        common::wait_healthz(port).await;
        Daemon {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn register(&self, name: &str, args: &[&str]) {
        let body = json!({"name": name, "transport_type": "STDIO",
            "connection_config": {"command": FIXTURE, "args": args}});
        let response = reqwest::Client::new()
            .post(format!("{}/api/v1/aggregator/servers", self.base))
            .json(&body)
            .send()
            .await
            .expect("register");
        assert_eq!(response.status(), 201);
    }

    async fn status(&self, client: &reqwest::Client, name: &str) -> String {
        let server = common::server_json(client, &self.base, name).await;
        server["status"].as_str().unwrap_or_default().to_owned()
    }

    /// Polls (every millisecond) until the server is in `status`.
    async fn wait(&self, client: &reqwest::Client, name: &str, status: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.status(client, name).await != status {
            assert!(Instant::now() < deadline, "{name} never reached {status}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

fn read_pid(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kill (the process dies) and stop (it hangs: alive, never answering).
async fn detection(dir: &Path) -> Vec<(&'static str, Duration, Duration)> {
    let data = dir.join("detection");
    let pid_file = dir.join("fixture.pid");
    let daemon = Daemon::start(&data, &["--health-interval", "1", "--health-timeout", "1"]).await;
    let pid_arg = pid_file.to_str().expect("utf-8");
    daemon.register("watched", &["--pid-file", pid_arg]).await;
    let client = reqwest::Client::new();
    let mut results = Vec::new();
    for (what, sig) in [
        ("the server dies (SIGKILL)", libc::SIGKILL),
        ("the server hangs (SIGSTOP)", libc::SIGSTOP),
    ] {
        let mut to_error = Vec::new();
        let mut back = Vec::new();
        for _ in 0..RUNS {
            daemon.wait(&client, "watched", "CONNECTED").await;
            let pid = read_pid(&pid_file);
            let _ = std::fs::remove_file(&pid_file);
            let began = Instant::now();
            signal(pid, sig);
            daemon.wait(&client, "watched", "ERROR").await;
            to_error.push(began.elapsed());
            let errored = Instant::now();
            daemon.wait(&client, "watched", "CONNECTED").await;
            back.push(errored.elapsed());
            if sig == libc::SIGSTOP {
                // Its group was sent SIGTERM; let it act on it.
                signal(pid, libc::SIGCONT);
            }
        }
        results.push((what, median(to_error), median(back)));
    }
    let mut child = daemon.child;
    stop(&mut child);
    results
}

/// 50 servers behind each of two daemons: one checks them every second,
/// the other practically never. Calls alternate between the two.
async fn fifty(dir: &Path) {
    let watched = Daemon::start(&dir.join("watched"), &["--health-interval", "1"]).await;
    let unwatched = Daemon::start(&dir.join("unwatched"), &["--health-interval", "86400"]).await;
    let client = reqwest::Client::new();
    for daemon in [&watched, &unwatched] {
        for i in 0..SERVERS {
            daemon.register(&format!("s{i:02}"), &[]).await;
        }
        for i in 0..SERVERS {
            daemon.wait(&client, &format!("s{i:02}"), "CONNECTED").await;
        }
    }
    // Start-up (model load, indexing) over before anything is measured.
    // (A daemon checking 50 servers a second is never under 1 %.)
    wait_until_idle(watched.child.id(), 0.05).await;
    wait_until_idle(unwatched.child.id(), 0.05).await;

    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..ROUNDS {
        with.extend(calls(&client, &watched).await);
        without.extend(calls(&client, &unwatched).await);
    }
    with.sort();
    without.sort();
    println!(
        "| {SERVERS} servers behind the daemon, REST `tools/call` of one of them ({ROUNDS} alternating rounds of {CALLS_PER_ROUND}) | p50 | p99 |"
    );
    println!("| --- | --- | --- |");
    println!(
        "| checked every 1 s | {:.1} µs | {:.1} µs |",
        pct(&with, 0.5),
        pct(&with, 0.99)
    );
    println!(
        "| not checked | {:.1} µs | {:.1} µs |",
        pct(&without, 0.5),
        pct(&without, 0.99)
    );
    println!();

    let idle = |pid: u32| async move {
        let before = cpu_seconds(pid);
        tokio::time::sleep(IDLE).await;
        (cpu_seconds(pid) - before) / IDLE.as_secs_f64() * 100.0
    };
    let (watched_cpu, unwatched_cpu) =
        tokio::join!(idle(watched.child.id()), idle(unwatched.child.id()));
    println!(
        "| idle daemon, {SERVERS} stdio servers connected, over {} s | CPU (daemon process alone) |",
        IDLE.as_secs()
    );
    println!("| --- | --- |");
    println!("| checked every 1 s | {watched_cpu:.2} % of a core |");
    println!("| not checked | {unwatched_cpu:.2} % of a core |");
    for daemon in [watched, unwatched] {
        let mut child = daemon.child;
        stop(&mut child);
    }
}

async fn calls(client: &reqwest::Client, daemon: &Daemon) -> Vec<Duration> {
    let url = format!("{}/api/v1/tools/call", daemon.base);
    let body = json!({"name": "s00__echo", "arguments": {"value": "x"}});
    let mut times = Vec::with_capacity(CALLS_PER_ROUND);
    for _ in 0..CALLS_PER_ROUND {
        let began = Instant::now();
        let response = client.post(&url).json(&body).send().await.expect("call");
        assert_eq!(response.status(), 200);
        let _ = response.bytes().await;
        times.push(began.elapsed());
    }
    times
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e6
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}
