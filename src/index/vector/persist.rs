//! Saving a graph and opening it again: hnsw_rs's dump of the links, our
//! two vector files (`saved_vectors`) and `meta.json`, every file behind a
//! CRC-32 check (hnsw_rs's reload trusts its files). A saved index opens
//! answering from its vectors at once; its links load after.

use hnsw_rs::api::AnnT;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

use super::links::Links;
use super::on_disk::OnDisk;
use super::saved_vectors::{self, SavedVectors, checksum};
use super::{Backend, DEAD, Slot, VectorError, VectorIndex};

/// Bumped when what is saved (or what a saved vector means) changes:
/// 2 keeps vectors as f16, 3 in files of ours beside byte copies.
const SAVED_FORMAT: u32 = 3;
const SAVED_NAME: &str = "graph";
const SAVED_META: &str = "meta.json";

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

impl VectorIndex {
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
        saved_vectors::write(
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
        if !as_written(&meta.files, dir, saved_vectors::F16_FILE)? {
            return Err(changed());
        }
        let (vectors, bytes_file) = SavedVectors::open(dir, dimension, meta.points)?;
        if !meta
            .files
            .iter()
            .any(|f| f.name == saved_vectors::I8_FILE && (f.len, f.crc32) == bytes_file)
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
pub(super) fn links_file() -> String {
    format!("{SAVED_NAME}.hnsw.graph")
}

/// Length and CRC-32 of the saved files under `dir`: hnsw_rs's links
/// and our vectors.
fn saved_files(dir: &Path) -> Result<Vec<SavedFile>, VectorError> {
    [
        links_file().as_str(),
        saved_vectors::F16_FILE,
        saved_vectors::I8_FILE,
    ]
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

/// Whether the file `name` under `dir` is as `meta` says it was written.
fn as_written(meta: &[SavedFile], dir: &Path, name: &str) -> Result<bool, VectorError> {
    let (len, crc32) = checksum(std::fs::File::open(dir.join(name))?, |_| ())?;
    Ok(meta
        .iter()
        .any(|f| f.name == name && f.len == len && f.crc32 == crc32))
}
