//! The link a session speaks over, whatever its transport: send one
//! JSON-RPC message, receive the server's messages on a channel, learn when
//! the link died, close it. One file per transport implements it (`stdio`,
//! `http`, `sse`); what they share is `transport.rs`.

use bytes::Bytes;

use super::transport::{LinkError, LinkState};
use super::{http::HttpLink, sse::SseLink, stdio::StdioLink};

/// A connected transport.
pub enum Link {
    Stdio(StdioLink),
    Http(HttpLink),
    Sse(SseLink),
}

impl Link {
    /// Sends one serialized JSON-RPC message.
    pub async fn send(&self, message: Bytes) -> Result<(), LinkError> {
        match self {
            Link::Stdio(link) => link.send(message).await,
            Link::Http(link) => link.send(message).await,
            Link::Sse(link) => link.send(message).await,
        }
    }

    /// Sends with extra HTTP headers (ignored by the other transports).
    pub async fn send_with_headers(
        &self,
        message: Bytes,
        headers: &[(String, String)],
    ) -> Result<(), LinkError> {
        match self {
            Link::Http(link) if !headers.is_empty() => {
                link.send_with_headers(message, headers).await
            }
            _ => self.send(message).await,
        }
    }

    /// Sends without waiting (used where we cannot await, e.g. a dropped
    /// request sending `notifications/cancelled`).
    pub fn send_detached(&self, message: Bytes) {
        match self {
            Link::Stdio(link) => link.send_detached(message),
            Link::Http(link) => link.send_detached(message),
            Link::Sse(link) => link.send_detached(message),
        }
    }

    pub fn state(&self) -> &LinkState {
        match self {
            Link::Stdio(link) => link.state(),
            Link::Http(link) => link.state(),
            Link::Sse(link) => link.state(),
        }
    }

    /// Tells the transport the negotiated protocol version (HTTP sends it as
    /// a header on every later request) and whether the revision mirrors
    /// each request's method and target into headers.
    pub fn set_protocol_version(&self, version: &str, mirrors_method_headers: bool) {
        if let Link::Http(link) = self {
            link.set_protocol_version(version, mirrors_method_headers);
        }
    }

    /// Forgets the protocol version (a 2026-07-28 probe the server refused:
    /// the `initialize` that follows carries no version header).
    pub fn forget_protocol_version(&self) {
        if let Link::Http(link) = self {
            link.forget_protocol_version();
        }
    }

    /// Called once the handshake is done (HTTP opens its listening stream).
    pub fn initialized(&self) {
        if let Link::Http(link) = self {
            link.open_listening_stream();
        }
    }

    /// Closes the link and releases everything it holds (for stdio: the
    /// whole process group is terminated and reaped).
    pub async fn close(&self) {
        match self {
            Link::Stdio(link) => link.close().await,
            Link::Http(link) => link.close().await,
            Link::Sse(link) => link.close().await,
        }
        self.state().close("closed by the aggregator");
    }

    /// Whether this is a Streamable HTTP link on which the server keeps a
    /// session for us (it gave an `Mcp-Session-Id`).
    pub fn is_http_session(&self) -> bool {
        matches!(self, Link::Http(link) if link.has_session())
    }

    /// The child's process id (stdio only).
    pub fn pid(&self) -> Option<u32> {
        match self {
            Link::Stdio(link) => Some(link.pid()),
            _ => None,
        }
    }
}
