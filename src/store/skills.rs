//! Skills in the store: the taxonomy's stored part (skills users added, and
//! built-in skills they edited or hid — the built-in list itself ships in
//! `assets/skills.json`), tools' classifications, and the queue of skill
//! suggestions.

use chrono::Utc;
use redb::{
    ReadableDatabase as _, ReadableTable as _, ReadableTableMetadata as _, TableDefinition,
};

use super::catalog::TOOLS;
use super::codec::{decode, encode};
use super::meta::{META, META_LAST_SUGGESTION_ID};
use super::{Store, StoreError};
use crate::model::{Classification, ServerId, Skill, SkillSuggestion, ToolRecord};

pub(super) const SKILLS: TableDefinition<&str, &[u8]> = TableDefinition::new("skills");
pub(super) const SUGGESTIONS: TableDefinition<u64, &[u8]> =
    TableDefinition::new("skill_suggestions");

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
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(SKILLS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            out.push(decode(bytes.value())?);
        }
        Ok(out)
    }

    pub fn put_skill(&self, skill: &Skill) -> Result<(), StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        txn.open_table(SKILLS)?
            .insert(skill.id.as_str(), encode(skill)?.as_slice())?;
        txn.commit()?;
        Ok(())
    }

    /// Removes a stored skill; whether there was one.
    pub fn delete_skill(&self, id: &str) -> Result<bool, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let existed = txn.open_table(SKILLS)?.remove(id)?.is_some();
        txn.commit()?;
        Ok(existed)
    }

    /// Stores classifications in one commit. A tool whose definition
    /// changed (or that is gone) since is skipped: its new definition is
    /// classified afresh. Returns the tools updated, less their
    /// definitions (a classification pass keeps every one it wrote).
    pub fn set_classifications(
        &self,
        updates: &[ClassificationUpdate],
    ) -> Result<Vec<ToolRecord>, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let mut written = Vec::new();
        {
            let mut table = txn.open_table(TOOLS)?;
            for update in updates {
                let key = (update.server_id.as_u128(), update.original_name.as_str());
                let current: Option<ToolRecord> =
                    table.get(key)?.map(|b| decode(b.value())).transpose()?;
                let Some(mut tool) = current else { continue };
                if tool.definition_hash != update.definition_hash {
                    continue;
                }
                tool.set_classification(update.classification.clone());
                table.insert(key, encode(&tool)?.as_slice())?;
                written.push(tool.without_definition());
            }
        }
        txn.commit()?;
        Ok(written)
    }

    /// The suggestion queue, oldest first.
    pub fn skill_suggestions(&self) -> Result<Vec<SkillSuggestion>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(SUGGESTIONS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            out.push(decode(bytes.value())?);
        }
        Ok(out)
    }

    /// Queues a suggestion (its id and time are the store's) unless one
    /// with the same tools is queued; returns it either way.
    pub fn add_skill_suggestion(
        &self,
        proposal: SkillSuggestion,
    ) -> Result<SkillSuggestion, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let suggestion = {
            let mut table = txn.open_table(SUGGESTIONS)?;
            let mut existing = None;
            for entry in table.iter()? {
                let (_, bytes) = entry?;
                let queued: SkillSuggestion = decode(bytes.value())?;
                if queued.tool_ids == proposal.tool_ids {
                    existing = Some(queued);
                    break;
                }
            }
            match existing {
                Some(queued) => queued,
                None => {
                    let mut meta = txn.open_table(META)?;
                    let last_handed_out = meta
                        .get(META_LAST_SUGGESTION_ID)?
                        .map(|v| v.value())
                        .unwrap_or(0);
                    let last_queued = table.last()?.map(|(k, _)| k.value()).unwrap_or(0);
                    let id = last_handed_out.max(last_queued) + 1;
                    meta.insert(META_LAST_SUGGESTION_ID, id)?;
                    let suggestion = SkillSuggestion {
                        id,
                        created_at: Utc::now(),
                        ..proposal
                    };
                    table.insert(id, encode(&suggestion)?.as_slice())?;
                    while table.len()? > SUGGESTION_LIMIT {
                        if table.pop_first()?.is_none() {
                            break;
                        }
                    }
                    suggestion
                }
            }
        };
        txn.commit()?;
        Ok(suggestion)
    }

    /// Dismisses a suggestion; whether it was queued.
    pub fn delete_skill_suggestion(&self, id: u64) -> Result<bool, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let existed = txn.open_table(SUGGESTIONS)?.remove(id)?.is_some();
        txn.commit()?;
        Ok(existed)
    }
}
