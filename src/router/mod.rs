//! The router: resolves a name a client used to the server and tool that own
//! it, and forwards the call on that server's session. Resolution order
//! goes: an explicit server, then a namespaced name (wire name or tool id,
//! by table lookup — never by splitting), then a unique original name.

mod arguments;
pub mod cache;
mod call_audit;
mod calls;
pub mod conflicts;
mod control;
mod items;
mod limits;
mod routes;
pub mod table;
mod upkeep;
mod views;

use arc_swap::ArcSwap;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use crate::model::ServerStatus;
use crate::registry::RegistryError;
use crate::sessions::{SessionManager, SessionsError};
pub use calls::{CallOutcome, InputRound, ToolCall, WARNING_META};
pub use conflicts::{Conflict, ConflictStrategy};
pub use routes::{ItemRoute, Route};
use table::{Fingerprints, RouteTable};
pub use views::ViewLists;

/// Why a call could not be routed or completed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("Tool not found: {0}")]
    UnknownTool(String),
    /// The tool is kept but not offered: `reason` says why and what to do.
    #[error("{name} is not offered: {reason}")]
    Withheld { name: String, reason: String },
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
    /// The server wants a login (or one could not be had): the reason
    /// names what to do.
    #[error("{reason}")]
    NeedsLogin { server: String, reason: String },
    /// The arguments do not match the tool's `inputSchema` (checked
    /// before the call is sent). Shown with the values masked: this text
    /// goes to logs; callers get `arguments::summary` unmasked.
    #[error(
        "Invalid arguments for tool {tool}: {}",
        crate::trust::arguments::summary(problems, true)
    )]
    InvalidArguments {
        tool: String,
        server: String,
        problems: Vec<crate::trust::ArgumentProblem>,
    },
    /// Over one of the server's limits, with no room within its wait.
    #[error("Server {server} is at its limit of {limit}; try again shortly")]
    Limited { server: String, limit: String },
    #[error("Server {server} did not answer within {} s", after.as_secs_f64())]
    TimedOut { server: String, after: Duration },
    /// The server answered with a JSON-RPC error (passed on as it is), or
    /// with something that is not an answer (an internal error).
    #[error("{reason}")]
    Server {
        /// Who answered with it (for the audit log).
        server: String,
        /// The JSON-RPC error object for the client.
        error: Value,
        reason: String,
    },
    /// A retry brought a server's state to another server (the name it
    /// names resolves elsewhere now).
    #[error("requestState refused: another server issued it")]
    ForeignState,
    #[error("Resource not found: {0}")]
    UnknownResource(String),
    #[error("Prompt not found: {0}")]
    UnknownPrompt(String),
    #[error("Profile not found: {0}")]
    UnknownProfile(String),
    #[error("`ref` must be a ref/prompt with a `name` or a ref/resource with a `uri`")]
    UnknownReference,
    /// The store could not be read (what it says is in the message).
    #[error("cannot read the catalog: {0}")]
    Catalog(String),
}

impl CallError {
    /// What the caller is told: `Display`, except that the values a call
    /// sent are shown (the caller sent them) where logs mask them.
    pub fn to_caller(&self) -> String {
        match self {
            CallError::InvalidArguments { tool, problems, .. } => format!(
                "Invalid arguments for tool {tool}: {}",
                crate::trust::arguments::summary(problems, false)
            ),
            other => other.to_string(),
        }
    }

    /// The server the call reached or named, when the error knows it.
    pub fn server(&self) -> Option<&str> {
        match self {
            CallError::UnknownServer(server)
            | CallError::Unavailable { server, .. }
            | CallError::Interrupted { server, .. }
            | CallError::NeedsLogin { server, .. }
            | CallError::TimedOut { server, .. }
            | CallError::InvalidArguments { server, .. }
            | CallError::Limited { server, .. }
            | CallError::Server { server, .. } => Some(server),
            _ => None,
        }
    }
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

/// Cheap to clone.
#[derive(Clone)]
pub struct Router {
    table: Arc<ArcSwap<RouteTable>>,
    sessions: SessionManager,
    changes: watch::Sender<Fingerprints>,
    /// How many times servers announced a change of each list.
    announced: Arc<std::sync::Mutex<Fingerprints>>,
    /// The same, server by server (for views).
    announced_by:
        Arc<std::sync::Mutex<std::collections::HashMap<crate::model::ServerId, Fingerprints>>>,
    views: Arc<views::Views>,
    strategy: ConflictStrategy,
    cache: Arc<cache::ResourceCache>,
    /// One rebuild at a time, so an older snapshot never replaces a newer.
    rebuilding: Arc<tokio::sync::Mutex<()>>,
    startup_wait: Duration,
    /// Where tool calls are recorded, once turned on.
    call_audit: Arc<std::sync::OnceLock<call_audit::CallAudit>>,
    /// Each limited server's calls in flight and call starts.
    limiters: Arc<limits::Limiters>,
    /// Whether arguments are checked by default, and compiled schemas.
    arguments: Arc<arguments::ArgumentChecks>,
}

/// How long, by default, a list or call made while `auto_connect` servers
/// are still starting waits for them.
pub const STARTUP_WAIT: Duration = Duration::from_secs(5);
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
            announced_by: Arc::default(),
            views: Arc::default(),
            strategy,
            cache: Arc::new(cache::ResourceCache::new(cache::CacheSettings::default())),
            rebuilding: Arc::new(tokio::sync::Mutex::new(())),
            startup_wait,
            call_audit: Arc::default(),
            limiters: Arc::default(),
            arguments: Arc::default(),
        };
        router.rebuild().await;
        router.spawn_maintainer();
        router.spawn_cache_keeper();
        router.spawn_view_keeper();
        router
    }

    /// Records every tool call from now on in the audit log (`call`
    /// entries: who, which tool of which server, how long, ok or the
    /// error; never arguments or results).
    pub fn audit_calls(&self, registry: crate::registry::Registry) {
        let _ = self.call_audit.set(call_audit::CallAudit::start(registry));
    }

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
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod listing_tests {
    use super::*;
    use crate::model::{ServerRecord, ServerSource, Transport};
    use crate::store::Store;
    use serde_json::json;
    use table::Snapshot;

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
        let read = upkeep::read_listed(&store, &listed_in_store, None).unwrap();
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
        assert_eq!(
            upkeep::read_listed(&store, &listed_in_store, None)
                .unwrap()
                .len(),
            59
        );
        assert_ne!(
            build(&store, 1000).fingerprints.tools,
            held.fingerprints.tools
        );
    }
}
