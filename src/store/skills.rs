//! Skills in the store: the taxonomy's stored part (skills users added, and
//! built-in skills they edited or hid — the built-in list itself ships in
//! `assets/skills.json`), tools' classifications, and the queue of skill
//! suggestions.

use std::ops::Bound;

use chrono::Utc;

use super::catalog::TOOLS;
use super::codec::{all_decoded, decode, encode};
use super::meta::{META_LAST_SUGGESTION_ID, meta_in, set_meta};
use super::tables::{Order, Reads as _, Table};
use super::{Store, StoreError};
use crate::model::{Classification, ServerId, Skill, SkillSuggestion, ToolRecord};

pub(super) const SKILLS: Table<String, Vec<u8>> = Table::new("skills");
pub(super) const SUGGESTIONS: Table<u64, Vec<u8>> = Table::new("skill_suggestions");

/// Suggestions kept; the oldest go first.
pub const SUGGESTION_LIMIT: u64 = 500;

/// A classification to store for one tool, applied only if the tool still
/// has the definition it was made for.
#[derive(Debug, Clone)]
pub struct ClassificationUpdate {
    pub server_id: ServerId,
    pub original_name: String,
    pub definition_hash: String,
    pub classification: Classification,
}

impl Store {
    /// The stored skills: user skills and overrides of built-in ones.
    pub fn stored_skills(&self) -> Result<Vec<Skill>, StoreError> {
        self.read(|txn| all_decoded(txn, SKILLS))
    }

    pub fn put_skill(&self, skill: &Skill) -> Result<(), StoreError> {
        let bytes = encode(skill)?;
        self.write(|txn| txn.insert(SKILLS, &skill.id, &bytes))?;
        Ok(())
    }

    /// Removes a stored skill; whether there was one.
    pub fn delete_skill(&self, id: &str) -> Result<bool, StoreError> {
        let removed = self.write(|txn| txn.remove(SKILLS, &id.to_owned()))?;
        Ok(removed.is_some())
    }

    /// Stores classifications in one commit. A tool whose definition
    /// changed (or that is gone) since is skipped: its new definition is
    /// classified afresh. Returns the tools updated, less their
    /// definitions (a classification pass keeps every one it wrote).
    pub fn set_classifications(
        &self,
        updates: &[ClassificationUpdate],
    ) -> Result<Vec<ToolRecord>, StoreError> {
        self.write(|txn| {
            let mut written = Vec::new();
            for update in updates {
                let key = (update.server_id.as_u128(), update.original_name.clone());
                let current: Option<ToolRecord> =
                    txn.get(TOOLS, &key)?.map(|b| decode(&b)).transpose()?;
                let Some(mut tool) = current else { continue };
                if tool.definition_hash != update.definition_hash {
                    continue;
                }
                tool.set_classification(update.classification.clone());
                txn.insert(TOOLS, &key, &encode(&tool)?)?;
                written.push(tool.without_definition());
            }
            Ok(written)
        })
    }

    /// The suggestion queue, oldest first.
    pub fn skill_suggestions(&self) -> Result<Vec<SkillSuggestion>, StoreError> {
        self.read(|txn| all_decoded(txn, SUGGESTIONS))
    }

    /// Queues a suggestion (its id and time are the store's) unless one
    /// with the same tools is queued; returns it either way.
    pub fn add_skill_suggestion(
        &self,
        proposal: SkillSuggestion,
    ) -> Result<SkillSuggestion, StoreError> {
        self.write(|txn| {
            let mut existing = None;
            let mut last_queued = 0;
            txn.for_each(
                SUGGESTIONS,
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                |id, bytes| {
                    last_queued = id;
                    let queued: SkillSuggestion = decode(&bytes)?;
                    if queued.tool_ids == proposal.tool_ids {
                        existing = Some(queued);
                        return Ok(false);
                    }
                    Ok(true)
                },
            )?;
            if let Some(queued) = existing {
                return Ok(queued);
            }
            let id = meta_in(txn, META_LAST_SUGGESTION_ID)?.max(last_queued) + 1;
            set_meta(txn, META_LAST_SUGGESTION_ID, id)?;
            let suggestion = SkillSuggestion {
                id,
                created_at: Utc::now(),
                ..proposal
            };
            txn.insert(SUGGESTIONS, &id, &encode(&suggestion)?)?;
            let mut queued = txn.len(SUGGESTIONS)?;
            while queued > SUGGESTION_LIMIT && txn.pop_first(SUGGESTIONS)?.is_some() {
                queued -= 1;
            }
            Ok(suggestion)
        })
    }

    /// Dismisses a suggestion; whether it was queued.
    pub fn delete_skill_suggestion(&self, id: u64) -> Result<bool, StoreError> {
        let removed = self.write(|txn| txn.remove(SUGGESTIONS, &id))?;
        Ok(removed.is_some())
    }
}
