//! The protocol revisions the front door speaks, behind one interface
//! (`Revision`): which revision a request speaks, the methods only that
//! revision has, the envelope around the shared method table (request
//! metadata in, result and error shapes out), and what it asks of HTTP
//! (statuses, headers checked against the body, when an answer is worth a
//! stream). One file per revision; the transports and the method table ask
//! the interface. A new revision is one new file here and a line in
//! `of_request`.

mod listen_2026;
mod rev2025;
mod rev2026;

/// The revisions a session (`initialize`) may agree on.
pub use rev2025::SUPPORTED_VERSIONS as SESSION_VERSIONS;

use axum::http::{HeaderMap, StatusCode};
use futures_util::future::BoxFuture;
use serde_json::Value;
use serde_json::value::RawValue;
use std::sync::Arc;

use super::{ClientConnection, FrontDoor};
use crate::jsonrpc::Outgoing;

/// A client's request, read into its parts (a call's arguments left as
/// the client wrote them).
pub(super) struct Request<'r> {
    pub(super) id: Value,
    pub(super) method: &'r str,
    pub(super) params: Option<Value>,
    pub(super) arguments: Option<Box<RawValue>>,
}

/// One protocol revision, as the front door serves it.
pub(super) trait Revision: Send + Sync {
    /// Answers one request of this revision.
    fn serve<'a>(
        &'a self,
        server: &'a FrontDoor,
        client: &'a Arc<ClientConnection>,
        request: Request<'a>,
    ) -> BoxFuture<'a, Outgoing>;

    /// The HTTP status an answer goes out with.
    fn http_status(&self, answer: &Outgoing) -> StatusCode;

    /// Whether answering may involve notifications before the result
    /// (then the answer is worth an SSE stream).
    fn may_notify(&self, method: &str, params: Option<&Value>) -> bool;

    /// Checks what an HTTP request mirrors of its body into headers.
    fn check_headers(
        &self,
        server: &FrontDoor,
        headers: &HeaderMap,
        method: &str,
        params: Option<&Value>,
        arguments: Option<&RawValue>,
        profile: Option<&str>,
    ) -> Result<(), String>;
}

static REV2025: rev2025::Rev2025 = rev2025::Rev2025;
static REV2026: rev2026::Rev2026 = rev2026::Rev2026;

/// The revision a request speaks: 2026-07-28 when its `_meta` names a
/// protocol version, else a 2025 one (its version fixed at `initialize`).
pub(super) fn of_request(params: Option<&Value>) -> &'static dyn Revision {
    if rev2026::names_version(params) {
        &REV2026
    } else {
        &REV2025
    }
}

/// Whether a request speaks a revision without sessions (its `_meta`
/// names its version).
pub(super) fn is_stateless(params: Option<&Value>) -> bool {
    rev2026::names_version(params)
}

/// Whether an HTTP request's `MCP-Protocol-Version` header names a
/// revision served without a session.
pub(super) fn header_is_stateless(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| rev2026::VERSIONS.contains(&v.trim()))
}

/// The revision served without a session (a Streamable HTTP POST with no
/// session that is not an `initialize`).
pub(super) fn stateless() -> &'static dyn Revision {
    &REV2026
}

impl FrontDoor {
    /// Handles a request in the revision it speaks; returns the complete
    /// JSON-RPC answer.
    pub async fn handle_request(
        &self,
        client: &Arc<ClientConnection>,
        id: Value,
        method: &str,
        params: Option<Value>,
        arguments: Option<Box<RawValue>>,
    ) -> Outgoing {
        let revision = of_request(params.as_ref());
        self.handle_in(revision, client, id, method, params, arguments)
            .await
    }

    /// Handles a request in `revision`.
    pub(super) async fn handle_in(
        &self,
        revision: &dyn Revision,
        client: &Arc<ClientConnection>,
        id: Value,
        method: &str,
        params: Option<Value>,
        arguments: Option<Box<RawValue>>,
    ) -> Outgoing {
        use tracing::Instrument as _;
        // Exported only when traces are on (`logging::TRACE_TARGET`).
        let span = tracing::trace_span!(
            target: "mcp_aggregator::otel",
            "mcp request",
            otel.kind = "server",
            rpc.system = "jsonrpc",
            rpc.method = method,
        );
        let request = Request {
            id,
            method,
            params,
            arguments,
        };
        revision.serve(self, client, request).instrument(span).await
    }
}
