//! What the trust checks cost (issue 32): the poisoning scan and the
//! fingerprint per 1,000 tool definitions, over the real servers' tools
//! of `eval/catalog/` repeated to 10,000 (each scanned as a server among
//! all the others, the shadowing check's worst case); and the argument
//! check per call (`--validate-arguments`): the arguments' text parsed and
//! judged against a real schema, matching and not, and what compiling
//! each real schema once costs.
//!
//! Run: `cargo bench --bench trust`.

mod common;

use mcp_aggregator::eval::load_catalog;
use mcp_aggregator::trust::arguments::{Schema, check, compile};
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
    arguments(&real);
}

/// Calls checked per figure.
const CHECKS: usize = 100_000;

/// The argument check as a call pays it: the arguments' text parsed, then
/// judged (GitHub's `add_issue_comment`); and each real schema compiled.
fn arguments(real: &[serde_json::Value]) {
    let tool = real
        .iter()
        .find(|t| t["name"] == "add_issue_comment")
        .expect("add_issue_comment in eval/catalog");
    let definition = serde_json::value::to_raw_value(tool).expect("definition");
    let Schema::Checks(validator) = compile(&definition) else {
        panic!("add_issue_comment's schema compiles")
    };
    let per_call = |arguments: &str, problems: usize| {
        let text = serde_json::value::RawValue::from_string(arguments.to_owned()).expect("json");
        let mut runs = Vec::new();
        for _ in 0..ROUNDS {
            let started = Instant::now();
            for _ in 0..CHECKS {
                let tree: serde_json::Value = serde_json::from_str(text.get()).expect("json");
                assert_eq!(check(&validator, &tree).len(), problems);
            }
            runs.push(started.elapsed());
        }
        runs.sort();
        runs[runs.len() / 2].as_secs_f64() / CHECKS as f64 * 1e9
    };
    let good = per_call(
        r#"{"owner":"modelcontextprotocol","repo":"servers","issue_number":42,"body":"Thanks, fixed in 1.2."}"#,
        0,
    );
    let bad = per_call(r#"{"owner":"o","repo":"r","issue_number":"42"}"#, 2);
    let mut compiles = Vec::new();
    let mut unusable = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for tool in real {
            let definition = serde_json::value::to_raw_value(tool).expect("definition");
            if let Schema::Unusable(_) = std::hint::black_box(compile(&definition)) {
                unusable += 1;
            }
        }
        compiles.push(started.elapsed());
    }
    compiles.sort();
    println!(
        "argument check per call (text parsed, then judged; GitHub add_issue_comment), median of {ROUNDS} x {CHECKS}: matching {good:.0} ns, not matching (2 problems named) {bad:.0} ns; compiling each of the {} real schemas once: {:.0} µs on average ({} do not compile)",
        real.len(),
        compiles[compiles.len() / 2].as_secs_f64() / real.len() as f64 * 1e6,
        unusable / ROUNDS
    );
}
