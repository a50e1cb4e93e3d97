//! A pass's writes, batch by batch, through the classification state
//! machine (`ClassificationState::transition` decides every change):
//! CLASSIFYING stored for a batch, then its results, shown in search.
//! Shared by the local and the LLM pass.

use chrono::Utc;

use crate::model::skill::SkillAssignment;
use crate::model::{Classification, ClassificationEvent, ClassificationState, ToolRecord};
use crate::store::ClassificationUpdate;

use super::Skills;
use super::error::SkillsError;

/// Tools classified per store commit (the specification queues batches of
/// 10; a local batch costs microseconds, so the batch bounds the commit).
pub(super) const BATCH: usize = 50;

impl Skills {
    /// Stores CLASSIFYING for a batch; returns the tools as stored.
    pub(super) fn start(&self, batch: &[&ToolRecord]) -> Result<Vec<ToolRecord>, SkillsError> {
        let start: Vec<ClassificationUpdate> = batch
            .iter()
            .filter_map(|t| Some(write_for(t, started(&t.classification)?)))
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

/// A classification taken up by a pass. One found CLASSIFYING was left so
/// by a pass that stopped mid-way (passes run one at a time): it goes back
/// to the start first, as the state machine's `Reset` says.
fn started(current: &Classification) -> Option<Classification> {
    if current.state == ClassificationState::Classifying {
        tracing::debug!("a classification left CLASSIFYING by a stopped pass starts over");
        let reset = classification_after(current, ClassificationEvent::Reset)?;
        return classification_after(&reset, ClassificationEvent::Start);
    }
    classification_after(current, ClassificationEvent::Start)
}

/// A classification that succeeded with `skills` (none if the state
/// machine refuses it).
pub(super) fn succeeded(
    current: &Classification,
    skills: Vec<SkillAssignment>,
    by: &str,
    now: chrono::DateTime<Utc>,
) -> Option<Classification> {
    Some(Classification {
        skills,
        by: Some(by.to_owned()),
        error: None,
        failures: 0,
        at: Some(now),
        ..classification_after(current, ClassificationEvent::Succeeded)?
    })
}

/// The classification after `event`, keeping everything else; none when
/// the state machine refuses the change: the tool then keeps the
/// classification it has and nothing is written for it.
pub(super) fn classification_after(
    current: &Classification,
    event: ClassificationEvent,
) -> Option<Classification> {
    match current.state.transition(event) {
        Ok(state) => Some(Classification {
            state,
            ..current.clone()
        }),
        Err(err) => {
            tracing::debug!("{err}; left as it is");
            None
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use ClassificationEvent as E;
    use ClassificationState as S;

    const STATES: [S; 4] = [
        S::Discovered,
        S::Classifying,
        S::Classified,
        S::Unclassified,
    ];

    fn in_state(state: S) -> Classification {
        Classification {
            state,
            by: Some("local:v1:t".into()),
            failures: 2,
            ..Classification::default()
        }
    }

    #[test]
    fn a_refused_transition_changes_nothing() {
        for state in STATES {
            for event in [E::Start, E::Succeeded, E::Failed, E::Reset] {
                let current = in_state(state);
                match state.transition(event) {
                    Ok(next) => assert_eq!(
                        classification_after(&current, event),
                        Some(Classification {
                            state: next,
                            ..current
                        }),
                        "{state} on {event:?}"
                    ),
                    Err(_) => assert_eq!(
                        classification_after(&current, event),
                        None,
                        "{state} on {event:?}"
                    ),
                }
            }
        }
        let now = Utc::now();
        assert_eq!(succeeded(&in_state(S::Classified), vec![], "x", now), None);
        assert_eq!(
            succeeded(&in_state(S::Classifying), vec![], "x", now).map(|c| c.state),
            Some(S::Classified)
        );
    }

    #[test]
    fn a_pass_takes_up_every_state_a_stopped_pass_may_leave() {
        for state in STATES {
            let current = in_state(state);
            assert_eq!(
                started(&current),
                Some(Classification {
                    state: S::Classifying,
                    ..current
                }),
                "{state}"
            );
        }
    }
}
