//! The protocol revisions a session speaks to its server, behind one
//! interface (`Revision`): how a session opens, what every request
//! carries, how the server is asked whether it is alive, how list changes
//! and resource updates are listened for, and whether the server may ask
//! its client for input inside a result. One file per revision; the
//! session, the supervisor and everything above them ask the interface,
//! never which revision it is. A new revision is one new file here and one
//! step in `negotiate`.

mod rev2025;
mod rev2026;

use futures_util::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;

use super::link::Link;
use super::rpc_error::RpcError;
use crate::jsonrpc::Json;
use crate::model::Caller;

pub use rev2026::LISTEN_ID;

/// The revision a connection attempt starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RevisionId {
    /// An `initialize` handshake (2024-11-05 … 2025-11-25).
    #[default]
    Rev2025,
    /// No handshake: `server/discover`, then every request carries its
    /// protocol in `_meta` (2026-07-28); a server that does not answer so
    /// is asked to `initialize` on the same link.
    Rev2026,
}

impl RevisionId {
    /// The revision of a protocol version a server answered with
    /// (versions are dates, so they compare as strings).
    pub fn of_version(version: &str) -> RevisionId {
        if version >= rev2026::VERSION {
            RevisionId::Rev2026
        } else {
            RevisionId::Rev2025
        }
    }

    /// What opening a session from this revision asks, for messages.
    pub fn opening(self) -> &'static str {
        match self {
            RevisionId::Rev2025 => "initialize",
            RevisionId::Rev2026 => "server/discover, then initialize",
        }
    }
}

/// What a session does on its link while it opens (it alone owns the link
/// then): ask and wait, tell, set what the link sends with each message.
pub(super) trait Opening: Send {
    fn ask<'a>(
        &'a mut self,
        method: &'a str,
        params: Option<Value>,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Value, RpcError>>;
    fn tell<'a>(
        &'a mut self,
        method: &'a str,
        params: Option<Value>,
    ) -> BoxFuture<'a, Result<(), RpcError>>;
    fn link(&self) -> &Link;
}

/// What the aggregator offers a server when a session opens.
pub(super) struct Offer<'a> {
    pub(super) server: &'a str,
    /// Our capabilities as a client.
    pub(super) capabilities: Value,
    pub(super) connect_timeout: Duration,
}

/// What came of one revision's way of opening.
pub(super) enum Opened {
    /// The server speaks it; what it said of itself, shaped as an
    /// `initialize` result (so the rest asks one thing whatever the revision).
    Speaks(Box<dyn Revision>, Value),
    /// The server showed it speaks an earlier revision: open that one on
    /// the same link.
    Earlier,
}

/// Opens a session in the newest revision both sides speak, starting from
/// `first`.
pub(super) async fn negotiate(
    opening: &mut dyn Opening,
    first: RevisionId,
    offer: &Offer<'_>,
) -> Result<(Box<dyn Revision>, Value), RpcError> {
    if first == RevisionId::Rev2026
        && let Opened::Speaks(revision, described) = rev2026::Rev2026::open(opening, offer).await?
    {
        return Ok((revision, described));
    }
    match rev2025::Rev2025::open(opening, offer).await? {
        Opened::Speaks(revision, described) => Ok((revision, described)),
        Opened::Earlier => Err(RpcError::Malformed(
            "the server speaks no revision we know".to_owned(),
        )),
    }
}

/// The revision a session before its handshake speaks: requests go as they
/// are (the handshake's own requests carry what their revision needs).
pub(super) fn unopened() -> Box<dyn Revision> {
    Box::new(rev2025::Rev2025)
}

/// How a resource subscription is made in a revision.
pub(super) enum Subscription {
    /// Ask the server with this request.
    Ask { method: &'static str, params: Value },
    /// Open a request the server answers only when the subscription ends.
    Listen {
        id: u64,
        method: &'static str,
        params: Value,
    },
    /// End the subscription opened as this request (if there was one).
    Unlisten { id: Option<u64> },
}

/// One protocol revision, as a session speaks it once it is open.
pub(super) trait Revision: Send + Sync {
    /// The params a request goes with: what this revision carries in every
    /// request added (with the calling client's capabilities and log level
    /// when it is made for a client). Text stays text where nothing is added.
    fn envelope(
        &self,
        params: Option<Json>,
        caller: Option<&Caller>,
    ) -> Result<Option<Json>, RpcError>;

    /// Whether a call's arguments mirrored into `Mcp-Param-*` headers go
    /// with it.
    fn mirrors_param_headers(&self) -> bool;

    /// The request that asks the server whether it is alive.
    fn liveness_method(&self) -> &'static str;

    /// The request (method and params) that keeps list changes coming,
    /// when they do not come on their own.
    fn change_listen(&self) -> Option<(&'static str, Value)>;

    /// How to subscribe to (or unsubscribe from) a resource's updates;
    /// `fresh_id` gives an id for a request that stays open.
    fn resource_subscription(
        &self,
        uri: &str,
        subscribe: bool,
        fresh_id: &dyn Fn() -> u64,
    ) -> Subscription;

    /// Notes that the subscription to `uri` is open as request `id`; the
    /// one it replaces, to end.
    fn subscribed(&self, uri: &str, id: u64) -> Option<u64>;

    /// Whether the server may ask its client for input inside a result
    /// (an input-required result) rather than with requests of its own.
    fn asks_in_results(&self) -> bool;
}
