//! Requests servers make of their client (sampling, elicitation, roots):
//! passed only to the aggregator's client that the server is working for —
//! the one client with a call running on it. Outside a call, or when several
//! clients have calls running on that server, nobody can tell whose request
//! it is, so it is refused — except on the stdio front door, where exactly
//! one client is attached. A call that is parked (its server's question is
//! with a 2026-07-28 client, waiting for the client's retry) steps aside:
//! its server is waiting for that answer, so a new request is another
//! call's; otherwise a client that never comes back would leave every
//! other client of that server without its questions for as long as a
//! request stays parked.

use serde_json::{Value, json};
use std::sync::Arc;

use super::{ClientConnection, FrontDoor};
use crate::jsonrpc::METHOD_NOT_FOUND;

/// Registers a client as working with a server for the length of a call.
pub(super) struct CallerGuard<'a> {
    server: &'a FrontDoor,
    server_id: crate::model::ServerId,
    client: std::sync::Weak<ClientConnection>,
}

impl<'a> CallerGuard<'a> {
    pub(super) fn new(
        server: &'a FrontDoor,
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
pub(super) struct ForwardToClients(pub(super) std::sync::Weak<FrontDoor>);

impl crate::model::ServerRequestHandler for ForwardToClients {
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
            let Some(server) = server.upgrade() else {
                return Err(
                    json!({"code": METHOD_NOT_FOUND, "message": "the aggregator is shutting down"}),
                );
            };
            match server.client_for(server_id, capability) {
                Ok(client) => client.ask(&method, params).await,
                // The calling client shares no roots, or no client is
                // calling (servers ask as soon as they start): there are
                // none to give. An empty list, not an error each server
                // would log at every start; a server that asks during a
                // call gets its client's.
                Err(NoClient::Unsupported(_) | NoClient::OutsideACall(_))
                    if capability == "roots" =>
                {
                    Ok(json!({"roots": []}))
                }
                Err(reason) => {
                    Err(json!({"code": METHOD_NOT_FOUND, "message": reason.to_string()}))
                }
            }
        })
    }
}

/// Why a server's request has nobody to go to.
#[derive(Debug, thiserror::Error)]
enum NoClient {
    #[error("{0} requests are answered only during a tool call of the client they are for")]
    OutsideACall(String),
    #[error("the calling client does not support {0}")]
    Unsupported(String),
    #[error(
        "several clients have calls running on this server, so its {0} request cannot be told to be one client's; it is refused rather than shown to a client whose call did not make it"
    )]
    Ambiguous(String),
}

impl FrontDoor {
    /// The one client a server's request may go to, or why there is none.
    fn client_for(
        &self,
        server_id: crate::model::ServerId,
        capability: &str,
    ) -> Result<Arc<ClientConnection>, NoClient> {
        let calling = self
            .callers
            .lock()
            .ok()
            .and_then(|c| c.get(&server_id).cloned())
            .unwrap_or_default();
        let calling: Vec<Arc<ClientConnection>> = calling
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        let candidates = if calling.is_empty() && self.is_single_client() {
            // Only a client whose view has the server hears from it.
            self.clients
                .lock()
                .map(|c| {
                    c.iter()
                        .filter_map(std::sync::Weak::upgrade)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .into_iter()
                .filter(|client| self.router.admits_server(client.profile(), server_id))
                .collect()
        } else {
            calling
        };
        let waiting = |c: &Arc<ClientConnection>| c.is_waiting_for_input();
        let candidates = if candidates.iter().any(|c| !waiting(c)) {
            candidates.into_iter().filter(|c| !waiting(c)).collect()
        } else {
            candidates
        };
        let mut distinct: Vec<Arc<ClientConnection>> = Vec::new();
        for client in candidates {
            if !distinct.iter().any(|c| Arc::ptr_eq(c, &client)) {
                distinct.push(client);
            }
        }
        let capability = capability.to_owned();
        match distinct.as_slice() {
            [] => Err(NoClient::OutsideACall(capability)),
            [only]
                if only.supports(&capability)
                    && only
                        .accepts_requests
                        .load(std::sync::atomic::Ordering::Relaxed) =>
            {
                Ok(Arc::clone(only))
            }
            [_] => Err(NoClient::Unsupported(capability)),
            _ => Err(NoClient::Ambiguous(capability)),
        }
    }
}
