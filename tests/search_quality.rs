//! Search quality floors over the development evaluation (eval/): real
//! servers' tools, queries with their right answers, the real model and
//! indexes. The figures themselves come from `cargo run --release --example
//! search_eval`; these floors sit a little under them so quality cannot
//! slip unnoticed.

use mcp_aggregator::eval::{
    build_index, classify_skills, intent_metrics, load_cases, load_catalog, load_compound, metrics,
    ranking, run,
};
use mcp_aggregator::index::{Levers, SearchIndex, SearchMode};
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

    // Requests that ask for two or three things at once: searched per
    // intent they rank every intent's tools higher than one search of the
    // whole request does (eval/compound.jsonl, both splits).
    let compound = load_compound(&root.join("compound.jsonl")).unwrap();
    assert!(compound.len() >= 60, "{} compound requests", compound.len());
    let score = |index: &SearchIndex| {
        let ranked: Vec<Vec<String>> = compound
            .iter()
            .map(|c| ranking(index, &c.query, SearchMode::Hybrid, 10).unwrap())
            .collect();
        intent_metrics(
            compound
                .iter()
                .zip(&ranked)
                .map(|(c, r)| (c.intents.as_slice(), r.as_slice())),
        )
    };
    let with_intents = score(&index);
    index.set_levers(Levers {
        intents: false,
        ..Levers::default()
    });
    let whole_only = score(&index);
    index.set_levers(Levers::default());
    assert!(
        with_intents.ndcg_at_10 >= 0.84
            && with_intents.complete_at_10 >= 0.9
            && with_intents.ndcg_at_10 >= whole_only.ndcg_at_10 + 0.04,
        "compound requests: nDCG@10 {:.3} per intent (floor 0.84), {:.3} as one search; every intent in the top 10 {:.3} (floor 0.9)",
        with_intents.ndcg_at_10,
        whole_only.ndcg_at_10,
        with_intents.complete_at_10
    );
}
