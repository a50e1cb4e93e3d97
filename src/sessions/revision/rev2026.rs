//! The 2026-07-28 revision: no handshake (`server/discover` says what the
//! server is, and a server that does not answer so is a 2025 one — the
//! revision's compatibility section); every request carries the protocol
//! and the calling client's capabilities and log level in its `_meta`;
//! list changes come on a `subscriptions/listen` the session keeps open,
//! a resource subscription is a listen of its own; the server asks its
//! client for input inside an input-required result.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::rev2025::KNOWN_VERSIONS;
use super::{Offer, Opened, Opening, Revision, Subscription};
use crate::jsonrpc::{self, Json};
use crate::model::Caller;
use crate::sessions::rpc_error::RpcError;
use crate::sessions::transport::LinkError;

/// The version this revision names on the wire.
pub const VERSION: &str = "2026-07-28";
/// The id of the `subscriptions/listen` request that brings list changes,
/// never answered while the session lives (so never waited for). The
/// largest integer a JavaScript server can read exactly.
pub const LISTEN_ID: u64 = (1 << 53) - 1;

const PROTOCOL_META: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";

pub(super) struct Rev2026 {
    /// What every request's `_meta` carries (the protocol version, our
    /// capabilities and name) unless the request says otherwise.
    meta: serde_json::Map<String, Value>,
    /// The `subscriptions/listen` request open for each subscribed URI.
    resource_listens: Mutex<HashMap<String, u64>>,
}

impl Rev2026 {
    fn new(capabilities: &Value) -> Rev2026 {
        let mut meta = serde_json::Map::new();
        meta.insert(PROTOCOL_META.to_owned(), json!(VERSION));
        meta.insert(CAPABILITIES_META.to_owned(), capabilities.clone());
        meta.insert(
            CLIENT_INFO_META.to_owned(),
            json!({"name": "mcp-aggregator", "version": env!("CARGO_PKG_VERSION")}),
        );
        Rev2026 {
            meta,
            resource_listens: Mutex::new(HashMap::new()),
        }
    }

    /// Probes with `server/discover`: a server that answers listing this
    /// revision speaks it; one that does not is an earlier one.
    pub(super) fn open<'a>(
        opening: &'a mut dyn Opening,
        offer: &'a Offer<'_>,
    ) -> BoxFuture<'a, Result<Opened, RpcError>> {
        Box::pin(async move {
            let revision = Rev2026::new(&offer.capabilities);
            opening.link().set_protocol_version(VERSION, true);
            let probe_timeout = (offer.connect_timeout / 3).max(Duration::from_millis(100));
            let params = revision.with_meta(json!({}), None);
            let mut asked = 0;
            let probe = loop {
                asked += 1;
                let probe = opening
                    .ask("server/discover", Some(params.clone()), probe_timeout)
                    .await;
                // A server that refuses the version it then names as
                // supported is asked once more, as the negotiation says.
                if asked == 1 && probe.as_ref().is_err_and(names_our_version) {
                    continue;
                }
                break probe;
            };
            let server = offer.server;
            match probe {
                Ok(discovered) if lists_ours(&discovered) => {
                    let described = json!({
                        "protocolVersion": VERSION,
                        "capabilities": discovered.get("capabilities").cloned().unwrap_or(json!({})),
                        "serverInfo": discovered
                            .get("_meta")
                            .and_then(|m| m.get("io.modelcontextprotocol/serverInfo"))
                            .cloned()
                            .unwrap_or(Value::Null),
                        "instructions": discovered.get("instructions").cloned().unwrap_or(Value::Null),
                        "_meta": discovered.get("_meta").cloned().unwrap_or(Value::Null),
                    });
                    return Ok(Opened::Speaks(Box::new(revision), described));
                }
                Ok(_) => {
                    tracing::debug!(server, "server/discover lists no 2026-07-28: a 2025 server")
                }
                Err(err) if says_earlier(&err) => {
                    tracing::debug!(server, "server/discover refused ({err}): a 2025 server")
                }
                Err(err) => return Err(err),
            }
            opening.link().forget_protocol_version();
            Ok(Opened::Earlier)
        })
    }

    /// `params` with this revision's `_meta` (the caller's capabilities
    /// and log level first, then ours where the request says nothing).
    fn with_meta(&self, mut params: Value, caller: Option<&Caller>) -> Value {
        if !params.is_object() {
            params = json!({});
        }
        if !params.get("_meta").is_some_and(Value::is_object) {
            params["_meta"] = json!({});
        }
        if let Some(Value::Object(target)) = params.get_mut("_meta") {
            if let Some(caller) = caller {
                if let Some(capabilities) = &caller.capabilities {
                    target.insert(CAPABILITIES_META.to_owned(), Value::clone(capabilities));
                }
                if let Some(level) = caller.log_level {
                    target.insert(LOG_LEVEL_META.to_owned(), json!(level));
                }
            }
            for (key, value) in &self.meta {
                target.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        params
    }
}

impl Revision for Rev2026 {
    fn envelope(
        &self,
        params: Option<Json>,
        caller: Option<&Caller>,
    ) -> Result<Option<Json>, RpcError> {
        let tree = match params {
            Some(params) => params
                .into_tree()
                .map_err(|err| RpcError::Unsendable(err.to_string()))?,
            None => json!({}),
        };
        Ok(Some(Json::Tree(self.with_meta(tree, caller))))
    }

    fn mirrors_param_headers(&self) -> bool {
        true
    }

    fn liveness_method(&self) -> &'static str {
        "server/discover"
    }

    fn change_listen(&self) -> Option<(&'static str, Value)> {
        let filter = json!({
            "toolsListChanged": true,
            "promptsListChanged": true,
            "resourcesListChanged": true
        });
        Some((
            "subscriptions/listen",
            self.with_meta(json!({ "notifications": filter }), None),
        ))
    }

    fn resource_subscription(
        &self,
        uri: &str,
        subscribe: bool,
        fresh_id: &dyn Fn() -> u64,
    ) -> Subscription {
        if subscribe {
            let params = json!({"notifications": {"resourceSubscriptions": [uri]}});
            return Subscription::Listen {
                id: fresh_id(),
                method: "subscriptions/listen",
                params: self.with_meta(params, None),
            };
        }
        let id = self
            .resource_listens
            .lock()
            .ok()
            .and_then(|mut listens| listens.remove(uri));
        Subscription::Unlisten { id }
    }

    fn subscribed(&self, uri: &str, id: u64) -> Option<u64> {
        self.resource_listens
            .lock()
            .ok()
            .and_then(|mut listens| listens.insert(uri.to_owned(), id))
    }

    fn asks_in_results(&self) -> bool {
        true
    }
}

/// Whether a `server/discover` result names this revision.
fn lists_ours(discovered: &Value) -> bool {
    discovered
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|versions| versions.iter().any(|v| v == VERSION))
}

/// Whether an unsupported-version error lists this revision.
fn names_our_version(err: &RpcError) -> bool {
    matches!(err, RpcError::Server {
        code: jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
        data: Some(data),
        ..
    } if data
        .get("supported")
        .and_then(Value::as_array)
        .is_some_and(|versions| versions.iter().any(|v| v == VERSION)))
}

/// Whether a failed `server/discover` probe shows a 2025 server: any
/// JSON-RPC error or HTTP 4xx refusal (a 2025 server does not know the
/// method, or wants `initialize` first), a malformed answer, or silence —
/// except an unsupported-version error naming only revisions newer than
/// the 2025 ones, which is a 2026 server we cannot speak to.
fn says_earlier(err: &RpcError) -> bool {
    match err {
        RpcError::Server {
            code: jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
            data,
            ..
        } => data
            .as_ref()
            .and_then(|d| d.get("supported"))
            .and_then(Value::as_array)
            .is_none_or(|versions| {
                versions
                    .iter()
                    .any(|v| v.as_str().is_some_and(|v| KNOWN_VERSIONS.contains(&v)))
            }),
        RpcError::Server { .. } | RpcError::Timeout(_) | RpcError::Malformed(_) => true,
        RpcError::Link(LinkError::Status { status, .. }) => (400..500).contains(status),
        RpcError::Closed(_) | RpcError::Link(_) | RpcError::Unsendable(_) => false,
    }
}
