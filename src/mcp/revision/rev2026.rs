//! The 2026-07-28 revision at the front door: no `initialize` and no
//! session; every request carries its protocol version and the client's
//! capabilities in `_meta` (checked here, and over HTTP against the
//! headers that mirror them); every result says its `resultType`; lists
//! and reads carry caching hints; `server/discover` describes the
//! aggregate and `subscriptions/listen` streams its changes; a server's
//! questions come back to the client as an input-required result. The
//! shared method table runs each request with a connection scoped to it
//! (its capabilities, its log level).

use serde_json::{Map, Value, json};
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use futures_util::future::BoxFuture;
use serde_json::value::RawValue;

use super::listen_2026::listen;
use super::{Request, Revision};
use crate::mcp::failure::{RpcFailure, tree};
use crate::mcp::{ClientConnection, FrontDoor, meta, relay};

/// The versions of this revision the front door speaks, newest first.
pub const VERSIONS: &[&str] = &["2026-07-28"];

const META: &str = "_meta";
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

use crate::jsonrpc::{
    self, HEADER_MISMATCH, INVALID_PARAMS, Json, METHOD_NOT_FOUND, MISSING_CLIENT_CAPABILITY,
    Members, Outgoing, RESOURCE_NOT_FOUND as RESOURCE_NOT_FOUND_2025, UNSUPPORTED_PROTOCOL_VERSION,
};

/// How long, by default, a client may keep a list (`ttlMs`) when nothing
/// is starting; list changes are announced on `subscriptions/listen`.
pub const LIST_TTL_MS: u64 = 60_000;

/// Methods of the 2025 revisions that this revision removed.
const REMOVED: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Whether a request speaks this revision: its `_meta` names a protocol
/// version.
pub(super) fn names_version(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get(META))
        .and_then(|m| m.get(PROTOCOL_VERSION))
        .is_some()
}

/// What a request says about itself.
struct RequestMeta {
    pub version: String,
    pub capabilities: Value,
    /// The least severe log level the client wants for this request; none
    /// means no log messages at all.
    pub log_level: Option<String>,
    /// Its `clientInfo`, if it sent one.
    pub client_info: Option<Value>,
}

/// Reads and checks a request's `_meta` (missing or malformed required
/// fields are -32602; an unknown version -32022).
fn request_meta(params: Option<&Value>) -> Result<RequestMeta, RpcFailure> {
    let meta = params.and_then(|p| p.get(META)).ok_or_else(|| {
        failure(
            INVALID_PARAMS,
            format!(
                "the request has no `_meta` with `{PROTOCOL_VERSION}` and `{CLIENT_CAPABILITIES}` (a 2025 client sends initialize first)"
            ),
        )
    })?;
    let version = meta
        .get(PROTOCOL_VERSION)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            failure(
                INVALID_PARAMS,
                format!("`_meta` needs a string `{PROTOCOL_VERSION}`"),
            )
        })?
        .to_owned();
    let capabilities = meta
        .get(CLIENT_CAPABILITIES)
        .filter(|c| c.is_object())
        .cloned()
        .ok_or_else(|| {
            failure(
                INVALID_PARAMS,
                format!("`_meta` needs an object `{CLIENT_CAPABILITIES}`"),
            )
        })?;
    if !VERSIONS.contains(&version.as_str()) {
        let mut supported: Vec<&str> = VERSIONS.to_vec();
        supported.extend_from_slice(super::rev2025::SUPPORTED_VERSIONS);
        return Err(RpcFailure::with_data(
            UNSUPPORTED_PROTOCOL_VERSION,
            format!("Unsupported protocol version: {version}"),
            json!({"supported": supported, "requested": version}),
        ));
    }
    let log_level = match meta.get(LOG_LEVEL) {
        None | Some(Value::Null) => None,
        Some(Value::String(level)) if crate::mcp::client::log_level_index(level).is_some() => {
            Some(level.clone())
        }
        Some(other) => {
            return Err(failure(
                INVALID_PARAMS,
                format!("`{LOG_LEVEL}` is not a log level: {other}"),
            ));
        }
    };
    Ok(RequestMeta {
        version,
        capabilities,
        log_level,
        client_info: meta.get(CLIENT_INFO).cloned(),
    })
}

fn failure(code: i64, message: String) -> RpcFailure {
    RpcFailure::new(code, message)
}

pub(super) struct Rev2026;

impl Revision for Rev2026 {
    fn serve<'a>(
        &'a self,
        server: &'a FrontDoor,
        client: &'a Arc<ClientConnection>,
        request: Request<'a>,
    ) -> BoxFuture<'a, Outgoing> {
        Box::pin(async move {
            let Request {
                id,
                method,
                params,
                arguments,
            } = request;
            match server
                .result_2026(client, &id, method, params, arguments)
                .await
            {
                Ok(result) => jsonrpc::answer(id, result),
                // This revision has no resource-not-found code of its own.
                Err(mut failure) => {
                    if failure.code == RESOURCE_NOT_FOUND_2025 {
                        failure.code = INVALID_PARAMS;
                    }
                    failure.answer(id)
                }
            }
        })
    }

    /// Malformed requests and unsupported versions are 400, an unknown
    /// method 404.
    fn http_status(&self, answer: &Outgoing) -> StatusCode {
        match answer.error_code() {
            Some(METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
            Some(
                INVALID_PARAMS
                | HEADER_MISMATCH
                | MISSING_CLIENT_CAPABILITY
                | UNSUPPORTED_PROTOCOL_VERSION
                | jsonrpc::INVALID_REQUEST
                | jsonrpc::PARSE_ERROR,
            ) => StatusCode::BAD_REQUEST,
            _ => StatusCode::OK,
        }
    }

    /// Progress asked for, or log messages at some level.
    fn may_notify(&self, method: &str, params: Option<&Value>) -> bool {
        if method == "subscriptions/listen" {
            return true;
        }
        let meta = params.and_then(|p| p.get(META));
        meta.and_then(|m| m.get("progressToken")).is_some()
            || meta
                .and_then(|m| m.get(LOG_LEVEL))
                .is_some_and(|level| !level.is_null())
    }

    /// The headers a request mirrors from its body must agree with it (a
    /// proxy routing on the header must see what we execute), and so must
    /// a call's `Mcp-Param-*` headers with its arguments.
    fn check_headers(
        &self,
        server: &FrontDoor,
        headers: &HeaderMap,
        method: &str,
        params: Option<&Value>,
        arguments: Option<&RawValue>,
        profile: Option<&str>,
    ) -> Result<(), String> {
        check_headers(headers, method, params)?;
        if method != "tools/call" || !names_version(params) {
            return Ok(());
        }
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            return Ok(());
        };
        let router = server.router();
        // A tool outside the client's view is not known here either: the
        // call answers that, not its headers.
        let Ok(route) = router.resolve(&router.table(), name, None) else {
            return Ok(());
        };
        if !router.admits_route(profile, &route) {
            return Ok(());
        }
        if route.header_params.is_empty() {
            return Ok(());
        }
        // Only now are the arguments read as a tree.
        let arguments = call_arguments(params, arguments);
        check_param_headers(headers, &route, arguments.as_ref())
    }
}

/// A call's arguments as a tree: split off as the client wrote them, or
/// still in its params.
fn call_arguments(params: Option<&Value>, written: Option<&RawValue>) -> Option<Value> {
    match written {
        Some(text) => jsonrpc::parse(text).ok(),
        None => params.and_then(|p| p.get("arguments")).cloned(),
    }
}

impl FrontDoor {
    async fn result_2026(
        &self,
        transport: &Arc<ClientConnection>,
        id: &Value,
        method: &str,
        params: Option<Value>,
        arguments: Option<Box<RawValue>>,
    ) -> Result<Json, RpcFailure> {
        let meta = request_meta(params.as_ref())?;
        if method == "subscriptions/listen" {
            let result = listen(self, transport, id, params.as_ref()).await;
            return Ok(self.complete(result.into(), false));
        }
        if REMOVED.contains(&method) {
            return Err(failure(
                METHOD_NOT_FOUND,
                format!(
                    "Method not found: {method} (not part of protocol {})",
                    meta.version
                ),
            ));
        }
        let cacheable = matches!(
            method,
            "tools/list"
                | "resources/list"
                | "resources/templates/list"
                | "prompts/list"
                | "resources/read"
        );
        let result = if method == "server/discover" {
            self.discover().into()
        } else {
            self.run_relayed(transport, meta, method, params, arguments)
                .await?
        };
        Ok(self.complete(result, cacheable || method == "server/discover"))
    }

    /// Runs a request through the method table. If a server asks the client
    /// something meanwhile, the request is parked and the client gets the
    /// questions (an input-required result); its retry with the answers and
    /// the `requestState` resumes it.
    async fn run_relayed(
        &self,
        transport: &Arc<ClientConnection>,
        meta: RequestMeta,
        method: &str,
        params: Option<Value>,
        arguments: Option<Box<RawValue>>,
    ) -> Result<Json, RpcFailure> {
        let target = relay_target(method, params.as_ref(), arguments.as_deref());
        let mut params = params;
        let owner = relay::Owner {
            token: transport.token.get().cloned(),
            profile: transport.profile().map(std::sync::Arc::from),
        };
        // A request parked here goes on; a server's own state is opened
        // where the request takes its input round (`take_input_round`).
        if let Some(state) = params
            .as_ref()
            .and_then(|p| p.get("requestState"))
            .and_then(Value::as_str)
            && let Some(relay::State::Parked(_)) = self.relay.open_state(state)
        {
            let responses = params.as_ref().and_then(|p| p.get("inputResponses"));
            return self
                .relay
                .resume(&target, &owner, state, responses)
                .await
                .map(Json::Tree);
        }
        let Some(me) = self.me.upgrade() else {
            return Err(RpcFailure::new(
                jsonrpc::INTERNAL_ERROR,
                "the aggregator is shutting down",
            ));
        };
        strip_protocol_meta(&mut params);
        let (inputs, mut steps) = tokio::sync::mpsc::channel(16);
        let connection = transport.for_one_request(
            meta.capabilities,
            meta.log_level.as_deref(),
            Some(inputs.clone()),
        );
        connection.set_client_info(meta.client_info.as_ref());
        let method = method.to_owned();
        let mut call =
            Box::pin(async move { me.dispatch(&connection, &method, params, arguments).await });
        let first = tokio::select! {
            outcome = &mut call => return outcome,
            step = steps.recv() => step,
        };
        // The server is waiting for the client: the request goes on in the
        // background while the client gathers the answers.
        let running = tokio::spawn(async move {
            let outcome = call.await.and_then(tree);
            let _ = inputs.send(relay::Step::Done(outcome)).await;
        });
        self.relay
            .next(
                target,
                owner,
                first,
                steps,
                relay::AbortOnDrop(Some(running.abort_handle())),
            )
            .await
            .map(Json::Tree)
    }

    /// `server/discover`: the versions and capabilities of the aggregate.
    fn discover(&self) -> Value {
        let mut supported: Vec<&str> = VERSIONS.to_vec();
        supported.extend_from_slice(super::rev2025::SUPPORTED_VERSIONS);
        json!({
            "supportedVersions": supported,
            "capabilities": crate::mcp::server_capabilities(),
            "instructions": crate::mcp::INSTRUCTIONS,
        })
    }

    /// Gives a result this revision's envelope: `resultType`, the server's
    /// identity, and for lists and reads how long a client may cache them
    /// (0 while servers are still starting: the lists are about to grow).
    /// Only the top level is touched: a server's result passes through as
    /// it wrote it below that.
    fn complete(&self, result: Json, cacheable: bool) -> Json {
        let raw = match result {
            Json::Text(raw) => raw,
            Json::Tree(tree) => match jsonrpc::to_raw(&tree) {
                Ok(raw) => raw,
                Err(_) => return Json::Tree(tree),
            },
        };
        let Ok(mut members) = Members::read(&raw) else {
            // Not an object: nothing to add to.
            return Json::Text(raw);
        };
        let text = |value: &Value| jsonrpc::to_raw(value).ok();
        let complete = match members.get("resultType") {
            Some(kind) => serde_json::from_str::<String>(kind.get()).is_ok_and(|k| k == "complete"),
            None => {
                if let Some(kind) = text(&json!("complete")) {
                    members.set("resultType", kind);
                }
                true
            }
        };
        if cacheable && complete {
            let ttl = if self.router().is_starting() {
                0
            } else {
                LIST_TTL_MS
            };
            // The aggregate is the same for every client of this daemon,
            // but a front door behind a token must not let a shared cache
            // hand it to another authorization context.
            for (key, value) in [("ttlMs", json!(ttl)), ("cacheScope", json!("private"))] {
                if let Some(value) = text(&value) {
                    members.set(key, value);
                }
            }
        }
        let mut meta = match members.get(META).map(jsonrpc::parse) {
            Some(Ok(Value::Object(meta))) => meta,
            _ => Map::new(),
        };
        meta.insert(SERVER_INFO.to_owned(), crate::mcp::server_info());
        meta.insert(
            crate::model::instance::INSTANCE_META.to_owned(),
            json!(crate::model::instance::instance_id()),
        );
        if let Some(meta) = text(&Value::Object(meta)) {
            members.set(META, meta);
        }
        match members.to_raw() {
            Ok(completed) => Json::Text(completed),
            Err(_) => Json::Text(raw),
        }
    }
}

/// The Streamable HTTP headers a request mirrors from its body
/// (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) must be there and
/// agree with it: a proxy routing on the header must see what we execute.
/// A request whose `_meta` names no version is left to the `_meta` check.
fn check_headers(
    headers: &axum::http::HeaderMap,
    method: &str,
    params: Option<&Value>,
) -> Result<(), String> {
    let Some(version) = params
        .and_then(|p| p.get(META))
        .and_then(|m| m.get(PROTOCOL_VERSION))
        .and_then(Value::as_str)
    else {
        return Ok(());
    };
    let header = |name: &str| -> Result<Option<String>, String> {
        // Two of one: a proxy reading the other one (or both, joined)
        // would route another request than the one run here.
        if headers.get_all(name).iter().nth(1).is_some() {
            return Err(format!("the {name} header is sent more than once"));
        }
        match headers.get(name) {
            None => Ok(None),
            Some(value) => value
                .to_str()
                .map(|v| Some(v.trim().to_owned()))
                .map_err(|_| format!("the {name} header holds characters a header may not")),
        }
    };
    match header("mcp-protocol-version")? {
        None => return Err("the MCP-Protocol-Version header is missing".to_owned()),
        Some(value) if value != version => {
            return Err(format!(
                "Header mismatch: MCP-Protocol-Version header value '{value}' does not match body value '{version}'"
            ));
        }
        Some(_) => {}
    }
    match header("mcp-method")? {
        None => return Err("the Mcp-Method header is missing".to_owned()),
        Some(value) if value != method => {
            return Err(format!(
                "Header mismatch: Mcp-Method header value '{value}' does not match body value '{method}'"
            ));
        }
        Some(_) => {}
    }
    let named = match method {
        "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
        "resources/read" => params.and_then(|p| p.get("uri")),
        _ => return Ok(()),
    };
    let body = named.and_then(Value::as_str).unwrap_or_default();
    match header("mcp-name")? {
        None => Err("the Mcp-Name header is missing".to_owned()),
        Some(value) => {
            let decoded = crate::model::param_headers::decode(&value)?;
            if decoded == body {
                Ok(())
            } else {
                Err(format!(
                    "Header mismatch: Mcp-Name header value '{decoded}' does not match body value '{body}'"
                ))
            }
        }
    }
}

/// What a retry must name to resume a parked request: the method and its
/// target (tool, prompt or resource).
fn relay_target(method: &str, params: Option<&Value>, arguments: Option<&RawValue>) -> String {
    let name = params
        .and_then(|p| p.get("name").or_else(|| p.get("uri")))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let arguments = (method == "tools/call" && name == meta::CALL_TOOL)
        .then(|| call_arguments(params, arguments))
        .flatten();
    let inner = arguments
        .as_ref()
        .and_then(|a| a.get("name"))
        .and_then(Value::as_str);
    relay::target(method, name, inner)
}

/// Removes what a request says about its own protocol from its
/// `_meta`: the aggregator speaks to each server in that server's era, and
/// a server shown the client's 2026-07-28 metadata on a 2025 session would
/// take the request for a 2026-07-28 one. Everything else (`progressToken`,
/// trace context, vendor keys) passes through.
fn strip_protocol_meta(params: &mut Option<Value>) {
    let Some(Value::Object(params)) = params else {
        return;
    };
    let empty = match params.get_mut(META) {
        Some(Value::Object(meta)) => {
            for key in [
                PROTOCOL_VERSION,
                CLIENT_CAPABILITIES,
                CLIENT_INFO,
                LOG_LEVEL,
            ] {
                meta.remove(key);
            }
            meta.is_empty()
        }
        _ => false,
    };
    if empty {
        params.remove(META);
    }
}

/// The `Mcp-Param-*` headers of a 2026-07-28 `tools/call` over HTTP: every
/// argument the tool's schema mirrors into a header (`x-mcp-header`) and
/// that the call carries must come with that header, holding the same value
/// (base64 sentinel decoded, numbers compared as numbers).
fn check_param_headers(
    headers: &axum::http::HeaderMap,
    route: &crate::router::Route,
    arguments: Option<&Value>,
) -> Result<(), String> {
    for param in route.header_params.iter() {
        let value = arguments
            .and_then(|arguments| param.path.iter().try_fold(arguments, |at, key| at.get(key)));
        let name = format!("mcp-param-{}", param.header);
        let Some(value) = value.filter(|v| !v.is_null()) else {
            continue;
        };
        // Two values: a proxy reading the other one would see another
        // request than the one checked here.
        if headers.get_all(name.as_str()).iter().nth(1).is_some() {
            return Err(format!(
                "Header mismatch: the Mcp-Param-{} header is sent more than once",
                param.header
            ));
        }
        let header = match headers.get(name.as_str()) {
            None => return Err(format!("the Mcp-Param-{} header is missing", param.header)),
            Some(header) => header.to_str().map(str::trim).map_err(|_| {
                format!(
                    "the Mcp-Param-{} header holds characters a header may not",
                    param.header
                )
            })?,
        };
        let decoded = crate::model::param_headers::decode(header)?;
        let matches = match value {
            Value::String(text) => *text == decoded,
            Value::Bool(flag) => decoded == if *flag { "true" } else { "false" },
            // An integer exactly (as floats, 2^53 + 1 and 2^53 are one).
            Value::Number(number) => match number
                .as_i64()
                .map(i128::from)
                .or_else(|| number.as_u64().map(i128::from))
            {
                Some(integer) => decoded.parse::<i128>().is_ok_and(|d| d == integer),
                None => decoded
                    .parse::<f64>()
                    .ok()
                    .zip(number.as_f64())
                    .is_some_and(|(a, b)| a == b),
            },
            // A header holds one scalar: an object or a list in its place
            // is a call the header does not describe.
            _ => {
                return Err(format!(
                    "Header mismatch: the argument mirrored into Mcp-Param-{} is not a string, number or boolean",
                    param.header
                ));
            }
        };
        if !matches {
            return Err(format!(
                "Header mismatch: Mcp-Param-{} header value '{decoded}' does not match the argument",
                param.header
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};
    use serde_json::json;

    fn route() -> crate::router::Route {
        crate::router::Route {
            server_id: crate::model::ServerId::nil(),
            server_name: "h".into(),
            original_name: "geo".into(),
            tool_id: "h.geo".into(),
            wire_name: Some("h__geo".into()),
            header_params: vec![
                crate::model::param_headers::HeaderParam {
                    path: vec!["region".into()],
                    header: "Region".into(),
                },
                crate::model::param_headers::HeaderParam {
                    path: vec!["n".into()],
                    header: "N".into(),
                },
            ]
            .into(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_param_header_must_say_exactly_what_the_argument_says_once() {
        let route = route();
        let check = |pairs: &[(&'static str, &str)], arguments: Value| {
            check_param_headers(&headers(pairs), &route, Some(&arguments))
        };
        let both = [("mcp-param-region", "eu"), ("mcp-param-n", "5")];
        assert!(check(&both, json!({"region": "eu", "n": 5})).is_ok());
        assert!(check(&both, json!({"region": "eu", "n": 5.0})).is_ok());
        // 2^53 + 1 is not 2^53, though as floats they are one.
        let big = [
            ("mcp-param-region", "eu"),
            ("mcp-param-n", "9007199254740992"),
        ];
        assert!(check(&big, json!({"region": "eu", "n": 9007199254740993u64})).is_err());
        assert!(check(&big, json!({"region": "eu", "n": 9007199254740992u64})).is_ok());
        // An object in place of the scalar the header mirrors.
        assert!(check(&both, json!({"region": {"x": 1}, "n": 5})).is_err());
        // The header twice, with another value the second time.
        let twice = [
            ("mcp-param-region", "eu"),
            ("mcp-param-region", "us"),
            ("mcp-param-n", "5"),
        ];
        let refused = check(&twice, json!({"region": "eu", "n": 5})).unwrap_err();
        assert!(refused.contains("more than once"), "{refused}");
    }

    #[test]
    fn a_mirrored_header_sent_twice_is_refused_whichever_comes_first() {
        let params = json!({"name": "h__geo", "_meta": {PROTOCOL_VERSION: "2026-07-28"}});
        let check = |pairs: &[(&'static str, &str)]| {
            check_headers(&headers(pairs), "tools/call", Some(&params))
        };
        let one = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "h__geo"),
        ];
        assert!(check(&one).is_ok());
        for (name, other) in [
            ("mcp-name", "other__tool"),
            ("mcp-method", "tools/list"),
            ("mcp-protocol-version", "2025-06-18"),
        ] {
            let mut twice = one.to_vec();
            twice.push((name, other));
            let refused = check(&twice).unwrap_err();
            assert!(refused.contains("more than once"), "{name}: {refused}");
        }
    }
}
