//! When a call's arguments are checked against its tool's `inputSchema`
//! (the server's `trust.validate_arguments`, else the daemon's
//! `--validate-arguments`), and the compiled schemas: a bounded LRU keyed
//! by tool, compiled again when the definition changes. A schema that
//! does not compile does not block its tool: its calls pass unchecked,
//! logged once per definition (the server still checks what it receives).

use lru::LruCache;
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::routes::Route;
use super::table::RouteTable;
use super::{CallError, Router};
use crate::jsonrpc::Json;
use crate::trust::arguments::{Schema, check, compile};

/// Compiled schemas kept, most recently used first.
const CACHED: usize = 1024;
/// Whether calls are checked by default, and the compiled schemas.
pub(super) struct ArgumentChecks {
    by_default: AtomicBool,
    cache: Mutex<LruCache<Arc<str>, Cached>>,
}

struct Cached {
    /// Which definition it was compiled from.
    definition: Key,
    schema: Arc<Schema>,
}

/// A listed tool's definition is known by its hash in the table; one the
/// table does not list is read from the store at most once per store
/// generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Listed(u64),
    Stored(u64),
}

impl Default for ArgumentChecks {
    fn default() -> ArgumentChecks {
        ArgumentChecks {
            by_default: AtomicBool::new(false),
            cache: Mutex::new(LruCache::new(
                NonZeroUsize::new(CACHED).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }
}

impl ArgumentChecks {
    fn cached(&self, tool: &str, definition: Key) -> Option<Arc<Schema>> {
        let mut cache = self.cache.lock().ok()?;
        let entry = cache.get(tool)?;
        (entry.definition == definition).then(|| Arc::clone(&entry.schema))
    }

    fn keep(&self, tool: &Arc<str>, definition: Key, schema: Arc<Schema>) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.put(Arc::clone(tool), Cached { definition, schema });
        }
    }
}

impl Router {
    /// Whether calls to servers that do not say (`trust.validate_arguments`)
    /// have their arguments checked (`--validate-arguments`).
    pub fn check_arguments_by_default(&self, on: bool) {
        self.arguments.by_default.store(on, Ordering::Relaxed);
    }

    /// `Err(InvalidArguments)` when the route's server wants arguments
    /// checked and these do not match the tool's schema.
    pub(super) async fn check_arguments(
        &self,
        table: &RouteTable,
        route: &Arc<Route>,
        called: &str,
        arguments: Option<&Json>,
    ) -> Result<(), CallError> {
        // Whatever the checks: a tool's arguments are its parameters by
        // name. Anything else is the caller's mistake, not the server's
        // (which would answer an error and count as failing).
        if let Some(kind) = arguments.and_then(not_an_object) {
            return Err(CallError::InvalidArguments {
                tool: called.to_owned(),
                server: route.server_name.to_string(),
                problems: vec![crate::trust::ArgumentProblem {
                    path: String::new(),
                    message: format!(
                        "the arguments are {kind}; they must be an object (the tool's parameters by name)"
                    ),
                    keyword: "type".to_owned(),
                    schema_path: String::new(),
                    masked: format!("the arguments are {kind}, not an object"),
                }],
            });
        }
        let wanted = table
            .server(route.server_id)
            .and_then(|server| server.validate_arguments)
            .unwrap_or_else(|| self.arguments.by_default.load(Ordering::Relaxed));
        if !wanted {
            return Ok(());
        }
        let Some(schema) = self.schema_of(table, route).await else {
            return Ok(());
        };
        let Schema::Checks(validator) = &*schema else {
            return Ok(());
        };
        // No arguments are an empty object, as servers read them.
        let arguments: Cow<'_, Value> = match arguments {
            None | Some(Json::Tree(Value::Null)) => Cow::Owned(Value::Object(Default::default())),
            Some(Json::Tree(tree)) => Cow::Borrowed(tree),
            Some(Json::Text(text)) => match crate::jsonrpc::parse(text) {
                Ok(Value::Null) => Cow::Owned(Value::Object(Default::default())),
                Ok(tree) => Cow::Owned(tree),
                // Checked text always reads; the server judges it if not.
                Err(_) => return Ok(()),
            },
        };
        let problems = check(validator, &arguments);
        if problems.is_empty() {
            return Ok(());
        }
        Err(CallError::InvalidArguments {
            tool: called.to_owned(),
            server: route.server_name.to_string(),
            problems,
        })
    }

    /// The route's compiled schema: cached, else compiled off the async
    /// threads from the definition the table holds or, for a catalog too
    /// large to hold them (or a tool not listed), the store's.
    async fn schema_of(&self, table: &RouteTable, route: &Arc<Route>) -> Option<Arc<Schema>> {
        let listed = table.tools.definition(route);
        if let Some((hash, _)) = listed
            && let Some(schema) = self.arguments.cached(&route.tool_id, Key::Listed(hash))
        {
            return Some(schema);
        }
        let stored = Key::Stored(table.generation);
        if listed.is_none()
            && let Some(schema) = self.arguments.cached(&route.tool_id, stored)
        {
            return Some(schema);
        }
        let (key, definition): (Key, Box<RawValue>) = match listed {
            Some((hash, Some(held))) => (Key::Listed(hash), held.to_owned()),
            _ => {
                let key = listed.map_or(stored, |(hash, _)| Key::Listed(hash));
                let store = Arc::clone(self.sessions.registry().store());
                let tool = (route.server_id, route.original_name.to_string());
                let read = tokio::task::spawn_blocking(move || {
                    store.tool_definitions(std::iter::once(tool))
                })
                .await;
                match read {
                    Ok(Ok(mut found)) => (key, found.pop().flatten()?),
                    Ok(Err(err)) => {
                        tracing::warn!(tool = %route.tool_id, "cannot read the tool's definition to check its arguments: {err}");
                        return None;
                    }
                    Err(_) => return None,
                }
            }
        };
        let compiled = tokio::task::spawn_blocking(move || compile(&definition)).await;
        let schema = Arc::new(
            compiled.unwrap_or_else(|_| Schema::Unusable("compiling it failed".to_owned())),
        );
        if let Schema::Unusable(why) = &*schema {
            tracing::warn!(tool = %route.tool_id, "the tool's inputSchema cannot be used to check arguments ({why}); its calls are passed on unchecked");
        }
        self.arguments
            .keep(&route.tool_id, key, Arc::clone(&schema));
        Some(schema)
    }
}

/// What the arguments are when they are not an object (or null, read as
/// none): "an array", "a string", …
fn not_an_object(arguments: &Json) -> Option<&'static str> {
    let kind = |first: Option<char>| match first {
        Some('{') | None => None,
        Some('[') => Some("an array"),
        Some('"') => Some("a string"),
        Some('t' | 'f') => Some("a boolean"),
        Some('n') => None,
        Some(_) => Some("a number"),
    };
    match arguments {
        Json::Tree(Value::Object(_) | Value::Null) => None,
        Json::Tree(Value::Array(_)) => Some("an array"),
        Json::Tree(Value::String(_)) => Some("a string"),
        Json::Tree(Value::Bool(_)) => Some("a boolean"),
        Json::Tree(Value::Number(_)) => Some("a number"),
        Json::Text(text) => kind(text.get().trim_start().chars().next()),
    }
}
