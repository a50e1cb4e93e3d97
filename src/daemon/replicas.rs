//! One replica among several on a shared PostgreSQL store (`serve
//! --store`): opening the store, the replica's heartbeat, and following
//! the other replicas' commits. Each commit another replica announces
//! becomes the event this process's own write would have sent, so the
//! router, the search index, the sessions, the named tokens, the skills
//! and the logins follow it as they follow a local change. Nothing polls
//! the tables: the announcements come over a connection of their own,
//! and when it is lost and found again everything is looked at once.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::{DaemonError, ReplicaStatus, SharedStore};
use crate::api::tokens::Tokens;
use crate::model::{ServerId, ServerRecord};
use crate::registry::{Registry, RegistryEvent};
use crate::router::Router;
use crate::skills::Skills;
use crate::store::Store;
use crate::store::postgres::{PgTables, PgTarget};

/// How often a replica says it is alive (`cluster status` shows those
/// seen within `cluster::SEEN_WITHIN`).
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// How long the announcement thread waits before it looks whether the
/// daemon is stopping.
const LISTEN_TICK: Duration = Duration::from_millis(500);
/// How long it waits before it reconnects a lost announcement connection.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// The replicas seen within `within`, for `cluster status`. Blocking.
pub(super) fn seen(
    shared: &SharedStore,
    within: Duration,
) -> Result<Vec<ReplicaStatus>, DaemonError> {
    let tables = connect(shared, "cluster-status")?;
    let seen = tables
        .replicas_seen(within)
        .map_err(|err| DaemonError::Store(err.into()))?;
    Ok(seen
        .into_iter()
        .map(|r| ReplicaStatus {
            id: r.id,
            address: r.address,
            version: r.version,
            up_seconds: r.up_ms / 1000,
            seen_seconds_ago: r.seen_ms_ago / 1000,
        })
        .collect())
}

/// The shared tables, their schema brought to this build's. Blocking.
fn connect(shared: &SharedStore, origin: &str) -> Result<PgTables, DaemonError> {
    let target = PgTarget::new(&shared.url, shared.password_file.as_deref())
        .map_err(|err| DaemonError::SharedStore(err.to_string()))?;
    PgTables::connect(target, origin).map_err(|err| {
        if err.is_bad_setting() {
            DaemonError::SharedStore(err.to_string())
        } else {
            DaemonError::Store(err.into())
        }
    })
}

/// Opens the data dir's file with the shared tables on PostgreSQL.
/// Blocking. A mistake in the address or the password's source is bad
/// input (exit 2); a database that cannot be reached is an error to retry.
pub(super) fn open_store(data_dir: &Path, shared: &SharedStore) -> Result<Store, DaemonError> {
    // The id names the replica; the nonce tells this process's commits
    // from those of another started with the same id.
    let origin = format!(
        "{}/{}",
        shared.replica_id,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let tables = connect(shared, &origin)?;
    Ok(Store::open_shared(data_dir, tables)?)
}

/// What a replica follows of the others.
pub(super) struct Follower {
    pub registry: Registry,
    pub router: Router,
    pub skills: Skills,
    pub tokens: Tokens,
}

/// What one or more announcements asked for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Reloads {
    servers: bool,
    catalog: bool,
    profiles: bool,
    tokens: bool,
    skills: bool,
    logins: bool,
}

impl Reloads {
    fn everything() -> Reloads {
        Reloads {
            servers: true,
            catalog: true,
            profiles: true,
            tokens: true,
            skills: true,
            logins: true,
        }
    }

    /// What the commits that wrote `tables` change here. The audit log
    /// and the connection history are read when asked for; the replica's
    /// own runtime table is never shared.
    fn add(&mut self, tables: &BTreeSet<String>) {
        for table in tables {
            match table.as_str() {
                "servers" | "server_names" => self.servers = true,
                "tools" | "wire_names" | "resources" | "resource_templates" | "prompts"
                | "pins" => self.catalog = true,
                "profiles" => self.profiles = true,
                "api_tokens" => self.tokens = true,
                "skills" | "skill_suggestions" => self.skills = true,
                "oauth_grants" => self.logins = true,
                _ => {}
            }
        }
    }
}

/// What the announcement thread hands the follower.
enum Feed {
    /// Another replica committed; the tables it wrote.
    Committed(BTreeSet<String>),
    /// Listening (again): announcements may have been missed.
    Listening,
}

/// Starts the heartbeat and the following of other replicas; both end
/// with `shutdown`. `address` is where this replica is reached.
pub(super) fn spawn(
    store: Arc<Store>,
    follower: Follower,
    replica_id: String,
    address: String,
    shutdown: CancellationToken,
) {
    spawn_heartbeat(Arc::clone(&store), replica_id, address, shutdown.clone());
    let (feed, commits) = mpsc::unbounded_channel();
    let events = follower.registry.subscribe();
    let cancelled = shutdown.clone();
    tokio::spawn(async move {
        // Taken before listening starts, so nothing registered from here
        // on goes unnoticed: the first `Listening` compares against it.
        let known = follower.registrations().await.unwrap_or_default();
        let listening = std::thread::Builder::new()
            .name("replica-changes".to_owned())
            .spawn(move || listen(&store, &feed, &cancelled));
        if let Err(err) = listening {
            tracing::error!(
                "cannot start following the other replicas: {err}; this one sees their changes only when restarted"
            );
            return;
        }
        follower.run(known, commits, events, shutdown).await;
    });
}

/// Says every `HEARTBEAT` that this replica is alive.
fn spawn_heartbeat(
    store: Arc<Store>,
    replica_id: String,
    address: String,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(HEARTBEAT);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = shutdown.cancelled() => return,
            }
            let (store, id, address) = (Arc::clone(&store), replica_id.clone(), address.clone());
            let beat = tokio::task::spawn_blocking(move || match store.shared() {
                Some(shared) => shared
                    .heartbeat(&id, &address, env!("CARGO_PKG_VERSION"))
                    .map_err(|err| err.to_string()),
                None => Ok(()),
            })
            .await
            .unwrap_or_else(|err| Err(err.to_string()));
            match beat {
                Err(err) if !failing => {
                    failing = true;
                    tracing::warn!(
                        "the shared store does not take this replica's heartbeat: {err}"
                    );
                }
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("the shared store takes this replica's heartbeat again");
                }
                _ => {}
            }
        }
    });
}

/// The announcement thread: other replicas' commits, until `shutdown`.
/// A lost connection is reopened (every `RELISTEN_AFTER`), and says
/// `Listening` again, since what was announced meanwhile is not replayed.
fn listen(store: &Store, feed: &mpsc::UnboundedSender<Feed>, shutdown: &CancellationToken) {
    let Some(shared) = store.shared() else {
        return;
    };
    let mut lost = false;
    while !shutdown.is_cancelled() {
        let mut changes = match shared.listen() {
            Ok(changes) => changes,
            Err(err) => {
                if !lost {
                    lost = true;
                    tracing::warn!(
                        "cannot follow the other replicas' changes ({err}); trying again every {RELISTEN_AFTER:?}"
                    );
                }
                std::thread::sleep(RELISTEN_AFTER);
                continue;
            }
        };
        if std::mem::take(&mut lost) {
            tracing::info!("following the other replicas' changes again");
        }
        if feed.send(Feed::Listening).is_err() {
            return;
        }
        while !shutdown.is_cancelled() {
            match changes.next_within(LISTEN_TICK) {
                Ok(Some(change)) if change.origin != shared.origin() => {
                    let tables = change.tables.into_iter().collect();
                    if feed.send(Feed::Committed(tables)).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(err) => {
                    lost = true;
                    tracing::warn!(
                        "lost the other replicas' changes ({err}); trying again every {RELISTEN_AFTER:?}"
                    );
                    break;
                }
            }
        }
    }
}

impl Follower {
    async fn registrations(&self) -> Option<HashMap<ServerId, ServerRecord>> {
        match self.registry.list(None).await {
            Ok(records) => Some(records.into_iter().map(|r| (r.id, r)).collect()),
            Err(err) => {
                tracing::warn!("cannot read the shared registrations: {err}");
                None
            }
        }
    }

    async fn run(
        self,
        mut known: HashMap<ServerId, ServerRecord>,
        mut commits: mpsc::UnboundedReceiver<Feed>,
        mut events: broadcast::Receiver<RegistryEvent>,
        shutdown: CancellationToken,
    ) {
        loop {
            let mut reloads = Reloads::default();
            tokio::select! {
                feed = commits.recv() => match feed {
                    Some(feed) => add(&mut reloads, feed),
                    None => return,
                },
                // This replica's own changes: what it knows of them is
                // current, so another's commit does not redo them.
                event = events.recv() => {
                    match event {
                        Ok(RegistryEvent::Registered { id, .. } | RegistryEvent::Updated { id, .. }) => {
                            if let Ok(record) = self.registry.get(&id.to_string()).await {
                                known.insert(id, record);
                            }
                        }
                        Ok(RegistryEvent::Removed { id, .. }) => {
                            known.remove(&id);
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                    continue;
                }
                () = shutdown.cancelled() => return,
            }
            // Everything announced meanwhile, handled at once.
            while let Ok(feed) = commits.try_recv() {
                add(&mut reloads, feed);
            }
            self.reload(&mut known, reloads).await;
        }
    }

    async fn reload(&self, known: &mut HashMap<ServerId, ServerRecord>, reloads: Reloads) {
        if reloads.servers {
            self.follow_registrations(known).await;
        }
        if reloads.catalog {
            self.router.catalog_changed_elsewhere();
        }
        if reloads.profiles {
            self.registry.announce(RegistryEvent::ProfileChanged {
                name: String::new(),
            });
        }
        if reloads.tokens {
            match self.registry.tokens().await {
                Ok(tokens) => self.tokens.replace_all(tokens),
                Err(err) => tracing::warn!("cannot read the named tokens again: {err}"),
            }
        }
        if reloads.skills {
            self.skills.wake();
        }
        if reloads.logins
            && let Some(oauth) = self.router.oauth()
        {
            oauth.reload_grants().await;
        }
    }

    /// Brings this replica's sessions in line with the shared
    /// registrations: a new server is connected (when `auto_connect`), a
    /// removed one stopped, one whose session settings changed
    /// reconnected; each is announced here as a local change would be.
    async fn follow_registrations(&self, known: &mut HashMap<ServerId, ServerRecord>) {
        let Some(current) = self.registrations().await else {
            return;
        };
        let mut to_connect = Vec::new();
        for (id, record) in &current {
            let (id, name) = (*id, record.name.clone());
            match known.get(&id) {
                None => {
                    tracing::info!(server = %name, "registered on another replica");
                    self.registry
                        .announce(RegistryEvent::Registered { id, name });
                    if record.auto_connect {
                        to_connect.push((id, record.name.clone()));
                    }
                }
                Some(before) if before.session_view() != record.session_view() => {
                    tracing::info!(server = %name, "changed on another replica; reconnecting");
                    self.router.stop(id).await;
                    self.registry.announce(RegistryEvent::Updated { id, name });
                    if record.auto_connect {
                        to_connect.push((id, record.name.clone()));
                    }
                }
                Some(before) if before != record => {
                    self.registry.announce(RegistryEvent::Updated { id, name });
                }
                Some(_) => {}
            }
        }
        for (id, before) in known.iter() {
            if !current.contains_key(id) {
                tracing::info!(server = %before.name, "removed on another replica");
                self.router.stop(*id).await;
                self.registry.announce(RegistryEvent::Removed {
                    id: *id,
                    name: before.name.clone(),
                });
            }
        }
        self.router.connect_starting(to_connect);
        *known = current;
    }
}

fn add(reloads: &mut Reloads, feed: Feed) {
    match feed {
        Feed::Committed(tables) => reloads.add(&tables),
        Feed::Listening => *reloads = Reloads::everything(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shared_table_reloads_what_follows_it() {
        let reloads_of = |tables: &[&str]| {
            let mut reloads = Reloads::default();
            reloads.add(&tables.iter().map(|t| (*t).to_owned()).collect());
            reloads
        };
        assert_eq!(
            reloads_of(&["servers", "audit_log", "connection_history"]),
            Reloads {
                servers: true,
                ..Reloads::default()
            }
        );
        assert_eq!(
            reloads_of(&["pins", "api_tokens", "oauth_grants"]),
            Reloads {
                catalog: true,
                tokens: true,
                logins: true,
                ..Reloads::default()
            }
        );
        assert_eq!(reloads_of(&["audit_log", "meta"]), Reloads::default());
        let mut reloads = Reloads::default();
        add(&mut reloads, Feed::Listening);
        assert_eq!(reloads, Reloads::everything());
    }
}
