//! Registrations: the servers table and its unique name index, written
//! in one transaction with their history and audit entries so two racing
//! registrations of one name cannot both succeed.

use chrono::Utc;
use redb::{
    ReadableDatabase as _, ReadableTable as _, ReadableTableMetadata as _, TableDefinition,
    WriteTransaction,
};

use super::audit::{append_audit, audit_entry};
use super::catalog::delete_server_catalog;
use super::history::{HISTORY, append_history, registered_entry};
use super::meta::{bump_catalog_generation, bump_generation};
use super::{Store, StoreError};
use crate::model::{ServerId, ServerRecord};

pub(super) const SERVERS: TableDefinition<u128, &[u8]> = TableDefinition::new("servers");
pub(super) const SERVER_NAMES: TableDefinition<&str, u128> = TableDefinition::new("server_names");

/// How a config-file upsert changed a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpsertOutcome {
    Inserted,
    /// Settings its session runs on changed: it is to be reconnected.
    Updated,
    /// Only what is read per call or per table changed (description,
    /// priority, call limits, whether arguments are checked): applied
    /// without reconnecting.
    Retuned,
    Unchanged,
}

impl Store {
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
                    // The same but for what no session runs on.
                    let retuned = || {
                        let mut trust = merged.trust.clone();
                        trust.limits = current.trust.limits.clone();
                        trust.validate_arguments = current.trust.validate_arguments;
                        ServerRecord {
                            error_message: merged.error_message.clone(),
                            ..current.clone()
                        } == ServerRecord {
                            description: current.description.clone(),
                            priority: current.priority,
                            trust,
                            ..merged.clone()
                        }
                    };
                    if unchanged {
                        UpsertOutcome::Unchanged
                    } else {
                        let outcome = if retuned() {
                            UpsertOutcome::Retuned
                        } else {
                            UpsertOutcome::Updated
                        };
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
                        outcome
                    }
                }
            };
            let action = match outcome {
                UpsertOutcome::Inserted => "register",
                UpsertOutcome::Updated | UpsertOutcome::Retuned => "update",
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
        delete_server_catalog(&txn, key)?;
        txn.open_table(super::grants::GRANTS)?.remove(key)?;
        super::pins::delete_server_pins(&txn, key)?;
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

    pub(super) fn server_in(
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

    pub(super) fn all_servers_in(
        &self,
        txn: &WriteTransaction,
    ) -> Result<Vec<ServerRecord>, StoreError> {
        let table = txn.open_table(SERVERS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            out.push(self.decode_server(bytes.value())?);
        }
        Ok(out)
    }

    pub(super) fn put_server(
        &self,
        txn: &WriteTransaction,
        record: &ServerRecord,
    ) -> Result<(), StoreError> {
        let bytes = self.encode_server(record)?;
        txn.open_table(SERVERS)?
            .insert(record.id.as_u128(), bytes.as_slice())?;
        Ok(())
    }
}
