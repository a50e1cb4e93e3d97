//! The vector index's backend over its life: the index saved by the last
//! run opened at start (its vectors at once, its graph after, on a thread
//! of its own), and after each sync the exact scan turned into a graph (or
//! back), a changed graph saved and then searched from its files.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use super::embedder;
use super::{IndexError, SearchIndex, VectorIndex, vector};

/// A saved vector index opened and installed (answering from its vectors
/// in place while its graph loads): its shape, the generation it was saved
/// at and how long the opening took, if there was one.
type OpenedVectors =
    Result<Option<(vector::VectorShape, u64, std::time::Duration)>, vector::VectorError>;

/// Opens the index saved by the last run on a thread of its own: installs
/// it as soon as its vectors are read (says so on the channel returned),
/// then loads its graph and lets it take over. The sync waits for the
/// first step only.
pub(super) fn open_saved_vectors(
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

impl SearchIndex {
    /// At the first sync: waits until the index saved by the last run (if
    /// it is whole and of this model) answers from its vectors in place;
    /// its graph loads on after. Its tools are checked against the store by
    /// the sync like any others (unchanged ones keep their vectors).
    pub(super) fn take_saved_graph(
        &self,
        opening: std::sync::mpsc::Receiver<OpenedVectors>,
        generation: u64,
    ) {
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
    pub(super) fn reshape_vectors(&self, generation: u64) -> Result<(), IndexError> {
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
}
