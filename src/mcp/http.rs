//! MCP over Streamable HTTP at `/mcp`: `initialize` opens a session
//! (`Mcp-Session-Id`), POSTs carry requests (answered as JSON, or as an SSE
//! stream when the call reports progress), GET opens the stream of
//! notifications, DELETE ends the session. `Origin`, `Host` and the content
//! type are checked by the listener's guard (`api::guard`) before any of this.

use crate::jsonrpc::{self, Outgoing, REQUEST_CANCELLED};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde_json::Value;
use std::future::Future as _;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::incoming::Incoming;
use super::outbound::Outbound;
use super::session_table::{InUse, SessionLimits, SessionTable, TableFull};
use super::{ClientConnection, FrontDoor, revision};
use crate::http_error::HttpError;

pub const SESSION_HEADER: &str = "mcp-session-id";

/// One HTTP client session.
struct HttpSession {
    connection: Arc<ClientConnection>,
    /// Notifications waiting for a GET stream, lent to the open one and
    /// back here when it ends; bounded, so a client that never opens one
    /// costs a bounded queue.
    notifications: Mutex<Option<mpsc::Receiver<Outgoing>>>,
    /// Ends the open GET stream: a client whose stream dropped opens a new
    /// one, and the server may not have noticed the old one is gone.
    open_stream: Mutex<Option<CancellationToken>>,
    /// Told when a stream gives the notifications back.
    stream_ended: Notify,
    notifier: tokio::task::AbortHandle,
}

/// The session's notifications, lent to its GET stream. Given back when
/// the stream ends (its connection closed, or a newer GET took over), so
/// no notification is lost in between and the client can open another.
struct LentNotifications {
    receiver: Option<mpsc::Receiver<Outgoing>>,
    session: Weak<HttpSession>,
    superseded: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    _open: InUse,
    /// Ends the watch for the token's revocation with the stream.
    _watched: tokio_util::sync::DropGuard,
}

impl futures_util::Stream for LentNotifications {
    type Item = Outgoing;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Outgoing>> {
        if self.superseded.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        match self.receiver.as_mut() {
            Some(receiver) => receiver.poll_recv(cx),
            None => Poll::Ready(None),
        }
    }
}

impl Drop for LentNotifications {
    fn drop(&mut self) {
        let Some(session) = self.session.upgrade() else {
            return;
        };
        // Nothing we send reaches the client until it opens a stream again.
        session.connection.set_accepts_requests(false);
        if let Ok(mut slot) = session.notifications.lock() {
            *slot = self.receiver.take();
        }
        session.stream_ended.notify_waiters();
    }
}

/// How long a new GET waits for the stream it replaces to give the
/// notifications back.
const STREAM_HANDOVER: Duration = Duration::from_secs(5);

impl Drop for HttpSession {
    fn drop(&mut self) {
        self.notifier.abort();
    }
}

/// The `/mcp` routes, for the daemon's HTTP listener; with `usage`, each
/// request counted in it while it is served (`--idle-exit`).
pub fn routes<S: Clone + Send + Sync + 'static>(
    mcp: McpHttp,
    usage: Option<super::http_use::HttpUse>,
) -> axum::Router<S> {
    let routes = axum::Router::new()
        .route("/mcp", axum::routing::post(post).get(get).delete(delete))
        .route(
            "/mcp/{profile}",
            axum::routing::post(post).get(get).delete(delete),
        )
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::limits::max_message_bytes(),
        ));
    let routes = match usage {
        Some(usage) => routes.layer(axum::middleware::from_fn_with_state(
            usage,
            super::http_use::count,
        )),
        None => routes,
    };
    routes.with_state(mcp)
}

/// The `/mcp` endpoint's state.
#[derive(Clone)]
pub struct McpHttp {
    server: Arc<FrontDoor>,
    sessions: Arc<SessionTable<HttpSession>>,
    /// Names of tokens revoked: the streams opened with one end.
    revoked: Option<tokio::sync::broadcast::Sender<Arc<str>>>,
}

impl McpHttp {
    /// `replica`: this replica's id when several share a store (its
    /// sessions' ids start with it).
    pub fn new(server: Arc<FrontDoor>, limits: SessionLimits, replica: Option<&str>) -> McpHttp {
        let table = SessionTable::new(limits);
        let table = match replica {
            Some(id) => table.of_replica(id),
            None => table,
        };
        McpHttp {
            server,
            sessions: Arc::new(table),
            revoked: None,
        }
    }

    /// Whether `/mcp` has a client: a session open, a request parked for
    /// a client's retry, or (counted in `usage`) a request under way or
    /// one within `idle`.
    pub fn in_use_within(&self, usage: &super::http_use::HttpUse, idle: Duration) -> bool {
        !self.sessions.is_empty() || self.server.has_parked_requests() || usage.busy_within(idle)
    }

    /// Ends the streams a token holds open once it is revoked (its
    /// requests are refused at once already).
    pub fn ending_streams_on(
        mut self,
        revoked: tokio::sync::broadcast::Sender<Arc<str>>,
    ) -> McpHttp {
        self.revoked = Some(revoked);
        self
    }

    /// Cancels `end` when `token` is revoked; stops watching once `done`
    /// is cancelled (the stream is gone).
    fn end_on_revocation(
        &self,
        token: Option<&crate::model::TokenName>,
        end: CancellationToken,
        done: CancellationToken,
    ) {
        let (Some(revoked), Some(token)) = (&self.revoked, token) else {
            return;
        };
        let mut revoked = revoked.subscribe();
        let name = Arc::clone(&token.0);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = done.cancelled() => return,
                    next = revoked.recv() => match next {
                        Ok(gone) if gone == name => {
                            end.cancel();
                            return;
                        }
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                }
            }
        });
    }

    /// The answer to a request for a session this process does not have:
    /// 404, as the spec says (the client initializes again), saying which
    /// replica has it when it is another's.
    fn unknown_session(&self, id: &str) -> HttpError {
        let detail = self
            .sessions
            .elsewhere(id)
            .unwrap_or_else(|| "unknown or expired MCP session".to_owned());
        HttpError::new(StatusCode::NOT_FOUND, detail)
    }

    /// Expires idle sessions until `shutdown`.
    pub fn spawn_expiry(&self, shutdown: tokio_util::sync::CancellationToken) {
        let sessions = Arc::clone(&self.sessions);
        let every = (sessions.limits().idle_timeout / 4)
            .clamp(Duration::from_millis(250), Duration::from_secs(60));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = shutdown.cancelled() => break,
                }
                let expired = sessions.expire(std::time::Instant::now());
                if expired > 0 {
                    tracing::info!(expired, "idle MCP sessions expired");
                }
            }
        });
    }

    /// The session a request names, if the token it comes with is the
    /// one that opened it: another token's request finds no such session
    /// (its audit entries would name the wrong token, and a revoked token's
    /// session would live on under another).
    fn session(
        &self,
        headers: &HeaderMap,
        token: Option<&crate::model::TokenName>,
    ) -> Result<(Arc<HttpSession>, InUse), HttpError> {
        let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
            return Err(HttpError::new(
                StatusCode::BAD_REQUEST,
                "missing Mcp-Session-Id header; send initialize first",
            ));
        };
        self.sessions
            .get(id)
            .filter(|(session, _)| {
                session.connection.token.get().map(|t| &**t) == token.map(|t| &*t.0)
            })
            .ok_or_else(|| self.unknown_session(id))
    }

    fn open_session(
        &self,
        remote: IpAddr,
        token: Option<&crate::model::TokenName>,
        profile: Option<&str>,
    ) -> Result<(String, Arc<HttpSession>, InUse), HttpError> {
        let (outbound, notifications) = Outbound::for_client();
        let connection = ClientConnection::new(Arc::new(outbound));
        if let Some(profile) = profile {
            connection.set_profile(profile);
        }
        // Until the client opens its GET stream, nothing we send reaches it.
        connection.set_accepts_requests(false);
        let notifier = tokio::spawn(super::subscriptions::forward_list_changes(
            self.server.router().clone(),
            Arc::clone(&connection),
        ));
        let session = Arc::new(HttpSession {
            connection,
            notifications: Mutex::new(Some(notifications)),
            open_stream: Mutex::new(None),
            stream_ended: Notify::new(),
            notifier: notifier.abort_handle(),
        });
        // Local clients share one address: with named tokens, each token
        // is a client of its own, and one cannot crowd out the others.
        let client = match token {
            Some(token) => super::session_table::ClientKey::token(&token.0),
            None => remote.into(),
        };
        match self.sessions.insert(client, Arc::clone(&session)) {
            Ok((id, in_use)) => Ok((id, session, in_use)),
            Err(full) => {
                let status = match full {
                    TableFull::Client(_) => StatusCode::TOO_MANY_REQUESTS,
                    TableFull::Total(_) => StatusCode::SERVICE_UNAVAILABLE,
                };
                Err(HttpError::new(status, full.to_string()))
            }
        }
    }
}

/// The peer's address (loopback when the listener did not record one).
pub struct RemoteIp(pub IpAddr);

/// The profile a request names (`/mcp/{profile}`, or `/mcp?profile=`): the
/// client sees that view only. Checked to be a name here; to exist where a
/// view starts (a session opened, a request without one), so a session
/// whose profile was removed since goes on seeing nothing, not 404s.
pub struct PickedProfile(Option<Arc<str>>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for PickedProfile {
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<PickedProfile, HttpError> {
        let in_path = parts
            .uri
            .path()
            .strip_prefix("/mcp/")
            .filter(|name| !name.is_empty())
            .map(str::to_owned);
        let mut named: Vec<String> = in_path.into_iter().collect();
        if let Some(query) = parts.uri.query() {
            named.extend(
                url::form_urlencoded::parse(query.as_bytes())
                    .filter(|(key, _)| key == "profile")
                    .map(|(_, value)| value.into_owned()),
            );
        }
        // As the client wrote it, cut short: a name can be a whole URL.
        let shown = |name: &str| format!("{:?}", name.chars().take(80).collect::<String>());
        named.dedup();
        let name = match named.as_slice() {
            [] => return Ok(PickedProfile(None)),
            [one] => one.clone(),
            [first, second, ..] => {
                return Err(HttpError::new(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "the request names profiles {} and {}: name one",
                        shown(first),
                        shown(second)
                    ),
                ));
            }
        };
        crate::model::profile::validate_profile_name(&name).map_err(|err| {
            HttpError::new(
                StatusCode::BAD_REQUEST,
                format!("profile {}: {err}", shown(&name)),
            )
        })?;
        Ok(PickedProfile(Some(Arc::from(name))))
    }
}

impl PickedProfile {
    /// For a view that starts here: the profile must exist (404).
    async fn check_exists(&self, mcp: &McpHttp) -> Result<(), HttpError> {
        match &self.0 {
            Some(name) => mcp
                .server
                .router()
                .check_profile(name)
                .await
                .map_err(|err| HttpError::new(StatusCode::NOT_FOUND, err.to_string())),
            None => Ok(()),
        }
    }

    /// A session stays in the view it was opened in; a request naming
    /// another is refused.
    fn check_session(&self, connection: &ClientConnection) -> Result<(), HttpError> {
        match (&self.0, connection.profile()) {
            (Some(asked), session) if session != Some(&**asked) => Err(HttpError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "this session was opened {}, not in profile {asked:?}",
                    session.map_or("without a profile".to_owned(), |p| format!(
                        "in profile {p:?}"
                    ))
                ),
            )),
            _ => Ok(()),
        }
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for RemoteIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let ip = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map_or(IpAddr::from([127, 0, 0, 1]), |info| info.0.ip());
        Ok(RemoteIp(ip))
    }
}

/// The request's headers, taken instead of cloned (axum's `HeaderMap`
/// extractor clones them for every request): the extractors after it in
/// `post` read only the body and the extensions.
pub struct TakenHeaders(pub HeaderMap);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for TakenHeaders {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(TakenHeaders(std::mem::take(&mut parts.headers)))
    }
}

/// A request as read: id, method, params, a call's arguments as text.
type RequestParts = (
    Value,
    String,
    Option<Value>,
    Option<Box<serde_json::value::RawValue>>,
);

/// `POST /mcp`.
pub async fn post(
    State(mcp): State<McpHttp>,
    RemoteIp(remote): RemoteIp,
    token: Option<axum::Extension<crate::model::TokenName>>,
    picked: PickedProfile,
    TakenHeaders(headers): TakenHeaders,
    body: Bytes,
) -> Response {
    let parsed = super::incoming::parse(&body);
    // The body shares the connection's read buffer: released now, the
    // buffer is reused for the next request instead of allocated again.
    drop(body);
    let (batch, messages) = match parsed {
        Ok(parsed) => parsed.into_messages(),
        Err(err) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(super::incoming::parse_error(&err.to_string())),
            )
                .into_response();
        }
    };
    let mut requests = Vec::new();
    let mut others = Vec::new();
    let mut answers = Vec::new();
    for message in messages {
        match message {
            Incoming::Request {
                id,
                method,
                params,
                arguments,
            } => requests.push((id, method, params, arguments)),
            Incoming::Other(message) => others.push(message),
            Incoming::Invalid(answer) => answers.push(answer),
        }
    }
    if requests.is_empty() && others.is_empty() {
        // Nothing valid: the errors need no session.
        let body = if batch && answers.is_empty() {
            super::incoming::invalid_request("an empty batch")
        } else if batch {
            Value::Array(answers)
        } else {
            answers.pop().unwrap_or(Value::Null)
        };
        return axum::Json(body).into_response();
    }
    let says_stateless = requests
        .iter()
        .any(|(_, _, params, _)| revision::is_stateless(params.as_ref()));
    let is_initialize = !says_stateless
        && requests
            .iter()
            .any(|(_, method, _, _)| method == "initialize");
    // A request that says it speaks the 2026-07-28 revision, or one with no
    // session that is not an initialize: served statelessly, as that
    // revision asks.
    let stateless =
        !batch && (says_stateless || (!is_initialize && headers.get(SESSION_HEADER).is_none()));
    let speaks_2026 = says_stateless
        || others
            .iter()
            .any(|message| revision::is_stateless(message.get("params")))
        || revision::header_is_stateless(&headers);
    if batch && speaks_2026 {
        // That revision has no batches; told so rather than checked as a
        // 2025 session's request it never was.
        let answer = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": crate::jsonrpc::INVALID_REQUEST,
                "message": "Bad Request: the 2026-07-28 revision has no batches; send each request in its own POST",
            },
        });
        return (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response();
    }
    if stateless {
        if let Err(err) = picked.check_exists(&mcp).await {
            return err.into_response();
        }
        return stateless_post(
            &mcp,
            &headers,
            picked,
            token.as_deref(),
            requests,
            others,
            answers,
        )
        .await;
    }
    // `in_use` keeps the session from expiring or being evicted while
    // this request runs (and, for a stream, while the stream is open).
    let (session_id, session, in_use) = if is_initialize {
        if let Err(err) = picked.check_exists(&mcp).await {
            return err.into_response();
        }
        match mcp.open_session(remote, token.as_deref(), picked.0.as_deref()) {
            Ok((id, session, in_use)) => {
                session.connection.set_token(token.as_deref());
                (Some(id), session, in_use)
            }
            Err(err) => return err.into_response(),
        }
    } else {
        if let Some(refused) = unsupported_version_header(&headers) {
            return refused;
        }
        match mcp.session(&headers, token.as_deref()) {
            Ok((session, in_use)) => (None, session, in_use),
            Err(err) => return err.into_response(),
        }
    };
    if let Err(err) = picked.check_session(&session.connection) {
        return err.into_response();
    }
    let connection = Arc::clone(&session.connection);
    for message in &others {
        mcp.server.handle_other(&connection, message);
    }
    if requests.is_empty() && answers.is_empty() {
        return with_session(StatusCode::ACCEPTED.into_response(), session_id);
    }

    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let reports_progress = requests.iter().any(|(_, _, params, _)| {
        params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .is_some()
    });
    // A call may bring the client a server's request or log messages: they
    // go on the call's own stream, which the client is reading for the
    // answer anyway, instead of racing the opening of its GET stream.
    let may_hear_from_server = requests
        .iter()
        .any(|(_, method, _, _)| method == "tools/call")
        && (connection.hears_logs()
            || ["sampling", "elicitation", "roots"]
                .iter()
                .any(|capability| connection.supports(capability)));

    if wants_stream && (reports_progress || may_hear_from_server) && !batch {
        // Progress goes out on this response's stream, then the answer.
        let (tx, rx) = Outbound::for_client();
        let tx = Arc::new(tx);
        let stream_connection = connection.for_stream(Arc::clone(&tx));
        let server = Arc::clone(&mcp.server);
        for (id, method, params, arguments) in requests {
            let (server, tx, per_call) = (
                Arc::clone(&server),
                Arc::clone(&tx),
                Arc::clone(&stream_connection),
            );
            let tracked = Arc::clone(&connection);
            let cancelled = connection.begin(&id);
            tokio::spawn(async move {
                let answer = tokio::select! {
                    answer = server.handle_request(&per_call, id.clone(), &method, params, arguments) => Some(answer),
                    () = cancelled.cancelled() => None,
                };
                tracked.end(&id);
                if let Some(answer) = answer {
                    tx.deliver(answer).await;
                }
            });
        }
        drop((tx, stream_connection));
        let events = ReceiverStream::new(rx).map(move |message| {
            let _open = &in_use;
            Ok::<_, std::convert::Infallible>(
                Event::default().event("message").data(message.to_string()),
            )
        });
        let response = Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response();
        return with_session(response, session_id);
    }

    let server = Arc::clone(&mcp.server);
    if !batch && let Some((id, method, params, arguments)) = requests.pop() {
        // One request, the usual case: answered without the batch's joins.
        // Registered like a streamed one, so `notifications/cancelled`
        // (on another POST) ends it here and on the server.
        let cancelled = connection.begin(&id);
        let answer = tokio::select! {
            answer = server.handle_request(&connection, id.clone(), &method, params, arguments) => answer,
            () = cancelled.cancelled() => Outgoing::Tree(jsonrpc::error(
                id.clone(),
                REQUEST_CANCELLED,
                "the request was cancelled",
            )),
        };
        connection.end(&id);
        return with_session(axum::Json(answer).into_response(), session_id);
    }
    let calls = requests.into_iter().map(|(id, method, params, arguments)| {
        let (server, connection) = (Arc::clone(&server), Arc::clone(&connection));
        async move {
            server
                .handle_request(&connection, id, &method, params, arguments)
                .await
        }
    });
    let mut answers: Vec<Outgoing> = answers.into_iter().map(Outgoing::from).collect();
    answers.extend(futures_util::future::join_all(calls).await);
    let response = if batch {
        axum::Json(answers).into_response()
    } else {
        axum::Json(answers.pop().unwrap_or(Outgoing::Tree(Value::Null))).into_response()
    };
    with_session(response, session_id)
}

/// How long a 2026-07-28 request that may stream waits for its answer
/// before its event stream starts: a request refused before it ran is
/// answered well within it, as plain JSON with its status.
const FIRST_ANSWER_WAIT: Duration = Duration::from_millis(250);

/// One POST without a session (2026-07-28): a single request answered as JSON, or as
/// an SSE stream when it will carry progress or log messages; a
/// notification is accepted (202). Headers are checked against the body.
async fn stateless_post(
    mcp: &McpHttp,
    headers: &HeaderMap,
    picked: PickedProfile,
    token: Option<&crate::model::TokenName>,
    requests: Vec<RequestParts>,
    others: Vec<Value>,
    mut answers: Vec<Value>,
) -> Response {
    let Some((id, method, params, arguments)) = requests.into_iter().next() else {
        if let Some(answer) = answers.pop() {
            return (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response();
        }
        // A notification: nothing in this revision needs one over HTTP.
        drop(others);
        return StatusCode::ACCEPTED.into_response();
    };
    let revision = revision::stateless();
    let checked = revision.check_headers(
        &mcp.server,
        headers,
        &method,
        params.as_ref(),
        arguments.as_deref(),
        picked.0.as_deref(),
    );
    if let Err(mismatch) = checked {
        let answer = crate::jsonrpc::error(id, crate::jsonrpc::HEADER_MISMATCH, &mismatch);
        return (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response();
    }
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    // A subscription is answered only when it ends: over a plain JSON
    // answer the client would wait for ever.
    if method == "subscriptions/listen" && !wants_stream {
        let answer = crate::jsonrpc::error(
            id,
            crate::jsonrpc::INVALID_REQUEST,
            "subscriptions/listen answers with an event stream: send Accept: text/event-stream",
        );
        return (StatusCode::NOT_ACCEPTABLE, axum::Json(answer)).into_response();
    }
    let (tx, rx) = Outbound::for_client();
    let tx = Arc::new(tx);
    let transport = ClientConnection::new(Arc::clone(&tx));
    transport.set_token(token);
    if let Some(profile) = &picked.0 {
        transport.set_profile(profile);
    }
    if wants_stream && revision.may_notify(&method, params.as_ref()) {
        // Closing the stream cancels the request.
        let cancelled = tokio_util::sync::CancellationToken::new();
        let on_close = cancelled.clone().drop_guard();
        // Ending: the stream's answer never comes and the stream closes.
        let revoked = CancellationToken::new();
        mcp.end_on_revocation(token, revoked.clone(), revoked.clone());
        let ended_by_revocation = revoked.clone().cancelled_owned();
        let watch_ends_with_stream = revoked.drop_guard();
        let server = Arc::clone(&mcp.server);
        let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let answer = tokio::select! {
                answer = server.handle_in(revision, &transport, id, &method, params, arguments) => answer,
                () = cancelled.cancelled() => return,
            };
            let _ = done_tx.send(answer);
        });
        // An answer ready at once, with nothing sent before it (a request
        // refused before it ran: unknown tool, bad version or log level)
        // goes as JSON with the status the revision gives it, as it would
        // without the stream; otherwise the stream starts, the answer last.
        if let Ok(Ok(answer)) = tokio::time::timeout(FIRST_ANSWER_WAIT, &mut done_rx).await {
            if rx.is_empty() {
                return (revision.http_status(&answer), axum::Json(answer)).into_response();
            }
            tx.deliver(answer).await;
        } else {
            tokio::spawn(async move {
                if let Ok(answer) = done_rx.await {
                    tx.deliver(answer).await;
                }
            });
        }
        let events = ReceiverStream::new(rx)
            .map(move |message| {
                let _cancel_on_close = &on_close;
                let _watch = &watch_ends_with_stream;
                Ok::<_, std::convert::Infallible>(
                    Event::default().event("message").data(message.to_string()),
                )
            })
            .take_until(ended_by_revocation);
        let mut response = Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response();
        response
            .headers_mut()
            .insert("x-accel-buffering", HeaderValue::from_static("no"));
        return response;
    }
    let answer = mcp
        .server
        .handle_in(revision, &transport, id, &method, params, arguments)
        .await;
    (revision.http_status(&answer), axum::Json(answer)).into_response()
}

/// A 2025 session's request whose `MCP-Protocol-Version` header names no
/// revision we speak: 400, as the transport asks (a header left out is
/// read as the session's own version).
fn unsupported_version_header(headers: &HeaderMap) -> Option<Response> {
    let value = headers.get("mcp-protocol-version")?;
    let named = value.to_str().map(str::trim).unwrap_or_default();
    if revision::SESSION_VERSIONS.contains(&named) {
        return None;
    }
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": crate::jsonrpc::INVALID_REQUEST,
            "message": format!(
                "Bad Request: unsupported MCP-Protocol-Version {:?} (this session's revisions: {})",
                String::from_utf8_lossy(value.as_bytes()),
                revision::SESSION_VERSIONS.join(", ")
            ),
        },
    });
    Some((StatusCode::BAD_REQUEST, axum::Json(answer)).into_response())
}

/// `GET /mcp`: the session's notification stream.
pub async fn get(
    State(mcp): State<McpHttp>,
    token: Option<axum::Extension<crate::model::TokenName>>,
    picked: PickedProfile,
    headers: HeaderMap,
) -> Response {
    if headers.get(SESSION_HEADER).is_none() {
        // The 2026-07-28 revision has no GET stream (subscriptions/listen
        // replaces it); a 2025 session names itself.
        return HttpError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET needs the Mcp-Session-Id of a 2025 session; 2026-07-28 clients use subscriptions/listen",
        )
        .into_response();
    }
    let (session, in_use) = match mcp.session(&headers, token.as_deref()) {
        Ok(found) => found,
        Err(err) => return err.into_response(),
    };
    if let Err(err) = picked.check_session(&session.connection) {
        return err.into_response();
    }
    let Some(receiver) = take_notifications(&session).await else {
        return HttpError::new(
            StatusCode::CONFLICT,
            "this session's notification stream did not end in time for a new one; try again",
        )
        .into_response();
    };
    let superseded = CancellationToken::new();
    if let Ok(mut open) = session.open_stream.lock() {
        *open = Some(superseded.clone());
    }
    let gone = CancellationToken::new();
    mcp.end_on_revocation(token.as_deref(), superseded.clone(), gone.clone());
    session.connection.set_accepts_requests(true);
    let lent = LentNotifications {
        receiver: Some(receiver),
        session: Arc::downgrade(&session),
        superseded: Box::pin(superseded.cancelled_owned()),
        // An open stream keeps the session alive.
        _open: in_use,
        _watched: gone.drop_guard(),
    };
    let events = lent.map(|message| {
        Ok::<_, std::convert::Infallible>(
            Event::default().event("message").data(message.to_string()),
        )
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The session's notifications for a new GET stream: at once when no
/// stream is open, else after the open one is ended and gives them back
/// (`None` if it does not within `STREAM_HANDOVER`).
async fn take_notifications(session: &HttpSession) -> Option<mpsc::Receiver<Outgoing>> {
    let take = || {
        session
            .notifications
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
    };
    if let Some(receiver) = take() {
        return Some(receiver);
    }
    if let Some(open) = session.open_stream.lock().ok().and_then(|mut o| o.take()) {
        open.cancel();
    }
    tokio::time::timeout(STREAM_HANDOVER, async {
        loop {
            // Registered before the check, so a hand-back in between is seen.
            let ended = session.stream_ended.notified();
            if let Some(receiver) = take() {
                return receiver;
            }
            ended.await;
        }
    })
    .await
    .ok()
}

/// `DELETE /mcp`: ends the session.
pub async fn delete(
    State(mcp): State<McpHttp>,
    token: Option<axum::Extension<crate::model::TokenName>>,
    headers: HeaderMap,
) -> Response {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return HttpError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "DELETE ends a 2025 session and needs its Mcp-Session-Id",
        )
        .into_response();
    };
    // Only its own token ends a session.
    if let Err(err) = mcp.session(&headers, token.as_deref()) {
        return err.into_response();
    }
    match mcp.sessions.remove(id) {
        true => StatusCode::NO_CONTENT.into_response(),
        false => mcp.unknown_session(id).into_response(),
    }
}

fn with_session(mut response: Response, session_id: Option<String>) -> Response {
    if let Some(id) = session_id
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}
