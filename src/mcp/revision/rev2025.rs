//! The 2025 revisions (2024-11-05 … 2025-11-25) at the front door: a
//! client opens with `initialize` (its version and capabilities kept on its
//! connection), may `ping`, sets its log level with `logging/setLevel`,
//! subscribes to resources with `resources/subscribe`; every other method
//! is the shared method table's, answered as it is.

use axum::http::{HeaderMap, StatusCode};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;

use super::{Request, Revision};
use crate::jsonrpc::{self, Json, Outgoing};
use crate::mcp::client::{LOG_LEVELS, log_level_index};
use crate::mcp::failure::RpcFailure;
use crate::mcp::{ClientConnection, FrontDoor};

/// Protocol versions of this revision we speak, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// What we answer when a client asks for a version we do not know: the
/// latest we speak, as the specification asks.
pub const DEFAULT_VERSION: &str = "2025-11-25";

pub(super) struct Rev2025;

impl Revision for Rev2025 {
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
            let result = match method {
                "initialize" => Ok(initialize(server, client, params.as_ref()).into()),
                "ping" => Ok(json!({}).into()),
                "logging/setLevel" => set_log_level(client, params.as_ref()).map(Json::Tree),
                "resources/subscribe" | "resources/unsubscribe" => {
                    subscription(server, client, method, params.as_ref())
                        .await
                        .map(Json::Tree)
                }
                _ => server.dispatch(client, method, params, arguments).await,
            };
            match result {
                Ok(result) => jsonrpc::answer(id, result),
                Err(failure) => failure.answer(id),
            }
        })
    }

    /// Errors are answers like any other (the session's transport says
    /// nothing more of them).
    fn http_status(&self, _answer: &Outgoing) -> StatusCode {
        StatusCode::OK
    }

    /// Progress asked for (log messages and a server's requests depend on
    /// the session, which the transport knows).
    fn may_notify(&self, _method: &str, params: Option<&Value>) -> bool {
        params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .is_some()
    }

    /// These revisions mirror nothing of the body into headers.
    fn check_headers(
        &self,
        _server: &FrontDoor,
        _headers: &HeaderMap,
        _method: &str,
        _params: Option<&Value>,
        _arguments: Option<&serde_json::value::RawValue>,
        _profile: Option<&str>,
    ) -> Result<(), String> {
        Ok(())
    }
}

/// `initialize`: the version both speak (ours newest when the client's is
/// unknown), the client's capabilities kept on its connection.
fn initialize(server: &FrontDoor, client: &Arc<ClientConnection>, params: Option<&Value>) -> Value {
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_VERSION);
    let version = if SUPPORTED_VERSIONS.contains(&requested) {
        requested
    } else {
        DEFAULT_VERSION
    };
    let _ = client.protocol_version.set(version.to_owned());
    let capabilities = params
        .and_then(|p| p.get("capabilities"))
        .cloned()
        .unwrap_or(Value::Null);
    let _ = client.capabilities.set(Arc::new(capabilities));
    client.set_client_info(params.and_then(|p| p.get("clientInfo")));
    server.remember_client(client);
    json!({
        "protocolVersion": version,
        "capabilities": crate::mcp::server_capabilities(),
        "serverInfo": crate::mcp::server_info(),
        "instructions": crate::mcp::INSTRUCTIONS,
        "_meta": {crate::model::instance::INSTANCE_META: crate::model::instance::instance_id()}
    })
}

/// `logging/setLevel`: the least severe log message the client hears.
fn set_log_level(client: &ClientConnection, params: Option<&Value>) -> Result<Value, RpcFailure> {
    let level = params
        .and_then(|p| p.get("level"))
        .and_then(Value::as_str)
        .ok_or_else(|| RpcFailure::invalid("logging/setLevel needs a string `level`"))?;
    let index = log_level_index(level).ok_or_else(|| {
        RpcFailure::invalid(format!(
            "unknown log level `{level}`; one of {}",
            LOG_LEVELS.join(", ")
        ))
    })?;
    client
        .log_level
        .store(index, std::sync::atomic::Ordering::Relaxed);
    Ok(json!({}))
}

/// `resources/subscribe` and `resources/unsubscribe`. The server is asked
/// once: on the first subscriber, and when the last one leaves.
async fn subscription(
    server: &FrontDoor,
    client: &Arc<ClientConnection>,
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcFailure> {
    let uri = params
        .and_then(|p| p.get("uri"))
        .and_then(Value::as_str)
        .ok_or_else(|| RpcFailure::invalid("needs a string `uri`"))?
        .to_owned();
    let subscribe = method == "resources/subscribe";
    let router = server.router();
    // A subscription outside the view is refused; one taken before the
    // view narrowed can still be ended.
    let view = if subscribe { client.profile() } else { None };
    let (route, _) = router.route_resource(&uri, view).await?;
    let ask_server = if subscribe {
        server.subscriptions.add(client, &route, &uri)
    } else {
        server.subscriptions.remove(client, &route, &uri)
    };
    if ask_server && let Err(err) = router.resource_subscription(&route, subscribe).await {
        if subscribe {
            server.subscriptions.remove(client, &route, &uri);
        }
        return Err(err.into());
    }
    Ok(json!({}))
}
