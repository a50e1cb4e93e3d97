//! Status changes: a server moved through the state machine
//! (`ServerStatus::transition` decides), with its history entry and its
//! audit entry written in the same transaction.

use chrono::Utc;

use super::audit::{append_audit, audit_entry, bounded_field};
use super::history::append_history;
use super::meta::bump_generation;
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
        self.write(|txn| self.transition_in(txn, id, to, trigger, details, update))
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
        let mut record = self
            .server_in(txn, id.as_u128())?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        let from = record.status;
        record.status = from.transition(to, trigger)?;
        record.updated_at = Utc::now();
        if to == ServerStatus::Connected {
            record.connected_at = Some(record.updated_at);
        }
        update(&mut record);
        self.put_server(txn, &record)?;
        let change = format!("{from} -> {to} ({})", trigger.as_str());
        append_audit(
            txn,
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
            txn,
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
        bump_generation(txn)?;
        Ok(record)
    }

    /// Resets every server to `DISCONNECTED` at start-up: no session survives
    /// the process. Returns how many records changed.
    pub fn reset_statuses_after_restart(&self) -> Result<usize, StoreError> {
        self.write(|txn| self.reset_statuses_in(txn))
    }

    fn reset_statuses_in(&self, txn: &Writer<'_>) -> Result<usize, StoreError> {
        let stale: Vec<ServerRecord> = self
            .all_servers_in(txn)?
            .into_iter()
            .filter(|record| record.status != ServerStatus::Disconnected)
            .collect();
        for mut record in stale.iter().cloned() {
            let from = record.status;
            record.status =
                from.transition(ServerStatus::Disconnected, StatusTrigger::ProcessRestart)?;
            record.updated_at = Utc::now();
            self.put_server(txn, &record)?;
            append_audit(
                txn,
                self.audit_max_bytes,
                AuditEntry {
                    details: Some(format!(
                        "{from} -> DISCONNECTED (process_restart): the aggregator restarted"
                    )),
                    ..audit_entry("system", "status", &record.name, "ok")
                },
            )?;
            append_history(
                txn,
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
            bump_generation(txn)?;
        }
        Ok(stale.len())
    }
}
