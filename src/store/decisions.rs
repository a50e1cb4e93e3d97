//! A user's decisions on held-back definitions (approve, reject), and the
//! reads that show them (held tools, one tool by id or wire name): the
//! catalog's tools table and the pins, in one transaction.

use chrono::Utc;
use redb::{ReadableDatabase as _, ReadableTable as _};
use serde_json::Value;

use super::audit::{append_audit, audit_entry};
use super::catalog::TOOLS;
use super::codec::{decode, encode};
use super::meta::{bump_catalog_generation, bump_generation};
use super::pins::{PINS, hold, new_pin, pin_in, put_pin, tool_key};
use super::{Store, StoreError};
use crate::model::{Decision, HoldReason, Pin, ServerId, ToolRecord};

impl Store {
    /// The pin of a tool (`None`: never approved).
    pub fn tool_pin(&self, server_id: ServerId, name: &str) -> Result<Option<Pin>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(PINS)?;
        let found = table.get((server_id.as_u128(), tool_key(name).as_str()))?;
        found.map(|bytes| decode(bytes.value())).transpose()
    }

    /// Approves or rejects the current definition of a tool, if it is
    /// still the one with `fingerprint` (when given): an approval pins it
    /// and lets it through; a rejection keeps it held until the server
    /// changes it. Returns the tool as it now stands.
    pub fn decide_tool(
        &self,
        server_id: ServerId,
        name: &str,
        fingerprint: Option<&str>,
        decision: Decision,
        actor: &str,
    ) -> Result<ToolRecord, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let key = server_id.as_u128();
        let mut record: ToolRecord = {
            let table = txn.open_table(TOOLS)?;
            let found = table.get((key, name))?;
            match found {
                Some(bytes) => decode(bytes.value())?,
                None => return Err(StoreError::ToolNotFound(name.to_owned())),
            }
        };
        let definition = record.definition.value();
        let current = crate::trust::fingerprint(&definition);
        if let Some(expected) = fingerprint
            && expected != current
        {
            return Err(StoreError::Stale(format!(
                "tool {} changed again (now {current}, not {expected}): look at it again before deciding",
                record.id
            )));
        }
        let pin_key = tool_key(name);
        let action = match decision {
            Decision::Approve => {
                put_pin(
                    &txn,
                    key,
                    &pin_key,
                    &new_pin(&definition, current.clone(), actor),
                )?;
                if record.hold.take().is_some() {
                    record.refused = header_refusal(&definition);
                }
                "approve"
            }
            Decision::Reject => {
                let mut pin = pin_in(&txn, key, &pin_key)?.unwrap_or_else(|| Pin {
                    fingerprint: String::new(),
                    definition: Value::Null,
                    approved_at: Utc::now(),
                    approved_by: String::new(),
                    rejected: None,
                });
                if pin.fingerprint == current {
                    return Err(StoreError::Stale(format!(
                        "tool {} is the definition approved; there is no change to reject",
                        record.id
                    )));
                }
                pin.rejected = Some(current.clone());
                put_pin(&txn, key, &pin_key, &pin)?;
                let held = hold(HoldReason::Rejected, &record.id, &current);
                record.refused = Some(held.message.clone());
                record.hold = Some(held);
                "reject"
            }
        };
        txn.open_table(TOOLS)?
            .insert((key, name), encode(&record)?.as_slice())?;
        let mut entry = audit_entry(actor, action, &record.server_name, "ok");
        entry.details = Some(format!("tool {} {current}", record.original_name));
        append_audit(&txn, self.audit_max_bytes, entry)?;
        bump_generation(&txn)?;
        bump_catalog_generation(&txn)?;
        txn.commit()?;
        Ok(record)
    }

    /// The tools held back, of every server.
    pub fn held_tools(&self) -> Result<Vec<ToolRecord>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(TOOLS)?;
        let mut held = Vec::new();
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            // Cheap test first: most tools are not held.
            if !bytes.value().windows(7).any(|w| w == b"\"hold\":") {
                continue;
            }
            let record: ToolRecord = decode(bytes.value())?;
            if record.hold.is_some() {
                held.push(record);
            }
        }
        Ok(held)
    }
}

/// The refusal a tool's definition itself earns (invalid `x-mcp-header`
/// annotations), which a lifted hold leaves in place.
pub(super) fn header_refusal(definition: &Value) -> Option<String> {
    crate::model::param_headers::header_params(definition.get("inputSchema"))
        .err()
        .map(|reason| format!("{reason}: the tool is not offered to clients"))
}

impl Store {
    /// The tool a user names: its id (`server.tool`, the first dot
    /// separating) or the wire name clients see; the record as stored.
    pub fn find_tool(&self, name: &str) -> Result<ToolRecord, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let tools = txn.open_table(TOOLS)?;
        let mut located: Option<(u128, String)> = None;
        if let Some((server, tool)) = name.split_once('.') {
            let names = txn.open_table(super::servers::SERVER_NAMES)?;
            if let Some(id) = names.get(server)? {
                located = Some((id.value(), tool.to_owned()));
            }
        }
        if located.as_ref().is_none_or(|(server, tool)| {
            tools.get((*server, tool.as_str())).ok().flatten().is_none()
        }) {
            let aliases = txn.open_table(super::catalog::WIRE_NAMES)?;
            if let Some(owner) = aliases.get(name)? {
                let (server, tool) = owner.value();
                located = Some((server, tool.to_owned()));
            }
        }
        let Some((server, tool)) = located else {
            return Err(StoreError::ToolNotFound(name.to_owned()));
        };
        let found = tools.get((server, tool.as_str()))?;
        match found {
            Some(bytes) => decode(bytes.value()),
            None => Err(StoreError::ToolNotFound(name.to_owned())),
        }
    }
}
