//! What passes between the front doors and the sessions through the
//! router, named once for all three: who a call is made for, where its
//! progress and log messages go, who answers a server's own requests, what
//! a server said for the front doors to pass on, and what a connect did.

use serde_json::Value;
use std::sync::Arc;

use super::ServerId;

/// The client a request is made for, as a revision that carries it tells
/// the server in each request (a 2025 server knows only the aggregator).
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The client's declared capabilities: a server asks only for input
    /// the client can give.
    /// Shared: a client's every call carries them.
    pub capabilities: Option<Arc<Value>>,
    /// The least severe log message the client wants; none: no logs.
    pub log_level: Option<&'static str>,
    /// Who the client is, as the audit log names it (`mcp:<its name>`,
    /// `api:<peer>`).
    pub who: Option<Arc<str>>,
    /// The profile the client picked: it reaches only what that view
    /// admits. `None`: everything.
    pub profile: Option<Arc<str>>,
    /// A client of the 2025 revisions: it opened a session with
    /// `initialize`, and a server's questions reach it as requests in that
    /// session (a 2026-07-28 client gets them inside results).
    pub in_session: bool,
}

/// Where a server's notifications about one call go, already in the
/// client's form: its progress, and the log messages it sends while the
/// call runs. A sink may drop what its client is too slow to take (it never
/// blocks the session); `send` is false once nobody listens any more.
pub trait CallSink: Send + Sync {
    fn send(&self, message: Value) -> bool;
}

/// Answers the requests a server makes of its client (sampling,
/// elicitation, roots) — the front door forwards them to its own clients.
/// `Err` carries a JSON-RPC error object.
pub trait ServerRequestHandler: Send + Sync {
    fn handle(
        &self,
        server_id: ServerId,
        method: String,
        params: Option<Value>,
    ) -> futures_util::future::BoxFuture<'static, Result<Value, Value>>;
}

/// A notification a server sent that the front doors may pass on
/// (resource updates, logging, …), raw.
#[derive(Debug, Clone)]
pub struct ServerNotice {
    pub server_id: ServerId,
    pub message: Value,
}

/// What a connect request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectOutcome {
    /// A connection attempt is under way (status `CONNECTING`).
    Initiated,
    /// The server is already `CONNECTED` or `DEGRADED`.
    AlreadyConnected,
}
