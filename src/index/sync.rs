//! Keeping the indexes in line with the store: a sync diffs the catalog
//! against what the keyword and vector indexes hold, reading the catalog
//! in place, and indexes what changed (keywords of every new tool first,
//! then embeddings batch by batch, in two passes).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::embedder;
use super::keyword::KeywordDoc;
use super::text::{ServerNaming, tool_texts};
use super::tool_doc::ToolDoc;
use super::vector_upkeep::open_saved_vectors;
use super::{IndexError, IndexProgress, SearchIndex, SearchSetting, VectorIndex};
use crate::model::{ServerId, ToolRecord};
use crate::store::embedding_key;

/// Tools embedded per batch: bounds memory and lets searches interleave.
const BATCH: usize = 64;
/// A sync changing at least this many tools embeds on a helper session
/// too (BENCHMARKS.md "Indexing speed"): the helper costs a copy of the
/// model (about 90 MB) and a load (about 0.2 s), which pays off only over
/// a few seconds of embedding.
const HELPER_FROM: usize = 256;

/// Keyword commit payload while a sync is under way: never matches a store
/// generation, so a crash mid-way means a rebuild.
const PARTIAL: &str = "partial";

impl SearchIndex {
    /// Publishes a sync's progress; `synced` is kept once set, and set by
    /// a sync that ends.
    fn report(&self, progress: IndexProgress) {
        if !progress.syncing {
            self.skills_moved();
        }
        self.inner.progress.send_modify(|current| {
            *current = IndexProgress {
                synced: current.synced || !progress.syncing,
                ..progress
            }
        });
    }

    /// Waits (at most `limit`) until every tool the store holds now is
    /// findable by keyword and by its first vector (by keyword alone within
    /// milliseconds of a sync's start). True if it is.
    pub async fn wait_findable(&self, limit: std::time::Duration) -> bool {
        if self.inner.setting == SearchSetting::Off {
            return true;
        }
        let Ok(generation) = self.inner.store.catalog_generation() else {
            return false;
        };
        let mut progress = self.inner.progress.subscribe();
        matches!(
            tokio::time::timeout(
                limit,
                progress
                    .wait_for(|p| p.generation >= generation && p.indexed_tools >= p.total_tools)
            )
            .await,
            Ok(Ok(_))
        )
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
        // However the sync ends, the model's helper sessions go with it.
        let _bulk = EndBulkOnDrop(self);
        let first_sync = !inner.synced_once.swap(true, Ordering::SeqCst);
        let mut semantic = self.semantic_available();
        // The index saved by the last run opens on its own thread while
        // the store is read: its vectors at once (read in place), its graph
        // after, which the sync does not wait for (seconds at 100,000 tools).
        let saved_graph = (first_sync && !rebuild && semantic)
            .then(|| open_saved_vectors(inner.graph_dir.clone(), Arc::clone(&inner.vectors)));
        let generation = inner.store.catalog_generation()?;
        let naming = ServerNaming::for_store_of(inner.store.list_servers()?.len());
        // What the keyword index already holds, by id and hash: kept as is
        // when it reflects this store.
        let mut on_disk: HashMap<String, String> = HashMap::new();
        if rebuild {
            inner.keyword.start_over()?;
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
                        inner.keyword.start_over()?;
                    }
                }
            } else {
                tracing::info!("the keyword index does not match the store; rebuilding it");
                inner.keyword.start_over()?;
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
                    .is_ok_and(|vectors| vectors.holds(id, &vector_hash(hash, naming)))
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
                let held = vectors.holds(&doc.tool_id, &vector_hash(&doc.hash, naming));
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
            self.index_keywords(batch, &on_disk, naming)?;
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
        // The model pads every text of a run to the longest, so each pass
        // goes through its texts shortest first: runs of similar lengths
        // (measured on the real tools: +7 % texts/s in the first pass,
        // +12 % in the second, over sorting only within each batch).
        let bulk = changed.len() >= HELPER_FROM;
        let mut by_length = changed.clone();
        by_length.sort_by_cached_key(|t| embedded_length(t, 0, naming));
        for batch in by_length.chunks(BATCH) {
            if inner.stopping.load(Ordering::SeqCst) {
                // The next start rebuilds from the store (cached
                // embeddings make that cheap).
                return Err(IndexError::Cancelled);
            }
            if semantic {
                match self.index_vectors(batch, true, bulk, naming) {
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
        drop(by_length);
        second.sort_by_cached_key(|t| embedded_length(t, 1, naming));
        let mut refining = second.len();
        for batch in second.chunks(BATCH) {
            if !semantic {
                break;
            }
            if inner.stopping.load(Ordering::SeqCst) {
                return Err(IndexError::Cancelled);
            }
            match self.index_vectors(batch, false, bulk, naming) {
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
                .flat_map(|t| tool_texts(t, &t.skill_ids, naming).dense)
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
        naming: ServerNaming,
    ) -> Result<(), IndexError> {
        let inner = &self.inner;
        // Texts only for documents the keyword index lacks (a warm start
        // has them all: a large catalog would be parsed for nothing).
        let stale: Vec<&ToolRecord> = batch
            .iter()
            .copied()
            .filter(|t| on_disk.get(&t.id) != Some(&t.definition_hash))
            .collect();
        let texts: Vec<_> = stale
            .iter()
            .map(|t| tool_texts(t, &t.skill_ids, naming))
            .collect();
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
        bulk: bool,
        naming: ServerNaming,
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
                .filter(|t| !vectors.holds(&t.id, &vector_hash(&t.definition_hash, naming)))
                .collect()
        };
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<_> = batch
            .iter()
            .map(|t| tool_texts(t, &t.skill_ids, naming))
            .collect();
        let flat: Vec<&str> = texts
            .iter()
            .flat_map(|t| t.dense.iter().map(String::as_str))
            .collect();
        let position: Vec<usize> = texts.iter().flat_map(|t| 0..t.dense.len()).collect();
        let mut flat_vectors = self
            .cached_embeddings(&flat, |i| !first_pass || position[i] == 0, bulk)?
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
                    &vector_hash(&tool.definition_hash, naming),
                    complete,
                    &own,
                );
            }
        }
        Ok(incomplete)
    }
}

/// Ends the model's bulk pass when a sync is over, returned or not.
struct EndBulkOnDrop<'a>(&'a SearchIndex);

impl Drop for EndBulkOnDrop<'_> {
    fn drop(&mut self) {
        self.0.end_bulk_embedding();
    }
}

/// The length of a tool's `which`th text to embed, in bytes (what a run's
/// padding follows closely enough to order by).
fn embedded_length(tool: &ToolRecord, which: usize, naming: ServerNaming) -> usize {
    tool_texts(tool, &tool.skill_ids, naming)
        .dense
        .get(which)
        .map_or(0, String::len)
}

/// The hash a tool's vectors are held under: its definition's, marked when
/// its texts leave out a lone server's name, so that a store gaining its
/// second server (or losing it) embeds the tools again.
fn vector_hash(definition_hash: &str, naming: ServerNaming) -> Cow<'_, str> {
    match naming {
        ServerNaming::Named => Cow::Borrowed(definition_hash),
        ServerNaming::Lone => Cow::Owned(format!("{definition_hash}~lone")),
    }
}
