//! MCP request handling, independent of the transport: initialize, the
//! lists, tools/call through the router, resources/read, prompts/get,
//! cancellation of a client's requests, and list_changed notifications.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::router::{CallError, Router};

/// Protocol versions this server speaks, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// What we answer when a client asks for a version we do not know: the
/// latest we speak, as the specification asks.
pub const DEFAULT_VERSION: &str = "2025-11-25";

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
pub(super) const METHOD_NOT_FOUND: i64 = -32601;
pub(super) const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error: code, message, data.
pub(super) type RpcFailure = (i64, String, Option<Value>);

/// How many input-required rounds a 2025 client's call may go through.
const MAX_INPUT_ROUNDS: usize = 10;

/// What the aggregate tells a client about itself.
pub(super) const INSTRUCTIONS: &str = "Tools of several MCP servers, named `server__tool`. To find a tool by what it does, call `search_tools`; call any tool directly or through `call_tool`.";

/// The aggregate's capabilities (both eras).
pub(super) fn server_capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {"listChanged": true, "subscribe": true},
        "prompts": {"listChanged": true},
        "completions": {},
        "logging": {}
    })
}

/// Who we are.
pub(super) fn server_info() -> Value {
    json!({"name": "mcp-aggregator", "version": env!("CARGO_PKG_VERSION")})
}

/// The aggregated MCP server; shared by every client connection.
pub struct McpServer {
    router: Router,
    search: crate::index::SearchIndex,
    expose: super::meta::Expose,
    /// Clients with a call running on a server, most recent last: a
    /// server's request (sampling, …) goes to the client it is working for.
    pub(super) callers:
        Mutex<HashMap<crate::model::ServerId, Vec<std::sync::Weak<ClientConnection>>>>,
    /// Every initialized client, for requests outside a call (roots).
    pub(super) clients: Mutex<Vec<std::sync::Weak<ClientConnection>>>,
    /// A server's own resource URI -> the clients subscribed to it, each
    /// with the URI as it named it (namespaced or the server's own).
    subscriptions: Mutex<HashMap<(crate::model::ServerId, String), Vec<Subscriber>>>,
    /// Exactly one client is attached (the stdio front door): a server's
    /// request outside a call may go to it.
    single_client: std::sync::atomic::AtomicBool,
    /// Requests parked while a 2026-07-28 client answers a server's
    /// questions.
    pub(super) relay: super::relay::Relay,
    /// Itself, for work that outlives the request that started it.
    pub(super) me: std::sync::Weak<McpServer>,
}

/// A client subscribed to a resource, and the URI it used.
struct Subscriber {
    client: std::sync::Weak<ClientConnection>,
    uri: String,
}

/// One client's connection (a stdio peer or an HTTP session).
pub struct ClientConnection {
    /// The client's bounded queue (notifications, our requests, and for
    /// stdio its answers).
    outbound: Arc<super::outbound::Outbound>,
    protocol_version: OnceLock<String>,
    /// The client's `initialize` capabilities.
    capabilities: OnceLock<Value>,
    initialized: std::sync::atomic::AtomicBool,
    in_flight: Mutex<HashMap<String, tokio_util::sync::CancellationToken>>,
    /// Requests we sent the client (a server's sampling, elicitation,
    /// roots); shared with the per-call streams of an HTTP session.
    asked: Arc<Mutex<HashMap<String, tokio::sync::oneshot::Sender<Value>>>>,
    /// Whether messages sent now reach the client (an HTTP session only
    /// once it opened its GET stream).
    pub(super) accepts_requests: std::sync::atomic::AtomicBool,
    next_ask: std::sync::atomic::AtomicU64,
    /// The least severe log message the client wants (`logging/setLevel`),
    /// as an index into `LOG_LEVELS`; everything until it says.
    log_level: Arc<std::sync::atomic::AtomicUsize>,
    /// For a 2026-07-28 request: where a server's questions go instead of
    /// being sent to the client (see `relay`).
    inputs: Option<tokio::sync::mpsc::Sender<super::relay::Step>>,
}

/// A 2025 client that never called `logging/setLevel`: it gets every log
/// message a server sends during its calls. (`LOG_LEVELS.len()` is a
/// 2026-07-28 request without a log level: no log messages.)
const LEVEL_UNSET: usize = usize::MAX;

/// MCP's log levels (RFC 5424), least severe first.
const LOG_LEVELS: [&str; 8] = [
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
impl crate::sessions::CallSink for ClientConnection {
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
            initialized: std::sync::atomic::AtomicBool::new(false),
            in_flight: Mutex::new(HashMap::new()),
            asked: Arc::new(Mutex::new(HashMap::new())),
            accepts_requests: std::sync::atomic::AtomicBool::new(true),
            next_ask: std::sync::atomic::AtomicU64::new(1),
            log_level: Arc::new(std::sync::atomic::AtomicUsize::new(LEVEL_UNSET)),
            inputs: None,
        })
    }

    /// A connection for one HTTP response stream of this client: its own
    /// outbound channel, the same identity (capabilities, asked requests).
    pub fn for_stream(&self, outbound: Arc<super::outbound::Outbound>) -> Arc<ClientConnection> {
        let capabilities = OnceLock::new();
        if let Some(value) = self.capabilities.get() {
            let _ = capabilities.set(value.clone());
        }
        Arc::new(ClientConnection {
            outbound,
            protocol_version: self.protocol_version.clone(),
            capabilities,
            initialized: std::sync::atomic::AtomicBool::new(self.is_initialized()),
            in_flight: Mutex::new(HashMap::new()),
            asked: Arc::clone(&self.asked),
            accepts_requests: std::sync::atomic::AtomicBool::new(true),
            next_ask: std::sync::atomic::AtomicU64::new(1 << 32),
            log_level: Arc::clone(&self.log_level),
            inputs: None,
        })
    }

    /// A connection for one modern (2026-07-28) request on this transport:
    /// the same queue, the request's capabilities and log level (none: no
    /// log messages). Modern clients are never sent requests: a server's
    /// questions go to `inputs`, to come back to the client as an
    /// input-required result (without it, they are refused).
    pub(super) fn for_modern_request(
        &self,
        capabilities: Value,
        log_level: Option<&str>,
        inputs: Option<tokio::sync::mpsc::Sender<super::relay::Step>>,
    ) -> Arc<ClientConnection> {
        let level = log_level
            .and_then(log_level_index)
            .unwrap_or(LOG_LEVELS.len());
        let declared = OnceLock::new();
        let _ = declared.set(capabilities);
        Arc::new(ClientConnection {
            outbound: Arc::clone(&self.outbound),
            protocol_version: OnceLock::new(),
            capabilities: declared,
            initialized: std::sync::atomic::AtomicBool::new(true),
            in_flight: Mutex::new(HashMap::new()),
            asked: Arc::clone(&self.asked),
            accepts_requests: std::sync::atomic::AtomicBool::new(inputs.is_some()),
            next_ask: std::sync::atomic::AtomicU64::new(1 << 48),
            log_level: Arc::new(std::sync::atomic::AtomicUsize::new(level)),
            inputs,
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

    /// Whether this is a 2026-07-28 request's connection (never sent
    /// requests).
    pub fn is_modern(&self) -> bool {
        self.inputs.is_some()
    }

    /// Whether the client asked for log messages (`logging/setLevel`, or a
    /// modern request's log level).
    pub fn hears_logs(&self) -> bool {
        self.log_level.load(std::sync::atomic::Ordering::Relaxed) < LOG_LEVELS.len()
    }

    /// The client as a 2026-07-28 server is told about it: its declared
    /// capabilities and the log level it wants (a 2025 client that never
    /// set one hears everything, as a 2025 server would send it).
    pub fn caller(&self) -> crate::sessions::Caller {
        let level = match self.log_level.load(std::sync::atomic::Ordering::Relaxed) {
            LEVEL_UNSET => Some(LOG_LEVELS[0]),
            index => LOG_LEVELS.get(index).copied(),
        };
        crate::sessions::Caller {
            capabilities: Some(
                self.capabilities
                    .get()
                    .cloned()
                    .unwrap_or_else(|| json!({})),
            ),
            log_level: level,
        }
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
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        let unanswered = |reason: &str| json!({"code": INTERNAL_ERROR, "message": reason});
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
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        self.outbound.notify(message);
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

    fn cancel(&self, id: &Value) {
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

/// What an incoming message is.
pub enum Incoming {
    /// A request: handle it and answer with `id`.
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    /// A notification or a response to something we asked: no answer.
    Other(Value),
    /// Not a JSON-RPC message: answer with this error.
    Invalid(Value),
}

/// Sorts a raw message.
pub fn classify(message: Value) -> Incoming {
    let Value::Object(mut map) = message else {
        return Incoming::Invalid(error_response(
            Value::Null,
            INVALID_REQUEST,
            "a JSON-RPC message must be an object",
        ));
    };
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let id = map
            .remove("id")
            .filter(|id| id.is_string() || id.is_number())
            .unwrap_or(Value::Null);
        return Incoming::Invalid(error_response(
            id,
            INVALID_REQUEST,
            "a JSON-RPC message needs \"jsonrpc\": \"2.0\"",
        ));
    }
    let method = map.get("method").and_then(Value::as_str).map(str::to_owned);
    match (method, map.remove("id")) {
        (Some(method), Some(id)) if !id.is_null() => Incoming::Request {
            id,
            method,
            params: map.remove("params"),
        },
        (Some(_), _) => Incoming::Other(Value::Object(map)),
        (None, Some(id)) if map.contains_key("result") || map.contains_key("error") => {
            map.insert("id".to_owned(), id);
            Incoming::Other(Value::Object(map))
        }
        (None, id) => Incoming::Invalid(error_response(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "missing method",
        )),
    }
}

/// A JSON-RPC invalid-request answer (no id to answer to).
pub fn invalid_request(detail: &str) -> Value {
    error_response(
        Value::Null,
        INVALID_REQUEST,
        &format!("Invalid request: {detail}"),
    )
}

/// A JSON-RPC parse error answer.
pub fn parse_error(detail: &str) -> Value {
    error_response(Value::Null, PARSE_ERROR, &format!("Parse error: {detail}"))
}

pub(super) fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn result_response(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

impl McpServer {
    pub fn new(
        router: Router,
        search: crate::index::SearchIndex,
        expose: super::meta::Expose,
    ) -> Arc<McpServer> {
        let server = Arc::new_cyclic(|me| McpServer {
            router,
            search,
            expose,
            callers: Mutex::new(HashMap::new()),
            clients: Mutex::new(Vec::new()),
            subscriptions: Mutex::new(HashMap::new()),
            single_client: std::sync::atomic::AtomicBool::new(false),
            relay: super::relay::Relay::default(),
            me: me.clone(),
        });
        server
            .router
            .sessions()
            .set_request_handler(Arc::new(super::requests::ForwardToClients(Arc::downgrade(
                &server,
            ))));
        // Pass resource updates on to the clients subscribed to them.
        let weak = Arc::downgrade(&server);
        let mut notices = server.router.sessions().notices();
        tokio::spawn(async move {
            loop {
                let notice = match notices.recv().await {
                    Ok(notice) => notice,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                };
                let Some(server) = weak.upgrade() else { break };
                if notice.message.get("method").and_then(Value::as_str)
                    != Some("notifications/resources/updated")
                {
                    continue;
                }
                let Some(uri) = notice.message["params"]["uri"].as_str() else {
                    continue;
                };
                let subscribers: Vec<(Arc<ClientConnection>, String)> = server
                    .subscriptions
                    .lock()
                    .ok()
                    .and_then(|subs| {
                        subs.get(&(notice.server_id, uri.to_owned())).map(|list| {
                            list.iter()
                                .filter_map(|s| Some((s.client.upgrade()?, s.uri.clone())))
                                .collect()
                        })
                    })
                    .unwrap_or_default();
                for (client, uri) in subscribers {
                    let mut message = notice.message.clone();
                    message["params"]["uri"] = Value::String(uri);
                    client.outbound.notify(message);
                }
            }
        });
        server
    }

    /// Notes a subscription; true if it is the first to that resource (the
    /// server is asked then).
    pub(super) fn subscribe(
        &self,
        client: &Arc<ClientConnection>,
        route: &crate::router::table::ItemRoute,
        uri: &str,
    ) -> bool {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return false;
        };
        let list = subs
            .entry((route.server_id, route.original.to_string()))
            .or_default();
        list.retain(|s| s.client.strong_count() > 0);
        let first = list.is_empty();
        let mine = |s: &Subscriber| {
            s.uri == uri && s.client.upgrade().is_some_and(|c| Arc::ptr_eq(&c, client))
        };
        if !list.iter().any(mine) {
            list.push(Subscriber {
                client: Arc::downgrade(client),
                uri: uri.to_owned(),
            });
        }
        first
    }

    /// Ends a subscription; true if it was the last to that resource (the
    /// server is told then).
    pub(super) fn unsubscribe(
        &self,
        client: &Arc<ClientConnection>,
        route: &crate::router::table::ItemRoute,
        uri: &str,
    ) -> bool {
        let Ok(mut subs) = self.subscriptions.lock() else {
            return false;
        };
        let key = (route.server_id, route.original.to_string());
        let Some(list) = subs.get_mut(&key) else {
            return false;
        };
        let before = list.len();
        list.retain(|s| {
            s.client
                .upgrade()
                .is_some_and(|c| !(s.uri == uri && Arc::ptr_eq(&c, client)))
        });
        let last = list.is_empty() && before > 0;
        if list.is_empty() {
            subs.remove(&key);
        }
        last
    }

    /// Runs a request a 2026-07-28 server may answer with an input-required
    /// result. A modern client gets the questions as they are, with the
    /// server's state sealed in ours (so every state a client brings back
    /// is checked); a 2025 client is asked the 2025 way, and the request
    /// made again (when `retries`) with its answers.
    async fn with_input_rounds<F, Fut>(
        &self,
        client: &Arc<ClientConnection>,
        first: Option<crate::router::InputRound>,
        retries: bool,
        mut attempt: F,
    ) -> Result<Value, RpcFailure>
    where
        F: FnMut(Option<crate::router::InputRound>) -> Fut,
        Fut: std::future::Future<Output = Result<Value, RpcFailure>>,
    {
        let mut input = first;
        let mut rounds = 0;
        loop {
            let mut result = attempt(input.take()).await?;
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return Ok(result);
            }
            if client.is_modern() {
                if let Some(state) = result.get("requestState").and_then(Value::as_str) {
                    result["requestState"] = Value::String(self.relay.wrap_downstream(state));
                }
                return Ok(result);
            }
            if !retries {
                return Ok(result);
            }
            rounds += 1;
            if rounds > MAX_INPUT_ROUNDS {
                return Err((
                    -32603,
                    format!("the server asked for input more than {MAX_INPUT_ROUNDS} times"),
                    None,
                ));
            }
            input = Some(self.answer_input_requests(client, &result).await);
        }
    }

    /// Asks a 2025 client each question of a server's input-required
    /// result (sampling, elicitation, roots — as that client's own
    /// requests), and returns the answers for the retry. A question the
    /// client cannot answer gets its JSON-RPC error as the answer.
    async fn answer_input_requests(
        &self,
        client: &Arc<ClientConnection>,
        asked: &Value,
    ) -> crate::router::InputRound {
        let mut responses = serde_json::Map::new();
        if let Some(requests) = asked.get("inputRequests").and_then(Value::as_object) {
            for (key, request) in requests {
                let Some(method) = request.get("method").and_then(Value::as_str) else {
                    continue;
                };
                let capability = match method {
                    "sampling/createMessage" => "sampling",
                    "elicitation/create" => "elicitation",
                    "roots/list" => "roots",
                    _ => "",
                };
                let answer = if client.supports(capability) {
                    client
                        .ask(method, request.get("params").cloned())
                        .await
                        .unwrap_or_else(|error| json!({"error": error}))
                } else if capability == "roots" {
                    // A client with no roots shares none.
                    json!({"roots": []})
                } else {
                    json!({"error": {"code": METHOD_NOT_FOUND, "message": format!("the client does not support {method}")}})
                };
                responses.insert(key.clone(), answer);
            }
        }
        crate::router::InputRound {
            responses: Value::Object(responses),
            state: asked.get("requestState").cloned(),
        }
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Says that exactly one client is attached (stdio).
    pub fn set_single_client(&self, single: bool) {
        self.single_client
            .store(single, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn is_single_client(&self) -> bool {
        self.single_client
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Handles a notification (or a response) from the client.
    pub fn handle_other(&self, client: &ClientConnection, message: &Value) {
        if message.get("method").is_none() {
            // An answer to something we asked the client.
            let id = message.get("id").map(|id| match id {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            let waiter = id.and_then(|id| client.asked.lock().ok().and_then(|mut a| a.remove(&id)));
            if let Some(waiter) = waiter {
                let _ = waiter.send(message.clone());
            }
            return;
        }
        match message.get("method").and_then(Value::as_str) {
            Some("notifications/initialized") => client
                .initialized
                .store(true, std::sync::atomic::Ordering::Relaxed),
            Some("notifications/cancelled") => {
                if let Some(id) = message.get("params").and_then(|p| p.get("requestId")) {
                    client.cancel(id);
                }
            }
            _ => {}
        }
    }

    /// Handles a request; returns the complete JSON-RPC answer.
    pub async fn handle_request(
        &self,
        client: &Arc<ClientConnection>,
        id: Value,
        method: &str,
        params: Option<Value>,
    ) -> Value {
        if super::modern::is_modern(params.as_ref()) {
            return self.handle_modern(client, id, method, params).await;
        }
        match self.dispatch(client, method, params).await {
            Ok(result) => result_response(id, result),
            Err((code, message, data)) => {
                let mut response = error_response(id, code, &message);
                if let Some(data) = data {
                    response["error"]["data"] = data;
                }
                response
            }
        }
    }

    pub(super) async fn dispatch(
        &self,
        client: &Arc<ClientConnection>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, RpcFailure> {
        let table = || self.router.table();
        match method {
            "initialize" => {
                let requested = params
                    .as_ref()
                    .and_then(|p| p.get("protocolVersion"))
                    .and_then(Value::as_str)
                    .unwrap_or(DEFAULT_VERSION);
                let version = if SUPPORTED_VERSIONS.contains(&requested) {
                    requested
                } else {
                    DEFAULT_VERSION
                };
                let _ = client.protocol_version.set(version.to_owned());
                let capabilities = params
                    .as_ref()
                    .and_then(|p| p.get("capabilities"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let _ = client.capabilities.set(capabilities);
                if let Ok(mut clients) = self.clients.lock() {
                    clients.retain(|c| c.strong_count() > 0);
                    clients.push(Arc::downgrade(client));
                }
                Ok(json!({
                    "protocolVersion": version,
                    "capabilities": server_capabilities(),
                    "serverInfo": server_info(),
                    "instructions": INSTRUCTIONS
                }))
            }
            "ping" => Ok(json!({})),
            "logging/setLevel" => {
                let level = params
                    .as_ref()
                    .and_then(|p| p.get("level"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("logging/setLevel needs a string `level`"))?;
                let index = log_level_index(level).ok_or_else(|| {
                    invalid(&format!(
                        "unknown log level `{level}`; one of {}",
                        LOG_LEVELS.join(", ")
                    ))
                })?;
                client
                    .log_level
                    .store(index, std::sync::atomic::Ordering::Relaxed);
                Ok(json!({}))
            }
            // The whole list in one page: some clients (MCP Inspector CLI)
            // do not follow cursors.
            "tools/list" => {
                self.router.settle_startup().await;
                let table = table();
                let meta = super::meta::meta_tools().iter();
                let tools: Vec<&Value> = if self.expose.lists_all(table.tools.len()) {
                    table.tools.iter().chain(meta).collect()
                } else {
                    meta.collect()
                };
                Ok(json!({"tools": tools}))
            }
            "resources/list" => {
                self.router.settle_startup().await;
                Ok(json!({"resources": table().resources.as_ref()}))
            }
            "resources/templates/list" => {
                self.router.settle_startup().await;
                Ok(json!({"resourceTemplates": table().resource_templates.as_ref()}))
            }
            "prompts/list" => {
                self.router.settle_startup().await;
                Ok(json!({"prompts": table().prompts.as_ref()}))
            }
            "tools/call" => {
                let mut params = params.ok_or_else(|| invalid("tools/call needs params"))?;
                let mut name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("tools/call needs a string `name`"))?
                    .to_owned();
                let mut arguments = params.get_mut("arguments").map(Value::take);
                if name == super::meta::SEARCH_TOOLS {
                    let (search, table) = (self.search.clone(), self.router.table());
                    return tokio::task::spawn_blocking(move || {
                        super::meta::search_tools(&search, &table, arguments.as_ref())
                    })
                    .await
                    .map_err(|err| (INTERNAL_ERROR, format!("search failed: {err}"), None));
                }
                if name == super::meta::CALL_TOOL {
                    // The named tool, called as if the client had called it.
                    let mut inner = arguments.unwrap_or(Value::Null);
                    let Some(target) = inner.get("name").and_then(Value::as_str) else {
                        return Ok(super::meta::tool_error(
                            "call_tool needs `name`: the tool's name as search_tools returned it",
                        ));
                    };
                    if target == super::meta::CALL_TOOL || target == super::meta::SEARCH_TOOLS {
                        return Ok(super::meta::tool_error(format!(
                            "call {target} directly, not through call_tool"
                        )));
                    }
                    name = target.to_owned();
                    arguments = inner.get_mut("arguments").map(Value::take);
                    if arguments
                        .as_ref()
                        .is_some_and(|a| !a.is_object() && !a.is_null())
                    {
                        return Ok(super::meta::tool_error("`arguments` must be an object"));
                    }
                }
                let meta = params.get_mut("_meta").map(Value::take);
                let sink: Option<Arc<dyn crate::sessions::CallSink>> = Some(client.clone());
                // Note who the server works for while the call runs.
                let server_id = self
                    .router
                    .resolve_settled(&name, None)
                    .await
                    .ok()
                    .map(|(_, route)| route.server_id);
                let _caller =
                    server_id.map(|id| super::requests::CallerGuard::new(self, id, client));
                // A 2026-07-28 client's answers to a server's questions pass
                // through to the server that asked.
                let input = take_input_round(&mut params);
                // Only a 2026-07-28 server can ask for input, and only a
                // 2025 client's call is then retried here: keep copies for
                // the retry just then (arguments can be large).
                let retry_copies = (!client.is_modern()
                    && server_id
                        .and_then(|id| self.router.sessions().session(id))
                        .is_some_and(|session| session.is_modern()))
                .then(|| (arguments.clone(), meta.clone()));
                let mut first = Some((arguments, meta));
                let caller = client.caller();
                let retries = retry_copies.is_some();
                self.with_input_rounds(client, input, retries, |input| {
                    let (arguments, meta) = first
                        .take()
                        .or_else(|| retry_copies.clone())
                        .unwrap_or_default();
                    let (name, sink, caller) = (&name, sink.clone(), &caller);
                    async move {
                        let call = crate::router::ToolCall {
                            name,
                            arguments,
                            meta,
                            server: None,
                            sink,
                            input,
                            caller,
                        };
                        match self.router.call_tool(call).await {
                            Ok(outcome) => Ok(outcome.result),
                            Err(err) => tool_call_error(err),
                        }
                    }
                })
                .await
            }
            "resources/read" => {
                let mut params = params.ok_or_else(|| invalid("resources/read needs params"))?;
                let uri = params
                    .get("uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("resources/read needs a string `uri`"))?
                    .to_owned();
                let meta = params.get_mut("_meta").map(Value::take);
                self.router
                    .read_resource(&uri, meta, &client.caller())
                    .await
                    .map_err(rpc_error)
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params
                    .as_ref()
                    .and_then(|p| p.get("uri"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("needs a string `uri`"))?
                    .to_owned();
                let subscribe = method == "resources/subscribe";
                let (route, _) = self.router.route_resource(&uri).await.map_err(rpc_error)?;
                // The server is asked once: on the first subscriber, and
                // when the last one leaves.
                let ask_server = if subscribe {
                    self.subscribe(client, &route, &uri)
                } else {
                    self.unsubscribe(client, &route, &uri)
                };
                if ask_server
                    && let Err(err) = self.router.resource_subscription(&route, subscribe).await
                {
                    if subscribe {
                        self.unsubscribe(client, &route, &uri);
                    }
                    return Err(rpc_error(err));
                }
                Ok(json!({}))
            }
            "completion/complete" => {
                let params = params.ok_or_else(|| invalid("completion/complete needs params"))?;
                self.router.complete(params).await.map_err(rpc_error)
            }
            "prompts/get" => {
                let mut params = params.ok_or_else(|| invalid("prompts/get needs params"))?;
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("prompts/get needs a string `name`"))?
                    .to_owned();
                let arguments = params.get_mut("arguments").map(Value::take);
                let meta = params.get_mut("_meta").map(Value::take);
                let input = take_input_round(&mut params);
                let caller = client.caller();
                self.with_input_rounds(client, input, true, |input| {
                    let (name, arguments, meta, caller) =
                        (&name, arguments.clone(), meta.clone(), &caller);
                    async move {
                        self.router
                            .get_prompt(name, arguments, meta, input, caller)
                            .await
                            .map_err(rpc_error)
                    }
                })
                .await
            }
            other => Err((METHOD_NOT_FOUND, format!("Method not found: {other}"), None)),
        }
    }
}

/// The answers and state a 2026-07-28 client's retry carries.
fn take_input_round(params: &mut Value) -> Option<crate::router::InputRound> {
    let responses = params.get_mut("inputResponses").map(Value::take)?;
    Some(crate::router::InputRound {
        responses,
        state: params.get_mut("requestState").map(Value::take),
    })
}

fn invalid(message: &str) -> (i64, String, Option<Value>) {
    (INVALID_PARAMS, message.to_owned(), None)
}

/// Routing failures the model can act on come back as a tool result with
/// `isError` (it can read it and pick another tool); an unknown tool is a
/// protocol error, as the spec asks.
fn tool_call_error(err: CallError) -> Result<Value, (i64, String, Option<Value>)> {
    match err {
        CallError::Unavailable { .. }
        | CallError::Interrupted { .. }
        | CallError::TimedOut { .. } => Ok(json!({
            "content": [{"type": "text", "text": err.to_string()}],
            "isError": true
        })),
        other => Err(rpc_error(other)),
    }
}

fn rpc_error(err: CallError) -> (i64, String, Option<Value>) {
    match err {
        CallError::Server(crate::sessions::RpcError::Server {
            code,
            message,
            data,
        }) => (code, message, data),
        CallError::UnknownResource(ref uri) => {
            let data = json!({"uri": uri});
            (INVALID_PARAMS, err.to_string(), Some(data))
        }
        CallError::UnknownTool(_)
        | CallError::UnknownServer(_)
        | CallError::UnknownPrompt(_)
        | CallError::UnknownReference => (INVALID_PARAMS, err.to_string(), None),
        CallError::Ambiguous { ref candidates, .. } => {
            let data = json!({"candidates": candidates});
            (INVALID_PARAMS, err.to_string(), Some(data))
        }
        other => (INTERNAL_ERROR, other.to_string(), None),
    }
}

/// Sends list_changed notifications to a client whenever what it can list
/// changes; ends when the client goes away.
pub async fn forward_list_changes(router: Router, client: Arc<ClientConnection>) {
    let mut changes = router.subscribe();
    let mut last = *changes.borrow_and_update();
    while changes.changed().await.is_ok() {
        let now = *changes.borrow_and_update();
        if client.outbound.is_closed() {
            break;
        }
        if client.is_initialized() {
            if now.tools != last.tools {
                client.notify("notifications/tools/list_changed", None);
            }
            if now.resources != last.resources {
                client.notify("notifications/resources/list_changed", None);
            }
            if now.prompts != last.prompts {
                client.notify("notifications/prompts/list_changed", None);
            }
        }
        last = now;
    }
}
