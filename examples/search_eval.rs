//! Prints the search evaluation: Recall@1/5/10 and MRR@10 per mode over
//! the real servers' tools in eval/catalog and the queries in
//! eval/queries.jsonl (by kind of query, too).
//!
//!     cargo run --release --example search_eval [-- --misses]
//!
//! `--misses` lists the hybrid mode's queries whose answer is not first.

use mcp_aggregator::eval::{
    CaseResult, Request, against_baselines, best_baseline, build_index, case_of, classify_skills,
    held_out_servers, load_cases, load_catalog, load_compound, metrics, ranking, run,
    textbook_baselines,
};
use mcp_aggregator::index::{Levers, Normalisation, SearchMode, Weights};
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
    let show_misses = std::env::args().any(|a| a == "--misses");
    let catalog = load_catalog(&root.join("catalog"))?;
    let cases = load_cases(&root.join("queries.jsonl"))?;
    let tools: usize = catalog.iter().map(|s| s.tools.len()).sum();
    let dir = tempfile::tempdir()?;
    let started = std::time::Instant::now();
    let index = build_index(dir.path(), &catalog)?;
    // As the daemon does: tools classified into skills, skill vectors set
    // (the hierarchical step of the ranking uses them).
    classify_skills(&index)?;
    println!(
        "{} servers, {tools} tools, {} queries (indexed and classified in {:.1} s)\n",
        catalog.len(),
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    println!("| mode | kind | queries | R@1 | R@5 | R@10 | MRR@10 |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut hybrid: Vec<CaseResult> = Vec::new();
    for mode in [
        SearchMode::Keyword,
        SearchMode::Semantic,
        SearchMode::Hybrid,
    ] {
        let results = run(&index, &cases, mode)?;
        let mut kinds: Vec<Option<String>> = vec![None];
        for r in &results {
            let kind = r.case.kind.clone();
            if kind.is_some() && !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        for kind in kinds {
            let m = metrics(
                results
                    .iter()
                    .filter(|r| kind.is_none() || r.case.kind == kind),
            );
            println!(
                "| {mode:?} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                kind.as_deref().unwrap_or("all"),
                m.cases,
                m.recall_at_1,
                m.recall_at_5,
                m.recall_at_10,
                m.mrr_at_10
            );
        }
        if mode == SearchMode::Hybrid {
            hybrid = results;
        }
    }
    if std::env::args().any(|a| a == "--sweep") {
        println!(
            "\n| normalisation | dense weight | R@1 | R@5 | R@10 | MRR@10 |\n| --- | --- | --- | --- | --- | --- |"
        );
        for normalisation in [Normalisation::MinMax, Normalisation::ZScore] {
            for dense in [0.5f32, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9] {
                index.set_weights(Weights {
                    dense,
                    keyword: 1.0 - dense,
                    normalisation,
                });
                let m = metrics(&run(&index, &cases, SearchMode::Hybrid)?);
                println!(
                    "| {normalisation:?} | {dense:.2} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    m.recall_at_1, m.recall_at_5, m.recall_at_10, m.mrr_at_10
                );
            }
        }
    }
    if std::env::args().any(|a| a == "--levers") {
        levers(&root, &index, &cases)?;
    }
    if std::env::args().any(|a| a == "--tokens") {
        tokens(&index, &cases)?;
    }
    if std::env::args().any(|a| a == "--compound") {
        compound(&root, &index, &cases)?;
    }
    if show_misses {
        println!();
        for r in hybrid.iter().filter(|r| r.rank != Some(1)) {
            println!(
                "rank {:>4}  {:<60} want {:?}\n           got {:?}",
                r.rank.map_or("-".to_owned(), |n| n.to_string()),
                r.case.query,
                r.case.expected,
                &r.top[..r.top.len().min(5)]
            );
        }
    }
    Ok(())
}

/// Each ranking lever alone and together, on the queries of the tuning
/// servers and of the held-out ones (`eval/skills_labels.json`), by kind.
fn levers(
    root: &Path,
    index: &mcp_aggregator::index::SearchIndex,
    cases: &[mcp_aggregator::eval::EvalCase],
) -> Result<(), Box<dyn std::error::Error>> {
    let held_out = held_out_servers(root)?;
    let (held, tuning): (Vec<_>, Vec<_>) =
        cases.iter().cloned().partition(|c| case_of(c, &held_out));
    println!(
        "\n{} tuning queries, {} held-out queries\n",
        tuning.len(),
        held.len()
    );
    println!("| levers | split | kind | queries | R@1 | R@5 | R@10 | MRR@10 |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let settings = [
        ("none", Levers::OFF),
        (
            "synonyms 0.3",
            Levers {
                synonyms: 0.3,
                ..Levers::OFF
            },
        ),
        (
            "synonyms 0.6",
            Levers {
                synonyms: 0.6,
                ..Levers::OFF
            },
        ),
        (
            "skill boost 0.05",
            Levers {
                skill_boost: 0.05,
                ..Levers::OFF
            },
        ),
        (
            "skill boost 0.1",
            Levers {
                skill_boost: 0.1,
                ..Levers::OFF
            },
        ),
        (
            "skill boost 0.2",
            Levers {
                skill_boost: 0.2,
                ..Levers::OFF
            },
        ),
        (
            "feedback 0.3",
            Levers {
                feedback: 0.3,
                ..Levers::OFF
            },
        ),
        (
            "feedback 0.6",
            Levers {
                feedback: 0.6,
                ..Levers::OFF
            },
        ),
        ("default", Levers::default()),
    ];
    for (name, levers) in settings {
        index.set_levers(levers);
        for (split, set) in [("tuning", &tuning), ("held out", &held)] {
            let results = run(index, set, SearchMode::Hybrid)?;
            for kind in [None, Some("paraphrase")] {
                let m = metrics(
                    results
                        .iter()
                        .filter(|r| kind.is_none() || r.case.kind.as_deref() == kind),
                );
                println!(
                    "| {name} | {split} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    kind.unwrap_or("all"),
                    m.cases,
                    m.recall_at_1,
                    m.recall_at_5,
                    m.recall_at_10,
                    m.mrr_at_10
                );
            }
        }
    }
    index.set_levers(Levers::default());
    Ok(())
}

/// Requests with one intent (`queries.jsonl`) and with several
/// (`compound.jsonl`, tuning and held-out splits), each ranking scored by
/// nDCG@10 against the classic baselines: BM25, the dense model alone and
/// their reciprocal rank fusion.
fn compound(
    root: &Path,
    index: &mcp_aggregator::index::SearchIndex,
    single: &[mcp_aggregator::eval::EvalCase],
) -> Result<(), Box<dyn std::error::Error>> {
    let compound = load_compound(&root.join("compound.jsonl"))?;
    let mut splits: Vec<(&str, Vec<Request>)> = vec![(
        "one intent (queries.jsonl)",
        single
            .iter()
            .map(|c| (c.query.clone(), vec![c.expected.clone()]))
            .collect(),
    )];
    for split in ["tuning", "held_out"] {
        splits.push((
            if split == "tuning" {
                "compound, tuning"
            } else {
                "compound, held out"
            },
            compound
                .iter()
                .filter(|c| c.split == split)
                .map(|c| (c.query.clone(), c.intents.clone()))
                .collect(),
        ));
    }
    println!(
        "\n| ranking | requests | n | nDCG@10 | intents@5 | intents@10 | all intents@10 |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    let without_intents = Levers {
        intents: false,
        ..Levers::default()
    };
    for (name, cases) in &splits {
        let mut rows = textbook_baselines(index, cases)?;
        let textbook = rows.iter().map(|(_, m)| m.ndcg_at_10).fold(0.0, f64::max);
        rows.extend(against_baselines(
            index,
            cases,
            &[
                ("hybrid, one search per request", without_intents),
                ("hybrid, intents (shipped)", Levers::default()),
            ],
        )?);
        let best = best_baseline(&rows);
        for (label, m) in rows {
            println!(
                "| {label} | {name} | {} | {:.3} ({:.2}x; {:.2}x textbook) | {:.3} | {:.3} | {:.3} |",
                m.cases,
                m.ndcg_at_10,
                m.ndcg_at_10 / best.max(f64::EPSILON),
                m.ndcg_at_10 / textbook.max(f64::EPSILON),
                m.intents_at_5,
                m.intents_at_10,
                m.complete_at_10
            );
        }
    }
    index.set_levers(Levers::default());
    if std::env::args().any(|a| a == "--misses") {
        println!();
        // The tuning split's only: the held-out one is never looked into.
        for (query, wanted) in splits.iter().skip(1).take(1).flat_map(|(_, c)| c) {
            let ranked = ranking(index, query, SearchMode::Hybrid, 10)?;
            let missing: Vec<&Vec<String>> = wanted
                .iter()
                .filter(|g| !ranked.iter().take(5).any(|id| g.contains(id)))
                .collect();
            if !missing.is_empty() {
                println!(
                    "{query}\n  intents {:?}\n  missing from the top 5 {missing:?}\n  got {:?}",
                    mcp_aggregator::index::intents::intents(query),
                    &ranked[..ranked.len().min(6)]
                );
            }
        }
    }
    Ok(())
}

/// What a client receives per session in each `expose` mode: the
/// `tools/list` it keeps in context, and the `search_tools` answers it
/// gets (limit 5) for the tasks of a session. Tokens are estimated as
/// bytes / 4 (no model's own tokenizer is available offline).
fn tokens(
    index: &mcp_aggregator::index::SearchIndex,
    cases: &[mcp_aggregator::eval::EvalCase],
) -> Result<(), Box<dyn std::error::Error>> {
    use mcp_aggregator::index::query::{SearchQuery, ServerView};
    use mcp_aggregator::mcp::meta;
    use mcp_aggregator::model::ServerStatus;
    let store = index.store();
    let servers: Vec<ServerView> = store
        .list_servers()?
        .into_iter()
        .map(|s| ServerView {
            id: s.id,
            name: s.name,
            status: ServerStatus::Connected,
        })
        .collect();
    let skills = {
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for tool in store.all_tools_without_texts()? {
            for skill in index.skills_of(&tool.id.to_string()) {
                *counts.entry(skill).or_default() += 1;
            }
        }
        counts.into_iter().collect::<Vec<_>>()
    };
    let definition_of = |tool: &mcp_aggregator::model::ToolRecord| {
        let mut definition: serde_json::Value =
            serde_json::from_str(tool.definition.text()).unwrap_or_default();
        if let Some(wire) = &tool.wire_name {
            definition["name"] = wire.clone().into();
        }
        definition
    };
    let tools = store.all_tools()?;
    let meta_tools = format!(
        "{},{}",
        meta::search_tools_definition(&skills).get(),
        meta::call_tool_definition().get()
    );
    let all: Vec<String> = tools.iter().map(|t| definition_of(t).to_string()).collect();
    let list_all = all.join(",").len() + meta_tools.len() + 12;
    let list_search = meta_tools.len() + 12;
    // A desk set-up: the clock and the local files always at hand.
    let pinned: usize = tools
        .iter()
        .filter(|t| {
            let id = t.id.to_string();
            id.starts_with("time.") || id.starts_with("filesystem.read_")
        })
        .map(|t| definition_of(t).to_string().len() + 1)
        .sum();
    let list_pinned = list_search + pinned;
    let (mut pretty, mut text) = (0usize, 0usize);
    let asked: Vec<&str> = cases.iter().map(|c| c.query.as_str()).collect();
    for query in &asked {
        let answer = index.answer(
            &SearchQuery {
                limit: Some(5),
                ..SearchQuery::new(*query)
            },
            &servers,
            true,
        )?;
        let result = meta::search_result(answer);
        text += result["content"][0]["text"].as_str().map_or(0, str::len);
        pretty += serde_json::to_string_pretty(&result["structuredContent"])?.len();
    }
    let per_search_pretty = pretty / asked.len().max(1);
    let per_search = text / asked.len().max(1);
    let t = |bytes: usize| bytes.div_ceil(4);
    println!(
        "\n{} tools of {} servers; {} searches (limit 5) averaged\n",
        tools.len(),
        servers.len(),
        asked.len()
    );
    println!(
        "| mode | tools/list (tokens) | per search_tools answer | session of 5 tasks | session of 20 tasks |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for (mode, list, per_search) in [
        ("all (every tool listed)", list_all, 0),
        ("search (meta-tools only)", list_search, per_search),
        (
            "search + pins (time, filesystem.read_*)",
            list_pinned,
            per_search,
        ),
    ] {
        println!(
            "| {mode} | {} | {} | {} | {} |",
            t(list),
            t(per_search),
            t(list + 5 * per_search),
            t(list + 20 * per_search)
        );
    }
    println!(
        "\nsearch_tools answer text as sent (compact JSON) {} tokens; pretty-printed it was {}",
        t(per_search),
        t(per_search_pretty)
    );
    Ok(())
}
