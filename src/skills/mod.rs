//! Skills: the taxonomy (built-in plus users' edits, `taxonomy.rs`), the
//! classification of every tool into 1–3 skills in the background (the
//! local classifier of `classify.rs`; the state machine of
//! `model::skill`), skill vectors (the normalised mean of member tools'
//! vectors, recomputed when membership changes) and the queue of
//! suggestions for tools that fit no
//! skill. Reads tools and writes classifications through the store; reads
//! vectors from the search index and hands it each tool's skills and the
//! skill vectors. Never on the path of a call or a discovery.
//!
//! This file holds the service's shared state; each concern is a file of
//! its own (`service.rs` the edits and reads of skills, `worker.rs` the
//! background passes, `writes.rs` a pass's writes through the state
//! machine, `llm/` the optional LLM classifier and its pass, `vectors.rs`
//! the skill vectors, `suggestions.rs` the suggestion queue), each adding
//! methods to `Skills`.

// The local classifier and the taxonomy are part of the interface: the
// skill_eval example fits and checks the classifier's calibration on them.
pub mod classify;
mod error;
mod llm;
mod service;
mod suggestions;
pub mod taxonomy;
mod vectors;
mod worker;
mod writes;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, watch};

use crate::index::SearchIndex;
use crate::store::Store;
use classify::Prototypes;
use llm::LlmClassifier;

pub use error::SkillsError;
pub use llm::LlmSettings;
pub use service::{ReclassifyScope, SkillView};
pub use suggestions::SkillChanges;
pub use worker::{ClassificationProgress, PassOutcome};

/// How classification is done.
#[derive(Debug, Clone)]
pub struct SkillsSettings {
    /// An OpenAI-compatible endpoint to classify with instead of the local
    /// classifier (which still answers when it fails).
    pub llm: Option<LlmSettings>,
    /// The first wait before a failed classification is tried again
    /// (doubling per failure, at most an hour).
    pub retry: Duration,
}

impl Default for SkillsSettings {
    fn default() -> Self {
        SkillsSettings {
            llm: None,
            retry: Duration::from_secs(30),
        }
    }
}

struct Inner {
    store: Arc<Store>,
    index: SearchIndex,
    llm: Option<LlmClassifier>,
    retry: Duration,
    /// The runtime LLM requests run on (set when the worker starts).
    runtime: OnceLock<tokio::runtime::Handle>,
    /// Serialises taxonomy edits, so two writers never interleave.
    edit_lock: tokio::sync::Mutex<()>,
    /// The embedded prototypes of the taxonomy they were made for.
    prototypes: Mutex<Option<(String, Arc<Prototypes>)>>,
    /// Which skills each classified tool has (for tool counts and skill
    /// vectors), as of the last pass.
    members: RwLock<BTreeMap<String, Vec<String>>>,
    /// Skill id → whether its vector comes from tools.
    vector_sources: RwLock<HashMap<String, bool>>,
    /// Fingerprint of the membership the skill vectors were computed for.
    vectors_for: Mutex<Option<u64>>,
    wake: Notify,
    progress: watch::Sender<ClassificationProgress>,
    stopping: AtomicBool,
}

/// The skills service. Cheap to clone.
#[derive(Clone)]
pub struct Skills {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Skills {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Skills").finish_non_exhaustive()
    }
}

impl Skills {
    pub fn new(store: Arc<Store>, index: SearchIndex, settings: SkillsSettings) -> Skills {
        let (progress, _) = watch::channel(ClassificationProgress::default());
        Skills {
            inner: Arc::new(Inner {
                store,
                index,
                llm: settings.llm.map(LlmClassifier::new),
                retry: settings.retry,
                runtime: OnceLock::new(),
                edit_lock: tokio::sync::Mutex::new(()),
                prototypes: Mutex::new(None),
                members: RwLock::new(BTreeMap::new()),
                vector_sources: RwLock::new(HashMap::new()),
                vectors_for: Mutex::new(None),
                wake: Notify::new(),
                progress,
                stopping: AtomicBool::new(false),
            }),
        }
    }

    pub fn progress(&self) -> watch::Receiver<ClassificationProgress> {
        self.inner.progress.subscribe()
    }
}
