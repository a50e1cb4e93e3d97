//! Tool search: the keyword index (tantivy), the vector index (exact cosine
//! over local embeddings) and the hybrid ranking over both. Derived from the
//! store, never trusted over it: the keyword index records the catalog
//! generation it reflects and is rebuilt when the store moved on without it;
//! vectors come from the embedding cache in the store, so a restart embeds
//! nothing that did not change. Indexing runs in the background and never
//! blocks connecting or calling.

pub mod embedder;
pub mod intents;
pub mod keyword;
mod lent_vectors;
mod maintenance;
mod model;
pub mod query;
mod rank;
mod search;
pub mod similarity;
mod sync;
pub mod text;
mod tool_doc;
mod vector;
mod vector_upkeep;
mod vocabulary;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::watch;

use crate::store::{Store, StoreError};
use embedder::EmbedError;
use keyword::{KeywordError, KeywordIndex};
use model::ModelState;
use tool_doc::Docs;

pub use maintenance::{LET_GO_WAIT, in_background, let_go};
pub use rank::{Normalisation, SearchMode, Weights};
pub use search::{Levers, SearchHit, SearchOutcome, SearchRequest};
pub use tool_doc::ToolDoc;
pub use vector::{GRAPH_FROM, VectorBackend, VectorError, VectorIndex, VectorShape};

/// Where the keyword index lives inside the data dir.
pub const INDEX_DIR: &str = "index";

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
    /// A rebuild asked for (`reindex`), run by the maintenance task, which
    /// also tries again when it fails.
    rebuild_wanted: AtomicBool,
    rebuild_asked: tokio::sync::Notify,
    /// Whether a maintenance task runs to take such requests.
    maintained: AtomicBool,
    progress: watch::Sender<IndexProgress>,
    /// Moves on whenever tools' skills may have changed (a sync, or a
    /// classification applied): views that filter by skill look again.
    skills_moved: watch::Sender<u64>,
}

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
                rebuild_wanted: AtomicBool::new(false),
                rebuild_asked: tokio::sync::Notify::new(),
                maintained: AtomicBool::new(false),
                progress,
                skills_moved: watch::channel(0).0,
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

    pub fn progress(&self) -> watch::Receiver<IndexProgress> {
        self.inner.progress.subscribe()
    }
}

#[cfg(test)]
mod tests;
