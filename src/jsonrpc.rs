//! JSON-RPC 2.0 as MCP uses it, shared by both sides — the sessions to
//! servers and the front doors to clients: the error codes, the envelopes,
//! what kind a message is, and its framing on a line. Messages stay raw
//! `serde_json::Value` (reading a line is bounded by `limits::read_line`).

use serde_json::{Map, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// Resource not found in the 2025 revisions (2026-07-28: `INVALID_PARAMS`).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// 2026-07-28: an HTTP header disagrees with the body (`HeaderMismatch`).
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the request needs a capability the client did not declare.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// 2026-07-28: the protocol version asked for is not one the peer speaks.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

fn envelope(capacity: usize) -> Map<String, Value> {
    let mut message = Map::with_capacity(capacity);
    message.insert("jsonrpc".to_owned(), Value::from("2.0"));
    message
}

/// A request; no `params` member when there are none.
pub fn request(id: impl Into<Value>, method: &str, params: Option<Value>) -> Value {
    let mut message = envelope(4);
    message.insert("id".to_owned(), id.into());
    message.insert("method".to_owned(), Value::from(method));
    if let Some(params) = params {
        message.insert("params".to_owned(), params);
    }
    Value::Object(message)
}

/// A notification; no `params` member when there are none.
pub fn notification(method: &str, params: Option<Value>) -> Value {
    let mut message = envelope(3);
    message.insert("method".to_owned(), Value::from(method));
    if let Some(params) = params {
        message.insert("params".to_owned(), params);
    }
    Value::Object(message)
}

/// A successful answer.
pub fn result(id: Value, result: Value) -> Value {
    let mut message = envelope(3);
    message.insert("id".to_owned(), id);
    message.insert("result".to_owned(), result);
    Value::Object(message)
}

/// An error object (the `error` member of an answer).
pub fn error_object(code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = Map::with_capacity(3);
    error.insert("code".to_owned(), Value::from(code));
    error.insert("message".to_owned(), Value::from(message));
    if let Some(data) = data {
        error.insert("data".to_owned(), data);
    }
    Value::Object(error)
}

/// An error answer with an error object already built.
pub fn error_answer(id: Value, error: Value) -> Value {
    let mut message = envelope(3);
    message.insert("id".to_owned(), id);
    message.insert("error".to_owned(), error);
    Value::Object(message)
}

/// An error answer.
pub fn error(id: Value, code: i64, message: &str) -> Value {
    error_answer(id, error_object(code, message, None))
}

/// What a message is, by its members.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind<'a> {
    Request {
        id: &'a Value,
        method: &'a str,
    },
    Notification {
        method: &'a str,
    },
    /// An answer (`result` or `error`) to the request with this id.
    Answer {
        id: &'a Value,
    },
    /// Neither: no method and no id.
    Invalid,
}

pub fn classify(message: &Value) -> Kind<'_> {
    let method = message.get("method").and_then(Value::as_str);
    match (method, message.get("id")) {
        (Some(method), Some(id)) => Kind::Request { id, method },
        (Some(method), None) => Kind::Notification { method },
        (None, Some(id)) => Kind::Answer { id },
        (None, None) => Kind::Invalid,
    }
}

/// A message serialised as one line (newline included): what every stdio
/// transport sends, in one write.
pub fn line(message: &Value) -> serde_json::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(message)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// A request as it goes on the wire.
#[derive(serde::Serialize)]
struct RequestEnvelope<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
}

/// A request serialised as one line straight from its parts (no envelope
/// object built: this is every call's path to a server).
pub fn request_line(id: u64, method: &str, params: Option<&Value>) -> serde_json::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(&RequestEnvelope {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelopes_have_exactly_their_members() {
        assert_eq!(
            request(7, "tools/list", None),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
        );
        assert_eq!(
            notification("notifications/initialized", Some(json!({}))),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}})
        );
        assert_eq!(
            result(json!("a"), json!({})),
            json!({"jsonrpc": "2.0", "id": "a", "result": {}})
        );
        assert_eq!(
            error_answer(
                Value::Null,
                error_object(PARSE_ERROR, "bad", Some(json!(1)))
            ),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "bad", "data": 1}})
        );
    }

    #[test]
    fn messages_are_told_apart_by_their_members() {
        let id = json!(1);
        assert_eq!(
            classify(&json!({"id": 1, "method": "ping"})),
            Kind::Request {
                id: &id,
                method: "ping"
            }
        );
        assert_eq!(
            classify(&json!({"method": "n"})),
            Kind::Notification { method: "n" }
        );
        assert_eq!(
            classify(&json!({"id": 1, "result": {}})),
            Kind::Answer { id: &id }
        );
        assert_eq!(classify(&json!({"result": {}})), Kind::Invalid);
        assert_eq!(line(&json!({})).unwrap(), b"{}\n");
        assert_eq!(
            request_line(3, "ping", None).unwrap(),
            b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n"
        );
    }
}
