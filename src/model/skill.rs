//! Skills: the categories tools are classified into (each tool gets 1–3 at
//! confidence ≥ 0.5), a tool's classification and its state machine
//! (DISCOVERED → CLASSIFYING → CLASSIFIED or UNCLASSIFIED, back to
//! CLASSIFYING on a retry or a reclassify), and suggestions for skills
//! the taxonomy lacks. Pure types and rules; no I/O.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use utoipa::ToSchema;

/// Confidence a skill needs to be assigned; the primary skill is the
/// assigned one of highest confidence.
pub const MIN_CONFIDENCE: f32 = 0.5;
/// Most skills one tool is assigned (a tool gets 1–3).
pub const MAX_SKILLS: usize = 3;

/// One skill of the taxonomy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Skill {
    /// Lowercase letters, digits and `_`, starting with a letter.
    pub id: String,
    pub name: String,
    pub description: String,
    /// Phrases people use for what the skill's tools do.
    #[serde(default)]
    pub examples: Vec<String>,
    /// Shipped with the product (`assets/skills.json`); such a skill can be
    /// edited and hidden but not deleted.
    #[serde(default)]
    pub builtin: bool,
    /// Hidden skills classify nothing and are not shown by default.
    #[serde(default)]
    pub hidden: bool,
}

/// Why a skill definition is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSkill {
    #[error(
        "skill id {0:?} is invalid: use 2–64 lowercase letters, digits and '_', starting with a letter"
    )]
    Id(String),
    #[error("skill {field} must not be empty")]
    Empty { field: &'static str },
    #[error("skill {field} is too long ({len} characters; at most {max})")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("a skill has at most {max} examples ({found} given)")]
    TooManyExamples { found: usize, max: usize },
}

const MAX_NAME: usize = 100;
const MAX_DESCRIPTION: usize = 1_000;
const MAX_EXAMPLE: usize = 200;
const MAX_EXAMPLES: usize = 30;

impl Skill {
    /// Checks what a user may set; the texts are trimmed first.
    pub fn validate(&mut self) -> Result<(), InvalidSkill> {
        if !valid_skill_id(&self.id) {
            return Err(InvalidSkill::Id(self.id.clone()));
        }
        self.name = self.name.trim().to_owned();
        self.description = self.description.trim().to_owned();
        for (field, value, max) in [
            ("name", &self.name, MAX_NAME),
            ("description", &self.description, MAX_DESCRIPTION),
        ] {
            let len = value.chars().count();
            if len == 0 {
                return Err(InvalidSkill::Empty { field });
            }
            if len > max {
                return Err(InvalidSkill::TooLong { field, len, max });
            }
        }
        if self.examples.len() > MAX_EXAMPLES {
            return Err(InvalidSkill::TooManyExamples {
                found: self.examples.len(),
                max: MAX_EXAMPLES,
            });
        }
        self.examples = self
            .examples
            .iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        if let Some(long) = self
            .examples
            .iter()
            .find(|e| e.chars().count() > MAX_EXAMPLE)
        {
            return Err(InvalidSkill::TooLong {
                field: "example",
                len: long.chars().count(),
                max: MAX_EXAMPLE,
            });
        }
        Ok(())
    }

    /// The texts a skill is recognised by: its name and description, then
    /// each example phrase.
    pub fn prototype_texts(&self) -> Vec<String> {
        let mut texts = vec![format!("{}: {}", self.name, self.description)];
        texts.extend(self.examples.iter().cloned());
        texts
    }
}

pub fn valid_skill_id(id: &str) -> bool {
    let mut chars = id.chars();
    (2..=64).contains(&id.len())
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Where a tool stands in classification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ClassificationState {
    /// Stored, not yet classified.
    #[default]
    Discovered,
    Classifying,
    Classified,
    /// The classifier failed; retried later. The tool is searchable.
    Unclassified,
}

impl fmt::Display for ClassificationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClassificationState::Discovered => "DISCOVERED",
            ClassificationState::Classifying => "CLASSIFYING",
            ClassificationState::Classified => "CLASSIFIED",
            ClassificationState::Unclassified => "UNCLASSIFIED",
        })
    }
}

/// What moves a tool between classification states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassificationEvent {
    /// `queue_classification()`, `reclassify()` or `retry()`: work starts.
    Start,
    Succeeded,
    Failed,
    /// The tool's definition changed, or the daemon stopped mid-way: back
    /// to the start.
    Reset,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid classification transition from {from} on {event:?}")]
pub struct InvalidClassificationTransition {
    pub from: ClassificationState,
    pub event: ClassificationEvent,
}

impl ClassificationState {
    /// The one place that decides which classification changes are allowed.
    pub fn transition(
        self,
        event: ClassificationEvent,
    ) -> Result<ClassificationState, InvalidClassificationTransition> {
        use ClassificationEvent as E;
        use ClassificationState as S;
        match (self, event) {
            (S::Discovered | S::Classified | S::Unclassified, E::Start) => Ok(S::Classifying),
            (S::Classifying, E::Succeeded) => Ok(S::Classified),
            (S::Classifying, E::Failed) => Ok(S::Unclassified),
            (_, E::Reset) => Ok(S::Discovered),
            (from, event) => Err(InvalidClassificationTransition { from, event }),
        }
    }
}

/// One skill given to a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SkillAssignment {
    pub skill_id: String,
    /// Calibrated: the share of assignments at this confidence that were
    /// right on the labelled set.
    pub confidence: f32,
}

/// A tool's classification as stored with it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    #[serde(default)]
    pub state: ClassificationState,
    /// Highest confidence first; at most `MAX_SKILLS`, each ≥ `MIN_CONFIDENCE`.
    #[serde(default)]
    pub skills: Vec<SkillAssignment>,
    /// The classifier and taxonomy that produced it (`local:<taxonomy
    /// hash>`, `llm:<model>:<taxonomy hash>`): a change reclassifies.
    #[serde(default)]
    pub by: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    /// Failed attempts in a row, for the retry backoff.
    #[serde(default)]
    pub failures: u32,
    #[serde(default)]
    pub at: Option<DateTime<Utc>>,
}

/// Picks a tool's skills from every skill's confidence: at most
/// `MAX_SKILLS` with confidence ≥ `MIN_CONFIDENCE`, highest first (the first
/// is the primary skill).
pub fn choose_skills(mut scored: Vec<SkillAssignment>) -> Vec<SkillAssignment> {
    scored.retain(|s| s.confidence >= MIN_CONFIDENCE && s.confidence.is_finite());
    scored.sort_by(|a, b| {
        b.confidence
            .total_cmp(&a.confidence)
            .then_with(|| a.skill_id.cmp(&b.skill_id))
    });
    scored.truncate(MAX_SKILLS);
    scored
}

/// A skill the taxonomy seems to lack: tools that fit none,
/// queued for an admin to review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SkillSuggestion {
    pub id: u64,
    /// A proposed name (from the tools' common words, or the LLM's).
    pub name: String,
    pub reason: String,
    /// The tools that fit no skill.
    pub tool_ids: Vec<String>,
    /// A description for the proposed skill, from what its tools say they
    /// do (what `accept` adds unless told otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Example requests for the proposed skill, from its tools' names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    pub created_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(id: &str) -> Skill {
        Skill {
            id: id.into(),
            name: " Name ".into(),
            description: "does things".into(),
            examples: vec![" one ".into(), "".into()],
            builtin: false,
            hidden: false,
        }
    }

    #[test]
    fn skill_ids_and_texts_are_checked() {
        let mut ok = skill("issue_tracking");
        ok.validate().unwrap();
        assert_eq!(ok.name, "Name");
        assert_eq!(ok.examples, vec!["one".to_owned()]);
        for bad in ["", "x", "Issue", "1abc", "a-b", "a b", &"a".repeat(65)] {
            assert!(
                matches!(skill(bad).validate(), Err(InvalidSkill::Id(_))),
                "{bad}"
            );
        }
        let mut empty = skill("ok_id");
        empty.description = "  ".into();
        assert_eq!(
            empty.validate(),
            Err(InvalidSkill::Empty {
                field: "description"
            })
        );
        let mut many = skill("ok_id");
        many.examples = vec!["e".into(); 31];
        assert!(matches!(
            many.validate(),
            Err(InvalidSkill::TooManyExamples { .. })
        ));
    }

    #[test]
    fn the_state_machine_allows_only_the_specified_transitions() {
        use ClassificationEvent as E;
        use ClassificationState as S;
        assert_eq!(S::Discovered.transition(E::Start), Ok(S::Classifying));
        assert_eq!(S::Classifying.transition(E::Succeeded), Ok(S::Classified));
        assert_eq!(S::Classifying.transition(E::Failed), Ok(S::Unclassified));
        // reclassify() and retry()
        assert_eq!(S::Classified.transition(E::Start), Ok(S::Classifying));
        assert_eq!(S::Unclassified.transition(E::Start), Ok(S::Classifying));
        for from in [
            S::Discovered,
            S::Classifying,
            S::Classified,
            S::Unclassified,
        ] {
            assert_eq!(from.transition(E::Reset), Ok(S::Discovered));
        }
        assert!(S::Classifying.transition(E::Start).is_err());
        assert!(S::Discovered.transition(E::Succeeded).is_err());
        assert!(S::Classified.transition(E::Failed).is_err());
    }

    #[test]
    fn at_most_three_skills_above_the_bar_highest_first() {
        let scored = [("a", 0.4), ("b", 0.9), ("c", 0.5), ("d", 0.7), ("e", 0.6)]
            .into_iter()
            .map(|(id, c)| SkillAssignment {
                skill_id: id.into(),
                confidence: c,
            })
            .collect();
        let chosen: Vec<_> = choose_skills(scored)
            .into_iter()
            .map(|s| s.skill_id)
            .collect();
        assert_eq!(chosen, ["b", "d", "e"]);
        assert!(
            choose_skills(vec![SkillAssignment {
                skill_id: "x".into(),
                confidence: f32::NAN
            }])
            .is_empty()
        );
    }
}
