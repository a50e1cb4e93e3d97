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
//! trusts its files) and its vectors in files of ours (`saved`), and a
//! saved graph is searched from its files (`OnDisk`): its links read into
//! flat arrays by `links` (hnsw_rs's own reload rebuilds a layout of ~260 MB
//! more at 200,000 vectors and takes seconds), walked over byte copies of
//! its vectors, the points found scored again from the f16 file. That is
//! the form a restart opens (scanning the vectors until the links are read)
//! and the one a freshly built graph trades itself for once saved. Removed
//! tools become tombstones skipped by every search; tools added since the save
//! are scanned beside the walk; the graph is built again once tombstones
//! pass a quarter of it or added vectors a tenth.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use hnsw_rs::api::AnnT;
use hnsw_rs::prelude::{Distance, Hnsw, PointId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use utoipa::ToSchema;

use super::links::Links;
use super::saved::{self, SavedVectors};

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

/// The graph's distance: 1 − cosine of unit vectors kept as half-precision
/// floats (their bits, `u16`, which hnsw_rs can dump and map). A graph of
/// 200,000 vectors holds 300 MB of f32 and half that in f16, while the
/// ranking barely moves: the exact top 10 over f16 copies of 200,000
/// embedding-shaped vectors is 99.8 % the f32 top 10 (i8 with a scale per
/// vector: 97.3 %, too lossy without a second, exact pass). The hardware's
/// f16 conversion (F16C, detected at run time) keeps it about as fast as
/// hnsw_rs's own `DistDot` on f32.
#[derive(Debug, Default, Clone, Copy)]
pub struct DotF16;

impl Distance<u16> for DotF16 {
    fn eval(&self, a: &[u16], b: &[u16]) -> f32 {
        // Never negative: rounding must not make a point nearer than
        // itself (hnsw_rs orders by it).
        (1.0 - dot_f16(a, b)).max(0.0)
    }
}

/// The dot product of two f16 vectors (their bits). The graph's build and
/// walk spend most of their time here: with AVX2, F16C and FMA (checked at
/// run time; the release targets baseline x86-64) eight lanes are
/// converted and multiplied per instruction, as fast as hnsw_rs's SIMD
/// `DistDot` on f32; elsewhere a chunk at a time through `half`.
fn dot_f16(a: &[u16], b: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { simd::dot_f16(a, b) };
    }
    dot_f16_portable(a, b)
}

/// `dot` of an f32 vector and an f16 one (the scan of a saved graph's
/// vectors).
pub(super) fn dot_f32_f16(a: &[f32], b: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { simd::dot_f32_f16(a, b) };
    }
    dot_f32_f16_portable(a, b)
}

/// `dot` of an f32 vector and signed bytes (the walk over a saved
/// graph's byte copies; the caller scales).
pub(super) fn dot_f32_i8(a: &[f32], b: &[i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { simd::dot_f32_i8(a, b) };
    }
    dot_f32_i8_portable(a, b)
}

fn dot_f32_i8_portable(a: &[f32], b: &[i8]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (chunks_a, chunks_b) = (a.chunks_exact(8), b.chunks_exact(8));
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (x, y) in chunks_a.zip(chunks_b) {
        for i in 0..8 {
            acc[i] += x[i] * f32::from(y[i]);
        }
    }
    let tail: f32 = rest_a
        .iter()
        .zip(rest_b)
        .map(|(x, y)| x * f32::from(*y))
        .sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::{
        __m128i, __m256, _mm_loadu_si128, _mm_srli_si128, _mm256_add_ps, _mm256_cvtepi8_epi32,
        _mm256_cvtepi32_ps, _mm256_cvtph_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };

    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("f16c")
            && std::is_x86_feature_detected!("fma")
    }

    #[target_feature(enable = "avx2,f16c,fma")]
    fn sum(acc: __m256) -> f32 {
        let mut lanes = [0.0f32; 8];
        // SAFETY: writes eight lanes into an eight-float array.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        lanes.iter().sum()
    }

    /// # Safety
    /// The CPU must have AVX2, F16C and FMA (`available`).
    #[target_feature(enable = "avx2,f16c,fma")]
    pub unsafe fn dot_f16(a: &[u16], b: &[u16]) -> f32 {
        let n = a.len().min(b.len());
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        // SAFETY: every load reads eight u16 at `i..i + 8 <= n`.
        unsafe {
            while i + 16 <= n {
                let a0 = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i).cast::<__m128i>()));
                let b0 = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>()));
                let a1 = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i + 8).cast::<__m128i>()));
                let b1 = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i + 8).cast::<__m128i>()));
                acc0 = _mm256_fmadd_ps(a0, b0, acc0);
                acc1 = _mm256_fmadd_ps(a1, b1, acc1);
                i += 16;
            }
            while i + 8 <= n {
                let a0 = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i).cast::<__m128i>()));
                let b0 = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>()));
                acc0 = _mm256_fmadd_ps(a0, b0, acc0);
                i += 8;
            }
        }
        sum(_mm256_add_ps(acc0, acc1)) + super::dot_f16_portable(&a[i..n], &b[i..n])
    }

    /// # Safety
    /// The CPU must have AVX2, F16C and FMA (`available`).
    #[target_feature(enable = "avx2,f16c,fma")]
    pub unsafe fn dot_f32_f16(a: &[f32], b: &[u16]) -> f32 {
        let n = a.len().min(b.len());
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY: every load reads eight values at `i..i + 8 <= n`.
        unsafe {
            while i + 8 <= n {
                let a0 = _mm256_loadu_ps(a.as_ptr().add(i));
                let b0 = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>()));
                acc = _mm256_fmadd_ps(a0, b0, acc);
                i += 8;
            }
        }
        sum(acc) + super::dot_f32_f16_portable(&a[i..n], &b[i..n])
    }

    /// # Safety
    /// The CPU must have AVX2, F16C and FMA (`available`).
    #[target_feature(enable = "avx2,f16c,fma")]
    pub unsafe fn dot_f32_i8(a: &[f32], b: &[i8]) -> f32 {
        let n = a.len().min(b.len());
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        // SAFETY: every load reads sixteen bytes or eight floats at
        // `i..i + 16 <= n`.
        unsafe {
            while i + 16 <= n {
                let bytes = _mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>());
                let low = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
                let high = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(bytes)));
                acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), low, acc0);
                acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i + 8)), high, acc1);
                i += 16;
            }
        }
        sum(_mm256_add_ps(acc0, acc1)) + super::dot_f32_i8_portable(&a[i..n], &b[i..n])
    }
}

/// Converted a chunk at a time into stack buffers, the f32 dot product on
/// each.
fn dot_f16_portable(a: &[u16], b: &[u16]) -> f32 {
    const CHUNK: usize = 64;
    let (mut fa, mut fb) = ([0.0f32; CHUNK], [0.0f32; CHUNK]);
    let mut sum = 0.0;
    for (ca, cb) in a.chunks(CHUNK).zip(b.chunks(CHUNK)) {
        let n = ca.len().min(cb.len());
        ca[..n]
            .reinterpret_cast::<f16>()
            .convert_to_f32_slice(&mut fa[..n]);
        cb[..n]
            .reinterpret_cast::<f16>()
            .convert_to_f32_slice(&mut fb[..n]);
        sum += dot(&fa[..n], &fb[..n]);
    }
    sum
}

pub(super) fn to_f16(v: &[f32]) -> Vec<u16> {
    let mut halves = vec![f16::ZERO; v.len()];
    halves.convert_from_f32_slice(v);
    halves.iter().map(|h| h.to_bits()).collect()
}

fn dot_f32_f16_portable(a: &[f32], b: &[u16]) -> f32 {
    const CHUNK: usize = 64;
    let mut fb = [0.0f32; CHUNK];
    let mut sum = 0.0;
    for (ca, cb) in a.chunks(CHUNK).zip(b.chunks(CHUNK)) {
        let n = ca.len().min(cb.len());
        cb[..n]
            .reinterpret_cast::<f16>()
            .convert_to_f32_slice(&mut fb[..n]);
        sum += dot(&ca[..n], &fb[..n]);
    }
    sum
}

pub(super) fn from_f16(v: &[u16]) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    v.reinterpret_cast::<f16>().convert_to_f32_slice(&mut out);
    out
}

/// Vectors beyond which the index becomes a graph (see the module doc).
pub const GRAPH_FROM: usize = 50_000;
/// Links per node: 16 fall short of recall 0.98 at 200,000 vectors.
const GRAPH_LINKS: usize = 32;
const GRAPH_BUILD_WIDTH: usize = 200;
/// Search width: at 512, recall@10 at 200,000 vectors read 0.977–0.982
/// over three builds (each build's random layers move it); at 768, 0.995,
/// the hybrid search still ~9 ms (BENCHMARKS.md).
const GRAPH_SEARCH_WIDTH: usize = 768;
/// hnsw_rs keeps 16 layers whatever is asked.
const GRAPH_LAYERS: usize = 16;
/// A graph is rebuilt once this share of its points are tombstones.
const TOMBSTONE_SHARE: f64 = 0.25;
/// A graph read back from disk is rebuilt once the points added since
/// (scored one by one, ~0.09 µs each) pass this share of it.
const ADDED_SHARE: f64 = 0.1;
/// A filter keeping under 1/SMALL_SHARE of the tools scores them one by
/// one instead of walking the graph.
const SMALL_SHARE: usize = 20;
/// A point no tool owns any more.
const DEAD: u32 = u32::MAX;
/// Bumped when what is saved (or what a saved vector means) changes:
/// 2 keeps vectors as f16, 3 in files of ours beside byte copies.
const SAVED_FORMAT: u32 = 3;
const SAVED_NAME: &str = "graph";
const SAVED_META: &str = "meta.json";

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

#[derive(Debug, Default)]
struct Exact {
    /// Row-major, `owner.len() * dimension` values.
    matrix: Vec<f32>,
    /// Row → slot.
    owner: Vec<u32>,
}

struct Graph {
    hnsw: Hnsw<'static, u16, DotF16>,
    /// Data id → slot, `DEAD` for a tombstone.
    owner: Vec<u32>,
    /// Data id → where hnsw_rs keeps the point (to read its vector back).
    place: Vec<PointId>,
    dead: usize,
}

/// A saved graph searched from its files (`saved`) while its links load
/// on another thread (searches scan its vectors meanwhile), then by a walk
/// of them. Tools removed since become tombstones and new vectors wait in
/// `extra`; the loaded links take both over (`install_loaded`).
struct OnDisk {
    vectors: SavedVectors,
    /// Points in `vectors`: data ids below it are there, the rest in `extra`.
    saved: usize,
    /// Data id → slot, `DEAD` for a tombstone.
    owner: Vec<u32>,
    /// Unit vectors added since, row-major, data ids from `saved` on.
    extra: Vec<f32>,
    dead: usize,
    /// Which opening this is: a graph is installed only over its own.
    ticket: u64,
    /// The saved graph's links, once read: searches walk them (and score
    /// `extra` one by one).
    links: Option<Links>,
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
    fn vector(&self, id: u32, dimension: usize) -> Option<Vec<f32>> {
        let id = id as usize;
        if id < self.saved {
            self.vectors.vector(id)
        } else {
            let at = (id - self.saved) * dimension;
            self.extra.get(at..at + dimension).map(<[f32]>::to_vec)
        }
    }

    /// `query`'s cosine with point `id` at the saved precision.
    fn score(&self, query: &[f32], id: usize) -> Option<f32> {
        if id < self.saved {
            self.vectors.exact(query, id)
        } else {
            let at = (id - self.saved) * query.len();
            self.extra.get(at..at + query.len()).map(|v| dot(query, v))
        }
    }

    fn live(&self) -> usize {
        self.owner.len() - self.dead
    }

    /// Vectors added since the graph was saved (scored one by one).
    fn added(&self) -> usize {
        self.owner.len() - self.saved
    }

    /// The points nearest `query` (unit): the saved graph's by a walk of
    /// its links, those added since by a scan.
    fn nearest(
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

static NEXT_TICKET: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The graph of a saved index, to load (slowly) after `open_saved`.
pub struct PendingGraph {
    dir: std::path::PathBuf,
    points: usize,
    /// Length and CRC-32 the links file was written with.
    links: (u64, u32),
    ticket: u64,
}

/// A graph's links read back from disk, for `install_loaded`.
pub struct LoadedGraph {
    links: Links,
    ticket: u64,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("points", &self.owner.len())
            .field("dead", &self.dead)
            .finish()
    }
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

/// A graph built off the lock, ready to take the index over.
pub struct BuiltGraph {
    graph: Graph,
    /// Slot → its data ids in the new graph.
    points: Vec<(u32, Vec<u32>)>,
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

impl Graph {
    fn empty(capacity: usize) -> Graph {
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
    fn add(&mut self, slot: u32, vector: &[f32]) -> Option<u32> {
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

    fn vector(&self, id: u32) -> Option<Vec<f32>> {
        self.hnsw
            .get_point_indexation()
            .get_point_data(self.place.get(id as usize)?)
            .map(|v| from_f16(&v))
    }

    fn live(&self) -> usize {
        self.owner.len() - self.dead
    }
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

    /// The scan of a saved graph's vectors (and those added since): every
    /// point by its byte copy, then the best tools again by their f16
    /// vectors, so the answer is the exact scan's.
    fn scan_on_disk(
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

    fn scan(
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

    /// A graph's answer: `nearest(query, points, width)` gives the points
    /// nearest a unit query with their distances (1 − cosine), nearest
    /// first; `owner` maps a point to its slot (`DEAD` for a tombstone).
    fn walk(
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

    /// Whether the graph changed enough since it was saved to be worth
    /// writing again (a restart makes up small differences from the
    /// embedding cache).
    pub fn save_due(&self) -> bool {
        match &self.backend {
            Backend::Graph(graph) => !self.saved || self.unsaved > 1000.max(graph.owner.len() / 50),
            // What is saved is being loaded (and read in place).
            Backend::Exact(_) | Backend::OnDisk(_) => false,
        }
    }

    /// Writes the graph under `dir` (replacing what was there; removing
    /// it for the exact backend), stamped with the catalog `generation` and
    /// the `model` its vectors come from.
    pub fn save(&self, dir: &Path, generation: u64, model: &str) -> Result<(), VectorError> {
        if matches!(self.backend, Backend::OnDisk(_)) {
            return Ok(());
        }
        let Backend::Graph(graph) = &self.backend else {
            return match std::fs::remove_dir_all(dir) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
                _ => Ok(()),
            };
        };
        let staging = dir.with_extension("tmp");
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)?;
        // The staging directory is new, so hnsw_rs writes under our name
        // (it picks another only beside files it may have on_disk).
        let dumped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            graph.hnsw.file_dump(&staging, SAVED_NAME)
        }))
        .map_err(|_| VectorError::Unusable("hnsw_rs failed while dumping".into()))?
        .map_err(|err| VectorError::Unusable(err.to_string()))?;
        if dumped != SAVED_NAME {
            return Err(VectorError::Unusable(format!(
                "hnsw_rs dumped under another name ({dumped})"
            )));
        }
        // Its vectors are kept in files of ours (by data id, as bytes and
        // f16); hnsw_rs's copy would only take the disk twice.
        std::fs::remove_file(staging.join(format!("{SAVED_NAME}.hnsw.data")))?;
        saved::write(
            &staging,
            self.dimension,
            (0..graph.owner.len() as u32).map(|id| graph.vector(id)),
        )?;
        let meta = SavedMeta {
            format: SAVED_FORMAT,
            model: model.to_owned(),
            dimension: self.dimension,
            generation,
            points: graph.owner.len(),
            files: saved_files(&staging)?,
            tools: self
                .slots
                .iter()
                .flatten()
                .map(|s| SavedTool {
                    id: s.tool.to_string(),
                    hash: s.hash.to_string(),
                    complete: s.complete,
                    points: s.points.clone(),
                })
                .collect(),
        };
        let json =
            serde_json::to_vec(&meta).map_err(|err| VectorError::Unusable(err.to_string()))?;
        std::fs::write(staging.join(SAVED_META), json)?;
        let old = dir.with_extension("old");
        let _ = std::fs::remove_dir_all(&old);
        if dir.exists() {
            std::fs::rename(dir, &old)?;
        }
        std::fs::rename(&staging, dir)?;
        let _ = std::fs::remove_dir_all(&old);
        Ok(())
    }

    /// After `save`: what is on disk is what is in memory.
    pub fn mark_saved(&mut self) {
        self.unsaved = 0;
        self.saved = true;
    }

    /// The graph saved under `dir`, if it is there, whole, and of this
    /// `model` and `dimension`, loaded at once (`open_saved`, then the
    /// graph); with the catalog generation it was saved at.
    pub fn load(
        dir: &Path,
        dimension: usize,
        model: &str,
    ) -> Result<Option<(VectorIndex, u64)>, VectorError> {
        let Some((mut index, generation, pending)) =
            VectorIndex::open_saved(dir, dimension, model)?
        else {
            return Ok(None);
        };
        let loaded = pending.load()?;
        if !index.install_loaded(loaded) {
            return Err(VectorError::Unusable(
                "the graph did not match its vectors".into(),
            ));
        }
        Ok(Some((index, generation)))
    }

    /// The index saved under `dir`, if it is there, whole, and of this
    /// `model` and `dimension`, answering at once from its vectors read in
    /// place (an exact scan); with the catalog generation it was saved at
    /// and its graph to load (`PendingGraph::load`, then
    /// `install_loaded`). Its tools may differ from the store's: the caller
    /// reconciles.
    pub fn open_saved(
        dir: &Path,
        dimension: usize,
        model: &str,
    ) -> Result<Option<(VectorIndex, u64, PendingGraph)>, VectorError> {
        let meta = match std::fs::read(dir.join(SAVED_META)) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        let meta: SavedMeta =
            serde_json::from_slice(&meta).map_err(|err| VectorError::Unusable(err.to_string()))?;
        if meta.format != SAVED_FORMAT || meta.model != model || meta.dimension != dimension {
            return Err(VectorError::Unusable(format!(
                "saved for format {} model {} dimension {}",
                meta.format, meta.model, meta.dimension
            )));
        }
        // Every file is checked against what was written: the vectors
        // here (the bytes as they are read), the links where they are read.
        let changed = || VectorError::Unusable("its files changed since they were written".into());
        if !as_written(&meta.files, dir, saved::F16_FILE)? {
            return Err(changed());
        }
        let (vectors, bytes_file) = SavedVectors::open(dir, dimension, meta.points)?;
        if !meta
            .files
            .iter()
            .any(|f| f.name == saved::I8_FILE && (f.len, f.crc32) == bytes_file)
        {
            return Err(changed());
        }
        let links = meta
            .files
            .iter()
            .find(|f| f.name == links_file())
            .map(|f| (f.len, f.crc32))
            .ok_or_else(changed)?;
        let mut index = VectorIndex::new(dimension);
        let mut owner = vec![DEAD; meta.points];
        for tool in meta.tools {
            let slot = index.slots.len() as u32;
            for id in &tool.points {
                match owner.get_mut(*id as usize) {
                    Some(entry) if *entry == DEAD => *entry = slot,
                    _ => return Err(VectorError::Unusable("a point owned twice".into())),
                }
            }
            let id: Arc<str> = Arc::from(tool.id);
            index.slot_of.insert(Arc::clone(&id), slot);
            index.slots.push(Some(Slot {
                tool: id,
                hash: tool.hash.into(),
                complete: tool.complete,
                points: tool.points,
            }));
        }
        let dead = owner.iter().filter(|o| **o == DEAD).count();
        let ticket = NEXT_TICKET.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        index.saved = true;
        index.backend = Backend::OnDisk(OnDisk {
            vectors,
            saved: meta.points,
            owner,
            extra: Vec::new(),
            dead,
            ticket,
            links: None,
        });
        let pending = PendingGraph {
            dir: dir.to_path_buf(),
            points: meta.points,
            links,
            ticket,
        };
        Ok(Some((index, meta.generation, pending)))
    }

    /// Lets the graph loaded for this index walk its vectors (read in
    /// place) from now on; tombstones and vectors added meanwhile stay as
    /// they are. False (and nothing changes) if the index moved on to
    /// another backend since.
    pub fn install_loaded(&mut self, loaded: LoadedGraph) -> bool {
        let Backend::OnDisk(on_disk) = &mut self.backend else {
            return false;
        };
        if on_disk.ticket != loaded.ticket || on_disk.links.is_some() {
            return false;
        }
        on_disk.links = Some(loaded.links);
        self.loaded = true;
        true
    }

    /// Trades a graph built and saved by this process, unchanged since,
    /// for the same graph read back from its files (`open_saved`, its
    /// links installed): hnsw_rs's in-memory layout holds about 260 MB
    /// more at 200,000 vectors. Gives the graph it replaced back, to drop
    /// off the lock (freeing hnsw_rs's points takes seconds); `None` if the
    /// index changed since the save or `saved` is not that graph.
    pub fn adopt_saved(&mut self, mut saved: VectorIndex) -> Option<VectorIndex> {
        let adoptable = matches!(self.backend, Backend::Graph(_))
            && self.saved
            && self.unsaved == 0
            && matches!(&saved.backend, Backend::OnDisk(m) if m.links.is_some())
            && saved.tools() == self.tools()
            && saved.vectors() == self.vectors();
        if !adoptable {
            return None;
        }
        saved.loaded = false;
        Some(std::mem::replace(self, saved))
    }

    /// The graph for this index could not be loaded: its vectors are
    /// copied out of the files into the exact scan (a later sync builds a
    /// graph again).
    pub fn loading_failed(&mut self, ticket: u64) {
        if matches!(&self.backend, Backend::OnDisk(m) if m.ticket == ticket) {
            self.back_to_exact();
        }
    }
}

impl PendingGraph {
    /// Which `open_saved` this graph belongs to.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }

    /// Reads the graph's links back (about a second at 200,000 vectors).
    pub fn load(self) -> Result<LoadedGraph, VectorError> {
        let path = self.dir.join(links_file());
        if checksum(std::fs::File::open(&path)?, |_| ())? != self.links {
            return Err(VectorError::Unusable(
                "its links changed since they were written".into(),
            ));
        }
        let links = Links::read(&path, self.points)
            .map_err(|err| VectorError::Unusable(err.to_string()))?;
        Ok(LoadedGraph {
            links,
            ticket: self.ticket,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedMeta {
    format: u32,
    model: String,
    dimension: usize,
    generation: u64,
    points: usize,
    files: Vec<SavedFile>,
    tools: Vec<SavedTool>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct SavedFile {
    name: String,
    len: u64,
    crc32: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedTool {
    id: String,
    hash: String,
    complete: bool,
    points: Vec<u32>,
}

/// The name of hnsw_rs's dump of the links.
fn links_file() -> String {
    format!("{SAVED_NAME}.hnsw.graph")
}

/// Length and CRC-32 of the saved files under `dir`: hnsw_rs's links
/// and our vectors.
fn saved_files(dir: &Path) -> Result<Vec<SavedFile>, VectorError> {
    [links_file().as_str(), saved::F16_FILE, saved::I8_FILE]
        .into_iter()
        .map(|name| {
            let (len, crc32) = checksum(std::fs::File::open(dir.join(name))?, |_| ())?;
            Ok(SavedFile {
                name: name.to_owned(),
                len,
                crc32,
            })
        })
        .collect()
}

/// Length and CRC-32 of what `file` holds, each chunk also handed to
/// `chunk` (so a reader checks what it reads in the same pass).
pub(super) fn checksum(
    mut file: std::fs::File,
    mut chunk: impl FnMut(&[u8]),
) -> std::io::Result<(u64, u32)> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let read = std::io::Read::read(&mut file, &mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        chunk(&buffer[..read]);
        len += read as u64;
    }
    Ok((len, hasher.finalize()))
}

/// Whether the file `name` under `dir` is as `meta` says it was written.
fn as_written(meta: &[SavedFile], dir: &Path, name: &str) -> Result<bool, VectorError> {
    let (len, crc32) = checksum(std::fs::File::open(dir.join(name))?, |_| ())?;
    Ok(meta
        .iter()
        .any(|f| f.name == name && f.len == len && f.crc32 == crc32))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::index) fn unit(seed: u64, dims: usize) -> Vec<f32> {
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
    fn f16_and_byte_dot_products_agree_with_f32_on_every_path() {
        for dims in [384, 16, 13, 7] {
            let (a, b) = (unit(dims as u64, dims), unit(dims as u64 + 1, dims));
            let (ha, hb) = (to_f16(&a), to_f16(&b));
            let exact = dot(&from_f16(&ha), &from_f16(&hb));
            for got in [
                dot_f16(&ha, &hb),
                dot_f16_portable(&ha, &hb),
                1.0 - DotF16.eval(&ha, &hb),
            ] {
                assert!((got - exact).abs() < 1e-5, "{dims}: {got} / {exact}");
            }
            let mixed = dot(&a, &from_f16(&hb));
            for got in [dot_f32_f16(&a, &hb), dot_f32_f16_portable(&a, &hb)] {
                assert!((got - mixed).abs() < 1e-5, "{dims}: {got} / {mixed}");
            }
            // And f16 copies stay within rounding of the f32 cosine.
            assert!((exact - dot(&a, &b)).abs() < 1e-3);
            let bytes: Vec<i8> = (0..dims)
                .map(|i| (i as i32 * 37 % 255 - 127) as i8)
                .collect();
            let widened: Vec<f32> = bytes.iter().map(|b| f32::from(*b)).collect();
            let want = dot(&a, &widened);
            for got in [dot_f32_i8(&a, &bytes), dot_f32_i8_portable(&a, &bytes)] {
                assert!(
                    (got - want).abs() < 1e-4 * want.abs().max(1.0),
                    "{dims}: {got} / {want}"
                );
            }
        }
    }

    #[test]
    fn finds_the_nearest_tool_by_its_best_vector_and_forgets_removed_ones() {
        let mut index = VectorIndex::new(384);
        for i in 0..100 {
            index.insert(
                Arc::from(format!("s.tool{i}")),
                "h",
                true,
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
        index.insert(Arc::from("a.x"), "h", true, &[unit(1, 16)]);
        index.insert(Arc::from("b.y"), "h", true, &[unit(2, 16)]);
        index.insert(Arc::from("a.x"), "h2", true, &[unit(3, 16)]);
        assert_eq!(index.vectors(), 2);
        assert_eq!(&*index.search(&unit(3, 16), 1, |_| true)[0].0, "a.x");
        assert_ne!(index.search(&unit(1, 16), 1, |_| true)[0].1, 1.0);
        let only_b = index.search(&unit(3, 16), 5, |tool| tool.starts_with("b."));
        assert_eq!(only_b.len(), 1);
        assert_eq!(&*only_b[0].0, "b.y");
        // Wrong-dimension queries find nothing rather than panic.
        assert!(index.search(&unit(3, 8), 5, |_| true).is_empty());
    }

    /// Two indexes with the same tools: one left exact (the oracle), one
    /// turned into a graph.
    fn exact_and_graph(tools: u64, dims: usize) -> (VectorIndex, VectorIndex) {
        let fill = |index: &mut VectorIndex| {
            for i in 0..tools {
                index.insert(
                    Arc::from(format!("s.tool{i}")),
                    "h",
                    true,
                    &[unit(i, dims), unit(i + 100_000, dims)],
                );
            }
        };
        let (mut exact, mut graph) = (VectorIndex::new(dims), VectorIndex::new(dims));
        fill(&mut exact);
        fill(&mut graph);
        assert_eq!(graph.reshape_due(1000), Some(Reshape::BuildGraph));
        let built = graph
            .build_graph(&std::sync::atomic::AtomicBool::new(false))
            .expect("not stopped");
        graph.install(built);
        assert!(graph.is_graph());
        assert_eq!(graph.reshape_due(1000), None);
        (exact, graph)
    }

    /// The same tools, scores within f16 rounding (vectors that went
    /// through a graph are half-precision copies): a near tie may swap
    /// places, but at most one tool of ten may differ.
    fn same_ranking(a: &[(Arc<str>, f32)], b: &[(Arc<str>, f32)]) {
        assert_eq!(a.len(), b.len());
        let mut shared = 0;
        for (tool, score) in a {
            if let Some((_, other)) = b.iter().find(|(t, _)| t == tool) {
                assert!((score - other).abs() < 2e-3, "{tool}: {score} / {other}");
                shared += 1;
            }
        }
        assert!(shared + 1 >= a.len(), "{a:?} / {b:?}");
    }

    fn recall_at_10(exact: &VectorIndex, graph: &VectorIndex, dims: usize) -> f64 {
        let mut hits = 0;
        for q in 0..50 {
            let query = unit(q + 7_000_000, dims);
            let truth: Vec<Arc<str>> = exact
                .search(&query, 10, |_| true)
                .into_iter()
                .map(|(t, _)| t)
                .collect();
            let found = graph.search(&query, 10, |_| true);
            assert_eq!(found.len(), 10);
            hits += found.iter().filter(|(t, _)| truth.contains(t)).count();
        }
        hits as f64 / 500.0
    }

    #[test]
    fn the_graph_agrees_with_the_exact_scan_and_never_returns_removed_tools() {
        let dims = 16;
        let (mut exact, mut graph) = exact_and_graph(700, dims);
        assert_eq!((graph.tools(), graph.vectors()), (700, 1400));
        let recall = recall_at_10(&exact, &graph, dims);
        assert!(recall >= 0.95, "recall@10 {recall}");
        // Scores are the cosine the scan gives, within f16 rounding.
        let query = unit(42, dims);
        let (top, score) = graph.search(&query, 1, |_| true).remove(0);
        assert_eq!(&*top, "s.tool42");
        assert!((score - 1.0).abs() < 1e-3, "{score}");

        // Removed tools are tombstones: never found, even by their own
        // vectors; a quarter of them asks for a rebuild.
        for i in 0..200 {
            graph.remove(&format!("s.tool{i}"));
            exact.remove(&format!("s.tool{i}"));
        }
        assert_eq!((graph.tools(), graph.vectors()), (500, 1000));
        for i in (0..200).step_by(17) {
            let found = graph.search(&unit(i, dims), 20, |_| true);
            assert!(found.iter().all(|(t, _)| {
                t.strip_prefix("s.tool")
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n >= 200)
            }));
        }
        // New tools go into the graph as they come.
        graph.insert(Arc::from("t.new"), "h", true, &[unit(999_999, dims)]);
        exact.insert(Arc::from("t.new"), "h", true, &[unit(999_999, dims)]);
        assert_eq!(
            &*graph.search(&unit(999_999, dims), 1, |_| true)[0].0,
            "t.new"
        );
        assert_eq!(graph.reshape_due(1000), Some(Reshape::BuildGraph));
        let rebuilt = graph
            .build_graph(&std::sync::atomic::AtomicBool::new(false))
            .expect("not stopped");
        graph.install(rebuilt);
        assert_eq!(graph.shape().tombstones, 0);
        assert_eq!(graph.shape().vectors, 1001);
        let recall = recall_at_10(&exact, &graph, dims);
        assert!(recall >= 0.95, "recall@10 after the rebuild {recall}");

        // A filter keeping a few tools still finds them (one by one).
        let few = |t: &str| ["s.tool300", "s.tool600", "t.new"].contains(&t);
        let found = graph.search(&unit(600, dims), 10, few);
        let names: Vec<&str> = found.iter().map(|(t, _)| &**t).collect();
        assert_eq!(names.len(), 3);
        assert_eq!(names[0], "s.tool600");

        // Shrunk below half the threshold: back to the scan, the same
        // answers (the vectors are the graph's f16 copies).
        assert_eq!(graph.reshape_due(10_000), Some(Reshape::BackToExact));
        graph.back_to_exact();
        assert!(!graph.is_graph());
        for q in 0..20 {
            let query = unit(q + 5_000_000, dims);
            same_ranking(
                &graph.search(&query, 10, |_| true),
                &exact.search(&query, 10, |_| true),
            );
        }
        // And the vectors per tool are the ones put in.
        let mine = graph.vectors_of(|t| t == "s.tool650");
        assert_eq!(mine.len(), 1);
        assert_eq!(mine["s.tool650"].len(), 2);
        assert!((dot(&mine["s.tool650"][0], &unit(650, dims)) - 1.0).abs() < 1e-3);
    }

    #[test]
    fn a_saved_graph_loads_back_whole_and_a_damaged_one_is_refused() {
        let dims = 16;
        let (_, mut graph) = exact_and_graph(520, dims);
        graph.remove("s.tool3");
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("vectors");
        assert!(matches!(VectorIndex::load(&dir, dims, "m"), Ok(None)));
        graph.save(&dir, 7, "m").expect("saved");
        graph.mark_saved();

        let (loaded, generation) = VectorIndex::load(&dir, dims, "m")
            .expect("readable")
            .expect("there");
        assert_eq!(generation, 7);
        assert!(loaded.is_graph());
        assert!(loaded.shape().loaded);
        assert_eq!(loaded.shape().tombstones, 2);
        assert_eq!((loaded.tools(), loaded.vectors()), (519, 1038));
        assert!(loaded.holds("s.tool4", "h"));
        assert!(!loaded.holds("s.tool4", "other"));
        assert!(!loaded.contains("s.tool3"));
        for q in 0..20 {
            let query = unit(q + 3_000_000, dims);
            same_ranking(
                &loaded.search(&query, 10, |_| true),
                &graph.search(&query, 10, |_| true),
            );
        }
        // Another model's vectors, or files changed since they were
        // written, are refused (hnsw_rs would end the process on some).
        assert!(matches!(
            VectorIndex::load(&dir, dims, "other model"),
            Err(VectorError::Unusable(_))
        ));
        // Each file is checked: the byte vectors and the links (read on
        // the loading thread) as well as the f16 vectors below.
        for name in [saved::I8_FILE.to_owned(), links_file()] {
            let path = dir.join(&name);
            let written = std::fs::read(&path).expect("saved file");
            let mut damaged = written.clone();
            let at = damaged.len() - 3;
            damaged[at] ^= 0x55;
            std::fs::write(&path, &damaged).expect("damaged");
            assert!(
                matches!(
                    VectorIndex::load(&dir, dims, "m"),
                    Err(VectorError::Unusable(_))
                ),
                "{name}"
            );
            std::fs::write(&path, &written).expect("restored");
        }
        assert!(matches!(VectorIndex::load(&dir, dims, "m"), Ok(Some(_))));
        let data = dir.join(saved::F16_FILE);
        let mut bytes = std::fs::read(&data).expect("data");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x55;
        std::fs::write(&data, &bytes).expect("damaged");
        assert!(matches!(
            VectorIndex::load(&dir, dims, "m"),
            Err(VectorError::Unusable(_))
        ));
        bytes.truncate(middle);
        std::fs::write(&data, &bytes).expect("truncated");
        assert!(matches!(
            VectorIndex::load(&dir, dims, "m"),
            Err(VectorError::Unusable(_))
        ));
        // The exact backend saves nothing and clears what was saved.
        let mut small = VectorIndex::new(dims);
        small.insert(Arc::from("a.b"), "h", true, &[unit(1, dims)]);
        small.save(&dir, 8, "m").expect("cleared");
        assert!(!dir.exists());
    }

    #[test]
    fn a_saved_index_answers_from_its_vectors_in_place_until_its_graph_takes_over() {
        let dims = 16;
        let (exact, mut graph) = exact_and_graph(520, dims);
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("vectors");
        graph.save(&dir, 9, "m").expect("saved");
        graph.mark_saved();

        let (mut opened, generation, pending) = VectorIndex::open_saved(&dir, dims, "m")
            .expect("readable")
            .expect("there");
        assert_eq!(generation, 9);
        let shape = opened.shape();
        assert_eq!(shape.backend, VectorBackend::Loading);
        assert_eq!((shape.vectors, shape.loaded), (1040, false));
        // The scan of the saved vectors is exact (f16 copies): it agrees
        // with the exact index.
        for q in 0..20 {
            let query = unit(q + 4_000_000, dims);
            same_ranking(
                &opened.search(&query, 10, |_| true),
                &exact.search(&query, 10, |_| true),
            );
        }
        // Changes while the graph loads: a tool removed, one added, one
        // replaced; nothing is saved meanwhile, and the saved files stay.
        opened.remove("s.tool5");
        opened.insert(Arc::from("t.new"), "h", true, &[unit(777_777, dims)]);
        opened.insert(Arc::from("s.tool6"), "h2", true, &[unit(888_888, dims)]);
        assert!(opened.is_graph());
        assert_eq!(opened.shape().vectors, 1038);
        assert!(!opened.save_due());
        assert_eq!(opened.reshape_due(100), None);
        opened.save(&dir, 10, "m").expect("nothing to write");
        assert!(dir.join("meta.json").exists());
        let top = |index: &VectorIndex, seed: u64| {
            index.search(&unit(seed, dims), 1, |_| true)[0]
                .0
                .to_string()
        };
        assert_eq!(top(&opened, 777_777), "t.new");
        assert_eq!(top(&opened, 888_888), "s.tool6");
        assert_ne!(top(&opened, 5), "s.tool5");
        let mine = opened.vectors_of(|t| t == "s.tool7" || t == "t.new");
        assert_eq!((mine["s.tool7"].len(), mine["t.new"].len()), (2, 1));

        // The graph takes over with those changes.
        let loaded = pending.load().expect("loaded");
        assert!(opened.install_loaded(loaded));
        let shape = opened.shape();
        assert_eq!(shape.backend, VectorBackend::Graph);
        assert!(shape.loaded);
        assert_eq!((shape.vectors, shape.tombstones), (1038, 4));
        assert_eq!(top(&opened, 777_777), "t.new");
        assert_eq!(top(&opened, 888_888), "s.tool6");
        assert_ne!(top(&opened, 5), "s.tool5");

        // A graph for another opening (the index moved on) is refused.
        let (_, _, pending) = VectorIndex::open_saved(&dir, dims, "m")
            .expect("readable")
            .expect("there");
        assert!(!opened.install_loaded(pending.load().expect("loaded")));
        assert!(opened.shape().loaded);
    }

    #[test]
    fn a_graph_read_back_from_its_files_walks_like_the_one_built_and_takes_new_tools_until_rebuilt()
    {
        let dims = 16;
        let (exact, mut graph) = exact_and_graph(520, dims);
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("vectors");
        graph.save(&dir, 1, "m").expect("saved");
        graph.mark_saved();
        let read_back = || {
            let (mut index, _, pending) = VectorIndex::open_saved(&dir, dims, "m")
                .expect("readable")
                .expect("there");
            assert!(index.install_loaded(pending.load().expect("links read")));
            index
        };

        // The walk over the links read back finds what hnsw_rs's own walk
        // of the graph it built finds.
        let walked = read_back();
        let (ours, theirs) = (
            recall_at_10(&exact, &walked, dims),
            recall_at_10(&exact, &graph, dims),
        );
        assert!(ours >= 0.95 && ours + 0.02 >= theirs, "{ours} / {theirs}");

        // The graph built here trades itself for its saved form, once:
        // same answers, and it still counts as built by this process.
        let before: Vec<_> = (0..10)
            .map(|q| graph.search(&unit(q + 5_000_000, dims), 10, |_| true))
            .collect();
        let replaced = graph.adopt_saved(read_back()).expect("adopted");
        assert_eq!(replaced.shape().backend, VectorBackend::Graph);
        let shape = graph.shape();
        assert_eq!((shape.backend, shape.loaded), (VectorBackend::Graph, false));
        for (q, before) in before.iter().enumerate() {
            same_ranking(
                &graph.search(&unit(q as u64 + 5_000_000, dims), 10, |_| true),
                before,
            );
        }
        assert!(graph.adopt_saved(read_back()).is_none());
        // Nor does a graph changed since its save.
        let mut unsaved = VectorIndex::new(dims);
        for i in 0..60u64 {
            unsaved.insert(Arc::from(format!("s.tool{i}")), "h", true, &[unit(i, dims)]);
        }
        let built = unsaved
            .build_graph(&std::sync::atomic::AtomicBool::new(false))
            .expect("not stopped");
        unsaved.install(built);
        assert!(unsaved.adopt_saved(read_back()).is_none());

        // New tools are scanned beside the walk (and found at once); past
        // a tenth of the saved points the graph is due to be built again,
        // with them.
        for i in 0..52u64 {
            let tool: Arc<str> = Arc::from(format!("new.tool{i}"));
            graph.insert(
                tool,
                "h",
                true,
                &[unit(i + 9_000_000, dims), unit(i + 9_500_000, dims)],
            );
        }
        assert_eq!(graph.reshape_due(100), None);
        assert_eq!(
            &*graph.search(&unit(9_000_051, dims), 1, |_| true)[0].0,
            "new.tool51"
        );
        graph.remove("s.tool1");
        graph.insert(Arc::from("new.last"), "h", true, &[unit(9_999_999, dims)]);
        assert_eq!(graph.reshape_due(100), Some(Reshape::BuildGraph));
        assert!(!graph.save_due());
        let built = graph
            .build_graph(&std::sync::atomic::AtomicBool::new(false))
            .expect("not stopped");
        graph.install(built);
        let shape = graph.shape();
        assert_eq!((shape.vectors, shape.tombstones), (1040 - 2 + 105, 0));
        assert_eq!(
            &*graph.search(&unit(9_999_999, dims), 1, |_| true)[0].0,
            "new.last"
        );
        assert!(
            graph
                .search(&unit(1, dims), 10, |t| t == "s.tool1")
                .is_empty()
        );
    }
}
