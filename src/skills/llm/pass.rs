//! The worker's LLM pass: tools sent to the LLM classifier a few requests
//! at a time; a failed answer stands in with the local classifier's (or
//! UNCLASSIFIED) and is retried after a backoff; proposals of new skills
//! collected for the suggestion queue.

use chrono::Utc;
use futures_util::StreamExt as _;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

use crate::model::skill::SkillAssignment;
use crate::model::{Classification, ClassificationEvent, Skill, ToolRecord};
use crate::skills::Skills;
use crate::skills::error::SkillsError;
use crate::skills::writes::{BATCH, classification_after, succeeded, write_for};
use crate::store::ClassificationUpdate;

use super::client::{LlmClassification, LlmClassifier, LlmError};

/// LLM requests in flight at once (the specified limit for classifying a
/// server's tools in a batch).
const LLM_CONCURRENCY: usize = 5;

/// A skill the LLM proposed, and the tools it proposed it for.
pub(in crate::skills) type Proposal = (String, Vec<String>);

impl Skills {
    /// Classifies `pending` with the LLM, `LLM_CONCURRENCY` requests at a
    /// time. A tool the LLM fails on gets the local classifier's answer (or
    /// UNCLASSIFIED without one) and is retried after a backoff; once a
    /// whole batch failed to reach it, the rest of the pass does not try.
    /// Returns the tools written and the new skills the LLM proposed.
    pub(in crate::skills) fn classify_with_llm(
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
                .filter_map(|(t, answer)| match answer {
                    Ok(answer) => {
                        if answer.skills.is_empty()
                            && let Some(new_skill) = &answer.new_skill
                        {
                            proposals
                                .entry(new_skill.name.trim().to_owned())
                                .or_default()
                                .push(t.id.clone());
                        }
                        Some(write_for(
                            t,
                            succeeded(&t.classification, answer.skills, classifier, now)?,
                        ))
                    }
                    Err(err) => {
                        tracing::debug!(tool = %t.id, "LLM classification failed: {err}");
                        let mut done = match local.get(&t.id) {
                            Some(skills) => succeeded(
                                &t.classification,
                                skills.clone(),
                                &format!("fallback:{local_key}"),
                                now,
                            )?,
                            None => Classification {
                                by: None,
                                skills: t.classification.skills.clone(),
                                ..classification_after(
                                    &t.classification,
                                    ClassificationEvent::Failed,
                                )?
                            },
                        };
                        done.error = Some(err.to_string());
                        done.failures = t.classification.failures.saturating_add(1);
                        done.at = Some(now);
                        Some(write_for(t, done))
                    }
                })
                .collect();
            written.extend(self.finish(&results)?);
        }
        Ok((written, proposals.into_iter().collect()))
    }
}
