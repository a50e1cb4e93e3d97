//! The calls under way that a client waits on: where each call's progress
//! and log messages go (its sink), and the progress token of ours that
//! stands for the client's on the request sent to the server.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::model::CallSink;

/// A call under way that a client is waiting on.
struct CallRoute {
    /// Our progress token on the request, and the client's it stands for.
    progress: Option<(String, Value)>,
    sink: Arc<dyn CallSink>,
}

const PROGRESS_PREFIX: &str = "mcp-aggregator-";

/// The route key a progress token of ours stands for.
fn call_key(token: &str) -> Option<u64> {
    token.strip_prefix(PROGRESS_PREFIX)?.parse().ok()
}

/// The calls under way with a sink, by a key of our own.
#[derive(Default)]
pub(super) struct CallRoutes {
    routes: Mutex<HashMap<u64, CallRoute>>,
    next_key: AtomicU64,
}

impl CallRoutes {
    /// Routes a call's notifications to `sink` until the guard drops; with
    /// the client's progress token, the token of ours to put on the request.
    pub(super) fn route(
        self: &Arc<Self>,
        sink: Arc<dyn CallSink>,
        client_token: Option<Value>,
    ) -> (Option<Value>, CallGuard) {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed) + 1;
        let progress = client_token.map(|client| (format!("{PROGRESS_PREFIX}{key}"), client));
        let ours = progress
            .as_ref()
            .map(|(ours, _)| Value::String(ours.clone()));
        if let Ok(mut routes) = self.routes.lock() {
            routes.insert(key, CallRoute { progress, sink });
        }
        let guard = CallGuard {
            routes: Arc::clone(self),
            key,
        };
        (ours, guard)
    }

    /// Hands a progress notification to the call it is for, with the
    /// client's token; false if no call under way has that token.
    pub(super) fn deliver_progress(&self, message: &Value) -> bool {
        let Some(token) = message
            .get("params")
            .and_then(|p| p.get("progressToken"))
            .and_then(Value::as_str)
        else {
            return false;
        };
        let Some(key) = call_key(token) else {
            return false;
        };
        let Some((client_token, sink)) = self.routes.lock().ok().and_then(|routes| {
            let route = routes.get(&key)?;
            let (_, client) = route.progress.as_ref()?;
            Some((client.clone(), Arc::clone(&route.sink)))
        }) else {
            return false;
        };
        let mut message = message.clone();
        message["params"]["progressToken"] = client_token;
        // Full: the client is behind; progress is dropped.
        sink.send(message);
        true
    }

    /// Hands a log message to every call under way; false if there is none.
    pub(super) fn deliver_log(&self, message: &Value) -> bool {
        let sinks: Vec<_> = match self.routes.lock() {
            Ok(routes) => routes.values().map(|r| Arc::clone(&r.sink)).collect(),
            Err(_) => return false,
        };
        for sink in &sinks {
            sink.send(message.clone());
        }
        !sinks.is_empty()
    }
}

/// Keeps a call routed; dropping it stops the routing.
pub struct CallGuard {
    routes: Arc<CallRoutes>,
    key: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.routes.lock() {
            routes.remove(&self.key);
        }
    }
}
