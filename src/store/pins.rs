//! The pins table: per server and item (`tool:NAME`, `prompt:NAME`,
//! `template:URI`), the definition approved and its fingerprint; the key
//! `""` marks a server whose first complete listing was trusted. Written
//! in the transaction that writes the catalog, so an item's hold and its
//! pin never disagree; approvals and rejections go through here too.

use chrono::Utc;
use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition, WriteTransaction};
use serde_json::Value;

use super::audit::{append_audit, audit_entry};
use super::catalog::TOOLS;
use super::codec::{decode, encode};
use super::meta::{bump_catalog_generation, bump_generation};
use super::{Store, StoreError};
use crate::model::{
    AuditEntry, Hold, HoldReason, Pin, PinPolicy, ServerId, ServerRecord, ToolRecord,
};
use crate::trust::{PinAction, ScanContext};

pub(super) const PINS: TableDefinition<(u128, &str), &[u8]> = TableDefinition::new("pins");

/// The marker of a server whose definitions were approved once.
const APPROVED_MARKER: &str = "";

/// The pin key of a tool.
pub(super) fn tool_key(name: &str) -> String {
    format!("tool:{name}")
}

pub(super) fn pin_in(
    txn: &WriteTransaction,
    server: u128,
    item: &str,
) -> Result<Option<Pin>, StoreError> {
    let table = txn.open_table(PINS)?;
    let found = table.get((server, item))?;
    found.map(|bytes| decode(bytes.value())).transpose()
}

pub(super) fn put_pin(
    txn: &WriteTransaction,
    server: u128,
    item: &str,
    pin: &Pin,
) -> Result<(), StoreError> {
    txn.open_table(PINS)?
        .insert((server, item), encode(pin)?.as_slice())?;
    Ok(())
}

pub(super) fn server_approved(txn: &WriteTransaction, server: u128) -> Result<bool, StoreError> {
    Ok(txn
        .open_table(PINS)?
        .get((server, APPROVED_MARKER))?
        .is_some())
}

pub(super) fn mark_server_approved(txn: &WriteTransaction, server: u128) -> Result<(), StoreError> {
    txn.open_table(PINS)?
        .insert((server, APPROVED_MARKER), b"{}".as_slice())?;
    Ok(())
}

pub(super) fn delete_server_pins(txn: &WriteTransaction, server: u128) -> Result<(), StoreError> {
    txn.open_table(PINS)?
        .retain_in((server, "")..(server + 1, ""), |_, _| false)?;
    Ok(())
}

/// A new pin of `definition` (a tool's, prompt's or template's JSON).
pub(super) fn new_pin(definition: &Value, fingerprint: String, approved_by: &str) -> Pin {
    Pin {
        fingerprint,
        definition: crate::trust::pinned_fields(definition),
        approved_at: Utc::now(),
        approved_by: approved_by.to_owned(),
        rejected: None,
    }
}

/// What a user is told of a held definition: why, and how to let it through.
pub(crate) fn hold_message(reason: HoldReason, item: &str, tool_id: &str) -> String {
    let why = match reason {
        HoldReason::Changed => format!("{item} changed since it was approved"),
        HoldReason::New => format!("{item} is new since this server's tools were approved"),
        HoldReason::Findings => {
            format!("{item}'s definition looks like it gives the model hidden instructions")
        }
        HoldReason::Rejected => format!("{item}'s current definition was rejected"),
    };
    format!(
        "held back by the aggregator: {why}; see `mcp-aggregator tools diff {tool_id}`, then `mcp-aggregator tools approve {tool_id}` to let it through"
    )
}

/// A hold of the current definition.
pub(super) fn hold(reason: HoldReason, tool_id: &str, fingerprint: &str) -> Hold {
    Hold {
        reason,
        message: hold_message(reason, &format!("tool {tool_id}"), tool_id),
        fingerprint: fingerprint.to_owned(),
        since: Utc::now(),
    }
}

/// The approval a user gives: what was approved or rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

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

/// The trust checks of one listing of a server's tools, applied inside the
/// transaction that stores it.
pub(super) struct TrustPass {
    server: u128,
    server_name: String,
    policy: PinPolicy,
    /// The server's definitions were approved before this listing.
    approved: bool,
    context: ScanContext,
    audits: Vec<AuditEntry>,
}

impl TrustPass {
    pub(super) fn begin(
        txn: &WriteTransaction,
        server: u128,
        record: &ServerRecord,
    ) -> Result<TrustPass, StoreError> {
        Ok(TrustPass {
            server,
            server_name: record.name.clone(),
            policy: record.trust.pinning,
            approved: server_approved(txn, server)?,
            context: ScanContext::default(),
            audits: Vec::new(),
        })
    }

    /// The names the shadowing check compares against: every other
    /// server's tools (original and wire names), and this one's own.
    pub(super) fn load_context<'n>(
        &mut self,
        aliases: &impl redb::ReadableTable<&'static str, (u128, &'static str)>,
        server: u128,
        own: impl Iterator<Item = &'n str>,
    ) -> Result<(), StoreError> {
        self.context.own_tools = own.map(str::to_owned).collect();
        for entry in aliases.iter()? {
            let (wire, owner) = entry?;
            let (owner_server, tool) = owner.value();
            if owner_server == server {
                self.context.own_tools.insert(wire.value().to_owned());
            } else {
                self.context.other_tools.insert(wire.value().to_owned());
                self.context.other_tools.insert(tool.to_owned());
            }
        }
        // A name both servers have is not another server's.
        let own = &self.context.own_tools;
        self.context.other_tools.retain(|name| !own.contains(name));
        Ok(())
    }

    /// Scans (when `rescan`, or when the definition is not the one
    /// approved), judges and pins one tool; true when its hold or findings
    /// changed.
    pub(super) fn apply(
        &mut self,
        txn: &WriteTransaction,
        record: &mut ToolRecord,
        definition: &Value,
        base_refusal: &Option<String>,
        rescan: bool,
    ) -> Result<bool, StoreError> {
        if self.policy == PinPolicy::Off && !rescan && record.hold.is_none() {
            return Ok(false);
        }
        let before = (record.hold.clone(), record.findings.len());
        let fingerprint = crate::trust::fingerprint(definition);
        let pin_key = tool_key(&record.original_name);
        let pin = pin_in(txn, self.server, &pin_key)?;
        let approved_as_is = pin.as_ref().is_some_and(|p| p.fingerprint == fingerprint);
        if rescan || !approved_as_is {
            record.findings = crate::trust::scan_definition(definition, &self.context);
        }
        let verdict = crate::trust::judge(
            self.policy,
            self.approved,
            pin.as_ref()
                .map(|p| (p.fingerprint.as_str(), p.rejected.as_deref())),
            &fingerprint,
            &record.findings,
        );
        match verdict.pin {
            PinAction::Keep => {}
            PinAction::Pin => put_pin(
                txn,
                self.server,
                &pin_key,
                &new_pin(definition, fingerprint.clone(), "trust-on-first-use"),
            )?,
            PinAction::Flag => {
                put_pin(
                    txn,
                    self.server,
                    &pin_key,
                    &new_pin(definition, fingerprint.clone(), "warn-policy"),
                )?;
                let what = if pin.is_some() { "changed" } else { "new" };
                self.audit(
                    "definition_flagged",
                    format!(
                        "tool {} is {what} ({fingerprint}); let through (pinning: warn)",
                        record.original_name
                    ),
                );
            }
        }
        match verdict.hold {
            Some(reason) => {
                let mut held = hold(reason, &record.id, &fingerprint);
                if let Some(old) = &record.hold
                    && old.reason == reason
                    && old.fingerprint == fingerprint
                {
                    held.since = old.since;
                } else {
                    let rules: Vec<&str> = record
                        .findings
                        .iter()
                        .filter(|f| f.severity == crate::model::Severity::High)
                        .map(|f| f.rule.as_str())
                        .collect();
                    self.audit(
                        "quarantine",
                        format!(
                            "tool {} held ({}{}) {fingerprint}",
                            record.original_name,
                            reason.as_str(),
                            if rules.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", rules.join(", "))
                            }
                        ),
                    );
                }
                record.refused = base_refusal.clone().or_else(|| Some(held.message.clone()));
                record.hold = Some(held);
            }
            None => {
                record.hold = None;
                record.refused = base_refusal.clone();
            }
        }
        Ok(before != (record.hold.clone(), record.findings.len()))
    }

    fn audit(&mut self, action: &str, details: String) {
        let mut entry = audit_entry("trust", action, &self.server_name, "ok");
        entry.details = Some(details);
        self.audits.push(entry);
    }

    /// Marks the server approved after its first complete listing, and
    /// writes the audit entries the pass made.
    pub(super) fn finish(
        self,
        txn: &WriteTransaction,
        complete: bool,
        audit_max_bytes: u64,
    ) -> Result<(), StoreError> {
        if complete && !self.approved && self.policy != PinPolicy::Off {
            mark_server_approved(txn, self.server)?;
        }
        for entry in self.audits {
            append_audit(txn, audit_max_bytes, entry)?;
        }
        Ok(())
    }
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
