//! Views: what a client that picked a profile sees. The profiles are kept
//! compiled (reloaded from the registry when one changes); each view's
//! lists are cut from the current table once and kept until the table,
//! the profiles or tools' skills move; a call, a read or a prompt outside
//! the caller's view is refused as if nothing by that name existed.

use arc_swap::ArcSwap;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::routes::Route;
use super::table::{Fingerprints, RouteTable, fingerprint, tools_fingerprint};
use super::{CallError, Router};
use crate::index::SearchIndex;
use crate::model::{Profile, ProfileMatcher, ServerId};
use crate::registry::RegistryEvent;

/// The profiles and what their views list.
#[derive(Default)]
pub(super) struct Views {
    profiles: ArcSwap<HashMap<String, Compiled>>,
    /// Moves on each time the profiles are reloaded.
    version: AtomicU64,
    /// Tools' skills, for views that name skills.
    index: OnceLock<SearchIndex>,
    skills: OnceLock<tokio::sync::watch::Receiver<u64>>,
    /// Held while a view is cut: clients of one view woken together cut it
    /// once, the others find it cut.
    listed: Mutex<HashMap<String, Arc<ViewLists>>>,
    /// One reload at a time, so an older read never replaces a newer.
    reloading: tokio::sync::Mutex<()>,
}

/// A profile and its rules, compiled once (a large pattern list takes a
/// moment): kept while the profile stays the same view.
#[derive(Clone)]
struct Compiled {
    profile: Profile,
    matcher: Arc<ProfileMatcher>,
}

/// What one view lists, cut from one table.
#[derive(Debug)]
pub struct ViewLists {
    table: Weak<RouteTable>,
    profiles_version: u64,
    skills_version: u64,
    /// Positions in the table's `tools.routes` (and `tools.held`).
    pub tools: Vec<usize>,
    /// The ids of those tools (search looks among them only).
    pub tool_ids: Arc<HashSet<Arc<str>>>,
    pub resources: Arc<Vec<Value>>,
    pub resource_templates: Arc<Vec<Value>>,
    pub prompts: Arc<Vec<Value>>,
    fingerprints: Fingerprints,
    /// Servers with a tool in the view, and servers the view admits (for
    /// their resources and prompts): whose announcements reach it.
    servers_with_tools: HashSet<ServerId>,
    pub servers: HashSet<ServerId>,
}

impl Router {
    /// Lets views that name skills know tools' skills.
    pub fn use_index(&self, index: SearchIndex) {
        if self.views.skills.set(index.skill_changes()).is_ok() {
            self.spawn_skill_watch(index.skill_changes());
        }
        let _ = self.views.index.set(index);
    }

    /// Whether a profile of this name exists (read from the registry again
    /// when this process has not seen it yet: a config file applied a
    /// moment ago).
    pub async fn check_profile(&self, name: &str) -> Result<(), CallError> {
        if crate::model::profile::validate_profile_name(name).is_err() {
            return Err(CallError::UnknownProfile(name.to_owned()));
        }
        if self.views.profiles.load().contains_key(name) {
            return Ok(());
        }
        self.reload_profiles().await;
        match self.views.profiles.load().contains_key(name) {
            true => Ok(()),
            false => Err(CallError::UnknownProfile(name.to_owned())),
        }
    }

    /// Reads the profiles again now (an API write shows its view at once,
    /// before the registry's event arrives).
    pub async fn reload_profiles_now(&self) {
        self.reload_profiles().await;
    }

    /// Reads every profile from the registry again; clients' listeners
    /// look at their views again.
    pub(super) async fn reload_profiles(&self) {
        let _one_at_a_time = self.views.reloading.lock().await;
        let profiles = match self.sessions.registry().profiles().await {
            Ok(profiles) => profiles,
            Err(err) => {
                tracing::error!("cannot read the profiles: {err}");
                return;
            }
        };
        let before = self.views.profiles.load_full();
        let unchanged = profiles.len() == before.len()
            && profiles.iter().all(|p| {
                before
                    .get(&p.name)
                    .is_some_and(|known| known.profile.same_view(p))
            });
        if unchanged {
            return;
        }
        // A long pattern list takes a moment to compile: off the async
        // threads, and only the profiles that changed.
        let compiled = tokio::task::spawn_blocking(move || {
            profiles
                .into_iter()
                .map(|profile| {
                    let matcher = match before.get(&profile.name) {
                        Some(known) if known.profile.same_view(&profile) => {
                            Arc::clone(&known.matcher)
                        }
                        _ => Arc::new(ProfileMatcher::new(&profile)),
                    };
                    (profile.name.clone(), Compiled { profile, matcher })
                })
                .collect::<HashMap<_, _>>()
        })
        .await;
        let Ok(compiled) = compiled else { return };
        self.views.profiles.store(Arc::new(compiled));
        self.views.version.fetch_add(1, Ordering::Release);
        self.wake_listeners();
    }

    /// A profile's rules; a profile removed while clients use it admits
    /// nothing (a view never widens to everything by accident).
    fn matcher(&self, profile: &str) -> Arc<ProfileMatcher> {
        self.views
            .profiles
            .load()
            .get(profile)
            .map(|compiled| Arc::clone(&compiled.matcher))
            .unwrap_or_else(|| Arc::new(ProfileMatcher::nothing()))
    }

    /// Whether the caller's view (none: everything) has this tool.
    pub fn admits_route(&self, profile: Option<&str>, route: &Route) -> bool {
        let Some(profile) = profile else { return true };
        let matcher = self.matcher(profile);
        matcher.admits_named(
            &route.server_name,
            &route.tool_id,
            route.wire_name.as_deref(),
        ) && (!matcher.filters_skills()
            || self.views.index.get().is_some_and(|index| {
                index
                    .skills_of(&route.tool_id)
                    .iter()
                    .any(|skill| matcher.admits_skill(skill))
            }))
    }

    /// The positions in `table`'s tool list of the tools `pins` names,
    /// among `within` (a view's positions; none: every tool).
    pub fn pinned(
        &self,
        table: &RouteTable,
        pins: &crate::model::pinned_tools::PinnedTools,
        within: Option<&[usize]>,
    ) -> Vec<usize> {
        if pins.is_empty() {
            return Vec::new();
        }
        let by_skill: HashSet<Arc<str>> = match pins.names_skills() {
            true => self
                .views
                .index
                .get()
                .map(|index| index.tools_with_skill(&|skill| pins.pins_skill(skill)))
                .unwrap_or_default(),
            false => HashSet::new(),
        };
        let pinned = |at: usize| {
            table.tools.routes.get(at).is_some_and(|route| {
                pins.pins_named(
                    &route.server_name,
                    &route.tool_id,
                    route.wire_name.as_deref(),
                ) || by_skill.contains(&route.tool_id)
            })
        };
        match within {
            Some(positions) => positions.iter().copied().filter(|&at| pinned(at)).collect(),
            None => (0..table.tools.routes.len())
                .filter(|&at| pinned(at))
                .collect(),
        }
    }

    /// How many tools each skill has in the caller's view (none: every
    /// tool).
    pub fn skill_counts(&self, view: Option<&ViewLists>) -> Vec<(String, usize)> {
        self.views
            .index
            .get()
            .map(|index| index.skill_counts(view.map(|v| &*v.tool_ids)))
            .unwrap_or_default()
    }

    /// Whether the caller's view (none: everything) has this server's
    /// resources and prompts.
    pub fn admits_server(&self, profile: Option<&str>, server: ServerId) -> bool {
        let Some(profile) = profile else { return true };
        self.view_of(&self.table(), profile)
            .servers
            .contains(&server)
    }

    /// What a profile's view lists of `table` (the current table: a view
    /// of an older one is cut again each time).
    pub fn view_of(&self, table: &Arc<RouteTable>, profile: &str) -> Arc<ViewLists> {
        let profiles_version = self.views.version.load(Ordering::Acquire);
        // Only a view that names skills changes with them.
        let skills_version = match self.matcher(profile).filters_skills() {
            true => self.views.skills.get().map_or(0, |s| *s.borrow()),
            false => 0,
        };
        let current = |lists: &ViewLists| {
            Weak::ptr_eq(&lists.table, &Arc::downgrade(table))
                && lists.profiles_version == profiles_version
                && lists.skills_version == skills_version
        };
        let Ok(mut listed) = self.views.listed.lock() else {
            return Arc::new(self.cut_view(table, profile, profiles_version, skills_version));
        };
        if let Some(lists) = listed.get(profile).filter(|l| current(l)) {
            return Arc::clone(lists);
        }
        let lists = Arc::new(self.cut_view(table, profile, profiles_version, skills_version));
        listed.insert(profile.to_owned(), Arc::clone(&lists));
        lists
    }

    fn cut_view(
        &self,
        table: &Arc<RouteTable>,
        profile: &str,
        profiles_version: u64,
        skills_version: u64,
    ) -> ViewLists {
        let matcher = self.matcher(profile);
        let skilled: Option<HashSet<Arc<str>>> = matcher.filters_skills().then(|| {
            self.views
                .index
                .get()
                .map(|index| index.tools_with_skill(&|skill| matcher.admits_skill(skill)))
                .unwrap_or_default()
        });
        let mut tools = Vec::new();
        let mut tool_ids = HashSet::new();
        let mut servers_with_tools = HashSet::new();
        for (at, route) in table.tools.routes.iter().enumerate() {
            let admitted = matcher.admits_named(
                &route.server_name,
                &route.tool_id,
                route.wire_name.as_deref(),
            ) && skilled
                .as_ref()
                .is_none_or(|ids| ids.contains(&route.tool_id));
            if admitted {
                tools.push(at);
                tool_ids.insert(Arc::clone(&route.tool_id));
                servers_with_tools.insert(route.server_id);
            }
        }
        // Whose resources and prompts the view has: the servers it names;
        // else, when it names tools or skills, the servers of its tools;
        // else every server.
        let servers: HashSet<ServerId> =
            if !matcher.names_servers() && matcher.names_tools_or_skills() {
                servers_with_tools.clone()
            } else {
                table
                    .servers()
                    .filter(|s| matcher.admits_server(&s.name))
                    .map(|s| s.id)
                    .collect()
            };
        let keep = |items: &[Value], field: &str, route: &dyn Fn(&str) -> Option<ServerId>| {
            Arc::new(
                items
                    .iter()
                    .filter(|item| {
                        item.get(field)
                            .and_then(Value::as_str)
                            .and_then(route)
                            .is_some_and(|id| servers.contains(&id))
                    })
                    .cloned()
                    .collect::<Vec<_>>(),
            )
        };
        let resources = keep(&table.resources, "uri", &|uri| {
            table.resource_routes.get(uri).map(|r| r.server_id)
        });
        let resource_templates = keep(&table.resource_templates, "uriTemplate", &|uri| {
            table.template_routes.get(uri).map(|r| r.server_id)
        });
        let prompts = keep(&table.prompts, "name", &|name| {
            table.prompt_routes.get(name).map(|r| r.server_id)
        });
        let fingerprints = Fingerprints {
            tools: tools_fingerprint(tools.iter().filter_map(|&at| table.tools.hashes.get(at))),
            resources: fingerprint(&[&resources, &resource_templates]),
            prompts: fingerprint(&[&prompts]),
        };
        ViewLists {
            table: Arc::downgrade(table),
            profiles_version,
            skills_version,
            tools,
            tool_ids: Arc::new(tool_ids),
            resources,
            resource_templates,
            prompts,
            fingerprints,
            servers_with_tools,
            servers,
        }
    }

    /// What a client of this view (none: everything) can list, as hashes:
    /// its lists', moved on by the announcements of the servers in it.
    pub fn fingerprints_for(&self, profile: Option<&str>) -> Fingerprints {
        let Some(profile) = profile else {
            return *self.changes.borrow();
        };
        let view = self.view_of(&self.table(), profile);
        let mut epochs = Fingerprints::default();
        if let Ok(by_server) = self.announced_by.lock() {
            for (server, announced) in by_server.iter() {
                if view.servers_with_tools.contains(server) {
                    epochs.tools = epochs.tools.wrapping_add(announced.tools);
                }
                if view.servers.contains(server) {
                    epochs.resources = epochs.resources.wrapping_add(announced.resources);
                    epochs.prompts = epochs.prompts.wrapping_add(announced.prompts);
                }
            }
        }
        view.fingerprints.with_epochs(epochs)
    }

    /// Wakes every client's listener, to look at its view again (the
    /// aggregate may be unchanged).
    fn wake_listeners(&self) {
        self.changes.send_modify(|_| {});
    }

    /// Follows profile changes.
    pub(super) fn spawn_view_keeper(&self) {
        let router = self.clone();
        let mut events = self.sessions.registry().subscribe();
        tokio::spawn(async move {
            router.reload_profiles().await;
            loop {
                match events.recv().await {
                    Ok(RegistryEvent::ProfileChanged { .. })
                    | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        router.reload_profiles().await;
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        });
    }

    /// Follows tools' skills: views that name skills can change with them.
    fn spawn_skill_watch(&self, mut skills: tokio::sync::watch::Receiver<u64>) {
        let router = self.clone();
        tokio::spawn(async move {
            while skills.changed().await.is_ok() {
                let any_by_skill = router
                    .views
                    .profiles
                    .load()
                    .values()
                    .any(|compiled| compiled.matcher.filters_skills());
                if any_by_skill {
                    router.wake_listeners();
                }
            }
        });
    }
}
