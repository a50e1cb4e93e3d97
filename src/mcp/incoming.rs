//! What a client sent, read and sorted: a request to answer (a tool
//! call's arguments kept as the client wrote them), a notification or an
//! answer to handle, or something that is not JSON-RPC (answered with an
//! error).

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::jsonrpc::{self, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR};

/// A message as read from the wire.
pub enum Parsed {
    One(Incoming),
    /// A JSON array: each item is sorted on its own.
    Batch(Vec<Value>),
}

impl Parsed {
    /// Whether it was a batch, and its messages sorted.
    pub fn into_messages(self) -> (bool, Vec<Incoming>) {
        match self {
            Parsed::One(message) => (false, vec![message]),
            Parsed::Batch(items) => (true, items.into_iter().map(classify).collect()),
        }
    }
}

/// Parses what a client sent. A well-formed request (the usual message)
/// is read straight into its parts: the envelope builds no tree of its
/// own, and a tool call's arguments stay the text the client wrote (they
/// go to the server as written). Anything else is read as a tree and
/// sorted by `classify`, which has the last word on what is valid.
pub fn parse(text: &[u8]) -> Result<Parsed, serde_json::Error> {
    let starts_object = text
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{');
    if starts_object {
        match serde_json::from_slice::<WellFormedRequest>(text) {
            Ok(request)
                if request.jsonrpc == "2.0" && request.id.as_ref().is_some_and(is_request_id) =>
            {
                let id = request.id.unwrap_or(Value::Null);
                if request.params.as_ref().is_some_and(|p| p.too_deep) {
                    return Ok(Parsed::One(Incoming::Invalid(jsonrpc::error(
                        id,
                        INVALID_PARAMS,
                        &format!("arguments nested more than {MAX_ARGUMENT_NESTING} levels deep"),
                    ))));
                }
                let (params, arguments) = match request.params {
                    Some(params) if request.method == "tools/call" => {
                        (Some(Value::Object(params.tree)), params.arguments)
                    }
                    Some(params) => (
                        with_arguments(Some(Value::Object(params.tree)), params.arguments),
                        None,
                    ),
                    None => (None, None),
                };
                return Ok(Parsed::One(Incoming::Request {
                    id,
                    method: request.method.into_owned(),
                    params,
                    arguments,
                }));
            }
            // Not JSON at all: reading it again as a tree fails the same way.
            Err(err) if err.is_syntax() || err.is_eof() => return Err(err),
            // Valid JSON of another shape: `classify` decides.
            _ => {}
        }
    }
    Ok(match serde_json::from_slice::<Value>(text)? {
        Value::Array(items) => Parsed::Batch(items),
        single => Parsed::One(classify(single)),
    })
}

/// A request as `classify` would accept it; other fields are ignored, as
/// there.
#[derive(Deserialize)]
struct WellFormedRequest<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    /// Params that are not an object (`null` included, which `Option`
    /// alone would read as missing) are left to `classify`.
    #[serde(default, deserialize_with = "object")]
    params: Option<SplitParams>,
}

fn object<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<SplitParams>, D::Error> {
    SplitParams::deserialize(deserializer).map(Some)
}

/// Params with their `arguments` left as text.
struct SplitParams {
    tree: Map<String, Value>,
    arguments: Option<Box<RawValue>>,
    /// The arguments nest deeper than a tree may (then left out): read as
    /// text, they escape the parser's depth limit, and a server parsing
    /// them whole would not. Refused with the request's id.
    too_deep: bool,
}

impl<'de> Deserialize<'de> for SplitParams {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = SplitParams;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<SplitParams, A::Error> {
                let mut tree = Map::new();
                let mut arguments = None;
                let mut too_deep = false;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "arguments" {
                        let text = map.next_value::<Box<RawValue>>()?;
                        too_deep = nesting(text.get()) > MAX_ARGUMENT_NESTING;
                        arguments = (!too_deep).then_some(text);
                    } else {
                        tree.insert(key, map.next_value::<Value>()?);
                    }
                }
                Ok(SplitParams {
                    tree,
                    arguments,
                    too_deep,
                })
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// The depth the rest of a request may have (serde_json's own limit when
/// it reads a tree).
const MAX_ARGUMENT_NESTING: usize = 128;

/// How deep arrays and objects nest in a JSON text (strings skipped).
fn nesting(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in json.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A request's params with its arguments, read as text, back in the tree
/// (for whoever reads them: a 2026-07-28 request's checks, other methods).
pub fn with_arguments(params: Option<Value>, arguments: Option<Box<RawValue>>) -> Option<Value> {
    let Some(arguments) = arguments else {
        return params;
    };
    let arguments = crate::jsonrpc::Json::Text(arguments).to_tree();
    match params {
        Some(Value::Object(mut tree)) => {
            tree.insert("arguments".to_owned(), arguments);
            Some(Value::Object(tree))
        }
        other => other,
    }
}

/// A field that is there, `null` included (as the tree keeps it).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// What an incoming message is.
#[derive(Debug)]
pub enum Incoming {
    /// A request: handle it and answer with `id`.
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
        /// A tool call's arguments as the client wrote them (then not in
        /// `params`).
        arguments: Option<Box<RawValue>>,
    },
    /// A notification or a response to something we asked: no answer.
    Other(Value),
    /// Not a JSON-RPC message: answer with this error.
    Invalid(Value),
}

/// An id a request may have.
fn is_request_id(id: &Value) -> bool {
    id.is_string() || id.is_number()
}

/// Sorts a raw message.
pub fn classify(message: Value) -> Incoming {
    let Value::Object(mut map) = message else {
        return Incoming::Invalid(jsonrpc::error(
            Value::Null,
            INVALID_REQUEST,
            "a JSON-RPC message must be an object",
        ));
    };
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let id = map
            .remove("id")
            .filter(|id| id.is_string() || id.is_number())
            .unwrap_or(Value::Null);
        return Incoming::Invalid(jsonrpc::error(
            id,
            INVALID_REQUEST,
            "a JSON-RPC message needs \"jsonrpc\": \"2.0\"",
        ));
    }
    let method = map.get("method").and_then(Value::as_str).map(str::to_owned);
    match (method, map.remove("id")) {
        (Some(method), Some(id)) if is_request_id(&id) => Incoming::Request {
            id,
            method,
            params: map.remove("params"),
            arguments: None,
        },
        // MCP: a request's id is a string or an integer, never null (a
        // null id would make it a notification nobody answers, while its
        // sender waits).
        (Some(_), Some(_)) => Incoming::Invalid(jsonrpc::error(
            Value::Null,
            INVALID_REQUEST,
            "a request's id must be a string or a number",
        )),
        (Some(_), None) => Incoming::Other(Value::Object(map)),
        (None, Some(id)) if map.contains_key("result") || map.contains_key("error") => {
            map.insert("id".to_owned(), id);
            Incoming::Other(Value::Object(map))
        }
        (None, id) => Incoming::Invalid(jsonrpc::error(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "missing method",
        )),
    }
}

/// A JSON-RPC invalid-request answer (no id to answer to).
pub fn invalid_request(detail: &str) -> Value {
    jsonrpc::error(
        Value::Null,
        INVALID_REQUEST,
        &format!("Invalid request: {detail}"),
    )
}

/// A JSON-RPC parse error answer.
pub fn parse_error(detail: &str) -> Value {
    jsonrpc::error(Value::Null, PARSE_ERROR, &format!("Parse error: {detail}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What a message means, arguments read as text put back.
    fn meaning(message: Incoming) -> Value {
        match message {
            Incoming::Request {
                id,
                method,
                params,
                arguments,
            } => {
                let called = method == "tools/call";
                assert!(
                    called || arguments.is_none(),
                    "{method}: arguments split off"
                );
                json!({"request": [id, method, with_arguments(params, arguments)]})
            }
            Incoming::Other(other) => json!({ "other": other }),
            Incoming::Invalid(answer) => json!({ "invalid": answer }),
        }
    }

    /// What the tree path alone makes of `text`.
    fn by_tree(text: &str) -> Result<Vec<Value>, String> {
        match serde_json::from_str::<Value>(text).map_err(|e| e.to_string())? {
            Value::Array(items) => Ok(items.into_iter().map(|m| meaning(classify(m))).collect()),
            single => Ok(vec![meaning(classify(single))]),
        }
    }

    fn by_parse(text: &str) -> Result<Vec<Value>, String> {
        let (_, messages) = parse(text.as_bytes())
            .map_err(|e| e.to_string())?
            .into_messages();
        Ok(messages.into_iter().map(meaning).collect())
    }

    #[test]
    fn a_calls_arguments_stay_the_text_the_client_wrote() {
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__b","arguments":{"n": 1.50e3, "s":"\u00e9"},"_meta":{"progressToken":3}}}"#;
        let Ok(Parsed::One(Incoming::Request {
            params, arguments, ..
        })) = parse(text.as_bytes())
        else {
            panic!("a request");
        };
        assert_eq!(
            arguments.map(|a| a.get().to_owned()).as_deref(),
            Some(r#"{"n": 1.50e3, "s":"\u00e9"}"#)
        );
        assert_eq!(
            params,
            Some(json!({"name": "a__b", "_meta": {"progressToken": 3}}))
        );
        // Another method's arguments stay in its params.
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p","arguments":{"a":"1"}}}"#;
        let Ok(Parsed::One(Incoming::Request {
            params, arguments, ..
        })) = parse(text.as_bytes())
        else {
            panic!("a request");
        };
        assert!(arguments.is_none());
        assert_eq!(params, Some(json!({"name": "p", "arguments": {"a": "1"}})));
    }

    #[test]
    fn arguments_nested_deeper_than_a_tree_may_be_are_refused() {
        let nested = |depth: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{}"[}}]"{}}}}}}}"#,
                "[".repeat(depth - 1),
                "]".repeat(depth - 1)
            )
        };
        assert_eq!(nesting(r#"{"a":[1,{"b":"[[[{"}]}"#), 3);
        let Ok(Parsed::One(Incoming::Request { arguments, .. })) = parse(nested(128).as_bytes())
        else {
            panic!("128 levels are a request");
        };
        assert!(arguments.is_some());
        let Ok(Parsed::One(Incoming::Invalid(refused))) = parse(nested(129).as_bytes()) else {
            panic!("129 levels are not");
        };
        assert_eq!(
            refused["id"], 1,
            "answered with the request's id: {refused}"
        );
        assert_eq!(refused["error"]["code"], INVALID_PARAMS, "{refused}");
    }

    #[test]
    fn a_request_whose_id_is_null_or_not_a_scalar_is_refused() {
        for text in [
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":{"odd":true},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
        ] {
            let Ok(Parsed::One(Incoming::Invalid(error))) = parse(text.as_bytes()) else {
                panic!("{text} was not refused");
            };
            assert_eq!(error["error"]["code"], INVALID_REQUEST, "{text}");
        }
    }

    #[test]
    fn the_envelope_reader_agrees_with_the_tree_on_every_shape() {
        let texts = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__b","arguments":{"x":[1,2.50,"\u00e9"]}}}"#,
            r#"  {"method":"tools/list","id":"s-1","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":1},"name":"x","arguments":{"b":2}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"argument":{"name":"a"},"arguments":{"x":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"p\u0069ng","extra":{"a":1}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7}"#,
            r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#,
            r#"{"jsonrpc":2,"id":7,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":5}"#,
            r#"{"jsonrpc":"2.0","id":{"odd":true},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
            r#"["2.0",1,"ping"]"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]"#,
            r#"[]"#,
            r#""text""#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"} trailing"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":[1,2}}"#,
            "",
        ];
        for text in texts {
            assert_eq!(by_parse(text), by_tree(text), "{text}");
        }
    }

    #[test]
    fn nesting_past_the_parsers_limit_is_refused_on_both_paths() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(by_parse(&deep).is_err());
        assert_eq!(by_parse(&deep), by_tree(&deep));
    }
}
