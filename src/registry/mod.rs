//! The server registry: validates registrations, keeps them
//! in the store, resolves a server by id or name, and announces every change
//! on an event channel the other parts subscribe to.

mod profiles;
pub mod validate;

use chrono::{DateTime, Utc};
use serde::Serialize;
use std::sync::Arc;
use tokio::sync::broadcast;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::model::{
    AuditEntry, AuditFilter, ConnectionHistoryEntry, Decision, HeldItem, NamedToken, Pin, ServerId,
    ServerRecord, ServerStatus, StatusTrigger, ToolRecord,
};
/// What the store answers; the front doors tell a full disk from the rest.
use crate::store::StoreError;
use crate::store::{Store, UpsertOutcome};
pub use validate::{ServerSpec, ValidationError};

/// How the store's disk is doing, as `/healthz` and `/metrics` show it.
use crate::model::StorageStatus;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("Server already exists: {0}")]
    Conflict(String),
    #[error("Server not found: {0}")]
    NotFound(String),
    #[error("Profile not found: {0}")]
    ProfileNotFound(String),
    #[error("Tool not found: {0}")]
    ToolNotFound(String),
    /// What a decision was about changed since, or is not there to decide.
    #[error("{0}")]
    Stale(String),
    #[error(transparent)]
    Store(StoreError),
    #[error("the store task failed: {0}")]
    Task(String),
}

impl RegistryError {
    /// Whether the status change was refused by the state machine (someone
    /// moved the server first).
    pub fn is_refused_transition(&self) -> bool {
        matches!(self, RegistryError::Store(StoreError::Transition(_)))
    }
}

impl From<StoreError> for RegistryError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NameTaken(name) => RegistryError::Conflict(name),
            StoreError::NotFound(what) => RegistryError::NotFound(what),
            StoreError::ToolNotFound(what) => RegistryError::ToolNotFound(what),
            StoreError::Stale(what) => RegistryError::Stale(what),
            other => RegistryError::Store(other),
        }
    }
}

/// Something that happened to a registration.
#[derive(Debug, Clone, PartialEq)]
pub enum RegistryEvent {
    Registered {
        id: ServerId,
        name: String,
    },
    Updated {
        id: ServerId,
        name: String,
    },
    Removed {
        id: ServerId,
        name: String,
    },
    StatusChanged {
        id: ServerId,
        name: String,
        status: ServerStatus,
    },
    /// A user approved or rejected one of its definitions: what clients
    /// are offered changed.
    TrustDecided {
        id: ServerId,
        name: String,
    },
    /// A profile was added, changed or removed.
    ProfileChanged {
        name: String,
    },
}

/// Counts for `GET /api/v1/aggregator/state`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AggregatorState {
    pub total_servers: usize,
    pub connected_servers: usize,
    pub degraded_servers: usize,
    pub connecting_servers: usize,
    pub disconnected_servers: usize,
    pub error_servers: usize,
    pub total_tools: u64,
    pub classified_tools: u64,
    pub unclassified_tools: u64,
    pub last_sync: Option<DateTime<Utc>>,
    /// The config files the daemon keeps applied (its own `--config` and
    /// each `stdio` client's), and why an edit was not applied.
    pub config_files: Vec<ConfigFileStatus>,
}

/// A config file the daemon keeps applied.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ConfigFileStatus {
    pub path: String,
    /// Servers it named when last applied.
    pub servers: usize,
    /// When it was last applied (none yet: its first read failed).
    pub applied_at: Option<DateTime<Utc>>,
    /// Why the file as it is now is not applied; the servers stay as the
    /// last good version left them.
    pub error: Option<String>,
}

/// The registry; cheap to clone, shared by every front door.
#[derive(Clone)]
pub struct Registry {
    store: Arc<Store>,
    events: broadcast::Sender<RegistryEvent>,
}

impl Registry {
    pub fn new(store: Arc<Store>) -> Registry {
        let (events, _) = broadcast::channel(1024);
        Registry { store, events }
    }

    /// How the store's disk is doing (writes failing, since when, why).
    /// While writes fail, asking tries the disk again (blocking work, off
    /// the async threads).
    pub async fn storage(&self) -> StorageStatus {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || store.storage_status()).await {
            Ok(status) => status,
            Err(_) => self.store.storage_status_now(),
        }
    }

    /// As `storage`, asked before a change the store must record (see
    /// `Store::storage_status_for_a_change`).
    pub async fn storage_for_a_change(&self) -> StorageStatus {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || store.storage_status_for_a_change()).await {
            Ok(status) => status,
            Err(_) => self.store.storage_status_now(),
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.events.subscribe()
    }

    /// Tells this process's followers of a change another replica made
    /// to the shared registrations, as if it had been made here.
    pub fn announce(&self, event: RegistryEvent) {
        let _ = self.events.send(event);
    }

    /// Registers a new server (status `DISCONNECTED`); `Conflict` when the name
    /// is taken, even when two registrations race. Refusals are audited too.
    pub async fn register(
        &self,
        spec: ServerSpec,
        actor: &str,
    ) -> Result<ServerRecord, RegistryError> {
        let actor = actor.to_owned();
        self.blocking(move |store| {
            if let Err(err) = validate::validate(&spec) {
                store.record_audit(&actor, "register", &spec.name, &err.to_string())?;
                return Err(err.into());
            }
            let record = new_record(spec);
            match store.insert_server(&record, &actor) {
                Ok(()) => Ok(record),
                Err(err) => {
                    store.record_audit(&actor, "register", &record.name, &err.to_string())?;
                    Err(err.into())
                }
            }
        })
        .await
        .inspect(|record| {
            tracing::info!(server = %record.name, id = %record.id, transport = %record.transport.transport_type(), "server registered");
            let _ = self.events.send(RegistryEvent::Registered {
                id: record.id,
                name: record.name.clone(),
            });
        })
    }

    /// Inserts or updates the servers a config file names, in one transaction.
    pub async fn upsert(
        &self,
        specs: Vec<ServerSpec>,
        actor: &str,
    ) -> Result<Vec<(ServerRecord, UpsertOutcome)>, RegistryError> {
        for spec in &specs {
            validate::validate(spec)?;
        }
        let actor = actor.to_owned();
        let results = self
            .blocking(move |store| {
                let records: Vec<ServerRecord> = specs.into_iter().map(new_record).collect();
                let outcomes = store.upsert_servers(&records, &actor)?;
                let mut results = Vec::with_capacity(records.len());
                for (record, outcome) in records.into_iter().zip(outcomes) {
                    let stored = store
                        .get_server_by_name(&record.name)?
                        .ok_or_else(|| RegistryError::NotFound(record.name.clone()))?;
                    results.push((stored, outcome));
                }
                Ok(results)
            })
            .await?;
        for (record, outcome) in &results {
            let (id, name) = (record.id, record.name.clone());
            let event = match outcome {
                UpsertOutcome::Inserted => RegistryEvent::Registered { id, name },
                UpsertOutcome::Updated | UpsertOutcome::Retuned => {
                    RegistryEvent::Updated { id, name }
                }
                UpsertOutcome::Unchanged => continue,
            };
            let _ = self.events.send(event);
        }
        Ok(results)
    }

    /// A tool by id (`server.tool`) or the wire name clients see, held or
    /// not.
    pub async fn find_tool(&self, name: &str) -> Result<ToolRecord, RegistryError> {
        let name = name.to_owned();
        self.blocking(move |store| Ok(store.find_tool(&name)?))
            .await
    }

    /// A tool's approved definition, if it has one.
    pub async fn tool_pin(&self, tool: &ToolRecord) -> Result<Option<Pin>, RegistryError> {
        let (server, name) = (tool.server_id, tool.original_name.clone());
        self.blocking(move |store| Ok(store.tool_pin(server, &name)?))
            .await
    }

    /// Every tool held back by the trust checks.
    pub async fn held_tools(&self) -> Result<Vec<ToolRecord>, RegistryError> {
        self.blocking(|store| Ok(store.held_tools()?)).await
    }

    /// A prompt or resource template by its id (`prompt:SERVER.NAME`,
    /// `template:SERVER:URI_TEMPLATE`), held or not.
    pub async fn find_item(&self, id: &str) -> Result<HeldItem, RegistryError> {
        let id = id.to_owned();
        self.blocking(move |store| Ok(store.find_item(&id)?)).await
    }

    /// A prompt's or resource template's approved definition, if any.
    pub async fn item_pin(&self, item: &HeldItem) -> Result<Option<Pin>, RegistryError> {
        let item = item.clone();
        self.blocking(move |store| Ok(store.item_pin(&item)?)).await
    }

    /// Every prompt and resource template held back by the trust checks.
    pub async fn held_items(&self) -> Result<Vec<HeldItem>, RegistryError> {
        self.blocking(|store| Ok(store.held_items()?)).await
    }

    /// `decide_tool` for a prompt or resource template.
    pub async fn decide_item(
        &self,
        item: &HeldItem,
        fingerprint: Option<String>,
        decision: Decision,
        actor: &str,
    ) -> Result<HeldItem, RegistryError> {
        let (item, actor) = (item.clone(), actor.to_owned());
        let decided = self
            .blocking(move |store| {
                Ok(store.decide_item(&item, fingerprint.as_deref(), decision, &actor)?)
            })
            .await?;
        let _ = self.events.send(RegistryEvent::TrustDecided {
            id: decided.server_id,
            name: decided.server_name.clone(),
        });
        Ok(decided)
    }

    /// Approves or rejects a tool's current definition (the one with
    /// `fingerprint`, when given); the router and the index follow.
    pub async fn decide_tool(
        &self,
        tool: &ToolRecord,
        fingerprint: Option<String>,
        decision: Decision,
        actor: &str,
    ) -> Result<ToolRecord, RegistryError> {
        let (server_id, name, actor) =
            (tool.server_id, tool.original_name.clone(), actor.to_owned());
        let decided = self
            .blocking(move |store| {
                Ok(
                    store.decide_tool(
                        server_id,
                        &name,
                        fingerprint.as_deref(),
                        decision,
                        &actor,
                    )?,
                )
            })
            .await?;
        let _ = self.events.send(RegistryEvent::TrustDecided {
            id: server_id,
            name: decided.server_name.clone(),
        });
        Ok(decided)
    }

    /// The named API tokens.
    pub async fn tokens(&self) -> Result<Vec<NamedToken>, RegistryError> {
        self.blocking(|store| Ok(store.tokens()?)).await
    }

    pub async fn add_token(&self, token: NamedToken, actor: &str) -> Result<(), RegistryError> {
        let actor = actor.to_owned();
        self.blocking(move |store| Ok(store.add_token(&token, &actor)?))
            .await
    }

    pub async fn revoke_token(
        &self,
        name: &str,
        actor: &str,
    ) -> Result<Option<NamedToken>, RegistryError> {
        let (name, actor) = (name.to_owned(), actor.to_owned());
        self.blocking(move |store| Ok(store.revoke_token(&name, &actor)?))
            .await
    }

    /// Looks a server up by id, then by name.
    pub async fn get(&self, id_or_name: &str) -> Result<ServerRecord, RegistryError> {
        let key = id_or_name.to_owned();
        self.blocking(move |store| find(store, &key)).await
    }

    /// All servers ordered by name, optionally only those with `status`.
    pub async fn list(
        &self,
        status: Option<ServerStatus>,
    ) -> Result<Vec<ServerRecord>, RegistryError> {
        self.blocking(move |store| {
            let mut servers = store.list_servers()?;
            if let Some(status) = status {
                servers.retain(|s| s.status == status);
            }
            Ok(servers)
        })
        .await
    }

    /// Removes a server and everything that belongs to it (docs/rules.md,
    /// Server removal).
    pub async fn remove(
        &self,
        id_or_name: &str,
        actor: &str,
    ) -> Result<ServerRecord, RegistryError> {
        let key = id_or_name.to_owned();
        let actor = actor.to_owned();
        let removed = self
            .blocking(move |store| match find(store, &key) {
                Ok(record) => Ok(store.remove_server(record.id, &actor)?),
                Err(err) => {
                    store.record_audit(&actor, "remove", &key, &err.to_string())?;
                    Err(err)
                }
            })
            .await?;
        tracing::info!(server = %removed.name, id = %removed.id, "server removed");
        let _ = self.events.send(RegistryEvent::Removed {
            id: removed.id,
            name: removed.name.clone(),
        });
        Ok(removed)
    }

    /// The stored tools of a server.
    pub async fn tools(&self, id_or_name: &str) -> Result<Vec<ToolRecord>, RegistryError> {
        let key = id_or_name.to_owned();
        self.blocking(move |store| {
            let record = find(store, &key)?;
            Ok(store.tools(record.id)?)
        })
        .await
    }

    /// Moves a server to `to` through the state machine (see
    /// `Store::transition_server`) and announces the change.
    pub async fn transition(
        &self,
        id: ServerId,
        to: ServerStatus,
        trigger: StatusTrigger,
        details: Option<String>,
        update: impl FnOnce(&mut ServerRecord) + Send + 'static,
    ) -> Result<ServerRecord, RegistryError> {
        let details = details.map(|details| crate::model::redact::cut_reason(&details));
        let record = self
            .blocking(move |store| Ok(store.transition_server(id, to, trigger, details, update)?))
            .await?;
        let _ = self.events.send(RegistryEvent::StatusChanged {
            id,
            name: record.name.clone(),
            status: to,
        });
        Ok(record)
    }

    /// Records an operation in the audit log.
    pub async fn audit_event(
        &self,
        actor: &str,
        action: &str,
        server: &str,
        result: &str,
    ) -> Result<(), RegistryError> {
        let (actor, action, server, result) = (
            actor.to_owned(),
            action.to_owned(),
            server.to_owned(),
            result.to_owned(),
        );
        self.blocking(move |store| Ok(store.record_audit(&actor, &action, &server, &result)?))
            .await
    }

    pub async fn history(
        &self,
        id_or_name: &str,
        limit: usize,
    ) -> Result<Vec<ConnectionHistoryEntry>, RegistryError> {
        let key = id_or_name.to_owned();
        self.blocking(move |store| {
            let record = find(store, &key)?;
            Ok(store.history(record.id, limit)?)
        })
        .await
    }

    /// Appends audit entries made elsewhere (tool calls), in one write.
    pub async fn append_audits(&self, entries: Vec<AuditEntry>) -> Result<(), RegistryError> {
        self.blocking(move |store| Ok(store.append_audits(entries)?))
            .await
    }

    /// Audit entries `filter` matches, newest first, older than `before`
    /// when given.
    pub async fn audit(
        &self,
        limit: usize,
        before: Option<u64>,
        filter: AuditFilter,
    ) -> Result<Vec<AuditEntry>, RegistryError> {
        self.blocking(move |store| Ok(store.audit(limit, before, &filter)?))
            .await
    }

    pub async fn state(&self) -> Result<AggregatorState, RegistryError> {
        self.blocking(|store| {
            let servers = store.list_servers()?;
            let count = |status| servers.iter().filter(|s| s.status == status).count();
            let total_tools: u64 = servers.iter().map(|s| u64::from(s.tool_count)).sum();
            let last_sync = store
                .last_sync_ms()?
                .and_then(|ms| i64::try_from(ms).ok())
                .and_then(DateTime::<Utc>::from_timestamp_millis);
            Ok(AggregatorState {
                total_servers: servers.len(),
                connected_servers: count(ServerStatus::Connected),
                degraded_servers: count(ServerStatus::Degraded),
                connecting_servers: count(ServerStatus::Connecting),
                disconnected_servers: count(ServerStatus::Disconnected),
                error_servers: count(ServerStatus::Error),
                total_tools,
                classified_tools: 0,
                unclassified_tools: total_tools,
                last_sync,
                config_files: Vec::new(),
            })
        })
        .await
    }

    /// Runs blocking store work off the async runtime.
    async fn blocking<T, F>(&self, work: F) -> Result<T, RegistryError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, RegistryError> + Send + 'static,
    {
        let store = Arc::clone(&self.store);
        let path = store.path().to_path_buf();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|err| match crate::store::damage() {
                // The panic hook found redb meeting a damaged page.
                Some(detail) if err.is_panic() => {
                    RegistryError::Store(StoreError::Damaged { path, detail })
                }
                _ => RegistryError::Task(err.to_string()),
            })?
    }
}

fn find(store: &Store, id_or_name: &str) -> Result<ServerRecord, RegistryError> {
    if let Ok(id) = Uuid::parse_str(id_or_name)
        && let Some(record) = store.get_server(id)?
    {
        return Ok(record);
    }
    store
        .get_server_by_name(id_or_name)?
        .ok_or_else(|| RegistryError::NotFound(id_or_name.to_owned()))
}

fn new_record(spec: ServerSpec) -> ServerRecord {
    ServerRecord {
        description: spec.description,
        health_check_url: spec.health_check_url,
        health_check_interval_secs: spec.health_check_interval_secs,
        auto_connect: spec.auto_connect,
        priority: spec.priority,
        oauth: spec.oauth,
        trust: spec.trust,
        ..ServerRecord::new(spec.name, spec.transport, spec.source)
    }
}
