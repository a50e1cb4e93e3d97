//! What search holds of each tool for its results, kept apart from the
//! keyword and vector indexes: a sync fills it, searches filter and answer
//! from it, and the skills service's classifications update it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{IndexError, SearchIndex};
use crate::model::{ServerId, ToolRecord};
use crate::store::ToolSummary;

/// What search knows of one tool, for results. Not its definition nor its
/// description: with 10,000 tools the one would hold the whole catalog in
/// memory a second time, and at 100,000 the other is ~35 MB; the few a
/// search returns are read from the store.
#[derive(Debug, Clone)]
pub struct ToolDoc {
    pub tool_id: Arc<str>,
    pub server_id: ServerId,
    pub server_name: String,
    pub original_name: String,
    pub wire_name: Option<String>,
    pub hash: String,
    pub is_external: bool,
    pub skill_ids: Vec<String>,
    pub primary_skill_id: Option<String>,
}

impl ToolDoc {
    pub(super) fn from_summary(tool: &ToolSummary<'_>) -> ToolDoc {
        ToolDoc {
            tool_id: Arc::from(&*tool.id),
            server_id: tool.server_id,
            server_name: tool.server_name.to_string(),
            original_name: tool.original_name.to_string(),
            wire_name: tool.wire_name.as_deref().map(str::to_owned),
            hash: tool.definition_hash.to_string(),
            is_external: tool.is_external,
            skill_ids: tool.skill_ids.iter().map(|s| s.to_string()).collect(),
            primary_skill_id: tool.primary_skill_id.as_deref().map(str::to_owned),
        }
    }

    pub(super) fn from_record(tool: &ToolRecord) -> ToolDoc {
        ToolDoc {
            tool_id: Arc::from(tool.id.as_str()),
            server_id: tool.server_id,
            server_name: tool.server_name.clone(),
            original_name: tool.original_name.clone(),
            wire_name: tool.wire_name.clone(),
            hash: tool.definition_hash.clone(),
            is_external: tool.is_external,
            skill_ids: tool.skill_ids.clone(),
            primary_skill_id: tool.primary_skill_id.clone(),
        }
    }
}

/// Tool id → what search shows of it.
pub(super) type Docs = HashMap<Arc<str>, Arc<ToolDoc>>;

impl SearchIndex {
    /// Shows tools' new skills in results and filters, for the tools whose
    /// indexed definition is the one that was classified.
    pub fn apply_skills(&self, tools: &[ToolRecord]) -> Result<(), IndexError> {
        let mut docs = self.inner.docs_mut()?;
        for tool in tools {
            if let Some(doc) = docs.get_mut(tool.id.as_str())
                && doc.hash == tool.definition_hash
            {
                *doc = Arc::new(ToolDoc::from_record(tool));
            }
        }
        drop(docs);
        self.skills_moved();
        Ok(())
    }

    pub(super) fn skills_moved(&self) {
        self.inner
            .skills_moved
            .send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes whenever tools' skills may have changed.
    pub fn skill_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.skills_moved.subscribe()
    }

    /// The ids of the tools with a skill `wanted` accepts.
    pub fn tools_with_skill(&self, wanted: &dyn Fn(&str) -> bool) -> HashSet<Arc<str>> {
        let Ok(docs) = self.inner.docs.read() else {
            return HashSet::new();
        };
        docs.values()
            .filter(|doc| doc.skill_ids.iter().any(|s| wanted(s)))
            .map(|doc| Arc::clone(&doc.tool_id))
            .collect()
    }

    /// How many tools each skill has, among `only` (none: every tool).
    pub fn skill_counts(&self, only: Option<&HashSet<Arc<str>>>) -> Vec<(String, usize)> {
        let Ok(docs) = self.inner.docs.read() else {
            return Vec::new();
        };
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for doc in docs.values() {
            if only.is_none_or(|ids| ids.contains(&doc.tool_id)) {
                for skill in &doc.skill_ids {
                    *counts.entry(skill).or_default() += 1;
                }
            }
        }
        counts
            .into_iter()
            .map(|(id, n)| (id.to_owned(), n))
            .collect()
    }

    /// A tool's skills, as search knows them.
    pub fn skills_of(&self, tool_id: &str) -> Vec<String> {
        self.inner
            .docs
            .read()
            .ok()
            .and_then(|docs| docs.get(tool_id).map(|doc| doc.skill_ids.clone()))
            .unwrap_or_default()
    }
}
