//! One MCP client session over a link: the initialize handshake, requests
//! matched to responses by id, notifications, cancellation of abandoned
//! requests, and the server's own requests and notifications. Messages stay
//! raw JSON end to end.

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::link::{INBOUND_CAPACITY, Link, LinkError};
use crate::jsonrpc;

/// The protocol version we ask for; servers answer with the one they speak.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Versions we know; another answer is accepted with a warning (we pass
/// messages through, so most differences do not matter to us).
pub const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless revision we speak to servers that have no `initialize`.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The id of a modern session's `subscriptions/listen` request, which is
/// never answered while the session lives (so never waited for). The
/// largest integer a JavaScript server can read exactly.
pub(super) const LISTEN_ID: u64 = (1 << 53) - 1;

/// Which protocol era a connection attempt speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Era {
    /// An `initialize` handshake (2024-11-05 … 2025-11-25).
    #[default]
    Legacy,
    /// No handshake: `server/discover`, then every request carries its
    /// protocol in `_meta` (2026-07-28).
    Modern,
}

impl Era {
    /// The era of a protocol version a server answered with (versions are
    /// dates, so they compare as strings).
    pub fn of_version(version: &str) -> Era {
        if version >= MODERN_VERSION {
            Era::Modern
        } else {
            Era::Legacy
        }
    }
}

/// A request's params: a tree, or JSON text sent as it is.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Params {
    Tree(Value),
    Text(Box<RawValue>),
}

impl Params {
    fn into_tree(self) -> Result<Value, RpcError> {
        match self {
            Params::Tree(tree) => Ok(tree),
            Params::Text(text) => {
                serde_json::from_str(text.get()).map_err(|err| RpcError::Malformed(err.to_string()))
            }
        }
    }
}

/// The client a request is made for, as a 2026-07-28 server is told in
/// each request's `_meta` (a 2025 server knows only the aggregator).
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The client's declared capabilities: a server asks only for input
    /// the client can give.
    /// Shared: a client's every call carries them.
    pub capabilities: Option<Arc<Value>>,
    /// The least severe log message the client wants; none: no logs.
    pub log_level: Option<&'static str>,
}

/// Why a request did not get a result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RpcError {
    /// The server answered with a JSON-RPC error.
    #[error("the server answered error {code}: {message}")]
    Server {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the session closed: {0}")]
    Closed(String),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("the server's answer is malformed: {0}")]
    Malformed(String),
}

impl RpcError {
    /// The JSON-RPC error object for this error (to pass on to a client).
    pub fn to_error_object(&self) -> Value {
        match self {
            RpcError::Server {
                code,
                message,
                data,
            } => {
                let mut error = json!({"code": code, "message": message});
                if let Some(data) = data {
                    error["data"] = data.clone();
                }
                error
            }
            other => jsonrpc::error_object(jsonrpc::INTERNAL_ERROR, &other.to_string(), None),
        }
    }

    pub fn is_method_not_found(&self) -> bool {
        matches!(
            self,
            RpcError::Server {
                code: jsonrpc::METHOD_NOT_FOUND,
                ..
            }
        )
    }
}

/// Answers the requests a server makes of its client (sampling,
/// elicitation, roots) — the front door forwards them to its own clients.
/// `Err` carries a JSON-RPC error object.
pub trait ServerRequestHandler: Send + Sync {
    fn handle(
        &self,
        server_id: crate::model::ServerId,
        method: String,
        params: Option<Value>,
    ) -> futures_util::future::BoxFuture<'static, Result<Value, Value>>;
}

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
    /// A 2026-07-28 server ended the subscription that brings list changes.
    ListenEnded,
}

/// The sending side of a session's events: bounded, so a server flooding
/// notifications costs a bounded queue. Notifications that find it full are
/// dropped; a list change that finds it full is remembered as a flag and
/// becomes one `EverythingChanged`, so no change is ever lost.
#[derive(Clone)]
pub struct EventSender {
    tx: mpsc::Sender<SessionEvent>,
    missed_change: Arc<std::sync::atomic::AtomicBool>,
}

/// The supervisor's side of a session's events.
pub struct EventReceiver {
    rx: mpsc::Receiver<SessionEvent>,
    missed_change: Arc<std::sync::atomic::AtomicBool>,
}

/// A bounded event channel for one session.
pub fn event_channel() -> (EventSender, EventReceiver) {
    let (tx, rx) = mpsc::channel(crate::limits::SERVER_NOTIFICATIONS);
    let missed_change = Arc::new(std::sync::atomic::AtomicBool::new(false));
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

/// A server's own requests (sampling, elicitation, roots) waiting on a
/// client at once; beyond that the server gets an error at once.
const SERVER_REQUESTS_IN_FLIGHT: usize = 64;

/// A request waiting for its answer, and when it stops waiting.
pub(super) struct Waiter {
    pub(super) tx: oneshot::Sender<Result<Box<RawValue>, RpcError>>,
    pub(super) deadline: tokio::time::Instant,
    pub(super) timeout: Duration,
}

pub(super) type Pending = Mutex<HashMap<u64, Waiter>>;

/// How often overdue requests are looked for. One timer per session instead
/// of one per request: registering a timer wakes the runtime's driver, a
/// whole extra epoll round on every call.
const TIMEOUT_SWEEP: Duration = Duration::from_millis(250);

/// The timeout sweeper's rest: with no request waiting it sleeps until the
/// next one is sent, so an idle session wakes nobody.
#[derive(Default)]
struct Sweep {
    parked: std::sync::atomic::AtomicBool,
    wake: tokio::sync::Notify,
}
/// Where a server's notifications about one call go, already in the
/// client's form: its progress, and the log messages it sends while the
/// call runs. A sink may drop what its client is too slow to take (it never
/// blocks the session); `send` is false once nobody listens any more.
pub trait CallSink: Send + Sync {
    fn send(&self, message: Value) -> bool;
}

/// A call under way that a client is waiting on.
pub(super) struct CallRoute {
    /// Our progress token on the request, and the client's it stands for.
    pub(super) progress: Option<(String, Value)>,
    pub(super) sink: Arc<dyn CallSink>,
}

const PROGRESS_PREFIX: &str = "mcp-aggregator-";

/// The route key a progress token of ours stands for.
pub(super) fn call_key(token: &str) -> Option<u64> {
    token.strip_prefix(PROGRESS_PREFIX)?.parse().ok()
}

/// The calls under way with a sink, by a key of our own.
pub(super) type CallRoutes = Mutex<HashMap<u64, CallRoute>>;

/// Keeps a call routed; dropping it stops the routing.
pub struct CallGuard {
    routes: Arc<CallRoutes>,
    key: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.remove(&self.key);
        }
    }
}

/// A live session with one server.
pub struct Session {
    server: String,
    link: Link,
    next_id: AtomicU64,
    pending: Arc<Pending>,
    calls: Arc<CallRoutes>,
    next_call: AtomicU64,
    closed: CancellationToken,
    initialize_result: Value,
    request_timeout: Duration,
    /// What a modern session adds to every request's `_meta` (the
    /// protocol version and our capabilities); none for a 2025 session.
    modern_meta: Option<serde_json::Map<String, Value>>,
    /// A modern session's resource subscriptions: the id of the
    /// `subscriptions/listen` request open for each URI.
    resource_listens: Mutex<HashMap<String, u64>>,
    /// How long the server said each list stays fresh (`ttlMs` of its
    /// last answer), by list method.
    list_ttls: Mutex<HashMap<String, u64>>,
    /// The server's health record: every message marks it alive, every
    /// request made for a client is counted.
    vitals: Option<Arc<super::health::Vitals>>,
    sweep: Arc<Sweep>,
}

/// A request of the handshake, the server's own requests answered
/// meanwhile (until the session is shared, it alone owns the link).
async fn handshake_request(
    session: &Session,
    replies: &mut mpsc::Receiver<Bytes>,
    method: &str,
    params: Option<Value>,
    timeout: Duration,
) -> Result<Value, RpcError> {
    let forward_replies = async {
        while let Some(reply) = replies.recv().await {
            let _ = session.link.send(reply).await;
        }
        std::future::pending::<()>().await
    };
    let result = tokio::select! {
        result = session.request_with_timeout(method, params, timeout) => result,
        () = forward_replies => unreachable!("pending never resolves"),
    };
    result
}

/// Whether a `server/discover` result names the revision we speak.
fn lists_modern(discovered: &Value) -> bool {
    discovered
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
}

/// Whether an unsupported-version error lists the revision we speak.
fn names_our_version(err: &RpcError) -> bool {
    matches!(err, RpcError::Server {
        code: jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
        data: Some(data),
        ..
    } if data
        .get("supported")
        .and_then(Value::as_array)
        .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION)))
}

/// Whether a failed `server/discover` probe shows a 2025 server: any
/// JSON-RPC error or HTTP 4xx refusal (a legacy server does not know the
/// method, or wants `initialize` first), a malformed answer, or silence —
/// except an unsupported-version error naming only revisions newer than
/// the 2025 ones, which is a 2026 server we cannot speak to.
fn says_legacy(err: &RpcError) -> bool {
    match err {
        RpcError::Server {
            code: jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
            data,
            ..
        } => data
            .as_ref()
            .and_then(|d| d.get("supported"))
            .and_then(Value::as_array)
            .is_none_or(|versions| {
                versions
                    .iter()
                    .any(|v| v.as_str().is_some_and(|v| KNOWN_VERSIONS.contains(&v)))
            }),
        RpcError::Server { .. } | RpcError::Timeout(_) | RpcError::Malformed(_) => true,
        RpcError::Link(LinkError::Status { status, .. }) => (400..500).contains(status),
        RpcError::Closed(_) | RpcError::Link(_) => false,
    }
}

/// What the handshake needs.
pub struct Handshake {
    pub era: Era,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Where the server's own requests go, with the server's id.
    pub requests: Option<(crate::model::ServerId, Arc<dyn ServerRequestHandler>)>,
    /// The server's health record, if it is monitored.
    pub vitals: Option<Arc<super::health::Vitals>>,
}

impl Session {
    /// Runs the initialize handshake on a freshly opened link.
    pub async fn start(
        server: &str,
        link: Link,
        inbound: mpsc::Receiver<Box<RawValue>>,
        events: EventSender,
        handshake: Handshake,
    ) -> Result<Arc<Session>, RpcError> {
        let pending: Arc<Pending> = Arc::new(Mutex::new(HashMap::new()));
        let calls: Arc<CallRoutes> = Arc::new(Mutex::new(HashMap::new()));
        let closed = CancellationToken::new();
        let mut session = Session {
            server: server.to_owned(),
            link,
            next_id: AtomicU64::new(1),
            pending: Arc::clone(&pending),
            calls: Arc::clone(&calls),
            next_call: AtomicU64::new(1),
            closed: closed.clone(),
            initialize_result: Value::Null,
            request_timeout: handshake.request_timeout,
            modern_meta: None,
            resource_listens: Mutex::new(HashMap::new()),
            list_ttls: Mutex::new(HashMap::new()),
            vitals: handshake.vitals.clone(),
            sweep: Arc::default(),
        };
        // The dispatcher needs to answer the server's requests (ping) while
        // we are still initializing, so it starts first and owns a sender.
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
        // We can pass the server's requests on to our clients.
        let capabilities = if handshake.requests.is_some() {
            json!({"roots": {"listChanged": false}, "sampling": {}, "elicitation": {}})
        } else {
            json!({})
        };
        let mut modern = false;
        if handshake.era == Era::Modern {
            session.link.set_protocol_version(MODERN_VERSION);
            let mut meta = serde_json::Map::new();
            meta.insert(
                "io.modelcontextprotocol/protocolVersion".to_owned(),
                json!(MODERN_VERSION),
            );
            meta.insert(
                "io.modelcontextprotocol/clientCapabilities".to_owned(),
                capabilities.clone(),
            );
            meta.insert(
                "io.modelcontextprotocol/clientInfo".to_owned(),
                json!({"name": "mcp-aggregator", "version": env!("CARGO_PKG_VERSION")}),
            );
            session.modern_meta = Some(meta);
            // The probe the spec's compatibility section describes: a
            // server that does not answer `server/discover` as a 2026-07-28
            // server is a 2025 one, asked to `initialize` on the same link.
            let probe_timeout = (handshake.connect_timeout / 3).max(Duration::from_millis(100));
            let mut asked = 0;
            let probe = loop {
                asked += 1;
                let probe = handshake_request(
                    &session,
                    &mut reply_rx,
                    "server/discover",
                    None,
                    probe_timeout,
                )
                .await;
                // A server that refuses the version it then names as
                // supported is asked once more, as the negotiation says.
                if asked == 1 && probe.as_ref().is_err_and(names_our_version) {
                    continue;
                }
                break probe;
            };
            match probe {
                Ok(discovered) if lists_modern(&discovered) => {
                    modern = true;
                    // Shaped as an initialize result, so the rest of the
                    // code asks one thing whatever the era.
                    session.initialize_result = json!({
                        "protocolVersion": MODERN_VERSION,
                        "capabilities": discovered.get("capabilities").cloned().unwrap_or(json!({})),
                        "serverInfo": discovered
                            .get("_meta")
                            .and_then(|m| m.get("io.modelcontextprotocol/serverInfo"))
                            .cloned()
                            .unwrap_or(Value::Null),
                        "instructions": discovered.get("instructions").cloned().unwrap_or(Value::Null),
                    });
                    // List changes come on a subscription, not on their own.
                    session.listen().await;
                }
                Ok(_) => {
                    tracing::debug!(server, "server/discover lists no 2026-07-28: a 2025 server")
                }
                Err(err) if says_legacy(&err) => {
                    tracing::debug!(server, "server/discover refused ({err}): a 2025 server")
                }
                Err(err) => {
                    session.link.close().await;
                    return Err(err);
                }
            }
            if !modern {
                session.modern_meta = None;
                session.link.forget_protocol_version();
            }
        }
        if !modern {
            let params = json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": capabilities,
                "clientInfo": {"name": "mcp-aggregator", "version": env!("CARGO_PKG_VERSION")},
            });
            let result = match handshake_request(
                &session,
                &mut reply_rx,
                "initialize",
                Some(params),
                handshake.connect_timeout,
            )
            .await
            {
                Ok(result) => result,
                Err(err) => {
                    session.link.close().await;
                    return Err(err);
                }
            };
            let version = result
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if !KNOWN_VERSIONS.contains(&version.as_str()) {
                tracing::warn!(server, version = %version, "the server speaks a protocol version we do not know; continuing");
            }
            session.link.set_protocol_version(&version);
            session.initialize_result = result;
            session.notify("notifications/initialized", None).await?;
            session.link.initialized();
        }
        let session = Arc::new(session);
        // Timeouts: one sweep per session, not one timer per request.
        let sweeper = Arc::downgrade(&session);
        let (sweep, closed) = (Arc::clone(&session.sweep), session.closed.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(TIMEOUT_SWEEP).await;
                let Some(session) = sweeper.upgrade() else {
                    break;
                };
                if session.is_closed() {
                    break;
                }
                session.expire_overdue();
                if session.in_flight() > 0 {
                    continue;
                }
                // Nothing waits: rest until a request is sent (checked
                // again after saying so, so none is missed).
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

    /// Opens a modern session's `subscriptions/listen` for every list change
    /// (answered only when the server ends it, so nobody waits for it);
    /// its notifications arrive like a 2025 server's.
    pub(super) async fn listen(&self) {
        let filter = json!({
            "toolsListChanged": true,
            "promptsListChanged": true,
            "resourcesListChanged": true
        });
        if let Err(err) = self.open_listen(LISTEN_ID, filter).await {
            tracing::warn!(server = %self.server, "cannot subscribe to list changes: {err}");
        }
    }

    /// Sends a `subscriptions/listen` request with `id`; nobody waits for
    /// its answer (it comes when the server ends the subscription).
    async fn open_listen(&self, id: u64, filter: Value) -> Result<(), RpcError> {
        let mut params = json!({ "notifications": filter });
        self.add_modern_meta(&mut params);
        let message = jsonrpc::request(id, "subscriptions/listen", Some(params));
        let bytes = line(&message).map_err(|err| RpcError::Malformed(err.to_string()))?;
        self.link.send(Bytes::from(bytes)).await?;
        Ok(())
    }

    /// Subscribes to (or unsubscribes from) a resource's updates: a 2025
    /// server is asked with `resources/subscribe`; a 2026-07-28 server
    /// gets a `subscriptions/listen` for that URI, cancelled to
    /// unsubscribe.
    pub async fn resource_subscription(
        &self,
        uri: &str,
        subscribe: bool,
    ) -> Result<Value, RpcError> {
        if !self.is_modern() {
            let method = if subscribe {
                "resources/subscribe"
            } else {
                "resources/unsubscribe"
            };
            return self.request(method, Some(json!({"uri": uri}))).await;
        }
        if subscribe {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            self.open_listen(id, json!({"resourceSubscriptions": [uri]}))
                .await?;
            let replaced = self
                .resource_listens
                .lock()
                .ok()
                .and_then(|mut listens| listens.insert(uri.to_owned(), id));
            if let Some(old) = replaced {
                self.cancel_listen(old).await;
            }
        } else {
            let id = self
                .resource_listens
                .lock()
                .ok()
                .and_then(|mut listens| listens.remove(uri));
            if let Some(id) = id {
                self.cancel_listen(id).await;
            }
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

    /// Whether the session speaks 2026-07-28 (no handshake; `_meta` on
    /// every request).
    pub fn is_modern(&self) -> bool {
        self.modern_meta.is_some()
    }

    fn add_modern_meta(&self, params: &mut Value) {
        let Some(meta) = &self.modern_meta else {
            return;
        };
        if !params.is_object() {
            *params = json!({});
        }
        if !params.get("_meta").is_some_and(Value::is_object) {
            params["_meta"] = json!({});
        }
        if let Some(Value::Object(target)) = params.get_mut("_meta") {
            for (key, value) in meta {
                target.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
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
        self.send_request(method, params.map(Params::Tree), self.request_timeout, &[])
            .await
    }

    /// A result as a tree (a request whose result we read ourselves).
    pub fn tree(result: Result<Box<RawValue>, RpcError>) -> Result<Value, RpcError> {
        jsonrpc::parse(&result?).map_err(|err| RpcError::Malformed(err.to_string()))
    }

    /// Sends a request made for a client: a 2026-07-28 server is told the
    /// client's capabilities and log level instead of ours, and over HTTP
    /// gets `headers` too (a call's `Mcp-Param-*` headers). The result is
    /// the server's text, for the client.
    pub async fn request_for(
        &self,
        caller: &Caller,
        method: &str,
        params: Option<Value>,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, RpcError> {
        let mut params = params;
        if self.is_modern() {
            let mut with_meta = params.take().unwrap_or_else(|| json!({}));
            if !with_meta.get("_meta").is_some_and(Value::is_object) {
                with_meta["_meta"] = json!({});
            }
            if let Some(capabilities) = &caller.capabilities {
                with_meta["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
                    Value::clone(capabilities);
            }
            if let Some(level) = caller.log_level {
                with_meta["_meta"]["io.modelcontextprotocol/logLevel"] = json!(level);
            }
            params = Some(with_meta);
        }
        let headers = if self.is_modern() { headers } else { &[] };
        self.request_traced(method, params.map(Params::Tree), headers)
            .await
    }

    /// `request_for` with params already written as JSON text (a call's
    /// arguments as the client wrote them): a 2025 server is sent the text
    /// as it is; a 2026-07-28 server's params are read to add the client's
    /// `_meta` to them.
    pub async fn request_text_for(
        &self,
        caller: &Caller,
        method: &str,
        params: Box<RawValue>,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, RpcError> {
        if self.is_modern() || self.modern_meta.is_some() {
            let tree = Params::Text(params).into_tree()?;
            return self.request_for(caller, method, Some(tree), headers).await;
        }
        self.request_traced(method, Some(Params::Text(params)), &[])
            .await
    }

    async fn request_traced(
        &self,
        method: &str,
        params: Option<Params>,
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
        self.request_measured(method, params, headers)
            .instrument(span)
            .await
    }

    async fn request_measured(
        &self,
        method: &str,
        params: Option<Params>,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, RpcError> {
        let Some(vitals) = &self.vitals else {
            return self
                .send_request(method, params, self.request_timeout, headers)
                .await;
        };
        let sent = std::time::Instant::now();
        let outcome = self
            .send_request(method, params, self.request_timeout, headers)
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
            self.send_request(method, params.map(Params::Tree), timeout, &[])
                .await,
        )
    }

    async fn send_request(
        &self,
        method: &str,
        params: Option<Params>,
        timeout: Duration,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, RpcError> {
        if self.closed.is_cancelled() {
            return Err(RpcError::Closed(self.close_reason()));
        }
        let params = if self.modern_meta.is_some() {
            let mut with_meta = match params {
                Some(params) => params.into_tree()?,
                None => json!({}),
            };
            self.add_modern_meta(&mut with_meta);
            Some(Params::Tree(with_meta))
        } else {
            params
        };
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
        if self.sweep.parked.swap(false, Ordering::SeqCst) {
            self.sweep.wake.notify_one();
        }
        let mut guard = PendingGuard {
            session: self,
            id,
            armed: true,
        };
        let bytes = jsonrpc::request_line(id, method, params.as_ref())
            .map_err(|err| RpcError::Malformed(err.to_string()))?;
        let bytes = Bytes::from(bytes);
        if let Err(err) = self.link.send_with_headers(bytes, headers).await {
            guard.disarm();
            return Err(err.into());
        }
        // The sweeper answers `Timeout` when the deadline passes.
        let outcome = match rx.await {
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
            Bytes::from(line(&message).map_err(|err| RpcError::Malformed(err.to_string()))?);
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
        let key = self.next_call.fetch_add(1, Ordering::Relaxed);
        let progress = client_token.map(|client| (format!("{PROGRESS_PREFIX}{key}"), client));
        let ours = progress
            .as_ref()
            .map(|(ours, _)| Value::String(ours.clone()));
        if let Ok(mut routes) = self.calls.lock() {
            routes.insert(key, CallRoute { progress, sink });
        }
        let guard = CallGuard {
            routes: Arc::clone(&self.calls),
            key,
        };
        (ours, guard)
    }

    /// Requests still waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Waits until no request is in flight, or `timeout` passes; returns how
    /// many are still waiting.
    pub async fn drain(&self, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = self.in_flight();
            if left == 0 || tokio::time::Instant::now() >= deadline || self.closed.is_cancelled() {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Fails every request in flight and tells the server to stop them.
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
        count
    }

    /// Answers `Timeout` to every request past its deadline, and tells the
    /// server to stop working on them.
    fn expire_overdue(&self) {
        let now = tokio::time::Instant::now();
        let overdue: Vec<(u64, Waiter)> = match self.pending.lock() {
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
        };
        for (id, waiter) in overdue {
            self.send_cancelled(id, "the request timed out");
            let _ = waiter.tx.send(Err(RpcError::Timeout(waiter.timeout)));
        }
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

    /// Closes the link (for stdio: terminates and reaps the process group).
    pub async fn close(&self) {
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

pub(super) use crate::jsonrpc::line;

/// A fresh inbound channel for a link.
pub fn inbound_channel() -> (mpsc::Sender<Box<RawValue>>, mpsc::Receiver<Box<RawValue>>) {
    mpsc::channel(INBOUND_CAPACITY)
}
