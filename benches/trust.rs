//! What the trust checks cost (issue 32): the poisoning scan and the
//! fingerprint per 1,000 tool definitions, over the real servers' tools
//! of `eval/catalog/` repeated to 10,000 (each scanned as a server among
//! all the others, the shadowing check's worst case).
//!
//! Run: `cargo bench --bench trust`.

mod common;

use mcp_aggregator::eval::load_catalog;
use mcp_aggregator::trust::{ScanContext, fingerprint, scan_definition};
use std::collections::HashSet;
use std::time::{Duration, Instant};

const TOOLS: usize = 10_000;
const ROUNDS: usize = 5;

fn main() {
    if !common::is_bench_run("cargo bench --bench trust") {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
    let catalog = load_catalog(&root.join("catalog")).expect("catalog");
    let real: Vec<serde_json::Value> = catalog
        .iter()
        .flat_map(|server| server.tools.iter().cloned())
        .collect();
    let other_tools: HashSet<String> = real
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    let context = ScanContext {
        other_tools,
        own_tools: HashSet::new(),
    };
    let tools: Vec<&serde_json::Value> = real.iter().cycle().take(TOOLS).collect();
    let mut scans = Vec::new();
    let mut prints = Vec::new();
    let mut findings = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for tool in &tools {
            findings += scan_definition(tool, &context).len();
        }
        scans.push(started.elapsed());
        let started = Instant::now();
        for tool in &tools {
            std::hint::black_box(fingerprint(tool));
        }
        prints.push(started.elapsed());
    }
    let per_thousand = |runs: &mut Vec<Duration>| {
        runs.sort();
        runs[runs.len() / 2].as_secs_f64() * 1000.0 / TOOLS as f64 * 1000.0
    };
    println!(
        "{} real tools cycled to {TOOLS}, median of {ROUNDS}: scan {:.1} ms per 1,000 tools, fingerprint {:.1} ms per 1,000 tools ({} findings of any severity per pass)",
        real.len(),
        per_thousand(&mut scans),
        per_thousand(&mut prints),
        findings / ROUNDS
    );
}
