//! The routing table: everything a call needs, in memory, built from the
//! store and swapped atomically when the catalog or a status changes. The
//! hot path is a hash lookup in it; nothing here touches the disk.

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

use crate::model::{ServerId, ServerRecord, ServerStatus, ToolRecord};

/// Where a tool call goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub server_id: ServerId,
    pub server_name: Arc<str>,
    /// The name the server knows the tool by.
    pub original_name: Arc<str>,
    /// `server.tool`.
    pub tool_id: Arc<str>,
    pub wire_name: Option<Arc<str>>,
}

/// A server as the router sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerEntry {
    pub id: ServerId,
    pub name: Arc<str>,
    pub status: ServerStatus,
    pub priority: i32,
    pub registered_at: chrono::DateTime<chrono::Utc>,
}

/// Where a namespaced resource URI or prompt name goes.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemRoute {
    pub server_id: ServerId,
    pub original: Arc<str>,
}

/// Separator between server and item in resource URIs (`server:uri`).
pub const RESOURCE_SEPARATOR: char = ':';
/// Separator between server and prompt name (`server.prompt`).
pub const PROMPT_SEPARATOR: char = '.';

/// The in-memory view the front doors serve from.
#[derive(Debug, Default)]
pub struct RouteTable {
    /// Wire names and tool ids (both namespaced, never ambiguous).
    pub(super) namespaced: HashMap<Arc<str>, Arc<Route>>,
    /// Original names, for un-namespaced calls (may be ambiguous).
    pub(super) by_original: HashMap<Arc<str>, Vec<Arc<Route>>>,
    /// What each bare original name reaches under the conflict strategy.
    pub(super) aliases: HashMap<Arc<str>, Arc<Route>>,
    /// Names several servers offer, and how each was resolved.
    pub conflicts: Vec<super::conflicts::Conflict>,
    pub strategy: super::conflicts::ConflictStrategy,
    /// Routes per server, by original name (for calls that name the server).
    pub(super) by_server: HashMap<ServerId, HashMap<Arc<str>, Arc<Route>>>,
    pub(super) servers: HashMap<ServerId, ServerEntry>,
    pub(super) server_ids: HashMap<Arc<str>, ServerId>,
    /// `tools/list` for clients: available servers' tools under their wire
    /// names, definitions otherwise unchanged.
    pub tools: Arc<Vec<Value>>,
    pub resources: Arc<Vec<Value>>,
    pub resource_templates: Arc<Vec<Value>>,
    pub prompts: Arc<Vec<Value>>,
    pub(super) resource_routes: HashMap<String, ItemRoute>,
    pub(super) prompt_routes: HashMap<String, ItemRoute>,
    /// Change whenever what a client would list changes: tools, resources
    /// (and templates), prompts.
    pub fingerprints: Fingerprints,
}

/// What the table is built from.
pub struct Snapshot {
    pub servers: Vec<ServerRecord>,
    pub tools: Vec<ToolRecord>,
    pub resources: Vec<(ServerId, Value)>,
    pub resource_templates: Vec<(ServerId, Value)>,
    pub prompts: Vec<(ServerId, Value)>,
}

impl RouteTable {
    pub fn build(snapshot: Snapshot, strategy: super::conflicts::ConflictStrategy) -> RouteTable {
        let mut table = RouteTable {
            strategy,
            ..RouteTable::default()
        };
        for server in &snapshot.servers {
            let name: Arc<str> = Arc::from(server.name.as_str());
            table.server_ids.insert(Arc::clone(&name), server.id);
            table.servers.insert(
                server.id,
                ServerEntry {
                    id: server.id,
                    name,
                    status: server.status,
                    priority: server.priority,
                    registered_at: server.registered_at,
                },
            );
        }
        let mut listed = Vec::new();
        let mut tools = snapshot.tools;
        tools.sort_by(|a, b| a.id.cmp(&b.id));
        for tool in tools {
            let Some(server) = table.servers.get(&tool.server_id) else {
                continue;
            };
            let route = Arc::new(Route {
                server_id: tool.server_id,
                server_name: Arc::clone(&server.name),
                original_name: Arc::from(tool.original_name.as_str()),
                tool_id: Arc::from(tool.id.as_str()),
                wire_name: tool.wire_name.as_deref().map(Arc::from),
            });
            table
                .namespaced
                .insert(Arc::clone(&route.tool_id), Arc::clone(&route));
            if let Some(wire) = &route.wire_name {
                table
                    .namespaced
                    .insert(Arc::clone(wire), Arc::clone(&route));
            }
            table
                .by_original
                .entry(Arc::clone(&route.original_name))
                .or_default()
                .push(Arc::clone(&route));
            table
                .by_server
                .entry(tool.server_id)
                .or_default()
                .insert(Arc::clone(&route.original_name), Arc::clone(&route));
            if server.status.is_available()
                && let Some(wire) = &tool.wire_name
            {
                let mut definition = tool.definition;
                if let Value::Object(map) = &mut definition {
                    map.insert("name".to_owned(), Value::String(wire.clone()));
                }
                listed.push(definition);
            }
        }
        table.tools = Arc::new(listed);
        let (aliases, conflicts) =
            super::conflicts::resolve(strategy, &table.by_original, &table.servers);
        table.aliases = aliases;
        table.conflicts = conflicts;

        let available = |id: &ServerId| {
            table
                .servers
                .get(id)
                .filter(|s| s.status.is_available())
                .map(|s| Arc::clone(&s.name))
        };
        let mut resources = Vec::new();
        for (id, mut item) in snapshot.resources {
            let Some(server) = available(&id) else {
                continue;
            };
            if let Some(namespaced) = rename(&mut item, "uri", |uri| {
                format!("{server}{RESOURCE_SEPARATOR}{uri}")
            }) {
                table.resource_routes.insert(
                    namespaced,
                    ItemRoute {
                        server_id: id,
                        original: original(&item, "uri", &server, RESOURCE_SEPARATOR),
                    },
                );
                resources.push(item);
            }
        }
        let mut templates = Vec::new();
        for (id, mut item) in snapshot.resource_templates {
            let Some(server) = available(&id) else {
                continue;
            };
            if rename(&mut item, "uriTemplate", |uri| {
                format!("{server}{RESOURCE_SEPARATOR}{uri}")
            })
            .is_some()
            {
                templates.push(item);
            }
        }
        let mut prompts = Vec::new();
        for (id, mut item) in snapshot.prompts {
            let Some(server) = available(&id) else {
                continue;
            };
            if let Some(namespaced) = rename(&mut item, "name", |name| {
                format!("{server}{PROMPT_SEPARATOR}{name}")
            }) {
                table.prompt_routes.insert(
                    namespaced,
                    ItemRoute {
                        server_id: id,
                        original: original(&item, "name", &server, PROMPT_SEPARATOR),
                    },
                );
                prompts.push(item);
            }
        }
        table.resources = Arc::new(resources);
        table.resource_templates = Arc::new(templates);
        table.prompts = Arc::new(prompts);
        table.fingerprints = Fingerprints {
            tools: fingerprint(&[&table.tools]),
            resources: fingerprint(&[&table.resources, &table.resource_templates]),
            prompts: fingerprint(&[&table.prompts]),
        };
        table
    }

    /// Every registered server with its status, as the table saw them.
    pub fn servers(&self) -> impl Iterator<Item = &ServerEntry> {
        self.servers.values()
    }

    /// The servers as search filters them.
    pub fn search_view(&self) -> Vec<crate::index::query::ServerView> {
        self.servers
            .values()
            .map(|s| crate::index::query::ServerView {
                id: s.id,
                name: s.name.to_string(),
                status: s.status,
            })
            .collect()
    }

    pub fn server(&self, id: ServerId) -> Option<&ServerEntry> {
        self.servers.get(&id)
    }

    /// A server by id (as text) or name.
    pub fn find_server(&self, id_or_name: &str) -> Option<&ServerEntry> {
        if let Some(id) = self.server_ids.get(id_or_name) {
            return self.servers.get(id);
        }
        uuid::Uuid::parse_str(id_or_name)
            .ok()
            .and_then(|id| self.servers.get(&id))
    }

    pub fn resource_route(&self, uri: &str) -> Option<&ItemRoute> {
        self.resource_routes.get(uri)
    }

    pub fn prompt_route(&self, name: &str) -> Option<&ItemRoute> {
        self.prompt_routes.get(name)
    }

    /// A namespaced resource URI for `server`'s `uri`.
    pub fn namespaced_uri(&self, server_id: ServerId, uri: &str) -> Option<String> {
        self.servers
            .get(&server_id)
            .map(|s| format!("{}{RESOURCE_SEPARATOR}{uri}", s.name))
    }

    /// Resolves a resource URI that is not listed (e.g. from a template):
    /// `server:uri` where `server` is a known server.
    pub fn parse_resource_uri(&self, uri: &str) -> Option<ItemRoute> {
        let (server, original) = uri.split_once(RESOURCE_SEPARATOR)?;
        let id = *self.server_ids.get(server)?;
        Some(ItemRoute {
            server_id: id,
            original: Arc::from(original),
        })
    }
}

/// Replaces `item[field]` with `f(item[field])`, returning the new value.
fn rename(item: &mut Value, field: &str, f: impl FnOnce(&str) -> String) -> Option<String> {
    let map: &mut Map<String, Value> = item.as_object_mut()?;
    let current = map.get(field)?.as_str()?;
    let renamed = f(current);
    map.insert(field.to_owned(), Value::String(renamed.clone()));
    Some(renamed)
}

fn original(item: &Value, field: &str, server: &str, separator: char) -> Arc<str> {
    let full = item.get(field).and_then(Value::as_str).unwrap_or_default();
    let prefix_len = server.len() + separator.len_utf8();
    Arc::from(full.get(prefix_len..).unwrap_or(full))
}

/// Hashes of the listable sets, to tell clients what changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fingerprints {
    pub tools: u64,
    pub resources: u64,
    pub prompts: u64,
}

/// A cheap hash of lists clients can read.
fn fingerprint(lists: &[&Arc<Vec<Value>>]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for list in lists {
        list.len().hash(&mut hasher);
        for item in list.iter() {
            item.to_string().hash(&mut hasher);
        }
    }
    hasher.finish()
}
