//! Helpers shared by the end-to-end benches: process memory, stopping a
//! daemon, free ports, and the guard that keeps `cargo test` from running a
//! whole bench.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The release binary under measurement.
pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-aggregator");

/// Starts `serve` on a loopback port (logs at `warn`, output discarded).
pub fn spawn_daemon(data_dir: &Path, port: u16) -> Child {
    spawn_daemon_with(data_dir, port, &[])
}

/// `spawn_daemon` with more flags.
pub fn spawn_daemon_with(data_dir: &Path, port: u16, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data_dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mcp-aggregator serve")
}

/// Waits until the daemon on `port` answers `/healthz` (20 s at most).
pub async fn wait_healthz(port: u16) {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/healthz");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(response) = client.get(&url).send().await
            && response.status().is_success()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("no /healthz within 20 s");
}

/// A registered server as the admin API shows it (by name or id).
pub async fn server_json(client: &reqwest::Client, base: &str, name: &str) -> serde_json::Value {
    client
        .get(format!("{base}/api/v1/aggregator/servers/{name}"))
        .send()
        .await
        .expect("GET the server")
        .json()
        .await
        .expect("the server as JSON")
}

/// Starts a daemon and waits until it answers.
pub async fn start_daemon(data_dir: &Path, port: u16) -> Child {
    let child = spawn_daemon(data_dir, port);
    wait_healthz(port).await;
    child
}

/// `cargo test --all-targets` runs bench targets without `--bench`; the
/// figures only mean something from the release build under `cargo bench`.
pub fn is_bench_run(how: &str) -> bool {
    let bench = std::env::args().any(|arg| arg == "--bench");
    if !bench {
        println!("run with `{how}`");
    }
    bench
}

/// CPU seconds (user + system) a process has used so far, children
/// excluded.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

/// Waits until a process uses under `share` of a core over half a second
/// (60 s at most): its start-up work (loading the search model, indexing
/// the tools) is done, so what is measured next is the work alone.
pub async fn wait_until_idle(pid: u32, share: f64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = cpu_seconds(pid);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = cpu_seconds(pid);
        if now - last < share * 0.5 || Instant::now() > deadline {
            return;
        }
        last = now;
    }
}

/// Resident memory of a process, in KiB (0 when unknown).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// SIGTERM, then wait for the exit.
pub fn stop(child: &mut Child) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The single-threaded runtime the end-to-end benches drive their clients
/// from, with the TLS provider the HTTP clients need.
pub fn bench_runtime() -> tokio::runtime::Runtime {
    mcp_aggregator::http_client::init();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A deterministic unit vector near `base` (xorshift noise of `spread`).
pub fn near(base: &[f32], seed: u64, spread: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let noisy: Vec<f32> = base
        .iter()
        .map(|x| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            x + spread * ((state % 2000) as f32 / 1000.0 - 1.0) / (base.len() as f32).sqrt()
        })
        .collect();
    mcp_aggregator::index::similarity::normalised_mean(std::iter::once(noisy.as_slice()))
        .unwrap_or(noisy)
}

/// An embedding-shaped vector for synthetic tool `tool` (its `nth` vector):
/// the real embedding `bases[tool % len]` blended with a random share of a
/// second one, plus noise — a continuous spread like a large real
/// catalog's, not hundreds of copies of a few hundred points.
pub fn blended(bases: &[Vec<f32>], tool: usize, nth: usize) -> Vec<f32> {
    let first = &bases[tool % bases.len()];
    let second = &bases[(tool.wrapping_mul(7919) / 13 + 1) % bases.len()];
    let share = ((tool.wrapping_mul(2_654_435_761) >> 7) % 50) as f32 / 100.0;
    let blend: Vec<f32> = first
        .iter()
        .zip(second)
        .map(|(a, b)| (1.0 - share) * a + share * b)
        .collect();
    near(&blend, (tool * 2 + nth) as u64, 0.6)
}
