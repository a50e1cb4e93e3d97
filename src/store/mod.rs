//! The store: the single source of truth for registrations, connection
//! history, the audit log and the catalog. Everything else is derived from
//! it and can be rebuilt. Its tables live in the embedded redb file, or
//! (feature `postgres`, `Store::open_shared`) on a PostgreSQL that
//! replicas share, through one table interface (`tables`).
//!
//! All methods are blocking (redb is synchronous and fsyncs on commit; the
//! PostgreSQL client waits for its answers); async callers go through
//! `tokio::task::spawn_blocking`. Every commit is durable when it returns
//! (`Durability::Immediate`; PostgreSQL's synchronous commit), so an
//! acknowledged write survives `kill -9`.
//!
//! This file is its interface (`Store`, `StoreError` and what the other
//! modules name, re-exported); the files beside it are private, one concept
//! each, layered so none uses a file that uses it: `tables` (and
//! `postgres` under it) at the bottom, `codec`, `meta`, `history` and
//! `audit` over it, `servers`, `status` and the catalog files over them,
//! `opening` (and `reopen`, after a failed write) over all the tables,
//! `recover` on top.

mod audit;
mod backend;
mod catalog;
mod codec;
mod decisions;
mod embeddings;
mod grants;
mod health;
mod history;
mod meta;
mod opening;
mod pins;
#[cfg(feature = "postgres")]
pub mod postgres;
mod profiles;
mod recover;
mod reopen;
mod runtime;
mod secrets;
mod servers;
mod skills;
mod status;
mod tables;
mod tokens;

use redb::Database;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::model::InvalidTransition;
use secrets::Cipher;

pub use audit::{AUDIT_FIELD_CHARS, AUDIT_LIMIT, AUDIT_MAX_BYTES};
pub use catalog::{ToolRoute, ToolSummary, definition_hash};
pub use embeddings::embedding_key;
pub use health::{damage, damage_found, damage_is_news, report_damage};
pub use history::HISTORY_PER_SERVER;
pub use meta::SCHEMA_VERSION;
pub use opening::panic_message;
pub use recover::{
    RECOVERED_FILE, Report as RecoveryReport, TableReport, check, confirmed_sound,
    recover as recover_into_new,
};
pub use secrets::SecretError;
pub use servers::UpsertOutcome;
pub use skills::{ClassificationUpdate, SUGGESTION_LIMIT};
// What `recover.rs` names through this module.
use meta::META_SCHEMA_VERSION;

/// The data dir's store file, and the key that seals secrets in it.
const STORE_FILE: &str = "store.redb";
const KEY_FILE: &str = "secret.key";

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
    /// A file or folder of the data dir that cannot be made, read or
    /// written.
    #[error("cannot use {path}: {source}")]
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
        "the store cannot be written ({reason}){}; nothing already stored is lost, and writes resume by themselves once {}",
        if *full { ": the disk holding the data dir is full" } else { "" },
        if *full { "it has room" } else { "the file can be written again" }
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
    #[error("Tool not found: {0}")]
    ToolNotFound(String),
    /// What a decision was about is not what is stored any more.
    #[error("{0}")]
    Stale(String),
    #[error("store error: {0}")]
    Db(redb::Error),
    /// The shared store of replicas.
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Postgres(#[from] postgres::PgError),
}

impl StoreError {
    /// A damaged or emptied store (or one of a newer version): the daemon
    /// cannot run on it, and starting it again does not help.
    pub fn is_unusable(&self) -> bool {
        #[cfg(feature = "postgres")]
        if let StoreError::Postgres(postgres::PgError::NewerSchema { .. }) = self {
            return true;
        }
        matches!(
            self,
            StoreError::Damaged { .. }
                | StoreError::Emptied { .. }
                | StoreError::NewerSchema { .. }
                | StoreError::Secrets(
                    secrets::SecretError::BadKey { .. }
                        | secrets::SecretError::OtherReplicasKey { .. }
                )
        )
    }

    /// A write refused because the disk is full (or over quota).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::Disk { full: true, .. })
    }

    /// The disk failing or the file damaged: nothing wrong with the
    /// request, the store cannot take it now.
    /// A shared store that cannot be reached counts too: the request can
    /// be sent again once the database is back.
    pub fn is_storage_failure(&self) -> bool {
        match self {
            StoreError::Disk { .. } | StoreError::Damaged { .. } => true,
            #[cfg(feature = "postgres")]
            StoreError::Postgres(err) => err.is_unavailable(),
            _ => false,
        }
    }
}

impl From<redb::Error> for StoreError {
    /// An I/O error (the file could not be written or read) is the disk's
    /// doing: `Disk`, which the front doors answer with 507/503.
    fn from(err: redb::Error) -> Self {
        match err {
            // Bytes that are not what redb wrote (another file, a zeroed
            // header), or fewer than its header says there are (a file
            // cut short): damage, not a disk that fails.
            redb::Error::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                StoreError::Db(redb::Error::Corrupted(io.to_string()))
            }
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
    /// The tables replicas share (a PostgreSQL store); `None`: the file
    /// holds them. Derived data (the embedding cache) stays in the file
    /// either way: each replica builds its own.
    #[cfg(feature = "postgres")]
    shared: Option<postgres::PgTables>,
    /// A fingerprint of the registrations last copied into the file (see
    /// `runtime::MIRROR`).
    #[cfg(feature = "postgres")]
    mirrored: std::sync::Mutex<Option<u64>>,
}

impl Store {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests;
