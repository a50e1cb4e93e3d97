//! The routing table: everything a call needs, in memory, built from the
//! store and swapped atomically when the catalog or a status changes. The
//! hot path is a hash lookup in it; nothing here touches the disk (a very
//! large catalog's listed definitions stay in the store: `ListedTools`).

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::conflicts::{Conflict, ConflictStrategy};
use super::routes::{ItemRoute, PROMPT_SEPARATOR, RESOURCE_SEPARATOR, Route, ServerEntry};
use crate::model::tool::definition_field;
use crate::model::{ServerId, ServerRecord};
use crate::store::ToolRoute;

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
    pub conflicts: Vec<Conflict>,
    pub strategy: ConflictStrategy,
    /// Routes per server, by original name (for calls that name the server).
    pub(super) by_server: HashMap<ServerId, HashMap<Arc<str>, Arc<Route>>>,
    pub(super) servers: HashMap<ServerId, ServerEntry>,
    pub(super) server_ids: HashMap<Arc<str>, ServerId>,
    /// Tools kept but not offered (held back by the trust checks, or
    /// refused), by wire name and tool id: why, for a call naming one.
    pub(super) withheld: HashMap<Arc<str>, Arc<str>>,
    /// Prompts held back by the trust checks, by namespaced name: whose,
    /// and why.
    pub(super) withheld_prompts: HashMap<String, (ServerId, Arc<str>)>,
    /// `tools/list` for clients.
    pub tools: ListedTools,
    pub resources: Arc<Vec<Value>>,
    pub resource_templates: Arc<Vec<Value>>,
    pub prompts: Arc<Vec<Value>>,
    pub(super) resource_routes: HashMap<String, ItemRoute>,
    pub(super) prompt_routes: HashMap<String, ItemRoute>,
    /// Namespaced resource templates, for completions that name one.
    pub(super) template_routes: HashMap<String, ItemRoute>,
    /// Servers' own resource URIs and prompt names, for clients that use
    /// them as the server gave them: each reaches the server the conflict
    /// strategy picks among those offering it.
    pub(super) resource_aliases: HashMap<String, ItemRoute>,
    /// Servers' own URIs that several servers list and the conflict
    /// strategy gave to none: such a URI reaches no server, not one
    /// whose template happens to match it.
    pub(super) ambiguous_resources: HashSet<String>,
    /// The UI resources tools name in their `_meta` (own URIs), by the
    /// servers whose tools name them: a host reading a tool's UI reaches
    /// that tool's server, never another that lists or templates the same
    /// URI.
    pub(super) ui_owners: HashMap<String, Vec<ServerId>>,
    pub(super) prompt_aliases: HashMap<String, ItemRoute>,
    /// Every available server's own templates, to route a URI built from
    /// one.
    pub(super) templates: Vec<(ItemRoute, regex::Regex)>,
    /// Change whenever what a client would list changes: tools, resources
    /// (and templates), prompts.
    pub fingerprints: Fingerprints,
    /// The store's generation when the table was read from it.
    pub generation: u64,
}

/// Listed definitions are kept in the table up to this much text (about
/// 20,000 tools); a larger catalog's are read from the store for each
/// full `tools/list` (a hundred thousand tools' are ~140 MB).
const HELD_LISTING_BYTES: usize = 32 << 20;

/// What `tools/list` offers clients: available servers' tools under their
/// wire names, definitions otherwise unchanged, ordered by tool id.
#[derive(Debug, Default)]
pub struct ListedTools {
    /// Whose definitions, in order.
    pub routes: Vec<Arc<Route>>,
    /// Each listed definition's hash (with its wire name), in the same
    /// order: a view's fingerprint is made of those it lists.
    pub(super) hashes: Vec<u64>,
    /// The definitions as listed, as JSON text (a definition is only ever
    /// written out), unless they would take more than
    /// `HELD_LISTING_BYTES`.
    pub held: Option<Vec<Box<RawValue>>>,
}

impl ListedTools {
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// A listed tool's definition hash and, when the table holds them, its
    /// definition as listed.
    pub fn definition(&self, route: &Route) -> Option<(u64, Option<&RawValue>)> {
        let at = self
            .routes
            .binary_search_by(|listed| listed.tool_id.cmp(&route.tool_id))
            .ok()?;
        let held = self.held.as_ref().and_then(|held| held.get(at));
        Some((*self.hashes.get(at)?, held.map(|d| &**d)))
    }
}

/// What the table is built from (tools apart: they are read in place).
pub struct Snapshot {
    pub servers: Vec<ServerRecord>,
    pub resources: Vec<(ServerId, Value)>,
    pub resource_templates: Vec<(ServerId, Value)>,
    pub prompts: Vec<(ServerId, Value)>,
}

impl RouteTable {
    /// The table for `snapshot` and the tools `tools` hands, one by one,
    /// to the function it is given (`Store::for_each_tool_route`; called
    /// twice when the listed definitions are held).
    pub fn build<E>(
        snapshot: Snapshot,
        strategy: super::conflicts::ConflictStrategy,
        tools: impl Fn(&mut dyn FnMut(ToolRoute<'_>)) -> Result<(), E>,
    ) -> Result<RouteTable, E> {
        RouteTable::build_holding(snapshot, strategy, HELD_LISTING_BYTES, tools)
    }

    /// `build`, holding listed definitions up to `held_listing` bytes.
    pub(super) fn build_holding<E>(
        snapshot: Snapshot,
        strategy: super::conflicts::ConflictStrategy,
        held_listing: usize,
        tools: impl Fn(&mut dyn FnMut(ToolRoute<'_>)) -> Result<(), E>,
    ) -> Result<RouteTable, E> {
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
                    limits: Arc::new(server.trust.limits.clone()),
                    validate_arguments: server.trust.validate_arguments,
                },
            );
        }
        // Each route, and whether clients list it. Listed definitions are
        // held only for a catalog whose text fits `held_listing`: read in
        // a second pass once that is known, so a large catalog never has
        // them all in memory at once.
        let mut routes: Vec<(Arc<Route>, Option<u64>)> = Vec::new();
        let mut listed_bytes = 0usize;
        let mut ui_owners: HashMap<String, Vec<ServerId>> = HashMap::new();
        tools(&mut |tool: ToolRoute<'_>| {
            let Some(server) = table.servers.get(&tool.server_id) else {
                return;
            };
            // Held tools too: their UI stays theirs. Most tools name none,
            // and their definitions are not parsed for it.
            let text = tool.definition.get();
            if (text.contains("resourceUri") || text.contains("outputTemplate"))
                && let Some(meta) = definition_field(tool.definition, "_meta")
            {
                for uri in crate::model::tool::ui_resource_uris(&meta) {
                    let owners = ui_owners.entry(uri.to_owned()).or_default();
                    if !owners.contains(&tool.server_id) {
                        owners.push(tool.server_id);
                    }
                }
            }
            if let Some(reason) = &tool.refused {
                if table.servers.contains_key(&tool.server_id) {
                    let reason: Arc<str> = Arc::from(&**reason);
                    if let Some(wire) = &tool.wire_name {
                        table
                            .withheld
                            .insert(Arc::from(&**wire), Arc::clone(&reason));
                    }
                    table.withheld.insert(Arc::from(&*tool.id), reason);
                }
                return;
            }
            // A tool whose x-mcp-header annotations are invalid is left
            // out (2026-07-28 asks clients to exclude it; discovery warns).
            // Most tools have none: their schema is not parsed for them.
            // The key appears as it is in the text unless escaped.
            let header_params = if text.contains("x-mcp-header") || text.contains("\\u") {
                match crate::model::param_headers::header_params(
                    definition_field(tool.definition, "inputSchema").as_ref(),
                ) {
                    Ok(params) => params,
                    Err(_) => return,
                }
            } else {
                Vec::new()
            };
            let route = Arc::new(Route {
                server_id: tool.server_id,
                server_name: Arc::clone(&server.name),
                original_name: Arc::from(&*tool.original_name),
                tool_id: Arc::from(&*tool.id),
                wire_name: tool.wire_name.as_deref().map(Arc::from),
                header_params: header_params.into(),
            });
            let listed = match (server.status.is_available(), &route.wire_name) {
                (true, Some(wire)) => {
                    listed_bytes += text.len();
                    Some(hash_of(&(&**wire, text)))
                }
                _ => None,
            };
            routes.push((route, listed));
        })?;
        routes.sort_unstable_by(|a, b| a.0.tool_id.cmp(&b.0.tool_id));
        let mut listed = ListedTools::default();
        for (route, is_listed) in routes {
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
                .entry(route.server_id)
                .or_default()
                .insert(Arc::clone(&route.original_name), Arc::clone(&route));
            if let Some(hash) = is_listed {
                listed.routes.push(route);
                listed.hashes.push(hash);
            }
        }
        if listed_bytes <= held_listing {
            let position: HashMap<&str, usize> = listed
                .routes
                .iter()
                .enumerate()
                .map(|(i, r)| (&*r.tool_id, i))
                .collect();
            let mut held: Vec<Option<Box<RawValue>>> = vec![None; listed.routes.len()];
            tools(&mut |tool: ToolRoute<'_>| {
                if let Some(&at) = position.get(&*tool.id)
                    && let Some(wire) = &listed.routes[at].wire_name
                {
                    held[at] = listed_as(tool.definition, wire);
                }
            })?;
            // A definition that is not an object (or a tool gone between
            // the passes) is not listed.
            (listed.routes, listed.hashes) = std::mem::take(&mut listed.routes)
                .into_iter()
                .zip(std::mem::take(&mut listed.hashes))
                .zip(&held)
                .filter_map(|(listed, definition)| definition.is_some().then_some(listed))
                .unzip();
            listed.held = Some(held.into_iter().flatten().collect());
        }
        table.tools = listed;
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
        let mut resource_offers: HashMap<String, Vec<ServerId>> = HashMap::new();
        for (id, mut item) in snapshot.resources {
            let Some(server) = available(&id) else {
                continue;
            };
            if let Some(own) = item.get("uri").and_then(Value::as_str) {
                resource_offers.entry(own.to_owned()).or_default().push(id);
            }
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
            // Held back by the trust checks: not offered.
            if item.get(crate::model::ITEM_TRUST_FIELD).is_some() {
                continue;
            }
            if let Some(namespaced) = rename(&mut item, "uriTemplate", |uri| {
                format!("{server}{RESOURCE_SEPARATOR}{uri}")
            }) {
                let route = ItemRoute {
                    server_id: id,
                    original: original(&item, "uriTemplate", &server, RESOURCE_SEPARATOR),
                };
                if let Some(matcher) = template_matcher(&route.original) {
                    table.templates.push((route.clone(), matcher));
                }
                table.template_routes.insert(namespaced, route);
                templates.push(item);
            }
        }
        let mut prompts = Vec::new();
        let mut prompt_offers: HashMap<String, Vec<ServerId>> = HashMap::new();
        for (id, mut item) in snapshot.prompts {
            let Some(server) = available(&id) else {
                continue;
            };
            if let Some(trust) = crate::model::ItemTrust::of(&item) {
                if let Some(name) = item.get("name").and_then(Value::as_str) {
                    table.withheld_prompts.insert(
                        format!("{server}{PROMPT_SEPARATOR}{name}"),
                        (id, Arc::from(trust.hold.message)),
                    );
                }
                continue;
            }
            if let Some(own) = item.get("name").and_then(Value::as_str) {
                prompt_offers.entry(own.to_owned()).or_default().push(id);
            }
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
        table.ui_owners = ui_owners;
        table.ambiguous_resources = resource_offers
            .iter()
            .filter(|(_, offered_by)| offered_by.len() > 1)
            .map(|(uri, _)| uri.clone())
            .collect();
        table.resource_aliases = table.aliases_of(resource_offers);
        table
            .ambiguous_resources
            .retain(|uri| !table.resource_aliases.contains_key(uri));
        table.prompt_aliases = table.aliases_of(prompt_offers);
        table.resources = Arc::new(resources);
        table.resource_templates = Arc::new(templates);
        table.prompts = Arc::new(prompts);
        table.fingerprints = Fingerprints {
            tools: tools_fingerprint(table.tools.hashes.iter()),
            resources: fingerprint(&[&table.resources, &table.resource_templates]),
            prompts: fingerprint(&[&table.prompts]),
        };
        Ok(table)
    }

    /// What each server-own name reaches under the conflict strategy.
    fn aliases_of(&self, offers: HashMap<String, Vec<ServerId>>) -> HashMap<String, ItemRoute> {
        offers
            .into_iter()
            .filter_map(|(own, offered_by)| {
                let server_id = self.pick(&offered_by)?;
                let original = Arc::from(own.as_str());
                Some((
                    own,
                    ItemRoute {
                        server_id,
                        original,
                    },
                ))
            })
            .collect()
    }

    /// The one server of several offering the same thing that a bare name
    /// reaches.
    fn pick(&self, offered_by: &[ServerId]) -> Option<ServerId> {
        match offered_by {
            [only] if self.strategy != super::conflicts::ConflictStrategy::ExplicitOnly => {
                Some(*only)
            }
            _ => super::conflicts::pick(self.strategy, offered_by, &self.servers).0,
        }
    }

    /// Where a resource URI a client used goes, and whether it was in the
    /// namespaced form (`server:uri`, as listed) or the server's own. In
    /// order: a listed URI, a tool's UI (to the tool's server only), a
    /// server's own listed URI (none when several list it and none was
    /// picked), `server:` and a URI the server will understand (built from
    /// a template), a URI built from a server's own template.
    pub fn route_resource(&self, uri: &str) -> Option<(ItemRoute, UriForm)> {
        if let Some(route) = self.resource_routes.get(uri) {
            return Some((route.clone(), UriForm::Namespaced));
        }
        let own = |server_id| {
            Some((
                ItemRoute {
                    server_id,
                    original: Arc::from(uri),
                },
                UriForm::Own,
            ))
        };
        if let Some(owners) = self.ui_owners.get(uri) {
            // One server's tool names it: that server, whatever the
            // strategy (no other may answer it, so nothing is ambiguous).
            return match owners.as_slice() {
                [only] => own(*only),
                _ => own(self.pick(owners)?),
            };
        }
        if let Some(route) = self.resource_aliases.get(uri) {
            return Some((route.clone(), UriForm::Own));
        }
        if self.ambiguous_resources.contains(uri) {
            return None;
        }
        if let Some(route) = self.parse_resource_uri(uri) {
            return Some((route, UriForm::Namespaced));
        }
        let offered_by: Vec<ServerId> = self
            .templates
            .iter()
            .filter(|(_, matcher)| matcher.is_match(uri))
            .map(|(t, _)| t.server_id)
            .collect();
        own(self.pick(&offered_by)?)
    }

    /// Where a prompt name a client used goes (namespaced or the server's own).
    pub fn route_prompt(&self, name: &str) -> Option<&ItemRoute> {
        self.prompt_routes
            .get(name)
            .or_else(|| self.prompt_aliases.get(name))
    }

    /// Where a resource template a client named (in a completion) goes.
    pub fn route_template(&self, template: &str) -> Option<ItemRoute> {
        if let Some(route) = self.template_routes.get(template) {
            return Some(route.clone());
        }
        let offered_by: Vec<ServerId> = self
            .templates
            .iter()
            .filter(|(t, _)| &*t.original == template)
            .map(|(t, _)| t.server_id)
            .collect();
        let server_id = self.pick(&offered_by)?;
        Some(ItemRoute {
            server_id,
            original: Arc::from(template),
        })
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

    /// Why a prompt is held back, and whose it is, if it is.
    pub fn withheld_prompt(&self, name: &str) -> Option<&(ServerId, Arc<str>)> {
        self.withheld_prompts.get(name)
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

/// How a client named a resource: as listed (`server:uri`) or by the
/// server's own URI. Answers and updates use the client's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UriForm {
    Namespaced,
    Own,
}

/// A matcher for the URIs an RFC 6570 template expands to. Literal parts
/// match exactly; `{var}` one or more characters other than `/ ? # &`;
/// `{+var}` and `{#var}` anything non-empty; `{?…}`, `{&…}`, `{/…}`,
/// `{.…}` and `{;…}` nothing, or a part starting with their operator.
/// A regex, so matching a client's URI takes linear time whatever the
/// template. `None` for a template that is not one.
pub fn template_matcher(template: &str) -> Option<regex::Regex> {
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}')?;
        pattern.push_str(&regex::escape(&rest[..open]));
        pattern.push_str(match rest[open + 1..close].chars().next() {
            Some('+' | '#') => "(?:.+)",
            Some('?') => r"(?:\?.*)?",
            Some('&') => "(?:&.*)?",
            Some('/') => "(?:/.*)?",
            Some('.') => r"(?:\..*)?",
            Some(';') => "(?:;.*)?",
            _ => "(?:[^/?#&]+)",
        });
        rest = &rest[close + 1..];
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    regex::RegexBuilder::new(&pattern)
        .size_limit(1 << 20)
        .build()
        .ok()
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

impl Fingerprints {
    /// These hashes moved on by `epochs` (the times servers announced a
    /// change): a server's own list_changed reaches clients even when the
    /// aggregate did not change.
    pub fn with_epochs(self, epochs: Fingerprints) -> Fingerprints {
        Fingerprints {
            tools: self.tools.wrapping_add(epochs.tools),
            resources: self.resources.wrapping_add(epochs.resources),
            prompts: self.prompts.wrapping_add(epochs.prompts),
        }
    }
}

/// A tool's definition as clients list it: under its wire name, the rest
/// as the server wrote it.
pub(super) fn listed_as(definition: &RawValue, wire: &str) -> Option<Box<RawValue>> {
    let mut members = crate::jsonrpc::Members::read(definition).ok()?;
    members.set("name", crate::jsonrpc::to_raw(&wire).ok()?);
    members.to_raw().ok()
}

/// The fingerprint of a tool list, from its definitions' hashes.
pub(super) fn tools_fingerprint<'a>(hashes: impl Iterator<Item = &'a u64>) -> u64 {
    let (count, sum) = hashes.fold((0usize, 0u64), |(count, sum), hash| {
        (count + 1, sum.wrapping_add(*hash))
    });
    hash_of(&(count, sum))
}

/// A cheap hash of lists clients can read.
pub(super) fn fingerprint<T: std::fmt::Display>(lists: &[&Arc<Vec<T>>]) -> u64 {
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

fn hash_of(value: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher as _;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod template_tests {
    fn template_matches(template: &str, uri: &str) -> bool {
        super::template_matcher(template).is_some_and(|m| m.is_match(uri))
    }

    #[test]
    fn uris_built_from_templates_match_them() {
        assert!(template_matches(
            "test://template/{id}/data",
            "test://template/123/data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template/1/2/data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template/1/data/x"
        ));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(template_matches(
            "search://{q}{?limit,page}",
            "search://cats?limit=3"
        ));
        assert!(template_matches(
            "search://{q}{?limit,page}",
            "search://cats"
        ));
        assert!(!template_matches("a/{x", "a/b"));
        assert!(template_matches("plain://thing", "plain://thing"));
        assert!(template_matches("{a}{b}{c}{d}", &"x".repeat(100_000)));
        assert!(template_matches("a.b://{x}", "a.b://y"));
        assert!(!template_matches("a.b://{x}", "aXb://y"));
    }
}
