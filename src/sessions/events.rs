//! What a session passes up: the server's notifications and list changes
//! for its supervisor, on a bounded channel that never loses a change.

use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// Something the server told us that the supervisor or the front doors act on.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    ToolsChanged,
    ResourcesChanged,
    PromptsChanged,
    /// Any other notification (progress, logging, resource updates), raw.
    Notification(Value),
    /// Some list-changed notification could not be queued: list everything.
    EverythingChanged,
    /// The server ended the subscription that brings list changes (a
    /// revision whose list changes come on a subscription).
    ListenEnded,
}

/// The sending side of a session's events: bounded, so a server flooding
/// notifications costs a bounded queue. Notifications that find it full are
/// dropped; a list change that finds it full is remembered as a flag and
/// becomes one `EverythingChanged`, so no change is ever lost.
#[derive(Clone)]
pub struct EventSender {
    tx: mpsc::Sender<SessionEvent>,
    missed_change: Arc<AtomicBool>,
}

/// The supervisor's side of a session's events.
pub struct EventReceiver {
    rx: mpsc::Receiver<SessionEvent>,
    missed_change: Arc<AtomicBool>,
}

/// A bounded event channel for one session.
pub fn event_channel() -> (EventSender, EventReceiver) {
    let (tx, rx) = mpsc::channel(crate::limits::SERVER_NOTIFICATIONS);
    let missed_change = Arc::new(AtomicBool::new(false));
    (
        EventSender {
            tx,
            missed_change: Arc::clone(&missed_change),
        },
        EventReceiver { rx, missed_change },
    )
}

impl EventSender {
    pub(super) fn send(&self, event: SessionEvent) {
        if let Err(mpsc::error::TrySendError::Full(event)) = self.tx.try_send(event) {
            match event {
                SessionEvent::Notification(_) => {
                    crate::metrics::global().notifications_dropped.inc();
                }
                _ => self.missed_change.store(true, Ordering::Relaxed),
            }
        }
    }
}

impl EventReceiver {
    pub async fn recv(&mut self) -> Option<SessionEvent> {
        if self.missed_change.swap(false, Ordering::Relaxed) {
            return Some(SessionEvent::EverythingChanged);
        }
        self.rx.recv().await
    }
}
