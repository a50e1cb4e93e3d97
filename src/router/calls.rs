//! A tool call: the name resolved to its route (explicit server, then a
//! namespaced name, then a unique original name), the server's session
//! (one reconnect for a server in ERROR, none while its breaker is open),
//! progress tokens swapped, the call forwarded, a DEGRADED server's
//! warning added, and a session's failure said as the router's.

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::routes::Route;
use super::table::RouteTable;
use super::{CallError, Router};
use crate::jsonrpc::Json;
use crate::model::{CallSink, Caller, ServerId, ServerStatus};
use crate::sessions::{RpcError, Session};

/// Where a call's result says its server is DEGRADED.
pub const WARNING_META: &str = "io.github.mcp-aggregator/warning";

/// A retry of a call a 2026-07-28 server answered with an input-required
/// result: the answers, and the server's opaque state, passed back as the
/// server asked.
#[derive(Debug, Clone)]
pub struct InputRound {
    pub responses: Value,
    pub state: Option<Value>,
    /// The server that issued `state`: it goes back to that server only,
    /// whatever the request's name resolves to now.
    pub issued_by: Option<ServerId>,
}

impl InputRound {
    /// Refuses a round whose state another server issued.
    pub(super) fn check_server(
        input: Option<&InputRound>,
        server: ServerId,
    ) -> Result<(), CallError> {
        match input.and_then(|input| input.issued_by) {
            Some(issued_by) if issued_by != server => Err(CallError::ForeignState),
            _ => Ok(()),
        }
    }
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

impl Router {
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
            _ => match table.withheld.get(name) {
                Some(reason) => Err(CallError::Withheld {
                    name: name.to_owned(),
                    reason: reason.to_string(),
                }),
                None => Err(CallError::UnknownTool(name.to_owned())),
            },
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

    /// `resolve_settled` within a client's view (none: everything): a
    /// tool outside it is unknown, and no error names one.
    pub async fn resolve_in_view(
        &self,
        name: &str,
        server: Option<&str>,
        profile: Option<&str>,
    ) -> Result<(Arc<RouteTable>, Arc<Route>), CallError> {
        let resolved = self.resolve_settled(name, server).await;
        let Some(profile) = profile else {
            return resolved;
        };
        let table = match resolved {
            Ok((table, route)) if self.admits_route(Some(profile), &route) => {
                return Ok((table, route));
            }
            Ok((table, _)) => table,
            Err(CallError::UnknownTool(_) | CallError::Ambiguous { .. }) => self.table(),
            Err(other) => return Err(other),
        };
        // A bare name, as the view has it: among its own tools only.
        let mut candidates: Vec<&Arc<Route>> = match server {
            Some(_) => Vec::new(),
            None => table
                .by_original
                .get(name)
                .map(|routes| {
                    routes
                        .iter()
                        .filter(|r| self.admits_route(Some(profile), r))
                        .collect()
                })
                .unwrap_or_default(),
        };
        // Bare names are on unless the strategy is explicit-only: the
        // view's one server offering it is meant, whether the strategy
        // picked a server outside the view or left the name tied there.
        let bare_names_on = table.strategy != super::ConflictStrategy::ExplicitOnly;
        match candidates.len() {
            0 => Err(CallError::UnknownTool(name.to_owned())),
            1 if bare_names_on => {
                let only = Arc::clone(candidates.remove(0));
                Ok((Arc::clone(&table), only))
            }
            1 => Err(CallError::UnknownTool(format!(
                "{name} (bare names are off: call it as {})",
                candidates[0].tool_id
            ))),
            _ => Err(CallError::Ambiguous {
                name: name.to_owned(),
                candidates: candidates.iter().map(|r| r.tool_id.to_string()).collect(),
            }),
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
        let (name, caller) = (call.name, call.caller);
        let started = Instant::now();
        // A call dropped before its outcome (cancelled, the client gone)
        // may have reached the server: it is audited all the same.
        let mut unfinished = Unfinished {
            audit: self.call_audit.get(),
            caller,
            name,
            started,
        };
        let outcome = self.call_tool_traced(call).instrument(span).await;
        if let Some(audit) = unfinished.audit.take() {
            audit.record(caller, name, started.elapsed(), &outcome);
        }
        outcome
    }

    pub(super) async fn call_tool_traced(
        &self,
        call: ToolCall<'_>,
    ) -> Result<CallOutcome, CallError> {
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
        let (table, route) = self
            .resolve_in_view(name, server, caller.profile.as_deref())
            .await?;
        InputRound::check_server(input.as_ref(), route.server_id)?;
        // Before anything reaches the server: a call refused here neither
        // (re)connects it nor uses up its limits.
        self.check_arguments(&table, &route, name, arguments.as_ref())
            .await?;
        let session = self.session_for(&table, route.server_id).await?;
        if let Some(reason) = session.tools_unstored() {
            let status = table
                .server(route.server_id)
                .map_or(crate::model::ServerStatus::Connected, |s| s.status);
            return Err(CallError::Unavailable {
                server: route.server_name.to_string(),
                status,
                reason: Some(format!(
                    "its latest tool list could not be stored ({reason}), so its tools are \
                     not called until it is: a changed tool would go unchecked"
                )),
            });
        }
        // A retry with the answers of an input round goes back over the
        // session whose result asked for them.
        let session = if input.is_none() {
            self.sessions
                .session_for_caller(route.server_id, session, caller)
                .await
        } else {
            session
        };
        let limits = table
            .server(route.server_id)
            .map(|s| Arc::clone(&s.limits))
            .unwrap_or_default();
        // Held until the call ends: its place among the calls in flight.
        let _admitted = self
            .limiters
            .admit(route.server_id, &route.server_name, &limits)
            .await?;
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
            self.call_failure(&route.server_name, RpcError::Unsendable(err.to_string()))
        })?;
        let request = session.request_for(caller, "tools/call", Some(Json::Text(params)), &headers);
        let answered = match limits.call_timeout_secs {
            // The server's own call timeout; dropping the request cancels it.
            Some(secs) => {
                let after = Duration::from_secs(u64::from(secs));
                tokio::time::timeout(after, request)
                    .await
                    .map_err(|_| CallError::TimedOut {
                        server: route.server_name.to_string(),
                        after,
                    })?
            }
            None => request.await,
        };
        let mut result = answered.map_err(|err| self.call_failure(&route.server_name, err))?;
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
    pub(super) fn warn_degraded(
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

    /// The live session of a server. A server in ERROR gets one immediate
    /// reconnect attempt (none while its circuit breaker is open: its last
    /// attempt failed moments ago), and a server that is (re)connecting is
    /// waited for, up to the sessions' `call_wait`.
    pub(super) async fn session_for(
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

    pub(super) fn call_failure(&self, server: &str, err: RpcError) -> CallError {
        match err {
            RpcError::Closed(reason)
            | RpcError::Link(crate::sessions::LinkError::Closed(reason)) => {
                CallError::Interrupted {
                    server: server.to_owned(),
                    reason,
                }
            }
            RpcError::Timeout(after) => CallError::TimedOut {
                server: server.to_owned(),
                after,
            },
            RpcError::Link(
                crate::sessions::LinkError::NeedsLogin(reason)
                | crate::sessions::LinkError::Auth(reason),
            ) => CallError::NeedsLogin {
                server: server.to_owned(),
                reason,
            },
            other => CallError::Server {
                server: server.to_owned(),
                error: other.to_error_object(),
                reason: other.to_string(),
            },
        }
    }
}

/// A call under way, audited as cancelled if it is dropped before its
/// outcome is recorded.
struct Unfinished<'a> {
    audit: Option<&'a super::call_audit::CallAudit>,
    caller: &'a crate::model::Caller,
    name: &'a str,
    started: Instant,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(audit) = self.audit.take() {
            audit.record_cancelled(self.caller, self.name, self.started.elapsed());
        }
    }
}
