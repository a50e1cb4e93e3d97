//! Skills: the taxonomy (built-in plus users' edits, `taxonomy.rs`), the
//! classification of every tool into 1–3 skills in the background (the
//! local classifier of `classify.rs`; the state machine of
//! `model::skill`), skill vectors (the normalised mean of member tools'
//! vectors, BR-008) and the queue of suggestions for tools that fit no
//! skill. Reads tools and writes classifications through the store; reads
//! vectors from the search index and hands it each tool's skills and the
//! skill vectors. Never on the path of a call or a discovery.

pub mod classify;
pub mod llm;
pub mod taxonomy;

use chrono::Utc;
use futures_util::StreamExt as _;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::index::text::split_identifier;
use crate::index::vector::normalised_mean;
use crate::index::{IndexError, SearchIndex};
use crate::model::skill::{InvalidSkill, SkillAssignment, retry_after};
use crate::model::{
    Classification, ClassificationEvent, ClassificationState, ServerId, Skill, SkillSuggestion,
    ToolRecord,
};
use crate::store::{ClassificationUpdate, Store, StoreError};
use classify::{CALIBRATION, CLASSIFIER_VERSION, Prototypes};
use llm::{LlmClassification, LlmClassifier, LlmError, LlmSettings};

/// Tools classified per store commit (seed 001 EC-006 queues batches of
/// 10; a local batch costs microseconds, so the batch bounds the commit).
const BATCH: usize = 50;
/// About how many tools' vectors a classification pass reads at once.
const TOOLS_PER_READ: usize = 5_000;
/// LLM requests in flight at once (design §7, seed 001 BR-004).
const LLM_CONCURRENCY: usize = 5;

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

/// A skill the LLM proposed, and the tools it proposed it for.
type Proposal = (String, Vec<String>);

/// What one pass did.
#[derive(Debug, Clone, Default)]
pub struct PassOutcome {
    pub classified: usize,
    /// When the earliest failed classification is due again.
    pub retry_at: Option<chrono::DateTime<Utc>>,
}

#[derive(Debug, thiserror::Error)]
pub enum SkillsError {
    #[error(transparent)]
    Invalid(#[from] InvalidSkill),
    #[error("skill '{0}' not found")]
    NotFound(String),
    #[error("skill '{0}' already exists")]
    Exists(String),
    #[error("the skill id in the path ('{path}') and the body ('{body}') differ")]
    IdMismatch { path: String, body: String },
    #[error("suggestion {0} not found")]
    SuggestionNotFound(u64),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("the skills task failed: {0}")]
    Task(String),
}

/// A skill as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SkillView {
    #[serde(flatten)]
    pub skill: Skill,
    /// Tools classified into it.
    pub tool_count: usize,
    /// What its vector is: the mean of its tools' (`tools`) or its
    /// description's while it has none (`description`); `none` before the
    /// model has embedded anything.
    pub vector: &'static str,
}

/// How far classification has come.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct ClassificationProgress {
    pub discovered: usize,
    pub classifying: usize,
    pub classified: usize,
    pub unclassified: usize,
    /// Classified tools that fit no skill (they are in a suggestion).
    pub without_skill: usize,
    /// Tools the configured classifier failed on, to be tried again (the
    /// local classifier's answer stands meanwhile).
    pub awaiting_retry: usize,
    /// The classifier in use (`local:v1:<taxonomy>`).
    pub classifier: String,
    /// Why nothing can be classified now, if so (no model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// The catalog generation of the settled index whose vectors the skill
    /// vectors were computed from (none while it was syncing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_generation: Option<u64>,
    /// Tools classified by the last pass and how long it took.
    pub last_pass_tools: usize,
    pub last_pass_ms: f64,
}

/// Which tools `reclassify` takes up again.
#[derive(Debug, Clone, Default)]
pub struct ReclassifyScope {
    pub servers: Option<HashSet<ServerId>>,
    pub tool_ids: Option<HashSet<String>>,
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

    /// Every skill (built-in with edits, then users'), hidden ones too.
    pub fn all(&self) -> Result<Vec<Skill>, SkillsError> {
        Ok(taxonomy::merge(
            taxonomy::builtin(),
            self.inner.store.stored_skills()?,
        ))
    }

    /// The skills classification uses.
    fn visible(&self) -> Result<Vec<Skill>, SkillsError> {
        let mut all = self.all()?;
        all.retain(|s| !s.hidden);
        Ok(all)
    }

    fn view(&self, skill: Skill) -> SkillView {
        let tool_count = self
            .inner
            .members
            .read()
            .map(|m| m.values().filter(|s| s.contains(&skill.id)).count())
            .unwrap_or(0);
        let vector = match self
            .inner
            .vector_sources
            .read()
            .ok()
            .and_then(|v| v.get(&skill.id).copied())
        {
            Some(true) => "tools",
            Some(false) => "description",
            None => "none",
        };
        SkillView {
            skill,
            tool_count,
            vector,
        }
    }

    pub async fn list(&self, include_hidden: bool) -> Result<Vec<SkillView>, SkillsError> {
        let this = self.clone();
        self.blocking(move || {
            Ok(this
                .all()?
                .into_iter()
                .filter(|s| include_hidden || !s.hidden)
                .map(|s| this.view(s))
                .collect())
        })
        .await
    }

    pub async fn get(&self, id: &str) -> Result<SkillView, SkillsError> {
        let this = self.clone();
        let id = id.to_owned();
        self.blocking(move || {
            let skill = this
                .all()?
                .into_iter()
                .find(|s| s.id == id)
                .ok_or(SkillsError::NotFound(id))?;
            Ok(this.view(skill))
        })
        .await
    }

    /// Adds a user skill (409 if the id is taken, by a built-in one too).
    pub async fn create(&self, mut skill: Skill) -> Result<SkillView, SkillsError> {
        skill.validate()?;
        skill.builtin = false;
        let _turn = self.inner.edit_lock.lock().await;
        let this = self.clone();
        let view = self
            .blocking(move || {
                if this.all()?.iter().any(|s| s.id == skill.id) {
                    return Err(SkillsError::Exists(skill.id));
                }
                this.inner.store.put_skill(&skill)?;
                Ok(this.view(skill))
            })
            .await?;
        self.inner.wake.notify_one();
        Ok(view)
    }

    /// Replaces a skill's texts (and whether it is hidden). A built-in
    /// skill stays built-in.
    pub async fn update(&self, id: &str, mut skill: Skill) -> Result<SkillView, SkillsError> {
        if skill.id.is_empty() {
            skill.id = id.to_owned();
        }
        if skill.id != id {
            return Err(SkillsError::IdMismatch {
                path: id.to_owned(),
                body: skill.id,
            });
        }
        skill.validate()?;
        let _turn = self.inner.edit_lock.lock().await;
        let this = self.clone();
        let view = self
            .blocking(move || {
                let current = this
                    .all()?
                    .into_iter()
                    .find(|s| s.id == skill.id)
                    .ok_or_else(|| SkillsError::NotFound(skill.id.clone()))?;
                skill.builtin = current.builtin;
                this.inner.store.put_skill(&skill)?;
                Ok(this.view(skill))
            })
            .await?;
        self.inner.wake.notify_one();
        Ok(view)
    }

    /// Deletes a user skill; a built-in one is hidden instead (it can be
    /// shown again with `hidden: false`). Returns what remains, if anything.
    pub async fn delete(&self, id: &str) -> Result<Option<SkillView>, SkillsError> {
        let _turn = self.inner.edit_lock.lock().await;
        let this = self.clone();
        let id = id.to_owned();
        let remains = self
            .blocking(move || {
                let current = this
                    .all()?
                    .into_iter()
                    .find(|s| s.id == id)
                    .ok_or_else(|| SkillsError::NotFound(id.clone()))?;
                if current.builtin {
                    let hidden = Skill {
                        hidden: true,
                        ..current
                    };
                    this.inner.store.put_skill(&hidden)?;
                    Ok(Some(this.view(hidden)))
                } else {
                    this.inner.store.delete_skill(&id)?;
                    Ok(None)
                }
            })
            .await?;
        self.inner.wake.notify_one();
        Ok(remains)
    }

    /// The tools classified into a skill.
    pub async fn tools_of(&self, id: &str) -> Result<Vec<ToolRecord>, SkillsError> {
        self.get(id).await?;
        let store = Arc::clone(&self.inner.store);
        let id = id.to_owned();
        self.blocking(move || {
            Ok(store
                .all_tools()?
                .into_iter()
                .filter(|t| t.skill_ids.contains(&id))
                .collect())
        })
        .await
    }

    /// Takes tools up again (all, a server's, or named ones): returns how
    /// many were queued.
    pub async fn reclassify(&self, scope: ReclassifyScope) -> Result<usize, SkillsError> {
        let store = Arc::clone(&self.inner.store);
        let queued = self
            .blocking(move || {
                let updates: Vec<ClassificationUpdate> = store
                    .all_tools_without_texts()?
                    .into_iter()
                    .filter(|t| {
                        scope
                            .servers
                            .as_ref()
                            .is_none_or(|s| s.contains(&t.server_id))
                            && scope
                                .tool_ids
                                .as_ref()
                                .is_none_or(|ids| ids.contains(&t.id))
                    })
                    .map(|t| ClassificationUpdate {
                        server_id: t.server_id,
                        original_name: t.original_name.clone(),
                        definition_hash: t.definition_hash.clone(),
                        classification: Classification {
                            by: None,
                            failures: 0,
                            ..t.classification.clone()
                        },
                    })
                    .collect();
                Ok(store.set_classifications(&updates)?.len())
            })
            .await?;
        self.inner.wake.notify_one();
        Ok(queued)
    }

    pub async fn suggestions(&self) -> Result<Vec<SkillSuggestion>, SkillsError> {
        let store = Arc::clone(&self.inner.store);
        self.blocking(move || Ok(store.skill_suggestions()?)).await
    }

    pub async fn dismiss_suggestion(&self, id: u64) -> Result<(), SkillsError> {
        let store = Arc::clone(&self.inner.store);
        self.blocking(move || {
            if store.delete_skill_suggestion(id)? {
                Ok(())
            } else {
                Err(SkillsError::SuggestionNotFound(id))
            }
        })
        .await
    }

    /// Which ids among `ids` are not skills (for a search's `skill_filter`).
    pub async fn unknown(&self, ids: &[String]) -> Result<Vec<String>, SkillsError> {
        let this = self.clone();
        let ids = ids.to_vec();
        self.blocking(move || {
            let known: HashSet<String> = this.all()?.into_iter().map(|s| s.id).collect();
            Ok(ids.into_iter().filter(|id| !known.contains(id)).collect())
        })
        .await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, SkillsError> + Send + 'static,
    ) -> Result<T, SkillsError> {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|err| SkillsError::Task(err.to_string()))?
    }

    /// Classifies in the background until `shutdown`: after each index sync
    /// (new tools have vectors), each taxonomy edit and each reclassify, and
    /// when a failed classification is due again.
    pub fn spawn_worker(&self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let skills = self.clone();
        let _ = self.inner.runtime.set(tokio::runtime::Handle::current());
        let mut index_progress = self.inner.index.progress();
        tokio::spawn(async move {
            // The index's first sync reads the whole catalog, as a pass
            // does: at 100,000 tools both at once are most of the daemon's
            // peak memory, and the pass needs the sync's vectors anyway.
            tokio::select! {
                synced = index_progress.wait_for(|p| p.synced) => if synced.is_err() {
                    return;
                },
                () = shutdown.cancelled() => return,
            }
            loop {
                let pass = skills.clone();
                let result = tokio::select! {
                    result = crate::index::in_background("skills", move || pass.classify_pending()) => result,
                    () = shutdown.cancelled() => return,
                };
                let mut retry_at = None;
                match result {
                    Ok(Ok(outcome)) => {
                        if outcome.classified > 0 {
                            tracing::info!(classified = outcome.classified, "tools classified");
                        }
                        retry_at = outcome.retry_at;
                    }
                    Ok(Err(err)) => tracing::warn!("classification pass failed: {err}"),
                    Err(err) => tracing::error!("classification task failed: {err}"),
                }
                // Every pass reads the whole catalog (hundreds of MB at
                // 100,000 tools), classifying or not: hand the pages back.
                crate::memory::release_freed();
                let retry = async {
                    match retry_at {
                        Some(at) => {
                            let wait = (at - Utc::now()).to_std().unwrap_or_default();
                            tokio::time::sleep(wait).await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::pin!(retry);
                // The next pass: when an index sync ends, on demand, or
                // when a retry is due.
                loop {
                    tokio::select! {
                        changed = index_progress.changed() => {
                            if changed.is_err() {
                                return;
                            }
                            if !index_progress.borrow_and_update().syncing {
                                break;
                            }
                        }
                        () = skills.inner.wake.notified() => break,
                        () = &mut retry => break,
                        () = shutdown.cancelled() => return,
                    }
                }
            }
        })
    }

    /// Stops a running pass at its next batch.
    pub fn stop(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// The embedded prototypes of the visible skills (cached per taxonomy).
    fn prototypes(&self, skills: &[Skill], key: &str) -> Result<Arc<Prototypes>, SkillsError> {
        if let Ok(cached) = self.inner.prototypes.lock()
            && let Some((for_key, prototypes)) = cached.as_ref()
            && for_key == key
        {
            return Ok(Arc::clone(prototypes));
        }
        let texts: Vec<String> = skills.iter().flat_map(Skill::prototype_texts).collect();
        let vectors = self.inner.index.embed_texts(&texts)?;
        let prototypes = Arc::new(Prototypes::new(skills, vectors));
        if let Ok(mut cached) = self.inner.prototypes.lock() {
            *cached = Some((key.to_owned(), Arc::clone(&prototypes)));
        }
        Ok(prototypes)
    }

    /// One pass (blocking): classifies every tool not classified by the
    /// current classifier and taxonomy (and whose retry is due), then
    /// refreshes skill vectors and suggestions.
    pub fn classify_pending(&self) -> Result<PassOutcome, SkillsError> {
        let started = Instant::now();
        let inner = &self.inner;
        let skills = self.visible()?;
        let fingerprint = taxonomy::fingerprint(&skills);
        let local_key = format!("local:v{CLASSIFIER_VERSION}:{fingerprint}");
        let classifier = match &inner.llm {
            Some(llm) => format!("{}:{fingerprint}", llm.id()),
            None => local_key.clone(),
        };
        let now = Utc::now();
        // Names, hashes and classifications are what a pass reads; the LLM
        // alone needs definitions (read below, for its tools only).
        // A refused tool is offered to nobody: nothing to classify.
        let tools: Vec<ToolRecord> = inner
            .store
            .all_tools_without_texts()?
            .into_iter()
            .filter(|t| t.refused.is_none())
            .collect();
        let pending: Vec<&ToolRecord> = tools
            .iter()
            .filter(|t| {
                t.classification.by.as_deref() != Some(classifier.as_str())
                    && retry_due(&t.classification, now, inner.retry)
            })
            .collect();
        let mut waiting_for = None;
        let prototypes = if pending.is_empty() {
            None
        } else {
            match self.prototypes(&skills, &local_key) {
                Ok(prototypes) => Some(prototypes),
                Err(SkillsError::Index(IndexError::ModelUnavailable(reason))) => {
                    waiting_for = Some(format!("the search model ({reason})"));
                    None
                }
                Err(err) => return Err(err),
            }
        };
        let mut named = Vec::new();
        let written = match (&inner.llm, &prototypes) {
            _ if pending.is_empty() => Vec::new(),
            (Some(llm), _) => {
                waiting_for = None;
                // The local classifier's answers, to stand in for failures.
                let local = match &prototypes {
                    Some(prototypes) => self.local_skills(&pending, &tools, prototypes)?,
                    None => HashMap::new(),
                };
                let whole: Vec<ToolRecord> = inner
                    .store
                    .tools_named(
                        pending
                            .iter()
                            .map(|t| (t.server_id, t.original_name.as_str())),
                    )?
                    .into_iter()
                    .flatten()
                    .collect();
                let whole: Vec<&ToolRecord> = whole.iter().collect();
                let (written, proposals) =
                    self.classify_with_llm(llm, &whole, &skills, local, &classifier, &local_key)?;
                named = proposals;
                written
            }
            (None, Some(prototypes)) => {
                self.classify_locally(&pending, &tools, prototypes, &classifier)?
            }
            (None, None) => Vec::new(),
        };
        // What every tool has now, written or not.
        let by_id: HashMap<&str, &ToolRecord> =
            written.iter().map(|t| (t.id.as_str(), t)).collect();
        let current: Vec<&ToolRecord> = tools
            .iter()
            .map(|t| by_id.get(t.id.as_str()).copied().unwrap_or(t))
            .collect();
        self.refresh_members(&current, &skills)?;
        let proposed: HashSet<&str> = named
            .iter()
            .flat_map(|(_, ids): &Proposal| ids.iter().map(String::as_str))
            .collect();
        for (name, ids) in &named {
            let reason = format!(
                "the LLM classifier found no skill for {} tool(s) and proposed this one",
                ids.len()
            );
            inner.store.add_skill_suggestion(name, &reason, ids)?;
        }
        let unfit: Vec<&ToolRecord> = written
            .iter()
            .filter(|t| {
                t.classification.state == ClassificationState::Classified
                    && t.skill_ids.is_empty()
                    && !proposed.contains(t.id.as_str())
            })
            .collect();
        self.suggest(&unfit)?;
        let retry_at = current
            .iter()
            .filter(|t| {
                t.classification.failures > 0
                    && t.classification.by.as_deref() != Some(classifier.as_str())
            })
            .filter_map(|t| {
                let at = t.classification.at?;
                let wait =
                    chrono::Duration::from_std(retry_after(inner.retry, t.classification.failures))
                        .ok()?;
                Some(at + wait)
            })
            .min();
        let count = |state| {
            current
                .iter()
                .filter(|t| t.classification.state == state)
                .count()
        };
        let index = inner.index.progress().borrow().clone();
        inner.progress.send_replace(ClassificationProgress {
            index_generation: (!index.syncing).then_some(index.generation),
            discovered: count(ClassificationState::Discovered),
            classifying: count(ClassificationState::Classifying),
            classified: count(ClassificationState::Classified),
            unclassified: count(ClassificationState::Unclassified),
            without_skill: current
                .iter()
                .filter(|t| {
                    t.classification.state == ClassificationState::Classified
                        && t.skill_ids.is_empty()
                })
                .count(),
            awaiting_retry: current
                .iter()
                .filter(|t| {
                    t.classification.failures > 0
                        && t.classification.by.as_deref() != Some(classifier.as_str())
                })
                .count(),
            classifier,
            waiting_for,
            last_pass_tools: written.len(),
            last_pass_ms: started.elapsed().as_secs_f64() * 1000.0,
        });
        Ok(PassOutcome {
            classified: written.len(),
            retry_at,
        })
    }

    /// The local classifier's skills for the tools the index has vectors
    /// for, each seen with its server's mean vector.
    fn local_skills(
        &self,
        tools: &[&ToolRecord],
        all: &[ToolRecord],
        prototypes: &Prototypes,
    ) -> Result<HashMap<String, Vec<SkillAssignment>>, SkillsError> {
        let concerned: HashSet<&str> = tools.iter().map(|t| t.server_name.as_str()).collect();
        let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
        for tool in all
            .iter()
            .filter(|t| concerned.contains(t.server_name.as_str()))
        {
            *sizes.entry(tool.server_name.as_str()).or_default() += 1;
        }
        // Whole servers, about TOOLS_PER_READ tools' vectors at a time: at
        // 100,000 tools all of them at once (as f32, with their means)
        // were over 400 MB.
        let mut groups: Vec<HashSet<&str>> = vec![HashSet::new()];
        let mut filled = 0;
        for (server, size) in sizes {
            if filled > 0 && filled + size > TOOLS_PER_READ {
                groups.push(HashSet::new());
                filled = 0;
            }
            filled += size;
            if let Some(group) = groups.last_mut() {
                group.insert(server);
            }
        }
        let mut answers = HashMap::new();
        for group in groups {
            // Every tool of the servers concerned: their mean is the
            // server's context.
            let vectors = self.inner.index.tool_vectors(|id| {
                id.split_once('.')
                    .is_some_and(|(server, _)| group.contains(server))
            })?;
            // A server is classified once every one of its tools has all
            // its vectors: its context (and so each answer) is then the
            // same however the indexing went (a restart mid-way, a cold
            // build).
            let mut complete: HashMap<&str, bool> = HashMap::new();
            for tool in all
                .iter()
                .filter(|t| group.contains(t.server_name.as_str()))
            {
                let done = vectors.get(tool.id.as_str()).is_some_and(|v| v.len() >= 2);
                let entry = complete.entry(tool.server_name.as_str()).or_insert(true);
                *entry &= done;
            }
            let mut by_server: HashMap<&str, Vec<Vec<f32>>> = HashMap::new();
            for (id, v) in &vectors {
                if let (Some((server, _)), Some(mean)) = (
                    id.split_once('.'),
                    normalised_mean(v.iter().map(Vec::as_slice)),
                ) {
                    by_server.entry(server).or_default().push(mean);
                }
            }
            let server_context: HashMap<&str, Vec<f32>> = by_server
                .into_iter()
                .filter(|(server, _)| complete.get(server).copied().unwrap_or(false))
                .filter_map(|(server, means)| {
                    let mean = normalised_mean(means.iter().map(Vec::as_slice))?;
                    Some((server, prototypes.similarities(&[mean])))
                })
                .collect();
            answers.extend(
                tools
                    .iter()
                    .filter(|t| group.contains(t.server_name.as_str()))
                    .filter_map(|t| {
                        let own = vectors.get(t.id.as_str())?;
                        let server = server_context.get(t.server_name.as_str())?;
                        Some((
                            t.id.clone(),
                            classify::classify(prototypes, own, server, &CALIBRATION),
                        ))
                    }),
            );
        }
        Ok(answers)
    }

    /// Stores CLASSIFYING for a batch; returns the tools as stored.
    fn start(&self, batch: &[&ToolRecord]) -> Result<Vec<ToolRecord>, SkillsError> {
        let start: Vec<ClassificationUpdate> = batch
            .iter()
            .map(|t| update(t, step(&t.classification, ClassificationEvent::Start)))
            .collect();
        Ok(self.inner.store.set_classifications(&start)?)
    }

    /// Stores a batch's results and shows them in search.
    fn finish(&self, results: &[ClassificationUpdate]) -> Result<Vec<ToolRecord>, SkillsError> {
        let written = self.inner.store.set_classifications(results)?;
        self.inner.index.apply_skills(&written)?;
        Ok(written)
    }

    /// Classifies `pending` with the local classifier, batch by batch
    /// through the state machine: CLASSIFYING is stored, then the result.
    /// Tools the index has not embedded yet wait for the next pass.
    fn classify_locally(
        &self,
        pending: &[&ToolRecord],
        all: &[ToolRecord],
        prototypes: &Prototypes,
        classifier: &str,
    ) -> Result<Vec<ToolRecord>, SkillsError> {
        let local = self.local_skills(pending, all, prototypes)?;
        let ready: Vec<&ToolRecord> = pending
            .iter()
            .copied()
            .filter(|t| local.contains_key(&t.id))
            .collect();
        let mut written = Vec::new();
        for batch in ready.chunks(BATCH) {
            if self.inner.stopping.load(Ordering::SeqCst) {
                break;
            }
            let now = Utc::now();
            let results: Vec<ClassificationUpdate> = self
                .start(batch)?
                .iter()
                .map(|t| {
                    let skills = local.get(&t.id).cloned().unwrap_or_default();
                    update(t, succeeded(&t.classification, skills, classifier, now))
                })
                .collect();
            written.extend(self.finish(&results)?);
        }
        Ok(written)
    }

    /// Classifies `pending` with the LLM, `LLM_CONCURRENCY` requests at a
    /// time. A tool the LLM fails on gets the local classifier's answer (or
    /// UNCLASSIFIED without one) and is retried after a backoff; once a
    /// whole batch failed to reach it, the rest of the pass does not try.
    /// Returns the tools written and the new skills the LLM proposed.
    fn classify_with_llm(
        &self,
        llm: &LlmClassifier,
        pending: &[&ToolRecord],
        skills: &[Skill],
        local: HashMap<String, Vec<SkillAssignment>>,
        classifier: &str,
        local_key: &str,
    ) -> Result<(Vec<ToolRecord>, Vec<Proposal>), SkillsError> {
        let runtime = self.inner.runtime.get().ok_or_else(|| {
            SkillsError::Task("the LLM classifier needs the worker's runtime".into())
        })?;
        let mut reachable = true;
        let mut written = Vec::new();
        let mut proposals: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for batch in pending.chunks(BATCH) {
            if self.inner.stopping.load(Ordering::SeqCst) {
                break;
            }
            let started = self.start(batch)?;
            let answers: Vec<Result<LlmClassification, LlmError>> = if reachable {
                runtime.block_on(
                    futures_util::stream::iter(started.iter().map(|t| llm.classify(skills, t)))
                        .buffered(LLM_CONCURRENCY)
                        .collect(),
                )
            } else {
                started
                    .iter()
                    .map(|_| {
                        Err(LlmError::Unreachable {
                            url: llm.endpoint().to_owned(),
                            reason: "not tried again in this pass".into(),
                        })
                    })
                    .collect()
            };
            if reachable
                && !answers.is_empty()
                && answers.iter().all(|a| {
                    matches!(
                        a,
                        Err(LlmError::Timeout { .. } | LlmError::Unreachable { .. })
                    )
                })
            {
                if let Some(Err(err)) = answers.first() {
                    tracing::warn!("{err}; the local classifier answers until it is back");
                }
                reachable = false;
            }
            let now = Utc::now();
            let results: Vec<ClassificationUpdate> = started
                .iter()
                .zip(answers)
                .map(|(t, answer)| match answer {
                    Ok(answer) => {
                        if answer.skills.is_empty()
                            && let Some(new_skill) = &answer.new_skill
                        {
                            proposals
                                .entry(new_skill.name.trim().to_owned())
                                .or_default()
                                .push(t.id.clone());
                        }
                        update(
                            t,
                            succeeded(&t.classification, answer.skills, classifier, now),
                        )
                    }
                    Err(err) => {
                        tracing::debug!(tool = %t.id, "LLM classification failed: {err}");
                        let mut done = match local.get(&t.id) {
                            Some(skills) => succeeded(
                                &t.classification,
                                skills.clone(),
                                &format!("fallback:{local_key}"),
                                now,
                            ),
                            None => Classification {
                                by: None,
                                skills: t.classification.skills.clone(),
                                ..step(&t.classification, ClassificationEvent::Failed)
                            },
                        };
                        done.error = Some(err.to_string());
                        done.failures = t.classification.failures.saturating_add(1);
                        done.at = Some(now);
                        update(t, done)
                    }
                })
                .collect();
            written.extend(self.finish(&results)?);
        }
        Ok((written, proposals.into_iter().collect()))
    }

    /// Recomputes tool counts and, when membership changed, the skill
    /// vectors (BR-008): each skill's members' mean vector, normalised; its
    /// description's while it has no member.
    fn refresh_members(&self, tools: &[&ToolRecord], skills: &[Skill]) -> Result<(), SkillsError> {
        let inner = &self.inner;
        let members: BTreeMap<String, Vec<String>> = tools
            .iter()
            .filter(|t| !t.skill_ids.is_empty())
            .map(|t| (t.id.clone(), t.skill_ids.clone()))
            .collect();
        // Membership, the skills, and the index state the vectors come
        // from (tools gain vectors after they gain skills, on a restart).
        let index = inner.index.progress().borrow().clone();
        let fingerprint = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            members.hash(&mut hasher);
            for skill in skills {
                skill.id.hash(&mut hasher);
            }
            (
                index.generation,
                index.indexed_tools,
                index.refining_tools,
                index.syncing,
            )
                .hash(&mut hasher);
            hasher.finish()
        };
        if let Ok(mut m) = inner.members.write() {
            *m = members.clone();
        }
        let unchanged = inner
            .vectors_for
            .lock()
            .map(|f| *f == Some(fingerprint))
            .unwrap_or(false);
        if unchanged {
            return Ok(());
        }
        let position: HashMap<&str, usize> = skills
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.as_str(), i))
            .collect();
        let groups: HashMap<Arc<str>, Vec<usize>> = members
            .iter()
            .map(|(tool, skill_ids)| {
                (
                    Arc::from(tool.as_str()),
                    skill_ids
                        .iter()
                        .filter_map(|s| position.get(s.as_str()).copied())
                        .collect(),
                )
            })
            .collect();
        let sums = inner.index.group_means(&groups, skills.len())?;
        let descriptions = match inner.prototypes.lock().ok().and_then(|p| p.clone()) {
            Some((_, prototypes)) => prototypes,
            None => Arc::new(Prototypes::default()),
        };
        let mut vectors = Vec::new();
        let mut sources = HashMap::new();
        for (skill, mean) in skills.iter().zip(sums) {
            match mean {
                Some(mean) => {
                    sources.insert(skill.id.clone(), true);
                    vectors.push((skill.id.clone(), mean));
                }
                None => {
                    if let Some(description) = descriptions.description_of(&skill.id) {
                        sources.insert(skill.id.clone(), false);
                        vectors.push((skill.id.clone(), description.to_vec()));
                    }
                }
            }
        }
        inner.index.set_skill_vectors(vectors)?;
        if let Ok(mut s) = inner.vector_sources.write() {
            *s = sources;
        }
        if let Ok(mut f) = inner.vectors_for.lock() {
            *f = Some(fingerprint);
        }
        Ok(())
    }

    /// Queues a suggestion per server for its tools that fit no skill
    /// (AG-US3 AC8), named after the words their names share.
    fn suggest(&self, unfit: &[&ToolRecord]) -> Result<(), SkillsError> {
        let mut by_server: BTreeMap<&str, Vec<&ToolRecord>> = BTreeMap::new();
        for tool in unfit {
            by_server
                .entry(tool.server_name.as_str())
                .or_default()
                .push(tool);
        }
        for (server, tools) in by_server {
            let name = common_words(tools.iter().map(|t| t.original_name.as_str()));
            let ids: Vec<String> = tools.iter().map(|t| t.id.clone()).collect();
            let reason = format!(
                "{} tool(s) of {server} fit no skill with confidence ≥ 0.5",
                ids.len()
            );
            self.inner
                .store
                .add_skill_suggestion(&name, &reason, &ids)?;
        }
        Ok(())
    }
}

/// A classification that succeeded with `skills`.
fn succeeded(
    current: &Classification,
    skills: Vec<SkillAssignment>,
    by: &str,
    now: chrono::DateTime<Utc>,
) -> Classification {
    Classification {
        skills,
        by: Some(by.to_owned()),
        error: None,
        failures: 0,
        at: Some(now),
        ..step(current, ClassificationEvent::Succeeded)
    }
}

/// Whether a tool's classification may be tried now: never failed, or its
/// backoff has passed.
fn retry_due(c: &Classification, now: chrono::DateTime<Utc>, base: Duration) -> bool {
    if c.failures == 0 {
        return true;
    }
    let Some(at) = c.at else { return true };
    chrono::Duration::from_std(retry_after(base, c.failures)).is_ok_and(|wait| at + wait <= now)
}

/// The classification after `event`, keeping everything else.
fn step(current: &Classification, event: ClassificationEvent) -> Classification {
    Classification {
        state: current.state.transition(event).unwrap_or_else(|err| {
            tracing::debug!("{err}; starting over");
            ClassificationState::Classifying
        }),
        ..current.clone()
    }
}

fn update(tool: &ToolRecord, classification: Classification) -> ClassificationUpdate {
    ClassificationUpdate {
        server_id: tool.server_id,
        original_name: tool.original_name.clone(),
        definition_hash: tool.definition_hash.clone(),
        classification,
    }
}

/// A name for a group of tools: the (up to three) words most of their
/// names share.
fn common_words<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for name in names {
        let words: HashSet<String> = split_identifier(name)
            .split_whitespace()
            .filter(|w| w.len() > 2)
            .map(str::to_owned)
            .collect();
        for word in words {
            *counts.entry(word).or_default() += 1;
        }
    }
    let mut ranked: Vec<(String, usize)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let words: Vec<String> = ranked.into_iter().take(3).map(|(w, _)| w).collect();
    if words.is_empty() {
        "unnamed".to_owned()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_named_after_the_words_its_tools_share() {
        let names = [
            "toggle-simulated-logging",
            "toggle-subscriber-updates",
            "echo",
        ];
        assert_eq!(common_words(names.into_iter()), "toggle echo logging");
        assert_eq!(common_words(["a", "b"].into_iter()), "unnamed");
    }
}
