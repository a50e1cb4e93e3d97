//! The method table, independent of the transport and the era: initialize,
//! the lists, tools/call through the router, resources/read, subscribe,
//! prompts/get, completion, and how routing failures reach a client.

use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use super::client::ClientConnection;
use super::client::{LOG_LEVELS, log_level_index};
use super::input::take_input_round;
use crate::router::{CallError, Router};

/// Protocol versions this server speaks, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// What we answer when a client asks for a version we do not know: the
/// latest we speak, as the specification asks.
pub const DEFAULT_VERSION: &str = "2025-11-25";

use crate::jsonrpc::{self, INTERNAL_ERROR, Json, Outgoing};
pub(super) use crate::jsonrpc::{INVALID_PARAMS, METHOD_NOT_FOUND};

/// A JSON-RPC error: code, message, data.
pub(super) type RpcFailure = (i64, String, Option<Value>);

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
    /// Clients' resource subscriptions.
    pub(super) subscriptions: super::subscriptions::Subscriptions,
    /// Exactly one client is attached (the stdio front door): a server's
    /// request outside a call may go to it.
    single_client: std::sync::atomic::AtomicBool,
    /// Requests parked while a 2026-07-28 client answers a server's
    /// questions.
    pub(super) relay: super::relay::Relay,
    /// Itself, for work that outlives the request that started it.
    pub(super) me: std::sync::Weak<McpServer>,
}

impl McpServer {
    /// `state_key` seals the `requestState`s handed to 2026-07-28 clients
    /// (kept in the data dir, so a server's own state still opens after a
    /// restart).
    pub fn new(
        router: Router,
        search: crate::index::SearchIndex,
        expose: super::meta::Expose,
        state_key: &[u8; 32],
    ) -> Arc<McpServer> {
        let server = Arc::new_cyclic(|me| McpServer {
            router,
            search,
            expose,
            callers: Mutex::new(HashMap::new()),
            clients: Mutex::new(Vec::new()),
            subscriptions: Default::default(),
            single_client: std::sync::atomic::AtomicBool::new(false),
            relay: super::relay::Relay::with_key(state_key),
            me: me.clone(),
        });
        server
            .router
            .set_request_handler(Arc::new(super::requests::ForwardToClients(Arc::downgrade(
                &server,
            ))));
        super::subscriptions::spawn_update_fanout(&server);
        server
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
        arguments: Option<Box<RawValue>>,
    ) -> Outgoing {
        use tracing::Instrument as _;
        // Exported only when traces are on (`logging::TRACE_TARGET`).
        let span = tracing::trace_span!(
            target: "mcp_aggregator::otel",
            "mcp request",
            otel.kind = "server",
            rpc.system = "jsonrpc",
            rpc.method = method,
        );
        async move {
            if super::modern::is_modern(params.as_ref()) {
                let params = super::incoming::with_arguments(params, arguments);
                return self.handle_modern(client, id, method, params).await;
            }
            match self.dispatch(client, method, params, arguments).await {
                Ok(result) => jsonrpc::answer(id, result),
                Err((code, message, data)) => {
                    jsonrpc::error_answer(id, jsonrpc::error_object(code, &message, data)).into()
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Answers a request: a call's result as its server wrote it, anything
    /// else built here. `arguments`: a call's, as the client wrote them
    /// (else they are in `params`).
    pub(super) async fn dispatch(
        &self,
        client: &Arc<ClientConnection>,
        method: &str,
        params: Option<Value>,
        arguments: Option<Box<RawValue>>,
    ) -> Result<Json, RpcFailure> {
        match method {
            "tools/call" => self.call_tool(client, params, arguments).await,
            "tools/list" => self.list_tools().await,
            _ => self
                .answer_here(client, method, params)
                .await
                .map(Json::Tree),
        }
    }

    /// `tools/list`: the whole list in one page (some clients, the MCP
    /// Inspector CLI among them, do not follow cursors).
    async fn list_tools(&self) -> Result<Json, RpcFailure> {
        self.router.settle_startup().await;
        let table = self.router.table();
        let meta = super::meta::meta_tools().iter();
        let lists_all = self.expose.lists_all(table.tools.len());
        let read = match (&table.tools.held, lists_all) {
            (None, true) => self
                .router
                .read_listed_tools(Arc::clone(&table))
                .await
                .map_err(rpc_error)?,
            _ => Vec::new(),
        };
        let tools: Vec<&RawValue> = match (&table.tools.held, lists_all) {
            (Some(held), true) => held.iter().chain(meta).map(|t| &**t).collect(),
            (None, true) => read.iter().chain(meta).map(|t| &**t).collect(),
            (_, false) => meta.map(|t| &**t).collect(),
        };
        // Written straight from the definitions' text.
        #[derive(serde::Serialize)]
        struct ToolList<'a> {
            tools: Vec<&'a RawValue>,
        }
        jsonrpc::to_raw(&ToolList { tools })
            .map(Json::Text)
            .map_err(|err| (INTERNAL_ERROR, err.to_string(), None))
    }

    /// `tools/call`: the aggregator's own meta-tools, or a call routed to
    /// the server that owns the tool.
    async fn call_tool(
        &self,
        client: &Arc<ClientConnection>,
        params: Option<Value>,
        written: Option<Box<RawValue>>,
    ) -> Result<Json, RpcFailure> {
        let mut params = params.ok_or_else(|| invalid("tools/call needs params"))?;
        let mut name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("tools/call needs a string `name`"))?
            .to_owned();
        let mut arguments = match written {
            Some(text) => Some(Json::Text(text)),
            None => params.get_mut("arguments").map(Value::take).map(Json::Tree),
        };
        if name == super::meta::SEARCH_TOOLS {
            let (search, table) = (self.search.clone(), self.router.table());
            let arguments = arguments.as_ref().map(Json::to_tree);
            return tokio::task::spawn_blocking(move || {
                super::meta::search_tools(&search, &table, arguments.as_ref())
            })
            .await
            .map(Json::Tree)
            .map_err(|err| (INTERNAL_ERROR, format!("search failed: {err}"), None));
        }
        // What a state handed out for this call is bound to: the request as
        // the client made it (`call_tool` and the tool it names).
        let mut target = super::relay::target("tools/call", &name, None);
        if name == super::meta::CALL_TOOL {
            // The named tool, called as if the client had called it.
            let mut inner = arguments.as_ref().map(Json::to_tree).unwrap_or(Value::Null);
            let Some(named) = inner.get("name").and_then(Value::as_str) else {
                return Ok(super::meta::tool_error(
                    "call_tool needs `name`: the tool's name as search_tools returned it",
                )
                .into());
            };
            if named == super::meta::CALL_TOOL || named == super::meta::SEARCH_TOOLS {
                return Ok(super::meta::tool_error(format!(
                    "call {named} directly, not through call_tool"
                ))
                .into());
            }
            target = super::relay::target("tools/call", super::meta::CALL_TOOL, Some(named));
            name = named.to_owned();
            let inner_arguments = inner.get_mut("arguments").map(Value::take);
            if inner_arguments
                .as_ref()
                .is_some_and(|a| !a.is_object() && !a.is_null())
            {
                return Ok(super::meta::tool_error("`arguments` must be an object").into());
            }
            arguments = inner_arguments.map(Json::Tree);
        }
        let meta = params.get_mut("_meta").map(Value::take);
        let sink: Option<Arc<dyn crate::router::CallSink>> = Some(client.clone());
        // Note who the server works for while the call runs.
        let server_id = self
            .router
            .resolve_settled(&name, None)
            .await
            .ok()
            .map(|(_, route)| route.server_id);
        let _caller = server_id.map(|id| super::requests::CallerGuard::new(self, id, client));
        // A 2026-07-28 client's answers to a server's questions pass
        // through to the server that asked.
        let input = take_input_round(&mut params);
        // Only a 2026-07-28 server can ask for input, and only a
        // 2025 client's call is then retried here: keep copies for
        // the retry just then (arguments can be large).
        let retry_copies = (!client.is_modern()
            && server_id.is_some_and(|id| self.router.asks_in_results(id)))
        .then(|| (arguments.clone(), meta.clone()));
        let mut first = Some((arguments, meta));
        let caller = client.caller();
        let retries = retry_copies.is_some();
        self.with_input_rounds(client, &target, input, retries, |input| {
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
                    Ok(outcome) => Ok(Json::Text(outcome.result)),
                    Err(err) => tool_call_error(err).map(Json::Tree),
                }
            }
        })
        .await
    }

    async fn answer_here(
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
                let _ = client.capabilities.set(Arc::new(capabilities));
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
                    self.subscriptions.add(client, &route, &uri)
                } else {
                    self.subscriptions.remove(client, &route, &uri)
                };
                if ask_server
                    && let Err(err) = self.router.resource_subscription(&route, subscribe).await
                {
                    if subscribe {
                        self.subscriptions.remove(client, &route, &uri);
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
                let target = super::relay::target("prompts/get", &name, None);
                self.with_input_rounds(client, &target, input, true, |input| {
                    let (name, arguments, meta, caller) =
                        (&name, arguments.clone(), meta.clone(), &caller);
                    async move {
                        self.router
                            .get_prompt(name, arguments, meta, input, caller)
                            .await
                            .map(Json::Tree)
                            .map_err(rpc_error)
                    }
                })
                .await
                .and_then(tree)
            }
            other => Err((METHOD_NOT_FOUND, format!("Method not found: {other}"), None)),
        }
    }
}

/// A result as a tree (a passed-through result that is not JSON after
/// all is the server's fault).
pub(super) fn tree(payload: Json) -> Result<Value, RpcFailure> {
    payload.into_tree().map_err(|err| {
        (
            INTERNAL_ERROR,
            format!("the server's result cannot be read: {err}"),
            None,
        )
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
        CallError::Server(crate::router::RpcError::Server {
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
