//! Figures for search over 10,000 realistic tools (20 servers × 500, made
//! from the real tool definitions in eval/catalog): indexing throughput with
//! the real model, hybrid and keyword search latency (hybrid includes the
//! query's embedding), a warm restart until searches answer (nothing
//! re-embedded), and memory with the model loaded.
//!
//! Run: `cargo bench --bench search`. Prints a Markdown table. In-process:
//! the same store, index and model the daemon uses, without HTTP.

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::{ms, rss_kib};
use mcp_aggregator::catalog::wire_name::WireNameRules;
use mcp_aggregator::index::eval::{load_cases, load_catalog};
use mcp_aggregator::index::{SearchIndex, SearchMode, SearchRequest};
use mcp_aggregator::model::{ServerRecord, ServerSource, ServerStatus, Transport};
use mcp_aggregator::store::Store;

const SERVERS: usize = 20;
const TOOLS_PER_SERVER: usize = 500;
const SEARCHES: usize = 500;

fn server(name: &str) -> ServerRecord {
    let now = chrono::Utc::now();
    ServerRecord {
        id: uuid::Uuid::new_v4(),
        name: name.to_owned(),
        description: None,
        transport: Transport::Stdio {
            command: "true".into(),
            args: Vec::new(),
            env: Default::default(),
            cwd: None,
        },
        health_check_url: None,
        auto_connect: false,
        priority: 0,
        status: ServerStatus::Disconnected,
        error_message: None,
        tool_count: 0,
        registered_at: now,
        updated_at: now,
        connected_at: None,
        last_health_check: None,
        source: ServerSource::Api,
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn latencies(index: &SearchIndex, queries: &[String], mode: SearchMode) -> (Duration, Duration) {
    let mut times: Vec<Duration> = queries
        .iter()
        .cycle()
        .take(SEARCHES)
        .map(|query| {
            let began = Instant::now();
            let outcome = index
                .search(&SearchRequest {
                    query: query.clone(),
                    limit: 10,
                    mode,
                    servers: None,
                    include_external: true,
                })
                .expect("search");
            assert!(!outcome.hits.is_empty() || mode == SearchMode::Keyword);
            began.elapsed()
        })
        .collect();
    times.sort();
    (pct(&times, 0.5), pct(&times, 0.99))
}

fn main() {
    if !common::is_bench_run("cargo bench --bench search") {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
    let catalog = load_catalog(&root.join("catalog")).expect("eval catalog");
    let real: Vec<&Value> = catalog.iter().flat_map(|s| s.tools.iter()).collect();
    let queries: Vec<String> = load_cases(&root.join("queries.jsonl"))
        .expect("eval queries")
        .into_iter()
        .map(|c| c.query)
        .collect();
    let temp = tempfile::tempdir().expect("temp dir");
    let data_dir = temp.path();

    // 20 servers, each with 500 of the real tools (a second round of names
    // where the catalog runs out), stored as discovery would store them.
    {
        let store = Store::open(data_dir).expect("store");
        let rules = WireNameRules::default();
        for s in 0..SERVERS {
            let record = server(&format!("server{s:02}"));
            store.insert_server(&record, "bench").expect("server");
            let tools: Vec<Value> = (0..TOOLS_PER_SERVER)
                .map(|i| {
                    let mut tool = real[(i + s * 37) % real.len()].clone();
                    if i >= real.len() {
                        let name = format!("{}_v2", tool["name"].as_str().unwrap_or("tool"));
                        tool["name"] = json!(name);
                    }
                    tool
                })
                .collect();
            store
                .replace_tools(record.id, &tools, &rules)
                .expect("tools");
        }
    }
    let total = SERVERS * TOOLS_PER_SERVER;

    // Cold: every text embedded.
    let store = Arc::new(Store::open(data_dir).expect("store"));
    let index = SearchIndex::open(Arc::clone(&store), data_dir).expect("index");
    let began = Instant::now();
    index.load_model();
    let model_load = began.elapsed();
    assert!(index.semantic_available(), "{:?}", index.model_warning());
    let began = Instant::now();
    index.sync(false).expect("index");
    let indexing = began.elapsed();
    let (hybrid_p50, hybrid_p99) = latencies(&index, &queries, SearchMode::Hybrid);
    let (keyword_p50, keyword_p99) = latencies(&index, &queries, SearchMode::Keyword);
    let (semantic_p50, _) = latencies(&index, &queries, SearchMode::Semantic);
    drop(index);
    drop(store);

    // Warm restart: open, load the model, verify against the store, answer.
    let began = Instant::now();
    let store = Arc::new(Store::open(data_dir).expect("store"));
    let index = SearchIndex::open(Arc::clone(&store), data_dir).expect("index");
    index.load_model();
    index.sync(false).expect("sync");
    let answered = index
        .search(&SearchRequest {
            query: "create an issue".into(),
            limit: 10,
            mode: SearchMode::Hybrid,
            servers: None,
            include_external: true,
        })
        .expect("search");
    let warm = began.elapsed();
    assert_eq!(answered.tools_searched, total);
    let embedded_again = index.progress().borrow().clone();
    let rss = rss_kib(std::process::id());

    println!("| figure | value |");
    println!("| --- | --- |");
    println!("| tools | {total} ({SERVERS} servers x {TOOLS_PER_SERVER}) |");
    println!(
        "| model load (runtime + model) | {:.0} ms |",
        ms(model_load)
    );
    println!(
        "| cold indexing, every text embedded (2 per tool) | {:.1} s = {:.0} tools/s |",
        indexing.as_secs_f64(),
        total as f64 / indexing.as_secs_f64()
    );
    println!(
        "| hybrid search p50 / p99 (with query embedding, {SEARCHES} queries) | {:.2} ms / {:.2} ms |",
        ms(hybrid_p50),
        ms(hybrid_p99)
    );
    println!("| semantic search p50 | {:.2} ms |", ms(semantic_p50));
    println!(
        "| keyword search p50 / p99 | {:.3} ms / {:.3} ms |",
        ms(keyword_p50),
        ms(keyword_p99)
    );
    println!(
        "| warm restart to first answer over all tools (nothing re-embedded: {} of {} indexed) | {:.0} ms |",
        embedded_again.indexed_tools,
        embedded_again.total_tools,
        ms(warm)
    );
    println!(
        "| process RSS with the model and {total} tools loaded | {:.0} MiB |",
        rss as f64 / 1024.0
    );
}
