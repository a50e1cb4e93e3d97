//! The MCP front door: one MCP server offering every connected server's
//! tools, resources and prompts. `handler` is the method table, shared by
//! the two transports — `stdio` (Claude Desktop, IDEs) and `http`
//! (Streamable HTTP at `/mcp`) — and by the protocol revisions, each of
//! which (`revision`) wraps it in its own envelope and adds its own
//! methods. Messages stay raw JSON.

mod client;
mod failure;
mod handler;
pub mod http;
pub mod http_use;
pub mod incoming;
mod input;
pub mod meta;
pub mod outbound;
mod relay;
mod requests;
mod revision;
pub mod session_table;
pub mod stdio;
mod subscriptions;

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::router::Router;
pub use client::ClientConnection;

/// What the aggregate tells a client about itself.
pub(crate) const INSTRUCTIONS: &str = "Tools of several MCP servers, named `server__tool`. To find a tool by what it does, call `search_tools`; call any tool directly or through `call_tool`.";

/// The aggregate's capabilities (both eras).
pub(crate) fn server_capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {"listChanged": true, "subscribe": true},
        "prompts": {"listChanged": true},
        "completions": {},
        "logging": {}
    })
}

/// Who we are.
pub(crate) fn server_info() -> Value {
    json!({"name": "mcp-aggregator", "version": env!("CARGO_PKG_VERSION")})
}

/// The front door: the one MCP server clients see, aggregating every
/// server behind it; shared by every client connection.
pub struct FrontDoor {
    router: Router,
    search: crate::index::SearchIndex,
    expose: meta::Expose,
    /// Clients with a call running on a server, most recent last: a
    /// server's request (sampling, …) goes to the client it is working for.
    callers: Mutex<HashMap<crate::model::ServerId, Vec<std::sync::Weak<ClientConnection>>>>,
    /// Every initialized client, for requests outside a call (roots).
    clients: Mutex<Vec<std::sync::Weak<ClientConnection>>>,
    /// Clients' resource subscriptions.
    subscriptions: subscriptions::Subscriptions,
    /// Exactly one client is attached (the stdio front door): a server's
    /// request outside a call may go to it.
    single_client: std::sync::atomic::AtomicBool,
    /// Requests parked while a 2026-07-28 client answers a server's
    /// questions.
    relay: relay::Relay,
    /// A search has waited for start-up once: later ones do not (see
    /// `settle_search`).
    search_settled: std::sync::atomic::AtomicBool,
    /// Itself, for work that outlives the request that started it.
    me: std::sync::Weak<FrontDoor>,
}

impl FrontDoor {
    /// `state_key` seals the `requestState`s handed to 2026-07-28 clients
    /// (kept in the data dir, so a server's own state still opens after a
    /// restart).
    pub fn new(
        router: Router,
        search: crate::index::SearchIndex,
        expose: meta::Expose,
        state_key: &[u8; 32],
    ) -> Arc<FrontDoor> {
        let server = Arc::new_cyclic(|me| FrontDoor {
            router,
            search,
            expose,
            callers: Mutex::new(HashMap::new()),
            clients: Mutex::new(Vec::new()),
            subscriptions: Default::default(),
            single_client: std::sync::atomic::AtomicBool::new(false),
            relay: relay::Relay::with_key(state_key),
            search_settled: std::sync::atomic::AtomicBool::new(false),
            me: me.clone(),
        });
        server
            .router
            .set_request_handler(Arc::new(requests::ForwardToClients(Arc::downgrade(
                &server,
            ))));
        subscriptions::spawn_update_fanout(&server);
        server
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Says that this front door serves exactly one client (`stdio
    /// --in-process`): a server's request outside a call is that client's.
    pub fn set_single_client(&self, single: bool) {
        self.single_client
            .store(single, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_single_client(&self) -> bool {
        self.single_client
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a request waits, parked, for a 2026-07-28 client's retry
    /// with its answers (the client is still at work with it).
    pub fn has_parked_requests(&self) -> bool {
        self.relay.has_parked()
    }

    /// Keeps an initialized client, for requests outside a call (roots).
    pub(crate) fn remember_client(&self, client: &Arc<ClientConnection>) {
        if let Ok(mut clients) = self.clients.lock() {
            clients.retain(|c| c.strong_count() > 0);
            clients.push(Arc::downgrade(client));
        }
    }
}
