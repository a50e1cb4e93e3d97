//! One client's connection (a stdio peer, an HTTP session, or one
//! 2026-07-28 request): its queue, what it declared (capabilities, log
//! level), the requests it has running (to cancel them), and the requests
//! we send it on a server's behalf.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::jsonrpc::{self, INTERNAL_ERROR};

/// One client's connection (a stdio peer or an HTTP session).
pub struct ClientConnection {
    /// The client's bounded queue (notifications, our requests, and for
    /// stdio its answers).
    pub(super) outbound: Arc<super::outbound::Outbound>,
    pub(super) protocol_version: OnceLock<String>,
    /// The client's `initialize` capabilities.
    pub(super) capabilities: OnceLock<Arc<Value>>,
    /// Who it is, from its `clientInfo`, as the audit log names it.
    pub(super) who: OnceLock<Arc<str>>,
    /// The named token it came with (over HTTP, when tokens are required).
    pub(super) token: OnceLock<Arc<str>>,
    /// The profile the client picked (`stdio --profile`, `/mcp/{name}`):
    /// it sees and reaches only that view. None: everything.
    pub(super) profile: OnceLock<Arc<str>>,
    pub(super) initialized: std::sync::atomic::AtomicBool,
    pub(super) in_flight: Mutex<HashMap<String, tokio_util::sync::CancellationToken>>,
    /// Requests we sent the client (a server's sampling, elicitation,
    /// roots); shared with the per-call streams of an HTTP session.
    pub(super) asked: Arc<Mutex<HashMap<String, tokio::sync::oneshot::Sender<Value>>>>,
    /// Whether messages sent now reach the client (an HTTP session only
    /// once it opened its GET stream).
    pub(super) accepts_requests: std::sync::atomic::AtomicBool,
    pub(super) next_ask: std::sync::atomic::AtomicU64,
    /// The least severe log message the client wants (`logging/setLevel`),
    /// as an index into `LOG_LEVELS`; everything until it says.
    pub(super) log_level: Arc<std::sync::atomic::AtomicUsize>,
    /// For a 2026-07-28 request: where a server's questions go instead of
    /// being sent to the client (see `relay`).
    pub(super) inputs: Option<tokio::sync::mpsc::Sender<super::relay::Step>>,
    /// A server's questions handed to this 2026-07-28 request's client and
    /// not answered yet (the request is parked until it retries).
    pub(super) waiting_for_input: std::sync::atomic::AtomicUsize,
}

/// Counts a question waiting for the client's retry while it lives.
struct WaitingForInput<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> WaitingForInput<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> WaitingForInput<'a> {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        WaitingForInput(count)
    }
}

impl Drop for WaitingForInput<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A 2025 client that never called `logging/setLevel`: it gets every log
/// message a server sends during its calls. (`LOG_LEVELS.len()` is a
/// 2026-07-28 request without a log level: no log messages.)
const LEVEL_UNSET: usize = usize::MAX;

/// MCP's log levels (RFC 5424), least severe first.
pub(super) const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

pub(super) fn log_level_index(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|known| *known == level)
}

/// A call's notifications go to the client's queue; log messages below the
/// level the client set are left out.
impl crate::model::CallSink for ClientConnection {
    fn send(&self, message: Value) -> bool {
        if message.get("method").and_then(Value::as_str) == Some("notifications/message") {
            let wanted = self.log_level.load(std::sync::atomic::Ordering::Relaxed);
            let level = message
                .get("params")
                .and_then(|p| p.get("level"))
                .and_then(Value::as_str)
                .and_then(log_level_index);
            let dropped = match wanted {
                LEVEL_UNSET => false,
                // Past the last level: the client asked for no log messages.
                none if none >= LOG_LEVELS.len() => true,
                wanted => level.is_some_and(|level| level < wanted),
            };
            if dropped {
                return true;
            }
        }
        self.outbound.notify(message)
    }
}

/// How long a client gets to answer a server's request (a person may be
/// answering an elicitation).
pub const CLIENT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

impl ClientConnection {
    pub fn new(outbound: Arc<super::outbound::Outbound>) -> Arc<ClientConnection> {
        Arc::new(ClientConnection {
            outbound,
            protocol_version: OnceLock::new(),
            capabilities: OnceLock::new(),
            who: OnceLock::new(),
            token: OnceLock::new(),
            profile: OnceLock::new(),
            initialized: std::sync::atomic::AtomicBool::new(false),
            in_flight: Mutex::new(HashMap::new()),
            asked: Arc::new(Mutex::new(HashMap::new())),
            accepts_requests: std::sync::atomic::AtomicBool::new(true),
            next_ask: std::sync::atomic::AtomicU64::new(1),
            log_level: Arc::new(std::sync::atomic::AtomicUsize::new(LEVEL_UNSET)),
            inputs: None,
            waiting_for_input: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A connection for one HTTP response stream of this client: its own
    /// outbound channel, the same identity (capabilities, asked requests).
    pub fn for_stream(&self, outbound: Arc<super::outbound::Outbound>) -> Arc<ClientConnection> {
        let capabilities = OnceLock::new();
        if let Some(value) = self.capabilities.get() {
            let _ = capabilities.set(Arc::clone(value));
        }
        Arc::new(ClientConnection {
            outbound,
            protocol_version: self.protocol_version.clone(),
            capabilities,
            who: self.who.clone(),
            token: self.token.clone(),
            profile: self.profile.clone(),
            initialized: std::sync::atomic::AtomicBool::new(self.is_initialized()),
            in_flight: Mutex::new(HashMap::new()),
            asked: Arc::clone(&self.asked),
            accepts_requests: std::sync::atomic::AtomicBool::new(true),
            next_ask: std::sync::atomic::AtomicU64::new(1 << 32),
            log_level: Arc::clone(&self.log_level),
            inputs: None,
            waiting_for_input: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A connection for one 2026-07-28 request on this transport:
    /// the same queue, the request's capabilities and log level (none: no
    /// log messages). Such a client is never sent requests: a server's
    /// questions go to `inputs`, to come back to the client as an
    /// input-required result (without it, they are refused).
    pub(super) fn for_one_request(
        &self,
        capabilities: Value,
        log_level: Option<&str>,
        inputs: Option<tokio::sync::mpsc::Sender<super::relay::Step>>,
    ) -> Arc<ClientConnection> {
        let level = log_level
            .and_then(log_level_index)
            .unwrap_or(LOG_LEVELS.len());
        let declared = OnceLock::new();
        let _ = declared.set(Arc::new(capabilities));
        Arc::new(ClientConnection {
            outbound: Arc::clone(&self.outbound),
            protocol_version: OnceLock::new(),
            capabilities: declared,
            who: OnceLock::new(),
            token: self.token.clone(),
            profile: self.profile.clone(),
            initialized: std::sync::atomic::AtomicBool::new(true),
            in_flight: Mutex::new(HashMap::new()),
            asked: Arc::clone(&self.asked),
            accepts_requests: std::sync::atomic::AtomicBool::new(inputs.is_some()),
            next_ask: std::sync::atomic::AtomicU64::new(1 << 48),
            log_level: Arc::new(std::sync::atomic::AtomicUsize::new(level)),
            inputs,
            waiting_for_input: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Says whether messages sent now reach the client.
    pub fn set_accepts_requests(&self, accepts: bool) {
        self.accepts_requests
            .store(accepts, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn protocol_version(&self) -> Option<&str> {
        self.protocol_version.get().map(String::as_str)
    }

    pub fn is_initialized(&self) -> bool {
        self.initialized.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the client takes a server's questions inside a result (an
    /// input-required result) rather than as requests of its own — a
    /// 2026-07-28 request's connection, never sent requests.
    pub fn takes_input_results(&self) -> bool {
        self.inputs.is_some()
    }

    /// Whether the request is parked: a server's question is with the
    /// client, and the request waits for its retry.
    pub(super) fn is_waiting_for_input(&self) -> bool {
        self.waiting_for_input
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    }

    /// Whether the client asked for log messages (`logging/setLevel`, or a
    /// 2026-07-28 request's log level).
    pub fn hears_logs(&self) -> bool {
        self.log_level.load(std::sync::atomic::Ordering::Relaxed) < LOG_LEVELS.len()
    }

    /// The client as a 2026-07-28 server is told about it: its declared
    /// capabilities and the log level it wants (a 2025 client that never
    /// set one hears everything, as a 2025 server would send it).
    pub fn caller(&self) -> crate::model::Caller {
        let level = match self.log_level.load(std::sync::atomic::Ordering::Relaxed) {
            LEVEL_UNSET => Some(LOG_LEVELS[0]),
            index => LOG_LEVELS.get(index).copied(),
        };
        crate::model::Caller {
            capabilities: Some(
                self.capabilities
                    .get()
                    .cloned()
                    .unwrap_or_else(|| Arc::new(json!({}))),
            ),
            log_level: level,
            who: self.who.get().cloned(),
            profile: self.profile.get().cloned(),
            // Only `initialize` (a 2025 client's handshake) sets it.
            in_session: self.protocol_version.get().is_some(),
        }
    }

    /// Puts the client in a profile's view, for good (checked by the
    /// caller: `Router::check_profile`).
    pub fn set_profile(&self, profile: &str) {
        let _ = self.profile.set(Arc::from(profile));
    }

    /// The profile the client picked, if any.
    pub fn profile(&self) -> Option<&str> {
        self.profile.get().map(|p| &**p)
    }

    /// Notes the token the client came with (before its initialize), so
    /// the audit log names it.
    pub fn set_token(&self, token: Option<&crate::model::TokenName>) {
        if let Some(token) = token {
            let _ = self.token.set(Arc::clone(&token.0));
        }
    }

    /// Keeps who the client says it is (`clientInfo`), for the audit log.
    pub(super) fn set_client_info(&self, info: Option<&Value>) {
        let name = info
            .and_then(|i| i.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("unnamed client");
        let who = match self.token.get() {
            Some(token) => format!("mcp:{name} token:{token}"),
            None => format!("mcp:{name}"),
        };
        let _ = self.who.set(Arc::from(who));
    }

    /// Whether the client declared a capability (`sampling`, `roots`, …).
    pub fn supports(&self, capability: &str) -> bool {
        self.capabilities
            .get()
            .and_then(|c| c.get(capability))
            .is_some_and(|c| !c.is_null())
    }

    /// Sends the client a request and waits for its answer; `Err` is a
    /// JSON-RPC error object.
    pub async fn ask(&self, method: &str, params: Option<Value>) -> Result<Value, Value> {
        if let Some(inputs) = &self.inputs {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let step = super::relay::Step::Ask {
                method: method.to_owned(),
                params,
                reply,
            };
            let gone = || json!({"code": INTERNAL_ERROR, "message": "the client did not answer"});
            let _waiting = WaitingForInput::new(&self.waiting_for_input);
            if inputs.send(step).await.is_err() {
                return Err(gone());
            }
            return answer.await.unwrap_or_else(|_| Err(gone()));
        }
        let n = self
            .next_ask
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("mcp-aggregator-{n}");
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut asked) = self.asked.lock() {
            asked.insert(id.clone(), tx);
        }
        let message = jsonrpc::request(id.clone(), method, params);
        let unanswered = |reason: &str| jsonrpc::error_object(INTERNAL_ERROR, reason, None);
        if !self.outbound.deliver(message).await {
            if let Ok(mut asked) = self.asked.lock() {
                asked.remove(&id);
            }
            return Err(unanswered("the client is gone or not reading"));
        }
        let answer = tokio::time::timeout(CLIENT_REQUEST_TIMEOUT, rx).await;
        if let Ok(mut asked) = self.asked.lock() {
            asked.remove(&id);
        }
        match answer {
            Ok(Ok(mut message)) => match message.get_mut("error").map(Value::take) {
                Some(error) => Err(error),
                None => Ok(message
                    .get_mut("result")
                    .map(Value::take)
                    .unwrap_or(Value::Null)),
            },
            Ok(Err(_)) => Err(unanswered("the client went away")),
            Err(_) => Err(unanswered("the client did not answer in time")),
        }
    }

    /// Sends a notification to the client.
    pub fn notify(&self, method: &str, params: Option<Value>) {
        self.outbound.notify(jsonrpc::notification(method, params));
    }

    /// The client's queue.
    pub fn outbound(&self) -> &Arc<super::outbound::Outbound> {
        &self.outbound
    }

    /// Registers a request about to run; `notifications/cancelled` for its
    /// id cancels the returned token.
    pub fn begin(&self, id: &Value) -> tokio_util::sync::CancellationToken {
        let token = tokio_util::sync::CancellationToken::new();
        if let Ok(mut map) = self.in_flight.lock() {
            map.insert(id.to_string(), token.clone());
        }
        token
    }

    /// The request is over.
    pub fn end(&self, id: &Value) {
        if let Ok(mut map) = self.in_flight.lock() {
            map.remove(&id.to_string());
        }
    }

    pub(super) fn cancel(&self, id: &Value) {
        let handle = self
            .in_flight
            .lock()
            .ok()
            .and_then(|mut map| map.remove(&id.to_string()));
        if let Some(token) = handle {
            token.cancel();
        }
    }
}
