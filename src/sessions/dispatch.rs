//! The receiving side of a session: every message the server sends is
//! routed here — answers to their waiting requests, progress to its
//! subscriber, list_changed and other notifications to the supervisor, and
//! the server's own requests to the front door's handler.

use crate::jsonrpc::{self, Kind};
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::calls::CallRoutes;
use super::events::{EventSender, SessionEvent};
use super::pending::{Pending, Waiter};
use super::rpc_error::RpcError;
use super::transport::{LinkError, Received};
use crate::jsonrpc::line;
use crate::model::ServerRequestHandler;

/// Routes the server's messages: responses to their waiting requests,
/// list-changed notifications to the supervisor, the server's own requests
/// answered (ping) or refused. Ends when the link dies.
/// The session's receiving side.
pub(super) struct Dispatcher {
    pub(super) server: String,
    pub(super) pending: Arc<Pending>,
    pub(super) calls: Arc<CallRoutes>,
    pub(super) events: EventSender,
    pub(super) replies: mpsc::Sender<Bytes>,
    pub(super) link_closed: CancellationToken,
    pub(super) closed: CancellationToken,
    pub(super) requests: Option<(crate::model::ServerId, Arc<dyn ServerRequestHandler>)>,
    /// Bounds the server's requests waiting on a client.
    pub(super) asking: Arc<tokio::sync::Semaphore>,
    /// Marked on every message: a server heard from is alive.
    pub(super) vitals: Option<Arc<super::vitals::Vitals>>,
}

impl Dispatcher {
    pub(super) async fn run(self, mut inbound: mpsc::Receiver<Received>) {
        let Dispatcher {
            server,
            pending,
            calls,
            events,
            replies,
            link_closed,
            closed,
            requests,
            asking,
            vitals,
        } = self;
        loop {
            let message = tokio::select! {
                message = inbound.recv() => message,
                () = link_closed.cancelled() => None,
                () = closed.cancelled() => None,
            };
            let message = match message {
                Some(Received::Message(message)) => message,
                // The subscription's stream ended without its answer: it
                // ended all the same.
                Some(Received::Lost { id, why }) if id == super::revision::LISTEN_ID => {
                    tracing::debug!(server = %server, "the list-change subscription ended: {why}");
                    events.send(SessionEvent::ListenEnded);
                    continue;
                }
                Some(Received::Lost { id, why }) => {
                    let waiter = pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some(Waiter { tx: waiter, .. }) = waiter {
                        let _ = waiter.send(Err(RpcError::Link(LinkError::Protocol(why))));
                    }
                    continue;
                }
                None => break,
            };
            if let Some(vitals) = &vitals {
                vitals.heard();
            }
            let Ok(envelope) = jsonrpc::Envelope::read(&message) else {
                tracing::debug!(server = %server, "ignoring a message that is not a JSON object");
                continue;
            };
            // Answers, the bulk of the traffic, are read no further than
            // their envelope: the result goes to its caller as text.
            if envelope.is_answer() {
                let Some(id) = envelope.numeric_id() else {
                    tracing::debug!(server = %server, "an answer with an id we never sent");
                    continue;
                };
                // The server ended the subscription we keep open for list
                // changes (a result; an error means it has none).
                if id == super::revision::LISTEN_ID {
                    if envelope.result.is_some() {
                        events.send(SessionEvent::ListenEnded);
                    }
                    continue;
                }
                let waiter = pending.lock().ok().and_then(|mut p| p.remove(&id));
                let Some(Waiter { tx: waiter, .. }) = waiter else {
                    continue;
                };
                let outcome = match (envelope.error, envelope.result) {
                    (Some(error), _) => Err(server_error(error)),
                    (None, Some(result)) => Ok(result.to_owned()),
                    (None, None) => Err(RpcError::Malformed(
                        "an answer with neither result nor error".into(),
                    )),
                };
                let _ = waiter.send(outcome);
                continue;
            }
            let Ok(message) = jsonrpc::parse(&message) else {
                continue;
            };
            match jsonrpc::classify(&message) {
                // An id with a `method` that is not a string: no answer of
                // ours, and no request we can take.
                Kind::Answer { .. } => {}
                Kind::Request { id, method } if method != "ping" && requests.is_some() => {
                    let Some((server_id, handler)) = requests.clone() else {
                        continue;
                    };
                    let (id, method) = (id.clone(), method.to_owned());
                    let Ok(permit) = Arc::clone(&asking).try_acquire_owned() else {
                        let reply = jsonrpc::error(
                            id.clone(),
                            jsonrpc::INTERNAL_ERROR,
                            "too many requests from this server are waiting for an answer",
                        );
                        if let Ok(bytes) = line(&reply) {
                            let _ = replies.try_send(Bytes::from(bytes));
                        }
                        continue;
                    };
                    let params = message.get("params").cloned();
                    let replies = replies.clone();
                    tokio::spawn(async move {
                        let reply = match handler.handle(server_id, method, params).await {
                            Ok(result) => jsonrpc::result(id, result),
                            Err(error) => jsonrpc::error_answer(id, error),
                        };
                        drop(permit);
                        if let Ok(bytes) = line(&reply) {
                            let _ = replies.try_send(Bytes::from(bytes));
                        }
                    });
                }
                Kind::Request { id, method } => {
                    let reply = match method {
                        "ping" => jsonrpc::result(id.clone(), json!({})),
                        "roots/list" => jsonrpc::result(id.clone(), json!({"roots": []})),
                        _ => jsonrpc::error(
                            id.clone(),
                            jsonrpc::METHOD_NOT_FOUND,
                            &format!("{method} is not supported by this client"),
                        ),
                    };
                    if let Ok(bytes) = line(&reply) {
                        let _ = replies.try_send(Bytes::from(bytes));
                    }
                }
                Kind::Notification {
                    method: "notifications/progress",
                } => {
                    if !calls.deliver_progress(&message) {
                        events.send(SessionEvent::Notification(message));
                    }
                }
                // A log message while calls are under way belongs to them
                // (which one the protocol cannot say): their clients get it
                // before the answer. Outside a call it is the server's own.
                Kind::Notification {
                    method: "notifications/message",
                } => {
                    if !calls.deliver_log(&message) {
                        events.send(SessionEvent::Notification(message));
                    }
                }
                Kind::Notification { method } => {
                    let event = match method {
                        "notifications/tools/list_changed" => SessionEvent::ToolsChanged,
                        "notifications/resources/list_changed" => SessionEvent::ResourcesChanged,
                        "notifications/prompts/list_changed" => SessionEvent::PromptsChanged,
                        _ => SessionEvent::Notification(message),
                    };
                    events.send(event);
                }
                Kind::Invalid => {
                    tracing::debug!(server = %server, "ignoring a message that is neither request, answer nor notification")
                }
            }
        }
        closed.cancel();
        // Whoever still waits gets an answer now.
        let waiting: Vec<_> = pending
            .lock()
            .map(|mut p| p.drain().collect())
            .unwrap_or_default();
        for (_, waiter) in waiting {
            let _ = waiter.tx.send(Err(RpcError::Closed(
                "the connection to the server was lost".to_owned(),
            )));
        }
    }
}

/// A server's error object as our error (any shape it sent).
fn server_error(error: &RawValue) -> RpcError {
    let error = jsonrpc::parse(error).unwrap_or(Value::Null);
    RpcError::Server {
        code: error
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(jsonrpc::INTERNAL_ERROR),
        message: error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        data: error.get("data").cloned(),
    }
}
