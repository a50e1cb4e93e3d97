//! JSON-RPC 2.0 as MCP uses it, shared by both sides — the sessions to
//! servers and the front doors to clients: the error codes, the envelopes,
//! what kind a message is, and its framing on a line (reading a line is
//! bounded by `limits::read_line`). A server's message arrives as checked
//! JSON text (`RawValue`); only its envelope is read (`Envelope`), and an
//! answer's result goes back out as the server wrote it (`Json::Text`,
//! `Outgoing::Answer`): a call's result is never parsed into a tree and
//! serialised again. Everything else is a `serde_json::Value`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// The answer to a request the client cancelled, where one is owed (a
/// plain JSON answer to its POST): the code the Language Server Protocol
/// gave this.
pub const REQUEST_CANCELLED: i64 = -32800;
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

/// JSON kept as the text it came in (checked, passed on as written: a
/// call's arguments as the client wrote them, a server's result on its way
/// to a client), or a tree built or read here.
#[derive(Debug, Clone)]
pub enum Json {
    Text(Box<RawValue>),
    Tree(Value),
}

impl From<Value> for Json {
    fn from(value: Value) -> Json {
        Json::Tree(value)
    }
}

impl From<Box<RawValue>> for Json {
    fn from(text: Box<RawValue>) -> Json {
        Json::Text(text)
    }
}

impl Json {
    /// As a tree (parsed if it is still text).
    pub fn into_tree(self) -> serde_json::Result<Value> {
        match self {
            Json::Tree(value) => Ok(value),
            Json::Text(text) => parse(&text),
        }
    }

    /// As a tree, for the few who read a call's arguments (meta-tools,
    /// arguments mirrored into headers): checked text always reads.
    pub fn to_tree(&self) -> Value {
        match self {
            Json::Tree(value) => value.clone(),
            Json::Text(text) => parse(text).unwrap_or(Value::Null),
        }
    }

    /// A 2026-07-28 result's `resultType`, read without building the rest
    /// of a passed-through result.
    pub fn result_type(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Typed {
            #[serde(rename = "resultType")]
            result_type: Option<Value>,
        }
        let typed = match self {
            Json::Tree(value) => value.get("resultType").cloned(),
            Json::Text(text) => serde_json::from_str::<Typed>(text.get()).ok()?.result_type,
        };
        match typed? {
            Value::String(kind) => Some(kind),
            _ => None,
        }
    }
}

impl Serialize for Json {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Text(text) => text.serialize(serializer),
            Json::Tree(tree) => tree.serialize(serializer),
        }
    }
}

/// A request as it goes on the wire.
#[derive(serde::Serialize)]
struct RequestEnvelope<'a, P: ?Sized> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
}

/// A request serialised as one line straight from its parts (no envelope
/// object built: this is every call's path to a server).
pub fn request_line<P: serde::Serialize + ?Sized>(
    id: u64,
    method: &str,
    params: Option<&P>,
) -> serde_json::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(&RequestEnvelope {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// One message (or a batch's elements) checked as JSON but not parsed
/// into a tree: what every transport hands a session. Each is made one
/// line: its text may be written as it is to a stdio client.
pub fn split_raw(text: &[u8]) -> serde_json::Result<Vec<Box<RawValue>>> {
    let batch = text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    let messages = if batch {
        serde_json::from_slice(text)?
    } else {
        vec![serde_json::from_slice(text)?]
    };
    Ok(messages.into_iter().map(one_line).collect())
}

/// Finds where each JSON object or array of a body ends, as the body
/// arrives (a body may hold several, one after another: newline-delimited
/// frames a server streams). Each byte is looked at once, however the body
/// is cut into chunks; the text found is then parsed once.
#[derive(Debug, Default)]
pub struct TextSplitter {
    scanned: usize,
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl TextSplitter {
    /// The length of the first complete object or array at the start of
    /// `text` (after whitespace), when it has all arrived. After taking it
    /// out of the buffer, call `reset`.
    pub fn complete(&mut self, text: &[u8]) -> Option<usize> {
        while self.scanned < text.len() {
            let byte = text[self.scanned];
            self.scanned += 1;
            if self.in_string {
                match (self.escaped, byte) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(self.scanned);
                    }
                }
                // Anything but whitespace outside an object or array is
                // not a message: it ends here, for the parser to refuse.
                b if self.depth == 0 && !b.is_ascii_whitespace() => return Some(self.scanned),
                _ => {}
            }
        }
        None
    }

    pub fn reset(&mut self) {
        *self = TextSplitter::default();
    }
}

/// A checked JSON text without line breaks. JSON forbids raw control
/// characters inside strings, so any CR or LF in a checked text is
/// whitespace between tokens, and dropping it changes nothing (a server
/// over HTTP may pretty-print its bodies).
fn one_line(raw: Box<RawValue>) -> Box<RawValue> {
    let text = raw.get();
    if !text.bytes().any(|b| b == b'\n' || b == b'\r') {
        return raw;
    }
    let flat: String = text.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    RawValue::from_string(flat).unwrap_or(raw)
}

/// The members of a message that say what it is, read without parsing
/// the rest (`result` and `params` stay text).
#[derive(Deserialize)]
pub struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    pub id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub error: Option<&'a RawValue>,
}

/// A member that is there, even as `null` (which `Option` alone reads as
/// missing).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

impl<'a> Envelope<'a> {
    pub fn read(message: &'a RawValue) -> serde_json::Result<Envelope<'a>> {
        serde_json::from_str(message.get())
    }

    /// An answer: an id and no method.
    pub fn is_answer(&self) -> bool {
        self.id.is_some() && self.method.is_none()
    }

    /// The id when it is a number we could have sent.
    pub fn numeric_id(&self) -> Option<u64> {
        serde_json::from_str(self.id?.get()).ok()
    }
}

/// An object's members read one level deep: each value stays the text it
/// was, so a member can be read, set or added without parsing or
/// rebuilding anything below the top (a tool's definition, a large result).
#[derive(Debug)]
pub struct Members<'a>(Vec<(String, Cow<'a, RawValue>)>);

impl<'a> Members<'a> {
    /// The members of an object (an error for anything else).
    pub fn read(object: &'a RawValue) -> serde_json::Result<Members<'a>> {
        serde_json::from_str(object.get())
    }

    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// Sets a member, in its place if it is there (a repeated key is kept
    /// once), else at the end.
    pub fn set(&mut self, key: &str, value: Box<RawValue>) {
        let mut value = Some(Cow::Owned(value));
        self.0.retain_mut(|(k, v)| {
            if k != key {
                return true;
            }
            match value.take() {
                Some(new) => {
                    *v = new;
                    true
                }
                None => false,
            }
        });
        if let Some(value) = value {
            self.0.push((key.to_owned(), value));
        }
    }

    /// The object as one JSON text.
    pub fn to_raw(&self) -> serde_json::Result<Box<RawValue>> {
        serde_json::value::to_raw_value(self)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((key, value)) = map.next_entry::<String, &'de RawValue>()? {
                    members.push((key, Cow::Borrowed(value)));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

impl Serialize for Members<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(key, value)| (key, &**value)))
    }
}

/// A value as JSON text.
pub fn to_raw(value: &impl Serialize) -> serde_json::Result<Box<RawValue>> {
    serde_json::value::to_raw_value(value)
}

/// A checked JSON text as a tree.
pub fn parse(raw: &RawValue) -> serde_json::Result<Value> {
    serde_json::from_str(raw.get())
}

/// A message on its way to a client.
#[derive(Debug)]
pub enum Outgoing {
    Tree(Value),
    /// A whole message as its sender wrote it.
    Raw(Box<RawValue>),
    /// An answer whose result goes out as the server wrote it.
    Answer {
        id: Value,
        result: Box<RawValue>,
    },
}

impl From<Value> for Outgoing {
    fn from(value: Value) -> Outgoing {
        Outgoing::Tree(value)
    }
}

impl Serialize for Outgoing {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct RawAnswer<'a> {
            jsonrpc: &'static str,
            id: &'a Value,
            result: &'a RawValue,
        }
        match self {
            Outgoing::Tree(value) => value.serialize(serializer),
            Outgoing::Raw(raw) => raw.serialize(serializer),
            Outgoing::Answer { id, result } => RawAnswer {
                jsonrpc: "2.0",
                id,
                result,
            }
            .serialize(serializer),
        }
    }
}

impl std::fmt::Display for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| std::fmt::Error)?;
        f.write_str(&text)
    }
}

impl Outgoing {
    /// The message as a tree (tests and rare paths).
    pub fn into_tree(self) -> serde_json::Result<Value> {
        match self {
            Outgoing::Tree(value) => Ok(value),
            Outgoing::Raw(raw) => parse(&raw),
            Outgoing::Answer { id, result } => Ok(self::result(id, parse(&result)?)),
        }
    }

    /// The error code of an error answer built here (a passed-through
    /// message is never one of ours).
    pub fn error_code(&self) -> Option<i64> {
        match self {
            Outgoing::Tree(value) => value.get("error")?.get("code")?.as_i64(),
            Outgoing::Raw(_) | Outgoing::Answer { .. } => None,
        }
    }
}

/// The answer to request `id`.
pub fn answer(id: Value, payload: Json) -> Outgoing {
    match payload {
        Json::Tree(value) => Outgoing::Tree(result(id, value)),
        Json::Text(result) => Outgoing::Answer { id, result },
    }
}

/// What can be known of a message cut at the size limit, from the bytes
/// kept of it: its first ones and its last ones (`limits::Tail`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CutMessage {
    /// Its top-level `"id"`, when its first bytes hold it (the Python SDK
    /// and rmcp write it early) or its last ones do (the TypeScript SDK
    /// writes it last).
    pub id: Option<Value>,
    /// Its first bytes name a `"method"`: a request or a notification.
    pub has_method: bool,
    /// Its first bytes hold a `"result"` or an `"error"`.
    pub has_outcome: bool,
}

impl CutMessage {
    /// Reads a message from its first bytes (`prefix`) and its last ones.
    pub fn read(prefix: &[u8], tail: &[u8]) -> CutMessage {
        let mut cut = CutMessage::default();
        top_level_members(prefix, |key, value| match key {
            b"\"id\"" => cut.id = scalar_id(value),
            b"\"method\"" => cut.has_method = true,
            b"\"result\"" | b"\"error\"" => cut.has_outcome = true,
            _ => {}
        });
        if cut.id.is_none() {
            cut.id = trailing_id(tail);
        }
        cut
    }

    /// The id of an answer (a result or an error) whose sender waits for
    /// it: an error can then stand in for the answer that was too large.
    pub fn answer_id(&self) -> Option<&Value> {
        (self.has_outcome && !self.has_method)
            .then_some(self.id.as_ref())
            .flatten()
    }

    /// The id of a request, for the error that refuses it.
    pub fn request_id(&self) -> Option<&Value> {
        self.has_method.then_some(self.id.as_ref()).flatten()
    }
}

/// Calls `visit(key, rest)` for each top-level member whose key is in
/// `prefix` (the key with its quotes, the bytes after its colon).
fn top_level_members(prefix: &[u8], mut visit: impl FnMut(&[u8], &[u8])) {
    let mut depth = 0usize;
    let mut at = 0usize;
    while at < prefix.len() {
        match prefix[at] {
            b'"' => {
                let Some(end) = string_end(prefix, at) else {
                    return;
                };
                if depth == 1 {
                    let rest = &prefix[end + 1..];
                    if let Some(colon) = rest.iter().position(|b| !b.is_ascii_whitespace())
                        && rest[colon] == b':'
                    {
                        visit(&prefix[at..=end], &rest[colon + 1..]);
                    }
                }
                at = end;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        at += 1;
    }
}

/// A number or string at the start of `value` (an id may be nothing else).
fn scalar_id(value: &[u8]) -> Option<Value> {
    let mut values = serde_json::Deserializer::from_slice(value).into_iter::<Value>();
    match values.next()? {
        Ok(id @ (Value::Number(_) | Value::String(_))) => Some(id),
        _ => None,
    }
}

/// The `"id"` a message ends with (`…,"id":7}`), read from its last bytes.
/// The closing brace right after it makes it a member of the message
/// itself: in JSON a quote inside a string is escaped, so an unescaped
/// `"id":` cannot be string content, and one inside a nested object would
/// be followed by two braces.
fn trailing_id(tail: &[u8]) -> Option<Value> {
    let body = tail.trim_ascii_end().strip_suffix(b"}")?.trim_ascii_end();
    let start = if body.ends_with(b"\"") {
        let inner = &body[..body.len() - 1];
        (0..inner.len())
            .rev()
            .find(|&at| inner[at] == b'"' && !escaped(&inner[..at]))?
    } else {
        body.len()
            - body
                .iter()
                .rev()
                .take_while(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
                .count()
    };
    let before = body[..start]
        .trim_ascii_end()
        .strip_suffix(b":")?
        .trim_ascii_end()
        .strip_suffix(b"\"id\"")?;
    if escaped(before) || !matches!(before.trim_ascii_end().last(), Some(b',' | b'{')) {
        return None;
    }
    let id: Value = serde_json::from_slice(&body[start..]).ok()?;
    matches!(id, Value::Number(_) | Value::String(_)).then_some(id)
}

/// Whether the byte after `bytes` is escaped (an odd run of backslashes).
fn escaped(bytes: &[u8]) -> bool {
    bytes.iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// Where the string opening at `start` closes (its closing quote).
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return Some(at),
            _ => at += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {

    use super::*;
    use serde_json::json;

    #[test]
    fn the_id_of_a_cut_message_is_found_at_its_top_level_only() {
        let read = |prefix: &[u8]| CutMessage::read(prefix, b"");
        let cut = read(
            br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"arguments":{"x":"aaaa"#,
        );
        assert_eq!(cut.request_id(), Some(&json!(42)));
        assert_eq!(cut.answer_id(), None);
        let cut = read(br#"{"id": "a\"b", "method": "x", "params": {"#);
        assert_eq!(cut.request_id(), Some(&json!("a\"b")));
        // An "id" inside the params, or inside a string, is not the message's.
        let cut = read(br#"{"method":"x","params":{"id":7,"text":"\"id\":8 aaaa"#);
        assert_eq!(cut.id, None);
        assert_eq!(read(br#"{"params":{"a":"#).id, None);
        assert_eq!(read(br#"{"id":"#).id, None);
        assert_eq!(read(br#"{"id":null,"#).id, None);
    }

    #[test]
    fn the_id_a_cut_message_ends_with_is_found_in_its_tail() {
        let answer = br#"{"result":{"content":[{"type":"text","text":"zzzz"#;
        let cut = CutMessage::read(answer, b"zzzz\"}]},\"jsonrpc\":\"2.0\",\"id\":17}\n");
        assert_eq!(cut.answer_id(), Some(&json!(17)));
        assert_eq!(cut.request_id(), None);
        let cut = CutMessage::read(answer, br#"zz"}]},"jsonrpc":"2.0","id" : "r-\"1\"" }"#);
        assert_eq!(cut.answer_id(), Some(&json!("r-\"1\"")));
        // A server's own request ending with its id is no answer of ours.
        let request = br#"{"method":"sampling/createMessage","params":{"messages":[{"x":"#;
        let cut = CutMessage::read(request, br#"zz"}]},"jsonrpc":"2.0","id":3}"#);
        assert_eq!((cut.answer_id(), cut.request_id()), (None, Some(&json!(3))));
        // Not the message's own id: nested, inside a string, or escaped.
        for tail in [
            &br#"zz","inner":{"id":5}}"#[..],
            br#"zz "id":5}"#,
            br#"zz","k":""id":5}"#,
            br#"zz","id":null}"#,
            br#"zz","id":5"#,
            b"",
        ] {
            assert_eq!(
                CutMessage::read(answer, tail).id,
                None,
                "{}",
                String::from_utf8_lossy(tail)
            );
        }
    }

    #[test]
    fn each_text_of_a_body_is_found_once_it_has_all_arrived() {
        let body = b"{\"a\":\"}{[\\\"\"}\n[{\"b\":2},{\"c\":3}]\n{\"d\":";
        let mut splitter = TextSplitter::default();
        // Fed a byte at a time, as a slow server would send it.
        let mut found = Vec::new();
        let mut buffer: Vec<u8> = Vec::new();
        for byte in body {
            buffer.push(*byte);
            while let Some(end) = splitter.complete(&buffer) {
                found.push(String::from_utf8(buffer.drain(..end).collect()).unwrap());
                splitter.reset();
            }
        }
        assert_eq!(found, [r#"{"a":"}{[\""}"#, "\n[{\"b\":2},{\"c\":3}]"]);
        assert_eq!(buffer, b"\n{\"d\":");
        let mut splitter = TextSplitter::default();
        assert_eq!(splitter.complete(b" x {}"), Some(2));
    }

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
    fn raw_messages_keep_their_text_on_one_line_and_their_envelope_reads() {
        let pretty = b"{\n  \"jsonrpc\": \"2.0\",\r\n  \"id\": 7,\n  \"result\": {\"text\": \"a\\nb\", \"n\": 1.50}\n}\n";
        let messages = split_raw(pretty).unwrap();
        assert_eq!(messages.len(), 1);
        let text = messages[0].get();
        assert!(!text.contains('\n') && !text.contains('\r'), "{text}");
        let envelope = Envelope::read(&messages[0]).unwrap();
        assert!(envelope.is_answer());
        assert_eq!(envelope.numeric_id(), Some(7));
        // The result passes through as written: number spelling, escapes.
        let result = envelope.result.unwrap().to_owned();
        assert_eq!(result.get(), r#"{"text": "a\nb", "n": 1.50}"#);
        let answer = answer(json!("x"), Json::Text(result));
        assert_eq!(
            answer.to_string(),
            r#"{"jsonrpc":"2.0","id":"x","result":{"text": "a\nb", "n": 1.50}}"#
        );

        let batch = split_raw(br#" [{"id": 1, "result": null}, {"method": "n"}]"#).unwrap();
        assert_eq!(batch.len(), 2);
        let first = Envelope::read(&batch[0]).unwrap();
        assert!(first.is_answer(), "a null result is still a result");
        assert_eq!(first.result.map(RawValue::get), Some("null"));
        assert!(!Envelope::read(&batch[1]).unwrap().is_answer());
        assert!(split_raw(b"{\"id\": 1,").is_err());
        assert!(
            split_raw(b"{\"s\": \"raw\nbreak\"}").is_err(),
            "control characters in strings are refused"
        );

        let raw = |text: &str| Json::Text(RawValue::from_string(text.to_owned()).unwrap());
        assert_eq!(
            raw(r#"{"resultType": "input_required", "x": [1]}"#)
                .result_type()
                .as_deref(),
            Some("input_required")
        );
        assert_eq!(raw(r#"{"content": []}"#).result_type(), None);
        assert_eq!(raw("[1]").result_type(), None);
    }

    #[test]
    fn a_result_nested_past_any_parser_limit_passes_without_recursion() {
        // Checking JSON text is iterative in serde_json; only building a
        // tree is depth-limited (an error, never a stack overflow).
        let depth = 200_000;
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":3,"result":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let messages = split_raw(text.as_bytes()).unwrap();
        let envelope = Envelope::read(&messages[0]).unwrap();
        assert!(envelope.is_answer());
        let result = envelope.result.unwrap().to_owned();
        assert_eq!(result.get().len(), 2 * depth);
        assert!(parse(&result).is_err());
        assert!(Members::read(&result).is_err());
        assert!(Json::Text(result).result_type().is_none());
    }

    #[test]
    fn members_are_read_and_set_without_touching_their_values() {
        let text = RawValue::from_string(
            r#"{"name": "a", "inputSchema": {"type":  "object"}, "name": "dup", "n": 1.50}"#
                .to_owned(),
        )
        .unwrap();
        let mut members = Members::read(&text).unwrap();
        assert_eq!(members.get("n").map(RawValue::get), Some("1.50"));
        members.set("name", to_raw(&"s__a").unwrap());
        members.set("extra", to_raw(&json!({"k": [1]})).unwrap());
        assert_eq!(
            members.to_raw().unwrap().get(),
            r#"{"name":"s__a","inputSchema":{"type":  "object"},"n":1.50,"extra":{"k":[1]}}"#
        );
        assert!(Members::read(&RawValue::from_string("[1]".to_owned()).unwrap()).is_err());
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
            request_line(3, "ping", None::<&Value>).unwrap(),
            b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n"
        );
    }
}
