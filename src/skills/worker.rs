//! The background classification worker: when a pass runs (after an
//! index sync, an edit, a reclassify, a retry falling due) and what one
//! pass does — read the tools not classified by the current classifier and
//! taxonomy, classify them (locally here, or through the LLM pass), then
//! refresh the skill vectors and the suggestions and publish the progress.

use chrono::Utc;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::index::IndexError;
use crate::index::similarity::normalised_mean;
use crate::model::Backoff;
use crate::model::skill::SkillAssignment;
use crate::model::{Classification, ClassificationState, Skill, ToolRecord};
use crate::store::ClassificationUpdate;

use super::classify::{self, CALIBRATION, CLASSIFIER_VERSION, Prototypes};
use super::error::SkillsError;
use super::writes::{BATCH, succeeded, write_for};
use super::{Skills, taxonomy};

/// About how many tools' vectors a classification pass reads at once.
const TOOLS_PER_READ: usize = 5_000;

/// What one pass did.
#[derive(Debug, Clone, Default)]
pub struct PassOutcome {
    pub classified: usize,
    /// When the earliest failed classification is due again.
    pub retry_at: Option<chrono::DateTime<Utc>>,
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

impl Skills {
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
                let mut running =
                    crate::index::in_background("skills", move || pass.classify_pending());
                let result = tokio::select! {
                    result = &mut running => result,
                    () = shutdown.cancelled() => {
                        skills.stop();
                        crate::index::let_go(running).await;
                        return;
                    }
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

    /// Runs a pass soon: another replica changed the taxonomy, whose
    /// tools this replica classifies too.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
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

    /// `prototypes` from the embedding cache alone, kept when every text
    /// is there; nothing otherwise.
    fn cached_prototypes(&self, skills: &[Skill], key: &str) -> Result<(), SkillsError> {
        let held = self
            .inner
            .prototypes
            .lock()
            .is_ok_and(|cached| cached.as_ref().is_some_and(|(for_key, _)| for_key == key));
        if held {
            return Ok(());
        }
        let texts: Vec<String> = skills.iter().flat_map(Skill::prototype_texts).collect();
        if let Some(vectors) = self.inner.index.cached_texts(&texts)?
            && let Ok(mut cached) = self.inner.prototypes.lock()
        {
            *cached = Some((key.to_owned(), Arc::new(Prototypes::new(skills, vectors))));
        }
        Ok(())
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
                    && retry_due(&t.id, &t.classification, now, inner.retry)
            })
            .collect();
        let mut waiting_for = None;
        let prototypes = if pending.is_empty() {
            // Nothing to classify, yet a skill without members is ranked by
            // its description's vector, which a restart would otherwise
            // lack: taken from the embedding cache if it is all there (the
            // model loads on first need, never for this).
            self.cached_prototypes(&skills, &local_key)?;
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
            .flat_map(|(_, ids): &super::llm::Proposal| ids.iter().map(String::as_str))
            .collect();
        self.queue_proposals(&named)?;
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
                let wait = chrono::Duration::from_std(retry_wait(
                    inner.retry,
                    &t.id,
                    t.classification.failures,
                ))
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
                .filter_map(|t| {
                    let skills = local.get(&t.id).cloned().unwrap_or_default();
                    Some(write_for(
                        t,
                        succeeded(&t.classification, skills, classifier, now)?,
                    ))
                })
                .collect();
            written.extend(self.finish(&results)?);
        }
        Ok(written)
    }
}

/// Whether a tool's classification may be tried now: never failed, or its
/// backoff has passed.
fn retry_due(tool: &str, c: &Classification, now: chrono::DateTime<Utc>, base: Duration) -> bool {
    if c.failures == 0 {
        return true;
    }
    let Some(at) = c.at else { return true };
    chrono::Duration::from_std(retry_wait(base, tool, c.failures))
        .is_ok_and(|wait| at + wait <= now)
}

/// How long after its `failures`-th failure in a row a tool's
/// classification is tried again: the process's retry schedule from `base`,
/// at most an hour, jittered by the tool (tools of one LLM outage do not
/// all come back at once) and stable for it (its due time does not move
/// from one pass to the next: std's default hasher has fixed keys).
fn retry_wait(base: Duration, tool: &str, failures: u32) -> Duration {
    use std::hash::{Hash as _, Hasher as _};
    let mut seed = std::hash::DefaultHasher::new();
    tool.hash(&mut seed);
    Backoff {
        first: base,
        ceiling: Duration::from_secs(3600),
    }
    .delay(failures, seed.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_retry_waits_are_stable_capped_and_spread_across_tools() {
        let base = Duration::from_secs(30);
        assert_eq!(
            retry_wait(base, "a__tool", 3),
            retry_wait(base, "a__tool", 3)
        );
        assert!(retry_wait(base, "a__tool", 1) <= base);
        assert!(retry_wait(base, "a__tool", 1) >= base.mul_f64(0.8));
        assert!(retry_wait(base, "a__tool", 40) <= Duration::from_secs(3600));
        let spread: std::collections::HashSet<Duration> = (0..50)
            .map(|n| retry_wait(base, &format!("s__tool{n}"), 2))
            .collect();
        assert!(spread.len() > 40, "{} distinct waits", spread.len());
    }
}
