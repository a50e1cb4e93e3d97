//! The `hnsw_rs` graph backend: built from the live vectors on the
//! indexing thread (half-precision copies, `DotF16`), and the walk every
//! graph answers by, whether hnsw_rs's in memory or the saved links read
//! back (`on_disk`).

use hnsw_rs::prelude::{Hnsw, PointId};
use std::collections::HashMap;
use std::sync::Arc;

use super::{Backend, DEAD, VectorIndex, unit};
use crate::index::similarity::{DotF16, dot, from_f16, to_f16};

/// Links per node: 16 fall short of recall 0.98 at 200,000 vectors.
pub(super) const GRAPH_LINKS: usize = 32;
const GRAPH_BUILD_WIDTH: usize = 200;
/// Search width: at 512, recall@10 at 200,000 vectors read 0.977–0.982
/// over three builds (each build's random layers move it); at 768, 0.995,
/// the hybrid search still ~9 ms (BENCHMARKS.md).
pub(super) const GRAPH_SEARCH_WIDTH: usize = 768;
/// hnsw_rs keeps 16 layers whatever is asked.
const GRAPH_LAYERS: usize = 16;
/// A filter keeping under 1/SMALL_SHARE of the tools scores them one by
/// one instead of walking the graph.
const SMALL_SHARE: usize = 20;

pub(super) struct Graph {
    pub(super) hnsw: Hnsw<'static, u16, DotF16>,
    /// Data id → slot, `DEAD` for a tombstone.
    pub(super) owner: Vec<u32>,
    /// Data id → where hnsw_rs keeps the point (to read its vector back).
    place: Vec<PointId>,
    pub(super) dead: usize,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("points", &self.owner.len())
            .field("dead", &self.dead)
            .finish()
    }
}

/// A graph built off the lock, ready to take the index over.
pub struct BuiltGraph {
    graph: Graph,
    /// Slot → its data ids in the new graph.
    points: Vec<(u32, Vec<u32>)>,
}

impl Graph {
    pub(super) fn empty(capacity: usize) -> Graph {
        Graph {
            hnsw: Hnsw::new(
                GRAPH_LINKS,
                capacity.max(1),
                GRAPH_LAYERS,
                GRAPH_BUILD_WIDTH,
                DotF16,
            ),
            owner: Vec::with_capacity(capacity),
            place: Vec::with_capacity(capacity),
            dead: 0,
        }
    }

    /// Adds one vector for `slot`; returns its data id.
    pub(super) fn add(&mut self, slot: u32, vector: &[f32]) -> Option<u32> {
        let vector = to_f16(&unit(vector)?);
        let id = u32::try_from(self.owner.len())
            .ok()
            .filter(|id| *id != DEAD)?;
        // hnsw_rs files a point under its top layer, at that layer's end:
        // the layer that grew says where it went.
        let points = self.hnsw.get_point_indexation();
        let before: Vec<usize> = (0..GRAPH_LAYERS)
            .map(|l| points.get_layer_nb_point(l))
            .collect();
        self.hnsw.insert_slice((&vector, id as usize));
        let place = (0..GRAPH_LAYERS)
            .find(|l| points.get_layer_nb_point(*l) > before[*l])
            .map(|l| PointId(l as u8, before[l] as i32))
            .unwrap_or(PointId(0, -1));
        self.owner.push(slot);
        self.place.push(place);
        Some(id)
    }

    pub(super) fn vector(&self, id: u32) -> Option<Vec<f32>> {
        self.hnsw
            .get_point_indexation()
            .get_point_data(self.place.get(id as usize)?)
            .map(|v| from_f16(&v))
    }

    pub(super) fn live(&self) -> usize {
        self.owner.len() - self.dead
    }
}

impl VectorIndex {
    /// A graph's answer: `nearest(query, points, width)` gives the points
    /// nearest a unit query with their distances (1 − cosine), nearest
    /// first; `owner` maps a point to its slot (`DEAD` for a tombstone).
    pub(super) fn walk(
        &self,
        query: &[f32],
        limit: usize,
        keep: &impl Fn(&str) -> bool,
        owner: &[u32],
        kept_tools: usize,
        nearest: impl Fn(&[f32], usize, usize) -> Vec<(usize, f32)>,
    ) -> Vec<(Arc<str>, f32)> {
        let Some(query) = unit(query) else {
            return Vec::new();
        };
        let alive = |id: &usize| {
            owner
                .get(*id)
                .filter(|slot| **slot != DEAD)
                .and_then(|slot| self.slots.get(*slot as usize))
                .and_then(Option::as_ref)
                .is_some_and(|s| keep(&s.tool))
        };
        let wanted = limit.min(self.slot_of.len());
        // A filter that keeps a small share of the tools starves a walk
        // (it wanders the whole graph for them): those are scored one by
        // one below instead.
        if kept_tools.saturating_mul(SMALL_SHARE) >= self.slot_of.len() {
            // Tools own about two points each; ask for more until enough
            // kept, live tools come back or the graph has no more to give.
            // The walk itself is unfiltered: hnsw_rs re-applies a filter to
            // its whole candidate heap at every step (measured: most of a
            // search's time at 200,000 vectors).
            let mut points = limit.saturating_mul(3);
            loop {
                let found = nearest(&query, points, GRAPH_SEARCH_WIDTH.max(points));
                let exhausted = found.len() < points;
                let mut best: HashMap<u32, f32> = HashMap::new();
                for (id, distance) in found {
                    let Some(&slot) = owner.get(id) else {
                        continue;
                    };
                    if !alive(&id) {
                        continue;
                    }
                    let score = 1.0 - distance;
                    let entry = best.entry(slot).or_insert(f32::NEG_INFINITY);
                    *entry = entry.max(score);
                }
                if best.len() >= wanted || (exhausted && !best.is_empty()) {
                    let mut ranked: Vec<(Arc<str>, f32)> = best
                        .into_iter()
                        .filter_map(|(slot, score)| {
                            Some((
                                Arc::clone(&self.slots.get(slot as usize)?.as_ref()?.tool),
                                score,
                            ))
                        })
                        .collect();
                    ranked.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                    ranked.truncate(limit);
                    return ranked;
                }
                if exhausted || points >= limit.saturating_mul(12) {
                    break;
                }
                points = points.saturating_mul(2);
            }
        }
        // Few kept tools (or a walk that found too few): each kept tool
        // by its own vectors.
        let mut best = vec![f32::NEG_INFINITY; self.slots.len()];
        for (index, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            if !keep(&slot.tool) {
                continue;
            }
            for id in &slot.points {
                if let Some(vector) = self.point_vector(*id) {
                    best[index] = best[index].max(dot(&query, &vector));
                }
            }
        }
        self.best_tools(best, limit, keep)
    }

    /// A graph of every live vector, built here (one thread, the caller's:
    /// the indexer's) while searches go on; `None` if `stop` was raised.
    pub fn build_graph(&self, stop: &std::sync::atomic::AtomicBool) -> Option<BuiltGraph> {
        let mut graph = Graph::empty(self.vectors());
        let mut points = Vec::with_capacity(self.slot_of.len());
        let mut added = 0usize;
        for (index, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let index = index as u32;
            let mut ids = Vec::with_capacity(slot.points.len());
            for point in &slot.points {
                let vector = self.point_vector(*point);
                if let Some(id) = vector.and_then(|v| graph.add(index, &v)) {
                    ids.push(id);
                }
                added += 1;
                if added.is_multiple_of(1024) && stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return None;
                }
            }
            points.push((index, ids));
        }
        Some(BuiltGraph { graph, points })
    }

    /// Lets a built graph take over (the matrix, or the old graph, is
    /// dropped). Tools changed since the build began would be lost, so
    /// call it with nothing changed since `build_graph`.
    pub fn install(&mut self, built: BuiltGraph) {
        for (slot, ids) in built.points {
            if let Some(Some(entry)) = self.slots.get_mut(slot as usize) {
                entry.points = ids;
            }
        }
        self.unsaved = built.graph.owner.len();
        self.saved = false;
        self.loaded = false;
        self.backend = Backend::Graph(built.graph);
    }
}
