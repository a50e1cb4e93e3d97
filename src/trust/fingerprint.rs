//! A definition's fingerprint: SHA-256 over the fields a model reads
//! (name, title, description, the schemas, annotations; a prompt's
//! arguments; a template's URI) and the `_meta` keys a host acts on (the
//! UI resource an MCP Apps host renders for a tool), in canonical JSON
//! (keys sorted), so the order a server happens to send keys in is not a
//! change.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The fields of a tool, prompt or resource template that are pinned: what
/// the model reads, or what decides what a call does. Icons, and `_meta`
/// but for `PINNED_META`, are not pinned.
const PINNED: &[&str] = &[
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "arguments",
    "uriTemplate",
    "uri",
    "mimeType",
    "instructions",
];

/// The `_meta` keys that are pinned: the UI a host renders for a tool and
/// hands the tool's results to (MCP Apps' `ui`, with its `resourceUri`;
/// the older flat `ui/resourceUri`; the OpenAI Apps SDK's output
/// template, and whether that UI may call tools itself). Swapping it
/// after approval is a rug pull as much as a new description. Only the
/// address is pinned, not the resource behind it. Other `_meta` keys
/// carry what servers change freely.
const PINNED_META: &[&str] = &[
    "ui",
    "ui/resourceUri",
    "openai/outputTemplate",
    "openai/widgetAccessible",
];

/// The pinned fields of a definition, keys sorted at every depth.
pub fn pinned_fields(definition: &Value) -> Value {
    let mut out = without_meta(definition);
    if let (Value::Object(out), Some(Value::Object(meta))) = (&mut out, definition.get("_meta")) {
        let pinned: Map<String, Value> = PINNED_META
            .iter()
            .filter_map(|key| meta.get(*key).map(|v| ((*key).to_owned(), canonical(v))))
            .collect();
        if !pinned.is_empty() {
            out.insert("_meta".to_owned(), canonical(&Value::Object(pinned)));
        }
    }
    out
}

/// The pinned fields as releases before `PINNED_META` pinned them.
fn without_meta(definition: &Value) -> Value {
    let mut out = Map::new();
    if let Value::Object(fields) = definition {
        let mut names: Vec<&str> = PINNED
            .iter()
            .copied()
            .filter(|f| fields.contains_key(*f))
            .collect();
        names.sort_unstable();
        for name in names {
            if let Some(value) = fields.get(name) {
                out.insert(name.to_owned(), canonical(value));
            }
        }
    }
    Value::Object(out)
}

/// `sha256:` and the hex digest of the pinned fields' canonical text.
pub fn fingerprint(definition: &Value) -> String {
    digest_of(&pinned_fields(definition))
}

/// The fingerprint a release before `PINNED_META` gave this definition,
/// when it differs from today's (the definition has a pinned `_meta`
/// key): a pin made then, equal to it, approved everything pinned then,
/// and is carried over to today's fingerprint instead of holding the tool.
pub fn earlier_fingerprint(definition: &Value) -> Option<String> {
    let earlier = without_meta(definition);
    (earlier != pinned_fields(definition)).then(|| digest_of(&earlier))
}

fn digest_of(pinned: &Value) -> String {
    let text = serde_json::to_string(pinned).unwrap_or_default();
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(7 + 64);
    hex.push_str("sha256:");
    for byte in digest {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&fields[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_unpinned_fields_do_not_change_it() {
        let a = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}});
        let b = json!({"inputSchema": {"properties": {"x": {"type": "string"}}, "type": "object"}, "description": "d", "name": "t", "_meta": {"k": 1}});
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let c = json!({"name": "t", "description": "d.", "inputSchema": {"type": "object"}});
        assert_ne!(fingerprint(&a), fingerprint(&c));
        assert!(fingerprint(&a).starts_with("sha256:"));
        assert_eq!(earlier_fingerprint(&a), None);
    }

    #[test]
    fn the_ui_a_host_renders_is_pinned_and_other_meta_is_not() {
        let with_ui = |uri: &str, other: u64| json!({"name": "t", "description": "d", "_meta": {"ui": {"resourceUri": uri}, "vendor/ts": other}});
        let approved = with_ui("ui://t/view", 1);
        assert_eq!(
            fingerprint(&approved),
            fingerprint(&with_ui("ui://t/view", 2))
        );
        assert_ne!(
            fingerprint(&approved),
            fingerprint(&with_ui("ui://evil/view", 1))
        );
        let flat = |uri: &str| json!({"name": "t", "_meta": {"ui/resourceUri": uri}});
        assert_ne!(fingerprint(&flat("ui://a")), fingerprint(&flat("ui://b")));
        // What an earlier release pinned: the same for both URIs.
        let earlier = earlier_fingerprint(&approved);
        assert!(earlier.is_some());
        assert_eq!(earlier, earlier_fingerprint(&with_ui("ui://evil/view", 1)));
        assert_eq!(
            earlier.as_deref(),
            Some(fingerprint(&json!({"name": "t", "description": "d"})).as_str())
        );
    }
}
