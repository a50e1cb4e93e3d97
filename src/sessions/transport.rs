//! What every transport shares: the channel the server's messages arrive
//! on, why a link failed, and whether it is still usable.

use serde_json::value::RawValue;
use std::sync::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a link receives, in order.
#[derive(Debug)]
pub enum Received {
    /// A message from the server, checked as JSON and left as its text:
    /// only its envelope is ever read, a result passes through as the
    /// server wrote it (fields we do not know, key order, number spelling
    /// unchanged).
    Message(Box<RawValue>),
    /// The answer to our request `id` came and cannot be read (too large,
    /// not JSON-RPC, cut off): the request fails now, not at its timeout.
    Lost { id: u64, why: String },
}

impl From<Box<RawValue>> for Received {
    fn from(message: Box<RawValue>) -> Received {
        Received::Message(message)
    }
}

/// Where a link puts what it receives.
pub type Inbound = mpsc::Sender<Received>;

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
    /// The server wants a login first (the message names the command).
    #[error("{0}")]
    NeedsLogin(String),
    /// The login could not be started or kept (discovery, registration).
    #[error("{0}")]
    Auth(String),
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
