//! A pass's writes, batch by batch, through the classification state
//! machine (`ClassificationState::transition` decides every change):
//! CLASSIFYING stored for a batch, then its results, shown in search.
//! Shared by the local and the LLM pass.

use chrono::Utc;

use crate::model::skill::SkillAssignment;
use crate::model::{Classification, ClassificationEvent, ClassificationState, ToolRecord};
use crate::store::skills::ClassificationUpdate;

use super::Skills;
use super::error::SkillsError;

/// Tools classified per store commit (seed 001 EC-006 queues batches of
/// 10; a local batch costs microseconds, so the batch bounds the commit).
pub(super) const BATCH: usize = 50;

impl Skills {
    /// Stores CLASSIFYING for a batch; returns the tools as stored.
    pub(super) fn start(&self, batch: &[&ToolRecord]) -> Result<Vec<ToolRecord>, SkillsError> {
        let start: Vec<ClassificationUpdate> = batch
            .iter()
            .map(|t| {
                write_for(
                    t,
                    classification_after(&t.classification, ClassificationEvent::Start),
                )
            })
            .collect();
        Ok(self.inner.store.set_classifications(&start)?)
    }

    /// Stores a batch's results and shows them in search.
    pub(super) fn finish(
        &self,
        results: &[ClassificationUpdate],
    ) -> Result<Vec<ToolRecord>, SkillsError> {
        let written = self.inner.store.set_classifications(results)?;
        self.inner.index.apply_skills(&written)?;
        Ok(written)
    }
}

/// A classification that succeeded with `skills`.
pub(super) fn succeeded(
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
        ..classification_after(current, ClassificationEvent::Succeeded)
    }
}

/// The classification after `event`, keeping everything else.
pub(super) fn classification_after(
    current: &Classification,
    event: ClassificationEvent,
) -> Classification {
    Classification {
        state: current.state.transition(event).unwrap_or_else(|err| {
            tracing::debug!("{err}; starting over");
            ClassificationState::Classifying
        }),
        ..current.clone()
    }
}

/// The write of `classification` for the definition of `tool` that was
/// classified.
pub(super) fn write_for(tool: &ToolRecord, classification: Classification) -> ClassificationUpdate {
    ClassificationUpdate {
        server_id: tool.server_id,
        original_name: tool.original_name.clone(),
        definition_hash: tool.definition_hash.clone(),
        classification,
    }
}
