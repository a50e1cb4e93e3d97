//! What a client sent, sorted: a request to answer, a notification or an
//! answer to handle, or something that is not JSON-RPC (answered with an
//! error).

use serde_json::Value;

use crate::jsonrpc::{self, INVALID_REQUEST, PARSE_ERROR};

/// What an incoming message is.
pub enum Incoming {
    /// A request: handle it and answer with `id`.
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    /// A notification or a response to something we asked: no answer.
    Other(Value),
    /// Not a JSON-RPC message: answer with this error.
    Invalid(Value),
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
        (Some(method), Some(id)) if !id.is_null() => Incoming::Request {
            id,
            method,
            params: map.remove("params"),
        },
        (Some(_), _) => Incoming::Other(Value::Object(map)),
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
