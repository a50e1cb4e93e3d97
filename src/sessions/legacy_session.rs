//! A second session, in the 2025 revisions, to a server that speaks both
//! eras over Streamable HTTP: the calls of 2025 clients go over it.
//!
//! The server's own session speaks 2026-07-28, where a server asks its
//! client questions inside results, and the aggregator turns those into
//! requests for a 2025 client. A server whose 2026 path cannot ask at all
//! (the conformance suite's reference server runs its 2026 calls through
//! a client without sampling or elicitation) would then deny a 2025 client
//! what it gets talking to the server directly. Over a 2025 session the
//! server serves such a client as it would serve it alone: its questions
//! come as requests on the call's stream, and go to the calling client.
//!
//! Kept only when the server holds the session for us (an
//! `Mcp-Session-Id`): a server that serves 2025 requests one at a time,
//! without a session, has no client to ask there, so its 2026 path (with
//! questions in results) serves a 2025 client better.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::Session;
use crate::model::{Caller, ServerId};

/// Each server's second session, tied to the main session it was opened
/// beside.
#[derive(Default)]
pub(super) struct LegacySessions {
    slots: Mutex<HashMap<ServerId, Arc<tokio::sync::Mutex<Option<Slot>>>>>,
}

struct Slot {
    /// The main session this one was opened beside: a new main session
    /// (a reconnect) gets a new second one.
    beside: Weak<Session>,
    /// `None`: the server has no 2025 session to give (it refused
    /// `initialize`, serves it without a session, or keeps forgetting
    /// it); asked again only beside the next main session.
    session: Option<Arc<Session>>,
    /// How many second sessions beside this main one broke (the server
    /// forgot them: a restart, replicas that do not share sessions).
    broken: u8,
}

/// Second sessions that may break beside one main session before its
/// 2025 clients' calls stay on it: a server that keeps forgetting them
/// would fail a call each time, where the main session serves them all.
const BREAKS_TOLERATED: u8 = 2;

impl Slot {
    fn is_beside(&self, main: &Arc<Session>) -> bool {
        std::ptr::eq(self.beside.as_ptr(), Arc::as_ptr(main))
    }
}

/// Whether a call of `caller` over `main` is better made in a 2025
/// session: a 2025 client, a server spoken to in 2026-07-28 over HTTP.
pub(super) fn wants_legacy(main: &Session, caller: &Caller) -> bool {
    caller.in_session && main.asks_in_results() && main.is_http()
}

impl LegacySessions {
    /// The second session beside `main`, opened with `open` on first use;
    /// `main` itself when the server has none to give.
    pub(super) async fn session_beside<F>(
        &self,
        id: ServerId,
        main: Arc<Session>,
        open: impl FnOnce() -> F,
    ) -> Arc<Session>
    where
        F: std::future::Future<Output = Option<Arc<Session>>>,
    {
        let slot = match self.slots.lock() {
            Ok(mut slots) => Arc::clone(slots.entry(id).or_default()),
            Err(_) => return main,
        };
        // Held while opening: calls that come meanwhile wait for this one
        // session instead of opening their own.
        let mut slot = slot.lock().await;
        let mut broken = 0;
        if let Some(existing) = slot.as_mut().filter(|s| s.is_beside(&main)) {
            match &existing.session {
                None => return main,
                Some(session) if !session.is_closed() => return Arc::clone(session),
                // It broke (the server forgot it): opened again below, up
                // to a point.
                Some(_) => {
                    existing.broken += 1;
                    if existing.broken >= BREAKS_TOLERATED {
                        tracing::info!(
                            server = main.server(),
                            "the 2025 session beside the 2026-07-28 one broke {} times; 2025 clients' calls go over the 2026-07-28 session from now on",
                            existing.broken
                        );
                        existing.session = None;
                        return main;
                    }
                    broken = existing.broken;
                }
            }
        }
        let opened = match open().await {
            Some(session) if session.is_http_session() => Some(session),
            Some(session) => {
                session.close().await;
                None
            }
            None => None,
        };
        if let Some(session) = &opened {
            // It lives as long as the main session: drained and closed
            // with it (a disconnect, a removal, the daemon stopping), and
            // closed when the main one's link dies.
            main.keep_beside(Arc::clone(session));
            let (session, main) = (Arc::clone(session), Arc::clone(&main));
            tokio::spawn(async move {
                tokio::select! {
                    () = main.closed() => session.close().await,
                    () = session.closed() => {}
                }
            });
        }
        *slot = Some(Slot {
            beside: Arc::downgrade(&main),
            session: opened.clone(),
            broken,
        });
        opened.unwrap_or(main)
    }

    /// Forgets a server's second session (it was removed); the session
    /// itself closes with its main one.
    pub(super) fn forget(&self, id: ServerId) {
        if let Ok(mut slots) = self.slots.lock() {
            slots.remove(&id);
        }
    }
}
