//! Status changes: a server moved through the state machine
//! (`ServerStatus::transition` decides), with its history entry and its
//! audit entry written in the same transaction. When the registrations are
//! shared, the change is this replica's own (`runtime`): its view and
//! history in its file, the audit entry in the shared trail when the
//! database takes it.

use chrono::Utc;

use super::audit::{append_audit, audit_entry, bounded_field};
use super::history::append_history;
use super::meta::bump_generation;
use super::runtime::{RUNTIME, not_disconnected, put_runtime};
use super::tables::Writer;
use super::{Store, StoreError};
use crate::model::{
    AuditEntry, ConnectionHistoryEntry, ServerId, ServerRecord, ServerStatus, StatusTrigger,
};

impl Store {
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
        if self.is_shared() {
            return self.transition_own(id, to, trigger, details, update);
        }
        self.write(|txn| self.transition_in(txn, id, to, trigger, details, update))
    }

    fn transition_own(
        &self,
        id: ServerId,
        to: ServerStatus,
        trigger: StatusTrigger,
        details: Option<String>,
        update: impl FnOnce(&mut ServerRecord),
    ) -> Result<ServerRecord, StoreError> {
        let stored = self.read(|txn| self.server_in(txn, id.as_u128()))?;
        let record = self
            .with_own_runtime_of(stored)?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        let (record, history, audit) = changed(record, to, trigger, details, update)?;
        self.write_file(|txn| {
            put_runtime(txn, &record)?;
            append_history(txn, id, history)?;
            bump_generation(txn)
        })?;
        self.audit_if_possible(audit);
        Ok(record)
    }

    /// An audit entry of something this replica did to itself (a status
    /// change): the shared trail takes it when the database is there, and
    /// the change stands either way.
    fn audit_if_possible(&self, entry: AuditEntry) {
        if let Err(err) = self.write(|txn| append_audit(txn, self.audit_max_bytes, entry)) {
            tracing::warn!("a status change is not in the shared audit log: {err}");
        }
    }

    fn transition_in(
        &self,
        txn: &Writer<'_>,
        id: ServerId,
        to: ServerStatus,
        trigger: StatusTrigger,
        details: Option<String>,
        update: impl FnOnce(&mut ServerRecord),
    ) -> Result<ServerRecord, StoreError> {
        let record = self
            .server_in(txn, id.as_u128())?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        let (record, history, audit) = changed(record, to, trigger, details, update)?;
        self.put_server(txn, &record)?;
        append_audit(txn, self.audit_max_bytes, audit)?;
        append_history(txn, id, history)?;
        bump_generation(txn)?;
        Ok(record)
    }

    /// Resets every server to `DISCONNECTED` at start-up: no session survives
    /// the process. Returns how many records changed.
    pub fn reset_statuses_after_restart(&self) -> Result<usize, StoreError> {
        if self.is_shared() {
            return self.reset_own_statuses();
        }
        self.write(|txn| self.reset_statuses_in(txn))
    }

    fn reset_statuses_in(&self, txn: &Writer<'_>) -> Result<usize, StoreError> {
        let stale: Vec<ServerRecord> = self
            .all_servers_in(txn)?
            .into_iter()
            .filter(|record| record.status != ServerStatus::Disconnected)
            .collect();
        for record in stale.iter().cloned() {
            let (record, history, audit) = restarted(record)?;
            self.put_server(txn, &record)?;
            append_audit(txn, self.audit_max_bytes, audit)?;
            append_history(txn, record.id, history)?;
        }
        if !stale.is_empty() {
            bump_generation(txn)?;
        }
        Ok(stale.len())
    }

    /// `reset_statuses_after_restart` of this replica's own view.
    fn reset_own_statuses(&self) -> Result<usize, StoreError> {
        let stale = self.write_file(not_disconnected)?;
        if stale.is_empty() {
            return Ok(0);
        }
        let stored = self.read(|txn| {
            stale
                .iter()
                .map(|id| self.server_in(txn, *id))
                .collect::<Result<Vec<_>, _>>()
        })?;
        let mine = self.with_own_runtime(stored.into_iter().flatten().collect())?;
        let mut audits = Vec::new();
        self.write_file(|txn| {
            // What this replica kept of servers removed meanwhile goes.
            for id in &stale {
                if !mine.iter().any(|record| record.id.as_u128() == *id) {
                    txn.remove(RUNTIME, id)?;
                }
            }
            for record in mine {
                let (record, history, audit) = restarted(record)?;
                put_runtime(txn, &record)?;
                append_history(txn, record.id, history)?;
                audits.push(audit);
            }
            bump_generation(txn)
        })?;
        let reset = audits.len();
        for audit in audits {
            self.audit_if_possible(audit);
        }
        Ok(reset)
    }
}

/// A server disconnected by the process's restart.
fn restarted(
    record: ServerRecord,
) -> Result<(ServerRecord, ConnectionHistoryEntry, AuditEntry), StoreError> {
    changed(
        record,
        ServerStatus::Disconnected,
        StatusTrigger::ProcessRestart,
        Some("the aggregator restarted".to_owned()),
        |_| {},
    )
}

/// A server moved to `to` (checked by the state machine), and what records
/// the move: its history entry and its audit entry.
fn changed(
    mut record: ServerRecord,
    to: ServerStatus,
    trigger: StatusTrigger,
    details: Option<String>,
    update: impl FnOnce(&mut ServerRecord),
) -> Result<(ServerRecord, ConnectionHistoryEntry, AuditEntry), StoreError> {
    let from = record.status;
    record.status = from.transition(to, trigger)?;
    record.updated_at = Utc::now();
    if to == ServerStatus::Connected {
        record.connected_at = Some(record.updated_at);
    }
    update(&mut record);
    let change = format!("{from} -> {to} ({})", trigger.as_str());
    let audit = AuditEntry {
        details: Some(bounded_field(&match &details {
            Some(why) => format!("{change}: {why}"),
            None => change,
        })),
        ..audit_entry(trigger.actor(), "status", &record.name, "ok")
    };
    let history = ConnectionHistoryEntry {
        timestamp: record.updated_at,
        event_type: to.as_str().to_owned(),
        from_status: Some(from),
        to_status: Some(to),
        trigger: Some(trigger),
        details,
    };
    Ok((record, history, audit))
}
