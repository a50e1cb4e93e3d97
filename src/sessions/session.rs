//! One MCP client session over a link: opening it in the revision the
//! server speaks (`revision`), requests matched to answers by id,
//! notifications, cancellation of abandoned requests, and the calls whose
//! progress goes to a client. Messages stay raw JSON end to end.

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::calls::{CallGuard, CallRoutes};
use super::events::EventSender;
use super::link::Link;
use super::pending::{Pending, Sweep, Swept, Waiter};
use super::revision::{self, Revision, RevisionId, Subscription};
use super::rpc_error::RpcError;
use crate::jsonrpc::{self, Json, line};
use crate::model::{CallSink, Caller, ServerRequestHandler};

/// A server's own requests (sampling, elicitation, roots) waiting on a
/// client at once; beyond that the server gets an error at once.
const SERVER_REQUESTS_IN_FLIGHT: usize = 64;

/// A live session with one server.
pub struct Session {
    server: String,
    link: Link,
    next_id: AtomicU64,
    pending: Arc<Pending>,
    calls: Arc<CallRoutes>,
    closed: CancellationToken,
    initialize_result: Value,
    request_timeout: Duration,
    /// The revision the server speaks.
    revision: Box<dyn Revision>,
    /// How long the server said each list stays fresh (`ttlMs` of its
    /// last answer), by list method.
    list_ttls: Mutex<HashMap<String, u64>>,
    /// The server's health record: every message marks it alive, every
    /// request made for a client is counted.
    vitals: Option<Arc<super::vitals::Vitals>>,
    /// Why the server's latest tool list could not be stored (a full
    /// disk): until it is, what is stored (and was checked) may not be
    /// what the server now runs, so its tools are not called.
    unstored_tools: Mutex<Option<String>>,
    sweep: Arc<Sweep>,
    /// A 2025 session to the same server beside this one (see
    /// `legacy_session`): its calls are drained, cancelled and closed
    /// with this session's.
    beside: Mutex<Option<Arc<Session>>>,
}

/// What opening a session needs.
pub struct Handshake {
    /// The revision tried first.
    pub first: RevisionId,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Where the server's own requests go, with the server's id.
    pub requests: Option<(crate::model::ServerId, Arc<dyn ServerRequestHandler>)>,
    /// The server's health record, if it is monitored.
    pub vitals: Option<Arc<super::vitals::Vitals>>,
}

/// The session while it opens: it alone owns the link, and answers the
/// server's requests meanwhile.
struct Opener<'a> {
    session: &'a Session,
    replies: &'a mut mpsc::Receiver<Bytes>,
}

impl revision::Opening for Opener<'_> {
    fn ask<'a>(
        &'a mut self,
        method: &'a str,
        params: Option<Value>,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Value, RpcError>> {
        Box::pin(async move {
            let (session, replies) = (self.session, &mut *self.replies);
            let forward_replies = async {
                while let Some(reply) = replies.recv().await {
                    let _ = session.link.send(reply).await;
                }
                std::future::pending::<()>().await
            };
            // No sweeper runs before the session is open: the timeout is
            // kept here (a server that ignores a method it does not know,
            // `server/discover`, must not hold the whole connect).
            let asked = tokio::time::timeout(
                timeout,
                session.request_with_timeout(method, params, timeout),
            );
            tokio::select! {
                result = asked => result.unwrap_or(Err(RpcError::Timeout(timeout))),
                () = forward_replies => unreachable!("pending never resolves"),
            }
        })
    }

    fn tell<'a>(
        &'a mut self,
        method: &'a str,
        params: Option<Value>,
    ) -> BoxFuture<'a, Result<(), RpcError>> {
        Box::pin(self.session.notify(method, params))
    }

    fn link(&self) -> &Link {
        &self.session.link
    }
}

impl Session {
    /// Opens the session on a freshly opened link, in the newest revision
    /// both sides speak (from `handshake.first`).
    pub async fn start(
        server: &str,
        link: Link,
        inbound: mpsc::Receiver<super::transport::Received>,
        events: EventSender,
        handshake: Handshake,
    ) -> Result<Arc<Session>, RpcError> {
        let pending: Arc<Pending> = Arc::new(Mutex::new(HashMap::new()));
        let calls = Arc::new(CallRoutes::default());
        let closed = CancellationToken::new();
        let mut session = Session {
            server: server.to_owned(),
            link,
            next_id: AtomicU64::new(1),
            pending: Arc::clone(&pending),
            calls: Arc::clone(&calls),
            closed: closed.clone(),
            initialize_result: Value::Null,
            request_timeout: handshake.request_timeout,
            revision: revision::unopened(),
            list_ttls: Mutex::new(HashMap::new()),
            vitals: handshake.vitals.clone(),
            unstored_tools: Mutex::new(None),
            sweep: Arc::default(),
            beside: Mutex::new(None),
        };
        // The dispatcher needs to answer the server's requests (ping) while
        // we are still opening, so it starts first and owns a sender.
        // Bounded: a server that floods requests without reading our
        // replies loses replies, not our memory.
        let (reply_tx, mut reply_rx) = mpsc::channel::<Bytes>(crate::limits::PROGRESS_QUEUE);
        tokio::spawn(
            super::dispatch::Dispatcher {
                server: server.to_owned(),
                pending: Arc::clone(&pending),
                calls,
                events,
                replies: reply_tx,
                link_closed: session.link.state().token(),
                closed: closed.clone(),
                requests: handshake.requests.clone(),
                asking: Arc::new(tokio::sync::Semaphore::new(SERVER_REQUESTS_IN_FLIGHT)),
                vitals: handshake.vitals.clone(),
            }
            .run(inbound),
        );
        let offer = revision::Offer {
            server,
            // We can pass the server's requests on to our clients.
            capabilities: if handshake.requests.is_some() {
                json!({"roots": {"listChanged": false}, "sampling": {}, "elicitation": {}})
            } else {
                json!({})
            },
            connect_timeout: handshake.connect_timeout,
        };
        let mut opener = Opener {
            session: &session,
            replies: &mut reply_rx,
        };
        match revision::negotiate(&mut opener, handshake.first, &offer).await {
            Ok((_, described)) if crate::model::instance::is_own_answer(&described) => {
                session.link.close().await;
                return Err(RpcError::Malformed(
                    "this server is this mcp-aggregator itself (its own `stdio` or `/mcp`): an aggregator cannot be its own server; remove this registration".into(),
                ));
            }
            Ok((revision, described)) => {
                session.revision = revision;
                session.initialize_result = described;
            }
            Err(err) => {
                session.link.close().await;
                return Err(err);
            }
        }
        // List changes that come on a subscription are listened for now.
        session.listen().await;
        let session = Arc::new(session);
        super::pending::spawn_sweeper(
            Arc::downgrade(&session),
            Arc::clone(&session.sweep),
            session.closed.clone(),
        );
        // From now on replies to the server's requests go straight out.
        let weak = Arc::downgrade(&session);
        tokio::spawn(async move {
            while let Some(reply) = reply_rx.recv().await {
                let Some(session) = weak.upgrade() else { break };
                let _ = session.link.send(reply).await;
            }
        });
        Ok(session)
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The server's `initialize` result (capabilities, serverInfo, …).
    pub fn initialize_result(&self) -> &Value {
        &self.initialize_result
    }

    pub fn protocol_version(&self) -> &str {
        self.initialize_result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Whether the server declared a capability (`tools`, `resources`, …).
    pub fn has_capability(&self, name: &str) -> bool {
        self.initialize_result
            .get("capabilities")
            .and_then(|c| c.get(name))
            .is_some_and(|c| !c.is_null())
    }

    pub fn pid(&self) -> Option<u32> {
        self.link.pid()
    }

    /// Keeps list changes coming from a server whose revision sends them
    /// only on a subscription (answered only when the server ends it, so
    /// nobody waits for it); its notifications arrive like any others.
    pub(super) async fn listen(&self) {
        let Some((method, params)) = self.revision.change_listen() else {
            return;
        };
        if let Err(err) = self
            .open_unanswered(revision::LISTEN_ID, method, params)
            .await
        {
            tracing::warn!(server = %self.server, "cannot subscribe to list changes: {err}");
        }
    }

    /// Sends a request nobody waits for (its answer comes when the server
    /// ends the subscription it opens).
    async fn open_unanswered(&self, id: u64, method: &str, params: Value) -> Result<(), RpcError> {
        let message = jsonrpc::request(id, method, Some(params));
        let bytes = line(&message).map_err(|err| RpcError::Unsendable(err.to_string()))?;
        self.link.send(Bytes::from(bytes)).await?;
        Ok(())
    }

    /// Subscribes to (or unsubscribes from) a resource's updates, the way
    /// the server's revision does it.
    pub async fn resource_subscription(
        &self,
        uri: &str,
        subscribe: bool,
    ) -> Result<Value, RpcError> {
        let fresh_id = || self.next_id.fetch_add(1, Ordering::Relaxed);
        match self
            .revision
            .resource_subscription(uri, subscribe, &fresh_id)
        {
            Subscription::Ask { method, params } => {
                return self.request(method, Some(params)).await;
            }
            Subscription::Listen { id, method, params } => {
                self.open_unanswered(id, method, params).await?;
                if let Some(replaced) = self.revision.subscribed(uri, id) {
                    self.cancel_listen(replaced).await;
                }
            }
            Subscription::Unlisten { id: Some(id) } => self.cancel_listen(id).await,
            Subscription::Unlisten { id: None } => {}
        }
        Ok(json!({}))
    }

    async fn cancel_listen(&self, id: u64) {
        let _ = self
            .notify(
                "notifications/cancelled",
                Some(json!({"requestId": id, "reason": "unsubscribed"})),
            )
            .await;
    }

    /// Notes how long the server said a list stays fresh.
    pub(super) fn note_list_ttl(&self, method: &str, ttl_ms: u64) {
        if let Ok(mut ttls) = self.list_ttls.lock() {
            ttls.insert(method.to_owned(), ttl_ms);
        }
    }

    /// Notes how a listing of the server's tools went, for the health
    /// figures (a failure leaves the stored tools as they were, which alone
    /// would not say why they are old or missing).
    /// Records whether the server's latest tool list was stored (`None`)
    /// or why not.
    pub fn tools_stored(&self, error: Option<String>) {
        if let Ok(mut unstored) = self.unstored_tools.lock() {
            *unstored = error;
        }
    }

    /// Why the server's latest tool list is not stored, if it is not.
    pub fn tools_unstored(&self) -> Option<String> {
        self.unstored_tools.lock().ok().and_then(|u| u.clone())
    }

    pub fn tools_listed(&self, error: Option<String>) {
        if let Some(vitals) = &self.vitals {
            vitals.listed(error);
        }
    }

    /// When to list again a server that cannot say its lists changed: the
    /// shortest `ttlMs` it gave for a list whose capability has no
    /// `listChanged` (within a second and a day); none when every list it
    /// gave a lifetime for announces its changes, or it gave none (`0`
    /// means "do not cache", not "poll").
    pub fn relist_after(&self) -> Option<Duration> {
        let ttls = self.list_ttls.lock().ok()?;
        ttls.iter()
            .filter(|(_, ttl)| **ttl > 0)
            .filter(|(method, _)| {
                let capability = method.split('/').next().unwrap_or_default();
                !self
                    .initialize_result
                    .get("capabilities")
                    .and_then(|c| c.get(capability))
                    .and_then(|c| c.get("listChanged"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            })
            .map(|(_, ttl)| Duration::from_millis(*ttl))
            .min()
            .map(|ttl| ttl.clamp(Duration::from_secs(1), Duration::from_secs(86_400)))
    }

    /// The request that asks the server whether it is alive.
    pub fn liveness_method(&self) -> &'static str {
        self.revision.liveness_method()
    }

    /// Whether a call's arguments mirrored into `Mcp-Param-*` headers go
    /// with it (then the caller builds them).
    pub fn mirrors_param_headers(&self) -> bool {
        self.revision.mirrors_param_headers()
    }

    /// Whether the server may ask its client for input inside a result
    /// (an input-required result).
    pub fn asks_in_results(&self) -> bool {
        self.revision.asks_in_results()
    }

    /// Whether the server keeps this session for us over Streamable HTTP
    /// (it gave an `Mcp-Session-Id`), so it can ask its client questions
    /// in it.
    pub fn is_http_session(&self) -> bool {
        self.link.is_http_session()
    }

    /// Whether this session speaks to a server over Streamable HTTP.
    pub fn is_http(&self) -> bool {
        matches!(self.link, Link::Http(_))
    }

    /// Sends a request and waits for its result (default timeout).
    pub async fn request(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        self.request_with_timeout(method, params, self.request_timeout)
            .await
    }

    /// `request`, the result left as the server's text (read as far as
    /// the caller needs: a list's items one by one).
    pub async fn request_raw(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Box<RawValue>, RpcError> {
        self.send_request(
            method,
            params.map(Json::Tree),
            None,
            self.request_timeout,
            &[],
        )
        .await
    }

    /// A result as a tree (a request whose result we read ourselves).
    pub fn tree(result: Result<Box<RawValue>, RpcError>) -> Result<Value, RpcError> {
        jsonrpc::parse(&result?).map_err(|err| RpcError::Malformed(err.to_string()))
    }

    /// Sends a request made for a client: the server is told what its
    /// revision carries of the client (a 2026-07-28 server: the client's
    /// capabilities and log level instead of ours) and, if the revision
    /// mirrors them, `headers` (a call's `Mcp-Param-*` headers, over HTTP).
    /// Params written as text (a call's arguments as the client wrote them)
    /// are sent as they are where the revision adds nothing. The result is
    /// the server's text, for the client.
    pub async fn request_for(
        &self,
        caller: &Caller,
        method: &str,
        params: Option<Json>,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, RpcError> {
        let headers = if self.revision.mirrors_param_headers() {
            headers
        } else {
            &[]
        };
        self.request_traced(method, params, Some(caller), headers)
            .await
    }

    async fn request_traced(
        &self,
        method: &str,
        params: Option<Json>,
        caller: Option<&Caller>,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, RpcError> {
        use tracing::Instrument as _;
        // Exported only when traces are on (`logging::TRACE_TARGET`).
        let span = tracing::trace_span!(
            target: "mcp_aggregator::otel",
            "server request",
            otel.kind = "client",
            server = %self.server,
            rpc.method = method,
        );
        self.request_measured(method, params, caller, headers)
            .instrument(span)
            .await
    }

    async fn request_measured(
        &self,
        method: &str,
        params: Option<Json>,
        caller: Option<&Caller>,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, RpcError> {
        let Some(vitals) = &self.vitals else {
            return self
                .send_request(method, params, caller, self.request_timeout, headers)
                .await;
        };
        let sent = std::time::Instant::now();
        let outcome = self
            .send_request(method, params, caller, self.request_timeout, headers)
            .await;
        vitals.record_call(sent.elapsed(), &outcome);
        outcome
    }

    /// Sends a request; if this future is dropped before the answer, the
    /// server is told with `notifications/cancelled`.
    pub async fn request_with_timeout(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        Session::tree(
            self.send_request(method, params.map(Json::Tree), None, timeout, &[])
                .await,
        )
    }

    async fn send_request(
        &self,
        method: &str,
        params: Option<Json>,
        caller: Option<&Caller>,
        timeout: Duration,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, RpcError> {
        if self.closed.is_cancelled() {
            return Err(RpcError::Closed(self.close_reason()));
        }
        let params = self.revision.envelope(params, caller)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(
                id,
                Waiter {
                    tx,
                    deadline: tokio::time::Instant::now() + timeout,
                    timeout,
                },
            );
        }
        self.sweep.request_sent();
        let mut guard = PendingGuard {
            session: self,
            id,
            armed: true,
        };
        let bytes = jsonrpc::request_line(id, method, params.as_ref())
            .map_err(|err| RpcError::Malformed(err.to_string()))?;
        let bytes = Bytes::from(bytes);
        // The sweeper answers `Timeout` when the deadline passes, and a
        // closed session answers every waiter: both while the request is
        // still being sent, too (an HTTP server that takes the POST and
        // never answers it would otherwise hold the call for ever).
        let mut rx = rx;
        let sent = self.link.send_with_headers(bytes, headers);
        tokio::pin!(sent);
        let answered = tokio::select! {
            sent = &mut sent => {
                if let Err(err) = sent {
                    guard.disarm();
                    return Err(err.into());
                }
                (&mut rx).await
            }
            answered = &mut rx => answered,
        };
        let outcome = match answered {
            Ok(result) => result,
            Err(_) => Err(RpcError::Closed(self.close_reason())),
        };
        guard.answered();
        outcome
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), RpcError> {
        let message = jsonrpc::notification(method, params);
        let bytes =
            Bytes::from(line(&message).map_err(|err| RpcError::Unsendable(err.to_string()))?);
        self.link.send(bytes).await.map_err(Into::into)
    }

    /// Routes a call's notifications to `sink` until the guard drops: the
    /// server's log messages while it runs and, when the client asked for
    /// progress with `client_token`, its progress (under the token returned
    /// here, which goes on the request instead of the client's). The
    /// dispatcher hands them over before the call's answer, in order.
    pub fn route_call(
        &self,
        sink: Arc<dyn CallSink>,
        client_token: Option<Value>,
    ) -> (Option<Value>, CallGuard) {
        self.calls.route(sink, client_token)
    }

    /// Requests still waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Keeps `other` (a 2025 session to the same server) with this one:
    /// drained, cancelled and closed with it.
    pub(super) fn keep_beside(&self, other: Arc<Session>) {
        if let Ok(mut slot) = self.beside.lock() {
            *slot = Some(other);
        }
    }

    fn beside(&self) -> Option<Arc<Session>> {
        self.beside.lock().ok().and_then(|slot| slot.clone())
    }

    /// Waits until no request is in flight (here and in the session
    /// beside), or `timeout` passes; returns how many are still waiting.
    pub async fn drain(&self, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        let beside = self.beside();
        loop {
            let left = self.in_flight() + beside.as_ref().map_or(0, |b| b.in_flight());
            if left == 0 || tokio::time::Instant::now() >= deadline || self.closed.is_cancelled() {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Fails every request in flight (here and in the session beside) and
    /// tells the server to stop them.
    pub fn cancel_all(&self, reason: &str) -> usize {
        let drained: Vec<_> = self
            .pending
            .lock()
            .map(|mut p| p.drain().collect())
            .unwrap_or_default();
        let count = drained.len();
        for (id, waiter) in drained {
            self.send_cancelled(id, reason);
            let _ = waiter.tx.send(Err(RpcError::Closed(reason.to_owned())));
        }
        count + self.beside().map_or(0, |b| b.cancel_all(reason))
    }

    fn send_cancelled(&self, id: u64, reason: &str) {
        let message = jsonrpc::notification(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": reason})),
        );
        if let Ok(bytes) = line(&message) {
            self.link.send_detached(Bytes::from(bytes));
        }
    }

    /// Resolves when the session is dead (the link closed or was lost).
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    pub fn close_reason(&self) -> String {
        self.link.state().reason()
    }

    /// Closes the link (for stdio: terminates and reaps the process group),
    /// and the session beside it.
    pub async fn close(&self) {
        let beside = self.beside.lock().ok().and_then(|mut slot| slot.take());
        if let Some(beside) = beside {
            // It has none beside it: its own link, closed.
            beside.link.close().await;
            beside.closed.cancel();
        }
        self.link.close().await;
        self.closed.cancel();
    }
}

/// Removes a request's entry if it ends without an answer, and tells the
/// server the request is abandoned.
struct PendingGuard<'a> {
    session: &'a Session,
    id: u64,
    armed: bool,
}

impl PendingGuard<'_> {
    fn answered(&mut self) {
        self.armed = false;
    }

    fn disarm(&mut self) {
        if let Ok(mut pending) = self.session.pending.lock() {
            pending.remove(&self.id);
        }
        self.armed = false;
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let removed = self
            .session
            .pending
            .lock()
            .map(|mut p| p.remove(&self.id).is_some())
            .unwrap_or(false);
        if removed && !self.session.closed.is_cancelled() {
            self.session
                .send_cancelled(self.id, "the request was abandoned by the client");
        }
    }
}

impl Swept for Session {
    fn is_closed(&self) -> bool {
        Session::is_closed(self)
    }

    /// Answers `Timeout` to every request past its deadline, and tells the
    /// server to stop working on them.
    fn expire_overdue(&self) {
        for (id, waiter) in super::pending::take_overdue(&self.pending) {
            self.send_cancelled(id, "the request timed out");
            let _ = waiter.tx.send(Err(RpcError::Timeout(waiter.timeout)));
        }
    }

    fn in_flight(&self) -> usize {
        Session::in_flight(self)
    }
}
