//! The router: resolves a name a client used to the server and tool that own
//! it, and forwards the call on that server's session. Resolution order
//! goes: an explicit server, then a namespaced name (wire name or tool id,
//! by table lookup — never by splitting), then a unique original name.

pub mod cache;
pub mod conflicts;
pub mod table;

use arc_swap::ArcSwap;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

use crate::model::{CatalogKind, ServerId, ServerStatus};
use crate::registry::RegistryEvent;
use crate::sessions::{Session, SessionManager};
// The parts of the sessions' interface the front doors use: they reach live
// servers only through the router.
/// A call's arguments, as `ToolCall` takes them.
use crate::jsonrpc::Json;
use crate::model::{CallSink, Caller, ConnectOutcome, ServerNotice, ServerRequestHandler};
use crate::registry::RegistryError;
use crate::sessions::{RpcError, SessionsError};
pub use conflicts::{Conflict, ConflictStrategy};
use table::{Fingerprints, ItemRoute, Route, RouteTable, Snapshot, UriForm};

/// Where a call's result says its server is DEGRADED.
pub const WARNING_META: &str = "io.github.mcp-aggregator/warning";

/// Why a call could not be routed or completed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("Tool not found: {0}")]
    UnknownTool(String),
    #[error("Server not found: {0}")]
    UnknownServer(String),
    #[error("Tool name {name} is ambiguous; use one of: {}", candidates.join(", "))]
    Ambiguous {
        name: String,
        candidates: Vec<String>,
    },
    #[error("Server {server} is unavailable (status {status}){}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Unavailable {
        server: String,
        status: ServerStatus,
        /// The error it was left in, when it has one.
        reason: Option<String>,
    },
    #[error("Server {server} disconnected during the call: {reason}")]
    Interrupted { server: String, reason: String },
    #[error("Server {server} did not answer within {} s", after.as_secs_f64())]
    TimedOut { server: String, after: Duration },
    /// The server answered with a JSON-RPC error (passed on as it is), or
    /// with something that is not an answer (an internal error).
    #[error("{reason}")]
    Server {
        /// The JSON-RPC error object for the client.
        error: Value,
        reason: String,
    },
    #[error("Resource not found: {0}")]
    UnknownResource(String),
    #[error("Prompt not found: {0}")]
    UnknownPrompt(String),
    #[error("`ref` must be a ref/prompt with a `name` or a ref/resource with a `uri`")]
    UnknownReference,
    /// The store could not be read (what it says is in the message).
    #[error("cannot read the catalog: {0}")]
    Catalog(String),
}

/// Why a connect or a disconnect was refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("the aggregator is shutting down")]
    ShuttingDown,
}

impl From<SessionsError> for ControlError {
    fn from(err: SessionsError) -> ControlError {
        match err {
            SessionsError::Registry(err) => ControlError::Registry(err),
            SessionsError::ShuttingDown => ControlError::ShuttingDown,
        }
    }
}

/// The definitions `table` lists, as `tools/list` shows them, read from
/// `store` (tools removed since the table was built are left out).
fn read_listed(
    store: &crate::store::Store,
    table: &RouteTable,
) -> Result<Vec<Box<serde_json::value::RawValue>>, crate::store::StoreError> {
    let routes = &table.tools.routes;
    let definitions =
        store.tool_definitions(routes.iter().map(|r| (r.server_id, &*r.original_name)))?;
    Ok(routes
        .iter()
        .zip(definitions)
        .filter_map(|(route, definition)| {
            table::listed_as(&definition?, route.wire_name.as_deref()?)
        })
        .collect())
}

/// The resource cache's key: a server and its own URI, whatever form the
/// client used.
fn cache_key(server_id: ServerId, uri: &str) -> String {
    format!("{server_id} {uri}")
}

/// A retry of a call a 2026-07-28 server answered with an input-required
/// result: the answers, and the server's opaque state, passed back as the
/// server asked.
#[derive(Debug, Clone)]
pub struct InputRound {
    pub responses: Value,
    pub state: Option<Value>,
}

/// A tool call as a front door asks for it.
pub struct ToolCall<'a> {
    /// The name the client used (wire name, tool id or bare name).
    pub name: &'a str,
    pub arguments: Option<Json>,
    pub meta: Option<Value>,
    /// The server the client named, if it did.
    pub server: Option<&'a str>,
    /// Where the call's progress and log messages go.
    pub sink: Option<Arc<dyn CallSink>>,
    /// A retry's answers to the server's questions.
    pub input: Option<InputRound>,
    pub caller: &'a Caller,
}

/// A call's params as they go to the server.
#[derive(serde::Serialize)]
struct CallParams<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<&'a Json>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<&'a Value>,
    #[serde(rename = "inputResponses", skip_serializing_if = "Option::is_none")]
    input_responses: Option<&'a Value>,
    #[serde(rename = "requestState", skip_serializing_if = "Option::is_none")]
    request_state: Option<&'a Value>,
}

/// A resolved call, with how long each part took.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub route: Arc<Route>,
    /// The server's result as it wrote it (for the client; parse it only
    /// to read it).
    pub result: Box<serde_json::value::RawValue>,
    pub routing: Duration,
    pub execution: Duration,
}

/// Cheap to clone.
#[derive(Clone)]
pub struct Router {
    table: Arc<ArcSwap<RouteTable>>,
    sessions: SessionManager,
    changes: watch::Sender<Fingerprints>,
    /// How many times servers announced a change of each list.
    announced: Arc<std::sync::Mutex<Fingerprints>>,
    strategy: ConflictStrategy,
    cache: Arc<cache::ResourceCache>,
    /// One rebuild at a time, so an older snapshot never replaces a newer.
    rebuilding: Arc<tokio::sync::Mutex<()>>,
    startup_wait: Duration,
}

/// How long, by default, a list or call made while `auto_connect` servers
/// are still starting waits for them.
pub const STARTUP_WAIT: Duration = Duration::from_secs(5);
/// The least a burst of changes is let settle before the table is rebuilt.
const SETTLE: Duration = Duration::from_millis(5);
/// The most: a change shows in the table within about this much more than
/// a rebuild takes.
const MAX_SETTLE: Duration = Duration::from_secs(1);

impl Router {
    /// Builds the first table from the store and keeps it current.
    /// `startup_wait` bounds how long a list or call made while
    /// `auto_connect` servers are still starting waits for them.
    pub async fn start(
        sessions: SessionManager,
        strategy: ConflictStrategy,
        startup_wait: Duration,
    ) -> Router {
        let (changes, _) = watch::channel(Fingerprints::default());
        let router = Router {
            table: Arc::new(ArcSwap::from_pointee(RouteTable::default())),
            sessions,
            changes,
            announced: Arc::default(),
            strategy,
            cache: Arc::new(cache::ResourceCache::new(cache::CacheSettings::default())),
            rebuilding: Arc::new(tokio::sync::Mutex::new(())),
            startup_wait,
        };
        router.rebuild().await;
        router.spawn_maintainer();
        router.spawn_cache_keeper();
        router
    }

    /// The current table (lock-free).
    /// For a process about to exit: lets go of the table without freeing
    /// it piece by piece (a second at 100,000 tools).
    pub fn abandon_table_at_exit(&self) {
        std::mem::forget(self.table.swap(Arc::new(RouteTable::default())));
    }

    pub fn table(&self) -> Arc<RouteTable> {
        self.table.load_full()
    }

    /// Fires whenever what clients can list changes.
    pub fn subscribe(&self) -> watch::Receiver<Fingerprints> {
        self.changes.subscribe()
    }

    /// Starts connecting a server (the admin API's connect).
    pub async fn connect(&self, id: ServerId) -> Result<ConnectOutcome, ControlError> {
        Ok(self.sessions.connect(id).await?)
    }

    /// Disconnects a server: its calls drain (or are cut off with `force`);
    /// answers how many were cut off.
    pub async fn disconnect(&self, id: ServerId, force: bool) -> Result<usize, ControlError> {
        Ok(self.sessions.disconnect(id, force).await?)
    }

    /// Stops a server's supervisor before its registration is removed.
    pub async fn stop(&self, id: ServerId) {
        self.sessions.stop(id).await;
    }

    /// Where a server's requests to a client (sampling, elicitation, roots)
    /// go.
    pub fn set_request_handler(&self, handler: Arc<dyn ServerRequestHandler>) {
        self.sessions.set_request_handler(handler);
    }

    /// Servers' notifications that are not list changes (resource updates,
    /// log messages outside calls, …), as they come.
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<ServerNotice> {
        self.sessions.notices()
    }

    /// Whether `auto_connect` servers are still starting (or one just
    /// connected is being discovered): lists are about to grow.
    pub fn is_starting(&self) -> bool {
        self.sessions.is_starting()
    }

    /// Whether the server may ask its client for input inside a result
    /// (an input-required result), as its revision does.
    pub fn asks_in_results(&self, id: ServerId) -> bool {
        self.sessions
            .session(id)
            .is_some_and(|session| session.asks_in_results())
    }

    /// Many clients list once when they start and ignore `list_changed`:
    /// while `auto_connect` servers are still on their first attempt, wait
    /// for them (bounded) and answer from a table that includes them. Once
    /// start-up is over it costs one read of the store's generation.
    pub async fn settle_startup(&self) {
        if self.sessions.wait_started(self.startup_wait).await {
            self.rebuild().await;
        } else {
            // A server that just finished starting has stored its lists a
            // moment before the table that shows them is rebuilt.
            self.catch_up().await;
        }
    }

    /// Rebuilds the table from the store.
    pub async fn rebuild(&self) {
        // Sessions closing at shutdown change every status: a table of
        // 100,000 tools rebuilt for each would hold the exit up for seconds.
        if self.sessions.is_closing() {
            return;
        }
        let _one_at_a_time = self.rebuilding.lock().await;
        let store = Arc::clone(self.sessions.registry().store());
        let strategy = self.strategy;
        let built =
            tokio::task::spawn_blocking(move || -> Result<RouteTable, crate::store::StoreError> {
                // Read first: a write landing meanwhile only makes the
                // table look older than it is (one rebuild too many).
                let generation = store.generation()?;
                let mut table = RouteTable::build(
                    Snapshot {
                        servers: store.list_servers()?,
                        resources: store.all_items(CatalogKind::Resource)?,
                        resource_templates: store.all_items(CatalogKind::ResourceTemplate)?,
                        prompts: store.all_items(CatalogKind::Prompt)?,
                    },
                    strategy,
                    |add| store.for_each_tool_route(add),
                )?;
                table.generation = generation;
                Ok(table)
            })
            .await;
        match built {
            Ok(Ok(table)) => {
                self.table.store(Arc::new(table));
                self.publish();
                // The snapshot the table was built from is gone: give its
                // pages back (a catalog of 10,000 tools is tens of MB).
                crate::memory::release_freed();
            }
            Ok(Err(err)) => tracing::error!("cannot rebuild the routing table: {err}"),
            Err(err) => tracing::error!("the routing table task failed: {err}"),
        }
    }

    /// The definitions `table` lists, read from the store: a catalog too
    /// large for the table to hold them (`ListedTools::held` is `None`).
    /// Tools removed since the table was built are left out.
    pub async fn read_listed_tools(
        &self,
        table: Arc<RouteTable>,
    ) -> Result<Vec<Box<serde_json::value::RawValue>>, CallError> {
        let store = Arc::clone(self.sessions.registry().store());
        let read = tokio::task::spawn_blocking(move || read_listed(&store, &table)).await;
        match read {
            Ok(Ok(listed)) => Ok(listed),
            Ok(Err(err)) => Err(CallError::Catalog(err.to_string())),
            Err(err) => Err(CallError::Catalog(err.to_string())),
        }
    }

    /// Where a resource URI a client used goes (see
    /// `RouteTable::route_resource`), waiting for servers still starting if
    /// nobody offers it yet.
    pub async fn route_resource(&self, uri: &str) -> Result<(ItemRoute, UriForm), CallError> {
        if let Some(found) = self.table().route_resource(uri) {
            return Ok(found);
        }
        self.settle().await;
        self.table()
            .route_resource(uri)
            .ok_or_else(|| CallError::UnknownResource(uri.to_owned()))
    }

    /// Forwards `resources/subscribe` (or unsubscribe) for a routed URI.
    pub async fn resource_subscription(
        &self,
        route: &ItemRoute,
        subscribe: bool,
    ) -> Result<Value, CallError> {
        let session = self.session_for(&self.table(), route.server_id).await?;
        session
            .resource_subscription(&route.original, subscribe)
            .await
            .map_err(|err| self.call_failure(session.server(), err))
    }

    /// A server said one of its lists changed (after we listed it again):
    /// clients are told, even if the aggregate is the same, as a client of
    /// that server alone would be.
    fn spawn_announce(&self, list: fn(&mut Fingerprints) -> &mut u64) {
        let router = self.clone();
        tokio::spawn(async move { router.announce(list).await });
    }

    async fn announce(&self, list: fn(&mut Fingerprints) -> &mut u64) {
        // The table first holds what was just listed.
        self.catch_up().await;
        if let Ok(mut epochs) = self.announced.lock() {
            let epoch = list(&mut epochs);
            *epoch = epoch.wrapping_add(1);
        }
        self.publish();
    }

    /// Tells the clients' listeners what they can list now: the current
    /// table's hashes moved on by the announcements. Read under the
    /// channel's lock, so a rebuild that publishes after an announcement
    /// can never put back the value from before it (a change seen as none).
    fn publish(&self) {
        self.changes.send_if_modified(|published| {
            let epochs = self.announced.lock().map(|e| *e).unwrap_or_default();
            let now = self.table.load().fingerprints.with_epochs(epochs);
            let changed = *published != now;
            *published = now;
            changed
        });
    }

    /// Keeps the cache honest: an updated resource, a changed list, or a
    /// server that went away drops what was cached from it.
    fn spawn_cache_keeper(&self) {
        let router = self.clone();
        let mut notices = self.sessions.notices();
        let mut registry_events = self.sessions.registry().subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    notice = notices.recv() => match notice {
                        Ok(notice) => match notice.message.get("method").and_then(Value::as_str) {
                            Some("notifications/resources/updated") => {
                                if let Some(uri) = notice.message["params"]["uri"].as_str() {
                                    router.cache.invalidate(&cache_key(notice.server_id, uri));
                                }
                            }
                            Some("notifications/resources/list_changed") => {
                                router.cache.invalidate_server(notice.server_id);
                                router.spawn_announce(|f| &mut f.resources);
                            }
                            Some("notifications/tools/list_changed") => router.spawn_announce(|f| &mut f.tools),
                            Some("notifications/prompts/list_changed") => router.spawn_announce(|f| &mut f.prompts),
                            _ => {}
                        },
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                    event = registry_events.recv() => match event {
                        Ok(RegistryEvent::StatusChanged { id, status, .. }) if !status.is_available() => router.cache.invalidate_server(id),
                        Ok(RegistryEvent::Removed { id, .. }) => router.cache.invalidate_server(id),
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                }
            }
        });
    }

    /// Rebuilds on every catalog change and status change, coalescing bursts.
    fn spawn_maintainer(&self) {
        let router = self.clone();
        let mut registry_events = self.sessions.registry().subscribe();
        let mut catalog_events = self.sessions.catalog().subscribe();
        tokio::spawn(async move {
            // How long a burst is let settle: 5 ms, or as long as the last
            // rebuild took. A table of 100,000 tools takes ~0.4 s; while
            // 200 servers connect one after another it was rebuilt back to
            // back, each time a new table of ~40 MB among the start's
            // other allocations. Now at most half the time goes to it.
            let mut settle = SETTLE;
            loop {
                let relevant = tokio::select! {
                    event = registry_events.recv() => match event {
                        Ok(RegistryEvent::StatusChanged { .. } | RegistryEvent::Removed { .. } | RegistryEvent::Registered { .. } | RegistryEvent::Updated { .. }) => true,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                    event = catalog_events.recv() => match event {
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                };
                if relevant {
                    // Let a burst (a server's status + its discovery) settle.
                    tokio::time::sleep(settle).await;
                    while registry_events.try_recv().is_ok() || catalog_events.try_recv().is_ok() {}
                    let started = std::time::Instant::now();
                    router.rebuild().await;
                    settle = started.elapsed().clamp(SETTLE, MAX_SETTLE);
                }
            }
        });
    }

    /// Finds the tool a client means.
    pub fn resolve(
        &self,
        table: &RouteTable,
        name: &str,
        server: Option<&str>,
    ) -> Result<Arc<Route>, CallError> {
        if let Some(server) = server {
            let entry = table
                .find_server(server)
                .ok_or_else(|| CallError::UnknownServer(server.to_owned()))?;
            let routes = table.by_server.get(&entry.id);
            let found = routes.and_then(|r| r.get(name)).or_else(|| {
                table
                    .namespaced
                    .get(name)
                    .filter(|r| r.server_id == entry.id)
            });
            return found
                .cloned()
                .ok_or_else(|| CallError::UnknownTool(format!("{name} on {}", entry.name)));
        }
        if let Some(route) = table.namespaced.get(name) {
            return Ok(Arc::clone(route));
        }
        if let Some(route) = table.aliases.get(name) {
            return Ok(Arc::clone(route));
        }
        match table.by_original.get(name).map(Vec::as_slice) {
            Some(many) if many.len() > 1 => Err(CallError::Ambiguous {
                name: name.to_owned(),
                candidates: many.iter().map(|r| r.tool_id.to_string()).collect(),
            }),
            Some([only]) => Err(CallError::UnknownTool(format!(
                "{name} (bare names are off: call it as {})",
                only.tool_id
            ))),
            _ => Err(CallError::UnknownTool(name.to_owned())),
        }
    }

    /// For a name the table does not know: waits for servers still
    /// starting, and rebuilds the table if the store moved since it was
    /// read (a server's tools can be stored a moment before the table that
    /// routes them is rebuilt). Only on a miss, never on the hot path.
    pub async fn settle(&self) {
        if self.sessions.wait_connected(self.startup_wait).await {
            self.rebuild().await;
        }
        self.catch_up().await;
    }

    /// Rebuilds the table if the store moved since it was built.
    async fn catch_up(&self) {
        let store = Arc::clone(self.sessions.registry().store());
        let current = tokio::task::spawn_blocking(move || store.generation())
            .await
            .ok()
            .and_then(Result::ok);
        if current.is_some_and(|generation| generation != self.table().generation) {
            self.rebuild().await;
        }
    }

    /// `resolve`, except that a name nobody offers yet is looked up again
    /// once the servers still starting have started.
    pub async fn resolve_settled(
        &self,
        name: &str,
        server: Option<&str>,
    ) -> Result<(Arc<RouteTable>, Arc<Route>), CallError> {
        let table = self.table();
        match self.resolve(&table, name, server) {
            Err(CallError::UnknownTool(_) | CallError::UnknownServer(_)) => {
                self.settle().await;
                let table = self.table();
                let route = self.resolve(&table, name, server)?;
                Ok((table, route))
            }
            other => other.map(|route| (table, route)),
        }
    }

    /// Calls a tool; `arguments` and `meta` pass through unchanged, except
    /// that a progress token is swapped for one of ours. With a `sink`, the
    /// server's progress (with the client's token) and log messages during
    /// the call go to it, before the result.
    pub async fn call_tool(&self, call: ToolCall<'_>) -> Result<CallOutcome, CallError> {
        use tracing::Instrument as _;
        // Exported only when traces are on (`logging::TRACE_TARGET`).
        let span = tracing::trace_span!(target: "mcp_aggregator::otel", "route", tool = call.name);
        self.call_tool_traced(call).instrument(span).await
    }

    async fn call_tool_traced(&self, call: ToolCall<'_>) -> Result<CallOutcome, CallError> {
        let ToolCall {
            name,
            arguments,
            mut meta,
            server,
            sink,
            input,
            caller,
        } = call;
        let started = Instant::now();
        let (table, route) = self.resolve_settled(name, server).await?;
        let session = self.session_for(&table, route.server_id).await?;
        let routing = started.elapsed();
        let _routed = sink.map(|sink| {
            let client_token = meta.as_ref().and_then(|m| m.get("progressToken")).cloned();
            let (ours, guard) = session.route_call(sink, client_token);
            if let (Some(ours), Some(meta)) = (ours, meta.as_mut()) {
                meta["progressToken"] = ours;
            }
            guard
        });
        let params = CallParams {
            name: &route.original_name,
            arguments: arguments.as_ref(),
            meta: meta.as_ref(),
            input_responses: input.as_ref().map(|input| &input.responses),
            request_state: input.as_ref().and_then(|input| input.state.as_ref()),
        };
        // The arguments the tool mirrors into headers, for a revision that
        // sends them.
        let headers = if route.header_params.is_empty() || !session.mirrors_param_headers() {
            Vec::new()
        } else {
            let arguments = arguments.as_ref().map(Json::to_tree);
            crate::model::param_headers::call_headers(&route.header_params, arguments.as_ref())
        };
        // Written once, the arguments as the client wrote them.
        let params = serde_json::value::to_raw_value(&params).map_err(|err| {
            self.call_failure(&route.server_name, RpcError::Malformed(err.to_string()))
        })?;
        let mut result = session
            .request_for(caller, "tools/call", Some(Json::Text(params)), &headers)
            .await
            .map_err(|err| self.call_failure(&route.server_name, err))?;
        if table
            .server(route.server_id)
            .is_some_and(|s| s.status == ServerStatus::Degraded)
        {
            self.warn_degraded(&mut result, route.server_id, &route.server_name);
        }
        Ok(CallOutcome {
            route,
            result,
            routing,
            execution: started.elapsed() - routing,
        })
    }

    /// Tells the caller, in the result's `_meta`, that the server that
    /// answered is DEGRADED (tools of a degraded server are still served).
    fn warn_degraded(
        &self,
        result: &mut Box<serde_json::value::RawValue>,
        id: ServerId,
        server: &str,
    ) {
        let Ok(mut tree) = serde_json::from_str::<Value>(result.get()) else {
            return;
        };
        let Some(object) = tree.as_object_mut() else {
            return;
        };
        let reason = self
            .sessions
            .degraded_reason(id)
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        let warning = format!("server {server} is DEGRADED{reason}");
        match object.get_mut("_meta") {
            Some(Value::Object(meta)) => {
                meta.insert(WARNING_META.to_owned(), Value::String(warning));
            }
            _ => {
                object.insert("_meta".to_owned(), json!({ WARNING_META: warning }));
            }
        }
        if let Ok(warned) = serde_json::value::to_raw_value(&tree) {
            *result = warned;
        }
    }

    /// A server's health figures (none until it has been connected).
    pub fn health(&self, id: ServerId) -> Option<crate::model::health::HealthFigures> {
        self.sessions.health(id)
    }

    /// The resource cache's counters.
    pub fn cache_stats(&self) -> cache::CacheStats {
        self.cache.stats()
    }

    /// Reads a resource (through the cache). Contents name their URI in
    /// the form the client used.
    pub async fn read_resource(
        &self,
        uri: &str,
        meta: Option<Value>,
        caller: &Caller,
    ) -> Result<Value, CallError> {
        let (route, form) = self.route_resource(uri).await?;
        let key = cache_key(route.server_id, &route.original);
        let mut result = match self.cache.get(&key) {
            Some(cached) => cached,
            None => {
                let session = self.session_for(&self.table(), route.server_id).await?;
                let mut params = json!({"uri": route.original.as_ref()});
                if let Some(meta) = meta {
                    params["_meta"] = meta;
                }
                let result = crate::sessions::Session::tree(
                    session
                        .request_for(caller, "resources/read", Some(Json::Tree(params)), &[])
                        .await,
                )
                .map_err(|err| self.call_failure(session.server(), err))?;
                self.cache.put(&key, route.server_id, &result);
                result
            }
        };
        if form == UriForm::Namespaced
            && let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut)
        {
            let table = self.table();
            for content in contents {
                if let Some(inner) = content.get("uri").and_then(Value::as_str)
                    && let Some(namespaced) = table.namespaced_uri(route.server_id, inner)
                {
                    content["uri"] = Value::String(namespaced);
                }
            }
        }
        Ok(result)
    }

    /// Gets a prompt by its namespaced name or the server's own.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<Value>,
        meta: Option<Value>,
        input: Option<InputRound>,
        caller: &Caller,
    ) -> Result<Value, CallError> {
        let mut table = self.table();
        if table.route_prompt(name).is_none() {
            self.settle().await;
            table = self.table();
        }
        let route = table
            .route_prompt(name)
            .cloned()
            .ok_or_else(|| CallError::UnknownPrompt(name.to_owned()))?;
        let session = self.session_for(&table, route.server_id).await?;
        let mut params = json!({"name": route.original.as_ref()});
        if let Some(arguments) = arguments {
            params["arguments"] = arguments;
        }
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        if let Some(input) = input {
            params["inputResponses"] = input.responses;
            if let Some(state) = input.state {
                params["requestState"] = state;
            }
        }
        crate::sessions::Session::tree(
            session
                .request_for(caller, "prompts/get", Some(Json::Tree(params)), &[])
                .await,
        )
        .map_err(|err| self.call_failure(session.server(), err))
    }

    /// `completion/complete`, sent to the server owning the prompt or the
    /// resource template its `ref` names, with the ref in the server's own
    /// terms. A server that offers no completions gets no request: the
    /// answer is an empty list.
    pub async fn complete(&self, mut params: Value) -> Result<Value, CallError> {
        let reference = params.get("ref").cloned().unwrap_or(Value::Null);
        let kind = reference.get("type").and_then(Value::as_str);
        let (field, route) = match kind {
            Some("ref/prompt") => {
                let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
                let mut table = self.table();
                if table.route_prompt(name).is_none() {
                    self.settle().await;
                    table = self.table();
                }
                let route = table.route_prompt(name).cloned();
                (
                    "name",
                    route.ok_or_else(|| CallError::UnknownPrompt(name.to_owned()))?,
                )
            }
            Some("ref/resource") => {
                let uri = reference.get("uri").and_then(Value::as_str).unwrap_or("");
                let mut table = self.table();
                if table.route_template(uri).is_none() && table.route_resource(uri).is_none() {
                    self.settle().await;
                    table = self.table();
                }
                let route = table
                    .route_template(uri)
                    .or_else(|| table.route_resource(uri).map(|(route, _)| route));
                (
                    "uri",
                    route.ok_or_else(|| CallError::UnknownResource(uri.to_owned()))?,
                )
            }
            _ => return Err(CallError::UnknownReference),
        };
        let session = self.session_for(&self.table(), route.server_id).await?;
        if !session.has_capability("completions") {
            return Ok(json!({"completion": {"values": [], "hasMore": false}}));
        }
        params["ref"][field] = Value::String(route.original.to_string());
        session
            .request("completion/complete", Some(params))
            .await
            .map_err(|err| self.call_failure(session.server(), err))
    }

    /// The live session of a server. A server in ERROR gets one immediate
    /// reconnect attempt (none while its circuit breaker is open: its last
    /// attempt failed moments ago), and a server that is (re)connecting is
    /// waited for, up to the sessions' `call_wait`.
    async fn session_for(
        &self,
        table: &RouteTable,
        id: ServerId,
    ) -> Result<Arc<Session>, CallError> {
        // A session whose link just died is not used: its server is about
        // to be marked ERROR, and the wait reconnects it.
        if let Some(session) = self.sessions.session(id).filter(|s| !s.is_closed()) {
            return Ok(session);
        }
        let name = || {
            table
                .server(id)
                .map(|e| e.name.to_string())
                .unwrap_or_else(|| id.to_string())
        };
        match self
            .sessions
            .wait_session(id, self.sessions.settings().call_wait)
            .await
        {
            Ok(session) => Ok(session),
            Err(Some(status)) => Err(CallError::Unavailable {
                server: name(),
                status,
                reason: self
                    .sessions
                    .registry()
                    .get(&id.to_string())
                    .await
                    .ok()
                    .and_then(|r| r.error_message),
            }),
            Err(None) => Err(CallError::UnknownServer(name())),
        }
    }

    fn call_failure(&self, server: &str, err: RpcError) -> CallError {
        match err {
            RpcError::Closed(reason)
            | RpcError::Link(crate::sessions::link::LinkError::Closed(reason)) => {
                CallError::Interrupted {
                    server: server.to_owned(),
                    reason,
                }
            }
            RpcError::Timeout(after) => CallError::TimedOut {
                server: server.to_owned(),
                after,
            },
            other => CallError::Server {
                error: other.to_error_object(),
                reason: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ServerRecord, ServerSource, Transport};
    use crate::store::Store;

    fn build(store: &Store, held_listing: usize) -> RouteTable {
        RouteTable::build_holding(
            Snapshot {
                servers: store.list_servers().unwrap(),
                resources: Vec::new(),
                resource_templates: Vec::new(),
                prompts: Vec::new(),
            },
            ConflictStrategy::default(),
            held_listing,
            |add| store.for_each_tool_route(add),
        )
        .unwrap()
    }

    /// `count` tool definitions with text that needs escaping.
    fn tools(count: usize) -> Vec<Value> {
        (0..count)
            .map(|i| {
                json!({
                    "name": format!("tool_{i}"),
                    "description": format!("Does thing {i} — ünïcode \"quoted\""),
                    "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}},
                    "annotations": {"readOnlyHint": i % 2 == 0}
                })
            })
            .collect()
    }

    fn texts(listed: &[Box<serde_json::value::RawValue>]) -> Vec<&str> {
        listed.iter().map(|t| t.get()).collect()
    }

    /// A catalog too large to hold lists the same definitions, read from
    /// the store, and its fingerprint follows what is listed.
    #[test]
    fn a_large_catalog_lists_from_the_store_what_a_small_one_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let rules = crate::model::wire_name::WireNameRules::default();
        for (name, status) in [
            ("alpha", ServerStatus::Connected),
            ("beta", ServerStatus::Connected),
            ("gamma", ServerStatus::Disconnected),
        ] {
            let record = ServerRecord {
                status,
                ..ServerRecord::new(
                    name,
                    Transport::Stdio {
                        command: "true".into(),
                        args: Vec::new(),
                        env: Default::default(),
                        cwd: None,
                    },
                    ServerSource::Api,
                )
            };
            store.insert_server(&record, "test").unwrap();
            store.replace_tools(record.id, &tools(30), &rules).unwrap();
        }

        let held = build(&store, usize::MAX);
        let listed_in_store = build(&store, 1000);
        let held_texts = held.tools.held.as_ref().expect("held");
        assert_eq!(held_texts.len(), 60, "gamma is not available");
        assert!(listed_in_store.tools.held.is_none());
        assert_eq!(listed_in_store.tools.len(), 60);
        let read = read_listed(&store, &listed_in_store).unwrap();
        assert_eq!(texts(&read), texts(held_texts));
        let first: Value = serde_json::from_str(read[0].get()).unwrap();
        assert_eq!(first["name"], "alpha__tool_0");
        assert_eq!(first["annotations"]["readOnlyHint"], true);
        assert_eq!(held.fingerprints.tools, listed_in_store.fingerprints.tools);
        // Routes do not depend on where definitions are kept.
        assert!(listed_in_store.namespaced.contains_key("beta.tool_29"));
        assert_eq!(
            listed_in_store.by_original["tool_3"].len(),
            held.by_original["tool_3"].len()
        );

        // A tool gone since the table was built is left out; the next
        // table's fingerprint moves.
        let beta = store.get_server_by_name("beta").unwrap().unwrap();
        store.replace_tools(beta.id, &tools(29), &rules).unwrap();
        assert_eq!(read_listed(&store, &listed_in_store).unwrap().len(), 59);
        assert_ne!(
            build(&store, 1000).fingerprints.tools,
            held.fingerprints.tools
        );
    }
}
