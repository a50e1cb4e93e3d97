//! Search on public tool-retrieval sets the team did not build: nDCG@10
//! of the hybrid ranking against the classic baselines (BM25, the dense
//! model alone, their reciprocal rank fusion), per set and per kind of
//! request (one tool wanted, or several at once). The baselines come twice:
//! built on our own keyword and dense sides (tuned: split identifiers,
//! stemming, two texts per tool), and textbook (`textbook_baselines`).
//!
//!     python3 eval/public/bfcl.py          # the sets, into target/public-eval
//!     cargo run --release --example public_eval [-- DIR]
//!
//! Each set is a directory with `catalog/` (recorded tool lists, as in
//! `eval/catalog`) and `requests.jsonl` (`query`, `intents`: one list of
//! right tool ids per thing asked).

use mcp_aggregator::eval::{
    Request, against_baselines, best_baseline, build_index, classify_skills, load_catalog,
    load_compound, textbook_baselines,
};
use mcp_aggregator::index::Levers;
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/public-eval"));
    let mut sets: Vec<PathBuf> = std::fs::read_dir(&root)
        .map_err(|err| {
            format!(
                "{}: {err} (run `python3 eval/public/bfcl.py` first)",
                root.display()
            )
        })?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.join("requests.jsonl").is_file())
        .collect();
    sets.sort();
    println!(
        "| set | requests | n | ranking | nDCG@10 | vs best baseline | vs best textbook baseline | intents@5 | all intents@10 |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let without_intents = Levers {
        intents: false,
        ..Levers::default()
    };
    for set in sets {
        let name = set
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let catalog = load_catalog(&set.join("catalog"))?;
        let requests = load_compound(&set.join("requests.jsonl"))?;
        let dir = tempfile::tempdir()?;
        let index = build_index(dir.path(), &catalog)?;
        classify_skills(&index)?;
        let all: Vec<Request> = requests
            .iter()
            .map(|r| (r.query.clone(), r.intents.clone()))
            .collect();
        let kinds: [(&str, Vec<Request>); 3] = [
            ("all", all.clone()),
            (
                "one tool",
                all.iter().filter(|r| r.1.len() == 1).cloned().collect(),
            ),
            (
                "several tools",
                all.iter().filter(|r| r.1.len() > 1).cloned().collect(),
            ),
        ];
        for (kind, requests) in kinds {
            if requests.is_empty() {
                continue;
            }
            let mut rows = textbook_baselines(&index, &requests)?;
            let textbook = rows.iter().map(|(_, m)| m.ndcg_at_10).fold(0.0, f64::max);
            rows.extend(against_baselines(
                &index,
                &requests,
                &[
                    ("hybrid, one search per request", without_intents),
                    ("hybrid (shipped)", Levers::default()),
                ],
            )?);
            let best = best_baseline(&rows);
            for (label, m) in rows {
                println!(
                    "| {name} | {kind} | {} | {label} | {:.3} | {:.2}x | {:.2}x | {:.3} | {:.3} |",
                    m.cases,
                    m.ndcg_at_10,
                    m.ndcg_at_10 / best.max(f64::EPSILON),
                    m.ndcg_at_10 / textbook.max(f64::EPSILON),
                    m.intents_at_5,
                    m.complete_at_10
                );
            }
        }
    }
    Ok(())
}
