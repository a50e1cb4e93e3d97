//! The search evaluation: real servers' tool lists (`eval/catalog/`) and
//! queries with their right answers (`eval/queries.jsonl`), run through the
//! same index and ranking the product uses, scored as Recall@1/5/10 and
//! MRR@10 per mode. `cargo run --release --example search_eval` prints the
//! table; `tests/search_quality.rs` holds the floors.

use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

use crate::index::{SearchIndex, SearchMode, SearchRequest};
use crate::model::wire_name::WireNameRules;
use crate::model::{ServerRecord, ServerSource, Transport};
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{path}: {message}")]
    Input { path: String, message: String },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
    #[error("classification failed: {0}")]
    Skills(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// One server's recorded `tools/list`.
#[derive(Debug, Clone, Deserialize)]
pub struct CatalogServer {
    pub server: String,
    pub tools: Vec<Value>,
}

/// One query and the tool ids that answer it.
#[derive(Debug, Clone, Deserialize)]
pub struct EvalCase {
    pub query: String,
    pub expected: Vec<String>,
    /// `direct`, `paraphrase` (no word of the tool's own) or `server` (only
    /// the server's name tells the right tool apart).
    #[serde(default)]
    pub kind: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metrics {
    pub cases: usize,
    pub recall_at_1: f64,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
    pub mrr_at_10: f64,
}

/// Where a case's first right answer ranked (1-based), if in the top 10.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub case: EvalCase,
    pub rank: Option<usize>,
    pub top: Vec<String>,
}

pub fn load_catalog(dir: &Path) -> Result<Vec<CatalogServer>, EvalError> {
    let input = |path: &Path, message: String| EvalError::Input {
        path: path.display().to_string(),
        message,
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| input(dir, e.to_string()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    entries.sort();
    entries
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).map_err(|e| input(path, e.to_string()))?;
            serde_json::from_str(&text).map_err(|e| input(path, e.to_string()))
        })
        .collect()
}

/// A request that asks for several things at once (`eval/compound.jsonl`):
/// one list of right tool ids per thing asked (any of a list counts).
#[derive(Debug, Clone, Deserialize)]
pub struct CompoundCase {
    pub query: String,
    pub intents: Vec<Vec<String>>,
    /// `tuning` or `held_out`.
    pub split: String,
}

/// Figures over requests with one or more intents each.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IntentMetrics {
    pub cases: usize,
    /// nDCG@10, each intent's first right tool a relevant result.
    pub ndcg_at_10: f64,
    /// Share of intents with a right tool in the top 5 / 10.
    pub intents_at_5: f64,
    pub intents_at_10: f64,
    /// Share of requests with every intent answered in the top 10.
    pub complete_at_10: f64,
}

/// Scores rankings (best first) against each request's intents.
pub fn intent_metrics<'a>(
    cases: impl IntoIterator<Item = (&'a [Vec<String>], &'a [String])>,
) -> IntentMetrics {
    let mut m = IntentMetrics::default();
    let mut intents = 0usize;
    for (wanted, ranking) in cases {
        m.cases += 1;
        intents += wanted.len();
        let ranks: Vec<Option<usize>> = wanted
            .iter()
            .map(|group| ranking.iter().take(10).position(|id| group.contains(id)))
            .collect();
        let dcg: f64 = ranks
            .iter()
            .flatten()
            .map(|p| 1.0 / ((*p as f64) + 2.0).log2())
            .sum();
        let ideal: f64 = (0..wanted.len().min(10))
            .map(|p| 1.0 / ((p as f64) + 2.0).log2())
            .sum();
        if ideal > 0.0 {
            m.ndcg_at_10 += dcg / ideal;
        }
        m.intents_at_5 += ranks.iter().flatten().filter(|p| **p < 5).count() as f64;
        m.intents_at_10 += ranks.iter().flatten().count() as f64;
        m.complete_at_10 += f64::from(u8::from(ranks.iter().all(Option::is_some)));
    }
    if m.cases > 0 {
        m.ndcg_at_10 /= m.cases as f64;
        m.complete_at_10 /= m.cases as f64;
    }
    if intents > 0 {
        m.intents_at_5 /= intents as f64;
        m.intents_at_10 /= intents as f64;
    }
    m
}

/// Intent figures of one ranking per request, in the requests' order.
fn scored(requests: &[Request], rankings: &[Vec<String>]) -> IntentMetrics {
    intent_metrics(
        requests
            .iter()
            .zip(rankings)
            .map(|((_, wanted), ranked)| (wanted.as_slice(), ranked.as_slice())),
    )
}

/// The tool ids `index` ranks for `query`, best first.
pub fn ranking(
    index: &SearchIndex,
    query: &str,
    mode: SearchMode,
    limit: usize,
) -> Result<Vec<String>, EvalError> {
    let outcome = index.search(&SearchRequest {
        query: query.to_owned(),
        limit,
        mode,
        servers: None,
        skills: None,
        tools: None,
        include_external: true,
    })?;
    Ok(outcome
        .hits
        .iter()
        .map(|h| h.doc.tool_id.to_string())
        .collect())
}

/// A request and its intents (one list of right tool ids per thing asked).
pub type Request = (String, Vec<Vec<String>>);

/// nDCG@10 and intent figures of the classic baselines (BM25, the dense
/// model alone, their reciprocal rank fusion; every lever off) and of the
/// hybrid ranking with each set of `levers`, over the same requests. Rows
/// come in that order; the levers are left at their defaults.
pub fn against_baselines(
    index: &SearchIndex,
    requests: &[Request],
    levers: &[(&str, crate::index::Levers)],
) -> Result<Vec<(String, IntentMetrics)>, EvalError> {
    let score = |rankings: &[Vec<String>]| scored(requests, rankings);
    let rankings = |mode: SearchMode, limit: usize| -> Result<Vec<Vec<String>>, EvalError> {
        requests
            .iter()
            .map(|(query, _)| ranking(index, query, mode, limit))
            .collect()
    };
    index.set_levers(crate::index::Levers::OFF);
    let keyword = rankings(SearchMode::Keyword, 100)?;
    let dense = rankings(SearchMode::Semantic, 100)?;
    let fused: Vec<Vec<String>> = keyword
        .iter()
        .zip(&dense)
        .map(|(k, d)| reciprocal_rank_fusion(&[k.clone(), d.clone()]))
        .collect();
    let mut rows = vec![
        ("BM25 (baseline)".to_owned(), score(&keyword)),
        ("MiniLM alone (baseline)".to_owned(), score(&dense)),
        ("RRF of both (baseline)".to_owned(), score(&fused)),
    ];
    for (label, set) in levers {
        index.set_levers(*set);
        let ranked = rankings(SearchMode::Hybrid, 10);
        index.set_levers(crate::index::Levers::default());
        rows.push(((*label).to_owned(), score(&ranked?)));
    }
    Ok(rows)
}

/// The best baseline's nDCG@10 among `against_baselines` rows.
pub fn best_baseline(rows: &[(String, IntentMetrics)]) -> f64 {
    rows.iter()
        .filter(|(label, _)| label.ends_with("(baseline)"))
        .map(|(_, m)| m.ndcg_at_10)
        .fold(0.0, f64::max)
}

/// Reciprocal rank fusion (k = 60) of rankings: the classic baseline of
/// a keyword and a dense ranking put together.
pub fn reciprocal_rank_fusion(rankings: &[Vec<String>]) -> Vec<String> {
    let mut scores: std::collections::HashMap<&str, f64> = std::collections::HashMap::new();
    for ranking in rankings {
        for (rank, id) in ranking.iter().enumerate() {
            *scores.entry(id).or_default() += 1.0 / (60.0 + rank as f64 + 1.0);
        }
    }
    let mut fused: Vec<(&str, f64)> = scores.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    fused.into_iter().map(|(id, _)| id.to_owned()).collect()
}

/// Textbook baselines: what someone without our tuned sides would run
/// beside us. Okapi BM25 (k1 1.2, b 0.75, Lucene's idf) over each tool's
/// name and description as lower-case words (no stemming, no stop words,
/// names not split into words), the model over one text per tool
/// ("name: description", cosine), and their reciprocal rank fusion. Rows
/// in that order, labelled "(textbook)".
pub fn textbook_baselines(
    index: &SearchIndex,
    requests: &[Request],
) -> Result<Vec<(String, IntentMetrics)>, EvalError> {
    let mut tools = index.store().all_tools()?;
    // Ties break by position: the same order on every run.
    tools.sort_by(|a, b| a.id.cmp(&b.id));
    let texts: Vec<String> = tools
        .iter()
        .map(|t| {
            format!(
                "{}: {}",
                t.original_name,
                t.description.as_deref().unwrap_or_default()
            )
        })
        .collect();
    let queries: Vec<String> = requests.iter().map(|(q, _)| q.clone()).collect();
    let ids = |ranked: Vec<usize>| -> Vec<String> {
        ranked
            .into_iter()
            .map(|doc| tools[doc].id.clone())
            .collect()
    };
    let bm25 = TextbookBm25::new(&texts);
    let keyword: Vec<Vec<String>> = queries.iter().map(|q| ids(bm25.top(q))).collect();
    let tool_vectors = index.embed_texts(&texts)?;
    let query_vectors = index.embed_texts(&queries)?;
    let dense: Vec<Vec<String>> = query_vectors
        .iter()
        .map(|q| {
            let cosines = tool_vectors
                .iter()
                .map(|t| f64::from(crate::index::similarity::dot(q, t)))
                .collect();
            ids(best(cosines, f64::NEG_INFINITY))
        })
        .collect();
    let fused: Vec<Vec<String>> = keyword
        .iter()
        .zip(&dense)
        .map(|(k, d)| reciprocal_rank_fusion(&[k.clone(), d.clone()]))
        .collect();
    let score = |rankings: &[Vec<String>]| scored(requests, rankings);
    Ok(vec![
        ("BM25 (textbook)".to_owned(), score(&keyword)),
        (
            "MiniLM, one text per tool (textbook)".to_owned(),
            score(&dense),
        ),
        ("RRF of both (textbook)".to_owned(), score(&fused)),
    ])
}

/// Okapi BM25 as textbooks give it (k1 1.2, b 0.75, Lucene's idf) over
/// lower-case words, with an inverted index: term -> (document, term
/// frequency).
struct TextbookBm25 {
    postings: std::collections::HashMap<String, Vec<(usize, f64)>>,
    lengths: Vec<f64>,
    average: f64,
}

impl TextbookBm25 {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;

    fn words(text: &str) -> impl Iterator<Item = String> + '_ {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
    }

    fn new(documents: &[String]) -> TextbookBm25 {
        let mut postings: std::collections::HashMap<String, Vec<(usize, f64)>> =
            std::collections::HashMap::new();
        let mut lengths = Vec::with_capacity(documents.len());
        for (doc, text) in documents.iter().enumerate() {
            let mut counts: std::collections::HashMap<String, f64> =
                std::collections::HashMap::new();
            let mut length = 0.0;
            for term in Self::words(text) {
                *counts.entry(term).or_default() += 1.0;
                length += 1.0;
            }
            lengths.push(length);
            for (term, tf) in counts {
                postings.entry(term).or_default().push((doc, tf));
            }
        }
        let average = lengths.iter().sum::<f64>() / (lengths.len().max(1) as f64);
        TextbookBm25 {
            postings,
            lengths,
            average,
        }
    }

    /// The best 100 documents sharing a word with `query`, best first.
    fn top(&self, query: &str) -> Vec<usize> {
        let n = self.lengths.len() as f64;
        let mut scores = vec![0.0f64; self.lengths.len()];
        for term in Self::words(query) {
            let Some(list) = self.postings.get(&term) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for (doc, tf) in list {
                let norm = Self::K1 * (1.0 - Self::B + Self::B * self.lengths[*doc] / self.average);
                scores[*doc] += idf * tf * (Self::K1 + 1.0) / (tf + norm);
            }
        }
        best(scores, 0.0)
    }
}

/// The best 100 of `scores` above `floor`, as positions, best first (ties
/// by position).
fn best(scores: Vec<f64>, floor: f64) -> Vec<usize> {
    let mut ranked: Vec<(usize, f64)> = scores
        .into_iter()
        .enumerate()
        .filter(|(_, s)| *s > floor)
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.into_iter().take(100).map(|(doc, _)| doc).collect()
}

pub fn load_compound(path: &Path) -> Result<Vec<CompoundCase>, EvalError> {
    load_lines(path)
}

pub fn load_cases(path: &Path) -> Result<Vec<EvalCase>, EvalError> {
    load_lines(path)
}

fn load_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::Input {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty() && !line.trim_start().starts_with("//"))
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|e| EvalError::Input {
                path: format!("{}:{}", path.display(), n + 1),
                message: e.to_string(),
            })
        })
        .collect()
}

/// Stores the catalog in a fresh store in `data_dir` and indexes it.
pub fn build_index(data_dir: &Path, catalog: &[CatalogServer]) -> Result<SearchIndex, EvalError> {
    let store = Arc::new(Store::open(data_dir)?);
    let rules = WireNameRules::default();
    for server in catalog {
        let record = ServerRecord {
            auto_connect: false,
            ..ServerRecord::new(
                server.server.clone(),
                Transport::placeholder(),
                ServerSource::Api,
            )
        };
        store.insert_server(&record, "eval")?;
        store.replace_tools(record.id, &server.tools, &rules)?;
    }
    let index = SearchIndex::open(store, data_dir)?;
    index.load_model();
    index.sync(false)?;
    Ok(index)
}

/// Classifies every tool of the index into skills (the local classifier,
/// as the daemon does), so skill vectors and skills are in place. Returns
/// the tools classified.
pub fn classify_skills(index: &SearchIndex) -> Result<usize, EvalError> {
    let skills = crate::skills::Skills::new(
        Arc::clone(index.store()),
        index.clone(),
        crate::skills::SkillsSettings::default(),
    );
    skills
        .classify_pending()
        .map(|outcome| outcome.classified)
        .map_err(|err| EvalError::Skills(err.to_string()))
}

/// The servers whose queries and labels are never used to tune
/// (`held_out` in `eval/skills_labels.json`).
pub fn held_out_servers(eval_dir: &Path) -> Result<Vec<String>, EvalError> {
    let text = std::fs::read_to_string(eval_dir.join("skills_labels.json"))?;
    let labels: serde_json::Value = serde_json::from_str(&text)?;
    Ok(labels["held_out"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// Whether a case's answers all belong to `servers`.
pub fn case_of(case: &EvalCase, servers: &[String]) -> bool {
    case.expected.iter().all(|id| {
        id.split_once('.')
            .is_some_and(|(server, _)| servers.iter().any(|s| s == server))
    })
}

/// Runs every case in `mode`.
pub fn run(
    index: &SearchIndex,
    cases: &[EvalCase],
    mode: SearchMode,
) -> Result<Vec<CaseResult>, EvalError> {
    cases
        .iter()
        .map(|case| {
            let top = ranking(index, &case.query, mode, 10)?;
            let rank = top
                .iter()
                .position(|id| case.expected.contains(id))
                .map(|p| p + 1);
            Ok(CaseResult {
                case: case.clone(),
                rank,
                top,
            })
        })
        .collect()
}

pub fn metrics<'a>(results: impl IntoIterator<Item = &'a CaseResult>) -> Metrics {
    let mut m = Metrics::default();
    for result in results {
        m.cases += 1;
        if let Some(rank) = result.rank {
            m.recall_at_1 += f64::from(u8::from(rank <= 1));
            m.recall_at_5 += f64::from(u8::from(rank <= 5));
            m.recall_at_10 += f64::from(u8::from(rank <= 10));
            m.mrr_at_10 += 1.0 / rank as f64;
        }
    }
    if m.cases > 0 {
        let n = m.cases as f64;
        m.recall_at_1 /= n;
        m.recall_at_5 /= n;
        m.recall_at_10 /= n;
        m.mrr_at_10 /= n;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_bm25_ranks_by_shared_rare_words_and_leaves_out_the_rest() {
        let documents: Vec<String> = [
            "read_file: Read a file from disk",
            "write_file: Write a file to disk",
            "get_weather: Current weather for a city",
            "list_files: List files in a folder",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let bm25 = TextbookBm25::new(&documents);
        // "weather" is in one document only: it wins; no other shares a word.
        assert_eq!(bm25.top("Weather of Paris?"), vec![2]);
        // "read" is rarer than "file", so the reader leads the writer.
        let ranked = bm25.top("read the file");
        assert_eq!(ranked[0], 0);
        assert!(ranked.contains(&1));
        assert!(!ranked.contains(&2));
        assert!(bm25.top("nothing shared").is_empty());
    }
}
