//! The bounded queue of messages for one client (a stdio peer, an HTTP
//! session's GET stream, one call's SSE response). A client that falls
//! behind costs a bounded amount: notifications (progress, log messages,
//! list changes) are dropped once the queue is full — counted, and logged
//! once per client — and an answer that finds no room within
//! `limits::CLIENT_STALL` marks the client stalled, which disconnects it.

use crate::jsonrpc::Outgoing;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::limits;

/// The sending side of one client's queue.
#[derive(Debug)]
pub struct Outbound {
    tx: mpsc::Sender<Outgoing>,
    dropped: AtomicU64,
    warned: AtomicBool,
    /// Cancelled when the client stopped taking its answers.
    stalled: CancellationToken,
    /// How long an answer waits for room.
    stall_after: std::time::Duration,
}

impl Outbound {
    /// A queue of `capacity` messages whose answers wait at most
    /// `stall_after` for room, and its receiving end.
    pub fn channel(
        capacity: usize,
        stall_after: std::time::Duration,
    ) -> (Outbound, mpsc::Receiver<Outgoing>) {
        Outbound::with_stall_token(capacity, stall_after, CancellationToken::new())
    }

    /// Like `channel`, cancelling `stalled` when the client stalls (a front
    /// door waits on one token for that and its own shutdown).
    pub fn with_stall_token(
        capacity: usize,
        stall_after: std::time::Duration,
        stalled: CancellationToken,
    ) -> (Outbound, mpsc::Receiver<Outgoing>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let outbound = Outbound {
            tx,
            dropped: AtomicU64::new(0),
            warned: AtomicBool::new(false),
            stalled,
            stall_after,
        };
        (outbound, rx)
    }

    /// The usual per-client queue.
    pub fn for_client() -> (Outbound, mpsc::Receiver<Outgoing>) {
        Outbound::channel(limits::CLIENT_QUEUE, limits::CLIENT_STALL)
    }

    /// Queues a notification, or drops it when the client is behind;
    /// false once the client is gone.
    pub fn notify(&self, message: impl Into<Outgoing>) -> bool {
        match self.tx.try_send(message.into()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                crate::metrics::global().notifications_dropped.inc();
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        queued = limits::CLIENT_QUEUE,
                        dropped,
                        "a client is not reading its messages; its notifications are dropped until it catches up"
                    );
                }
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Queues an answer (or a request for the client), waiting for room up
    /// to `limits::CLIENT_STALL`; a client that does not make room by then
    /// is marked stalled (and disconnected by its front door). False when
    /// the message was not queued.
    pub async fn deliver(&self, message: impl Into<Outgoing>) -> bool {
        if self.stalled.is_cancelled() {
            return false;
        }
        // The usual case, room at once, takes no timer.
        let message = match self.tx.try_send(message.into()) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
            Err(mpsc::error::TrySendError::Full(message)) => message,
        };
        match tokio::time::timeout(self.stall_after, self.tx.send(message)).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => false,
            Err(_) => {
                tracing::warn!(
                    waited = ?self.stall_after,
                    "a client has not taken its answers; disconnecting it"
                );
                self.stalled.cancel();
                false
            }
        }
    }

    /// Whether the client went away or stalled.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed() || self.stalled.is_cancelled()
    }

    /// Resolves when the client stopped taking its answers.
    pub async fn stalled(&self) {
        self.stalled.cancelled().await;
    }

    /// Notifications dropped for this client.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl crate::model::CallSink for Outbound {
    fn send(&self, message: Value) -> bool {
        self.notify(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_full_queue_drops_notifications_and_counts_them() {
        let (outbound, mut rx) = Outbound::channel(2, limits::CLIENT_STALL);
        for n in 0..5 {
            assert!(outbound.notify(json!(n)));
        }
        assert_eq!(outbound.dropped(), 3);
        let mut next = async || rx.recv().await.map(|m| m.into_tree().unwrap());
        assert_eq!(next().await, Some(json!(0)));
        assert_eq!(next().await, Some(json!(1)));
        assert!(outbound.notify(json!(5)), "room again once read");
        assert_eq!(next().await, Some(json!(5)));
        drop(rx);
        assert!(!outbound.notify(json!(6)), "the client is gone");
        assert!(outbound.is_closed());
    }

    #[tokio::test]
    async fn an_answer_that_finds_no_room_stalls_the_client() {
        let (outbound, _rx) = Outbound::channel(1, std::time::Duration::from_millis(20));
        assert!(outbound.deliver(json!("first")).await);
        assert!(!outbound.deliver(json!("second")).await);
        assert!(outbound.is_closed());
        assert!(!outbound.deliver(json!("third")).await, "stays stalled");
    }
}
