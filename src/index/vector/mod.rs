//! The vector index: every tool's unit-length embeddings, searched by dot
//! product (= cosine). A tool may own several vectors (short text, text
//! with parameters) and scores by its best one.
//!
//! Two backends behind one interface. Up to a threshold (`GRAPH_FROM`,
//! settable) an exact scan over one contiguous matrix: no build, exact, and
//! fastest at aggregator sizes. Beyond it an `hnsw_rs` graph (cosine on
//! half-precision copies, `DotF16`) built on the indexing thread from the
//! matrix, which is then dropped. Measured on this 2-vCPU machine with
//! embedding-shaped data (`cargo bench --bench vectors`): the scan takes
//! ~1.3 ms over 20,000 vectors, ~4 ms over 50,000 and 17 ms over 200,000;
//! the graph answers in under 3 ms at every size with recall@10 ≥ 0.98 at
//! 32 links and width 512, but costs a build. The graph is persisted with
//! hnsw_rs's dump of its links (and our checksums, since its reload
//! trusts its files) and its vectors in files of ours (`saved_vectors`), and a
//! saved graph is searched from its files (`OnDisk`): its links read into
//! flat arrays by `links` (hnsw_rs's own reload rebuilds a layout of ~260 MB
//! more at 200,000 vectors and takes seconds), walked over byte copies of
//! its vectors, the points found scored again from the f16 file. That is
//! the form a restart opens (scanning the vectors until the links are read)
//! and the one a freshly built graph trades itself for once saved. Removed
//! tools become tombstones skipped by every search; tools added since the save
//! are scanned beside the walk; the graph is built again once tombstones
//! pass a quarter of it or added vectors a tenth.
//!
//! This file is the facade every backend answers behind (the tools' slots,
//! insert, remove, search) and the rebuild policy (`reshape_due`,
//! `back_to_exact`); `exact` scans the matrix, `graph` builds hnsw_rs's
//! graph and walks any graph, `on_disk` searches a saved one from its
//! files, `persist` saves and opens it, `saved_vectors` holds its vector
//! files and `links` its links read back. The dot products and f16
//! conversion are `crate::index::similarity`'s.

mod exact;
mod graph;
mod links;
mod on_disk;
mod persist;
mod saved_vectors;

use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use utoipa::ToSchema;

use crate::index::similarity::{normalised_mean, to_f16};
use exact::Exact;
use graph::{GRAPH_LINKS, GRAPH_SEARCH_WIDTH, Graph};
use on_disk::OnDisk;

/// Vectors beyond which the index becomes a graph (see the module doc).
pub const GRAPH_FROM: usize = 50_000;
/// A graph is rebuilt once this share of its points are tombstones.
const TOMBSTONE_SHARE: f64 = 0.25;
/// A graph read back from disk is rebuilt once the points added since
/// (scored one by one, ~0.09 µs each) pass this share of it.
const ADDED_SHARE: f64 = 0.1;
/// A point no tool owns any more.
const DEAD: u32 = u32::MAX;

#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    #[error("cannot read or write the saved vector graph: {0}")]
    Io(#[from] std::io::Error),
    #[error("the saved vector graph is not usable: {0}")]
    Unusable(String),
}

#[derive(Debug)]
struct Slot {
    tool: Arc<str>,
    /// The definition the vectors were made from.
    hash: Box<str>,
    /// Whether the tool has every vector it will get (the second pass may
    /// still be due).
    complete: bool,
    /// Rows of the matrix, or the graph's data ids.
    points: Vec<u32>,
}

#[derive(Debug)]
enum Backend {
    Exact(Exact),
    Graph(Graph),
    OnDisk(OnDisk),
}

/// What the indexer should do to the backend after a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reshape {
    /// Build a graph (from the matrix, or anew to shed tombstones).
    BuildGraph,
    /// Back to the exact scan: the catalog shrank well below the threshold.
    BackToExact,
}

#[derive(Debug)]
pub struct VectorIndex {
    dimension: usize,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<u32>,
    slot_of: HashMap<Arc<str>, u32>,
    backend: Backend,
    /// Points added or removed since the graph was last saved (or loaded).
    unsaved: usize,
    /// What is saved on disk is this graph, give or take `unsaved`.
    saved: bool,
    /// The graph was read from disk rather than built by this process.
    loaded: bool,
}

/// What answers the vector side of searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VectorBackend {
    /// A scan of every vector (exact).
    Exact,
    /// An HNSW graph (approximate, recall@10 ≥ 0.98 against the scan).
    Graph,
    /// The saved graph is loading; meanwhile its vectors are scanned
    /// where they lie on disk (exact).
    Loading,
}

/// The vector index's shape, as `GET /api/v1/search/status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct VectorShape {
    pub backend: VectorBackend,
    /// Live vectors (about two per tool).
    pub vectors: usize,
    /// Vectors of removed or changed tools the graph still holds (skipped;
    /// the graph is rebuilt past a quarter).
    pub tombstones: usize,
    /// The graph was loaded from disk at start, not built again.
    pub loaded: bool,
}

impl std::fmt::Display for VectorShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.backend {
            VectorBackend::Exact => write!(f, "exact scan of {} vectors", self.vectors),
            VectorBackend::Loading => write!(
                f,
                "exact scan of {} saved vectors while their graph loads",
                self.vectors
            ),
            VectorBackend::Graph => write!(
                f,
                "HNSW graph of {} vectors ({} tombstones), {GRAPH_LINKS} links, search width {GRAPH_SEARCH_WIDTH}{}",
                self.vectors,
                self.tombstones,
                if self.loaded {
                    ", loaded from disk"
                } else {
                    ""
                }
            ),
        }
    }
}

impl Default for VectorIndex {
    fn default() -> Self {
        VectorIndex::new(0)
    }
}

/// `v` scaled to unit length again: a graph's distances assume it (a dot
/// product above 1 would put a point nearer than itself).
fn unit(v: &[f32]) -> Option<Vec<f32>> {
    normalised_mean(std::iter::once(v))
}

impl VectorIndex {
    pub fn new(dimension: usize) -> VectorIndex {
        VectorIndex {
            dimension,
            slots: Vec::new(),
            free_slots: Vec::new(),
            slot_of: HashMap::new(),
            backend: Backend::Exact(Exact::default()),
            unsaved: 0,
            saved: false,
            loaded: false,
        }
    }

    pub fn tools(&self) -> usize {
        self.slot_of.len()
    }

    /// Live vectors (tombstones not counted).
    pub fn vectors(&self) -> usize {
        match &self.backend {
            Backend::Exact(exact) => exact.owner.len(),
            Backend::Graph(graph) => graph.live(),
            Backend::OnDisk(on_disk) => on_disk.live(),
        }
    }

    /// What answers searches, for the status and the logs.
    pub fn shape(&self) -> VectorShape {
        match &self.backend {
            Backend::Exact(exact) => VectorShape {
                backend: VectorBackend::Exact,
                vectors: exact.owner.len(),
                tombstones: 0,
                loaded: false,
            },
            Backend::OnDisk(on_disk) => VectorShape {
                backend: if on_disk.links.is_some() {
                    VectorBackend::Graph
                } else {
                    VectorBackend::Loading
                },
                vectors: on_disk.live(),
                tombstones: on_disk.dead,
                loaded: self.loaded,
            },
            Backend::Graph(graph) => VectorShape {
                backend: VectorBackend::Graph,
                vectors: graph.live(),
                tombstones: graph.dead,
                loaded: self.loaded,
            },
        }
    }

    pub fn is_graph(&self) -> bool {
        // A graph still loading is one: what is saved stays.
        matches!(self.backend, Backend::Graph(_) | Backend::OnDisk(_))
    }

    pub fn contains(&self, tool: &str) -> bool {
        self.slot_of.contains_key(tool)
    }

    /// Whether `tool` has all its vectors, made from the definition `hash`.
    pub fn holds(&self, tool: &str, hash: &str) -> bool {
        self.slot_of
            .get(tool)
            .and_then(|slot| self.slots.get(*slot as usize))
            .and_then(Option::as_ref)
            .is_some_and(|s| s.complete && &*s.hash == hash)
    }

    /// Adds (or replaces) a tool's vectors, made from the definition
    /// `hash`; `complete` when none is still to come. Vectors of another
    /// dimension are ignored.
    pub fn insert(&mut self, tool: Arc<str>, hash: &str, complete: bool, vectors: &[Vec<f32>]) {
        self.remove(&tool);
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let mut points = Vec::with_capacity(vectors.len());
        for vector in vectors.iter().filter(|v| v.len() == self.dimension) {
            match &mut self.backend {
                Backend::Exact(exact) => {
                    points.push(exact.owner.len() as u32);
                    exact.matrix.extend_from_slice(vector);
                    exact.owner.push(slot);
                }
                Backend::Graph(graph) => {
                    if let Some(id) = graph.add(slot, vector) {
                        points.push(id);
                    }
                }
                Backend::OnDisk(on_disk) => {
                    // Unit now, so the loaded graph takes every extra row
                    // (its `add` refuses what cannot be normalised).
                    if let Some(vector) = unit(vector)
                        && let Ok(id) = u32::try_from(on_disk.owner.len())
                        && id != DEAD
                    {
                        points.push(id);
                        on_disk.extra.extend_from_slice(&vector);
                        on_disk.owner.push(slot);
                    }
                }
            }
        }
        self.unsaved += points.len();
        if let Some(entry) = self.slots.get_mut(slot as usize) {
            *entry = Some(Slot {
                tool: Arc::clone(&tool),
                hash: hash.into(),
                complete,
                points,
            });
        }
        self.slot_of.insert(tool, slot);
    }

    /// Takes a tool's vectors out; searches never see it again.
    pub fn remove(&mut self, tool: &str) {
        let Some(slot) = self.slot_of.remove(tool) else {
            return;
        };
        let Some(Slot { mut points, .. }) =
            self.slots.get_mut(slot as usize).and_then(Option::take)
        else {
            return;
        };
        self.unsaved += points.len();
        match &mut self.backend {
            Backend::Exact(exact) => {
                // Highest row first: the last row, moved into the gap, is
                // then never one of this tool's.
                points.sort_unstable();
                let d = self.dimension;
                while let Some(row) = points.pop() {
                    let (row, last) = (row as usize, exact.owner.len() - 1);
                    if row != last {
                        exact.matrix.copy_within(last * d..(last + 1) * d, row * d);
                        let moved = exact.owner[last];
                        exact.owner[row] = moved;
                        if let Some(Some(other)) = self.slots.get_mut(moved as usize)
                            && let Some(p) = other.points.iter_mut().find(|p| **p as usize == last)
                        {
                            *p = row as u32;
                        }
                    }
                    exact.owner.pop();
                    exact.matrix.truncate(exact.owner.len() * d);
                }
            }
            Backend::Graph(Graph { owner, dead, .. })
            | Backend::OnDisk(OnDisk { owner, dead, .. }) => {
                for id in points {
                    if let Some(owner) = owner.get_mut(id as usize)
                        && *owner != DEAD
                    {
                        *owner = DEAD;
                        *dead += 1;
                    }
                }
            }
        }
        self.free_slots.push(slot);
    }

    /// Calls `f` with each wanted tool and its vectors, one tool at a
    /// time (nothing is copied for the exact backend).
    pub fn for_each_tool(
        &self,
        wanted: impl Fn(&str) -> bool,
        mut f: impl FnMut(&Arc<str>, &[&[f32]]),
    ) {
        let d = self.dimension;
        for slot in self.slots.iter().flatten() {
            if !wanted(&slot.tool) {
                continue;
            }
            match &self.backend {
                Backend::Exact(exact) => {
                    let vectors: Vec<&[f32]> = slot
                        .points
                        .iter()
                        .filter_map(|row| {
                            exact.matrix.get(*row as usize * d..(*row as usize + 1) * d)
                        })
                        .collect();
                    f(&slot.tool, &vectors);
                }
                Backend::Graph(_) | Backend::OnDisk(_) => {
                    let owned: Vec<Vec<f32>> = slot
                        .points
                        .iter()
                        .filter_map(|id| self.point_vector(*id))
                        .collect();
                    let vectors: Vec<&[f32]> = owned.iter().map(Vec::as_slice).collect();
                    f(&slot.tool, &vectors);
                }
            }
        }
    }

    /// The vectors of the tools `wanted` picks.
    pub fn vectors_of(&self, wanted: impl Fn(&str) -> bool) -> HashMap<Arc<str>, Vec<Vec<f32>>> {
        let mut out = HashMap::new();
        self.for_each_tool(wanted, |tool, vectors| {
            out.insert(
                Arc::clone(tool),
                vectors.iter().map(|v| v.to_vec()).collect(),
            );
        });
        out
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
        self.search_among(query, limit, keep, usize::MAX)
    }

    /// `search`, told how many tools `keep` lets through (about): a graph
    /// scores a small share of them one by one rather than walk for them.
    pub fn search_among(
        &self,
        query: &[f32],
        limit: usize,
        keep: impl Fn(&str) -> bool,
        kept_tools: usize,
    ) -> Vec<(Arc<str>, f32)> {
        if query.len() != self.dimension || limit == 0 || self.slot_of.is_empty() || kept_tools == 0
        {
            return Vec::new();
        }
        match &self.backend {
            Backend::Exact(exact) => self.scan(query, limit, &keep, exact),
            Backend::Graph(graph) => {
                let nearest = |query: &[f32], wanted: usize, width: usize| {
                    let query = to_f16(query);
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        graph.hnsw.search(&query, wanted, width)
                    }))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|n| (n.d_id, n.distance))
                    .collect()
                };
                self.walk(query, limit, &keep, &graph.owner, kept_tools, nearest)
            }
            Backend::OnDisk(on_disk) => match &on_disk.links {
                Some(links) => {
                    let nearest = |query: &[f32], wanted: usize, width: usize| {
                        on_disk.nearest(links, query, wanted, width)
                    };
                    self.walk(query, limit, &keep, &on_disk.owner, kept_tools, nearest)
                }
                None => self.scan_on_disk(query, limit, &keep, on_disk),
            },
        }
    }

    /// One point's vector, wherever the backend keeps it.
    fn point_vector(&self, id: u32) -> Option<Vec<f32>> {
        match &self.backend {
            Backend::Exact(exact) => {
                let at = id as usize * self.dimension;
                exact
                    .matrix
                    .get(at..at + self.dimension)
                    .map(<[f32]>::to_vec)
            }
            Backend::Graph(graph) => graph.vector(id),
            Backend::OnDisk(on_disk) => on_disk.vector(id, self.dimension),
        }
    }

    /// The best `limit` kept tools from per-slot scores.
    fn best_tools(
        &self,
        best: Vec<f32>,
        limit: usize,
        keep: &impl Fn(&str) -> bool,
    ) -> Vec<(Arc<str>, f32)> {
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
                let tool = &self.slots.get(slot as usize)?.as_ref()?.tool;
                keep(tool).then(|| (Arc::clone(tool), score))
            })
            .take(limit)
            .collect()
    }

    /// What the backend should become, given the vectors it holds now and
    /// the threshold (`graph_from` vectors).
    pub fn reshape_due(&self, graph_from: usize) -> Option<Reshape> {
        match &self.backend {
            Backend::Exact(exact) if exact.owner.len() > graph_from => Some(Reshape::BuildGraph),
            Backend::Graph(graph) if graph.live() * 2 < graph_from => Some(Reshape::BackToExact),
            Backend::Graph(graph)
                if graph.dead as f64 > TOMBSTONE_SHARE * graph.owner.len() as f64 =>
            {
                Some(Reshape::BuildGraph)
            }
            // A graph read back from disk takes no new points: those
            // added since are scanned, and past a share the graph is
            // built anew with them.
            Backend::OnDisk(on_disk) if on_disk.links.is_some() => {
                if on_disk.live() * 2 < graph_from {
                    Some(Reshape::BackToExact)
                } else if on_disk.dead as f64 > TOMBSTONE_SHARE * on_disk.owner.len() as f64
                    || on_disk.added() as f64 > ADDED_SHARE * on_disk.saved as f64
                {
                    Some(Reshape::BuildGraph)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    /// Back to the exact scan, the graph's live vectors copied out (at its
    /// f16 precision: a full reindex takes them from the cache again).
    pub fn back_to_exact(&mut self) {
        if matches!(self.backend, Backend::Exact(_)) {
            return;
        }
        let mut exact = Exact::default();
        let mut slots = std::mem::take(&mut self.slots);
        for (index, slot) in slots.iter_mut().enumerate() {
            let Some(slot) = slot else { continue };
            let mut rows = Vec::with_capacity(slot.points.len());
            for id in &slot.points {
                if let Some(vector) = self.point_vector(*id) {
                    rows.push(exact.owner.len() as u32);
                    exact.matrix.extend_from_slice(&vector);
                    exact.owner.push(index as u32);
                }
            }
            slot.points = rows;
        }
        self.slots = slots;
        self.backend = Backend::Exact(exact);
        self.saved = false;
    }
}

#[cfg(test)]
mod tests;
