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
use mcp_aggregator::eval::{load_cases, load_catalog};
use mcp_aggregator::index::VectorIndex;
use mcp_aggregator::index::text::{ServerNaming, tool_texts};
use mcp_aggregator::index::{SearchIndex, SearchMode, SearchRequest, embedder};
use mcp_aggregator::model::wire_name::WireNameRules;
use mcp_aggregator::model::{ServerRecord, ServerSource, Transport};
use mcp_aggregator::store::{Store, embedding_key};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const SERVERS: usize = 20;
const TOOLS_PER_SERVER: usize = 500;
const SEARCHES: usize = 500;

/// A search for the 10 best tools of every server.
fn ten(query: impl Into<String>, mode: SearchMode) -> SearchRequest {
    SearchRequest {
        query: query.into(),
        limit: 10,
        mode,
        servers: None,
        skills: None,
        tools: None,
        include_external: true,
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
            let outcome = index.search(&ten(query.as_str(), mode)).expect("search");
            assert!(!outcome.hits.is_empty() || mode == SearchMode::Keyword);
            began.elapsed()
        })
        .collect();
    times.sort();
    (pct(&times, 0.5), pct(&times, 0.99))
}

/// `servers` servers, each with 500 of the real tools (a second round of
/// names where the catalog runs out), stored as discovery would store them.
/// Each is registered as our fixture server serving exactly those tools
/// (`--tools-file`), so a daemon connects to it, finds nothing changed,
/// and its searches find tools of available servers.
fn seed(data_dir: &std::path::Path, real: &[&Value], servers: usize) {
    let store = Store::open(data_dir).expect("store");
    let rules = WireNameRules::default();
    let lists = data_dir.join("tool-lists");
    std::fs::create_dir_all(&lists).expect("tool lists dir");
    for s in 0..servers {
        let list = lists.join(format!("server{s:03}.json"));
        let record = ServerRecord::new(
            format!("server{s:03}"),
            Transport::Stdio {
                command: FIXTURE.into(),
                args: vec!["--tools-file".into(), list.to_string_lossy().into_owned()],
                env: Default::default(),
                cwd: None,
            },
            ServerSource::Api,
        );
        store.insert_server(&record, "bench").expect("server");
        let mut seen = std::collections::HashSet::new();
        let tools: Vec<Value> = (0..TOOLS_PER_SERVER)
            .map(|i| {
                let mut tool = real[(i + s * 37) % real.len()].clone();
                // Several real servers share names (create_issue): one
                // server needs them distinct.
                let base = tool["name"].as_str().unwrap_or("tool").to_owned();
                let mut name = base.clone();
                let mut n = 2;
                while !seen.insert(name.clone()) {
                    name = format!("{base}_v{n}");
                    n += 1;
                }
                tool["name"] = json!(name);
                // As the fixture (rmcp) will list it, so discovery finds
                // it unchanged.
                serde_json::from_value::<rmcp::model::Tool>(tool)
                    .and_then(serde_json::to_value)
                    .expect("a real tool rmcp reads")
            })
            .collect();
        std::fs::write(&list, serde_json::to_vec(&tools).expect("json")).expect("tool list");
        store
            .replace_tools(record.id, &tools, &rules)
            .expect("tools");
    }
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
    // SEARCH_BENCH_DIR keeps the data dir for a look afterwards.
    let temp = tempfile::tempdir().expect("temp dir");
    let kept = std::env::var_os("SEARCH_BENCH_DIR").map(std::path::PathBuf::from);
    if let Some(dir) = &kept {
        let _ = std::fs::remove_dir_all(dir);
    }
    let data_dir = kept.as_deref().unwrap_or(temp.path());

    // SEARCH_BENCH_TOOLS=100000 measures a large catalog instead.
    if let Some(total) = std::env::var("SEARCH_BENCH_TOOLS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|t| *t > SERVERS * TOOLS_PER_SERVER)
    {
        large_catalog(total, &real, &queries, data_dir);
        return;
    }
    let total = SERVERS * TOOLS_PER_SERVER;
    // SEARCH_BENCH_COLD=1 measures only the daemon's cold build with
    // searches running (a minute or two instead of the whole run).
    if std::env::var_os("SEARCH_BENCH_COLD").is_some() {
        let cold = cold_daemon(&real, &queries, total);
        println!("| figure | value |\n| --- | --- |");
        println!(
            "| REST hybrid search while the daemon builds the cold index: p50 / p99 ({} searches) | {:.1} ms / {:.1} ms |",
            cold.during.len(),
            ms(pct(&cold.during, 0.5)),
            ms(pct(&cold.during, 0.99))
        );
        cold.print_indexing(total);
        return;
    }
    seed(data_dir, &real, SERVERS);

    // Cold: every text embedded.
    let store = Arc::new(Store::open(data_dir).expect("store"));
    let index = SearchIndex::open(Arc::clone(&store), data_dir).expect("index");
    let began = Instant::now();
    index.load_model();
    let model_load = began.elapsed();
    assert!(index.semantic_available(), "{:?}", index.model_warning());
    let began = Instant::now();
    // When every tool has its first vector (findable by meaning), read off
    // the index's progress while the sync runs.
    let mut progress = index.progress();
    let first_pass = std::thread::spawn(move || {
        let runtime = common::bench_runtime();
        loop {
            {
                let p = progress.borrow_and_update();
                if p.total_tools == total && p.indexed_tools == total && p.syncing {
                    return Some(began.elapsed());
                }
                if p.total_tools == total && !p.syncing {
                    return None;
                }
            }
            if runtime.block_on(progress.changed()).is_err() {
                return None;
            }
        }
    });
    index.sync(false).expect("index");
    let indexing = began.elapsed();
    let first_pass = first_pass.join().ok().flatten();
    eprintln!("indexed {total} tools in {:.1} s", indexing.as_secs_f64());
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
        .search(&ten("create an issue", SearchMode::Hybrid))
        .expect("search");
    let warm = began.elapsed();
    assert_eq!(answered.tools_searched, total);
    let embedded_again = index.progress().borrow().clone();
    let bench_rss = rss_kib(std::process::id());
    drop(index);
    drop(store);

    // The daemon itself on this data dir: its memory once the model is
    // loaded and all 10,000 tools are indexed (from the cache).
    let port = common::free_port();
    let mut daemon = common::spawn_daemon(data_dir, port);
    let began = Instant::now();
    let status_url = format!("http://127.0.0.1:{port}/api/v1/search/status");
    let daemon_ready = loop {
        let status: Option<Value> = std::process::Command::new("curl")
            .args(["-sf", &status_url])
            .output()
            .ok()
            .and_then(|o| serde_json::from_slice(&o.stdout).ok());
        if let Some(status) = status
            && status["syncing"] == false
            && status["indexed_tools"] == total
            && status["semantic"] == true
        {
            break began.elapsed();
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "the daemon never indexed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The model loads on first need: one search loads it.
    search_once(port, "create an issue");
    let daemon_rss_ready = rss_kib(daemon.id());
    // The sync's transient copies are handed back right after it; sample
    // for a few seconds to report where memory settles.
    let mut daemon_rss = daemon_rss_ready;
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(100));
        daemon_rss = daemon_rss.min(rss_kib(daemon.id()));
    }
    common::stop(&mut daemon);

    let cold = cold_daemon(&real, &queries, total);

    let idle = idle_rss_per_mode();

    println!("| figure | value |");
    println!("| --- | --- |");
    for (mode, kib) in &idle {
        println!(
            "| idle daemon RSS, no servers, `{mode}` | {:.0} MiB |",
            *kib as f64 / 1024.0
        );
    }
    println!("| tools | {total} ({SERVERS} servers x {TOOLS_PER_SERVER}) |");
    println!(
        "| model load (runtime + model) | {:.0} ms |",
        ms(model_load)
    );
    if let Some(first) = first_pass {
        println!(
            "| cold indexing, first pass: every tool findable by meaning (1 text per tool) | {:.1} s = {:.0} tools/s |",
            first.as_secs_f64(),
            total as f64 / first.as_secs_f64()
        );
    }
    println!(
        "| cold indexing, both passes: every text embedded (2 per tool) | {:.1} s = {:.0} tools/s |",
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
        "| daemon start to all {total} tools indexed (model loaded, vectors from the cache) | {:.0} ms |",
        ms(daemon_ready)
    );
    println!(
        "| daemon RSS with the model loaded and {total} tools indexed: settled (at the moment indexing finished) | {:.0} MiB ({:.0} MiB) |",
        daemon_rss as f64 / 1024.0,
        daemon_rss_ready as f64 / 1024.0
    );
    println!(
        "| this bench process's RSS after cold indexing and the warm restart | {:.0} MiB |",
        bench_rss as f64 / 1024.0
    );
    println!(
        "| REST hybrid search while the daemon builds the cold index: p50 / p99 ({} searches) | {:.1} ms / {:.1} ms |",
        cold.during.len(),
        ms(pct(&cold.during, 0.5)),
        ms(pct(&cold.during, 0.99))
    );
    println!(
        "| classifying the {total} tools after the cold index (one pass in the daemon, local classifier) | {:.0} ms ({} tools) |",
        cold.classified["last_pass_ms"].as_f64().unwrap_or_default(),
        cold.classified["last_pass_tools"]
    );
    println!(
        "| REST hybrid search after it: p50 / p99 ({SEARCHES} searches, every server connected) | {:.1} ms / {:.1} ms |",
        ms(pct(&cold.after, 0.5)),
        ms(pct(&cold.after, 0.99))
    );
    cold.print_indexing(total);
}

/// What a daemon building a cold index showed.
struct ColdDaemon {
    /// REST searches while it indexed, sorted.
    during: Vec<Duration>,
    /// REST searches after it and the classification, sorted.
    after: Vec<Duration>,
    classified: Value,
    /// From its start to every tool findable by meaning (first vectors).
    first_pass: Option<Duration>,
    /// From its start to every text embedded and the index settled.
    indexed: Duration,
    /// The daemon's CPU time (user and system) by then, in seconds: how
    /// much of the two cores the build kept busy.
    cpu_indexed: f64,
    /// The daemon's largest RSS sampled while it indexed, and its RSS once
    /// idle after the classification, in KiB.
    peak_rss_kib: u64,
    settled_rss_kib: u64,
}

impl ColdDaemon {
    fn print_indexing(&self, total: usize) {
        if let Some(first) = self.first_pass {
            println!(
                "| the daemon's cold indexing with searches running, first pass (every tool findable by meaning) | {:.1} s = {:.0} tools/s |",
                first.as_secs_f64(),
                total as f64 / first.as_secs_f64()
            );
        }
        println!(
            "| the daemon's cold indexing with searches running, both passes (from its start, discovery included) | {:.1} s = {:.0} tools/s |",
            self.indexed.as_secs_f64(),
            total as f64 / self.indexed.as_secs_f64()
        );
        println!(
            "| the daemon's CPU time until both passes were done (user + system) | {:.1} s = {:.2} cores busy on average |",
            self.cpu_indexed,
            self.cpu_indexed / self.indexed.as_secs_f64()
        );
        println!(
            "| the daemon's RSS during the cold build, largest sampled / once idle after it | {:.0} MiB / {:.0} MiB |",
            self.peak_rss_kib as f64 / 1024.0,
            self.settled_rss_kib as f64 / 1024.0
        );
    }
}

/// A release daemon building a cold index of the tools (nothing cached),
/// searched through REST meanwhile and after.
fn cold_daemon(real: &[&Value], queries: &[String], total: usize) -> ColdDaemon {
    let cold = tempfile::tempdir().expect("temp dir");
    seed(cold.path(), real, SERVERS);
    let port = common::free_port();
    let mut daemon = common::spawn_daemon(cold.path(), port);
    let began = Instant::now();
    let measured =
        common::bench_runtime().block_on(rest_searches(port, daemon.id(), queries, total, began));
    common::stop(&mut daemon);
    assert!(
        !measured.during.is_empty(),
        "no search ran while the index was built"
    );
    measured
}

/// `POST /api/v1/search` every 25 ms while the daemon indexes (both
/// passes), then `SEARCHES` in a row after it and the classification that
/// follows.
/// Both sorted.
async fn rest_searches(
    port: u16,
    pid: u32,
    queries: &[String],
    total: usize,
    began: Instant,
) -> ColdDaemon {
    common::wait_healthz(port).await;
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}/api/v1/search");
    let search = |query: &str| {
        let request = client
            .post(&base)
            .json(&json!({"query": query, "limit": 10}));
        async move {
            let began = Instant::now();
            let response = request.send().await.expect("search");
            assert_eq!(response.status(), 200);
            let _ = response.bytes().await;
            began.elapsed()
        }
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut during = Vec::new();
    let mut asked = queries.iter().cycle();
    let mut first_pass = None;
    let mut peak_rss_kib = 0;
    let (indexed, cpu_indexed) = loop {
        peak_rss_kib = peak_rss_kib.max(rss_kib(pid));
        let status: Value = client
            .get(format!("{base}/status"))
            .send()
            .await
            .expect("status")
            .json()
            .await
            .expect("status json");
        let indexed = status["indexed_tools"].as_u64().unwrap_or(0) as usize;
        if status["semantic"] == true && status["syncing"] == false && indexed == total {
            break (began.elapsed(), common::cpu_seconds(pid));
        }
        if first_pass.is_none() && status["semantic"] == true && indexed == total {
            first_pass = Some(began.elapsed());
        }
        if status["semantic"] == true && (indexed < total || status["syncing"] == true) {
            during.push(search(asked.next().expect("queries")).await);
        }
        assert!(
            Instant::now() < deadline,
            "the daemon never finished indexing"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    // Then classification (in the background after the sync): "after"
    // means after all of it.
    let skills_url = format!("http://127.0.0.1:{port}/api/v1/skills/status");
    let classified = loop {
        let status: Value = client
            .get(&skills_url)
            .send()
            .await
            .expect("skills status")
            .json()
            .await
            .expect("skills json");
        if status["classified"].as_u64() == Some(total as u64) {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "classification never finished: {status}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };

    // Every server connected, and the daemon idle again.
    wait_all_connected(&client, &base, SERVERS, total, deadline).await;
    common::wait_until_idle(pid, 0.05).await;
    let settled_rss_kib = rss_kib(pid);
    let mut after = Vec::with_capacity(SEARCHES);
    for query in queries.iter().cycle().take(SEARCHES) {
        after.push(search(query).await);
    }
    during.sort();
    after.sort();
    ColdDaemon {
        during,
        after,
        classified,
        first_pass,
        indexed,
        cpu_indexed,
        peak_rss_kib,
        settled_rss_kib,
    }
}

/// RSS of an idle daemon with nothing registered, per `--search` mode, and
/// in hybrid mode once a search has loaded the model.
fn idle_rss_per_mode() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for mode in ["off", "keyword", "hybrid"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = common::free_port();
        let mut daemon = common::spawn_daemon_with(dir.path(), port, &["--search", mode]);
        let health = format!("http://127.0.0.1:{port}/healthz");
        let began = Instant::now();
        while !std::process::Command::new("curl")
            .args(["-sf", &health])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            assert!(began.elapsed() < Duration::from_secs(30), "no daemon");
            std::thread::sleep(Duration::from_millis(20));
        }
        let settled = |pid: u32| {
            let mut least = u64::MAX;
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(50));
                least = least.min(rss_kib(pid));
            }
            least
        };
        out.push((format!("--search {mode}"), settled(daemon.id())));
        if mode == "hybrid" {
            search_once(port, "read a file");
            out.push((
                "--search hybrid, after one search loaded the model".to_owned(),
                settled(daemon.id()),
            ));
        }
        common::stop(&mut daemon);
    }
    out
}

/// One `POST /api/v1/search` to the daemon on `port` (through curl, as the
/// rest of this bench's daemon checks), answer ignored.
fn search_once(port: u16, query: &str) {
    let _ = std::process::Command::new("curl")
        .args([
            "-sf",
            "-H",
            "content-type: application/json",
            "-d",
            &json!({ "query": query }).to_string(),
            &format!("http://127.0.0.1:{port}/api/v1/search"),
        ])
        .output();
}

/// A large catalog (`SEARCH_BENCH_TOOLS`, e.g. 100,000 tools): stored as
/// discovery stores them, their vectors put in the embedding cache made
/// from the real model's embeddings of the real tools (`common::blended`).
/// Embedding 200,000 texts for real would take ~25 min on 2 cores and
/// measures nothing the 10,000-tool run does not (cold indexing speed);
/// everything after the cache — index, graph, search, restart, memory — is
/// the daemon's own path, and queries are embedded by the model.
fn large_catalog(total: usize, real: &[&Value], queries: &[String], data_dir: &std::path::Path) {
    let servers = total.div_ceil(TOOLS_PER_SERVER);
    let total = servers * TOOLS_PER_SERVER;
    let began = Instant::now();
    seed(data_dir, real, servers);
    let store = Arc::new(Store::open(data_dir).expect("store"));
    let index = SearchIndex::open(Arc::clone(&store), data_dir).expect("index");
    index.load_model();
    let base_texts: Vec<String> = real
        .iter()
        .map(|t| {
            format!(
                "{}: {}",
                t["name"].as_str().unwrap_or_default(),
                t["description"].as_str().unwrap_or_default()
            )
        })
        .collect();
    let bases = index
        .embed_texts(&base_texts)
        .expect("embed the real tools");
    let base_of: std::collections::HashMap<&str, usize> = real
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| (t["description"].as_str().unwrap_or_default(), i))
        .collect();
    let tools = store.all_tools().expect("tools");
    assert_eq!(tools.len(), total);
    let mut entries: Vec<([u8; 32], Vec<f32>)> = Vec::new();
    let naming = ServerNaming::for_store_of(store.list_servers().expect("servers").len());
    for (n, tool) in tools.iter().enumerate() {
        let base = base_of
            .get(tool.description.as_deref().unwrap_or_default())
            .copied()
            .unwrap_or(n % bases.len());
        // `blended` takes its first vector from `t % bases.len()`.
        let synthetic = n * bases.len() + base;
        for (nth, text) in tool_texts(tool, &tool.skill_ids, naming)
            .dense
            .iter()
            .enumerate()
        {
            entries.push((
                embedding_key(embedder::MODEL_ID, text),
                common::blended(&bases, synthetic, nth),
            ));
        }
    }
    for chunk in entries.chunks(10_000) {
        let refs: Vec<([u8; 32], &[f32])> = chunk.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        store.put_embeddings(&refs).expect("cache");
    }
    let vectors = entries.len();
    drop(entries);
    drop(tools);
    eprintln!(
        "seeded {total} tools and {vectors} vectors in {:.1} s",
        began.elapsed().as_secs_f64()
    );

    // The first sync: every vector from the cache, the graph built.
    let began = Instant::now();
    index.sync(false).expect("sync");
    let first_sync = began.elapsed();
    eprintln!("first sync {:.1} s", first_sync.as_secs_f64());
    let (hybrid_p50, hybrid_p99) = latencies(&index, queries, SearchMode::Hybrid);
    let (semantic_p50, semantic_p99) = latencies(&index, queries, SearchMode::Semantic);
    let (keyword_p50, _) = latencies(&index, queries, SearchMode::Keyword);

    // Recall@10 of the vector side against the exact scan of the same
    // vectors (the oracle).
    let mut exact = VectorIndex::new(embedder::DIMENSION);
    for (tool, vectors) in index.tool_vectors(|_| true).expect("vectors") {
        exact.insert(tool, "", true, &vectors);
    }
    let query_vectors = index.embed_texts(queries).expect("embed queries");
    let (mut hits, mut asked) = (0usize, 0usize);
    let mut exact_times = Vec::new();
    for query in &query_vectors {
        let began = Instant::now();
        let truth = exact.search(query, 10, |_| true);
        exact_times.push(began.elapsed());
        let found: std::collections::HashSet<Arc<str>> = index
            .nearest_tools(query, 10)
            .expect("nearest")
            .into_iter()
            .map(|(tool, _)| tool)
            .collect();
        asked += truth.len();
        hits += truth.iter().filter(|(t, _)| found.contains(t)).count();
    }
    exact_times.sort();
    let recall = hits as f64 / asked.max(1) as f64;
    let backend = index
        .vector_shape()
        .map(|s| s.to_string())
        .unwrap_or_default();
    drop(exact);
    drop(index);
    drop(store);
    mcp_aggregator::memory::release_freed();

    // Warm restart: open, verify against the store, answer.
    let began = Instant::now();
    let store = Arc::new(Store::open(data_dir).expect("store"));
    let index = SearchIndex::open(Arc::clone(&store), data_dir).expect("index");
    index.sync(false).expect("sync");
    let synced = began.elapsed();
    let answered = index
        .search(&ten("create an issue", SearchMode::Hybrid))
        .expect("search");
    let warm = began.elapsed();
    assert_eq!(answered.tools_searched, total);
    drop(index);
    drop(store);

    // The daemon on this data dir: start to all tools indexed, memory
    // once a search loaded the model, REST latency.
    let port = common::free_port();
    let mut daemon = common::spawn_daemon(data_dir, port);
    let daemon_pid = daemon.id();
    let began = Instant::now();
    let (ready, after) = common::bench_runtime().block_on(async {
        common::wait_healthz(port).await;
        let client = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}/api/v1/search");
        let ready = loop {
            let status: Value = client
                .get(format!("{base}/status"))
                .send()
                .await
                .expect("status")
                .json()
                .await
                .expect("status json");
            if status["syncing"] == false && status["indexed_tools"] == total {
                break began.elapsed();
            }
            assert!(
                began.elapsed() < Duration::from_secs(600),
                "the daemon never indexed: {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // Then its classification (in the background after the sync).
        loop {
            let status: Value = client
                .get(format!("http://127.0.0.1:{port}/api/v1/skills/status"))
                .send()
                .await
                .expect("skills status")
                .json()
                .await
                .expect("skills json");
            if status["classified"].as_u64() == Some(total as u64) {
                break;
            }
            assert!(
                began.elapsed() < Duration::from_secs(900),
                "classification never finished: {status}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every server connected (its tools searchable) and the start-up
        // work done: what is measured next is search alone.
        let deadline = began + Duration::from_secs(900);
        wait_all_connected(&client, &base, servers, total, deadline).await;
        common::wait_until_idle(daemon_pid, 0.05).await;
        let mut after = Vec::with_capacity(SEARCHES);
        let mut found = 0usize;
        for query in queries.iter().cycle().take(SEARCHES + 20) {
            let began = Instant::now();
            let response = client
                .post(&base)
                .json(&json!({"query": query, "limit": 10}))
                .send()
                .await
                .expect("search");
            assert_eq!(response.status(), 200);
            let answer: Value = response.json().await.expect("search json");
            after.push(began.elapsed());
            found += answer["tools"].as_array().map_or(0, Vec::len);
        }
        assert!(found > 0, "the searches found nothing");
        // The first searches load the model: not part of the steady state.
        after.drain(..20);
        after.sort();
        (ready, after)
    });
    let mut daemon_rss = u64::MAX;
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(100));
        daemon_rss = daemon_rss.min(rss_kib(daemon.id()));
    }
    common::stop(&mut daemon);

    println!("| figure | value |");
    println!("| --- | --- |");
    println!("| tools (vectors) | {total} ({vectors}), {servers} servers x {TOOLS_PER_SERVER} |");
    println!("| vector index | {backend} |");
    println!(
        "| first sync: every vector from the cache into the index (and the graph built) | {:.1} s |",
        first_sync.as_secs_f64()
    );
    println!(
        "| hybrid search p50 / p99 (with query embedding, {SEARCHES} queries) | {:.2} ms / {:.2} ms |",
        ms(hybrid_p50),
        ms(hybrid_p99)
    );
    println!(
        "| semantic search p50 / p99 | {:.2} ms / {:.2} ms |",
        ms(semantic_p50),
        ms(semantic_p99)
    );
    println!("| keyword search p50 | {:.2} ms |", ms(keyword_p50));
    println!(
        "| exact scan of the same vectors p50 / p99 (no embedding) | {:.2} ms / {:.2} ms |",
        ms(pct(&exact_times, 0.5)),
        ms(pct(&exact_times, 0.99))
    );
    println!(
        "| recall@10 of the vector side against the exact scan ({} queries) | {recall:.3} |",
        query_vectors.len()
    );
    println!(
        "| warm restart: sync done / first answer over all tools | {:.0} ms / {:.0} ms |",
        ms(synced),
        ms(warm)
    );
    println!(
        "| daemon start to all {total} tools indexed | {:.1} s |",
        ready.as_secs_f64()
    );
    println!(
        "| daemon RSS, model loaded, all tools indexed and classified | {:.0} MiB |",
        daemon_rss as f64 / 1024.0
    );
    println!(
        "| REST hybrid search p50 / p99 ({SEARCHES} searches, every server connected) | {:.1} ms / {:.1} ms |",
        ms(pct(&after, 0.5)),
        ms(pct(&after, 0.99))
    );
}

/// Polls a search until it covers all `servers` and their `total` tools and
/// finds something (`base`: the daemon's search URL).
async fn wait_all_connected(
    client: &reqwest::Client,
    base: &str,
    servers: usize,
    total: usize,
    deadline: Instant,
) {
    loop {
        let answer: Value = client
            .post(base)
            .json(&json!({"query": "create an issue", "limit": 10}))
            .send()
            .await
            .expect("search")
            .json()
            .await
            .expect("search json");
        if answer["metadata"]["servers_searched"] == servers
            && answer["metadata"]["total_tools_searched"] == total
            && answer["tools"].as_array().is_some_and(|t| !t.is_empty())
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not every server connected: {}",
            answer["metadata"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
