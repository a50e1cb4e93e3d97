//! Keeping the table current: rebuilt from the store on catalog and
//! status events (a burst let settle first), list changes announced to
//! clients, the resource cache kept in step, and the waits a list or an
//! unknown name makes while servers are starting.

use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

use super::table::{Fingerprints, RouteTable, Snapshot};
use super::{CallError, Router, cache, table};
use crate::model::CatalogKind;
use crate::registry::RegistryEvent;

/// The definitions `table` lists (those at `positions` in its list, or
/// all), as `tools/list` shows them, read from `store` (tools removed since
/// the table was built are left out).
pub(super) fn read_listed(
    store: &crate::store::Store,
    table: &RouteTable,
    positions: Option<&[usize]>,
) -> Result<Vec<Box<serde_json::value::RawValue>>, crate::store::StoreError> {
    let all = &table.tools.routes;
    let routes: Vec<&Arc<super::Route>> = match positions {
        Some(positions) => positions.iter().filter_map(|&at| all.get(at)).collect(),
        None => all.iter().collect(),
    };
    let definitions =
        store.tool_definitions(routes.iter().map(|r| (r.server_id, &*r.original_name)))?;
    Ok(routes
        .into_iter()
        .zip(definitions)
        .filter_map(|(route, definition)| {
            table::listed_as(&definition?, route.wire_name.as_deref()?)
        })
        .collect())
}

/// The least a burst of changes is let settle before the table is rebuilt.
const SETTLE: Duration = Duration::from_millis(5);
/// The most: a change shows in the table within about this much more than
/// a rebuild takes.
const MAX_SETTLE: Duration = Duration::from_secs(1);

impl Router {
    /// Many clients list once when they start and ignore `list_changed`:
    /// while `auto_connect` servers are still on their first attempt, wait
    /// for them (bounded) and answer from a table that includes them. Once
    /// start-up is over it costs one read of the store's generation.
    pub async fn settle_startup(&self) {
        if self.sessions.wait_started(self.startup_wait).await {
            self.rebuild().await;
        } else {
            // A server that just finished starting has stored its lists a
            // moment before the table that shows them is rebuilt.
            self.catch_up().await;
        }
    }

    /// How long a request made at start-up waits for servers still starting.
    pub fn startup_wait(&self) -> Duration {
        self.startup_wait
    }

    /// Rebuilds the table from the store.
    pub async fn rebuild(&self) {
        // Sessions closing at shutdown change every status: a table of
        // 100,000 tools rebuilt for each would hold the exit up for seconds.
        if self.sessions.is_closing() {
            return;
        }
        let _one_at_a_time = self.rebuilding.lock().await;
        let store = Arc::clone(self.sessions.registry().store());
        let strategy = self.strategy;
        let built =
            tokio::task::spawn_blocking(move || -> Result<RouteTable, crate::store::StoreError> {
                // Read first: a write landing meanwhile only makes the
                // table look older than it is (one rebuild too many).
                let generation = store.generation()?;
                let mut table = RouteTable::build(
                    Snapshot {
                        servers: store.list_servers()?,
                        resources: store.all_items(CatalogKind::Resource)?,
                        resource_templates: store.all_items(CatalogKind::ResourceTemplate)?,
                        prompts: store.all_items(CatalogKind::Prompt)?,
                    },
                    strategy,
                    |add| store.for_each_tool_route(add),
                )?;
                table.generation = generation;
                Ok(table)
            })
            .await;
        match built {
            Ok(Ok(table)) => {
                self.table.store(Arc::new(table));
                self.publish();
                // The snapshot the table was built from is gone: give its
                // pages back (a catalog of 10,000 tools is tens of MB).
                crate::memory::release_freed();
            }
            Ok(Err(err)) => tracing::error!("cannot rebuild the routing table: {err}"),
            Err(err) => tracing::error!("the routing table task failed: {err}"),
        }
    }

    /// The definitions `table` lists (those at `positions`, or all), read
    /// from the store: a catalog too large for the table to hold them
    /// (`ListedTools::held` is `None`).
    /// Tools removed since the table was built are left out.
    pub async fn read_listed_tools(
        &self,
        table: Arc<RouteTable>,
        positions: Option<Vec<usize>>,
    ) -> Result<Vec<Box<serde_json::value::RawValue>>, CallError> {
        let store = Arc::clone(self.sessions.registry().store());
        let read =
            tokio::task::spawn_blocking(move || read_listed(&store, &table, positions.as_deref()))
                .await;
        match read {
            Ok(Ok(listed)) => Ok(listed),
            Ok(Err(err)) => Err(CallError::Catalog(err.to_string())),
            Err(err) => Err(CallError::Catalog(err.to_string())),
        }
    }

    /// A server said one of its lists changed (after we listed it again):
    /// clients are told, even if the aggregate is the same, as a client of
    /// that server alone would be.
    pub(super) fn spawn_announce(
        &self,
        server: crate::model::ServerId,
        list: fn(&mut Fingerprints) -> &mut u64,
    ) {
        let router = self.clone();
        tokio::spawn(async move { router.announce(server, list).await });
    }

    pub(super) async fn announce(
        &self,
        server: crate::model::ServerId,
        list: fn(&mut Fingerprints) -> &mut u64,
    ) {
        // The table first holds what was just listed.
        self.catch_up().await;
        let bump = |epochs: &mut Fingerprints| {
            let epoch = list(epochs);
            *epoch = epoch.wrapping_add(1);
        };
        if let Ok(mut by_server) = self.announced_by.lock() {
            bump(by_server.entry(server).or_default());
        }
        if let Ok(mut epochs) = self.announced.lock() {
            bump(&mut epochs);
        }
        self.publish();
    }

    /// Tells the clients' listeners what they can list now: the current
    /// table's hashes moved on by the announcements. Read under the
    /// channel's lock, so a rebuild that publishes after an announcement
    /// can never put back the value from before it (a change seen as none).
    pub(super) fn publish(&self) {
        self.changes.send_if_modified(|published| {
            let epochs = self.announced.lock().map(|e| *e).unwrap_or_default();
            let now = self.table.load().fingerprints.with_epochs(epochs);
            let changed = *published != now;
            *published = now;
            changed
        });
    }

    /// Keeps the cache honest: an updated resource, a changed list, or a
    /// server that went away drops what was cached from it.
    pub(super) fn spawn_cache_keeper(&self) {
        let router = self.clone();
        let mut notices = self.sessions.notices();
        let mut registry_events = self.sessions.registry().subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    notice = notices.recv() => match notice {
                        Ok(notice) => match notice.message.get("method").and_then(Value::as_str) {
                            Some("notifications/resources/updated") => {
                                if let Some(uri) = notice.message["params"]["uri"].as_str() {
                                    router.cache.invalidate(&cache::key(notice.server_id, uri));
                                }
                            }
                            Some("notifications/resources/list_changed") => {
                                router.cache.invalidate_server(notice.server_id);
                                router.spawn_announce(notice.server_id, |f| &mut f.resources);
                            }
                            Some("notifications/tools/list_changed") => router.spawn_announce(notice.server_id, |f| &mut f.tools),
                            Some("notifications/prompts/list_changed") => router.spawn_announce(notice.server_id, |f| &mut f.prompts),
                            _ => {}
                        },
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                    event = registry_events.recv() => match event {
                        Ok(RegistryEvent::StatusChanged { id, status, .. }) if !status.is_available() => router.cache.invalidate_server(id),
                        Ok(RegistryEvent::Removed { id, .. }) => router.cache.invalidate_server(id),
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                }
            }
        });
    }

    /// Rebuilds on every catalog change and status change, coalescing bursts.
    pub(super) fn spawn_maintainer(&self) {
        let router = self.clone();
        let mut registry_events = self.sessions.registry().subscribe();
        let mut catalog_events = self.sessions.catalog().subscribe();
        tokio::spawn(async move {
            // How long a burst is let settle: 5 ms, or as long as the last
            // rebuild took. A table of 100,000 tools takes ~0.4 s; while
            // 200 servers connect one after another it was rebuilt back to
            // back, each time a new table of ~40 MB among the start's
            // other allocations. Now at most half the time goes to it.
            let mut settle = SETTLE;
            loop {
                let relevant = tokio::select! {
                    event = registry_events.recv() => match event {
                        Ok(RegistryEvent::StatusChanged { .. } | RegistryEvent::Removed { .. } | RegistryEvent::Registered { .. } | RegistryEvent::Updated { .. } | RegistryEvent::TrustDecided { .. }) => true,
                        Ok(RegistryEvent::ProfileChanged { .. }) => false,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                    event = catalog_events.recv() => match event {
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                };
                if relevant {
                    // Let a burst (a server's status + its discovery) settle.
                    tokio::time::sleep(settle).await;
                    while registry_events.try_recv().is_ok() || catalog_events.try_recv().is_ok() {}
                    let started = std::time::Instant::now();
                    router.rebuild().await;
                    settle = started.elapsed().clamp(SETTLE, MAX_SETTLE);
                }
            }
        });
    }

    /// For a name the table does not know: waits for servers still
    /// starting, and rebuilds the table if the store moved since it was
    /// read (a server's tools can be stored a moment before the table that
    /// routes them is rebuilt). Only on a miss, never on the hot path.
    pub async fn settle(&self) {
        if self.sessions.wait_connected(self.startup_wait).await {
            self.rebuild().await;
        }
        self.catch_up().await;
    }

    /// Rebuilds the table if the store moved since it was built.
    pub(super) async fn catch_up(&self) {
        let store = Arc::clone(self.sessions.registry().store());
        let current = tokio::task::spawn_blocking(move || store.generation())
            .await
            .ok()
            .and_then(Result::ok);
        if current.is_some_and(|generation| generation != self.table().generation) {
            self.rebuild().await;
        }
    }
}
