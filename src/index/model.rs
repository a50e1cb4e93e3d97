//! The embedding model, loaded on first need (a cache miss or a semantic
//! query) rather than at start, and the embeddings it makes through the
//! store's cache: a daemon that never needs meaning never pays for it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::embedder::{self, EmbedError, Embedder};
use super::{IndexError, SearchIndex};
use crate::store::embedding_key;

/// The model's state. It loads on first need, not at start.
pub(super) enum ModelState {
    NotLoaded,
    Ready(Arc<Embedder>),
    Unavailable(String),
    /// `--search keyword` or `off`.
    Disabled(String),
}

impl SearchIndex {
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
    pub(super) fn embedder(&self) -> Result<Arc<Embedder>, String> {
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

    /// The indexer's bulk pass is over: the model's helper sessions go
    /// (this never loads the model).
    pub(super) fn end_bulk_embedding(&self) {
        if let Ok(ModelState::Ready(embedder)) = self.inner.model.read().as_deref() {
            embedder.end_bulk();
        }
    }

    /// One vector per text, from the cache, or embedded now (in the
    /// background's turns, then cached) where `embed` says so; `None` for
    /// the rest. The model is loaded only when a text must be embedded;
    /// `bulk` lets it use helper sessions until `end_bulk_embedding`.
    pub(super) fn cached_embeddings(
        &self,
        flat: &[&str],
        embed: impl Fn(usize) -> bool,
        bulk: bool,
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
            let fresh = embedder
                .embed_in_background(&inputs, bulk, &self.inner.stopping)
                .map_err(|err| match err {
                    EmbedError::Stopped => IndexError::Cancelled,
                    err => err.into(),
                })?;
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
}
