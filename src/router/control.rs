//! The router's part in a server's life that the front doors may ask
//! for: connect, disconnect, stop; who answers servers' requests, their
//! notices; whether servers are starting, what a server's revision does,
//! its health figures and the resource cache's counters.

use std::sync::Arc;

use super::{ControlError, Router, cache};
use crate::model::{ConnectOutcome, ServerId, ServerNotice, ServerRequestHandler};

impl Router {
    /// Starts connecting a server (the admin API's connect).
    pub async fn connect(&self, id: ServerId) -> Result<ConnectOutcome, ControlError> {
        Ok(self.sessions.connect(id).await?)
    }

    /// Starts connecting servers (id and name) that count as starting, as
    /// at start-up: a list waits for them (bounded).
    pub fn connect_starting(&self, servers: Vec<(ServerId, String)>) -> usize {
        self.sessions.connect_starting(servers)
    }

    /// Disconnects a server: its calls drain (or are cut off with `force`);
    /// answers how many were cut off.
    pub async fn disconnect(&self, id: ServerId, force: bool) -> Result<usize, ControlError> {
        Ok(self.sessions.disconnect(id, force).await?)
    }

    /// Another replica changed the shared catalog: the table and the
    /// index look at it again.
    pub fn catalog_changed_elsewhere(&self) {
        self.sessions.catalog().changed_elsewhere();
    }

    /// Stops a server's supervisor before its registration is removed.
    pub async fn stop(&self, id: ServerId) {
        self.sessions.stop(id).await;
        // Its logins awaiting a callback end with it (a callback arriving
        // later writes no grant for a server that is gone).
        if let Some(oauth) = self.oauth() {
            oauth.forget(id);
        }
    }

    /// Where a server's requests to a client (sampling, elicitation, roots)
    /// go.
    pub fn set_request_handler(&self, handler: Arc<dyn ServerRequestHandler>) {
        self.sessions.set_request_handler(handler);
    }

    /// Servers' notifications that are not list changes (resource updates,
    /// log messages outside calls, …), as they come.
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<ServerNotice> {
        self.sessions.notices()
    }

    /// Whether `auto_connect` servers are still starting (or one just
    /// connected is being discovered): lists are about to grow.
    pub fn is_starting(&self) -> bool {
        self.sessions.is_starting()
    }

    /// Whether a connected server's lists are still being discovered: its
    /// tools are about to be stored.
    pub fn is_discovering(&self, id: ServerId) -> bool {
        self.sessions.is_discovering(id)
    }

    /// Whether the server may ask its client for input inside a result
    /// (an input-required result), as its revision does.
    pub fn asks_in_results(&self, id: ServerId) -> bool {
        self.sessions
            .session(id)
            .is_some_and(|session| session.asks_in_results())
    }

    /// Logins to servers that ask for one.
    pub fn oauth(&self) -> Option<&std::sync::Arc<crate::oauth::OAuth>> {
        self.sessions.oauth()
    }

    /// Where a server's login stands (`None`: it does not log in).
    pub async fn auth_view(
        &self,
        record: &crate::model::ServerRecord,
    ) -> Option<crate::oauth::AuthView> {
        self.oauth()?.view(record).await
    }

    /// A server's health figures (none until it has been connected).
    pub fn health(&self, id: ServerId) -> Option<crate::model::health::HealthFigures> {
        self.sessions.health(id)
    }

    /// The resource cache's counters.
    pub fn cache_stats(&self) -> cache::CacheStats {
        self.cache.stats()
    }
}
