//! Where an HNSW graph starts to pay (issue 12, item 7): the exact scan of
//! `index::vector` against its `hnsw_rs` graph (f16 vectors, `DotF16`) at
//! 20,000 to 200,000 vectors — build time, query time, and the graph's
//! recall@10 of tools against the exact scan; `--sweep` adds hnsw_rs alone
//! on f32 (`DistDot`, SIMD) at each links and search width.
//!
//! Run: `cargo bench --bench vectors` (`-- --sweep` adds hnsw_rs alone at
//! other links and widths). The vectors are made from the real
//! model's embeddings of the evaluation's tools: each synthetic tool blends
//! two real ones and adds noise, so any size has a real catalog's spread;
//! the queries are the evaluation's, embedded by the same model.

mod common;

use common::rss_kib;
use hnsw_rs::prelude::{DistDot, Hnsw};
use mcp_aggregator::eval::{load_cases, load_catalog};
use mcp_aggregator::index::VectorIndex;
use mcp_aggregator::index::embedder::Embedder;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [20_000, 50_000, 100_000, 200_000];
/// Vectors per tool, as the index keeps them.
const PER_TOOL: usize = 2;
const K: usize = 10;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    if !common::is_bench_run("cargo bench --bench vectors") {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
    let catalog = load_catalog(&root.join("catalog")).expect("catalog");
    let texts: Vec<String> = catalog
        .iter()
        .flat_map(|s| {
            s.tools.iter().map(move |t| {
                format!(
                    "{} ({}): {}",
                    t["name"].as_str().unwrap_or_default(),
                    s.server,
                    t["description"].as_str().unwrap_or_default()
                )
            })
        })
        .collect();
    let queries: Vec<String> = load_cases(&root.join("queries.jsonl"))
        .expect("queries")
        .into_iter()
        .map(|c| c.query)
        .collect();
    let embedder = Embedder::load().expect("model");
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let bases = embedder
        .embed_in_background(&refs, true, &std::sync::atomic::AtomicBool::new(false))
        .expect("embed tools");
    let refs: Vec<&str> = queries.iter().map(String::as_str).collect();
    let queries = embedder.embed(&refs).expect("embed queries");
    drop(embedder);

    let sweep = std::env::args().any(|a| a == "--sweep");
    println!(
        "| vectors (tools) | exact p50 / p99 | graph | build | graph p50 / p99 | recall@10 vs exact | RSS added by the graph |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for size in SIZES {
        let tools = size / PER_TOOL;
        // Each synthetic tool blends two real tools (a random share of a
        // second one) and noise: a continuous spread like a large real
        // catalog's, not hundreds of copies of each of 418 points.
        let vectors: Vec<Vec<f32>> = (0..size)
            .map(|i| common::blended(&bases, i / PER_TOOL, i % PER_TOOL))
            .collect();
        let mut exact = VectorIndex::new(bases[0].len());
        for tool in 0..tools {
            exact.insert(
                Arc::from(format!("t{tool}")),
                "",
                true,
                &vectors[tool * PER_TOOL..(tool + 1) * PER_TOOL],
            );
        }
        let mut exact_times = Vec::new();
        let mut truth: Vec<Vec<Arc<str>>> = Vec::new();
        for query in &queries {
            let began = Instant::now();
            let found = exact.search(query, 50, |_| true);
            exact_times.push(began.elapsed());
            truth.push(found.into_iter().take(K).map(|(t, _)| t).collect());
        }
        exact_times.sort();
        let exact_cell = format!(
            "{:.2} / {:.2} ms",
            common::ms(pct(&exact_times, 0.5)),
            common::ms(pct(&exact_times, 0.99))
        );

        // The index's own graph, built as the indexer builds it: one
        // thread, from the matrix, which it then replaces.
        let before = rss_kib(std::process::id());
        let began = Instant::now();
        let built = exact
            .build_graph(&std::sync::atomic::AtomicBool::new(false))
            .expect("built");
        let build = began.elapsed();
        let added = rss_kib(std::process::id()).saturating_sub(before);
        let mut graph = exact;
        graph.install(built);
        let mut times = Vec::new();
        let mut hits = 0usize;
        for (query, truth) in queries.iter().zip(&truth) {
            let began = Instant::now();
            // As a search asks: 50 candidate tools.
            let found = graph.search(query, 50, |_| true);
            times.push(began.elapsed());
            let top: HashSet<&Arc<str>> = found.iter().take(K).map(|(t, _)| t).collect();
            hits += truth.iter().filter(|t| top.contains(t)).count();
        }
        times.sort();
        println!(
            "| {size} ({tools}) | {exact_cell} | index ({}) | {:.1} s (1 thread) | {:.2} / {:.2} ms | {:.3} | {:.0} MiB |",
            graph.shape(),
            build.as_secs_f64(),
            common::ms(pct(&times, 0.5)),
            common::ms(pct(&times, 0.99)),
            hits as f64 / (truth.len() * K) as f64,
            added as f64 / 1024.0
        );
        drop(graph);
        mcp_aggregator::memory::release_freed();

        if !sweep {
            continue;
        }
        // `--sweep`: hnsw_rs alone at other links and widths (how the
        // index's settings were chosen).
        for m in [16usize, 32] {
            let before = rss_kib(std::process::id());
            let began = Instant::now();
            let graph: Hnsw<f32, DistDot> = Hnsw::new(m, size, 16, 200, DistDot {});
            let data: Vec<(&Vec<f32>, usize)> =
                vectors.iter().enumerate().map(|(i, v)| (v, i)).collect();
            graph.parallel_insert(&data);
            let build = began.elapsed();
            let added = rss_kib(std::process::id()).saturating_sub(before);
            for ef in [128usize, 256, 512] {
                let mut times = Vec::new();
                let mut hits = 0usize;
                for (query, truth) in queries.iter().zip(&truth) {
                    let began = Instant::now();
                    let found = graph.search(query, K * PER_TOOL, ef);
                    let mut seen: Vec<String> = Vec::new();
                    for n in found {
                        let tool = format!("t{}", n.d_id / PER_TOOL);
                        if !seen.contains(&tool) {
                            seen.push(tool);
                        }
                        if seen.len() == K {
                            break;
                        }
                    }
                    times.push(began.elapsed());
                    hits += truth
                        .iter()
                        .filter(|t| seen.iter().any(|s| s == &***t))
                        .count();
                }
                times.sort();
                println!(
                    "| {size} ({tools}) | {exact_cell} | hnsw_rs, {m} links, width {ef} | {:.1} s (2 threads) | {:.2} / {:.2} ms | {:.3} | {:.0} MiB |",
                    build.as_secs_f64(),
                    common::ms(pct(&times, 0.5)),
                    common::ms(pct(&times, 0.99)),
                    hits as f64 / (truth.len() * K) as f64,
                    added as f64 / 1024.0
                );
            }
            drop(graph);
            mcp_aggregator::memory::release_freed();
        }
    }
}
