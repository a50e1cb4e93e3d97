//! The pins table: per server and item (`tool:NAME`, `prompt:NAME`,
//! `template:URI`), the definition approved and its fingerprint; the key
//! `""` marks a server whose first complete listing was trusted. Written
//! in the transaction that writes the catalog, so an item's hold and its
//! pin never disagree; approvals and rejections go through here too.

use chrono::Utc;
use serde_json::Value;

use super::StoreError;
use super::audit::{append_audit, audit_entry};
use super::codec::{decode, encode};
use super::tables::{Reads, Table, Writer, server_range};
use crate::model::{
    AuditEntry, CatalogKind, Finding, Hold, HoldReason, Pin, PinPolicy, ServerRecord, ToolRecord,
};
use crate::trust::{PinAction, ScanContext};

pub(super) const PINS: Table<(u128, String), Vec<u8>> = Table::new("pins");

/// The marker of a server whose tools were approved once.
const APPROVED_MARKER: &str = "";

/// The pin key of a tool.
pub(super) fn tool_key(name: &str) -> String {
    format!("tool:{name}")
}

/// The pin key of a prompt (`prompt:NAME`) or resource template
/// (`template:URI`).
pub(super) fn item_key(kind: CatalogKind, key: &str) -> String {
    let prefix = match kind {
        CatalogKind::Prompt => "prompt",
        CatalogKind::ResourceTemplate => "template",
        CatalogKind::Resource => "resource",
    };
    format!("{prefix}:{key}")
}

/// The marker of a server whose prompts (or templates) were approved once:
/// each list is trusted on its own first complete listing.
fn approved_marker(kind: Option<CatalogKind>) -> String {
    match kind {
        None => APPROVED_MARKER.to_owned(),
        Some(kind) => format!("approved:{}", item_key(kind, "")),
    }
}

/// The pin of an item (`None`: never approved).
pub(super) fn pin_in(
    txn: &impl Reads,
    server: u128,
    item: &str,
) -> Result<Option<Pin>, StoreError> {
    txn.get(PINS, &(server, item.to_owned()))?
        .map(|bytes| decode(&bytes))
        .transpose()
}

pub(super) fn put_pin(
    txn: &Writer<'_>,
    server: u128,
    item: &str,
    pin: &Pin,
) -> Result<(), StoreError> {
    txn.insert(PINS, &(server, item.to_owned()), &encode(pin)?)?;
    Ok(())
}

fn server_approved(txn: &Writer<'_>, server: u128, marker: &str) -> Result<bool, StoreError> {
    Ok(txn.get(PINS, &(server, marker.to_owned()))?.is_some())
}

fn mark_server_approved(txn: &Writer<'_>, server: u128, marker: &str) -> Result<(), StoreError> {
    txn.insert(PINS, &(server, marker.to_owned()), &b"{}".to_vec())?;
    Ok(())
}

pub(super) fn delete_server_pins(txn: &Writer<'_>, server: u128) -> Result<(), StoreError> {
    let (from, to) = server_range(server);
    txn.remove_range(PINS, from.as_ref(), to.as_ref())
}

/// A new pin of `definition` (a tool's, prompt's or template's JSON).
pub(super) fn new_pin(definition: &Value, fingerprint: String, approved_by: &str) -> Pin {
    Pin {
        fingerprint,
        definition: crate::trust::pinned_fields(definition),
        approved_at: Utc::now(),
        approved_by: approved_by.to_owned(),
        rejected: None,
        ui_pinned: true,
    }
}

/// What a user is told of a held definition: why, and how to let it through.
pub(crate) fn hold_message(reason: HoldReason, item: &str, tool_id: &str) -> String {
    let why = match reason {
        HoldReason::Changed => format!("{item} changed since it was approved"),
        HoldReason::New => {
            let list = match item.split(' ').next() {
                Some("prompt") => "prompts",
                Some("resource") => "resource templates",
                _ => "tools",
            };
            format!("{item} is new since this server's {list} were approved")
        }
        HoldReason::Findings => {
            format!("{item}'s definition looks like it gives the model hidden instructions")
        }
        HoldReason::Rejected => format!("{item}'s current definition was rejected"),
    };
    format!(
        "held back by the aggregator: {why}; see `mcp-aggregator tools diff {tool_id}`, then `mcp-aggregator tools approve {tool_id}` to let it through"
    )
}

/// A hold of a tool's current definition.
pub(super) fn hold(reason: HoldReason, tool_id: &str, fingerprint: &str) -> Hold {
    hold_of(reason, &format!("tool {tool_id}"), tool_id, fingerprint)
}

/// A hold of an item's current definition (`what`: `tool fx.add`,
/// `prompt fx.greet`; `id`: what approves it).
pub(super) fn hold_of(reason: HoldReason, what: &str, id: &str, fingerprint: &str) -> Hold {
    Hold {
        reason,
        message: hold_message(reason, what, id),
        fingerprint: fingerprint.to_owned(),
        since: Utc::now(),
    }
}

/// The trust checks of one listing of a server's tools, applied inside the
/// transaction that stores it.
pub(super) struct TrustPass {
    server: u128,
    server_name: String,
    policy: PinPolicy,
    /// The list whose first complete listing marks it approved.
    marker: String,
    /// The server's definitions (of this list) were approved before this
    /// listing.
    approved: bool,
    context: ScanContext,
    audits: Vec<AuditEntry>,
    /// The pin keys this listing judged.
    judged: std::collections::HashSet<String>,
    /// Where this list's pin keys start (`tool:`, `prompt:`, `template:`).
    key_prefix: String,
}

/// One definition as the pass judges it.
pub(super) struct Judged<'a> {
    /// Its pin key (`tool:NAME`, `prompt:NAME`, `template:URI`).
    pub pin_key: String,
    /// What the user is told it is (`tool fx.add`).
    pub what: String,
    /// What approves it (`fx.add`, `prompt:fx.greet`).
    pub id: String,
    pub definition: &'a Value,
    /// The definition stored from the listing before this one, if any.
    pub listed_before: Option<&'a Value>,
}

impl TrustPass {
    /// The pass over a listing of tools (`kind` `None`) or of a server's
    /// prompts or resource templates.
    pub(super) fn begin(
        txn: &Writer<'_>,
        server: u128,
        record: &ServerRecord,
        kind: Option<CatalogKind>,
    ) -> Result<TrustPass, StoreError> {
        let marker = approved_marker(kind);
        Ok(TrustPass {
            server,
            server_name: record.name.clone(),
            policy: record.trust.pinning,
            approved: server_approved(txn, server, &marker)?,
            marker,
            context: ScanContext::default(),
            audits: Vec::new(),
            judged: std::collections::HashSet::new(),
            key_prefix: match kind {
                None => tool_key(""),
                Some(kind) => item_key(kind, ""),
            },
        })
    }

    pub(super) fn policy(&self) -> PinPolicy {
        self.policy
    }

    /// The names the shadowing check compares against: every other
    /// server's tools (original and wire names), and this one's own.
    pub(super) fn load_context<'n>(
        &mut self,
        txn: &Writer<'_>,
        wire_names: Table<String, (u128, String)>,
        server: u128,
        own: impl Iterator<Item = &'n str>,
    ) -> Result<(), StoreError> {
        self.context.own_tools = own.map(str::to_owned).collect();
        let context = &mut self.context;
        txn.for_each(
            wire_names,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            super::tables::Order::Ascending,
            |wire, (owner_server, tool)| {
                if owner_server == server {
                    context.own_tools.insert(wire);
                } else {
                    context.other_tools.insert(wire);
                    context.other_tools.insert(tool);
                }
                Ok(true)
            },
        )?;
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
        txn: &Writer<'_>,
        record: &mut ToolRecord,
        definition: &Value,
        listed_before: Option<&Value>,
        base_refusal: &Option<String>,
        rescan: bool,
    ) -> Result<bool, StoreError> {
        if self.policy == PinPolicy::Off && !rescan && record.hold.is_none() {
            return Ok(false);
        }
        let before = (record.hold.clone(), record.findings.len());
        let item = Judged {
            pin_key: tool_key(&record.original_name),
            what: format!("tool {}", record.id),
            id: record.id.clone(),
            definition,
            listed_before,
        };
        let hold = self.judge(
            txn,
            &item,
            record.hold.as_ref(),
            &mut record.findings,
            rescan,
        )?;
        match hold {
            Some(held) => {
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

    /// Scans (when `rescan`, or when the definition is not the one
    /// approved; `findings` are then replaced), judges and pins one
    /// definition: its hold, if it is held back. `old` is its hold before
    /// this listing (a hold unchanged keeps its time and is not audited
    /// again).
    pub(super) fn judge(
        &mut self,
        txn: &Writer<'_>,
        item: &Judged<'_>,
        old: Option<&Hold>,
        findings: &mut Vec<Finding>,
        rescan: bool,
    ) -> Result<Option<Hold>, StoreError> {
        let fingerprint = crate::trust::fingerprint(item.definition);
        self.judged.insert(item.pin_key.clone());
        let mut pin = pin_in(txn, self.server, &item.pin_key)?;
        // A pin made before a release pinned `_meta` (the UI a host
        // renders) approved, or rejected, all that was pinned then. At its
        // first judgment since, it is carried over to today's fingerprint,
        // so an upgrade holds nothing, but only if the definition stored
        // from the listing before (what that release saw) has today's
        // fingerprint: a UI swapped at the upgrade is held. Never again
        // after: a UI added or swapped later is held as any other change.
        let mut carried = None;
        if let Some(old_pin) = pin.as_mut().filter(|p| !p.ui_pinned) {
            let earlier = crate::trust::earlier_fingerprint(item.definition);
            let seen_before = item
                .listed_before
                .is_some_and(|before| crate::trust::fingerprint(before) == fingerprint);
            if let (Some(earlier), true) = (&earlier, seen_before) {
                if old_pin.fingerprint == *earlier {
                    old_pin.fingerprint = fingerprint.clone();
                    old_pin.definition = crate::trust::pinned_fields(item.definition);
                    carried = Some(earlier.clone());
                }
                if old_pin.rejected.as_ref() == Some(earlier) {
                    old_pin.rejected = Some(fingerprint.clone());
                    carried = Some(earlier.clone());
                }
            }
            old_pin.ui_pinned = true;
            put_pin(txn, self.server, &item.pin_key, old_pin)?;
        }
        let approved_as_is = pin.as_ref().is_some_and(|p| p.fingerprint == fingerprint);
        if rescan || !approved_as_is {
            *findings = crate::trust::scan_definition(item.definition, &self.context);
        }
        let verdict = crate::trust::judge(
            self.policy,
            self.approved,
            pin.as_ref()
                .map(|p| (p.fingerprint.as_str(), p.rejected.as_deref())),
            &fingerprint,
            findings,
        );
        match verdict.pin {
            PinAction::Keep => {}
            PinAction::Pin => put_pin(
                txn,
                self.server,
                &item.pin_key,
                &new_pin(item.definition, fingerprint.clone(), "trust-on-first-use"),
            )?,
            PinAction::Flag => {
                put_pin(
                    txn,
                    self.server,
                    &item.pin_key,
                    &new_pin(item.definition, fingerprint.clone(), "warn-policy"),
                )?;
                let change = if pin.is_some() { "changed" } else { "new" };
                self.audit(
                    "definition_flagged",
                    format!(
                        "{} is {change} ({fingerprint}); let through (pinning: warn)",
                        item.what
                    ),
                );
            }
        }
        let Some(reason) = verdict.hold else {
            return Ok(None);
        };
        let mut held = hold_of(reason, &item.what, &item.id, &fingerprint);
        match old {
            Some(old)
                if old.reason == reason
                    && (old.fingerprint == fingerprint
                        || carried.as_ref() == Some(&old.fingerprint)) =>
            {
                held.since = old.since;
            }
            _ => {
                let rules: Vec<&str> = findings
                    .iter()
                    .filter(|f| f.severity == crate::model::Severity::High)
                    .map(|f| f.rule.as_str())
                    .collect();
                self.audit(
                    "quarantine",
                    format!(
                        "{} held ({}{}) {fingerprint}",
                        item.what,
                        reason.as_str(),
                        if rules.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", rules.join(", "))
                        }
                    ),
                );
            }
        }
        Ok(Some(held))
    }

    /// An item this listing did not judge but the store keeps (the
    /// listing was cut off): its pin stays.
    pub(super) fn still_held(&mut self, pin_key: String) {
        self.judged.insert(pin_key);
    }

    /// Under `warn` every new definition is pinned, so a server renaming
    /// its tools at each listing would grow the store without bound; a
    /// pin there only words the next flag ("changed" or "new"), and those
    /// of items no longer listed go. (`block` pins only what was approved:
    /// an approved item that leaves and comes back changed must be held.)
    fn forget_unlisted(&self, txn: &Writer<'_>) -> Result<(), StoreError> {
        let (from, to) = server_range(self.server);
        let mut gone = Vec::new();
        txn.for_each(
            PINS,
            from.as_ref(),
            to.as_ref(),
            super::tables::Order::Ascending,
            |(_, key), _: Vec<u8>| {
                if key.starts_with(&self.key_prefix) && !self.judged.contains(&key) {
                    gone.push(key);
                }
                Ok(true)
            },
        )?;
        for key in gone {
            txn.remove(PINS, &(self.server, key))?;
        }
        Ok(())
    }

    fn audit(&mut self, action: &str, details: String) {
        let mut entry = audit_entry("trust", action, &self.server_name, "ok");
        entry.details = Some(details);
        self.audits.push(entry);
    }

    /// Marks the server approved after its first listing, and writes the
    /// audit entries the pass made. A listing cut off by a bound counts: a
    /// list is only ever cut off by what the server sends (a repeated
    /// cursor, too many items, pages or bytes), so a server that never
    /// ends its list would otherwise stay trusted on first use for ever,
    /// and every tool it added later would be offered unheld.
    pub(super) fn finish(self, txn: &Writer<'_>, audit_max_bytes: u64) -> Result<(), StoreError> {
        if !self.approved && self.policy != PinPolicy::Off {
            mark_server_approved(txn, self.server, &self.marker)?;
        }
        if self.policy == PinPolicy::Warn {
            self.forget_unlisted(txn)?;
        }
        for entry in self.audits {
            append_audit(txn, audit_max_bytes, entry)?;
        }
        Ok(())
    }
}
