//! The 2025 revisions (2024-11-05 … 2025-11-25): an `initialize`
//! handshake fixes the version for the session; requests go as they are;
//! list changes come as notifications on their own; a resource is
//! subscribed to with `resources/subscribe`; the server asks its client
//! for input with requests of its own.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::{Offer, Opened, Opening, Revision, Subscription};
use crate::jsonrpc::Json;
use crate::model::Caller;
use crate::sessions::rpc_error::RpcError;

/// The protocol version we ask for; servers answer with the one they speak.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Versions we know; another answer is accepted with a warning (we pass
/// messages through, so most differences do not matter to us).
pub const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

pub(super) struct Rev2025;

impl Rev2025 {
    /// The `initialize` handshake, then `notifications/initialized`.
    pub(super) fn open<'a>(
        opening: &'a mut dyn Opening,
        offer: &'a Offer<'_>,
    ) -> BoxFuture<'a, Result<Opened, RpcError>> {
        Box::pin(async move {
            let params = json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": offer.capabilities,
                "clientInfo": {"name": "mcp-aggregator", "version": env!("CARGO_PKG_VERSION")},
            });
            let result = opening
                .ask("initialize", Some(params), offer.connect_timeout)
                .await?;
            let version = result
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if !KNOWN_VERSIONS.contains(&version.as_str()) {
                tracing::warn!(server = offer.server, version = %version, "the server speaks a protocol version we do not know; continuing");
            }
            opening.link().set_protocol_version(&version, false);
            opening.tell("notifications/initialized", None).await?;
            opening.link().initialized();
            Ok(Opened::Speaks(Box::new(Rev2025), result))
        })
    }
}

impl Revision for Rev2025 {
    fn envelope(
        &self,
        params: Option<Json>,
        _caller: Option<&Caller>,
    ) -> Result<Option<Json>, RpcError> {
        Ok(params)
    }

    fn mirrors_param_headers(&self) -> bool {
        false
    }

    fn liveness_method(&self) -> &'static str {
        "ping"
    }

    fn change_listen(&self) -> Option<(&'static str, Value)> {
        None
    }

    fn resource_subscription(
        &self,
        uri: &str,
        subscribe: bool,
        _fresh_id: &dyn Fn() -> u64,
    ) -> Subscription {
        let method = if subscribe {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        Subscription::Ask {
            method,
            params: json!({"uri": uri}),
        }
    }

    fn subscribed(&self, _uri: &str, _id: u64) -> Option<u64> {
        None
    }

    fn asks_in_results(&self) -> bool {
        false
    }
}
