//! The queue of skills the taxonomy seems to lack: a suggestion per server
//! for its tools that fit no skill (named after the words their names
//! share), the LLM's proposals, and the queue as the API reads and
//! dismisses it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::index::text::split_identifier;
use crate::model::{SkillSuggestion, ToolRecord};

use super::Skills;
use super::error::SkillsError;
use super::llm::Proposal;

impl Skills {
    pub async fn suggestions(&self) -> Result<Vec<SkillSuggestion>, SkillsError> {
        let store = Arc::clone(&self.inner.store);
        self.blocking(move || Ok(store.skill_suggestions()?)).await
    }

    pub async fn dismiss_suggestion(&self, id: u64) -> Result<(), SkillsError> {
        let store = Arc::clone(&self.inner.store);
        self.blocking(move || {
            if store.delete_skill_suggestion(id)? {
                Ok(())
            } else {
                Err(SkillsError::SuggestionNotFound(id))
            }
        })
        .await
    }

    /// Queues the skills the LLM proposed, each for the tools it found no
    /// skill for.
    pub(super) fn queue_proposals(&self, named: &[Proposal]) -> Result<(), SkillsError> {
        for (name, ids) in named {
            let reason = format!(
                "the LLM classifier found no skill for {} tool(s) and proposed this one",
                ids.len()
            );
            self.inner.store.add_skill_suggestion(name, &reason, ids)?;
        }
        Ok(())
    }

    /// Queues a suggestion per server for its tools that fit no skill
    /// (for an admin to review), named after the words their names share.
    pub(super) fn suggest(&self, unfit: &[&ToolRecord]) -> Result<(), SkillsError> {
        let mut by_server: BTreeMap<&str, Vec<&ToolRecord>> = BTreeMap::new();
        for tool in unfit {
            by_server
                .entry(tool.server_name.as_str())
                .or_default()
                .push(tool);
        }
        for (server, tools) in by_server {
            let name = common_words(tools.iter().map(|t| t.original_name.as_str()));
            let ids: Vec<String> = tools.iter().map(|t| t.id.clone()).collect();
            let reason = format!(
                "{} tool(s) of {server} fit no skill with confidence ≥ 0.5",
                ids.len()
            );
            self.inner
                .store
                .add_skill_suggestion(&name, &reason, &ids)?;
        }
        Ok(())
    }
}

/// A name for a group of tools: the (up to three) words most of their
/// names share.
fn common_words<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for name in names {
        let words: HashSet<String> = split_identifier(name)
            .split_whitespace()
            .filter(|w| w.len() > 2)
            .map(str::to_owned)
            .collect();
        for word in words {
            *counts.entry(word).or_default() += 1;
        }
    }
    let mut ranked: Vec<(String, usize)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let words: Vec<String> = ranked.into_iter().take(3).map(|(w, _)| w).collect();
    if words.is_empty() {
        "unnamed".to_owned()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_named_after_the_words_its_tools_share() {
        let names = [
            "toggle-simulated-logging",
            "toggle-subscriber-updates",
            "echo",
        ];
        assert_eq!(common_words(names.into_iter()), "toggle echo logging");
        assert_eq!(common_words(["a", "b"].into_iter()), "unnamed");
    }
}
