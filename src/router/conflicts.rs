//! Un-namespaced names (conflict strategies: priority, first wins, explicit
//! only, merge): when several servers
//! offer a tool of the same original name, a setting decides which one the
//! bare name reaches. Namespaced names (tool id, wire name) are never
//! ambiguous and are not affected.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use utoipa::ToSchema;

use super::routes::{Route, ServerEntry};
use crate::model::ServerId;

/// How a bare original name shared by several servers is resolved.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, clap::ValueEnum,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[value(rename_all = "kebab-case")]
pub enum ConflictStrategy {
    /// The server with the highest `priority` wins; a tie stays ambiguous.
    #[default]
    PriorityBased,
    /// The server registered first wins.
    FirstWins,
    /// Bare names are not resolved at all: clients use `server.tool`.
    ExplicitOnly,
}

/// One tool of a conflict.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Candidate {
    pub tool_id: String,
    pub server: String,
    pub priority: i32,
    pub registered_at: chrono::DateTime<chrono::Utc>,
    pub available: bool,
}

/// A name several servers offer, and what it resolves to.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Conflict {
    pub name: String,
    pub candidates: Vec<Candidate>,
    /// The tool id the bare name reaches, if any.
    pub resolved_to: Option<String>,
    pub reason: String,
}

/// Which of several servers offering the same bare name (or resource URI,
/// prompt name, template) it reaches under `strategy`, and why.
pub fn pick(
    strategy: ConflictStrategy,
    offered_by: &[ServerId],
    servers: &HashMap<ServerId, ServerEntry>,
) -> (Option<ServerId>, String) {
    let available = |id: &&ServerId| servers.get(id).is_some_and(|s| s.status.is_available());
    // Prefer servers that can answer now.
    let pool: Vec<&ServerId> = if offered_by.iter().any(|id| available(&id)) {
        offered_by.iter().filter(available).collect()
    } else {
        offered_by.iter().collect()
    };
    match strategy {
        ConflictStrategy::ExplicitOnly => {
            (None, "EXPLICIT_ONLY: call it as server.tool".to_owned())
        }
        ConflictStrategy::PriorityBased => {
            let priority = |id: &ServerId| servers.get(id).map(|s| s.priority);
            let best = pool.iter().filter_map(|id| priority(id)).max().unwrap_or(0);
            let top: Vec<&&ServerId> = pool
                .iter()
                .filter(|id| priority(id) == Some(best))
                .collect();
            match top.as_slice() {
                [only] => (
                    Some(***only),
                    format!("PRIORITY_BASED: highest priority ({best})"),
                ),
                _ => (
                    None,
                    format!(
                        "PRIORITY_BASED: {} servers tie at priority {best}; call it as server.tool",
                        top.len()
                    ),
                ),
            }
        }
        ConflictStrategy::FirstWins => (
            pool.iter()
                .min_by_key(|id| {
                    servers
                        .get(id)
                        .map(|s| (s.registered_at, s.name.to_string()))
                })
                .map(|id| **id),
            "FIRST_WINS: registered first".to_owned(),
        ),
    }
}

/// Picks what each bare name reaches; returns the aliases and the conflicts.
pub fn resolve(
    strategy: ConflictStrategy,
    by_original: &HashMap<Arc<str>, Vec<Arc<Route>>>,
    servers: &HashMap<ServerId, ServerEntry>,
) -> (HashMap<Arc<str>, Arc<Route>>, Vec<Conflict>) {
    let mut aliases = HashMap::new();
    let mut conflicts = Vec::new();
    for (name, routes) in by_original {
        if routes.len() == 1 {
            if strategy != ConflictStrategy::ExplicitOnly {
                aliases.insert(Arc::clone(name), Arc::clone(&routes[0]));
            }
            continue;
        }
        let entry = |route: &Arc<Route>| servers.get(&route.server_id);
        let offered_by: Vec<ServerId> = routes.iter().map(|r| r.server_id).collect();
        let (winner, reason) = pick(strategy, &offered_by, servers);
        let winner = winner.and_then(|id| routes.iter().find(|r| r.server_id == id));
        if let Some(winner) = &winner {
            aliases.insert(Arc::clone(name), Arc::clone(winner));
        }
        let mut candidates: Vec<Candidate> = routes
            .iter()
            .filter_map(|r| {
                entry(r).map(|s| Candidate {
                    tool_id: r.tool_id.to_string(),
                    server: s.name.to_string(),
                    priority: s.priority,
                    registered_at: s.registered_at,
                    available: s.status.is_available(),
                })
            })
            .collect();
        candidates.sort_by(|a, b| a.tool_id.cmp(&b.tool_id));
        conflicts.push(Conflict {
            name: name.to_string(),
            candidates,
            resolved_to: winner.map(|w| w.tool_id.to_string()),
            reason,
        });
    }
    conflicts.sort_by(|a, b| a.name.cmp(&b.name));
    (aliases, conflicts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ServerStatus;
    use chrono::{Duration, Utc};

    type Fixture = (
        HashMap<Arc<str>, Vec<Arc<Route>>>,
        HashMap<ServerId, ServerEntry>,
    );

    fn setup(servers: &[(&str, i32, i64, ServerStatus)]) -> Fixture {
        let base = Utc::now();
        let mut by_original: HashMap<Arc<str>, Vec<Arc<Route>>> = HashMap::new();
        let mut entries = HashMap::new();
        for (name, priority, age, status) in servers {
            let id = uuid::Uuid::new_v4();
            entries.insert(
                id,
                ServerEntry {
                    id,
                    name: Arc::from(*name),
                    status: *status,
                    priority: *priority,
                    registered_at: base - Duration::seconds(*age),
                    limits: Arc::default(),
                    validate_arguments: None,
                },
            );
            for tool in ["search", format!("only_{name}").as_str()] {
                by_original
                    .entry(Arc::from(tool))
                    .or_default()
                    .push(Arc::new(Route {
                        server_id: id,
                        server_name: Arc::from(*name),
                        original_name: Arc::from(tool),
                        tool_id: Arc::from(format!("{name}.{tool}")),
                        wire_name: None,
                        header_params: Arc::from([]),
                    }));
            }
        }
        (by_original, entries)
    }

    const UP: ServerStatus = ServerStatus::Connected;

    #[test]
    fn priority_based_picks_the_highest_and_ties_stay_ambiguous() {
        let (routes, servers) = setup(&[
            ("a", 1, 10, UP),
            ("b", 5, 5, UP),
            ("c", 5, 1, ServerStatus::Error),
        ]);
        let (aliases, conflicts) = resolve(ConflictStrategy::PriorityBased, &routes, &servers);
        assert_eq!(
            aliases["search"].tool_id.as_ref(),
            "b.search",
            "c ties but is down"
        );
        assert_eq!(
            aliases["only_a"].tool_id.as_ref(),
            "a.only_a",
            "unique names are aliases"
        );
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].resolved_to.as_deref(), Some("b.search"));
        assert_eq!(conflicts[0].candidates.len(), 3);

        let (routes, servers) = setup(&[("a", 5, 10, UP), ("b", 5, 5, UP)]);
        let (aliases, conflicts) = resolve(ConflictStrategy::PriorityBased, &routes, &servers);
        assert!(!aliases.contains_key("search"));
        assert_eq!(conflicts[0].resolved_to, None);
        assert!(
            conflicts[0].reason.contains("tie"),
            "{}",
            conflicts[0].reason
        );
    }

    #[test]
    fn first_wins_and_explicit_only() {
        let (routes, servers) = setup(&[("a", 9, 1, UP), ("b", 0, 100, UP)]);
        let (aliases, _) = resolve(ConflictStrategy::FirstWins, &routes, &servers);
        assert_eq!(
            aliases["search"].tool_id.as_ref(),
            "b.search",
            "registered first, whatever the priority"
        );

        let (aliases, conflicts) = resolve(ConflictStrategy::ExplicitOnly, &routes, &servers);
        assert!(aliases.is_empty(), "no bare names at all");
        assert_eq!(conflicts[0].resolved_to, None);
    }
}
