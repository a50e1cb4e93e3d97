//! Tool arguments mirrored into HTTP headers (2026-07-28, `x-mcp-header`):
//! which arguments a tool's input schema designates (and whether the
//! designation is valid at all), and how a value is written into and read
//! from an `Mcp-Param-{Name}` (or `Mcp-Name`) header. Used on both sides:
//! the front door checks the headers a client sent, the sessions send them
//! to servers.

use base64::Engine as _;
use serde_json::Value;

/// A tool argument mirrored into an `Mcp-Param-{header}` header.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderParam {
    /// The chain of `properties` keys leading to the argument.
    pub path: Vec<String>,
    pub header: String,
}

/// Schemas nested deeper than this name no header.
const MAX_DEPTH: usize = 16;

/// The `x-mcp-header` annotations of an input schema, or why they make the
/// tool invalid: each must be a non-empty header token, unique regardless
/// of case, on a string, integer or boolean property reachable from the
/// root through `properties` alone (never inside `items`, a composition, a
/// conditional or a `$ref`).
pub fn header_params(input_schema: Option<&Value>) -> Result<Vec<HeaderParam>, String> {
    let mut found = Vec::new();
    let Some(schema) = input_schema else {
        return Ok(found);
    };
    walk(schema, &mut Vec::new(), true, &mut found)?;
    let mut seen = std::collections::HashSet::new();
    for param in &found {
        if !seen.insert(param.header.to_ascii_lowercase()) {
            return Err(format!(
                "x-mcp-header {:?} is used more than once",
                param.header
            ));
        }
    }
    Ok(found)
}

/// Visits every object of the schema; `reachable` says whether it is a
/// property reached through `properties` keys alone (`path` leads to it).
fn walk(
    schema: &Value,
    path: &mut Vec<String>,
    reachable: bool,
    found: &mut Vec<HeaderParam>,
) -> Result<(), String> {
    if path.len() > MAX_DEPTH {
        return Ok(());
    }
    match schema {
        Value::Object(object) => {
            if let Some(header) = object.get("x-mcp-header") {
                let at = if path.is_empty() {
                    "the schema root".to_owned()
                } else {
                    format!("property {:?}", path.join("."))
                };
                let Some(header) = header.as_str() else {
                    return Err(format!("x-mcp-header on {at} is not a string"));
                };
                if !reachable || path.is_empty() {
                    return Err(format!(
                        "x-mcp-header {header:?} on {at} is not reachable through properties alone"
                    ));
                }
                if header.is_empty() || !header.bytes().all(is_tchar) {
                    return Err(format!(
                        "x-mcp-header {header:?} on {at} is not a valid header name"
                    ));
                }
                let primitive = matches!(
                    object.get("type").and_then(Value::as_str),
                    Some("string" | "integer" | "boolean")
                );
                if !primitive {
                    return Err(format!(
                        "x-mcp-header {header:?} on {at}, which is not a string, integer or boolean"
                    ));
                }
                found.push(HeaderParam {
                    path: path.clone(),
                    header: header.to_owned(),
                });
            }
            for (key, value) in object {
                if key == "properties" {
                    if let Value::Object(properties) = value {
                        for (name, property) in properties {
                            path.push(name.clone());
                            walk(property, path, reachable, found)?;
                            path.pop();
                        }
                    }
                } else {
                    // Anything under another keyword is not reachable: an
                    // annotation there makes the tool invalid.
                    let mut elsewhere = path.clone();
                    elsewhere.push(key.clone());
                    walk(value, &mut elsewhere, false, found)?;
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, path, false, found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// RFC 9110 `tchar`.
fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// The value of an `Mcp-Param-*` header for an argument: strings as they
/// are, integers in decimal, booleans as `true`/`false`; `None` for null
/// (the header is omitted) and for anything else.
pub fn header_value(argument: &Value) -> Option<String> {
    let text = match argument {
        Value::String(text) => text.clone(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        _ => return None,
    };
    Some(encode(&text))
}

/// A value as a header carries it: as it is when it is plain visible ASCII
/// (spaces inside allowed), else `=?base64?…?=` of its UTF-8 — also when it
/// merely looks like that form.
pub fn encode(text: &str) -> String {
    // An empty value is a valid (empty) header value.
    let visible = text.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let padded = text.starts_with(' ') || text.ends_with(' ');
    let looks_encoded = text.starts_with("=?base64?") && text.ends_with("?=");
    if visible && !padded && !looks_encoded {
        text.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text)
        )
    }
}

/// A header value read back (the base64 form decoded).
pub fn decode(value: &str) -> Result<String, String> {
    let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    else {
        return Ok(value.to_owned());
    };
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| format!("the header value {value} is not valid base64 UTF-8"))
}

/// The `Mcp-Param-*` headers of a call: one per designated argument that
/// has a value.
pub fn call_headers(params: &[HeaderParam], arguments: Option<&Value>) -> Vec<(String, String)> {
    let Some(arguments) = arguments else {
        return Vec::new();
    };
    params
        .iter()
        .filter_map(|param| {
            let value = param
                .path
                .iter()
                .try_fold(arguments, |at, key| at.get(key))?;
            Some((format!("Mcp-Param-{}", param.header), header_value(value)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_annotations_are_found_on_their_paths() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "outer": {"type": "object", "properties": {
                "flag": {"type": "boolean", "x-mcp-header": "Flag"}
            }},
            "query": {"type": "string"}
        }});
        let found: Vec<(Vec<String>, String)> = header_params(Some(&schema))
            .unwrap()
            .into_iter()
            .map(|p| (p.path, p.header))
            .collect();
        assert!(found.contains(&(vec!["region".into()], "Region".into())));
        assert!(found.contains(&(vec!["outer".into(), "flag".into()], "Flag".into())));
        assert_eq!(found.len(), 2);
        assert!(header_params(None).unwrap().is_empty());
    }

    #[test]
    fn invalid_annotations_make_the_tool_invalid() {
        let property = |p: Value| json!({"type": "object", "properties": {"v": p}});
        for bad in [
            property(json!({"type": "string", "x-mcp-header": ""})),
            property(json!({"type": "string", "x-mcp-header": "My Region"})),
            property(json!({"type": "string", "x-mcp-header": "Region:Primary"})),
            property(json!({"type": "string", "x-mcp-header": "Région"})),
            property(json!({"type": "string", "x-mcp-header": "Region\t1"})),
            property(json!({"type": "number", "x-mcp-header": "Score"})),
            property(json!({"type": "object", "x-mcp-header": "Data"})),
            property(json!({"type": "array", "x-mcp-header": "Items"})),
            property(json!({"type": "null", "x-mcp-header": "Nil"})),
            property(json!({"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}})),
            json!({"type": "object", "anyOf": [{"properties": {"v": {"type": "string", "x-mcp-header": "V"}}}]}),
            json!({"type": "object", "properties": {
                "a": {"type": "string", "x-mcp-header": "MyField"},
                "b": {"type": "string", "x-mcp-header": "myfield"}
            }}),
        ] {
            assert!(header_params(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_are_encoded_as_the_revision_says() {
        assert_eq!(encode("us-west1"), "us-west1");
        assert_eq!(encode("us west 1"), "us west 1");
        assert_eq!(encode("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(encode(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            encode("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        for text in ["us-west1", "Hello, 世界", " padded ", "line1\r\nline2", ""] {
            assert_eq!(decode(&encode(text)).unwrap(), text);
        }
        let params = header_params(Some(&json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "verbose": {"type": "boolean", "x-mcp-header": "Verbose"}
        }})))
        .unwrap();
        let mut headers = call_headers(
            &params,
            Some(&json!({"region": "eu", "n": 42, "verbose": null})),
        );
        headers.sort();
        assert_eq!(
            headers,
            [
                ("Mcp-Param-N".to_owned(), "42".to_owned()),
                ("Mcp-Param-Region".to_owned(), "eu".to_owned())
            ]
        );
    }
}
