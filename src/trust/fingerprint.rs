//! A definition's fingerprint: SHA-256 over the fields a model reads
//! (name, title, description, the schemas, annotations; a prompt's
//! arguments; a template's URI), in canonical JSON (keys sorted), so
//! the order a server happens to send keys in is not a change.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The fields of a tool, prompt or resource template that are pinned: what
/// the model reads, or what decides what a call does. `_meta` and icons
/// are not pinned.
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

/// The pinned fields of a definition, keys sorted at every depth.
pub fn pinned_fields(definition: &Value) -> Value {
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
    let text = serde_json::to_string(&pinned_fields(definition)).unwrap_or_default();
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
    }
}
