//! What the store keeps about a server's tools, resources, resource
//! templates and prompts. Definitions are kept as the server sent them (raw
//! JSON), so fields we do not know survive.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;

use super::server::ServerId;
use super::skill::{Classification, ClassificationEvent, ClassificationState};

/// A definition as a server sent it, kept as JSON text and parsed when
/// read: a catalog of 100,000 tools decoded into trees took several times
/// the memory (and the time) of the text.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Definition(Box<RawValue>);

impl Definition {
    pub fn new(value: &Value) -> Definition {
        let text = serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned());
        Definition(RawValue::from_string(text).unwrap_or_else(|_| empty_object()))
    }

    /// The whole definition as a tree.
    pub fn value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    /// One top-level field (`inputSchema`, `annotations`, …), parsed alone.
    pub fn field(&self, name: &str) -> Option<Value> {
        definition_field(&self.0, name)
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    pub fn raw(&self) -> &RawValue {
        &self.0
    }
}

/// The UI resources a tool's `_meta` names for a host to render beside it
/// (MCP Apps' `ui.resourceUri`, the older flat `ui/resourceUri`, the
/// OpenAI Apps SDK's `openai/outputTemplate`): the server's own URIs,
/// which only that server may answer.
pub fn ui_resource_uris(meta: &Value) -> Vec<&str> {
    [
        meta.get("ui").and_then(|ui| ui.get("resourceUri")),
        meta.get("ui/resourceUri"),
        meta.get("openai/outputTemplate"),
    ]
    .into_iter()
    .flatten()
    .filter_map(Value::as_str)
    .collect()
}

/// One top-level field of a definition's text, parsed alone.
pub fn definition_field(definition: &RawValue, name: &str) -> Option<Value> {
    let fields: HashMap<String, &RawValue> = serde_json::from_str(definition.get()).ok()?;
    serde_json::from_str(fields.get(name)?.get()).ok()
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| unreachable!("{{}} is JSON"))
}

impl Definition {
    /// `{}`: what a record read without its definition holds
    /// (`Store::all_tools_without_texts`).
    pub fn empty() -> Definition {
        Definition(empty_object())
    }
}

impl PartialEq for Definition {
    fn eq(&self, other: &Definition) -> bool {
        self.0.get() == other.0.get() || self.value() == other.value()
    }
}

impl std::fmt::Debug for Definition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.get())
    }
}

/// One tool of one server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRecord {
    /// The tool id, `server.original_name` (only the first dot separates).
    pub id: String,
    pub server_id: ServerId,
    pub server_name: String,
    pub original_name: String,
    /// The name clients see on the MCP endpoint; `None` when rejected.
    pub wire_name: Option<String>,
    /// Why the tool has no wire name (a collision), if it has none.
    pub rejected: Option<String>,
    /// Why its definition is not offered at all (too large, nested too
    /// deep, an invalid `x-mcp-header`): such a tool is kept (so it shows
    /// with its reason) but neither listed, searched nor routed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Held back by the trust checks (a changed, new or poisoned-looking
    /// definition): `refused` then says why, and this how to approve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<super::Hold>,
    /// What the poisoning checks found in this definition (any severity).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<super::Finding>,
    pub description: Option<String>,
    /// The definition exactly as `tools/list` returned it.
    pub definition: Definition,
    /// SHA-256 of the definition, to notice changes.
    pub definition_hash: String,
    pub is_external: bool,
    pub is_classified: bool,
    #[serde(default)]
    pub skill_ids: Vec<String>,
    #[serde(default)]
    pub primary_skill_id: Option<String>,
    /// Where classification stands, with confidences; `is_classified`,
    /// `skill_ids` and `primary_skill_id` mirror it (`set_classification`).
    #[serde(default)]
    pub classification: Classification,
    pub discovered_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ToolRecord {
    /// Why clients are not offered the tool, if they are not.
    pub fn withheld_because(&self) -> Option<&str> {
        self.refused.as_deref().or(self.rejected.as_deref())
    }

    /// The record less its definition: what a pass keeps of many records
    /// it wrote (at 100,000 tools the definitions are most of them).
    pub fn without_definition(mut self) -> ToolRecord {
        self.definition = Definition::empty();
        self
    }

    /// Stores a classification and the flat fields that mirror it in the API
    /// (`is_classified`, `skill_ids`, `primary_skill_id`).
    pub fn set_classification(&mut self, classification: Classification) {
        self.is_classified = classification.state == ClassificationState::Classified;
        self.skill_ids = classification
            .skills
            .iter()
            .map(|s| s.skill_id.clone())
            .collect();
        self.primary_skill_id = self.skill_ids.first().cloned();
        self.classification = classification;
    }

    /// The definition changed: the tool is classified again. Its skills
    /// stay shown until the new ones arrive.
    pub fn reset_classification(&mut self) {
        self.is_classified = false;
        self.classification.state = self
            .classification
            .state
            .transition(ClassificationEvent::Reset)
            .unwrap_or_default();
        self.classification.by = None;
        self.classification.failures = 0;
    }
}

/// An item a server listed whose definition is not kept: too large, or
/// unreadable (nested deeper than a parser goes). Its name (cut short if
/// it is long itself) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedItem {
    pub name: String,
    pub reason: String,
}

/// Which list a catalog item came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatalogKind {
    Resource,
    ResourceTemplate,
    Prompt,
}

impl CatalogKind {
    /// The field of an item that identifies it within its server.
    pub fn key_field(self) -> &'static str {
        match self {
            CatalogKind::Resource => "uri",
            CatalogKind::ResourceTemplate => "uriTemplate",
            CatalogKind::Prompt => "name",
        }
    }

    /// Whether its items are pinned and checked like tools: prompts and
    /// resource templates are text a model reads; a resource's content is
    /// data, read when asked for.
    pub fn is_pinned(self) -> bool {
        !matches!(self, CatalogKind::Resource)
    }

    /// Its items' ids' prefix where tools and items are named together
    /// (`prompt:SERVER.NAME`, `template:SERVER:URI_TEMPLATE`), and the
    /// separator between server and item.
    pub fn id_prefix(self) -> (&'static str, char) {
        match self {
            CatalogKind::Resource => ("resource:", ':'),
            CatalogKind::ResourceTemplate => ("template:", ':'),
            CatalogKind::Prompt => ("prompt:", '.'),
        }
    }

    /// An item's id: `prompt:fx.greet`, `template:fx:file:///{path}`.
    pub fn item_id(self, server: &str, key: &str) -> String {
        let (prefix, separator) = self.id_prefix();
        format!("{prefix}{server}{separator}{key}")
    }

    /// The kind, server and key an item id names.
    pub fn parse_item_id(id: &str) -> Option<(CatalogKind, &str, &str)> {
        [CatalogKind::Prompt, CatalogKind::ResourceTemplate]
            .into_iter()
            .find_map(|kind| {
                let (prefix, separator) = kind.id_prefix();
                let (server, key) = id.strip_prefix(prefix)?.split_once(separator)?;
                Some((kind, server, key))
            })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CatalogKind::Resource => "resource",
            CatalogKind::ResourceTemplate => "resource_template",
            CatalogKind::Prompt => "prompt",
        }
    }
}

/// Where a held prompt's or resource template's hold is kept, inside the
/// item as stored (never passed to clients: a held item is not listed).
pub const ITEM_TRUST_FIELD: &str = "io.github.mcp-aggregator/trust";

/// A held item's hold and what the poisoning checks found in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemTrust {
    pub hold: super::Hold,
    #[serde(default)]
    pub findings: Vec<super::Finding>,
}

impl ItemTrust {
    /// The hold an item as stored carries.
    pub fn of(item: &Value) -> Option<ItemTrust> {
        serde_json::from_value(item.get(ITEM_TRUST_FIELD)?.clone()).ok()
    }
}

/// A held prompt or resource template, as the user is shown it.
#[derive(Debug, Clone)]
pub struct HeldItem {
    pub server_id: ServerId,
    pub server_name: String,
    pub kind: CatalogKind,
    /// Its name (a prompt) or URI template.
    pub key: String,
    /// The item as the server offered it (without the trust field).
    pub definition: Value,
    /// `None` once approved.
    pub trust: Option<ItemTrust>,
}

impl HeldItem {
    pub fn id(&self) -> String {
        self.kind.item_id(&self.server_name, &self.key)
    }
}

/// What a discovery changed in one list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CatalogDiff {
    pub added: usize,
    pub updated: usize,
    pub removed: usize,
    pub unchanged: usize,
    /// Tools without a wire name because of a collision.
    pub rejected: usize,
    /// Tools whose definitions are not offered (`ToolRecord::refused`).
    pub refused: usize,
}

impl CatalogDiff {
    pub fn changed(&self) -> bool {
        self.added + self.updated + self.removed > 0
    }
}
