//! Helpers shared by the end-to-end benches: process memory, stopping a
//! daemon, free ports, and the guard that keeps `cargo test` from running a
//! whole bench.

#![allow(dead_code)]

use std::process::Child;
use std::time::Duration;

/// `cargo test --all-targets` runs bench targets without `--bench`; the
/// figures only mean something from the release build under `cargo bench`.
pub fn is_bench_run(how: &str) -> bool {
    let bench = std::env::args().any(|arg| arg == "--bench");
    if !bench {
        println!("run with `{how}`");
    }
    bench
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
    mcp_aggregator::tls::init();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}
