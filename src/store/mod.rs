//! The embedded store (redb): the single source of truth for registrations,
//! connection history, the audit log and (later) the catalog. Everything else
//! is derived from it and can be rebuilt.
//!
//! All methods are blocking (redb is synchronous and fsyncs on commit); async
//! callers go through `tokio::task::spawn_blocking`. Every commit is
//! `Durability::Immediate`, so an acknowledged write survives `kill -9`.

mod backend;
pub mod catalog;
pub mod embeddings;
pub mod health;
pub mod recover;
pub mod secrets;
pub mod skills;

use chrono::Utc;
use redb::{
    Database, ReadableDatabase as _, ReadableTable as _, ReadableTableMetadata as _,
    TableDefinition, WriteTransaction,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::model::{
    AuditEntry, AuditFilter, ConnectionHistoryEntry, InvalidTransition, ServerId, ServerRecord,
    ServerStatus, StatusTrigger,
};
use secrets::Cipher;

/// The schema this build writes. Bump it and add a step to `migrate` when the
/// layout changes.
pub const SCHEMA_VERSION: u64 = 3;
/// Connection history kept per server; older entries are dropped.
pub const HISTORY_PER_SERVER: u64 = 500;
/// Audit entries kept in all; older entries are dropped.
pub const AUDIT_LIMIT: u64 = 100_000;
/// Bytes the audit log may take (encoded entries), whatever their number.
pub const AUDIT_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Longest audit field kept (a 1 MB server name is cut here).
pub const AUDIT_FIELD_CHARS: usize = 512;

const STORE_FILE: &str = "store.redb";
/// redb's page cache. Its default (1 GiB) lets a daemon that read its whole
/// catalog and embedding cache once keep hundreds of MB; nothing on the hot
/// path reads the store, so a small cache costs nothing there.
const STORE_CACHE_BYTES: usize = 32 * 1024 * 1024;
const KEY_FILE: &str = "secret.key";

pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SERVERS: TableDefinition<u128, &[u8]> = TableDefinition::new("servers");
const SERVER_NAMES: TableDefinition<&str, u128> = TableDefinition::new("server_names");
const HISTORY: TableDefinition<(u128, u64), &[u8]> = TableDefinition::new("connection_history");
const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit_log");

const META_SCHEMA_VERSION: &str = "schema_version";
const META_GENERATION: &str = "generation";
const META_CATALOG_GENERATION: &str = "catalog_generation";
const META_AUDIT_SEQ: &str = "audit_seq";
const META_AUDIT_BYTES: &str = "audit_bytes";
pub(crate) const META_LAST_SYNC_MS: &str = "last_sync_ms";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the data dir {path} is in use by another mcp-aggregator process; stop it, or use another --data-dir"
    )]
    AlreadyOpen { path: PathBuf },
    #[error(
        "the store in {path} has schema version {found}, newer than this build understands ({SCHEMA_VERSION}); upgrade mcp-aggregator"
    )]
    NewerSchema { path: PathBuf, found: u64 },
    #[error("cannot create the data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Secrets(#[from] secrets::SecretError),
    #[error("Server already exists: {0}")]
    NameTaken(String),
    #[error("Server not found: {0}")]
    NotFound(String),
    #[error(transparent)]
    Transition(#[from] InvalidTransition),
    #[error(
        "a stored record is unreadable ({0}); the store may have been written by another version"
    )]
    Corrupt(String),
    #[error(
        "the store cannot be written ({reason}){}; nothing already stored is lost, and writes resume by themselves",
        if *full { ": the disk holding the data dir is full" } else { "" }
    )]
    Disk { reason: String, full: bool },
    #[error(
        "the store {path} is damaged ({detail}); not started on it. `mcp-aggregator store check` shows what can be read, `mcp-aggregator store recover` copies it into a new store (the damaged file is kept)"
    )]
    Damaged { path: PathBuf, detail: String },
    #[error(
        "the store {path} is empty (0 bytes) although the data dir was in use ({evidence}): the registrations it held are gone from it. Put a backup back in its place, or move the empty file away to start with an empty store"
    )]
    Emptied { path: PathBuf, evidence: String },
    #[error("store error: {0}")]
    Db(redb::Error),
}

impl StoreError {
    /// A damaged or emptied store (or one of a newer version): the daemon
    /// cannot run on it, and starting it again does not help.
    pub fn is_unusable(&self) -> bool {
        matches!(
            self,
            StoreError::Damaged { .. }
                | StoreError::Emptied { .. }
                | StoreError::NewerSchema { .. }
                | StoreError::Secrets(secrets::SecretError::BadKey { .. })
        )
    }
}

impl From<redb::Error> for StoreError {
    /// An I/O error (the file could not be written or read) is the disk's
    /// doing: `Disk`, which the front doors answer with 507/503.
    fn from(err: redb::Error) -> Self {
        match err {
            redb::Error::Io(io) => StoreError::Disk {
                full: health::is_disk_full(&io),
                reason: io.to_string(),
            },
            redb::Error::PreviousIo => StoreError::Disk {
                reason: "an earlier write failed".to_owned(),
                full: false,
            },
            redb::Error::Corrupted(detail) => StoreError::Db(redb::Error::Corrupted(detail)),
            other => StoreError::Db(other),
        }
    }
}

macro_rules! redb_error_into_store_error {
    ($($ty:ty),*) => {$(
        impl From<$ty> for StoreError {
            fn from(err: $ty) -> Self {
                redb::Error::from(err).into()
            }
        }
    )*};
}
redb_error_into_store_error!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// How a config-file upsert changed a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpsertOutcome {
    Inserted,
    Updated,
    Unchanged,
}

/// The embedded store.
pub struct Store {
    /// The open file; empty only while it is reopened after a failed
    /// write (redb refuses everything after one until then).
    db: RwLock<Option<Arc<Database>>>,
    health: Arc<health::Health>,
    /// Held while the file is reopened (one reopen at a time).
    reopening: std::sync::Mutex<()>,
    cipher: Cipher,
    path: PathBuf,
    /// `AUDIT_MAX_BYTES`, smaller in tests.
    audit_max_bytes: u64,
}

impl Store {
    /// Opens (creating if needed) the store in `data_dir`. Fails with
    /// `AlreadyOpen` when another process holds it, `Emptied` when it was
    /// truncated to nothing in a data dir that was in use, `Damaged` when
    /// its file does not read as a redb store — never with a panic.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        create_private_dir(data_dir)?;
        let path = data_dir.join(STORE_FILE);
        refuse_emptied(data_dir, &path)?;
        let health = Arc::new(health::Health::new(&path));
        // A full check of a store of ordinary size: a file damaged while
        // the daemon was stopped is found here, not by a read that panics
        // later. Beyond the size, a check would add a second per start;
        // damage is then found by the start's own reads.
        let check = std::fs::metadata(&path).is_ok_and(|m| m.len() <= CHECK_AT_OPEN_BYTES);
        let db = open_database(&path, &health, check, false)?;
        // Only the owner may read the store, whatever the umask.
        restrict_to_owner(&path, 0o600).map_err(|source| StoreError::DataDir {
            path: path.clone(),
            source,
        })?;
        let cipher = Cipher::load_or_create(&data_dir.join(KEY_FILE))?;
        let store = Store {
            db: RwLock::new(Some(Arc::new(db))),
            health,
            reopening: std::sync::Mutex::new(()),
            cipher,
            path,
            audit_max_bytes: AUDIT_MAX_BYTES,
        };
        guard_damage(&store.path, || store.migrate())?;
        Ok(store)
    }

    /// The open file, for reading. After a failed write redb refuses
    /// everything on it, reads included, until it is reopened: that is
    /// done first (at most every second, when no one else is using it);
    /// until then the error that caused it is the answer.
    fn db(&self) -> Result<Arc<Database>, StoreError> {
        if self.health.is_failing() {
            self.recover();
            if self.health.is_latched() {
                return Err(self.failure());
            }
        }
        let slot = match self.db.read() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        slot.clone().ok_or_else(|| self.failure())
    }

    /// The open file, for a write. While writes fail and the disk has no
    /// room, a write is refused before it reaches redb: a write that fails
    /// would make redb refuse reads too.
    fn db_for_write(&self) -> Result<Arc<Database>, StoreError> {
        if self.health.is_failing() && !has_room(&self.path) {
            self.recover();
            return Err(self.failure());
        }
        self.db()
    }

    /// Why the store cannot be used right now.
    fn failure(&self) -> StoreError {
        let (reason, full) = self
            .health
            .failure()
            .unwrap_or_else(|| ("the store file is being reopened".to_owned(), false));
        StoreError::Disk { reason, full }
    }

    /// After failed writes (at most every second, one caller at a time):
    /// reopens a file redb refuses (only when no operation holds it, so the
    /// reopen cannot fail on its lock), then, when the disk has room, tries
    /// a small write — when it goes through, the store is healthy again.
    fn recover(&self) {
        let Ok(_one) = self.reopening.try_lock() else {
            return;
        };
        if !self.health.reopen_due() {
            return;
        }
        if self.health.is_latched() {
            let old = {
                let mut slot = match self.db.write() {
                    Ok(slot) => slot,
                    Err(poisoned) => poisoned.into_inner(),
                };
                if slot.as_ref().is_some_and(|db| Arc::strong_count(db) > 1) {
                    // An operation is running on it: next time.
                    return;
                }
                slot.take()
            };
            drop(old);
            // The repair an open does after a failed write syncs what it
            // wrote; only the probe below says writes work again.
            self.health.hold_recovery(true);
            let reopened = open_database(&self.path, &self.health, false, true);
            self.health.hold_recovery(false);
            match reopened {
                Ok(db) => {
                    self.health.reopened();
                    if let Ok(mut slot) = self.db.write() {
                        *slot = Some(Arc::new(db));
                    }
                }
                Err(err) => {
                    tracing::debug!(store = %self.path.display(), "reopening the store failed: {err}");
                    return;
                }
            }
        }
        if !has_room(&self.path) {
            return;
        }
        let Some(db) = self.db.read().ok().and_then(|slot| slot.clone()) else {
            return;
        };
        let probe = (|| -> Result<(), StoreError> {
            let txn = db.begin_write()?;
            txn.open_table(META)?
                .insert(META_DISK_PROBE, Utc::now().timestamp_millis() as u64)?;
            txn.commit()?;
            Ok(())
        })();
        match probe {
            Ok(()) => self.health.writes_work(),
            Err(err) => {
                tracing::debug!(store = %self.path.display(), "the store's probe write failed: {err}")
            }
        }
    }

    /// How the store's disk is doing, as last seen (no I/O).
    pub fn storage_status_now(&self) -> health::StorageStatus {
        self.health.status()
    }

    /// How the store's disk is doing (while writes fail, asking is also
    /// what tries them again: a daemon nobody writes to still recovers).
    /// Blocking.
    pub fn storage_status(&self) -> health::StorageStatus {
        if self.health.is_failing() {
            self.recover();
        }
        self.health.status()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    #[cfg(test)]
    pub(crate) fn set_audit_max_bytes(&mut self, bytes: u64) {
        self.audit_max_bytes = bytes;
    }

    /// Brings an older layout up to `SCHEMA_VERSION`, one step at a time.
    fn migrate(&self) -> Result<(), StoreError> {
        // A store already at this version is not written to (a start on a
        // full disk serves what is stored).
        if self.schema_version()? == SCHEMA_VERSION {
            return Ok(());
        }
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let found = txn
            .open_table(META)?
            .get(META_SCHEMA_VERSION)?
            .map(|v| v.value());
        let mut version = found.unwrap_or(0);
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: version,
            });
        }
        while version < SCHEMA_VERSION {
            match version {
                // 0 -> 1: a fresh store; create every table so readers never
                // meet a missing one.
                0 => {
                    txn.open_table(SERVERS)?;
                    txn.open_table(SERVER_NAMES)?;
                    txn.open_table(HISTORY)?;
                    txn.open_table(AUDIT)?;
                    txn.open_table(catalog::TOOLS)?;
                    txn.open_table(catalog::WIRE_NAMES)?;
                    txn.open_table(catalog::RESOURCES)?;
                    txn.open_table(catalog::RESOURCE_TEMPLATES)?;
                    txn.open_table(catalog::PROMPTS)?;
                }
                // 1 -> 2: the embedding cache of the search index.
                1 => {
                    txn.open_table(embeddings::EMBEDDINGS)?;
                }
                // 2 -> 3: skills users added or edited, and suggestions.
                2 => {
                    txn.open_table(skills::SKILLS)?;
                    txn.open_table(skills::SUGGESTIONS)?;
                }
                _ => unreachable!("every version below SCHEMA_VERSION has a step"),
            }
            version += 1;
        }
        txn.open_table(META)?
            .insert(META_SCHEMA_VERSION, SCHEMA_VERSION)?;
        txn.commit()?;
        Ok(())
    }

    /// The schema version on disk.
    pub fn schema_version(&self) -> Result<u64, StoreError> {
        self.meta(META_SCHEMA_VERSION)
    }

    /// A counter bumped by every write that changes what the derived indexes
    /// reflect; they record it to know when to rebuild.
    pub fn generation(&self) -> Result<u64, StoreError> {
        self.meta(META_GENERATION)
    }

    /// A counter bumped by every write that changes the tools table: what
    /// the search indexes reflect. Status changes do not move it, so a
    /// restart finds the indexes current.
    pub fn catalog_generation(&self) -> Result<u64, StoreError> {
        self.meta(META_CATALOG_GENERATION)
    }

    /// When tool discovery last changed the catalog (milliseconds since the
    /// epoch), if ever.
    pub fn last_sync_ms(&self) -> Result<Option<u64>, StoreError> {
        let value = self.meta(META_LAST_SYNC_MS)?;
        Ok((value > 0).then_some(value))
    }

    fn meta(&self, key: &str) -> Result<u64, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = match txn.open_table(META) {
            Ok(table) => table,
            // A new store, before its first migration.
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            Err(err) => return Err(err.into()),
        };
        Ok(table.get(key)?.map(|v| v.value()).unwrap_or(0))
    }

    /// Inserts a new registration; `NameTaken` when the name is in use. The
    /// name check and the insert share one write transaction, so two racing
    /// registrations of one name cannot both succeed.
    pub fn insert_server(&self, record: &ServerRecord, actor: &str) -> Result<(), StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        {
            let mut names = txn.open_table(SERVER_NAMES)?;
            if names.get(record.name.as_str())?.is_some() {
                return Err(StoreError::NameTaken(record.name.clone()));
            }
            names.insert(record.name.as_str(), record.id.as_u128())?;
        }
        self.put_server(&txn, record)?;
        append_history(
            &txn,
            record.id,
            registered_entry(record, "REGISTERED", None),
        )?;
        append_audit(
            &txn,
            self.audit_max_bytes,
            audit_entry(actor, "register", &record.name, "ok"),
        )?;
        bump_generation(&txn)?;
        txn.commit()?;
        Ok(())
    }

    /// Inserts or updates registrations by name in one transaction (config
    /// files at start-up). The incoming record's settings win; the existing
    /// id, status, counters and timestamps are kept.
    pub fn upsert_servers(
        &self,
        records: &[ServerRecord],
        actor: &str,
    ) -> Result<Vec<UpsertOutcome>, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let mut outcomes = Vec::with_capacity(records.len());
        for incoming in records {
            let existing_id = txn
                .open_table(SERVER_NAMES)?
                .get(incoming.name.as_str())?
                .map(|v| v.value());
            let outcome = match existing_id {
                None => {
                    txn.open_table(SERVER_NAMES)?
                        .insert(incoming.name.as_str(), incoming.id.as_u128())?;
                    self.put_server(&txn, incoming)?;
                    append_history(
                        &txn,
                        incoming.id,
                        registered_entry(incoming, "REGISTERED", None),
                    )?;
                    UpsertOutcome::Inserted
                }
                Some(id) => {
                    let mut current = self.server_in(&txn, id)?.ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "name {} points to a missing server",
                            incoming.name
                        ))
                    })?;
                    let merged = ServerRecord {
                        id: current.id,
                        status: current.status,
                        error_message: current.error_message.take(),
                        tool_count: current.tool_count,
                        registered_at: current.registered_at,
                        connected_at: current.connected_at,
                        last_health_check: current.last_health_check,
                        updated_at: current.updated_at,
                        // Another command or URL may be another server:
                        // probed afresh.
                        protocol_version: if current.transport == incoming.transport {
                            current.protocol_version.clone()
                        } else {
                            None
                        },
                        ..incoming.clone()
                    };
                    let unchanged = ServerRecord {
                        error_message: merged.error_message.clone(),
                        ..current.clone()
                    } == merged;
                    if unchanged {
                        UpsertOutcome::Unchanged
                    } else {
                        let merged = ServerRecord {
                            updated_at: Utc::now(),
                            ..merged
                        };
                        self.put_server(&txn, &merged)?;
                        append_history(
                            &txn,
                            merged.id,
                            registered_entry(
                                &merged,
                                "UPDATED",
                                Some("settings replaced by the config file"),
                            ),
                        )?;
                        UpsertOutcome::Updated
                    }
                }
            };
            let action = match outcome {
                UpsertOutcome::Inserted => "register",
                UpsertOutcome::Updated => "update",
                UpsertOutcome::Unchanged => "verify",
            };
            append_audit(
                &txn,
                self.audit_max_bytes,
                audit_entry(actor, action, &incoming.name, "ok"),
            )?;
            outcomes.push(outcome);
        }
        if outcomes.iter().any(|o| *o != UpsertOutcome::Unchanged) {
            bump_generation(&txn)?;
        }
        txn.commit()?;
        Ok(outcomes)
    }

    /// Moves a server to a new status through the state machine, records the
    /// change in its history, and lets `update` adjust the record in the same
    /// transaction (e.g. `error_message`, `connected_at`).
    pub fn transition_server(
        &self,
        id: ServerId,
        to: ServerStatus,
        trigger: StatusTrigger,
        details: Option<String>,
        update: impl FnOnce(&mut ServerRecord),
    ) -> Result<ServerRecord, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let mut record = self
            .server_in(&txn, id.as_u128())?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        let from = record.status;
        record.status = from.transition(to, trigger)?;
        record.updated_at = Utc::now();
        if to == ServerStatus::Connected {
            record.connected_at = Some(record.updated_at);
        }
        update(&mut record);
        self.put_server(&txn, &record)?;
        let change = format!("{from} -> {to} ({})", trigger.as_str());
        append_audit(
            &txn,
            self.audit_max_bytes,
            AuditEntry {
                details: Some(bounded_field(&match &details {
                    Some(why) => format!("{change}: {why}"),
                    None => change,
                })),
                ..audit_entry(trigger.actor(), "status", &record.name, "ok")
            },
        )?;
        append_history(
            &txn,
            id,
            ConnectionHistoryEntry {
                timestamp: record.updated_at,
                event_type: to.as_str().to_owned(),
                from_status: Some(from),
                to_status: Some(to),
                trigger: Some(trigger),
                details,
            },
        )?;
        bump_generation(&txn)?;
        txn.commit()?;
        Ok(record)
    }

    /// Resets every server to `DISCONNECTED` at start-up: no session survives
    /// the process. Returns how many records changed.
    pub fn reset_statuses_after_restart(&self) -> Result<usize, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let stale: Vec<ServerRecord> = self
            .all_servers_in(&txn)?
            .into_iter()
            .filter(|record| record.status != ServerStatus::Disconnected)
            .collect();
        for mut record in stale.iter().cloned() {
            let from = record.status;
            record.status =
                from.transition(ServerStatus::Disconnected, StatusTrigger::ProcessRestart)?;
            record.updated_at = Utc::now();
            self.put_server(&txn, &record)?;
            append_audit(
                &txn,
                self.audit_max_bytes,
                AuditEntry {
                    details: Some(format!(
                        "{from} -> DISCONNECTED (process_restart): the aggregator restarted"
                    )),
                    ..audit_entry("system", "status", &record.name, "ok")
                },
            )?;
            append_history(
                &txn,
                record.id,
                ConnectionHistoryEntry {
                    timestamp: record.updated_at,
                    event_type: "DISCONNECTED".to_owned(),
                    from_status: Some(from),
                    to_status: Some(ServerStatus::Disconnected),
                    trigger: Some(StatusTrigger::ProcessRestart),
                    details: Some("the aggregator restarted".to_owned()),
                },
            )?;
        }
        if !stale.is_empty() {
            bump_generation(&txn)?;
        }
        txn.commit()?;
        Ok(stale.len())
    }

    /// Deletes a server and everything that belongs to it (tools, history).
    pub fn remove_server(&self, id: ServerId, actor: &str) -> Result<ServerRecord, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let key = id.as_u128();
        let record = self
            .server_in(&txn, key)?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        txn.open_table(SERVERS)?.remove(key)?;
        txn.open_table(SERVER_NAMES)?.remove(record.name.as_str())?;
        txn.open_table(HISTORY)?
            .retain_in((key, 0)..=(key, u64::MAX), |_, _| false)?;
        catalog::delete_server_catalog(&txn, key)?;
        append_audit(
            &txn,
            self.audit_max_bytes,
            audit_entry(actor, "remove", &record.name, "ok"),
        )?;
        bump_generation(&txn)?;
        bump_catalog_generation(&txn)?;
        txn.commit()?;
        Ok(record)
    }

    /// Records an operation that failed before reaching the store (a refused
    /// registration, a removal of an unknown server), so the audit log is
    /// complete.
    pub fn record_audit(
        &self,
        actor: &str,
        action: &str,
        server: &str,
        result: &str,
    ) -> Result<(), StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        append_audit(
            &txn,
            self.audit_max_bytes,
            audit_entry(actor, action, server, result),
        )?;
        txn.commit()?;
        Ok(())
    }

    pub fn get_server(&self, id: ServerId) -> Result<Option<ServerRecord>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(SERVERS)?;
        let found = table.get(id.as_u128())?;
        found
            .map(|bytes| self.decode_server(bytes.value()))
            .transpose()
    }

    pub fn get_server_by_name(&self, name: &str) -> Result<Option<ServerRecord>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let Some(id) = txn.open_table(SERVER_NAMES)?.get(name)?.map(|v| v.value()) else {
            return Ok(None);
        };
        let table = txn.open_table(SERVERS)?;
        let found = table.get(id)?;
        found
            .map(|bytes| self.decode_server(bytes.value()))
            .transpose()
    }

    /// Every registration, ordered by name.
    pub fn list_servers(&self) -> Result<Vec<ServerRecord>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let names = txn.open_table(SERVER_NAMES)?;
        let servers = txn.open_table(SERVERS)?;
        let mut out = Vec::with_capacity(names.len()? as usize);
        for entry in names.iter()? {
            let (_, id) = entry?;
            if let Some(bytes) = servers.get(id.value())? {
                out.push(self.decode_server(bytes.value())?);
            }
        }
        Ok(out)
    }

    /// The newest `limit` history entries of a server, oldest first.
    pub fn history(
        &self,
        id: ServerId,
        limit: usize,
    ) -> Result<Vec<ConnectionHistoryEntry>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(HISTORY)?;
        let key = id.as_u128();
        let mut entries = Vec::new();
        for entry in table.range((key, 0)..=(key, u64::MAX))?.rev().take(limit) {
            let (_, bytes) = entry?;
            entries.push(decode(bytes.value())?);
        }
        entries.reverse();
        Ok(entries)
    }

    /// The newest `limit` audit entries older than `before` (a `seq`; all
    /// when `None`) that `filter` matches, newest first: pass the last `seq`
    /// seen to page back.
    pub fn audit(
        &self,
        limit: usize,
        before: Option<u64>,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(AUDIT)?;
        let mut entries = Vec::new();
        let upper = before.unwrap_or(u64::MAX);
        for entry in table.range(..upper)?.rev() {
            if entries.len() >= limit {
                break;
            }
            let (_, bytes) = entry?;
            let entry: AuditEntry = decode(bytes.value())?;
            // Entries are in time order: nothing older can match.
            if filter.since.is_some_and(|t| entry.timestamp < t) {
                break;
            }
            if filter.matches(&entry) {
                entries.push(entry);
            }
        }
        Ok(entries)
    }

    pub(crate) fn server_in(
        &self,
        txn: &WriteTransaction,
        id: u128,
    ) -> Result<Option<ServerRecord>, StoreError> {
        let table = txn.open_table(SERVERS)?;
        let found = table.get(id)?;
        found
            .map(|bytes| self.decode_server(bytes.value()))
            .transpose()
    }

    fn all_servers_in(&self, txn: &WriteTransaction) -> Result<Vec<ServerRecord>, StoreError> {
        let table = txn.open_table(SERVERS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            out.push(self.decode_server(bytes.value())?);
        }
        Ok(out)
    }

    pub(crate) fn put_server(
        &self,
        txn: &WriteTransaction,
        record: &ServerRecord,
    ) -> Result<(), StoreError> {
        let mut sealed = record.clone();
        for value in sealed.transport.secrets_mut().values_mut() {
            *value = self.cipher.seal(value);
        }
        // A URL with a credential in it is sealed whole.
        for url in [sealed.transport.url_mut(), sealed.health_check_url.as_mut()]
            .into_iter()
            .flatten()
        {
            if crate::model::redact::url_has_secrets(url) {
                *url = self.cipher.seal(url);
            }
        }
        let bytes = encode(&sealed)?;
        txn.open_table(SERVERS)?
            .insert(record.id.as_u128(), bytes.as_slice())?;
        Ok(())
    }

    fn decode_server(&self, bytes: &[u8]) -> Result<ServerRecord, StoreError> {
        let mut record: ServerRecord = decode(bytes)?;
        let name = record.name.clone();
        for url in [record.transport.url_mut(), record.health_check_url.as_mut()]
            .into_iter()
            .flatten()
        {
            match self.cipher.open(url) {
                Some(plain) => *url = plain,
                None => tracing::error!(
                    server = %name,
                    "cannot decrypt the stored URL (was {KEY_FILE} replaced?)"
                ),
            }
        }
        for (key, value) in record.transport.secrets_mut().iter_mut() {
            match self.cipher.open(value) {
                Some(plain) => *value = plain,
                // Kept sealed rather than dropped: re-saving keeps it as it was.
                None => tracing::error!(
                    server = %record.name,
                    key = %key,
                    "cannot decrypt a stored secret (was {KEY_FILE} replaced?)"
                ),
            }
        }
        Ok(record)
    }
}

/// A store file beyond this size is not checked whole at every open
/// (~0.4 s per 500 MB on the 2-core machine this was measured on).
const CHECK_AT_OPEN_BYTES: u64 = 256 * 1024 * 1024;
/// Where a reopened store's probe write goes.
const META_DISK_PROBE: &str = "disk_probe";

/// Opens the file through the watched backend, a panic in redb (its
/// answer to some damage) taken as `Damaged`.
fn open_database(
    path: &Path,
    health: &Arc<health::Health>,
    check: bool,
    after_failed_write: bool,
) -> Result<Database, StoreError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| StoreError::DataDir {
            path: path.to_path_buf(),
            source,
        })?;
    let backend = backend::WatchedFile::new(file, Arc::clone(health))
        .map_err(|err| StoreError::from(redb::Error::from(err)))?;
    let warned = std::sync::atomic::AtomicBool::new(false);
    let opened = guard_damage(path, || {
        let mut db = redb::Builder::new()
            .set_cache_size(STORE_CACHE_BYTES)
            .set_repair_callback(move |_| {
                // A full check of the file: seconds for a large catalog.
                if after_failed_write || warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                tracing::warn!(
                    "the store was not closed cleanly last time (the process was killed, or the machine lost power); checking and repairing it"
                );
            })
            .create_with_backend(backend)
            .map_err(|err| match err {
                redb::DatabaseError::DatabaseAlreadyOpen => StoreError::AlreadyOpen {
                    path: path.parent().unwrap_or(path).to_path_buf(),
                },
                err => StoreError::from(redb::Error::from(err)),
            })?;
        // Every page against its checksum (the open above trusts a file
        // that was closed cleanly).
        if check && !db.check_integrity().map_err(redb::Error::from)? {
            // Its last commit did not check out, and redb went back to
            // the one before: said loudly; the rest is served.
            tracing::error!(
                store = %path.display(),
                "the store file was damaged and redb repaired it by going back to its last sound commit: the last change made before this start may be lost"
            );
        }
        Ok(db)
    });
    match opened {
        Err(StoreError::Db(redb::Error::Corrupted(detail))) => Err(StoreError::Damaged {
            path: path.to_path_buf(),
            detail,
        }),
        Err(StoreError::Disk { reason, .. }) if reason.contains("invalid data") => {
            Err(StoreError::Damaged {
                path: path.to_path_buf(),
                detail: reason,
            })
        }
        other => other,
    }
}

/// Runs `work` on the store's file; a panic inside redb (how it meets some
/// damage) becomes `Damaged` instead of unwinding further.
pub(crate) fn guard_damage<T>(
    path: &Path,
    work: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(Err(StoreError::Db(redb::Error::Corrupted(detail)))) => Err(StoreError::Damaged {
            path: path.to_path_buf(),
            detail,
        }),
        Ok(outcome) => outcome,
        Err(panic) => Err(StoreError::Damaged {
            path: path.to_path_buf(),
            detail: panic_message(panic.as_ref()),
        }),
    }
}

/// What a panic said (its payload is a `String` or a `&str` in practice).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "an internal check failed".to_owned())
}

/// A store file of 0 bytes in a data dir whose other files show it was in
/// use: its registrations are gone, and starting on it would say nothing.
fn refuse_emptied(data_dir: &Path, path: &Path) -> Result<(), StoreError> {
    if !std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
        return Ok(());
    }
    let evidence: Vec<&str> = [
        KEY_FILE,
        crate::paths::STATE_KEY_FILE,
        crate::paths::TOKEN_FILE,
        "index",
    ]
    .into_iter()
    .filter(|name| data_dir.join(name).exists())
    .collect();
    if evidence.is_empty() {
        return Ok(());
    }
    Err(StoreError::Emptied {
        path: path.to_path_buf(),
        evidence: evidence.join(", "),
    })
}

/// Whether the disk holding `path` has room for a small write.
fn has_room(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = path.parent().unwrap_or(path);
    let Ok(c_path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return true;
    };
    // SAFETY: statvfs is plain data, for which all zeroes is a value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a zeroed out-struct of the right type.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return true;
    }
    (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64) >= 256 * 1024
}

/// Creates the data dir, or tightens an existing one, to 0700: it holds the
/// store, the key that seals secrets, and the admin token.
fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let data_dir_error = |source| StoreError::DataDir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(data_dir_error)?;
    restrict_to_owner(dir, 0o700).map_err(data_dir_error)
}

/// Sets `mode` unless the permissions already are no wider.
pub(crate) fn restrict_to_owner(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current & !mode != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// `decode`, borrowing what it can from `bytes`.
pub(crate) fn decode_borrowed<'a, T: serde::Deserialize<'a>>(
    bytes: &'a [u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt(err.to_string()))
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    decode_borrowed(bytes)
}

fn registered_entry(
    record: &ServerRecord,
    event: &str,
    details: Option<&str>,
) -> ConnectionHistoryEntry {
    ConnectionHistoryEntry {
        timestamp: Utc::now(),
        event_type: event.to_owned(),
        from_status: None,
        to_status: Some(record.status),
        trigger: None,
        details: details.map(str::to_owned),
    }
}

fn audit_entry(actor: &str, action: &str, server: &str, result: &str) -> AuditEntry {
    AuditEntry {
        seq: 0,
        timestamp: Utc::now(),
        actor: bounded_field(actor),
        action: bounded_field(action),
        server: bounded_field(server),
        result: bounded_field(result),
        details: None,
    }
}

/// A value cut to `AUDIT_FIELD_CHARS` characters, saying how much was cut.
fn bounded_field(value: &str) -> String {
    match value.char_indices().nth(AUDIT_FIELD_CHARS) {
        None => value.to_owned(),
        Some((cut, _)) => format!("{}… ({} more bytes)", &value[..cut], value.len() - cut),
    }
}

fn append_history(
    txn: &WriteTransaction,
    id: ServerId,
    entry: ConnectionHistoryEntry,
) -> Result<(), StoreError> {
    let key = id.as_u128();
    let mut table = txn.open_table(HISTORY)?;
    let (first, next) = {
        let mut range = table.range((key, 0)..=(key, u64::MAX))?;
        let first = range.next().transpose()?.map(|(k, _)| k.value().1);
        let last = range.next_back().transpose()?.map(|(k, _)| k.value().1);
        let next = last.or(first).map_or(0, |seq| seq + 1);
        (first, next)
    };
    table.insert((key, next), encode(&entry)?.as_slice())?;
    if let Some(first) = first
        && next - first >= HISTORY_PER_SERVER
    {
        table.remove((key, first))?;
    }
    Ok(())
}

fn append_audit(
    txn: &WriteTransaction,
    max_bytes: u64,
    mut entry: AuditEntry,
) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META)?;
    let seq = meta.get(META_AUDIT_SEQ)?.map(|v| v.value()).unwrap_or(0) + 1;
    meta.insert(META_AUDIT_SEQ, seq)?;
    entry.seq = seq;
    let mut table = txn.open_table(AUDIT)?;
    let bytes = encode(&entry)?;
    // The byte count is kept beside the log; a store from before it existed
    // counts once.
    let mut total = match meta.get(META_AUDIT_BYTES)?.map(|v| v.value()) {
        Some(total) => total,
        None => {
            let mut sum = 0u64;
            for row in table.iter()? {
                sum += row?.1.value().len() as u64;
            }
            sum
        }
    };
    table.insert(seq, bytes.as_slice())?;
    total += bytes.len() as u64;
    while table.len()? > AUDIT_LIMIT || (total > max_bytes && table.len()? > 1) {
        let Some((_, oldest)) = table.pop_first()? else {
            break;
        };
        total = total.saturating_sub(oldest.value().len() as u64);
    }
    meta.insert(META_AUDIT_BYTES, total)?;
    Ok(())
}

pub(crate) fn bump_catalog_generation(txn: &WriteTransaction) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META)?;
    let next = meta
        .get(META_CATALOG_GENERATION)?
        .map(|v| v.value())
        .unwrap_or(0)
        + 1;
    meta.insert(META_CATALOG_GENERATION, next)?;
    Ok(())
}

pub(crate) fn bump_generation(txn: &WriteTransaction) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META)?;
    let next = meta.get(META_GENERATION)?.map(|v| v.value()).unwrap_or(0) + 1;
    meta.insert(META_GENERATION, next)?;
    Ok(())
}

#[cfg(test)]
mod tests;
