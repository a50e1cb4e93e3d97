//! Hybrid ranking: each side's scores are standardised over its own
//! candidates and combined with weights that lean towards the dense side
//! (measured: merging by scores beats reciprocal rank fusion here, because
//! RRF throws away how far the dense list's leader is ahead).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    #[default]
    Hybrid,
    Keyword,
    Semantic,
}

/// How each side's scores are put on one scale before they are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalisation {
    /// The best candidate 1, the worst 0.
    MinMax,
    /// Standard deviations above the candidates' mean.
    ZScore,
}

/// How much each side counts in hybrid mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    pub dense: f32,
    pub keyword: f32,
    pub normalisation: Normalisation,
}

impl Default for Weights {
    fn default() -> Self {
        // Tuned on eval/ (cargo run --release --example search_eval --
        // --sweep): a broad plateau from 0.6 to 0.8 dense; z-scores edge out
        // min-max.
        Weights {
            dense: 0.6,
            keyword: 0.4,
            normalisation: Normalisation::ZScore,
        }
    }
}

/// Min-max over the list: the best becomes 1, the worst candidate 0. A
/// single candidate (or all equal) scores 1.
fn normalised<K: AsRef<str>>(list: &[(K, f32)], how: Normalisation) -> HashMap<&str, f32> {
    if how == Normalisation::ZScore && list.len() > 1 {
        let n = list.len() as f32;
        let mean = list.iter().map(|(_, s)| s).sum::<f32>() / n;
        let sd = (list.iter().map(|(_, s)| (s - mean).powi(2)).sum::<f32>() / n).sqrt();
        if sd > f32::EPSILON {
            return list
                .iter()
                .map(|(id, s)| (id.as_ref(), (s - mean) / sd))
                .collect();
        }
    }
    let max = list
        .iter()
        .map(|(_, s)| *s)
        .fold(f32::NEG_INFINITY, f32::max);
    let min = list.iter().map(|(_, s)| *s).fold(f32::INFINITY, f32::min);
    let span = max - min;
    list.iter()
        .map(|(id, s)| {
            let value = if span > f32::EPSILON {
                (s - min) / span
            } else {
                1.0
            };
            (id.as_ref(), value)
        })
        .collect()
}

/// Fuses the keyword list (BM25 scores) and the dense list (cosine) into one
/// ranking, best first. In single-sided modes the other list is empty and
/// its raw scores are reported (cosine for semantic, BM25 for keyword).
pub fn fuse(
    keyword: &[(String, f32)],
    dense: &[(Arc<str>, f32)],
    mode: SearchMode,
    weights: &Weights,
) -> Vec<(String, f32)> {
    let mut out: Vec<(String, f32)> = match mode {
        SearchMode::Keyword => keyword.to_vec(),
        SearchMode::Semantic => dense.iter().map(|(id, s)| (id.to_string(), *s)).collect(),
        SearchMode::Hybrid if dense.is_empty() => keyword.to_vec(),
        SearchMode::Hybrid => {
            let k = normalised(keyword, weights.normalisation);
            let d = normalised(dense, weights.normalisation);
            let mut combined: HashMap<&str, f32> = HashMap::with_capacity(k.len() + d.len());
            for (id, score) in &d {
                *combined.entry(id).or_default() += weights.dense * score;
            }
            for (id, score) in &k {
                *combined.entry(id).or_default() += weights.keyword * score;
            }
            // Reported on a 0–1 scale (best candidate 1), whatever the
            // normalisation.
            let max = combined.values().copied().fold(f32::NEG_INFINITY, f32::max);
            let min = combined.values().copied().fold(f32::INFINITY, f32::min);
            let span = (max - min).max(f32::EPSILON);
            combined
                .into_iter()
                .map(|(id, s)| (id.to_owned(), (s - min) / span))
                .collect()
        }
    };
    // Ties break by id so results are stable from run to run.
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// An intent's ranking with the whole request's added at `weight`: what
/// the rest of the request says ("… in Notion") still counts for a piece
/// that no longer names it ("append a paragraph to it"). Both lists are put
/// on a 0–1 scale first; the result is on one too, best first.
pub fn with_context(
    intent: &[(String, f32)],
    whole: &[(String, f32)],
    weight: f32,
) -> Vec<(String, f32)> {
    let intent_scores = normalised(intent, Normalisation::MinMax);
    let whole_scores = normalised(whole, Normalisation::MinMax);
    let mut combined: HashMap<&str, f32> = HashMap::with_capacity(intent.len() + whole.len());
    for (id, score) in &intent_scores {
        *combined.entry(id).or_default() += score;
    }
    for (id, score) in &whole_scores {
        *combined.entry(id).or_default() += weight * score;
    }
    let mut out: Vec<(String, f32)> = combined
        .into_iter()
        .map(|(id, s)| (id.to_owned(), s / (1.0 + weight)))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// One ranking from several (one per intent of a request): round by
/// round, each list gives the tool at that round's place in it, unless
/// another list took that tool already. So every intent's best is near
/// the top, and a list whose best another list took (two pieces of one
/// request that want the same tool) does not push its runner-up ahead of
/// the other lists' own: it waits for the next round. Scores are each
/// tool's own, held down so they never rise along the list.
pub fn interleave(lists: &[Vec<(String, f32)>]) -> Vec<(String, f32)> {
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    let mut taken: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut out: Vec<(String, f32)> = Vec::new();
    let mut ceiling = f32::INFINITY;
    for place in 0..longest {
        for (id, score) in lists.iter().filter_map(|list| list.get(place)) {
            if taken.insert(id.as_str()) {
                ceiling = ceiling.min(*score);
                out.push((id.clone(), ceiling));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_strong_on_both_sides_wins_and_each_side_alone_still_counts() {
        let keyword = vec![
            ("a.both".to_owned(), 9.0),
            ("a.kw".to_owned(), 8.5),
            ("a.low".to_owned(), 1.0),
        ];
        let dense: Vec<(Arc<str>, f32)> = vec![
            (Arc::from("a.dense"), 0.80),
            (Arc::from("a.both"), 0.78),
            (Arc::from("a.far"), 0.20),
        ];
        let min_max = Weights {
            normalisation: Normalisation::MinMax,
            ..Weights::default()
        };
        let fused = fuse(&keyword, &dense, SearchMode::Hybrid, &min_max);
        let order: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(order[0], "a.both");
        assert_eq!(order[1], "a.dense", "dense leads when weighted higher");
        assert!(order.contains(&"a.kw"));
        assert!(fused.iter().all(|(_, s)| (0.0..=1.0).contains(s)));
        let z = fuse(&keyword, &dense, SearchMode::Hybrid, &Weights::default());
        assert_eq!(z[0].0, "a.both");
        assert!(z.iter().all(|(_, s)| (0.0..=1.0).contains(s)));
    }

    /// A ranking of `ids`, best first, scores falling by 0.1.
    fn list(ids: &[&str]) -> Vec<(String, f32)> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| ((*id).to_owned(), 1.0 - i as f32 * 0.1))
            .collect()
    }

    #[test]
    fn interleaving_puts_each_lists_best_near_the_top() {
        let first = list(&["a", "c", "d"]);
        let second = list(&["x", "y", "a"]);
        let third = list(&["z", "c", "w"]);
        let fused = interleave(&[first, second, third]);
        let order: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(order, ["a", "x", "z", "c", "y", "d", "w"]);
        assert!(fused.windows(2).all(|w| w[0].1 >= w[1].1), "{fused:?}");
    }

    #[test]
    fn a_list_whose_best_was_taken_does_not_push_its_runner_up_ahead() {
        // Two pieces of one request that both want `a`, and a third intent.
        let fused = interleave(&[
            list(&["a", "b1", "b2"]),
            list(&["a", "c1", "c2"]),
            list(&["x", "y1"]),
        ]);
        let order: Vec<&str> = fused.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(order[..2], ["a", "x"], "{order:?}");
        assert_eq!(order, ["a", "x", "b1", "c1", "y1", "b2", "c2"]);
    }

    #[test]
    fn single_sided_modes_keep_their_own_order_and_scores() {
        let keyword = vec![("x".to_owned(), 3.0), ("y".to_owned(), 2.0)];
        assert_eq!(
            fuse(&keyword, &[], SearchMode::Keyword, &Weights::default()),
            keyword
        );
        assert_eq!(
            fuse(&keyword, &[], SearchMode::Hybrid, &Weights::default()),
            keyword
        );
        let dense: Vec<(Arc<str>, f32)> = vec![(Arc::from("z"), 0.5)];
        assert_eq!(
            fuse(&[], &dense, SearchMode::Semantic, &Weights::default()),
            vec![("z".to_owned(), 0.5)]
        );
    }
}
