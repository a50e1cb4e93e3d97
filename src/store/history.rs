//! The bounded connection history of each server: what happened to it
//! (registered, updated, every status change), newest kept.

use chrono::Utc;
use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition, WriteTransaction};

use super::codec::{decode, encode};
use super::{Store, StoreError};
use crate::model::{ConnectionHistoryEntry, ServerId, ServerRecord};

/// Connection history kept per server; older entries are dropped.
pub const HISTORY_PER_SERVER: u64 = 500;

pub(super) const HISTORY: TableDefinition<(u128, u64), &[u8]> =
    TableDefinition::new("connection_history");

impl Store {
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
