//! A user's decisions on held-back definitions (approve, reject), and the
//! reads that show them (held tools, one tool by id or wire name): the
//! catalog's tools table and the pins, in one transaction.

use std::ops::Bound;

use chrono::Utc;
use serde_json::Value;

use super::audit::{append_audit, audit_entry};
use super::catalog::TOOLS;
use super::codec::{decode, encode};
use super::meta::{bump_catalog_generation, bump_generation};
use super::pins::{hold, hold_of, item_key, new_pin, pin_in, put_pin, tool_key};
use super::tables::{Order, Reads as _, Writer};
use super::{Store, StoreError};
use crate::model::{
    CatalogKind, Decision, HeldItem, HoldReason, ItemTrust, Pin, ServerId, ToolRecord,
};

impl Store {
    /// The pin of a tool (`None`: never approved).
    pub fn tool_pin(&self, server_id: ServerId, name: &str) -> Result<Option<Pin>, StoreError> {
        self.read(|txn| pin_in(txn, server_id.as_u128(), &tool_key(name)))
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
        self.write(|txn| self.decide_tool_in(txn, server_id, name, fingerprint, decision, actor))
    }

    fn decide_tool_in(
        &self,
        txn: &Writer<'_>,
        server_id: ServerId,
        name: &str,
        fingerprint: Option<&str>,
        decision: Decision,
        actor: &str,
    ) -> Result<ToolRecord, StoreError> {
        let key = server_id.as_u128();
        let tool_key_in_table = (key, name.to_owned());
        let mut record: ToolRecord = match txn.get(TOOLS, &tool_key_in_table)? {
            Some(bytes) => decode(&bytes)?,
            None => return Err(StoreError::ToolNotFound(name.to_owned())),
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
                    txn,
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
                pin_rejection(txn, key, &pin_key, &current, &format!("tool {}", record.id))?;
                let held = hold(HoldReason::Rejected, &record.id, &current);
                record.refused = Some(held.message.clone());
                record.hold = Some(held);
                "reject"
            }
        };
        txn.insert(TOOLS, &tool_key_in_table, &encode(&record)?)?;
        let mut entry = audit_entry(actor, action, &record.server_name, "ok");
        entry.details = Some(format!("tool {} {current}", record.original_name));
        append_audit(txn, self.audit_max_bytes, entry)?;
        bump_generation(txn)?;
        bump_catalog_generation(txn)?;
        Ok(record)
    }

    /// The tools held back, of every server.
    pub fn held_tools(&self) -> Result<Vec<ToolRecord>, StoreError> {
        let mut held = Vec::new();
        self.read(|txn| {
            txn.for_each(
                TOOLS,
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                |_, bytes| {
                    // Cheap test first: most tools are not held.
                    if !bytes.windows(7).any(|w| w == b"\"hold\":") {
                        return Ok(true);
                    }
                    let record: ToolRecord = decode(&bytes)?;
                    if record.hold.is_some() {
                        held.push(record);
                    }
                    Ok(true)
                },
            )
        })?;
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
        self.read(|txn| {
            let tool_of = |server: u128, tool: &str| txn.get(TOOLS, &(server, tool.to_owned()));
            let mut found = None;
            if let Some((server, tool)) = name.split_once('.')
                && let Some(id) = txn.get(super::servers::SERVER_NAMES, &server.to_owned())?
            {
                found = tool_of(id, tool)?;
            }
            if found.is_none()
                && let Some((server, tool)) =
                    txn.get(super::catalog::WIRE_NAMES, &name.to_owned())?
            {
                found = tool_of(server, &tool)?;
            }
            match found {
                Some(bytes) => decode(&bytes),
                None => Err(StoreError::ToolNotFound(name.to_owned())),
            }
        })
    }
}

impl Store {
    /// A prompt or resource template a user names by its id
    /// (`prompt:SERVER.NAME`, `template:SERVER:URI_TEMPLATE`), held or not.
    pub fn find_item(&self, id: &str) -> Result<HeldItem, StoreError> {
        let not_found = || StoreError::ToolNotFound(id.to_owned());
        let (kind, server, key) = CatalogKind::parse_item_id(id).ok_or_else(not_found)?;
        self.read(|txn| {
            let server_id = txn
                .get(super::servers::SERVER_NAMES, &server.to_owned())?
                .ok_or_else(not_found)?;
            let found = txn
                .get(
                    super::catalog::table_for(kind),
                    &(server_id, key.to_owned()),
                )?
                .ok_or_else(not_found)?;
            Ok(held_item(
                ServerId::from_u128(server_id),
                server,
                kind,
                key,
                decode(&found)?,
            ))
        })
    }

    /// The pin of a prompt or resource template (`None`: never approved).
    pub fn item_pin(&self, item: &HeldItem) -> Result<Option<Pin>, StoreError> {
        let pin_key = item_key(item.kind, &item.key);
        self.read(|txn| pin_in(txn, item.server_id.as_u128(), &pin_key))
    }

    /// The prompts and resource templates held back, of every server.
    pub fn held_items(&self) -> Result<Vec<HeldItem>, StoreError> {
        self.read(|txn| {
            let names: std::collections::HashMap<u128, String> = txn
                .entries(
                    super::servers::SERVER_NAMES,
                    Bound::Unbounded,
                    Bound::Unbounded,
                    Order::Ascending,
                )?
                .into_iter()
                .map(|(name, id)| (id, name))
                .collect();
            let mut held = Vec::new();
            let marker = crate::model::ITEM_TRUST_FIELD.as_bytes();
            for kind in [CatalogKind::Prompt, CatalogKind::ResourceTemplate] {
                txn.for_each(
                    super::catalog::table_for(kind),
                    Bound::Unbounded,
                    Bound::Unbounded,
                    Order::Ascending,
                    |(server, item_key), bytes| {
                        if !bytes.windows(marker.len()).any(|w| w == marker) {
                            return Ok(true);
                        }
                        let server_name = names.get(&server).map_or("", String::as_str);
                        let item = held_item(
                            ServerId::from_u128(server),
                            server_name,
                            kind,
                            &item_key,
                            decode(&bytes)?,
                        );
                        if item.trust.is_some() {
                            held.push(item);
                        }
                        Ok(true)
                    },
                )?;
            }
            Ok(held)
        })
    }

    /// `decide_tool` for a prompt or resource template.
    pub fn decide_item(
        &self,
        item: &HeldItem,
        fingerprint: Option<&str>,
        decision: Decision,
        actor: &str,
    ) -> Result<HeldItem, StoreError> {
        self.write(|txn| self.decide_item_in(txn, item, fingerprint, decision, actor))
    }

    fn decide_item_in(
        &self,
        txn: &Writer<'_>,
        item: &HeldItem,
        fingerprint: Option<&str>,
        decision: Decision,
        actor: &str,
    ) -> Result<HeldItem, StoreError> {
        let server = item.server_id.as_u128();
        let id = item.id();
        let table = super::catalog::table_for(item.kind);
        let item_key_in_table = (server, item.key.clone());
        let stored: Value = match txn.get(table, &item_key_in_table)? {
            Some(bytes) => decode(&bytes)?,
            None => return Err(StoreError::ToolNotFound(id)),
        };
        let mut current_item = held_item(
            item.server_id,
            &item.server_name,
            item.kind,
            &item.key,
            stored,
        );
        let current = crate::trust::fingerprint(&current_item.definition);
        if let Some(expected) = fingerprint
            && expected != current
        {
            return Err(StoreError::Stale(format!(
                "{id} changed again (now {current}, not {expected}): look at it again before deciding"
            )));
        }
        let pin_key = item_key(item.kind, &item.key);
        let action = match decision {
            Decision::Approve => {
                put_pin(
                    txn,
                    server,
                    &pin_key,
                    &new_pin(&current_item.definition, current.clone(), actor),
                )?;
                current_item.trust = None;
                "approve"
            }
            Decision::Reject => {
                pin_rejection(txn, server, &pin_key, &current, &id)?;
                let what = super::catalog::item_what(item.kind, &id);
                current_item.trust = Some(ItemTrust {
                    hold: hold_of(HoldReason::Rejected, &what, &id, &current),
                    findings: current_item
                        .trust
                        .take()
                        .map(|t| t.findings)
                        .unwrap_or_default(),
                });
                "reject"
            }
        };
        let mut stored = current_item.definition.clone();
        if let (Some(trust), Value::Object(fields)) = (&current_item.trust, &mut stored) {
            fields.insert(
                crate::model::ITEM_TRUST_FIELD.to_owned(),
                serde_json::to_value(trust).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
        }
        txn.insert(table, &item_key_in_table, &encode(&stored)?)?;
        let mut entry = audit_entry(actor, action, &item.server_name, "ok");
        entry.details = Some(format!("{id} {current}"));
        append_audit(txn, self.audit_max_bytes, entry)?;
        bump_generation(txn)?;
        Ok(current_item)
    }
}

/// An item as stored, its trust field taken out.
fn held_item(
    server_id: ServerId,
    server_name: &str,
    kind: CatalogKind,
    key: &str,
    mut stored: Value,
) -> HeldItem {
    let trust = ItemTrust::of(&stored);
    if let Value::Object(fields) = &mut stored {
        fields.remove(crate::model::ITEM_TRUST_FIELD);
    }
    HeldItem {
        server_id,
        server_name: server_name.to_owned(),
        kind,
        key: key.to_owned(),
        definition: stored,
        trust,
    }
}

/// Records that the definition with fingerprint `current` was rejected
/// (it stays held until the server changes it); `Stale` if it is the one
/// approved.
fn pin_rejection(
    txn: &Writer<'_>,
    server: u128,
    pin_key: &str,
    current: &str,
    what: &str,
) -> Result<(), StoreError> {
    let mut pin = pin_in(txn, server, pin_key)?.unwrap_or_else(|| Pin {
        fingerprint: String::new(),
        definition: Value::Null,
        approved_at: Utc::now(),
        approved_by: String::new(),
        rejected: None,
        ui_pinned: true,
    });
    if pin.fingerprint == current {
        return Err(StoreError::Stale(format!(
            "{what} is the definition approved; there is no change to reject"
        )));
    }
    pin.rejected = Some(current.to_owned());
    put_pin(txn, server, pin_key, &pin)
}
