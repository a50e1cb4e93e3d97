//! The catalog tables: tools (with their wire-name aliases), resources,
//! resource templates and prompts, replaced per server by discovery in one
//! transaction each.

use chrono::Utc;
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;

use super::codec::{decode, decode_borrowed, decoded_between, encode};
use super::meta::{META_LAST_SYNC_MS, bump_catalog_generation, bump_generation, set_meta};
use super::tables::{Order, Reader, Reads as _, Table, Writer, server_range};
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
pub(super) const TOOLS: Table<(u128, String), Vec<u8>> = Table::new("tools");
/// Wire name -> (server id, original name): the alias table. Stored, so a
/// name never changes with connect order or restarts.
pub(super) const WIRE_NAMES: Table<String, (u128, String)> = Table::new("wire_names");
pub(super) const RESOURCES: Table<(u128, String), Vec<u8>> = Table::new("resources");
pub(super) const RESOURCE_TEMPLATES: Table<(u128, String), Vec<u8>> =
    Table::new("resource_templates");
pub(super) const PROMPTS: Table<(u128, String), Vec<u8>> = Table::new("prompts");

pub(super) fn table_for(kind: CatalogKind) -> Table<(u128, String), Vec<u8>> {
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
        self.write(|txn| {
            self.replace_listed_tools_in(txn, server_id, tools, refused, complete, rules)
        })
    }

    fn replace_listed_tools_in(
        &self,
        txn: &Writer<'_>,
        server_id: ServerId,
        tools: &[Value],
        refused: &[RefusedItem],
        complete: bool,
        rules: &WireNameRules,
    ) -> Result<CatalogDiff, StoreError> {
        let key = server_id.as_u128();
        let mut server = self
            .server_in(txn, key)?
            .ok_or_else(|| StoreError::NotFound(server_id.to_string()))?;
        let existing = tools_of(txn, key)?;
        let now = Utc::now();
        let mut diff = CatalogDiff::default();
        let mut trust = super::pins::TrustPass::begin(txn, key, &server, None)?;
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
            let discovery_refused: HashSet<&str> =
                refused.iter().map(|item| item.name.as_str()).collect();
            trust.load_context(txn, WIRE_NAMES, key, incoming.keys().copied())?;
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
                        if judged
                            && trust.apply(
                                txn,
                                &mut record,
                                definition,
                                Some(definition),
                                refusal,
                                false,
                            )?
                        {
                            diff.unchanged -= 1;
                            diff.updated += 1;
                            txn.insert(TOOLS, &(key, (*name).to_owned()), &encode(&record)?)?;
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
                        let owner = txn.get(WIRE_NAMES, &candidate)?;
                        let (wire_name, rejected) = match owner {
                            Some((owner_id, owner_tool))
                                if (owner_id, owner_tool.as_str()) != (key, *name) =>
                            {
                                let owner_name = self
                                    .server_in(txn, owner_id)?
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
                                txn.insert(WIRE_NAMES, &candidate, &(key, (*name).to_owned()))?;
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
                    let listed_before = existing.get(*name).map(|old| old.definition.value());
                    trust.apply(
                        txn,
                        &mut record,
                        definition,
                        listed_before.as_ref(),
                        refusal,
                        true,
                    )?;
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
                txn.insert(TOOLS, &(key, (*name).to_owned()), &encode(&record)?)?;
            }
            for (name, old) in &existing {
                if !complete || incoming.contains_key(name.as_str()) {
                    continue;
                }
                diff.removed += 1;
                txn.remove(TOOLS, &(key, name.clone()))?;
                if let Some(wire) = &old.wire_name {
                    txn.remove(WIRE_NAMES, wire)?;
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
        self.put_server(txn, &server)?;
        if !complete {
            for name in existing
                .keys()
                .filter(|n| !incoming.contains_key(n.as_str()))
            {
                trust.still_held(super::pins::tool_key(name));
            }
        }
        trust.finish(txn, self.audit_max_bytes)?;
        if diff.changed() {
            bump_generation(txn)?;
            bump_catalog_generation(txn)?;
            touch_last_sync(txn)?;
        }
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
        self.write(|txn| {
            let key = server_id.as_u128();
            let mut diff = CatalogDiff::default();
            // Prompts and templates are pinned and checked like tools.
            let mut trust = match self.server_in(txn, key)? {
                Some(server) if kind.is_pinned() => {
                    let mut pass = super::pins::TrustPass::begin(txn, key, &server, Some(kind))?;
                    pass.load_context(txn, WIRE_NAMES, key, std::iter::empty())?;
                    Some((pass, server.name))
                }
                _ => None,
            };
            let table = table_for(kind);
            let (from, to) = server_range(key);
            let existing: BTreeMap<String, Vec<u8>> = txn
                .entries(table, from.as_ref(), to.as_ref(), Order::Ascending)?
                .into_iter()
                .map(|((_, id), bytes)| (id, bytes))
                .collect();
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
                        let listed_before = existing
                            .get(id)
                            .and_then(|bytes| decode::<Value>(bytes).ok());
                        let old = listed_before.as_ref().and_then(crate::model::ItemTrust::of);
                        judged = judge_item(
                            txn,
                            pass,
                            kind,
                            server_name,
                            id,
                            (item, listed_before.as_ref()),
                            old,
                        )?;
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
                txn.insert(table, &(key, id.to_owned()), &bytes)?;
            }
            for id in existing.keys() {
                if complete && !seen.contains(id) {
                    diff.removed += 1;
                    txn.remove(table, &(key, id.clone()))?;
                }
            }
            if let Some((mut pass, _)) = trust {
                if !complete {
                    for id in existing.keys().filter(|id| !seen.contains(*id)) {
                        pass.still_held(super::pins::item_key(kind, id));
                    }
                }
                pass.finish(txn, self.audit_max_bytes)?;
            }
            if diff.changed() {
                bump_generation(txn)?;
                touch_last_sync(txn)?;
            }
            Ok(diff)
        })
    }

    /// A server's tools, ordered by original name.
    pub fn tools(&self, server_id: ServerId) -> Result<Vec<ToolRecord>, StoreError> {
        self.read(|txn| server_entries(txn, TOOLS, server_id.as_u128()))
    }

    /// One tool of a server, by its original name.
    pub fn tool(&self, server_id: ServerId, name: &str) -> Result<Option<ToolRecord>, StoreError> {
        self.read(|txn| {
            txn.get(TOOLS, &(server_id.as_u128(), name.to_owned()))?
                .map(|bytes| decode(&bytes))
                .transpose()
        })
    }

    /// Every stored tool of every server.
    pub fn all_tools(&self) -> Result<Vec<ToolRecord>, StoreError> {
        let mut out = Vec::new();
        self.for_each_tool_bytes(|bytes| {
            out.push(decode(bytes)?);
            Ok(())
        })?;
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
        self.read(|txn| {
            txn.for_each(
                TOOLS,
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                |_, bytes| {
                    f(&bytes)?;
                    Ok(true)
                },
            )
        })
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
        self.read(|txn| {
            let mut out = Vec::new();
            for (server_id, name) in tools {
                let found = txn.get(TOOLS, &(server_id.as_u128(), name.as_ref().to_owned()))?;
                out.push(found.map(|bytes| read(&bytes)).transpose()?);
            }
            Ok(out)
        })
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
        self.read(|txn| server_entries(txn, table_for(kind), server_id.as_u128()))
    }

    /// Every server's resources, resource templates or prompts, with the
    /// owning server's id.
    pub fn all_items(&self, kind: CatalogKind) -> Result<Vec<(ServerId, Value)>, StoreError> {
        self.read(|txn| {
            let mut out = Vec::new();
            txn.for_each(
                table_for(kind),
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                |(id, _), bytes| {
                    out.push((ServerId::from_u128(id), decode(&bytes)?));
                    Ok(true)
                },
            )?;
            Ok(out)
        })
    }

    /// Who owns a wire name.
    pub fn wire_name_owner(
        &self,
        wire_name: &str,
    ) -> Result<Option<(ServerId, String)>, StoreError> {
        let owner = self.read(|txn| txn.get(WIRE_NAMES, &wire_name.to_owned()))?;
        Ok(owner.map(|(id, tool)| (ServerId::from_u128(id), tool)))
    }
}

/// One server's entries of a table keyed by (server, name), decoded, in
/// name order.
fn server_entries<T: serde::de::DeserializeOwned>(
    txn: &Reader<'_>,
    table: Table<(u128, String), Vec<u8>>,
    key: u128,
) -> Result<Vec<T>, StoreError> {
    let (from, to) = server_range(key);
    decoded_between(txn, table, from.as_ref(), to.as_ref())
}

/// Deletes everything a server owns in the catalog tables.
pub(super) fn delete_server_catalog(txn: &Writer<'_>, key: u128) -> Result<(), StoreError> {
    let (from, to) = server_range(key);
    let mut wire_names = Vec::new();
    txn.for_each(
        TOOLS,
        from.as_ref(),
        to.as_ref(),
        Order::Ascending,
        |_, bytes| {
            let tool: ToolRecord = decode(&bytes)?;
            wire_names.extend(tool.wire_name);
            Ok(true)
        },
    )?;
    for name in &wire_names {
        txn.remove(WIRE_NAMES, name)?;
    }
    for table in [TOOLS, RESOURCES, RESOURCE_TEMPLATES, PROMPTS] {
        txn.remove_range(table, from.as_ref(), to.as_ref())?;
    }
    Ok(())
}

fn tools_of(txn: &Writer<'_>, key: u128) -> Result<BTreeMap<String, ToolRecord>, StoreError> {
    let (from, to) = server_range(key);
    let mut out = BTreeMap::new();
    txn.for_each(
        TOOLS,
        from.as_ref(),
        to.as_ref(),
        Order::Ascending,
        |(_, name), bytes| {
            out.insert(name, decode(&bytes)?);
            Ok(true)
        },
    )?;
    Ok(out)
}

fn touch_last_sync(txn: &Writer<'_>) -> Result<(), StoreError> {
    let now_ms = u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0);
    set_meta(txn, META_LAST_SYNC_MS, now_ms)
}

/// A prompt or resource template judged by the trust pass: as the server
/// offered it, or with its hold (and findings) in `ITEM_TRUST_FIELD`.
fn judge_item(
    txn: &Writer<'_>,
    pass: &mut super::pins::TrustPass,
    kind: CatalogKind,
    server_name: &str,
    key: &str,
    (item, listed_before): (&Value, Option<&Value>),
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
        listed_before,
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
