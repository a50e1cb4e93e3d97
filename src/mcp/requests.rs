//! Requests servers make of their client (sampling, elicitation, roots):
//! passed to the aggregator's client that the server is working for — the
//! one with a call running on it — or, outside a call, to the latest client
//! that declared the capability.

use serde_json::{Value, json};
use std::sync::Arc;

use super::handler::{ClientConnection, METHOD_NOT_FOUND, McpServer};

/// Registers a client as working with a server for the length of a call.
pub(super) struct CallerGuard<'a> {
    server: &'a McpServer,
    server_id: crate::model::ServerId,
    client: std::sync::Weak<ClientConnection>,
}

impl<'a> CallerGuard<'a> {
    pub(super) fn new(
        server: &'a McpServer,
        server_id: crate::model::ServerId,
        client: &Arc<ClientConnection>,
    ) -> CallerGuard<'a> {
        let client = Arc::downgrade(client);
        if let Ok(mut callers) = server.callers.lock() {
            callers.entry(server_id).or_default().push(client.clone());
        }
        CallerGuard {
            server,
            server_id,
            client,
        }
    }
}

impl Drop for CallerGuard<'_> {
    fn drop(&mut self) {
        // The (possibly empty) list stays: servers are few, and removing and
        // re-adding the key on every call churns the map.
        if let Ok(mut callers) = self.server.callers.lock()
            && let Some(list) = callers.get_mut(&self.server_id)
            && let Some(pos) = list.iter().rposition(|c| c.ptr_eq(&self.client))
        {
            list.remove(pos);
        }
    }
}

/// Passes a server's requests to the client it is working for (or, outside
/// a call, to the most recent client that can answer).
pub(super) struct ForwardToClients(pub(super) std::sync::Weak<McpServer>);

impl crate::sessions::ServerRequestHandler for ForwardToClients {
    fn handle(
        &self,
        server_id: crate::model::ServerId,
        method: String,
        params: Option<Value>,
    ) -> futures_util::future::BoxFuture<'static, Result<Value, Value>> {
        let server = self.0.clone();
        Box::pin(async move {
            let capability = match method.as_str() {
                "sampling/createMessage" => "sampling",
                "elicitation/create" => "elicitation",
                "roots/list" => "roots",
                _ => {
                    return Err(
                        json!({"code": METHOD_NOT_FOUND, "message": format!("{method} is not supported")}),
                    );
                }
            };
            let client = server
                .upgrade()
                .and_then(|server| server.client_for(server_id, capability));
            match client {
                Some(client) => client.ask(&method, params).await,
                None if capability == "roots" => Ok(json!({"roots": []})),
                None => Err(json!({
                    "code": METHOD_NOT_FOUND,
                    "message": format!("no connected client supports {capability}")
                })),
            }
        })
    }
}

impl McpServer {
    fn client_for(
        &self,
        server_id: crate::model::ServerId,
        capability: &str,
    ) -> Option<Arc<ClientConnection>> {
        let calling = self
            .callers
            .lock()
            .ok()
            .and_then(|c| c.get(&server_id).cloned())
            .unwrap_or_default();
        let everyone = self.clients.lock().map(|c| c.clone()).unwrap_or_default();
        calling
            .iter()
            .rev()
            .chain(everyone.iter().rev())
            .filter_map(std::sync::Weak::upgrade)
            .find(|c| {
                c.supports(capability)
                    && c.accepts_requests
                        .load(std::sync::atomic::Ordering::Relaxed)
            })
    }
}
