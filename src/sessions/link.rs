//! The interface every transport offers a session: send one JSON-RPC message,
//! receive the server's messages on a channel, learn when the link died, and
//! close it. One file per transport implements it (`stdio`, `http`, `sse`).

use bytes::Bytes;
use serde_json::value::RawValue;
use std::sync::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{http::HttpLink, sse::SseLink, stdio::StdioLink};

/// Messages from the server, checked as JSON and left as its text: only
/// their envelope is ever read, results pass through as the server wrote
/// them (fields we do not know, key order, number spelling unchanged).
pub type Inbound = mpsc::Sender<Box<RawValue>>;

/// How many server messages may queue before the transport waits.
pub const INBOUND_CAPACITY: usize = 1024;

#[derive(Debug, Clone, thiserror::Error)]
pub enum LinkError {
    #[error("cannot start `{command}`: {reason}")]
    Spawn { command: String, reason: String },
    #[error("{0}")]
    Http(String),
    #[error("the server answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the server refused our credentials (HTTP {status}); check the configured headers")]
    Unauthorized { status: u16 },
    #[error("the connection is closed: {0}")]
    Closed(String),
    #[error("{0}")]
    Protocol(String),
}

/// Tracks whether a link is still usable and why it stopped.
#[derive(Debug, Default)]
pub struct LinkState {
    closed: CancellationToken,
    reason: Mutex<Option<String>>,
}

impl LinkState {
    /// Marks the link dead; the first reason wins.
    pub fn close(&self, reason: impl Into<String>) {
        if let Ok(mut slot) = self.reason.lock()
            && slot.is_none()
        {
            *slot = Some(reason.into());
        }
        self.closed.cancel();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    pub fn token(&self) -> CancellationToken {
        self.closed.clone()
    }

    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .ok()
            .and_then(|r| r.clone())
            .unwrap_or_else(|| "the connection closed".to_owned())
    }
}

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
    /// a header on every later request).
    pub fn set_protocol_version(&self, version: &str) {
        if let Link::Http(link) = self {
            link.set_protocol_version(version);
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

    /// The child's process id (stdio only).
    pub fn pid(&self) -> Option<u32> {
        match self {
            Link::Stdio(link) => Some(link.pid()),
            _ => None,
        }
    }
}
