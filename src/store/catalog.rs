//! The catalog tables: tools (with their wire-name aliases), resources,
//! resource templates and prompts, replaced per server by discovery in one
//! transaction each.

use chrono::Utc;
use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition, WriteTransaction};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, HashSet};

use super::codec::{decode, decode_borrowed, encode};
use super::meta::{META, META_LAST_SYNC_MS, bump_catalog_generation, bump_generation};
use super::{Store, StoreError};
use crate::model::tool::Definition;
use crate::model::wire_name::WireNameRules;
use crate::model::{CatalogDiff, CatalogKind, RefusedItem, ServerId, ToolRecord};

/// What routing needs of a stored tool (a `ToolRecord`'s fields),
/// borrowed from the stored bytes.
#[derive(Debug, serde::Deserialize)]
pub struct ToolRoute<'a> {
    #[serde(borrow)]
    pub id: std::borrow::Cow<'a, str>,
    pub server_id: ServerId,
    #[serde(borrow)]
    pub original_name: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub wire_name: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    pub definition: &'a RawValue,
    /// Set when the tool is refused (`ToolRecord::refused`): not routed.
    #[serde(default, borrow)]
    pub refused: Option<std::borrow::Cow<'a, str>>,
}

/// What the search index keeps of a stored tool (a `ToolRecord`'s fields
/// less its texts and classification), borrowed from the stored bytes.
#[derive(Debug, serde::Deserialize)]
pub struct ToolSummary<'a> {
    #[serde(borrow)]
    pub id: std::borrow::Cow<'a, str>,
    pub server_id: ServerId,
    #[serde(borrow)]
    pub server_name: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub original_name: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub wire_name: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    pub definition_hash: std::borrow::Cow<'a, str>,
    pub is_external: bool,
    #[serde(default, borrow)]
    pub skill_ids: Vec<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    pub primary_skill_id: Option<std::borrow::Cow<'a, str>>,
    /// Set when the tool is refused (`ToolRecord::refused`): not indexed.
    #[serde(default, borrow)]
    pub refused: Option<std::borrow::Cow<'a, str>>,
}

/// Tools by (server id, original name).
pub(super) const TOOLS: TableDefinition<(u128, &str), &[u8]> = TableDefinition::new("tools");
/// Wire name -> (server id, original name): the alias table. Stored, so a
/// name never changes with connect order or restarts.
pub(super) const WIRE_NAMES: TableDefinition<&str, (u128, &str)> =
    TableDefinition::new("wire_names");
pub(super) const RESOURCES: TableDefinition<(u128, &str), &[u8]> =
    TableDefinition::new("resources");
pub(super) const RESOURCE_TEMPLATES: TableDefinition<(u128, &str), &[u8]> =
    TableDefinition::new("resource_templates");
pub(super) const PROMPTS: TableDefinition<(u128, &str), &[u8]> = TableDefinition::new("prompts");

pub(super) fn table_for(
    kind: CatalogKind,
) -> TableDefinition<'static, (u128, &'static str), &'static [u8]> {
    match kind {
        CatalogKind::Resource => RESOURCES,
        CatalogKind::ResourceTemplate => RESOURCE_TEMPLATES,
        CatalogKind::Prompt => PROMPTS,
    }
}

/// SHA-256 of a JSON value's serialization, hex.
pub fn definition_hash(value: &Value) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Store {
    /// Replaces a server's tools with `tools` (raw `tools/list` entries):
    /// unchanged definitions are kept as they are, changed ones updated (their
    /// wire names kept), new ones get a wire name, vanished ones are deleted
    /// with their alias. Updates the server's `tool_count`.
    pub fn replace_tools(
        &self,
        server_id: ServerId,
        tools: &[Value],
        rules: &WireNameRules,
    ) -> Result<CatalogDiff, StoreError> {
        self.replace_listed_tools(server_id, tools, &[], true, rules)
    }

    /// `replace_tools`, with the tools discovery refused beside them: each
    /// is kept as its name and the reason (`ToolRecord::refused`), so it
    /// shows where the others do and is offered to nobody. A list that is
    /// not `complete` (cut off by a bound) removes nothing: what it did not
    /// reach stays as it was stored.
    pub fn replace_listed_tools(
        &self,
        server_id: ServerId,
        tools: &[Value],
        refused: &[RefusedItem],
        complete: bool,
        rules: &WireNameRules,
    ) -> Result<CatalogDiff, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let key = server_id.as_u128();
        let mut server = self
            .server_in(&txn, key)?
            .ok_or_else(|| StoreError::NotFound(server_id.to_string()))?;
        let existing = tools_of(&txn, key)?;
        let now = Utc::now();
        let mut diff = CatalogDiff::default();
        let mut trust = super::pins::TrustPass::begin(&txn, key, &server, None)?;
        // Later duplicates of a name replace earlier ones, as a map would.
        let mut incoming: BTreeMap<&str, (std::borrow::Cow<'_, Value>, Option<String>)> =
            BTreeMap::new();
        for tool in tools {
            match tool.get("name").and_then(Value::as_str) {
                Some(name) if !name.is_empty() => {
                    // 2026-07-28 asks clients to leave out a tool whose
                    // x-mcp-header annotations are invalid.
                    let refusal =
                        crate::model::param_headers::header_params(tool.get("inputSchema"))
                            .err()
                            .map(|reason| format!("{reason}: the tool is not offered to clients"));
                    incoming.insert(name, (std::borrow::Cow::Borrowed(tool), refusal));
                }
                _ => tracing::warn!(server = %server.name, "ignoring a tool without a name"),
            }
        }
        for item in refused {
            if item.name.is_empty() {
                continue;
            }
            // What is kept of it: its name; its hash covers the reason, so
            // a new reason is an update.
            let stub = serde_json::json!({"name": item.name});
            let refusal = Some(item.reason.clone());
            incoming.insert(&item.name, (std::borrow::Cow::Owned(stub), refusal));
        }
        {
            let mut table = txn.open_table(TOOLS)?;
            let mut aliases = txn.open_table(WIRE_NAMES)?;
            let discovery_refused: HashSet<&str> =
                refused.iter().map(|item| item.name.as_str()).collect();
            trust.load_context(&aliases, key, incoming.keys().copied())?;
            for (name, (definition, refusal)) in &incoming {
                let definition: &Value = definition;
                // A refused item's stub is not its definition: nothing to judge.
                let judged = !discovery_refused.contains(name);
                let hash = match refusal {
                    Some(reason) => definition_hash(&serde_json::json!([definition, reason])),
                    None => definition_hash(definition),
                };
                let description = definition
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let mut record = match existing.get(*name) {
                    Some(old) if old.definition_hash == hash => {
                        diff.unchanged += 1;
                        if old.wire_name.is_none() {
                            diff.rejected += 1;
                        }
                        // The policy or a pin may have changed since.
                        let mut record = old.clone();
                        if judged && trust.apply(&txn, &mut record, definition, refusal, false)? {
                            diff.unchanged -= 1;
                            diff.updated += 1;
                            table.insert((key, *name), encode(&record)?.as_slice())?;
                        }
                        if record.refused.is_some() {
                            diff.refused += 1;
                        }
                        continue;
                    }
                    Some(old) => {
                        diff.updated += 1;
                        let mut record = ToolRecord {
                            description: description.clone(),
                            definition: Definition::new(definition),
                            definition_hash: hash,
                            refused: refusal.clone(),
                            updated_at: now,
                            ..old.clone()
                        };
                        record.reset_classification();
                        record
                    }
                    None => {
                        diff.added += 1;
                        let candidate = rules.wire_name(&server.name, name);
                        let owner = aliases.get(candidate.as_str())?.map(|v| {
                            let (id, tool) = v.value();
                            (id, tool.to_owned())
                        });
                        let (wire_name, rejected) = match owner {
                            Some((owner_id, owner_tool))
                                if (owner_id, owner_tool.as_str()) != (key, *name) =>
                            {
                                let owner_name = self
                                    .server_in(&txn, owner_id)?
                                    .map(|s| s.name)
                                    .unwrap_or_else(|| "a removed server".to_owned());
                                (
                                    None,
                                    Some(format!(
                                        "wire name {candidate:?} is already used by {owner_name}.{owner_tool}"
                                    )),
                                )
                            }
                            _ => {
                                aliases.insert(candidate.as_str(), (key, *name))?;
                                (Some(candidate), None)
                            }
                        };
                        if let Some(reason) = &rejected {
                            tracing::warn!(server = %server.name, tool = %name, "{reason}; the tool is not offered to clients");
                        }
                        ToolRecord {
                            id: format!("{}.{name}", server.name),
                            server_id,
                            server_name: server.name.clone(),
                            original_name: (*name).to_owned(),
                            wire_name,
                            rejected,
                            refused: refusal.clone(),
                            hold: None,
                            findings: Vec::new(),
                            description,
                            definition: Definition::new(definition),
                            definition_hash: hash,
                            is_external: true,
                            is_classified: false,
                            skill_ids: Vec::new(),
                            primary_skill_id: None,
                            classification: Default::default(),
                            discovered_at: now,
                            updated_at: now,
                        }
                    }
                };
                if judged {
                    trust.apply(&txn, &mut record, definition, refusal, true)?;
                }
                if record.wire_name.is_none() {
                    diff.rejected += 1;
                }
                // Discovery says which it refused; a refusal decided here
                // (an x-mcp-header) is said here, when the tool changes.
                if let Some(reason) = &record.refused {
                    diff.refused += 1;
                    if !refused.iter().any(|item| item.name == *name) {
                        tracing::warn!(server = %server.name, tool = %name, "{reason}");
                    }
                }
                table.insert((key, *name), encode(&record)?.as_slice())?;
            }
            for (name, old) in &existing {
                if !complete || incoming.contains_key(name.as_str()) {
                    continue;
                }
                diff.removed += 1;
                table.remove((key, name.as_str()))?;
                if let Some(wire) = &old.wire_name {
                    aliases.remove(wire.as_str())?;
                }
            }
        }
        let kept = if complete {
            incoming.len()
        } else {
            incoming.len()
                + existing
                    .keys()
                    .filter(|name| !incoming.contains_key(name.as_str()))
                    .count()
        };
        server.tool_count = u32::try_from(kept).unwrap_or(u32::MAX);
        self.put_server(&txn, &server)?;
        trust.finish(&txn, complete, self.audit_max_bytes)?;
        if diff.changed() {
            bump_generation(&txn)?;
            bump_catalog_generation(&txn)?;
            touch_last_sync(&txn)?;
        }
        txn.commit()?;
        Ok(diff)
    }

    /// Replaces a server's resources, resource templates or prompts.
    /// (Not `complete`: cut off by a bound; what it did not reach stays.)
    pub fn replace_items(
        &self,
        server_id: ServerId,
        kind: CatalogKind,
        items: &[Value],
        complete: bool,
    ) -> Result<CatalogDiff, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let key = server_id.as_u128();
        let mut diff = CatalogDiff::default();
        // Prompts and templates are pinned and checked like tools.
        let mut trust = match self.server_in(&txn, key)? {
            Some(server) if kind.is_pinned() => {
                let mut pass = super::pins::TrustPass::begin(&txn, key, &server, Some(kind))?;
                let aliases = txn.open_table(WIRE_NAMES)?;
                pass.load_context(&aliases, key, std::iter::empty())?;
                Some((pass, server.name))
            }
            _ => None,
        };
        {
            let mut table = txn.open_table(table_for(kind))?;
            let mut existing: BTreeMap<String, Vec<u8>> = BTreeMap::new();
            for entry in table.range((key, "")..(key + 1, ""))? {
                let (k, v) = entry?;
                existing.insert(k.value().1.to_owned(), v.value().to_vec());
            }
            let mut seen = HashSet::new();
            for item in items {
                let Some(id) = item.get(kind.key_field()).and_then(Value::as_str) else {
                    continue;
                };
                if !seen.insert(id.to_owned()) {
                    continue;
                }
                let judged;
                let item = match &mut trust {
                    Some((pass, server_name)) => {
                        let old = existing
                            .get(id)
                            .and_then(|bytes| decode::<Value>(bytes).ok())
                            .and_then(|old| crate::model::ItemTrust::of(&old));
                        judged = judge_item(&txn, pass, kind, server_name, id, item, old)?;
                        &judged
                    }
                    None => item,
                };
                let bytes = encode(item)?;
                match existing.get(id) {
                    Some(old) if *old == bytes => diff.unchanged += 1,
                    Some(_) => diff.updated += 1,
                    None => diff.added += 1,
                }
                table.insert((key, id), bytes.as_slice())?;
            }
            for id in existing.keys() {
                if complete && !seen.contains(id) {
                    diff.removed += 1;
                    table.remove((key, id.as_str()))?;
                }
            }
        }
        if let Some((pass, _)) = trust {
            pass.finish(&txn, complete, self.audit_max_bytes)?;
        }
        if diff.changed() {
            bump_generation(&txn)?;
            touch_last_sync(&txn)?;
        }
        txn.commit()?;
        Ok(diff)
    }

    /// A server's tools, ordered by original name.
    pub fn tools(&self, server_id: ServerId) -> Result<Vec<ToolRecord>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(TOOLS)?;
        let key = server_id.as_u128();
        let mut out = Vec::new();
        for entry in table.range((key, "")..(key + 1, ""))? {
            let (_, bytes) = entry?;
            out.push(decode(bytes.value())?);
        }
        Ok(out)
    }

    /// One tool of a server, by its original name.
    pub fn tool(&self, server_id: ServerId, name: &str) -> Result<Option<ToolRecord>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(TOOLS)?;
        table
            .get((server_id.as_u128(), name))?
            .map(|bytes| decode(bytes.value()))
            .transpose()
    }

    /// Every stored tool of every server.
    pub fn all_tools(&self) -> Result<Vec<ToolRecord>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(TOOLS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            out.push(decode(bytes.value())?);
        }
        Ok(out)
    }

    /// Calls `f` with what routing needs of every stored tool, read in
    /// place: at 100,000 tools whole records (descriptions,
    /// classifications, …) would be hundreds of MB decoded for each
    /// table rebuild.
    pub fn for_each_tool_route(&self, mut f: impl FnMut(ToolRoute<'_>)) -> Result<(), StoreError> {
        self.for_each_tool_bytes(|bytes| {
            f(decode_borrowed(bytes)?);
            Ok(())
        })
    }

    /// Every stored tool's bytes, in one read transaction.
    fn for_each_tool_bytes(
        &self,
        mut f: impl FnMut(&[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(TOOLS)?;
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            f(bytes.value())?;
        }
        Ok(())
    }

    /// Calls `f` with every stored tool's summary, read in place: a pass
    /// over 100,000 tools that keeps little of them allocates little.
    pub fn for_each_tool_summary(
        &self,
        mut f: impl FnMut(ToolSummary<'_>),
    ) -> Result<(), StoreError> {
        self.for_each_tool_bytes(|bytes| {
            f(decode_borrowed(bytes)?);
            Ok(())
        })
    }

    /// The definitions of these tools (server, original name), in order;
    /// `None` for one no longer stored.
    pub fn tool_definitions(
        &self,
        tools: impl Iterator<Item = (ServerId, impl AsRef<str>)>,
    ) -> Result<Vec<Option<Box<RawValue>>>, StoreError> {
        #[derive(serde::Deserialize)]
        struct DefinitionOnly<'a> {
            #[serde(borrow)]
            definition: &'a RawValue,
        }
        self.read_tools(tools, |bytes| {
            let only: DefinitionOnly<'_> = decode_borrowed(bytes)?;
            Ok(only.definition.to_owned())
        })
    }

    /// These tools (server, original name), whole, in order, in one read;
    /// `None` for one no longer stored.
    pub fn tools_named(
        &self,
        tools: impl Iterator<Item = (ServerId, impl AsRef<str>)>,
    ) -> Result<Vec<Option<ToolRecord>>, StoreError> {
        self.read_tools(tools, decode)
    }

    fn read_tools<T>(
        &self,
        tools: impl Iterator<Item = (ServerId, impl AsRef<str>)>,
        read: impl Fn(&[u8]) -> Result<T, StoreError>,
    ) -> Result<Vec<Option<T>>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(TOOLS)?;
        let mut out = Vec::new();
        for (server_id, name) in tools {
            let found = table.get((server_id.as_u128(), name.as_ref()))?;
            out.push(found.map(|bytes| read(bytes.value())).transpose()?);
        }
        Ok(out)
    }

    /// Every stored tool without its texts — definition (`{}`),
    /// description, wire name — for the classification passes, which need
    /// names, hashes and classifications: at 100,000 tools the texts are
    /// most of a catalog decoded. Not to be written back.
    pub fn all_tools_without_texts(&self) -> Result<Vec<ToolRecord>, StoreError> {
        /// `ToolRecord` less its texts (serde skips them unread).
        #[derive(serde::Deserialize)]
        struct Light {
            id: String,
            server_id: ServerId,
            server_name: String,
            original_name: String,
            definition_hash: String,
            is_external: bool,
            is_classified: bool,
            #[serde(default)]
            skill_ids: Vec<String>,
            #[serde(default)]
            primary_skill_id: Option<String>,
            #[serde(default)]
            classification: crate::model::skill::Classification,
            #[serde(default)]
            refused: Option<String>,
            discovered_at: chrono::DateTime<Utc>,
            updated_at: chrono::DateTime<Utc>,
        }
        let mut out = Vec::new();
        self.for_each_tool_bytes(|bytes| {
            let light: Light = decode(bytes)?;
            out.push(ToolRecord {
                id: light.id,
                server_id: light.server_id,
                server_name: light.server_name,
                original_name: light.original_name,
                wire_name: None,
                rejected: None,
                refused: light.refused,
                hold: None,
                findings: Vec::new(),
                description: None,
                definition: Definition::empty(),
                definition_hash: light.definition_hash,
                is_external: light.is_external,
                is_classified: light.is_classified,
                skill_ids: light.skill_ids,
                primary_skill_id: light.primary_skill_id,
                classification: light.classification,
                discovered_at: light.discovered_at,
                updated_at: light.updated_at,
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// A server's resources, resource templates or prompts (raw).
    pub fn items(&self, server_id: ServerId, kind: CatalogKind) -> Result<Vec<Value>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(table_for(kind))?;
        let key = server_id.as_u128();
        let mut out = Vec::new();
        for entry in table.range((key, "")..(key + 1, ""))? {
            let (_, bytes) = entry?;
            out.push(decode(bytes.value())?);
        }
        Ok(out)
    }

    /// Every server's resources, resource templates or prompts, with the
    /// owning server's id.
    pub fn all_items(&self, kind: CatalogKind) -> Result<Vec<(ServerId, Value)>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(table_for(kind))?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (key, bytes) = entry?;
            out.push((ServerId::from_u128(key.value().0), decode(bytes.value())?));
        }
        Ok(out)
    }

    /// Who owns a wire name.
    pub fn wire_name_owner(
        &self,
        wire_name: &str,
    ) -> Result<Option<(ServerId, String)>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(WIRE_NAMES)?;
        Ok(table.get(wire_name)?.map(|v| {
            let (id, tool) = v.value();
            (ServerId::from_u128(id), tool.to_owned())
        }))
    }
}

/// Deletes everything a server owns in the catalog tables.
pub(super) fn delete_server_catalog(txn: &WriteTransaction, key: u128) -> Result<(), StoreError> {
    let wire_names: Vec<String> = tools_of(txn, key)?
        .into_values()
        .filter_map(|tool| tool.wire_name)
        .collect();
    {
        let mut aliases = txn.open_table(WIRE_NAMES)?;
        for name in &wire_names {
            aliases.remove(name.as_str())?;
        }
    }
    for table in [TOOLS, RESOURCES, RESOURCE_TEMPLATES, PROMPTS] {
        txn.open_table(table)?
            .retain_in((key, "")..(key + 1, ""), |_, _| false)?;
    }
    Ok(())
}

fn tools_of(txn: &WriteTransaction, key: u128) -> Result<BTreeMap<String, ToolRecord>, StoreError> {
    let table = txn.open_table(TOOLS)?;
    let mut out = BTreeMap::new();
    for entry in table.range((key, "")..(key + 1, ""))? {
        let (k, bytes) = entry?;
        out.insert(k.value().1.to_owned(), decode(bytes.value())?);
    }
    Ok(out)
}

fn touch_last_sync(txn: &WriteTransaction) -> Result<(), StoreError> {
    let now_ms = u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0);
    txn.open_table(META)?.insert(META_LAST_SYNC_MS, now_ms)?;
    Ok(())
}

/// A prompt or resource template judged by the trust pass: as the server
/// offered it, or with its hold (and findings) in `ITEM_TRUST_FIELD`.
fn judge_item(
    txn: &redb::WriteTransaction,
    pass: &mut super::pins::TrustPass,
    kind: CatalogKind,
    server_name: &str,
    key: &str,
    item: &Value,
    old: Option<crate::model::ItemTrust>,
) -> Result<Value, StoreError> {
    let mut offered = item.clone();
    if let Value::Object(fields) = &mut offered {
        // A server cannot plant a hold (or lift one) in what it lists.
        fields.remove(crate::model::ITEM_TRUST_FIELD);
    }
    if pass.policy() == crate::model::PinPolicy::Off && old.is_none() {
        return Ok(offered);
    }
    let id = kind.item_id(server_name, key);
    let judged = super::pins::Judged {
        pin_key: super::pins::item_key(kind, key),
        what: item_what(kind, &id),
        id,
        definition: &offered,
    };
    let mut findings = Vec::new();
    let hold = pass.judge(
        txn,
        &judged,
        old.as_ref().map(|t| &t.hold),
        &mut findings,
        true,
    )?;
    if let (Some(hold), Value::Object(fields)) = (hold, &mut offered) {
        let trust = crate::model::ItemTrust { hold, findings };
        fields.insert(
            crate::model::ITEM_TRUST_FIELD.to_owned(),
            serde_json::to_value(&trust).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        );
    }
    Ok(offered)
}

/// What a user is told a prompt or template is: `prompt fx.greet`,
/// `resource template fx:file:///{path}`.
pub(super) fn item_what(kind: CatalogKind, id: &str) -> String {
    let (prefix, _) = kind.id_prefix();
    format!(
        "{} {}",
        kind.as_str().replace('_', " "),
        id.strip_prefix(prefix).unwrap_or(id)
    )
}
