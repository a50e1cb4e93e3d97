//! The exact backend: every vector in one contiguous row-major matrix,
//! scanned whole per query. No build, exact, and fastest at aggregator
//! sizes (below `GRAPH_FROM`).

use std::sync::Arc;

use super::VectorIndex;
use crate::index::similarity::dot;

#[derive(Debug, Default)]
pub(super) struct Exact {
    /// Row-major, `owner.len() * dimension` values.
    pub(super) matrix: Vec<f32>,
    /// Row → slot.
    pub(super) owner: Vec<u32>,
}

impl VectorIndex {
    pub(super) fn scan(
        &self,
        query: &[f32],
        limit: usize,
        keep: &impl Fn(&str) -> bool,
        exact: &Exact,
    ) -> Vec<(Arc<str>, f32)> {
        let mut best = vec![f32::NEG_INFINITY; self.slots.len()];
        for (slot, vector) in exact
            .owner
            .iter()
            .zip(exact.matrix.chunks_exact(self.dimension))
        {
            let score = dot(query, vector);
            let best = &mut best[*slot as usize];
            if score > *best {
                *best = score;
            }
        }
        self.best_tools(best, limit, keep)
    }
}
