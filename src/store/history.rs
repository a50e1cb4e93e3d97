//! The bounded connection history of each server: what happened to it
//! (registered, updated, every status change), newest kept.

use std::ops::Bound;

use chrono::Utc;

use super::codec::{decode, encode};
use super::tables::{Order, Reader, Reads as _, Table, Writer};
use super::{Store, StoreError};
use crate::model::{ConnectionHistoryEntry, ServerId, ServerRecord};

/// Connection history kept per server; older entries are dropped.
pub const HISTORY_PER_SERVER: u64 = 500;

pub(super) const HISTORY: Table<(u128, u64), Vec<u8>> = Table::new("connection_history");

impl Store {
    /// The newest `limit` history entries of a server, oldest first.
    pub fn history(
        &self,
        id: ServerId,
        limit: usize,
    ) -> Result<Vec<ConnectionHistoryEntry>, StoreError> {
        let key = id.as_u128();
        let newest = |txn: &Reader<'_>| {
            let mut entries = Vec::new();
            txn.for_each(
                HISTORY,
                Bound::Included(&(key, 0)),
                Bound::Included(&(key, u64::MAX)),
                Order::Descending,
                |_, bytes| {
                    if entries.len() >= limit {
                        return Ok(false);
                    }
                    entries.push(decode::<ConnectionHistoryEntry>(&bytes)?);
                    Ok(true)
                },
            )?;
            Ok(entries)
        };
        let mut entries = self.read(newest)?;
        // Shared: the registration's events are in the shared tables, what
        // this replica saw of the server in its own file.
        if self.is_shared() {
            entries.extend(self.read_file(newest)?);
            entries.sort_by_key(|entry| std::cmp::Reverse(entry.timestamp));
            entries.truncate(limit.min(HISTORY_PER_SERVER as usize));
        }
        entries.reverse();
        Ok(entries)
    }
}

pub(super) fn registered_entry(
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

pub(super) fn append_history(
    txn: &Writer<'_>,
    id: ServerId,
    entry: ConnectionHistoryEntry,
) -> Result<(), StoreError> {
    let key = id.as_u128();
    let seq_at = |order| -> Result<Option<u64>, StoreError> {
        let found = txn.first(
            HISTORY,
            Bound::Included(&(key, 0)),
            Bound::Included(&(key, u64::MAX)),
            order,
        )?;
        Ok(found.map(|((_, seq), _)| seq))
    };
    let first = seq_at(Order::Ascending)?;
    let next = seq_at(Order::Descending)?.map_or(0, |last| last + 1);
    txn.insert(HISTORY, &(key, next), &encode(&entry)?)?;
    if let Some(first) = first
        && next - first >= HISTORY_PER_SERVER
    {
        txn.remove(HISTORY, &(key, first))?;
    }
    Ok(())
}
