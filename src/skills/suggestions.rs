//! The queue of skills the taxonomy seems to lack: the tools that fit no
//! skill grouped by meaning across servers, each group a proposed skill
//! (name, description, examples) an admin can accept; the LLM's proposals;
//! and the queue as the API reads, accepts and dismisses it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use crate::index::similarity::{dot, normalised_mean};
use crate::index::text::{lead, split_identifier};
use crate::model::{Skill, SkillSuggestion, ToolRecord};

use super::error::SkillsError;
use super::llm::Proposal;
use super::{SkillView, Skills};

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

    /// Adds the skill a suggestion proposes (what `changes` gives replaces
    /// the proposal's id, name, description or examples) and takes the
    /// suggestion off the queue; the tools are classified again.
    pub async fn accept_suggestion(
        &self,
        id: u64,
        changes: SkillChanges,
    ) -> Result<SkillView, SkillsError> {
        let store = Arc::clone(&self.inner.store);
        let suggestion = self
            .blocking(move || Ok(store.skill_suggestions()?))
            .await?
            .into_iter()
            .find(|s| s.id == id)
            .ok_or(SkillsError::SuggestionNotFound(id))?;
        let skill = proposed_skill(&suggestion, changes);
        let view = self.create(skill).await?;
        // Accepted by someone else meanwhile: the skill stands either way.
        let _ = self.dismiss_suggestion(id).await;
        Ok(view)
    }

    /// Queues the skills the LLM proposed, each for the tools it found no
    /// skill for.
    pub(super) fn queue_proposals(&self, named: &[Proposal]) -> Result<(), SkillsError> {
        for (name, ids) in named {
            let reason = format!(
                "the LLM classifier found no skill for {} tool(s) and proposed this one",
                ids.len()
            );
            self.inner.store.add_skill_suggestion(SkillSuggestion {
                id: 0,
                name: name.clone(),
                reason,
                tool_ids: ids.clone(),
                description: None,
                examples: Vec::new(),
                created_at: chrono::Utc::now(),
            })?;
        }
        Ok(())
    }

    /// Queues proposed skills for the tools that fit none (for an admin to
    /// accept or dismiss): the tools grouped by meaning across servers,
    /// each group with a name, a description and examples drawn from its
    /// tools. Tools without vectors are grouped by server.
    pub(super) fn suggest(&self, unfit: &[&ToolRecord]) -> Result<(), SkillsError> {
        if unfit.is_empty() {
            return Ok(());
        }
        let wanted: HashSet<&str> = unfit.iter().map(|t| t.id.as_str()).collect();
        let vectors = self.inner.index.tool_vectors(|id| wanted.contains(id))?;
        let points: Vec<Option<Vec<f32>>> = unfit
            .iter()
            .map(|t| {
                vectors
                    .get(t.id.as_str())
                    .and_then(|v| normalised_mean(v.iter().map(Vec::as_slice)))
            })
            .collect();
        let servers: Vec<&str> = unfit.iter().map(|t| t.server_name.as_str()).collect();
        for group in group_by_meaning(&servers, &points) {
            let tools: Vec<&ToolRecord> = group.iter().map(|&i| unfit[i]).collect();
            self.inner.store.add_skill_suggestion(proposal(&tools))?;
        }
        Ok(())
    }
}

/// Tools this similar to a group's centre join it: related tools of one
/// domain (a weather server's forecast and alerts) sit around 0.5–0.7 with
/// MiniLM, unrelated ones below 0.35.
const GROUP_SIMILARITY: f32 = 0.5;
/// Groups formed at most: each tool is compared with every centre, so a
/// catalog of thousands of unrelated unfit tools (a hostile list) costs a
/// bounded pass; tools past it go with their server's lone tools.
const MAX_GROUPS: usize = 256;

/// Groups of indexes into `servers` (each tool's server): those with a vector grouped by meaning
/// (each joins the most similar group centre at `GROUP_SIMILARITY` or
/// more, or starts a group while there are fewer than `MAX_GROUPS`; then
/// every tool moves to its nearest final centre once, if near enough), a
/// lone tool left with the others of its server; those without a vector
/// by server. Largest groups first.
fn group_by_meaning(servers: &[&str], points: &[Option<Vec<f32>>]) -> Vec<Vec<usize>> {
    let mut centres: Vec<Vec<f32>> = Vec::new();
    // Each group's sum of member vectors: its centre follows in one step
    // per joining tool, however large the group.
    let mut sums: Vec<Vec<f32>> = Vec::new();
    for point in points.iter().flatten() {
        match nearest_centre(&centres, point) {
            Some((c, similarity)) if similarity >= GROUP_SIMILARITY => {
                sums[c].iter_mut().zip(point).for_each(|(sum, x)| *sum += x);
                centres[c] = normalised_mean(std::iter::once(sums[c].as_slice()))
                    .unwrap_or_else(|| point.clone());
            }
            _ if centres.len() < MAX_GROUPS => {
                centres.push(point.clone());
                sums.push(point.clone());
            }
            _ => {}
        }
    }
    // Once more against the final centres: an early tool may sit closer
    // to a group that formed after it.
    let mut settled: Vec<Vec<usize>> = vec![Vec::new(); centres.len()];
    let mut by_server: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, point) in points.iter().enumerate() {
        let Some(point) = point else { continue };
        match nearest_centre(&centres, point) {
            Some((c, similarity)) if similarity >= GROUP_SIMILARITY => {
                settled[c].push(i);
            }
            // Near no group (past MAX_GROUPS, or left by its group's
            // centre as the group grew).
            _ => by_server.entry(servers[i]).or_default().push(i),
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for group in settled {
        match group.len() {
            0 => {}
            1 => by_server
                .entry(servers[group[0]])
                .or_default()
                .push(group[0]),
            _ => groups.push(group),
        }
    }
    for (i, point) in points.iter().enumerate() {
        if point.is_none() {
            by_server.entry(servers[i]).or_default().push(i);
        }
    }
    groups.extend(by_server.into_values());
    groups.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    groups
}

fn nearest_centre(centres: &[Vec<f32>], point: &[f32]) -> Option<(usize, f32)> {
    centres
        .iter()
        .map(|c| dot(c, point))
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// Characters of a tool's description a proposed skill's description keeps.
const DESCRIPTION_BUDGET: usize = 200;
/// Example requests a proposed skill gets from its tools' names.
const EXAMPLES: usize = 6;

/// The skill a group of tools proposes: named after the words their names
/// share, described by its tools' own first sentences, with their names as
/// examples.
fn proposal(tools: &[&ToolRecord]) -> SkillSuggestion {
    let name = common_words(tools.iter().map(|t| t.original_name.as_str()));
    let servers: BTreeSet<&str> = tools.iter().map(|t| t.server_name.as_str()).collect();
    let servers: Vec<&str> = servers.into_iter().collect();
    let reason = format!(
        "{} tool(s) of {} fit no skill with confidence ≥ 0.5",
        tools.len(),
        servers.join(", ")
    );
    let mut leads: Vec<&str> = Vec::new();
    for tool in tools {
        let lead = lead(
            tool.description.as_deref().unwrap_or_default(),
            DESCRIPTION_BUDGET,
        )
        .trim()
        .trim_end_matches('.');
        if !lead.is_empty() && !leads.contains(&lead) {
            leads.push(lead);
        }
    }
    let mut description = String::new();
    for lead in leads {
        if !description.is_empty() && description.len() + lead.len() > DESCRIPTION_BUDGET {
            break;
        }
        if !description.is_empty() {
            description.push_str("; ");
        }
        description.push_str(lead);
    }
    let mut examples: Vec<String> = Vec::new();
    for tool in tools {
        let example = split_identifier(&tool.original_name);
        if examples.len() < EXAMPLES && !example.is_empty() && !examples.contains(&example) {
            examples.push(example);
        }
    }
    SkillSuggestion {
        id: 0,
        name,
        reason,
        tool_ids: tools.iter().map(|t| t.id.clone()).collect(),
        description: (!description.is_empty()).then_some(description),
        examples,
        created_at: chrono::Utc::now(),
    }
}

/// What an admin changes in a proposed skill when accepting it.
#[derive(Debug, Default, Clone)]
pub struct SkillChanges {
    pub id: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub examples: Option<Vec<String>>,
}

/// The skill a suggestion proposes, with an admin's changes: its id from
/// its name's words, its description its tools' own (or their names).
fn proposed_skill(suggestion: &SkillSuggestion, changes: SkillChanges) -> Skill {
    let words: Vec<String> = suggestion
        .name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let mut id = words.join("_");
    if !id.starts_with(|c: char| c.is_ascii_lowercase()) {
        id = format!("skill_{id}");
    }
    let name = {
        let mut chars = suggestion.name.chars();
        chars.next().map_or_else(String::new, |first| {
            first.to_uppercase().chain(chars).collect()
        })
    };
    let description = suggestion.description.clone().unwrap_or_else(|| {
        let tools: Vec<&str> = suggestion
            .tool_ids
            .iter()
            .take(EXAMPLES)
            .map(|t| t.split_once('.').map_or(t.as_str(), |(_, name)| name))
            .collect();
        format!("Tools such as {}", tools.join(", "))
    });
    Skill {
        id: changes.id.unwrap_or(id),
        name: changes.name.unwrap_or(name),
        description: changes.description.unwrap_or(description),
        examples: changes
            .examples
            .unwrap_or_else(|| suggestion.examples.clone()),
        builtin: false,
        hidden: false,
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

    /// A unit vector mostly along `axis`, a little along `tilt`.
    fn near(axis: usize, tilt: usize) -> Option<Vec<f32>> {
        let mut v = vec![0.0f32; 4];
        v[axis] = 0.95;
        v[tilt] += 0.31;
        normalised_mean(std::iter::once(v.as_slice()))
    }

    #[test]
    fn unfit_tools_are_grouped_by_meaning_across_servers() {
        let servers = [
            "weather_a",
            "weather_b",
            "sheets",
            "sheets",
            "odd",
            "odd",
            "blind",
        ];
        let points = vec![
            near(0, 1),
            near(0, 2),
            near(1, 0),
            near(1, 3),
            near(2, 3),
            near(3, 2),
            None,
        ];
        let groups = group_by_meaning(&servers, &points);
        // Two weather tools of two servers together, the two sheet tools
        // together; the lone tools of one server together; the tool
        // without a vector by its server.
        assert!(groups.contains(&vec![0, 1]), "{groups:?}");
        assert!(groups.contains(&vec![2, 3]), "{groups:?}");
        assert!(groups.contains(&vec![6]), "{groups:?}");
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), servers.len());
    }

    #[test]
    fn a_flood_of_unrelated_tools_forms_a_bounded_number_of_groups() {
        // Pairwise orthogonal unit vectors: nothing is alike.
        let tools = MAX_GROUPS * 2;
        let points: Vec<Option<Vec<f32>>> = (0..tools)
            .map(|i| {
                let mut v = vec![0.0f32; tools];
                v[i] = 1.0;
                Some(v)
            })
            .collect();
        let servers = vec!["hostile"; tools];
        let groups = group_by_meaning(&servers, &points);
        // Every tool once; no group of one but the server's lone tools.
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), tools);
        assert_eq!(groups.len(), 1, "{}", groups.len());
    }

    #[test]
    fn an_accepted_proposal_becomes_a_valid_skill_with_the_admins_changes() {
        let suggestion = SkillSuggestion {
            id: 7,
            name: "forecast alerts".into(),
            reason: String::new(),
            tool_ids: vec!["weather.get-alerts".into()],
            description: None,
            examples: vec!["get alerts".into()],
            created_at: chrono::Utc::now(),
        };
        let mut skill = proposed_skill(&suggestion, SkillChanges::default());
        assert_eq!(skill.id, "forecast_alerts");
        assert_eq!(skill.name, "Forecast alerts");
        assert_eq!(skill.description, "Tools such as get-alerts");
        assert_eq!(skill.examples, ["get alerts"]);
        assert!(skill.validate().is_ok());
        let numeric = SkillSuggestion {
            name: "2fa".into(),
            ..suggestion.clone()
        };
        assert_eq!(
            proposed_skill(&numeric, SkillChanges::default()).id,
            "skill_2fa"
        );
        let changed = proposed_skill(
            &suggestion,
            SkillChanges {
                id: Some("alerts".into()),
                ..SkillChanges::default()
            },
        );
        assert_eq!(changed.id, "alerts");
    }

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
