//! The vector index: every tool's unit-length embeddings in one contiguous
//! matrix, searched exactly (dot product = cosine). A tool may own several
//! vectors (short text, text with parameters) and scores by its best one.
//! Removing a tool takes its rows out at once (swap-remove), so removed
//! tools never come back and there is nothing to compact.
//!
//! Exact, not HNSW (design §1 named hnsw_rs), at aggregator sizes: measured
//! on this 2-vCPU machine with embedding-shaped data (`cargo bench --bench
//! vectors`), the scan takes ~1.2 ms over 20,000 vectors and ~9 ms over
//! 100,000, needs no build and is exact; an hnsw_rs graph answers in under
//! 3 ms but costs a build (24 s at 100,000), a second copy of the vectors,
//! and a wide search (or more links) to keep recall@10 at 0.98. A graph for
//! catalogs beyond ~50,000 vectors is issue 12's item 7.

use std::collections::HashMap;
use std::sync::Arc;

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent accumulators let the compiler vectorise the loop.
    let mut acc = [0.0f32; 8];
    let chunks_a = a.chunks_exact(8);
    let chunks_b = b.chunks_exact(8);
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (x, y) in chunks_a.zip(chunks_b) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = rest_a.iter().zip(rest_b).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// The unit-length mean of some vectors (`None` if there are none or
/// they cancel out).
pub fn normalised_mean<'a>(vectors: impl Iterator<Item = &'a [f32]>) -> Option<Vec<f32>> {
    let mut sum: Option<Vec<f32>> = None;
    for v in vectors {
        let acc = sum.get_or_insert_with(|| vec![0.0; v.len()]);
        if acc.len() == v.len() {
            acc.iter_mut().zip(v).for_each(|(a, x)| *a += x);
        }
    }
    let mut sum = sum?;
    let norm = dot(&sum, &sum).sqrt();
    if !norm.is_finite() || norm < 1e-12 {
        return None;
    }
    sum.iter_mut().for_each(|x| *x /= norm);
    Some(sum)
}

#[derive(Debug, Clone)]
struct Row {
    tool: u32,
}

#[derive(Debug, Default)]
pub struct VectorIndex {
    dimension: usize,
    /// Row-major, `rows.len() * dimension` values.
    matrix: Vec<f32>,
    rows: Vec<Row>,
    /// Tool slot → tool id; slots are reused after removal.
    tools: Vec<Option<Arc<str>>>,
    free_slots: Vec<u32>,
    slot_of: HashMap<Arc<str>, u32>,
}

impl VectorIndex {
    pub fn new(dimension: usize) -> VectorIndex {
        VectorIndex {
            dimension,
            ..VectorIndex::default()
        }
    }

    pub fn tools(&self) -> usize {
        self.slot_of.len()
    }

    pub fn vectors(&self) -> usize {
        self.rows.len()
    }

    pub fn contains(&self, tool: &str) -> bool {
        self.slot_of.contains_key(tool)
    }

    /// Adds (or replaces) a tool's vectors. Vectors of another dimension are
    /// ignored.
    pub fn insert(&mut self, tool: Arc<str>, vectors: &[Vec<f32>]) {
        self.remove(&tool);
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.tools[slot as usize] = Some(Arc::clone(&tool));
                slot
            }
            None => {
                self.tools.push(Some(Arc::clone(&tool)));
                u32::try_from(self.tools.len() - 1).unwrap_or(u32::MAX)
            }
        };
        for vector in vectors.iter().filter(|v| v.len() == self.dimension) {
            self.matrix.extend_from_slice(vector);
            self.rows.push(Row { tool: slot });
        }
        self.slot_of.insert(tool, slot);
    }

    /// The vectors of the tools `wanted` picks, in one pass over the rows.
    pub fn vectors_of(&self, wanted: impl Fn(&str) -> bool) -> HashMap<Arc<str>, Vec<Vec<f32>>> {
        let mut out: HashMap<Arc<str>, Vec<Vec<f32>>> = HashMap::new();
        for (row, vector) in self
            .rows
            .iter()
            .zip(self.matrix.chunks_exact(self.dimension))
        {
            let Some(Some(tool)) = self.tools.get(row.tool as usize) else {
                continue;
            };
            if wanted(tool) {
                out.entry(Arc::clone(tool))
                    .or_default()
                    .push(vector.to_vec());
            }
        }
        out
    }

    /// Takes a tool's vectors out; searches never see it again.
    pub fn remove(&mut self, tool: &str) {
        let Some(slot) = self.slot_of.remove(tool) else {
            return;
        };
        let mut row = 0;
        while row < self.rows.len() {
            if self.rows[row].tool == slot {
                let last = self.rows.len() - 1;
                self.rows.swap_remove(row);
                if row != last {
                    let (d, from) = (self.dimension, last * self.dimension);
                    self.matrix.copy_within(from..from + d, row * d);
                }
                self.matrix.truncate(self.rows.len() * self.dimension);
            } else {
                row += 1;
            }
        }
        self.tools[slot as usize] = None;
        self.free_slots.push(slot);
    }

    /// The `limit` tools most similar to `query` (a unit vector), best
    /// first, with their cosine similarity; `keep` decides which tools may
    /// be returned.
    pub fn search(
        &self,
        query: &[f32],
        limit: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<(Arc<str>, f32)> {
        if query.len() != self.dimension || limit == 0 || self.rows.is_empty() {
            return Vec::new();
        }
        let mut best = vec![f32::NEG_INFINITY; self.tools.len()];
        for (row, vector) in self
            .rows
            .iter()
            .zip(self.matrix.chunks_exact(self.dimension))
        {
            let score = dot(query, vector);
            let slot = &mut best[row.tool as usize];
            if score > *slot {
                *slot = score;
            }
        }
        let mut ranked: Vec<(u32, f32)> = best
            .iter()
            .enumerate()
            .filter(|(_, score)| score.is_finite())
            .map(|(slot, score)| (slot as u32, *score))
            .collect();
        ranked.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        ranked
            .into_iter()
            .filter_map(|(slot, score)| {
                let tool = self.tools.get(slot as usize)?.as_ref()?;
                keep(tool).then(|| (Arc::clone(tool), score))
            })
            .take(limit)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u64, dims: usize) -> Vec<f32> {
        // Deterministic pseudo-random vectors (xorshift), normalised.
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut v: Vec<f32> = (0..dims)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }

    #[test]
    fn finds_the_nearest_tool_by_its_best_vector_and_forgets_removed_ones() {
        let mut index = VectorIndex::new(384);
        for i in 0..100 {
            index.insert(
                Arc::from(format!("s.tool{i}")),
                &[unit(i, 384), unit(i + 1000, 384)],
            );
        }
        assert_eq!((index.tools(), index.vectors()), (100, 200));
        let found = index.search(&unit(42, 384), 5, |_| true);
        assert_eq!(&*found[0].0, "s.tool42");
        assert!((found[0].1 - 1.0).abs() < 1e-4);
        assert_eq!(found.len(), 5);
        assert_eq!(
            &*index.search(&unit(1007, 384), 1, |_| true)[0].0,
            "s.tool7"
        );

        index.remove("s.tool42");
        assert_eq!((index.tools(), index.vectors()), (99, 198));
        let found = index.search(&unit(42, 384), 200, |_| true);
        assert_eq!(found.len(), 99);
        assert!(found.iter().all(|(tool, _)| &**tool != "s.tool42"));
        // Every other tool is still found by each of its vectors.
        for i in (0..100).filter(|i| *i != 42) {
            assert_eq!(
                &*index.search(&unit(i, 384), 1, |_| true)[0].0,
                format!("s.tool{i}")
            );
            assert_eq!(
                &*index.search(&unit(i + 1000, 384), 1, |_| true)[0].0,
                format!("s.tool{i}")
            );
        }
    }

    #[test]
    fn replacing_a_tool_drops_its_old_vectors_and_filters_apply() {
        let mut index = VectorIndex::new(16);
        index.insert(Arc::from("a.x"), &[unit(1, 16)]);
        index.insert(Arc::from("b.y"), &[unit(2, 16)]);
        index.insert(Arc::from("a.x"), &[unit(3, 16)]);
        assert_eq!(index.vectors(), 2);
        assert_eq!(&*index.search(&unit(3, 16), 1, |_| true)[0].0, "a.x");
        assert_ne!(index.search(&unit(1, 16), 1, |_| true)[0].1, 1.0);
        let only_b = index.search(&unit(3, 16), 5, |tool| tool.starts_with("b."));
        assert_eq!(only_b.len(), 1);
        assert_eq!(&*only_b[0].0, "b.y");
        // Wrong-dimension queries find nothing rather than panic.
        assert!(index.search(&unit(3, 8), 5, |_| true).is_empty());
    }
}
