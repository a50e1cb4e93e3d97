//! Requests waiting for their answers, and the one sweeper per session that
//! times them out: one timer per session instead of one per request
//! (registering a timer wakes the runtime's driver, a whole extra epoll
//! round on every call).

use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Weak};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use super::rpc_error::RpcError;

/// A request waiting for its answer, and when it stops waiting.
pub(super) struct Waiter {
    pub(super) tx: oneshot::Sender<Result<Box<RawValue>, RpcError>>,
    pub(super) deadline: tokio::time::Instant,
    pub(super) timeout: Duration,
}

pub(super) type Pending = Mutex<HashMap<u64, Waiter>>;

/// How often overdue requests are looked for.
const TIMEOUT_SWEEP: Duration = Duration::from_millis(250);

/// The timeout sweeper's rest: with no request waiting it sleeps until the
/// next one is sent, so an idle session wakes nobody.
#[derive(Default)]
pub(super) struct Sweep {
    parked: AtomicBool,
    wake: Notify,
}

impl Sweep {
    /// A request was sent: wakes the sweeper if it rests.
    pub(super) fn request_sent(&self) {
        if self.parked.swap(false, Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }
}

/// What the sweeper asks of the session it sweeps.
pub(super) trait Swept: Send + Sync + 'static {
    fn is_closed(&self) -> bool;
    /// Answers `Timeout` to every request past its deadline.
    fn expire_overdue(&self);
    fn in_flight(&self) -> usize;
}

/// Runs a session's sweeper until the session is closed or dropped.
pub(super) fn spawn_sweeper<S: Swept>(
    session: Weak<S>,
    sweep: std::sync::Arc<Sweep>,
    closed: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(TIMEOUT_SWEEP).await;
            let Some(session) = session.upgrade() else {
                break;
            };
            if session.is_closed() {
                break;
            }
            session.expire_overdue();
            if session.in_flight() > 0 {
                continue;
            }
            // Nothing waits: rest until a request is sent (checked again
            // after saying so, so none is missed).
            sweep.parked.store(true, Ordering::SeqCst);
            if session.in_flight() > 0 {
                sweep.parked.store(false, Ordering::SeqCst);
                continue;
            }
            drop(session);
            tokio::select! {
                () = sweep.wake.notified() => {}
                () = closed.cancelled() => break,
            }
        }
    });
}

/// Takes every request past its deadline out of `pending`.
pub(super) fn take_overdue(pending: &Pending) -> Vec<(u64, Waiter)> {
    let now = tokio::time::Instant::now();
    match pending.lock() {
        Ok(mut pending) => {
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, w)| w.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| pending.remove(&id).map(|w| (id, w)))
                .collect()
        }
        Err(_) => Vec::new(),
    }
}
