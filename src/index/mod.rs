//! Tool search: the keyword index (tantivy), the vector index (exact cosine
//! over local embeddings) and the hybrid ranking over both. Derived from the
//! store, never trusted over it: the keyword index records the catalog
//! generation it reflects and is rebuilt when the store moved on without it;
//! vectors come from the embedding cache in the store, so a restart embeds
//! nothing that did not change. Indexing runs in the background and never
//! blocks connecting or calling.

pub mod embedder;
pub mod keyword;
mod links;
pub mod query;
pub mod rank;
mod saved;
pub mod text;
pub mod vector;
pub mod vocabulary;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::catalog::CatalogChanged;
use crate::model::{ServerId, ToolRecord};
use crate::registry::RegistryEvent;
use crate::store::{Store, StoreError, ToolSummary, embedding_key};
use embedder::{EmbedError, Embedder};
use keyword::{KeywordDoc, KeywordError, KeywordIndex};
use text::tool_texts;
use vector::VectorIndex;

pub use rank::{Normalisation, SearchMode, Weights};

/// Levers on top of the hybrid ranking, each measured on the evaluation's
/// held-out queries (BENCHMARKS.md "Search quality levers"); 0 turns one off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Levers {
    /// Weight of other names of the query's words (`vocabulary.rs`) on the
    /// keyword side, relative to the words typed.
    pub synonyms: f32,
    /// What belonging to the skills nearest the query (by skill vector)
    /// adds to a tool's fused score (0–1 scale): the hierarchical step.
    pub skill_boost: f32,
    /// Pseudo-relevance feedback on the dense side: weight of the top
    /// results' mean vector added to the query's before a second scan.
    pub feedback: f32,
}

impl Levers {
    pub const OFF: Levers = Levers {
        synonyms: 0.0,
        skill_boost: 0.0,
        feedback: 0.0,
    };
}

impl Default for Levers {
    /// Chosen on the evaluation's tuning queries only (`cargo run
    /// --release --example search_eval -- --levers`): the skill step at 0.1
    /// (tuning paraphrase R@5 0.780 → 0.805; held out 0.727 → 0.773);
    /// synonyms and feedback lowered the tuning figures and stay off.
    fn default() -> Self {
        Levers {
            skill_boost: 0.1,
            ..Levers::OFF
        }
    }
}

/// Skills nearest a query that the hierarchical step considers.
const NEAREST_SKILLS: usize = 3;
/// Dense results whose mean vector feeds back into the query.
const FEEDBACK_DOCS: usize = 3;

/// Where the keyword index lives inside the data dir.
pub const INDEX_DIR: &str = "index";
/// Tools embedded per batch: bounds memory and lets searches interleave.
const BATCH: usize = 64;
/// Candidates each side contributes before fusion.
const CANDIDATES: usize = 50;
/// Keyword commit payload while a sync is under way: never matches a store
/// generation, so a crash mid-way means a rebuild.
const PARTIAL: &str = "partial";

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Keyword(#[from] KeywordError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error("the index task failed: {0}")]
    Task(String),
    #[error("indexing stopped: the process is shutting down")]
    Cancelled,
    #[error("the search model is not available: {0}")]
    ModelUnavailable(String),
    #[error("search is off on this aggregator (--search off)")]
    Off,
}

/// What search knows of one tool, for results. Not its definition nor its
/// description: with 10,000 tools the one would hold the whole catalog in
/// memory a second time, and at 100,000 the other is ~35 MB; the few a
/// search returns are read from the store.
#[derive(Debug, Clone)]
pub struct ToolDoc {
    pub tool_id: Arc<str>,
    pub server_id: ServerId,
    pub server_name: String,
    pub original_name: String,
    pub wire_name: Option<String>,
    pub hash: String,
    pub is_external: bool,
    pub skill_ids: Vec<String>,
    pub primary_skill_id: Option<String>,
}

impl ToolDoc {
    fn from_summary(tool: &ToolSummary<'_>) -> ToolDoc {
        ToolDoc {
            tool_id: Arc::from(&*tool.id),
            server_id: tool.server_id,
            server_name: tool.server_name.to_string(),
            original_name: tool.original_name.to_string(),
            wire_name: tool.wire_name.as_deref().map(str::to_owned),
            hash: tool.definition_hash.to_string(),
            is_external: tool.is_external,
            skill_ids: tool.skill_ids.iter().map(|s| s.to_string()).collect(),
            primary_skill_id: tool.primary_skill_id.as_deref().map(str::to_owned),
        }
    }

    fn from_record(tool: &ToolRecord) -> ToolDoc {
        ToolDoc {
            tool_id: Arc::from(tool.id.as_str()),
            server_id: tool.server_id,
            server_name: tool.server_name.clone(),
            original_name: tool.original_name.clone(),
            wire_name: tool.wire_name.clone(),
            hash: tool.definition_hash.clone(),
            is_external: tool.is_external,
            skill_ids: tool.skill_ids.clone(),
            primary_skill_id: tool.primary_skill_id.clone(),
        }
    }
}

/// A search as the front doors ask it.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub query: String,
    pub limit: usize,
    pub mode: SearchMode,
    /// Only tools of these servers; `None` = every server.
    pub servers: Option<HashSet<ServerId>>,
    /// Only tools with at least one of these skills; `None` = any tool.
    pub skills: Option<HashSet<String>>,
    pub include_external: bool,
}

#[derive(Debug, Clone)]
pub struct SearchHit {
    pub doc: Arc<ToolDoc>,
    pub score: f32,
}

#[derive(Debug, Clone)]
pub struct SearchOutcome {
    pub hits: Vec<SearchHit>,
    /// The mode actually used (semantic falls back to keyword without the
    /// model).
    pub mode: SearchMode,
    pub warning: Option<String>,
    /// Tools that passed the filters (what was searched).
    pub tools_searched: usize,
}

/// How far indexing has come, for the API and `reindex`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexProgress {
    /// Tools findable by keyword and (when semantic) by their first vector.
    pub indexed_tools: usize,
    pub total_tools: usize,
    /// Tools still waiting for their second vector (with parameter names).
    pub refining_tools: usize,
    pub generation: u64,
    pub syncing: bool,
    /// A sync has ended since start (whether it indexed or failed); the
    /// classification worker's first pass waits for it, so the two do not
    /// read the whole catalog at once.
    pub synced: bool,
    pub semantic: bool,
}

/// How much search a daemon does (`--search`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SearchSetting {
    /// Keywords and meaning; the model is loaded when first needed (a tool
    /// to embed, a query to answer), so a daemon that never needs it never
    /// pays for it.
    #[default]
    Hybrid,
    /// Keywords only: the model is never loaded.
    Keyword,
    /// No search at all: nothing is indexed.
    Off,
}

/// The model's state. It loads on first need, not at start.
enum ModelState {
    NotLoaded,
    Ready(Arc<Embedder>),
    Unavailable(String),
    /// `--search keyword` or `off`.
    Disabled(String),
}

struct Inner {
    store: Arc<Store>,
    keyword: KeywordIndex,
    /// The generation the keyword index was committed at when opened.
    opened_at: Option<u64>,
    /// Shared with the thread loading a saved graph (which must not hold
    /// the rest: the store closes when the index is dropped).
    vectors: Arc<RwLock<VectorIndex>>,
    docs: RwLock<Docs>,
    /// Each skill's vector (the skills service computes them).
    skill_vectors: RwLock<Vec<(String, Vec<f32>)>>,
    model: RwLock<ModelState>,
    /// Held while the model loads, so it loads once.
    model_loading: Mutex<()>,
    setting: SearchSetting,
    weights: RwLock<Weights>,
    levers: RwLock<Levers>,
    sync_lock: Mutex<()>,
    /// Where the vector graph is saved.
    graph_dir: PathBuf,
    /// Vectors beyond which the vector index becomes a graph.
    graph_from: AtomicUsize,
    /// The first sync compares the keyword index on disk with the store.
    synced_once: AtomicBool,
    /// Set at shutdown: a running sync stops at its next batch.
    stopping: AtomicBool,
    progress: watch::Sender<IndexProgress>,
}

/// A saved vector index opened and installed (answering from its vectors
/// in place while its graph loads): its shape, the generation it was saved
/// at and how long the opening took, if there was one.
type OpenedVectors =
    Result<Option<(vector::VectorShape, u64, std::time::Duration)>, vector::VectorError>;

/// Opens the index saved by the last run on a thread of its own: installs
/// it as soon as its vectors are read (says so on the channel returned),
/// then loads its graph and lets it take over. The sync waits for the
/// first step only.
fn open_saved_vectors(
    dir: PathBuf,
    vectors: Arc<RwLock<VectorIndex>>,
) -> std::sync::mpsc::Receiver<OpenedVectors> {
    let (opened, opening) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let began = std::time::Instant::now();
        let pending = match VectorIndex::open_saved(&dir, embedder::DIMENSION, embedder::MODEL_ID) {
            Ok(Some((index, saved_at, pending))) => {
                let shape = index.shape();
                if let Ok(mut vectors) = vectors.write() {
                    *vectors = index;
                }
                let _ = opened.send(Ok(Some((shape, saved_at, began.elapsed()))));
                pending
            }
            other => {
                let _ = opened.send(other.map(|_| None));
                return;
            }
        };
        let began = std::time::Instant::now();
        let ticket = pending.ticket();
        let loaded = pending.load();
        let Ok(mut vectors) = vectors.write() else {
            return;
        };
        match loaded {
            Ok(loaded) => {
                if vectors.install_loaded(loaded) {
                    tracing::info!(
                        ms = began.elapsed().as_millis() as u64,
                        "vector index: {}",
                        vectors.shape()
                    );
                }
            }
            Err(err) => {
                tracing::warn!("{err}; its vectors are scanned until a graph is built again");
                vectors.loading_failed(ticket);
            }
        }
        drop(vectors);
        crate::memory::release_freed();
    });
    opening
}

/// Tool id → what search shows of it.
type Docs = HashMap<Arc<str>, Arc<ToolDoc>>;

impl Inner {
    /// Whoever needs both locks takes `docs` first, then `vectors`.
    fn vectors_mut(&self) -> Result<std::sync::RwLockWriteGuard<'_, VectorIndex>, IndexError> {
        self.vectors
            .write()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))
    }

    fn docs_mut(&self) -> Result<std::sync::RwLockWriteGuard<'_, Docs>, IndexError> {
        self.docs
            .write()
            .map_err(|_| IndexError::Task("docs lock poisoned".into()))
    }
}

/// The search index service. Cheap to clone.
#[derive(Clone)]
pub struct SearchIndex {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex").finish_non_exhaustive()
    }
}

pub fn index_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(INDEX_DIR).join("keyword")
}

/// Where the vector graph of a large catalog is saved.
pub fn graph_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(INDEX_DIR).join("vectors")
}

impl SearchIndex {
    /// Opens the keyword index in the data dir (blocking, fast), for
    /// hybrid search. The model is not loaded until needed.
    pub fn open(store: Arc<Store>, data_dir: &Path) -> Result<SearchIndex, IndexError> {
        SearchIndex::open_with(store, data_dir, SearchSetting::Hybrid)
    }

    pub fn open_with(
        store: Arc<Store>,
        data_dir: &Path,
        setting: SearchSetting,
    ) -> Result<SearchIndex, IndexError> {
        let (keyword, opened_at) = KeywordIndex::open(&index_dir(data_dir))?;
        let (progress, _) = watch::channel(IndexProgress::default());
        let model = match setting {
            SearchSetting::Hybrid => ModelState::NotLoaded,
            SearchSetting::Keyword => ModelState::Disabled(
                "semantic search is off on this aggregator (--search keyword)".to_owned(),
            ),
            SearchSetting::Off => {
                ModelState::Disabled("search is off on this aggregator (--search off)".to_owned())
            }
        };
        Ok(SearchIndex {
            inner: Arc::new(Inner {
                store,
                keyword,
                opened_at,
                vectors: Arc::new(RwLock::new(VectorIndex::new(embedder::DIMENSION))),
                docs: RwLock::new(HashMap::new()),
                skill_vectors: RwLock::new(Vec::new()),
                model: RwLock::new(model),
                model_loading: Mutex::new(()),
                setting,
                weights: RwLock::new(Weights::default()),
                levers: RwLock::new(Levers::default()),
                sync_lock: Mutex::new(()),
                graph_dir: graph_dir(data_dir),
                graph_from: AtomicUsize::new(vector::GRAPH_FROM),
                synced_once: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
                progress,
            }),
        })
    }

    /// The store the index reads (the evaluation classifies through it).
    /// Vectors beyond which the vector index becomes an HNSW graph (and
    /// half of which it goes back to the exact scan); takes effect at the
    /// next sync.
    pub fn set_graph_from(&self, vectors: usize) {
        self.inner.graph_from.store(vectors, Ordering::SeqCst);
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }

    pub fn setting(&self) -> SearchSetting {
        self.inner.setting
    }

    /// Loads the model now if it is not loaded (blocking, a fraction of a
    /// second); on failure search goes on by keyword with a warning.
    pub fn load_model(&self) {
        let Ok(_once) = self.inner.model_loading.lock() else {
            return;
        };
        if !matches!(
            self.inner.model.read().as_deref(),
            Ok(ModelState::NotLoaded)
        ) {
            return;
        }
        let started = std::time::Instant::now();
        let state = match Embedder::load() {
            Ok(embedder) => {
                tracing::info!(
                    runtime = embedder.runtime(),
                    load_ms = started.elapsed().as_millis() as u64,
                    "search model loaded"
                );
                ModelState::Ready(Arc::new(embedder))
            }
            Err(err) => {
                tracing::warn!("{err}; search falls back to keywords only");
                ModelState::Unavailable(err.to_string())
            }
        };
        if let Ok(mut model) = self.inner.model.write() {
            *model = state;
        }
    }

    /// The model, loaded now if this is the first time it is needed.
    fn embedder(&self) -> Result<Arc<Embedder>, String> {
        if matches!(
            self.inner.model.read().as_deref(),
            Ok(ModelState::NotLoaded)
        ) {
            self.load_model();
        }
        match self.inner.model.read().as_deref() {
            Ok(ModelState::Ready(embedder)) => Ok(Arc::clone(embedder)),
            Ok(ModelState::NotLoaded) => Err("the search model did not load".to_owned()),
            Ok(ModelState::Unavailable(reason) | ModelState::Disabled(reason)) => {
                Err(reason.clone())
            }
            Err(_) => Err("the search model lock was poisoned".to_owned()),
        }
    }

    pub fn progress(&self) -> watch::Receiver<IndexProgress> {
        self.inner.progress.subscribe()
    }

    /// Publishes a sync's progress; `synced` is kept once set, and set by
    /// a sync that ends.
    fn report(&self, progress: IndexProgress) {
        self.inner.progress.send_modify(|current| {
            *current = IndexProgress {
                synced: current.synced || !progress.syncing,
                ..progress
            }
        });
    }

    /// Brings both indexes in line with the store: tools removed since are
    /// dropped, new or changed ones indexed (embeddings from the cache where
    /// present). `rebuild` starts the keyword index over. Blocking;
    /// concurrent calls take turns.
    pub fn sync(&self, rebuild: bool) -> Result<usize, IndexError> {
        let inner = &self.inner;
        let _turn = inner
            .sync_lock
            .lock()
            .map_err(|_| IndexError::Task("sync lock poisoned".into()))?;
        let first_sync = !inner.synced_once.swap(true, Ordering::SeqCst);
        let mut semantic = self.semantic_available();
        // The index saved by the last run opens on its own thread while
        // the store is read: its vectors at once (read in place), its graph
        // after, which the sync does not wait for (seconds at 100,000 tools).
        let saved_graph = (first_sync && !rebuild && semantic)
            .then(|| open_saved_vectors(inner.graph_dir.clone(), Arc::clone(&inner.vectors)));
        let generation = inner.store.catalog_generation()?;
        // What the keyword index already holds, by id and hash: kept as is
        // when it reflects this store.
        let mut on_disk: HashMap<String, String> = HashMap::new();
        if rebuild {
            inner.keyword.clear()?;
            if let Ok(mut docs) = inner.docs.write() {
                docs.clear();
            }
            if let Ok(mut vectors) = inner.vectors.write() {
                *vectors = VectorIndex::new(embedder::DIMENSION);
            }
        } else if first_sync {
            if inner.opened_at.is_some_and(|g| g == generation) {
                match inner.keyword.documents() {
                    Ok(documents) => on_disk = documents.into_iter().collect(),
                    // Derived data: started over, never a reason to fail.
                    Err(err) => {
                        tracing::warn!(
                            "the keyword index cannot be read ({err}); rebuilding it from the store"
                        );
                        inner.keyword.clear()?;
                    }
                }
            } else {
                tracing::info!("the keyword index does not match the store; rebuilding it");
                inner.keyword.clear()?;
            }
        }
        let current: HashMap<Arc<str>, Arc<ToolDoc>> = if rebuild {
            HashMap::new()
        } else {
            inner.docs.read().map(|d| d.clone()).unwrap_or_default()
        };
        // What changed, read in place: tools whose texts are needed (keyword
        // documents not on disk, vectors the index lacks) are read whole
        // below; a tool whose keyword document is on disk gets its search
        // record from its summary. A restart over a saved index reads no
        // definition and allocates little beyond the records it keeps (at
        // 100,000 tools a decoded catalog was a transient of ~120 MB, and
        // the records kept among its freed pages held them). A rebuild
        // reads every tool whole.
        let mut total = 0usize;
        let mut seen: HashSet<Arc<str>> = HashSet::new();
        let mut ready: Vec<Arc<ToolDoc>> = Vec::new();
        let mut to_read: Vec<(ServerId, String, String)> = Vec::new();
        let mut whole: Vec<ToolRecord> = Vec::new();
        if rebuild {
            whole = inner.store.all_tools()?;
            total = whole.len();
        } else {
            // Without a saved graph a restart takes vectors from the
            // embedding cache: every tool's texts are needed.
            let vectors_saved = saved_graph.is_some();
            let holds = |id: &str, hash: &str| {
                inner
                    .vectors
                    .read()
                    .is_ok_and(|vectors| vectors.holds(id, hash))
            };
            inner.store.for_each_tool_summary(|tool| {
                // Nobody is offered a refused tool: nothing to find.
                if tool.refused.is_some() {
                    return;
                }
                total += 1;
                let (id, hash) = (&*tool.id, &*tool.definition_hash);
                if let Some((key, doc)) = current.get_key_value(id)
                    && doc.hash == hash
                {
                    seen.insert(Arc::clone(key));
                    if semantic && !holds(id, hash) {
                        to_read.push((
                            tool.server_id,
                            tool.original_name.into_owned(),
                            doc.hash.clone(),
                        ));
                    }
                } else if on_disk.get(id).is_some_and(|on_disk| on_disk == hash)
                    && (!semantic || vectors_saved)
                {
                    let doc = Arc::new(ToolDoc::from_summary(&tool));
                    seen.insert(Arc::clone(&doc.tool_id));
                    ready.push(doc);
                } else {
                    seen.insert(Arc::from(id));
                    to_read.push((
                        tool.server_id,
                        tool.original_name.into_owned(),
                        tool.definition_hash.into_owned(),
                    ));
                }
            })?;
        }
        if let Some(loading) = saved_graph {
            self.take_saved_graph(loading, generation);
        }
        // Records whose vectors the (now opened) saved index lacks need
        // their texts after all.
        if semantic && !ready.is_empty() {
            let vectors = inner
                .vectors
                .read()
                .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
            ready.retain(|doc| {
                let held = vectors.holds(&doc.tool_id, &doc.hash);
                if !held {
                    to_read.push((doc.server_id, doc.original_name.clone(), doc.hash.clone()));
                }
                held
            });
        }
        if !to_read.is_empty() {
            // A tool gone or changed since it was listed above is left to
            // the next sync.
            whole = inner
                .store
                .tools_named(
                    to_read
                        .iter()
                        .map(|(server, name, _)| (*server, name.as_str())),
                )?
                .into_iter()
                .zip(&to_read)
                .filter_map(|(read, (_, _, hash))| read.filter(|t| t.definition_hash == *hash))
                .collect();
        }
        drop(to_read);
        let removed: Vec<String> = current
            .keys()
            .filter(|id| !seen.contains(&***id))
            .map(|id| id.to_string())
            .chain(
                on_disk
                    .keys()
                    .filter(|id| !seen.contains(id.as_str()))
                    .cloned(),
            )
            .collect();
        drop(seen);
        let changed: Vec<&ToolRecord> = whole.iter().collect();
        let changed_count = changed.len() + ready.len();
        self.report(IndexProgress {
            indexed_tools: total - changed_count,
            total_tools: total,
            refining_tools: changed_count,
            generation,
            syncing: true,
            semantic,
            ..IndexProgress::default()
        });
        if !removed.is_empty() {
            inner.keyword.remove(&removed)?;
            // Lock order everywhere: docs, then vectors (a search holds
            // docs while it reads the vectors).
            let mut docs = inner.docs_mut()?;
            let mut vectors = inner.vectors_mut()?;
            for id in &removed {
                vectors.remove(id);
                docs.remove(id.as_str());
            }
        }
        // Keywords first, for every tool at once: they cost milliseconds, so
        // new tools are findable by name right away, while their
        // embeddings follow batch by batch. The commit is marked partial:
        // it claims no generation until the end.
        for batch in changed.chunks(BATCH) {
            if inner.stopping.load(Ordering::SeqCst) {
                return Err(IndexError::Cancelled);
            }
            self.index_keywords(batch, &on_disk)?;
        }
        // Their keyword documents and vectors are in place already.
        for batch in ready.chunks(BATCH * 20) {
            if inner.stopping.load(Ordering::SeqCst) {
                return Err(IndexError::Cancelled);
            }
            let mut docs = inner.docs_mut()?;
            for doc in batch {
                docs.insert(Arc::clone(&doc.tool_id), Arc::clone(doc));
            }
        }
        drop(ready);
        if !changed.is_empty() {
            inner.keyword.commit_with(PARTIAL)?;
        }
        // Vectors in two passes: first each tool's short text (name, server,
        // description lead), so every tool is findable by meaning at twice
        // the speed; then the text with parameter names, the second vector
        // that lifts quality (BENCHMARKS.md "Search": cold indexing). Texts
        // already cached are taken in the first pass.
        let mut done = total - changed.len();
        let mut second: Vec<&ToolRecord> = Vec::new();
        for batch in changed.chunks(BATCH) {
            if inner.stopping.load(Ordering::SeqCst) {
                // The next start rebuilds from the store (cached
                // embeddings make that cheap).
                return Err(IndexError::Cancelled);
            }
            if semantic {
                match self.index_vectors(batch, true) {
                    Ok(incomplete) => second.extend(incomplete),
                    // The model would not load: keywords only, as said in
                    // the status and every answer.
                    Err(IndexError::ModelUnavailable(_)) => semantic = false,
                    Err(err) => return Err(err),
                }
            }
            done += batch.len();
            self.report(IndexProgress {
                indexed_tools: done,
                total_tools: total,
                refining_tools: second.len() + (total - done),
                generation,
                syncing: true,
                semantic,
                ..IndexProgress::default()
            });
        }
        let mut refining = second.len();
        for batch in second.chunks(BATCH) {
            if !semantic {
                break;
            }
            if inner.stopping.load(Ordering::SeqCst) {
                return Err(IndexError::Cancelled);
            }
            match self.index_vectors(batch, false) {
                Ok(_) => {}
                Err(IndexError::ModelUnavailable(_)) => semantic = false,
                Err(err) => return Err(err),
            }
            refining -= batch.len();
            self.report(IndexProgress {
                indexed_tools: done,
                total_tools: total,
                refining_tools: refining,
                generation,
                syncing: true,
                semantic,
                ..IndexProgress::default()
            });
        }
        inner.keyword.commit_with(&generation.to_string())?;
        if semantic {
            self.reshape_vectors(generation)?;
        }
        if rebuild && semantic {
            // Vectors of texts no tool has any more are dead weight.
            let keep: HashSet<[u8; 32]> = whole
                .iter()
                .flat_map(|t| tool_texts(t, &t.skill_ids).dense)
                .map(|text| embedding_key(embedder::MODEL_ID, &text))
                .collect();
            let dropped = inner.store.retain_embeddings(&keep)?;
            if dropped > 0 {
                tracing::info!(dropped, "unused cached embeddings dropped");
            }
        }
        self.report(IndexProgress {
            indexed_tools: total,
            total_tools: total,
            refining_tools: 0,
            generation,
            syncing: false,
            semantic,
            ..IndexProgress::default()
        });
        Ok(changed_count + removed.len())
    }

    /// Keyword documents and result records of a batch of tools.
    fn index_keywords(
        &self,
        batch: &[&ToolRecord],
        on_disk: &HashMap<String, String>,
    ) -> Result<(), IndexError> {
        let inner = &self.inner;
        // Texts only for documents the keyword index lacks (a warm start
        // has them all: a large catalog would be parsed for nothing).
        let stale: Vec<&ToolRecord> = batch
            .iter()
            .copied()
            .filter(|t| on_disk.get(&t.id) != Some(&t.definition_hash))
            .collect();
        let texts: Vec<_> = stale.iter().map(|t| tool_texts(t, &t.skill_ids)).collect();
        let server_ids: Vec<String> = stale.iter().map(|t| t.server_id.to_string()).collect();
        let keyword_docs: Vec<KeywordDoc<'_>> = stale
            .iter()
            .zip(&texts)
            .zip(&server_ids)
            .map(|((t, texts), server_id)| KeywordDoc {
                tool_id: &t.id,
                server_id,
                hash: &t.definition_hash,
                texts,
            })
            .collect();
        inner.keyword.upsert(&keyword_docs)?;
        let mut docs = inner.docs_mut()?;
        for tool in batch {
            let doc = Arc::new(ToolDoc::from_record(tool));
            docs.insert(Arc::clone(&doc.tool_id), doc);
        }
        Ok(())
    }

    /// The vectors of a batch of tools, cached or embedded now. In the first
    /// pass only a tool's first text is embedded (its others are taken if
    /// cached); returns the tools still missing a vector, for the second.
    fn index_vectors<'a>(
        &self,
        batch: &[&'a ToolRecord],
        first_pass: bool,
    ) -> Result<Vec<&'a ToolRecord>, IndexError> {
        // Tools whose vectors the index holds already (a saved graph) are
        // neither read from the cache nor embedded again.
        let batch: Vec<&'a ToolRecord> = {
            let vectors = self
                .inner
                .vectors
                .read()
                .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
            batch
                .iter()
                .copied()
                .filter(|t| !vectors.holds(&t.id, &t.definition_hash))
                .collect()
        };
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<_> = batch.iter().map(|t| tool_texts(t, &t.skill_ids)).collect();
        let flat: Vec<&str> = texts
            .iter()
            .flat_map(|t| t.dense.iter().map(String::as_str))
            .collect();
        let position: Vec<usize> = texts.iter().flat_map(|t| 0..t.dense.len()).collect();
        let mut flat_vectors = self
            .cached_embeddings(&flat, |i| !first_pass || position[i] == 0)?
            .into_iter();
        let mut incomplete = Vec::new();
        // A few tools per turn of the lock: inserting into a graph costs
        // about a millisecond a vector, and searches wait meanwhile.
        for (tools, texts) in batch.chunks(8).zip(texts.chunks(8)) {
            let mut index = self.inner.vectors_mut()?;
            for (tool, texts) in tools.iter().zip(texts) {
                let own: Vec<Option<Vec<f32>>> =
                    (&mut flat_vectors).take(texts.dense.len()).collect();
                let complete = own.iter().all(Option::is_some);
                if !complete {
                    incomplete.push(*tool);
                }
                let own: Vec<Vec<f32>> = own.into_iter().flatten().collect();
                index.insert(
                    Arc::from(tool.id.as_str()),
                    &tool.definition_hash,
                    complete,
                    &own,
                );
            }
        }
        Ok(incomplete)
    }

    /// One vector per text, from the cache, or embedded now (in the
    /// background's turns, then cached) where `embed` says so; `None` for
    /// the rest. The model is loaded only when a text must be embedded.
    fn cached_embeddings(
        &self,
        flat: &[&str],
        embed: impl Fn(usize) -> bool,
    ) -> Result<Vec<Option<Vec<f32>>>, IndexError> {
        let keys: Vec<[u8; 32]> = flat
            .iter()
            .map(|t| embedding_key(embedder::MODEL_ID, t))
            .collect();
        let mut cached = self.inner.store.embeddings(&keys)?;
        // Each missing text once (a tool without parameters has the same
        // text twice), shortest first: similar lengths pad less.
        let mut order: Vec<usize> = Vec::new();
        let mut seen = HashSet::new();
        for i in (0..flat.len()).filter(|i| cached[*i].is_none() && embed(*i)) {
            if seen.insert(keys[i]) {
                order.push(i);
            }
        }
        if !order.is_empty() {
            let embedder = self.embedder().map_err(IndexError::ModelUnavailable)?;
            order.sort_by_key(|i| flat[*i].len());
            let inputs: Vec<&str> = order.iter().map(|i| flat[*i]).collect();
            let fresh = embedder.embed_in_background(&inputs)?;
            let entries: Vec<([u8; 32], &[f32])> = order
                .iter()
                .zip(&fresh)
                .map(|(i, v)| (keys[*i], v.as_slice()))
                .collect();
            self.inner.store.put_embeddings(&entries)?;
            let by_key: HashMap<[u8; 32], &Vec<f32>> = order
                .iter()
                .zip(&fresh)
                .map(|(i, v)| (keys[*i], v))
                .collect();
            for (i, slot) in cached.iter_mut().enumerate() {
                if slot.is_none() {
                    *slot = by_key.get(&keys[i]).map(|v| (*v).to_vec());
                }
            }
        }
        Ok(cached)
    }

    /// At the first sync: waits until the index saved by the last run (if
    /// it is whole and of this model) answers from its vectors in place;
    /// its graph loads on after. Its tools are checked against the store by
    /// the sync like any others (unchanged ones keep their vectors).
    fn take_saved_graph(&self, opening: std::sync::mpsc::Receiver<OpenedVectors>, generation: u64) {
        match opening.recv() {
            Ok(Ok(Some((shape, saved_at, took)))) => {
                tracing::info!(
                    saved_at,
                    generation,
                    ms = took.as_millis() as u64,
                    "vector index: {shape}"
                );
            }
            Ok(Ok(None)) => {}
            Ok(Err(err)) => {
                tracing::warn!("{err}; the vector index is built again from the store")
            }
            Err(_) => tracing::warn!("loading the saved vector graph failed; it is built again"),
        }
    }

    /// After a sync: the exact scan becomes a graph past the threshold
    /// (built here, on the indexing thread, while searches use the
    /// matrix), a graph with many tombstones is rebuilt, a shrunk one goes
    /// back to the matrix; a graph that changed is saved.
    fn reshape_vectors(&self, generation: u64) -> Result<(), IndexError> {
        let inner = &self.inner;
        let graph_from = inner.graph_from.load(Ordering::SeqCst);
        let due = inner
            .vectors
            .read()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))?
            .reshape_due(graph_from);
        match due {
            Some(vector::Reshape::BuildGraph) => {
                let began = std::time::Instant::now();
                // Only this sync changes the index, so nothing moves while
                // the graph is built under the read lock searches share.
                let built = {
                    let vectors = inner
                        .vectors
                        .read()
                        .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
                    vectors.build_graph(&inner.stopping)
                };
                let Some(built) = built else {
                    return Err(IndexError::Cancelled);
                };
                let mut vectors = inner.vectors_mut()?;
                vectors.install(built);
                tracing::info!(
                    seconds = began.elapsed().as_secs_f64(),
                    "vector index: {}",
                    vectors.shape()
                );
                drop(vectors);
                crate::memory::release_freed();
            }
            Some(vector::Reshape::BackToExact) => {
                inner.vectors_mut()?.back_to_exact();
                crate::memory::release_freed();
            }
            None => {}
        }
        let vectors = inner
            .vectors
            .read()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
        if vectors.save_due() || (!vectors.is_graph() && inner.graph_dir.exists()) {
            let built = vectors.shape().backend == vector::VectorBackend::Graph;
            // Written under the read lock searches share (this sync is the
            // only writer): a few seconds at 200,000 vectors, after a build
            // or a large change only.
            match vectors.save(&inner.graph_dir, generation, embedder::MODEL_ID) {
                Ok(()) => {
                    drop(vectors);
                    inner.vectors_mut()?.mark_saved();
                    if built {
                        self.walk_saved_graph()?;
                    }
                }
                Err(err) => tracing::warn!("{err}; the next start builds the graph again"),
            }
        }
        Ok(())
    }

    /// A graph just built and saved answers from its files from now on,
    /// as after a restart (its links read back, its vectors as bytes):
    /// hnsw_rs's in-memory graph is dropped.
    fn walk_saved_graph(&self) -> Result<(), IndexError> {
        let inner = &self.inner;
        let began = std::time::Instant::now();
        let reopened = match VectorIndex::open_saved(
            &inner.graph_dir,
            embedder::DIMENSION,
            embedder::MODEL_ID,
        ) {
            Ok(Some((mut index, _, pending))) => pending.load().map(|loaded| {
                index.install_loaded(loaded);
                index
            }),
            Ok(None) => Err(vector::VectorError::Unusable("it is not there".into())),
            Err(err) => Err(err),
        };
        let index = match reopened {
            Ok(index) => index,
            Err(err) => {
                tracing::warn!("{err}; searches walk the graph as hnsw_rs built it");
                return Ok(());
            }
        };
        let mut vectors = inner.vectors_mut()?;
        let replaced = vectors.adopt_saved(index);
        let shape = vectors.shape();
        drop(vectors);
        if replaced.is_some() {
            drop(replaced);
            crate::memory::release_freed();
            tracing::info!(
                ms = began.elapsed().as_millis() as u64,
                "vector index: {shape}, read back from its files"
            );
        }
        Ok(())
    }

    /// Embeds texts other than tools' (skills' descriptions and examples)
    /// through the same cache, at the indexer's priority. Blocking.
    pub fn embed_texts(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, IndexError> {
        if !self.semantic_available() {
            return Err(IndexError::ModelUnavailable(
                self.model_warning().unwrap_or_default(),
            ));
        }
        let flat: Vec<&str> = texts.iter().map(String::as_str).collect();
        Ok(self
            .cached_embeddings(&flat, |_| true)?
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect())
    }

    /// The indexed vectors of the tools `wanted` picks (tools not embedded
    /// yet are missing).
    pub fn tool_vectors(
        &self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<HashMap<Arc<str>, Vec<Vec<f32>>>, IndexError> {
        let vectors = self
            .inner
            .vectors
            .read()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
        Ok(vectors.vectors_of(wanted))
    }

    /// The `limit` tools nearest `query` (a unit vector) on the vector
    /// side alone, as the index answers (exact or graph); for checking the
    /// graph against the exact scan.
    pub fn nearest_tools(
        &self,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(Arc<str>, f32)>, IndexError> {
        let vectors = self
            .inner
            .vectors
            .read()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
        Ok(vectors.search(query, limit, |_| true))
    }

    /// What answers the vector side now.
    pub fn vector_shape(&self) -> Option<vector::VectorShape> {
        self.inner.vectors.read().ok().map(|v| v.shape())
    }

    /// The normalised mean vector of each group of tools (`groups`: tool
    /// → the groups it belongs to, among `count`); `None` for a group with
    /// no embedded tool. A tool counts once per group, by the mean of its
    /// vectors.
    pub fn group_means(
        &self,
        groups: &HashMap<Arc<str>, Vec<usize>>,
        count: usize,
    ) -> Result<Vec<Option<Vec<f32>>>, IndexError> {
        let mut sums: Vec<Option<Vec<f32>>> = vec![None; count];
        let vectors = self
            .inner
            .vectors
            .read()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
        // One tool at a time: a large catalog's vectors are never copied
        // all at once.
        vectors.for_each_tool(
            |id| groups.contains_key(id),
            |tool, vectors| {
                let Some(members_of) = groups.get(tool) else {
                    return;
                };
                let Some(mean) = vector::normalised_mean(vectors.iter().copied()) else {
                    return;
                };
                for &group in members_of.iter().filter(|g| **g < count) {
                    let sum = sums[group].get_or_insert_with(|| vec![0.0; mean.len()]);
                    sum.iter_mut().zip(&mean).for_each(|(s, m)| *s += m);
                }
            },
        );
        Ok(sums
            .into_iter()
            .map(|sum| sum.and_then(|s| vector::normalised_mean(std::iter::once(s.as_slice()))))
            .collect())
    }

    /// Replaces the skill vectors hierarchical search compares queries with.
    pub fn set_skill_vectors(&self, vectors: Vec<(String, Vec<f32>)>) -> Result<(), IndexError> {
        let mut skills = self
            .inner
            .skill_vectors
            .write()
            .map_err(|_| IndexError::Task("skill vector lock poisoned".into()))?;
        *skills = vectors;
        Ok(())
    }

    /// Shows tools' new skills in results and filters, for the tools whose
    /// indexed definition is the one that was classified.
    pub fn apply_skills(&self, tools: &[ToolRecord]) -> Result<(), IndexError> {
        let mut docs = self.inner.docs_mut()?;
        for tool in tools {
            if let Some(doc) = docs.get_mut(tool.id.as_str())
                && doc.hash == tool.definition_hash
            {
                *doc = Arc::new(ToolDoc::from_record(tool));
            }
        }
        Ok(())
    }

    /// Runs a search (blocking: the query's embedding takes milliseconds).
    pub fn search(&self, request: &SearchRequest) -> Result<SearchOutcome, IndexError> {
        let started = std::time::Instant::now();
        let outcome = self.search_timed(request);
        crate::metrics::global()
            .search_seconds
            .observe(started.elapsed().as_secs_f64());
        outcome
    }

    fn search_timed(&self, request: &SearchRequest) -> Result<SearchOutcome, IndexError> {
        let inner = &self.inner;
        if inner.setting == SearchSetting::Off {
            return Err(IndexError::Off);
        }
        let mut mode = request.mode;
        let mut warning = None;
        // The query's embedding first, before any index lock is taken: it
        // may wait for a batch the indexer is embedding.
        let query_vector = if mode == SearchMode::Keyword {
            None
        } else {
            match self.embedder() {
                Ok(embedder) => embedder
                    .embed(&[request.query.as_str()])?
                    .into_iter()
                    .next(),
                Err(reason) => {
                    warning = Some(format!(
                        "semantic search is unavailable ({reason}); results are by keyword only"
                    ));
                    mode = SearchMode::Keyword;
                    None
                }
            }
        };
        let docs = inner
            .docs
            .read()
            .map_err(|_| IndexError::Task("docs lock poisoned".into()))?;
        let allowed = |doc: &ToolDoc| {
            request
                .servers
                .as_ref()
                .is_none_or(|s| s.contains(&doc.server_id))
                && request
                    .skills
                    .as_ref()
                    .is_none_or(|wanted| doc.skill_ids.iter().any(|s| wanted.contains(s)))
                && (request.include_external || !doc.is_external)
        };
        let unfiltered =
            request.servers.is_none() && request.skills.is_none() && request.include_external;
        let tools_searched = if unfiltered {
            docs.len()
        } else {
            docs.values().filter(|d| allowed(d)).count()
        };
        let limit = request.limit.max(1);
        let levers = inner.levers.read().map(|l| *l).unwrap_or_default();
        let dense = match &query_vector {
            Some(query) => {
                let vectors = inner
                    .vectors
                    .read()
                    .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
                let keep = |id: &str| docs.get(id).is_some_and(|d| allowed(d));
                let wanted = CANDIDATES.max(limit);
                let first = vectors.search_among(query, wanted, keep, tools_searched);
                match feedback_query(&vectors, query, &first, levers.feedback) {
                    Some(refined) => vectors.search_among(&refined, wanted, keep, tools_searched),
                    None => first,
                }
            }
            None => Vec::new(),
        };
        let keyword = if mode == SearchMode::Semantic {
            Vec::new()
        } else {
            let servers: Option<HashSet<String>> = request
                .servers
                .as_ref()
                .map(|s| s.iter().map(ServerId::to_string).collect());
            let extra = if levers.synonyms > 0.0 {
                vocabulary::expansions(&request.query)
            } else {
                Vec::new()
            };
            inner
                .keyword
                .search_expanded(
                    &request.query,
                    &extra,
                    levers.synonyms,
                    CANDIDATES.max(limit) * 2,
                    servers.as_ref(),
                )?
                .into_iter()
                .filter(|(id, _)| docs.get(id.as_str()).is_some_and(|d| allowed(d)))
                .take(CANDIDATES.max(limit))
                .collect()
        };
        let weights = inner.weights.read().map(|w| *w).unwrap_or_default();
        let mut fused = rank::fuse(&keyword, &dense, mode, &weights);
        // The hierarchical step (hybrid only; the other modes report raw
        // scores): tools of the skills nearest the query move up, and the
        // scores stay on the 0–1 scale.
        if let (Some(query), true) = (
            &query_vector,
            levers.skill_boost > 0.0 && mode == SearchMode::Hybrid,
        ) {
            let skills = inner
                .skill_vectors
                .read()
                .map_err(|_| IndexError::Task("skill vector lock poisoned".into()))?;
            let nearest = nearest_skills(query, &skills);
            if !nearest.is_empty() {
                for (id, score) in &mut fused {
                    let bonus = docs.get(id.as_str()).map_or(0.0, |doc| {
                        doc.skill_ids
                            .iter()
                            .filter_map(|s| nearest.iter().find(|(n, _)| n == s).map(|(_, b)| *b))
                            .fold(0.0, f32::max)
                    });
                    *score = (*score + levers.skill_boost * bonus) / (1.0 + levers.skill_boost);
                }
                fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            }
        }
        let hits = fused
            .into_iter()
            .filter_map(|(id, score)| {
                docs.get(id.as_str()).map(|doc| SearchHit {
                    doc: Arc::clone(doc),
                    score,
                })
            })
            .take(limit)
            .collect();
        Ok(SearchOutcome {
            hits,
            mode,
            warning,
            tools_searched,
        })
    }

    /// Keeps the index in line with the catalog until
    /// `shutdown`: one sync at start, then one after each burst of tool
    /// changes (a discovery that changed a list, a server removed).
    pub fn spawn_maintenance(
        &self,
        mut catalog: broadcast::Receiver<CatalogChanged>,
        mut registry: broadcast::Receiver<RegistryEvent>,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let index = self.clone();
        tokio::spawn(async move {
            if index.inner.setting == SearchSetting::Off {
                index.inner.progress.send_modify(|p| p.synced = true);
                return;
            }
            // A keyword index found damaged while running is started over
            // once, at once; a second failure waits for the next change.
            let mut rebuild = false;
            loop {
                let syncing = index.clone();
                let starting_over = std::mem::take(&mut rebuild);
                let result = tokio::select! {
                    result = in_background("search-index", move || syncing.sync(starting_over)) => result,
                    () = shutdown.cancelled() => return,
                };
                // Also when the sync failed part way, which leaves its
                // last progress saying it still runs.
                index.inner.progress.send_modify(|p| {
                    p.syncing = false;
                    p.synced = true;
                });
                // The sync's transient copies of the catalog are freed; hand
                // the pages back rather than keep the peak for good.
                crate::memory::release_freed();
                match result {
                    Ok(Ok(changed)) if changed > 0 => {
                        tracing::info!(changed, "search index updated")
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(IndexError::Keyword(err))) if !starting_over => {
                        tracing::warn!(
                            "the keyword index failed ({err}); rebuilding it from the store"
                        );
                        rebuild = true;
                        continue;
                    }
                    Ok(Err(err)) => tracing::error!("search indexing failed: {err}"),
                    Err(err) => tracing::error!("search indexing task failed: {err}"),
                }
                // Wait for a change that touches tools; a lagging receiver
                // means changes were missed, which a sync covers too.
                loop {
                    let tools_changed = tokio::select! {
                        event = catalog.recv() => match event {
                            Ok(change) => change.kind.is_none(),
                            Err(broadcast::error::RecvError::Lagged(_)) => true,
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                        event = registry.recv() => match event {
                            Ok(RegistryEvent::Removed { .. }) => true,
                            Ok(_) => false,
                            Err(broadcast::error::RecvError::Lagged(_)) => true,
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                        () = shutdown.cancelled() => return,
                    };
                    if tools_changed {
                        break;
                    }
                }
                // One sync covers every change queued so far.
                while catalog.try_recv().is_ok() {}
                while registry.try_recv().is_ok() {}
            }
        })
    }

    /// Stops a running sync at its next batch (shutdown must not wait for
    /// a long first indexing).
    pub fn stop(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// For a process about to exit: lets go of the vectors and result
    /// records without freeing them one by one (at 100,000 tools a graph
    /// of 200,000 points and the records take four seconds to free, most
    /// of a SIGTERM's budget). Skipped for what a sync holds.
    pub fn abandon_at_exit(&self) {
        if let Ok(mut docs) = self.inner.docs.try_write() {
            std::mem::forget(std::mem::take(&mut *docs));
        }
        if let Ok(mut vectors) = self.inner.vectors.try_write() {
            std::mem::forget(std::mem::take(&mut *vectors));
        }
    }

    /// Replaces the ranking levers (the evaluation sweeps them).
    pub fn set_levers(&self, levers: Levers) {
        if let Ok(mut current) = self.inner.levers.write() {
            *current = levers;
        }
    }

    /// Replaces the hybrid weights (the evaluation sweeps them).
    pub fn set_weights(&self, weights: Weights) {
        if let Ok(mut current) = self.inner.weights.write() {
            *current = weights;
        }
    }

    /// Whether searches can use meaning: the model is loaded or will load
    /// when first needed (this never loads it).
    pub fn semantic_available(&self) -> bool {
        matches!(
            self.inner.model.read().as_deref(),
            Ok(ModelState::NotLoaded | ModelState::Ready(_))
        )
    }

    /// Whether the model is in memory now.
    pub fn model_loaded(&self) -> bool {
        matches!(self.inner.model.read().as_deref(), Ok(ModelState::Ready(_)))
    }

    /// Why searches are by keyword only, if they are (never loads).
    pub fn model_warning(&self) -> Option<String> {
        match self.inner.model.read().as_deref() {
            Ok(ModelState::Unavailable(reason) | ModelState::Disabled(reason)) => {
                Some(reason.clone())
            }
            Ok(_) => None,
            Err(_) => Some("the search model lock was poisoned".to_owned()),
        }
    }
}

/// The query moved towards its best dense results (Rocchio feedback), or
/// `None` when feedback is off or there is nothing to feed back.
fn feedback_query(
    vectors: &VectorIndex,
    query: &[f32],
    first: &[(Arc<str>, f32)],
    weight: f32,
) -> Option<Vec<f32>> {
    if weight <= 0.0 || first.is_empty() {
        return None;
    }
    let top: HashSet<&str> = first
        .iter()
        .take(FEEDBACK_DOCS)
        .map(|(id, _)| &**id)
        .collect();
    let per_tool = vectors.vectors_of(|id| top.contains(id));
    let means: Vec<Vec<f32>> = per_tool
        .values()
        .filter_map(|v| vector::normalised_mean(v.iter().map(Vec::as_slice)))
        .collect();
    let centre = vector::normalised_mean(means.iter().map(Vec::as_slice))?;
    let moved: Vec<f32> = query
        .iter()
        .zip(&centre)
        .map(|(q, c)| q + weight * c)
        .collect();
    vector::normalised_mean(std::iter::once(moved.as_slice()))
}

/// The skills nearest a query, each with a bonus in (0, 1]: 1 for the
/// nearest, falling to 0 at the first skill not taken.
fn nearest_skills(query: &[f32], skills: &[(String, Vec<f32>)]) -> Vec<(String, f32)> {
    let mut scored: Vec<(&str, f32)> = skills
        .iter()
        .map(|(id, v)| (id.as_str(), vector::dot(query, v)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let Some(&(_, best)) = scored.first() else {
        return Vec::new();
    };
    let floor = scored.get(NEAREST_SKILLS).map_or(best - 1.0, |(_, s)| *s);
    let span = (best - floor).max(f32::EPSILON);
    scored
        .into_iter()
        .take(NEAREST_SKILLS)
        .map(|(id, s)| (id.to_owned(), ((s - floor) / span).clamp(0.0, 1.0)))
        .filter(|(_, bonus)| *bonus > 0.0)
        .collect()
}

#[cfg(test)]
mod tests;

/// Runs `job` on a thread of its own at a lower CPU priority (nice 10), so
/// embedding never takes the cores from calls being routed. ONNX Runtime's
/// worker threads, created when the model loads there, inherit it.
pub fn in_background<T: Send + 'static>(
    name: &str,
    job: impl FnOnce() -> T + Send + 'static,
) -> tokio::sync::oneshot::Receiver<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            lower_priority();
            let _ = tx.send(job());
        });
    if let Err(err) = spawned {
        tracing::error!("cannot start the {name} thread: {err}");
    }
    rx
}

fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority on the calling thread's own id; no memory involved.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}
