//! Search quality floors over the development evaluation (eval/): real
//! servers' tools, queries with their right answers, the real model and
//! indexes. The figures themselves come from `cargo run --release --example
//! search_eval`; these floors sit a little under them so quality cannot
//! slip unnoticed.

use mcp_aggregator::eval::{build_index, classify_skills, load_cases, load_catalog, metrics, run};
use mcp_aggregator::index::SearchMode;
use std::path::Path;

#[test]
fn search_quality_holds_its_floors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
    let catalog = load_catalog(&root.join("catalog")).unwrap();
    let cases = load_cases(&root.join("queries.jsonl")).unwrap();
    assert!(catalog.len() >= 30, "{} servers", catalog.len());
    assert!(cases.len() >= 150, "{} queries", cases.len());
    let dir = tempfile::tempdir().unwrap();
    let index = build_index(dir.path(), &catalog).unwrap();
    assert!(index.semantic_available(), "{:?}", index.model_warning());
    // Skills as the daemon has them (the ranking's skill step uses them).
    assert_eq!(classify_skills(&index).unwrap(), 418);

    // (mode, R@5 floor, MRR@10 floor)
    for (mode, recall_at_5, mrr_at_10) in [
        (SearchMode::Keyword, 0.76, 0.68),
        (SearchMode::Semantic, 0.86, 0.80),
        (SearchMode::Hybrid, 0.90, 0.82),
    ] {
        let m = metrics(&run(&index, &cases, mode).unwrap());
        assert!(
            m.recall_at_5 >= recall_at_5 && m.mrr_at_10 >= mrr_at_10,
            "{mode:?}: R@5 {:.3} (floor {recall_at_5}), MRR@10 {:.3} (floor {mrr_at_10})",
            m.recall_at_5,
            m.mrr_at_10
        );
    }
}
