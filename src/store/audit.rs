//! The audit log: who did what to which server, bounded in entries, bytes
//! and field length so no caller can make it grow without end.

use std::ops::Bound;

use chrono::Utc;

use super::codec::{decode, encode};
use super::meta::{META, meta_in, set_meta};
use super::tables::{Order, Reads as _, Table, Writer};
use super::{Store, StoreError};
use crate::model::{AuditEntry, AuditFilter};

/// Audit entries kept in all; older entries are dropped.
pub const AUDIT_LIMIT: u64 = 100_000;
/// Bytes the audit log may take (encoded entries), whatever their number.
pub const AUDIT_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Longest audit field kept (a 1 MB server name is cut here).
pub const AUDIT_FIELD_CHARS: usize = 512;

pub(super) const AUDIT: Table<u64, Vec<u8>> = Table::new("audit_log");

const META_AUDIT_SEQ: &str = "audit_seq";
const META_AUDIT_BYTES: &str = "audit_bytes";
const META_AUDIT_COUNT: &str = "audit_count";

impl Store {
    /// The newest `limit` audit entries older than `before` (a `seq`; all
    /// when `None`) that `filter` matches, newest first: pass the last `seq`
    /// seen to page back.
    pub fn audit(
        &self,
        limit: usize,
        before: Option<u64>,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let upper = before.unwrap_or(u64::MAX);
        let mut entries = Vec::new();
        self.read(|txn| {
            txn.for_each(
                AUDIT,
                Bound::Unbounded,
                Bound::Excluded(&upper),
                Order::Descending,
                |_, bytes| {
                    if entries.len() >= limit {
                        return Ok(false);
                    }
                    let entry: AuditEntry = decode(&bytes)?;
                    // Entries are in time order: nothing older can match.
                    if filter.since.is_some_and(|t| entry.timestamp < t) {
                        return Ok(false);
                    }
                    if filter.matches(&entry) {
                        entries.push(entry);
                    }
                    Ok(true)
                },
            )
        })?;
        Ok(entries)
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
        self.write(|txn| {
            append_audit(
                txn,
                self.audit_max_bytes,
                audit_entry(actor, action, server, result),
            )
        })
    }

    /// Appends entries made elsewhere (tool calls, gathered and written in
    /// one transaction), bounded as every entry is.
    pub fn append_audits(&self, entries: Vec<AuditEntry>) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let entries = entries.into_iter().map(|mut entry| {
            entry.actor = bounded_field(&entry.actor);
            entry.action = bounded_field(&entry.action);
            entry.server = bounded_field(&entry.server);
            entry.result = bounded_field(&entry.result);
            entry.details = entry.details.as_deref().map(bounded_field);
            entry
        });
        self.write(|txn| append_audit_batch(txn, self.audit_max_bytes, entries))
    }

    #[cfg(test)]
    pub(crate) fn set_audit_max_bytes(&mut self, bytes: u64) {
        self.audit_max_bytes = bytes;
    }
}

pub(super) fn audit_entry(actor: &str, action: &str, server: &str, result: &str) -> AuditEntry {
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
pub(super) fn bounded_field(value: &str) -> String {
    match value.char_indices().nth(AUDIT_FIELD_CHARS) {
        None => value.to_owned(),
        Some((cut, _)) => format!("{}… ({} more bytes)", &value[..cut], value.len() - cut),
    }
}

pub(super) fn append_audit(
    txn: &Writer<'_>,
    max_bytes: u64,
    entry: AuditEntry,
) -> Result<(), StoreError> {
    append_audit_batch(txn, max_bytes, [entry])
}

/// Appends `entries` and trims the oldest past the bounds. The counters
/// are read and written once per batch, and the trim is one range: a
/// second's calls cost a shared store a handful of statements, not a
/// handful per call.
pub(super) fn append_audit_batch(
    txn: &Writer<'_>,
    max_bytes: u64,
    entries: impl IntoIterator<Item = AuditEntry>,
) -> Result<(), StoreError> {
    let mut seq = meta_in(txn, META_AUDIT_SEQ)?;
    // The byte count and the entry count are kept beside the log; a store
    // from before they existed counts once.
    let mut total = match txn.get(META, &META_AUDIT_BYTES.to_owned())? {
        Some(total) => total,
        None => {
            let mut sum = 0u64;
            txn.for_each(
                AUDIT,
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                |_, value| {
                    sum += value.len() as u64;
                    Ok(true)
                },
            )?;
            sum
        }
    };
    let mut kept = match txn.get(META, &META_AUDIT_COUNT.to_owned())? {
        Some(count) => count,
        None => txn.len(AUDIT)?,
    };
    let mut appended = Vec::new();
    for mut entry in entries {
        seq += 1;
        entry.seq = seq;
        let bytes = encode(&entry)?;
        total += bytes.len() as u64;
        kept += 1;
        appended.push((seq, bytes));
    }
    txn.insert_all(AUDIT, &appended)?;
    if kept > AUDIT_LIMIT || (total > max_bytes && kept > 1) {
        let mut last_dropped = None;
        txn.for_each(
            AUDIT,
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            |key, value: Vec<u8>| {
                if kept <= AUDIT_LIMIT && (total <= max_bytes || kept <= 1) {
                    return Ok(false);
                }
                kept -= 1;
                total = total.saturating_sub(value.len() as u64);
                last_dropped = Some(key);
                Ok(true)
            },
        )?;
        if let Some(last) = last_dropped {
            txn.remove_range(AUDIT, Bound::Unbounded, Bound::Included(&last))?;
        }
    }
    set_meta(txn, META_AUDIT_SEQ, seq)?;
    set_meta(txn, META_AUDIT_COUNT, kept)?;
    set_meta(txn, META_AUDIT_BYTES, total)
}
