//! What the store's common operations cost on the embedded file, in one
//! process: 20 registrations, 10,000 tools written (500 per server), the
//! whole catalog read back (decoded, and as routing reads it), 100 server
//! lists and 1,000 audit entries. `cargo run --release --example
//! store_timing`; the figures are in BENCHMARKS.md ("The store's table
//! interface").

use mcp_aggregator::model::wire_name::WireNameRules;
use mcp_aggregator::model::{ServerRecord, ServerSource, Transport};
use mcp_aggregator::store::Store;
use std::time::Instant;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let t = Instant::now();
    let mut ids = Vec::new();
    for s in 0..20 {
        let r = ServerRecord::new(
            format!("server{s}"),
            Transport::Stdio {
                command: "x".into(),
                args: vec![],
                env: Default::default(),
                cwd: None,
            },
            ServerSource::Api,
        );
        store.insert_server(&r, "t").unwrap();
        ids.push(r.id);
    }
    println!("20 inserts: {:?}", t.elapsed());
    let rules = WireNameRules::default();
    let t = Instant::now();
    for (s, id) in ids.iter().enumerate() {
        let tools: Vec<serde_json::Value> = (0..500).map(|i| serde_json::json!({"name": format!("tool_{s}_{i}"), "description": "Does a thing with files and directories, carefully.", "inputSchema": {"type":"object","properties":{"path":{"type":"string","description":"where"}}}})).collect();
        store.replace_tools(*id, &tools, &rules).unwrap();
    }
    println!("10,000 tools written: {:?}", t.elapsed());
    let t = Instant::now();
    let all = store.all_tools().unwrap();
    println!("all_tools ({}): {:?}", all.len(), t.elapsed());
    let t = Instant::now();
    let mut n = 0;
    store.for_each_tool_route(|_| n += 1).unwrap();
    println!("for_each_tool_route ({n}): {:?}", t.elapsed());
    let t = Instant::now();
    for _ in 0..100 {
        store.list_servers().unwrap();
    }
    println!("100 list_servers: {:?}", t.elapsed());
    let t = Instant::now();
    for _ in 0..1000 {
        store.record_audit("a", "b", "c", "ok").unwrap();
    }
    println!("1000 audits: {:?}", t.elapsed());
}
