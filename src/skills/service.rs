//! The skills as users see and edit them: the taxonomy listed, created,
//! edited and deleted (a built-in skill is hidden, never deleted), the
//! tools of a skill, and reclassification on request. Edits wake the
//! worker; none of this classifies.

use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;
use utoipa::ToSchema;

use crate::model::{Classification, ServerId, Skill, ToolRecord};
use crate::store::ClassificationUpdate;

use super::error::SkillsError;
use super::{Skills, taxonomy};

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

/// Which tools `reclassify` takes up again.
#[derive(Debug, Clone, Default)]
pub struct ReclassifyScope {
    pub servers: Option<HashSet<ServerId>>,
    pub tool_ids: Option<HashSet<String>>,
}

impl Skills {
    /// Every skill (built-in with edits, then users'), hidden ones too.
    pub fn all(&self) -> Result<Vec<Skill>, SkillsError> {
        Ok(taxonomy::merge(
            taxonomy::builtin(),
            self.inner.store.stored_skills()?,
        ))
    }

    /// The skills classification uses.
    pub(super) fn visible(&self) -> Result<Vec<Skill>, SkillsError> {
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

    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, SkillsError> + Send + 'static,
    ) -> Result<T, SkillsError> {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|err| SkillsError::Task(err.to_string()))?
    }
}
