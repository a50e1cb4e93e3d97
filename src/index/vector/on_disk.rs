//! The saved graph searched from its files: its byte vectors scanned
//! while its links load on another thread, then walked over the links;
//! the points found scored again from the f16 file. Tools removed since
//! the save are tombstones, vectors added since wait in `extra`.

use std::sync::Arc;

use super::links::Links;
use super::saved_vectors::SavedVectors;
use super::{DEAD, VectorIndex};
use crate::index::similarity::dot;

/// A saved graph searched from its files (`saved_vectors`) while its links load
/// on another thread (searches scan its vectors meanwhile), then by a walk
/// of them. Tools removed since become tombstones and new vectors wait in
/// `extra`; the loaded links take both over (`install_loaded`).
pub(super) struct OnDisk {
    pub(super) vectors: SavedVectors,
    /// Points in `vectors`: data ids below it are there, the rest in `extra`.
    pub(super) saved: usize,
    /// Data id → slot, `DEAD` for a tombstone.
    pub(super) owner: Vec<u32>,
    /// Unit vectors added since, row-major, data ids from `saved` on.
    pub(super) extra: Vec<f32>,
    pub(super) dead: usize,
    /// Which opening this is: a graph is installed only over its own.
    pub(super) ticket: u64,
    /// The saved graph's links, once read: searches walk them (and score
    /// `extra` one by one).
    pub(super) links: Option<Links>,
}

impl std::fmt::Debug for OnDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDisk")
            .field("points", &self.owner.len())
            .field("dead", &self.dead)
            .finish()
    }
}

impl OnDisk {
    pub(super) fn vector(&self, id: u32, dimension: usize) -> Option<Vec<f32>> {
        let id = id as usize;
        if id < self.saved {
            self.vectors.vector(id)
        } else {
            let at = (id - self.saved) * dimension;
            self.extra.get(at..at + dimension).map(<[f32]>::to_vec)
        }
    }

    /// `query`'s cosine with point `id` at the saved precision.
    pub(super) fn score(&self, query: &[f32], id: usize) -> Option<f32> {
        if id < self.saved {
            self.vectors.exact(query, id)
        } else {
            let at = (id - self.saved) * query.len();
            self.extra.get(at..at + query.len()).map(|v| dot(query, v))
        }
    }

    pub(super) fn live(&self) -> usize {
        self.owner.len() - self.dead
    }

    /// Vectors added since the graph was saved (scored one by one).
    pub(super) fn added(&self) -> usize {
        self.owner.len() - self.saved
    }

    /// The points nearest `query` (unit): the saved graph's by a walk of
    /// its links, those added since by a scan.
    pub(super) fn nearest(
        &self,
        links: &Links,
        query: &[f32],
        wanted: usize,
        width: usize,
    ) -> Vec<(usize, f32)> {
        let dimension = query.len();
        let distance = |id: u32| {
            self.vectors
                .approximate(query, id as usize)
                .map_or(f32::INFINITY, |score| (1.0 - score).max(0.0))
        };
        // The walk's distances are the byte copies'; those it returns are
        // scored again from the f16 vectors (a few dozen reads).
        let mut found: Vec<(usize, f32)> = links
            .nearest(wanted, width, distance)
            .into_iter()
            .map(|(id, d)| {
                let id = id as usize;
                let exact = self.vectors.exact(query, id).map(|s| (1.0 - s).max(0.0));
                (id, exact.unwrap_or(d))
            })
            .collect();
        if self.added() > 0 {
            found.extend(
                self.extra
                    .chunks_exact(dimension)
                    .enumerate()
                    .map(|(row, v)| (self.saved + row, (1.0 - dot(query, v)).max(0.0))),
            );
        }
        found.sort_unstable_by(|a, b| a.1.total_cmp(&b.1));
        found.truncate(wanted);
        found
    }
}

impl VectorIndex {
    /// The scan of a saved graph's vectors (and those added since): every
    /// point by its byte copy, then the best tools again by their f16
    /// vectors, so the answer is the exact scan's.
    pub(super) fn scan_on_disk(
        &self,
        query: &[f32],
        limit: usize,
        keep: &impl Fn(&str) -> bool,
        on_disk: &OnDisk,
    ) -> Vec<(Arc<str>, f32)> {
        let mut best = vec![f32::NEG_INFINITY; self.slots.len()];
        for (id, slot) in on_disk.owner.iter().enumerate() {
            if *slot == DEAD {
                continue;
            }
            let score = if id < on_disk.saved {
                on_disk.vectors.approximate(query, id)
            } else {
                on_disk.score(query, id)
            };
            if let Some(score) = score
                && let Some(best) = best.get_mut(*slot as usize)
                && score > *best
            {
                *best = score;
            }
        }
        // Byte copies score within ~1e-3 of the f16 vectors: a margin of
        // candidates past `limit` holds every tool the f16 scan would rank.
        let candidates = self.best_tools(best, limit.saturating_mul(2).saturating_add(16), keep);
        let mut ranked: Vec<(Arc<str>, f32)> = candidates
            .into_iter()
            .map(|(tool, approximate)| {
                let exact = self
                    .slot_of
                    .get(&tool)
                    .and_then(|slot| self.slots.get(*slot as usize)?.as_ref())
                    .and_then(|slot| {
                        slot.points
                            .iter()
                            .filter_map(|id| on_disk.score(query, *id as usize))
                            .reduce(f32::max)
                    });
                (tool, exact.unwrap_or(approximate))
            })
            .collect();
        ranked.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(limit);
        ranked
    }
}
