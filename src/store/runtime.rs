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
