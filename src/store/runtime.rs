//! What a replica keeps of each server for itself when the registrations
//! are shared: its status, error, connection and health-check times, the
//! protocol revision its session speaks, and its connection history.
//! Every replica runs its own sessions to the servers, so each has its own
//! view of them; those fields live in the replica's own file and are laid
//! over the shared registration when it is read. With the tables in the
//! file alone the registration holds them, as it always did.

use std::collections::HashMap;
use std::ops::Bound;

use chrono::{DateTime, Utc};

use super::codec::{decode, encode};
use super::tables::{Order, Reads as _, Table, Writer};
use super::{Store, StoreError};
use crate::model::{ServerRecord, ServerStatus};

/// Server id -> `Runtime`, in the replica's file.
pub(super) const RUNTIME: Table<u128, Vec<u8>> = Table::new("replica_runtime");
/// Server id -> the shared registration (secrets sealed) as this replica
/// last listed it, in its file: while the shared store cannot be reached,
/// registrations are read from here, so the replica goes on showing what
/// it serves.
const MIRROR: Table<u128, Vec<u8>> = Table::new("replica_registrations");

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Runtime {
    status: ServerStatus,
    error_message: Option<String>,
    connected_at: Option<DateTime<Utc>>,
    last_health_check: Option<DateTime<Utc>>,
    protocol_version: Option<String>,
    updated_at: DateTime<Utc>,
}

impl Runtime {
    pub(super) fn of(record: &ServerRecord) -> Runtime {
        Runtime {
            status: record.status,
            error_message: record.error_message.clone(),
            connected_at: record.connected_at,
            last_health_check: record.last_health_check,
            protocol_version: record.protocol_version.clone(),
            updated_at: record.updated_at,
        }
    }

    /// The registration as this replica sees it; a server it never
    /// connected is disconnected here, whatever another replica wrote.
    fn lay_over(own: Option<&Runtime>, mut record: ServerRecord) -> ServerRecord {
        match own {
            Some(own) => {
                record.status = own.status;
                record.error_message = own.error_message.clone();
                record.connected_at = own.connected_at;
                record.last_health_check = own.last_health_check;
                if own.protocol_version.is_some() {
                    record.protocol_version = own.protocol_version.clone();
                }
                record.updated_at = record.updated_at.max(own.updated_at);
            }
            None => {
                record.status = ServerStatus::Disconnected;
                record.error_message = None;
                record.connected_at = None;
                record.last_health_check = None;
            }
        }
        record
    }
}

impl Store {
    /// Keeps a copy of `records`, the shared registrations just listed, in
    /// the file when they differ from the last copy. Best effort: a copy
    /// that cannot be written is only older.
    pub(super) fn mirror_servers(&self, records: &[ServerRecord]) {
        #[cfg(feature = "postgres")]
        {
            use std::hash::{Hash as _, Hasher as _};
            if !self.is_shared() {
                return;
            }
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            for record in records {
                serde_json::to_vec(record)
                    .unwrap_or_default()
                    .hash(&mut hasher);
            }
            let fingerprint = hasher.finish();
            let mut mirrored = self
                .mirrored
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if *mirrored == Some(fingerprint) {
                return;
            }
            let copied = self.write_file(|txn| {
                txn.remove_range(MIRROR, Bound::Unbounded, Bound::Unbounded)?;
                for record in records {
                    txn.insert(MIRROR, &record.id.as_u128(), &self.encode_server(record)?)?;
                }
                Ok(())
            });
            match copied {
                Ok(()) => *mirrored = Some(fingerprint),
                Err(err) => tracing::debug!("the registrations' copy was not updated: {err}"),
            }
        }
        #[cfg(not(feature = "postgres"))]
        let _ = records;
    }

    /// The registrations as last copied, ordered by name; `unreachable`
    /// (why the shared store was not read) when there is no copy.
    pub(super) fn mirrored_servers(
        &self,
        unreachable: StoreError,
    ) -> Result<Vec<ServerRecord>, StoreError> {
        let mut records = self
            .read_file(|txn| {
                txn.entries(MIRROR, Bound::Unbounded, Bound::Unbounded, Order::Ascending)
            })
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, bytes)| self.decode_server(&bytes).ok())
            .collect::<Vec<_>>();
        if records.is_empty() {
            return Err(unreachable);
        }
        records.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(records)
    }

    /// Registrations as this replica sees them (as stored, unless shared).
    pub(super) fn with_own_runtime(
        &self,
        records: Vec<ServerRecord>,
    ) -> Result<Vec<ServerRecord>, StoreError> {
        if !self.is_shared() {
            return Ok(records);
        }
        let own: HashMap<u128, Runtime> = self.read_file(|txn| {
            txn.entries(
                RUNTIME,
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
            )?
            .into_iter()
            .map(|(id, bytes)| Ok((id, decode(&bytes)?)))
            .collect()
        })?;
        Ok(records
            .into_iter()
            .map(|record| Runtime::lay_over(own.get(&record.id.as_u128()), record))
            .collect())
    }

    /// One registration as this replica sees it.
    pub(super) fn with_own_runtime_of(
        &self,
        record: Option<ServerRecord>,
    ) -> Result<Option<ServerRecord>, StoreError> {
        match record {
            Some(record) if self.is_shared() => {
                let own: Option<Runtime> = self.read_file(|txn| {
                    txn.get(RUNTIME, &record.id.as_u128())?
                        .map(|bytes| decode(&bytes))
                        .transpose()
                })?;
                Ok(Some(Runtime::lay_over(own.as_ref(), record)))
            }
            other => Ok(other),
        }
    }
}

/// Stores what this replica now sees of a server.
pub(super) fn put_runtime(txn: &Writer<'_>, record: &ServerRecord) -> Result<(), StoreError> {
    txn.insert(
        RUNTIME,
        &record.id.as_u128(),
        &encode(&Runtime::of(record))?,
    )?;
    Ok(())
}

/// The servers this replica sees as other than disconnected.
pub(super) fn not_disconnected(txn: &Writer<'_>) -> Result<Vec<u128>, StoreError> {
    let mut out = Vec::new();
    txn.for_each(
        RUNTIME,
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        |id, bytes| {
            let own: Runtime = decode(&bytes)?;
            if own.status != ServerStatus::Disconnected {
                out.push(id);
            }
            Ok(true)
        },
    )?;
    Ok(out)
}
