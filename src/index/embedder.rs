//! The local sentence-embedding model (all-MiniLM-L6-v2 with its matrix
//! products in int8, ONNX, mean pooling) run by ONNX Runtime, loaded without any network: the runtime
//! from `ORT_DYLIB_PATH`, `assets/` beside the binary or the copy embedded in
//! the binary; the model from the embedded bytes or `assets/`. When nothing
//! loads, search works on keywords alone and says why.

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Part of every cached embedding's key: a new model never reuses vectors
/// of the old one.
pub const MODEL_ID: &str = "all-MiniLM-L6-v2/int8-products/6bf8a0ae";
pub const DIMENSION: usize = 384;
/// MiniLM was trained on 128-token windows; longer inputs cost time and
/// dilute the vector.
const MAX_TOKENS: usize = 128;
/// Texts per ONNX run: one. The model's int8 products scale each run's
/// activations together, so a text run beside others would get a vector
/// that depends on them (and on how a sync happened to sort its texts);
/// alone it always gets the same one, at the same speed per text as in a
/// run of four (BENCHMARKS.md "Indexing speed").
const EMBED_BATCH: usize = 1;
/// Sessions the indexer may run side by side. Each has one thread: on two
/// cores two one-thread sessions embed 186 texts/s where one two-thread
/// session embeds 147 (a run of a few short texts leaves a second thread
/// of the same session mostly waiting). More cores stay with the servers
/// and the router.
const MAX_SESSIONS: usize = 2;
/// Set to `1` to skip the runtime embedded in the binary (e.g. to force the
/// system's ONNX Runtime through `ORT_DYLIB_PATH`).
pub const SKIP_EMBEDDED_RUNTIME_ENV: &str = "MCP_AGGREGATOR_SKIP_EMBEDDED_RUNTIME";

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("the embedding model is unavailable: {0}")]
    Unavailable(String),
    #[error("embedding failed: {0}")]
    Failed(String),
    #[error("embedding stopped: the aggregator is shutting down")]
    Stopped,
}

/// The loaded model: one ONNX session always, and during a bulk pass of
/// the indexer a helper session per spare core (each session is a copy of
/// the model, about 90 MB, so helpers are loaded for the pass and dropped
/// after it). A session runs one text run at a time, so callers take
/// turns; searches and indexing run on blocking threads. Searches go
/// first: the indexer embeds `EMBED_BATCH` texts per turn and lets every
/// waiting query have the first free session before its next turn, so a
/// search waits for at most one small run, never for a sync.
pub struct Embedder {
    sessions: Mutex<Sessions>,
    /// A session came back, or the last waiting query got one.
    changed: Condvar,
    /// Sessions this machine may run side by side.
    max_sessions: usize,
    /// Texts the indexer has embedded so far.
    background_texts: AtomicU64,
    /// Sessions loaded since the model was, the first included.
    sessions_loaded: AtomicU64,
    /// A helper session failed to load once: what failed (memory, the
    /// model file) would fail again, so later bulk passes run on the
    /// sessions there are instead of paying a load and a warning per batch.
    helpers_failed: AtomicBool,
    runtime: String,
}

struct Sessions {
    idle: Vec<TextEmbedding>,
    /// Idle, running, or being loaded.
    alive: usize,
    /// How many sessions should stay alive: 1, or `max_sessions` during a
    /// bulk pass; a session given back above it is dropped.
    wanted: usize,
    /// Queries waiting for a session; the indexer waits while there are any.
    queries_waiting: usize,
}

/// A session lent out of the pool; it goes back when dropped, whatever
/// happened meanwhile.
struct Lent<'a> {
    embedder: &'a Embedder,
    session: Option<TextEmbedding>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            self.embedder.give_back(session);
        }
    }
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("runtime", &self.runtime)
            .finish()
    }
}

impl Embedder {
    /// Loads the runtime and the model. Blocking (a fraction of a second).
    pub fn load() -> Result<Embedder, EmbedError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Embedder::load_with_sessions(cores.min(MAX_SESSIONS))
    }

    /// `load` allowing at most this many sessions side by side (tests and
    /// benches compare shapes).
    pub fn load_with_sessions(max_sessions: usize) -> Result<Embedder, EmbedError> {
        // A run's few texts are tokenized on the calling thread: handed to
        // the rayon pool, each run waited for a pool thread to be
        // scheduled on cores the sessions keep busy.
        tokenizers::utils::parallelism::set_parallelism(false);
        let runtime = load_runtime()?;
        let first = new_session()?;
        Ok(Embedder {
            sessions: Mutex::new(Sessions {
                idle: vec![first],
                alive: 1,
                wanted: 1,
                queries_waiting: 0,
            }),
            changed: Condvar::new(),
            max_sessions: max_sessions.max(1),
            background_texts: AtomicU64::new(0),
            sessions_loaded: AtomicU64::new(1),
            helpers_failed: AtomicBool::new(false),
            runtime,
        })
    }

    /// Where the runtime came from, for logs and `/api/v1/search` metadata.
    pub fn runtime(&self) -> &str {
        &self.runtime
    }

    /// Sessions alive now (1 outside a bulk pass).
    pub fn sessions_alive(&self) -> usize {
        self.pool().alive
    }

    /// Sessions loaded so far, the first and every helper.
    pub fn sessions_loaded(&self) -> u64 {
        self.sessions_loaded.load(Ordering::SeqCst)
    }

    /// Unit-length vectors, one per text, in order, for a query: on the
    /// first session free, ahead of the indexer's next turn. Blocking.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.lend_to_query().run(texts)
    }

    /// The same for the indexer, `EMBED_BATCH` texts per turn, each turn
    /// taken only when no query waits. With `bulk`, helper sessions are
    /// loaded (once, until `end_bulk`) and the turns run side by side.
    /// Blocking.
    /// `stop`, once set, ends the call after the runs in flight (a
    /// shutdown must not wait for a whole batch on a busy machine, where
    /// this low-priority work gets little of the cores).
    pub fn embed_in_background(
        &self,
        texts: &[&str],
        bulk: bool,
        stop: &AtomicBool,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let runs: Vec<&[&str]> = texts.chunks(EMBED_BATCH).collect();
        let helpers = if bulk && runs.len() > 1 && !self.helpers_failed.load(Ordering::SeqCst) {
            self.max_sessions - 1
        } else {
            0
        };
        let results: Mutex<Vec<Option<Vec<Vec<f32>>>>> = Mutex::new(vec![None; runs.len()]);
        let next_run = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let worker = |first_error: &mut Option<EmbedError>| {
            while !failed.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
                let i = next_run.fetch_add(1, Ordering::SeqCst);
                let Some(texts) = runs.get(i) else {
                    return;
                };
                let mut lent = self.lend_to_indexer();
                match lent.run(texts) {
                    Ok(vectors) => {
                        drop(lent);
                        self.background_texts
                            .fetch_add(texts.len() as u64, Ordering::SeqCst);
                        lock(&results)[i] = Some(vectors);
                    }
                    Err(err) => {
                        failed.store(true, Ordering::SeqCst);
                        *first_error = Some(err);
                        return;
                    }
                }
            }
        };
        let error = std::thread::scope(|scope| {
            let helping: Vec<_> = (0..helpers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut error = None;
                        // A helper that does not load leaves the work to
                        // the sessions there are.
                        if self.add_session() {
                            worker(&mut error);
                        }
                        error
                    })
                })
                .collect();
            let mut error = None;
            worker(&mut error);
            for helper in helping {
                error = error.or(match helper.join() {
                    Ok(helper_error) => helper_error,
                    Err(_) => Some(EmbedError::Failed("an embedding thread panicked".into())),
                });
            }
            error
        });
        if let Some(err) = error {
            return Err(err);
        }
        let results = results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut vectors = Vec::with_capacity(texts.len());
        for run in results {
            vectors.extend(run.ok_or_else(|| {
                if stop.load(Ordering::SeqCst) {
                    EmbedError::Stopped
                } else {
                    EmbedError::Failed("a run was lost".into())
                }
            })?);
        }
        Ok(vectors)
    }

    /// The bulk pass is over: helper sessions are dropped (now if idle,
    /// else when given back), and their memory with them.
    pub fn end_bulk(&self) {
        let dropped: Vec<TextEmbedding> = {
            let mut sessions = self.pool();
            sessions.wanted = 1;
            let surplus = sessions.alive.saturating_sub(1).min(sessions.idle.len());
            sessions.alive -= surplus;
            let keep = sessions.idle.len() - surplus;
            sessions.idle.split_off(keep)
        };
        drop(dropped);
    }

    /// How many texts the indexer has embedded (a query's wait is measured
    /// in them).
    pub fn background_texts(&self) -> u64 {
        self.background_texts.load(Ordering::SeqCst)
    }

    fn pool(&self) -> MutexGuard<'_, Sessions> {
        lock(&self.sessions)
    }

    fn lend_to_query(&self) -> Lent<'_> {
        let mut sessions = self.pool();
        sessions.queries_waiting += 1;
        let mut sessions = self
            .changed
            .wait_while(sessions, |s| s.idle.is_empty())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.queries_waiting -= 1;
        let session = sessions.idle.pop();
        if sessions.queries_waiting == 0 {
            self.changed.notify_all();
        }
        Lent {
            embedder: self,
            session,
        }
    }

    fn lend_to_indexer(&self) -> Lent<'_> {
        let sessions = self.pool();
        let mut sessions = self
            .changed
            .wait_while(sessions, |s| s.idle.is_empty() || s.queries_waiting > 0)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Lent {
            embedder: self,
            session: sessions.idle.pop(),
        }
    }

    fn give_back(&self, session: TextEmbedding) {
        let surplus = {
            let mut sessions = self.pool();
            if sessions.alive > sessions.wanted {
                sessions.alive -= 1;
                Some(session)
            } else {
                sessions.idle.push(session);
                None
            }
        };
        self.changed.notify_all();
        drop(surplus);
    }

    /// Loads one more session for a bulk pass if the pool is below its
    /// size; whether the caller should work beside the others.
    fn add_session(&self) -> bool {
        {
            let mut sessions = self.pool();
            sessions.wanted = self.max_sessions;
            if sessions.alive >= self.max_sessions {
                return true;
            }
            sessions.alive += 1;
        }
        match new_session() {
            Ok(session) => {
                self.sessions_loaded.fetch_add(1, Ordering::SeqCst);
                self.give_back(session);
                true
            }
            Err(err) => {
                if !self.helpers_failed.swap(true, Ordering::SeqCst) {
                    tracing::warn!(
                        "a helper embedding session did not load ({err}); indexing goes on with one session"
                    );
                }
                let mut sessions = self.pool();
                sessions.alive -= 1;
                sessions.wanted = sessions.alive;
                false
            }
        }
    }
}

impl Lent<'_> {
    fn run(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Always set: both lenders wait until a session is idle.
        match self.session.as_mut() {
            Some(session) => run(session, texts),
            None => Err(EmbedError::Failed("no embedding session was free".into())),
        }
    }
}

/// A new ONNX session of the model, with one intra-op thread.
fn new_session() -> Result<TextEmbedding, EmbedError> {
    let files = model_files()?;
    let model =
        UserDefinedEmbeddingModel::new(files.onnx, files.tokenizer).with_pooling(Pooling::Mean);
    let options = InitOptionsUserDefined::new()
        // Without the arena, memory goes back after each batch instead
        // of staying at the peak of the largest batch (measured: 300 MB
        // less after indexing 10,000 tools, at the same speed).
        .with_execution_providers(vec![
            ort::ep::CPU::default().with_arena_allocator(false).build(),
        ])
        .with_max_length(MAX_TOKENS)
        .with_intra_threads(1)
        // Spinning threads burn the cores the servers and the router need.
        .with_session_config("session.intra_op.allow_spinning", "0");
    // A broken runtime can panic inside the bindings; that must cost
    // search its vectors, not the daemon its life.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        TextEmbedding::try_new_from_user_defined(model, options)
    }))
    .map_err(|_| EmbedError::Unavailable("ONNX Runtime panicked while loading the model".into()))?
    .map_err(|err| EmbedError::Unavailable(format!("the model did not load: {err}")))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One embedding run on the session (a panic inside the bindings is an
/// error, not a crash).
fn run(model: &mut TextEmbedding, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
    let vectors = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.embed(texts, Some(EMBED_BATCH))
    }))
    .map_err(|_| EmbedError::Failed("ONNX Runtime panicked".into()))?
    .map_err(|err| EmbedError::Failed(err.to_string()))?;
    Ok(vectors.into_iter().map(normalised).collect())
}

fn normalised(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// The directory beside the binary where `scripts/fetch-assets.sh` output
/// may be copied for builds that did not embed it.
fn assets_beside_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("assets"))
}

/// Tries each runtime in the documented order; the first that loads wins.
fn load_runtime() -> Result<String, EmbedError> {
    let mut tried = Vec::new();
    if let Some(path) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        match init_runtime(Path::new(&path)) {
            Ok(()) => return Ok(format!("ORT_DYLIB_PATH ({})", Path::new(&path).display())),
            Err(err) => tried.push(format!("ORT_DYLIB_PATH: {err}")),
        }
    }
    if let Some(dir) = assets_beside_binary() {
        let path = dir.join("libonnxruntime.so");
        if path.is_file() {
            match init_runtime(&path) {
                Ok(()) => return Ok(format!("{}", path.display())),
                Err(err) => tried.push(err),
            }
        }
    }
    let skip_embedded = std::env::var(SKIP_EMBEDDED_RUNTIME_ENV).is_ok_and(|v| v == "1");
    if skip_embedded {
        tried.push(format!(
            "the embedded runtime: skipped ({SKIP_EMBEDDED_RUNTIME_ENV}=1)"
        ));
    } else {
        match embedded::runtime_path() {
            Ok(Some(path)) => match init_runtime(&path) {
                Ok(()) => return Ok("embedded in the binary".to_owned()),
                Err(err) => tried.push(format!("the embedded runtime: {err}")),
            },
            Ok(None) => tried.push("this build embeds no runtime".to_owned()),
            Err(err) => tried.push(format!("the embedded runtime: {err}")),
        }
    }
    Err(EmbedError::Unavailable(format!(
        "ONNX Runtime could not be loaded ({})",
        tried.join("; ")
    )))
}

fn init_runtime(path: &Path) -> Result<(), String> {
    // Loading the library is what matters here; sessions create the
    // default environment on first use.
    drop(ort::init_from(path).map_err(|err| err.to_string())?);
    Ok(())
}

struct ModelFiles {
    onnx: Vec<u8>,
    tokenizer: TokenizerFiles,
}

fn model_files() -> Result<ModelFiles, EmbedError> {
    if let Some(files) = embedded::model_files() {
        return Ok(files);
    }
    let Some(dir) = assets_beside_binary() else {
        return Err(EmbedError::Unavailable("this build embeds no model".into()));
    };
    let read = |name: &str| {
        std::fs::read(dir.join(name)).map_err(|err| {
            EmbedError::Unavailable(format!(
                "this build embeds no model and {} is unreadable: {err}",
                dir.join(name).display()
            ))
        })
    };
    Ok(ModelFiles {
        onnx: read("model.onnx")?,
        tokenizer: TokenizerFiles {
            tokenizer_file: read("tokenizer.json")?,
            config_file: read("config.json")?,
            special_tokens_map_file: read("special_tokens_map.json")?,
            tokenizer_config_file: read("tokenizer_config.json")?,
        },
    })
}

/// The bytes `build.rs` found in `assets/` at build time.
mod embedded {
    use super::ModelFiles;
    use fastembed::TokenizerFiles;
    use std::path::PathBuf;

    #[cfg(embedded_model)]
    pub(super) fn model_files() -> Option<ModelFiles> {
        static MODEL: &[u8] = include_bytes!(concat!(env!("MCPA_ASSETS_DIR"), "/model.onnx"));
        macro_rules! asset {
            ($name:literal) => {
                include_bytes!(concat!(env!("MCPA_ASSETS_DIR"), "/", $name)).to_vec()
            };
        }
        let onnx = MODEL.to_vec();
        forget_pages(MODEL);
        Some(ModelFiles {
            onnx,
            tokenizer: TokenizerFiles {
                tokenizer_file: asset!("tokenizer.json"),
                config_file: asset!("config.json"),
                special_tokens_map_file: asset!("special_tokens_map.json"),
                tokenizer_config_file: asset!("tokenizer_config.json"),
            },
        })
    }

    #[cfg(not(embedded_model))]
    pub(super) fn model_files() -> Option<ModelFiles> {
        let _ = |tokenizer: TokenizerFiles| ModelFiles {
            onnx: Vec::new(),
            tokenizer,
        };
        None
    }

    /// Drops the pages of embedded bytes that were read once (copied out)
    /// from this process's resident set; they stay in the binary on disk and
    /// would be read again from there if ever touched. 52 MB less RSS.
    #[cfg(any(embedded_model, embedded_runtime))]
    fn forget_pages(bytes: &'static [u8]) {
        let page = 4096usize;
        let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
        let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
        if end > start {
            // SAFETY: the range lies within a read-only static mapped from
            // the executable; MADV_DONTNEED on a private file mapping only
            // discards pages that are re-read from the file on access.
            unsafe {
                let _ = rustix::mm::madvise(
                    start as *mut std::ffi::c_void,
                    end - start,
                    rustix::mm::Advice::LinuxDontNeed,
                );
            }
        }
    }

    /// The embedded library written to an anonymous in-memory file
    /// (`memfd`), loadable through `/proc/self/fd/N` without touching disk.
    /// The descriptor stays open for the life of the process.
    #[cfg(embedded_runtime)]
    pub(super) fn runtime_path() -> Result<Option<PathBuf>, String> {
        use std::io::Write;
        use std::os::fd::IntoRawFd;
        static RUNTIME: &[u8] =
            include_bytes!(concat!(env!("MCPA_ASSETS_DIR"), "/libonnxruntime.so"));
        let fd = rustix::fs::memfd_create(c"libonnxruntime.so", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|err| format!("memfd_create: {}", std::io::Error::from(err)))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(RUNTIME)
            .map_err(|err| format!("writing the runtime to memory: {err}"))?;
        forget_pages(RUNTIME);
        let fd = file.into_raw_fd();
        Ok(Some(PathBuf::from(format!("/proc/self/fd/{fd}"))))
    }

    #[cfg(not(embedded_runtime))]
    pub(super) fn runtime_path() -> Result<Option<PathBuf>, String> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// Until the indexer running beside the test is under way (its first
    /// run done).
    fn wait_for_the_indexers_first_run(embedder: &Embedder) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while embedder.background_texts() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the indexer never started"
            );
            std::thread::yield_now();
        }
    }

    /// The int8 model scales a run's activations together: a text's vector
    /// must not depend on the texts asked with it (a query's intents, a
    /// sync's neighbours).
    #[test]
    fn a_texts_vector_does_not_depend_on_its_neighbours() {
        let embedder = Embedder::load_with_sessions(1).expect("the model loads");
        let text = "read a file from the project folder";
        let alone = embedder.embed(&[text]).expect("alone");
        let beside = embedder
            .embed(&[
                "EXTREMELY LOUD ### 9999999 !!!! unusual tokens ~~~ next to it",
                text,
                "post a message to a channel",
            ])
            .expect("beside others");
        assert_eq!(alone[0], beside[1]);
        let background = embedder
            .embed_in_background(
                &[
                    "a much longer text about sending mail, lists of folders and attachments",
                    text,
                ],
                false,
                &AtomicBool::new(false),
            )
            .expect("the indexer's way");
        assert_eq!(alone[0], background[1]);
    }

    #[test]
    fn embeds_offline_and_ranks_paraphrases_above_unrelated_text() {
        let embedder = Embedder::load().expect("the model loads from the embedded bytes");
        let vectors = embedder
            .embed(&[
                "open a new ticket in the bug tracker",
                "create_issue: Create a new issue in a GitHub repository",
                "read_file: Read the complete contents of a file from the file system",
            ])
            .expect("embedding works");
        assert_eq!(vectors.len(), 3);
        assert!(vectors.iter().all(|v| v.len() == DIMENSION));
        let norm = cosine(&vectors[0], &vectors[0]);
        assert!(
            (norm - 1.0).abs() < 1e-4,
            "vectors are unit length, got {norm}"
        );
        let related = cosine(&vectors[0], &vectors[1]);
        let unrelated = cosine(&vectors[0], &vectors[2]);
        assert!(
            related > unrelated + 0.1,
            "related {related} vs unrelated {unrelated}"
        );
    }

    /// A search while the indexer embeds on both sessions: the query waits
    /// for the runs in flight at most, never for the indexer's whole call
    /// (before the turns, a search during a cold sync waited 1.6 s at p50).
    #[test]
    fn a_query_goes_ahead_of_the_indexer() {
        const TEXTS: usize = 400;
        let embedder = Arc::new(Embedder::load_with_sessions(2).expect("the model loads"));
        let texts: Vec<String> = (0..TEXTS)
            .map(|i| format!("tool number {i}: reads, writes and lists the files of a project"))
            .collect();
        let indexing = Arc::clone(&embedder);
        let indexer = std::thread::spawn(move || {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            indexing
                .embed_in_background(&texts, true, &AtomicBool::new(false))
                .map(|v| v.len())
        });
        wait_for_the_indexers_first_run(&embedder);
        let before = embedder.background_texts();
        let answer = embedder.embed(&["find my calendar"]).expect("the query");
        let after = embedder.background_texts();
        assert_eq!(answer.len(), 1);
        assert!(
            // Each session's run in flight, and one more on the session
            // the query did not take while it ran.
            after - before <= 4 * EMBED_BATCH as u64,
            "the query waited for {} of the indexer's texts",
            after - before
        );
        assert!(
            after < TEXTS as u64,
            "the query was answered only after the indexer finished"
        );
        assert_eq!(indexer.join().expect("indexer").expect("indexed"), TEXTS);
    }

    /// A shutdown's stop ends the indexer's call after the runs in flight,
    /// not after the whole batch.
    #[test]
    fn a_stop_ends_the_indexers_call_after_the_runs_in_flight() {
        // Far more than are embedded before the stop, on any machine.
        const TEXTS: usize = 5000;
        let embedder = Arc::new(Embedder::load_with_sessions(1).expect("the model loads"));
        let stop = Arc::new(AtomicBool::new(false));
        let (indexing, stopping) = (Arc::clone(&embedder), Arc::clone(&stop));
        let indexer = std::thread::spawn(move || {
            let texts: Vec<String> = (0..TEXTS)
                .map(|i| format!("tool number {i}: reads, writes and lists the files"))
                .collect();
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            indexing.embed_in_background(&texts, false, &stopping)
        });
        wait_for_the_indexers_first_run(&embedder);
        stop.store(true, Ordering::SeqCst);
        let stopped_at = embedder.background_texts();
        let outcome = indexer.join().expect("indexer");
        assert!(
            matches!(outcome, Err(EmbedError::Stopped)),
            "{:?}",
            outcome.map(|v| v.len())
        );
        assert!(
            embedder.background_texts() <= stopped_at + EMBED_BATCH as u64,
            "{} texts embedded after the stop",
            embedder.background_texts() - stopped_at
        );
    }

    /// A bulk pass loads a helper session, spreads its runs over both and
    /// keeps the order; the helper goes when the pass ends.
    #[test]
    fn a_bulk_pass_runs_side_by_side_and_gives_its_helper_back() {
        let embedder = Embedder::load_with_sessions(2).expect("the model loads");
        let texts: Vec<String> = (0..40)
            .map(|i| {
                format!(
                    "tool {i}: {}",
                    "sends mail and lists folders ".repeat(i % 7 + 1)
                )
            })
            .collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let one_by_one = embedder
            .embed_in_background(&texts, false, &AtomicBool::new(false))
            .expect("embedded on one session");
        assert_eq!(embedder.sessions_alive(), 1);
        let side_by_side = embedder
            .embed_in_background(&texts, true, &AtomicBool::new(false))
            .expect("embedded on two sessions");
        assert_eq!(
            embedder.sessions_alive(),
            2,
            "the helper stays for the pass"
        );
        assert_eq!(side_by_side.len(), texts.len());
        for (i, (a, b)) in one_by_one.iter().zip(&side_by_side).enumerate() {
            let same = cosine(a, b);
            assert!(same > 0.999, "text {i} got another vector ({same})");
        }
        embedder.end_bulk();
        assert_eq!(embedder.sessions_alive(), 1, "the helper is dropped");
        assert_eq!(embedder.embed(&["find my mail"]).expect("a query").len(), 1);
    }
}
