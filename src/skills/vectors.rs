//! Skill vectors: each skill's members' mean vector, normalised,
//! or its description's while it has no member; recomputed only when
//! membership, the skills or the index changed. Also the tool counts the
//! API shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::model::{Skill, ToolRecord};

use super::Skills;
use super::classify::Prototypes;
use super::error::SkillsError;

impl Skills {
    /// Recomputes tool counts and, when membership changed, the skill
    /// vectors: each skill's members' mean vector, normalised; its
    /// description's while it has no member.
    pub(super) fn refresh_members(
        &self,
        tools: &[&ToolRecord],
        skills: &[Skill],
    ) -> Result<(), SkillsError> {
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
}
