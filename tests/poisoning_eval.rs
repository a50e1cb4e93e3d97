//! The poisoning checks against the labelled set in `eval/poisoning/`
//! (published poisoned tool descriptions, and clean tricky ones) and the
//! real servers' tools in `eval/catalog/`: recall on the poisoned ones,
//! false positives on the clean ones (high severity: what holds a tool
//! back). Prints the figures BENCHMARKS.md quotes.

use mcp_aggregator::model::Severity;
use mcp_aggregator::trust::{ScanContext, scan_definition};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn lines(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{file}: {e}: {l}")))
        .collect()
}

/// Every real server's tools: (server, tool definition).
fn real_tools() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(root().join("eval/catalog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        let catalog: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let server = catalog["server"].as_str().unwrap_or_default().to_owned();
        for tool in catalog["tools"].as_array().into_iter().flatten() {
            out.push((server.clone(), tool.clone()));
        }
    }
    out
}

fn alarming(tool: &Value, context: &ScanContext) -> Vec<String> {
    scan_definition(tool, context)
        .into_iter()
        .filter(|f| f.severity == Severity::High)
        .map(|f| format!("{} in {}: {}", f.rule, f.field, f.excerpt))
        .collect()
}

/// Real servers' tools that the checks would hold back (each scanned as a
/// server among all the others is).
fn flagged_real_tools(real: &[(String, Value)]) -> Vec<String> {
    let mut by_server: BTreeMap<&str, HashSet<String>> = BTreeMap::new();
    for (server, tool) in real {
        if let Some(name) = tool["name"].as_str() {
            by_server.entry(server).or_default().insert(name.to_owned());
        }
    }
    let mut flagged = Vec::new();
    for (server, tool) in real {
        let context = ScanContext {
            own_tools: by_server[server.as_str()].clone(),
            other_tools: by_server
                .iter()
                .filter(|(s, _)| **s != server.as_str())
                .flat_map(|(_, names)| names.iter().cloned())
                .collect(),
        };
        let found = alarming(tool, &context);
        if !found.is_empty() {
            flagged.push(format!("{server}.{}: {found:?}", tool["name"]));
        }
    }
    flagged
}

/// No real server's tool is held back: a false positive hides a tool the
/// user wanted (and drops it from search).
#[test]
fn real_servers_tools_are_not_held_back() {
    let real = real_tools();
    assert!(real.len() >= 400, "{} real tools", real.len());
    let flagged = flagged_real_tools(&real);
    assert!(flagged.is_empty(), "{flagged:#?}");
}

#[test]
fn the_checks_catch_the_published_attacks_and_spare_real_tools() {
    let real = real_tools();
    assert!(real.len() >= 400, "{} real tools", real.len());
    let false_positives = flagged_real_tools(&real);
    let tricky = lines("eval/poisoning/clean_tricky.jsonl");
    let mut tricky_positives = Vec::new();
    for item in &tricky {
        let found = alarming(&item["tool"], &ScanContext::default());
        if !found.is_empty() {
            tricky_positives.push(format!("{}: {found:?}", item["id"]));
        }
    }
    let poisoned = lines("eval/poisoning/poisoned.jsonl");
    let mut missed = Vec::new();
    let mut caught_by_kind: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for item in &poisoned {
        let shadows: HashSet<String> = item["shadows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect();
        let context = ScanContext {
            other_tools: shadows,
            own_tools: HashSet::new(),
        };
        let caught = !alarming(&item["tool"], &context).is_empty();
        let kind = item["attack"].as_str().unwrap_or("?").to_owned();
        let entry = caught_by_kind.entry(kind).or_default();
        entry.1 += 1;
        if caught {
            entry.0 += 1;
        } else {
            missed.push(item["id"].to_string());
        }
    }
    let real_fp = false_positives.len() as f64 / real.len() as f64;
    let clean_total = real.len() + tricky.len();
    let fp_total = false_positives.len() + tricky_positives.len();
    let caught = poisoned.len() - missed.len();
    let recall = caught as f64 / poisoned.len() as f64;
    let precision = caught as f64 / (caught + fp_total) as f64;
    println!(
        "poisoning checks: {} poisoned, {} real clean, {} tricky clean",
        poisoned.len(),
        real.len(),
        tricky.len()
    );
    println!(
        "recall {:.3} ({caught}/{}), precision {:.3}, false positives: real {}/{} ({:.2} %), tricky {}/{}, all clean {:.2} %",
        recall,
        poisoned.len(),
        precision,
        false_positives.len(),
        real.len(),
        100.0 * real_fp,
        tricky_positives.len(),
        tricky.len(),
        100.0 * fp_total as f64 / clean_total as f64
    );
    for (kind, (hit, total)) in &caught_by_kind {
        println!("  {kind}: {hit}/{total}");
    }
    println!("missed: {missed:?}");
    println!("false positives: {false_positives:?} {tricky_positives:?}");
    assert!(
        real_fp < 0.01,
        "false positives on real tools: {false_positives:#?}"
    );
    // The bar is under 1 % of clean definitions held back; recall
    // is kept from sliding below what the rules reach now (some published
    // attacks are plain persuasive prose no keyword rule tells apart).
    assert!(
        (fp_total as f64) < 0.01 * clean_total as f64,
        "false positives: {false_positives:?} {tricky_positives:?}"
    );
    assert!(recall >= 0.75, "recall {recall}: missed {missed:?}");
}
