//! Registrations: the servers table and its unique name index, written
//! in one transaction with their history and audit entries so two racing
//! registrations of one name cannot both succeed.

use std::ops::Bound;

use chrono::Utc;

use super::audit::{append_audit, audit_entry};
use super::catalog::delete_server_catalog;
use super::history::{HISTORY, append_history, registered_entry};
use super::meta::{bump_catalog_generation, bump_generation};
use super::tables::{Order, Reads, Table, Writer};
use super::{Store, StoreError};
use crate::model::{ServerId, ServerRecord};

pub(super) const SERVERS: Table<u128, Vec<u8>> = Table::new("servers");
pub(super) const SERVER_NAMES: Table<String, u128> = Table::new("server_names");

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
        self.write(|txn| {
            if txn.get(SERVER_NAMES, &record.name)?.is_some() {
                return Err(StoreError::NameTaken(record.name.clone()));
            }
            txn.insert(SERVER_NAMES, &record.name, &record.id.as_u128())?;
            self.put_server(txn, record)?;
            append_history(txn, record.id, registered_entry(record, "REGISTERED", None))?;
            append_audit(
                txn,
                self.audit_max_bytes,
                audit_entry(actor, "register", &record.name, "ok"),
            )?;
            bump_generation(txn)
        })
    }

    /// Inserts or updates registrations by name in one transaction (config
    /// files at start-up). The incoming record's settings win; the existing
    /// id, status, counters and timestamps are kept.
    pub fn upsert_servers(
        &self,
        records: &[ServerRecord],
        actor: &str,
    ) -> Result<Vec<UpsertOutcome>, StoreError> {
        self.write(|txn| self.upsert_servers_in(txn, records, actor))
    }

    fn upsert_servers_in(
        &self,
        txn: &Writer<'_>,
        records: &[ServerRecord],
        actor: &str,
    ) -> Result<Vec<UpsertOutcome>, StoreError> {
        let mut outcomes = Vec::with_capacity(records.len());
        for incoming in records {
            let existing_id = txn.get(SERVER_NAMES, &incoming.name)?;
            let outcome = match existing_id {
                None => {
                    txn.insert(SERVER_NAMES, &incoming.name, &incoming.id.as_u128())?;
                    self.put_server(txn, incoming)?;
                    append_history(
                        txn,
                        incoming.id,
                        registered_entry(incoming, "REGISTERED", None),
                    )?;
                    UpsertOutcome::Inserted
                }
                Some(id) => {
                    let mut current = self.server_in(txn, id)?.ok_or_else(|| {
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
                    let retuned = || merged.session_view() == current.session_view();
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
                        self.put_server(txn, &merged)?;
                        append_history(
                            txn,
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
                txn,
                self.audit_max_bytes,
                audit_entry(actor, action, &incoming.name, "ok"),
            )?;
            outcomes.push(outcome);
        }
        if outcomes.iter().any(|o| *o != UpsertOutcome::Unchanged) {
            bump_generation(txn)?;
        }
        Ok(outcomes)
    }

    /// Deletes a server and everything that belongs to it (tools, history).
    pub fn remove_server(&self, id: ServerId, actor: &str) -> Result<ServerRecord, StoreError> {
        self.write(|txn| {
            let key = id.as_u128();
            let record = self
                .server_in(txn, key)?
                .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
            txn.remove(SERVERS, &key)?;
            txn.remove(SERVER_NAMES, &record.name)?;
            txn.remove_range(
                HISTORY,
                Bound::Included(&(key, 0)),
                Bound::Included(&(key, u64::MAX)),
            )?;
            delete_server_catalog(txn, key)?;
            txn.remove(super::grants::GRANTS, &key)?;
            super::pins::delete_server_pins(txn, key)?;
            append_audit(
                txn,
                self.audit_max_bytes,
                audit_entry(actor, "remove", &record.name, "ok"),
            )?;
            bump_generation(txn)?;
            bump_catalog_generation(txn)?;
            Ok(record)
        })
    }

    pub fn get_server(&self, id: ServerId) -> Result<Option<ServerRecord>, StoreError> {
        let stored = match self.read(|txn| self.server_in(txn, id.as_u128())) {
            Err(err) if self.is_shared() && err.is_storage_failure() => self
                .mirrored_servers(err)?
                .into_iter()
                .find(|record| record.id == id),
            other => other?,
        };
        self.with_own_runtime_of(stored)
    }

    pub fn get_server_by_name(&self, name: &str) -> Result<Option<ServerRecord>, StoreError> {
        let stored = self.read(|txn| {
            let Some(id) = txn.get(SERVER_NAMES, &name.to_owned())? else {
                return Ok(None);
            };
            self.server_in(txn, id)
        });
        let stored = match stored {
            Err(err) if self.is_shared() && err.is_storage_failure() => self
                .mirrored_servers(err)?
                .into_iter()
                .find(|record| record.name == name),
            other => other?,
        };
        self.with_own_runtime_of(stored)
    }

    /// Every registration, ordered by name. With shared tables that cannot
    /// be reached, the registrations as this replica last read them.
    pub fn list_servers(&self) -> Result<Vec<ServerRecord>, StoreError> {
        let stored = match self.read(|txn| self.list_servers_in(txn)) {
            Ok(stored) => {
                self.mirror_servers(&stored);
                stored
            }
            Err(err) if self.is_shared() && err.is_storage_failure() => {
                self.mirrored_servers(err)?
            }
            Err(err) => return Err(err),
        };
        self.with_own_runtime(stored)
    }

    fn list_servers_in(&self, txn: &impl Reads) -> Result<Vec<ServerRecord>, StoreError> {
        let names = txn.entries(
            SERVER_NAMES,
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
        )?;
        let mut out = Vec::with_capacity(names.len());
        for (_, id) in names {
            if let Some(bytes) = txn.get(SERVERS, &id)? {
                out.push(self.decode_server(&bytes)?);
            }
        }
        Ok(out)
    }

    pub(super) fn server_in(
        &self,
        txn: &impl Reads,
        id: u128,
    ) -> Result<Option<ServerRecord>, StoreError> {
        txn.get(SERVERS, &id)?
            .map(|bytes| self.decode_server(&bytes))
            .transpose()
    }

    pub(super) fn all_servers_in(&self, txn: &Writer<'_>) -> Result<Vec<ServerRecord>, StoreError> {
        let mut out = Vec::new();
        txn.for_each(
            SERVERS,
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            |_, bytes| {
                out.push(self.decode_server(&bytes)?);
                Ok(true)
            },
        )?;
        Ok(out)
    }

    pub(super) fn put_server(
        &self,
        txn: &Writer<'_>,
        record: &ServerRecord,
    ) -> Result<(), StoreError> {
        let bytes = self.encode_server(record)?;
        txn.insert(SERVERS, &record.id.as_u128(), &bytes)?;
        Ok(())
    }
}
