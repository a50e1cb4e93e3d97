//! The method table shared by every protocol revision and transport: the
//! lists, tools/call through the router (with the meta-tools),
//! resources/read, prompts/get, completion; and the client's
//! notifications and answers to what we asked it.

use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::sync::Arc;

use super::failure::{RpcFailure, tool_call_error, tree};
use super::{ClientConnection, FrontDoor};
use crate::jsonrpc::{self, INTERNAL_ERROR, Json, METHOD_NOT_FOUND};

impl FrontDoor {
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
            "tools/list" => self.list_tools(client.profile()).await,
            _ => self
                .answer_here(client, method, params)
                .await
                .map(Json::Tree),
        }
    }

    /// `tools/list`: the whole list in one page (some clients, the MCP
    /// Inspector CLI among them, do not follow cursors).
    /// `profile`: the client's view (none: every tool).
    async fn list_tools(&self, profile: Option<&str>) -> Result<Json, RpcFailure> {
        self.router.settle_startup().await;
        let table = self.router.table();
        // The view's positions in the table's list; none: all of it.
        let view = profile.map(|profile| self.router.view_of(&table, profile));
        let positions = view.as_ref().map(|v| v.tools.as_slice());
        let listed = positions.map_or(table.tools.len(), <[usize]>::len);
        let lists_all = self.expose.lists_all(listed);
        // When only the meta-tools are offered, the pinned tools (within
        // the view) are listed beside them.
        let pinned: Option<Vec<usize>> =
            (!lists_all).then(|| self.router.pinned(&table, &self.expose.pins, positions));
        let wanted = match (&pinned, positions) {
            (Some(pinned), _) => Some(pinned.clone()),
            (None, Some(positions)) => Some(positions.to_vec()),
            (None, None) => None,
        };
        let read = match (
            &table.tools.held,
            lists_all || pinned.as_ref().is_some_and(|p| !p.is_empty()),
        ) {
            (None, true) => self
                .router
                .read_listed_tools(Arc::clone(&table), wanted.clone())
                .await
                .map_err(RpcFailure::from)?,
            _ => Vec::new(),
        };
        let search_tools =
            super::meta::search_tools_definition(&self.router.skill_counts(view.as_deref()));
        let meta = [&*search_tools, super::meta::call_tool_definition()];
        let mut tools: Vec<&RawValue> = match (&table.tools.held, &wanted) {
            (Some(held), None) if lists_all => held.iter().map(|t| &**t).collect(),
            (Some(held), Some(wanted)) if lists_all || pinned.is_some() => wanted
                .iter()
                .filter_map(|&at| held.get(at))
                .map(|t| &**t)
                .collect(),
            (None, _) => read.iter().map(|t| &**t).collect(),
            _ => Vec::new(),
        };
        tools.extend(meta);
        // Written straight from the definitions' text.
        #[derive(serde::Serialize)]
        struct ToolList<'a> {
            tools: Vec<&'a RawValue>,
        }
        jsonrpc::to_raw(&ToolList { tools })
            .map(Json::Text)
            .map_err(|err| RpcFailure::new(INTERNAL_ERROR, err.to_string()))
    }

    /// A client with only the meta-tools may search the moment it starts:
    /// like its first list, its first search waits (bounded) for the
    /// servers still starting, and then (as long again at most) for the
    /// index to take their tools: by keyword at once, by meaning within a
    /// second for a few dozen tools. Only once: agents search again and
    /// again, and a server stuck in its start must not cost every search
    /// the wait; a catalog changing later is indexed as it comes.
    async fn settle_search(&self) {
        use std::sync::atomic::Ordering;
        if self.search_settled.load(Ordering::Relaxed) {
            return;
        }
        self.router.settle_startup().await;
        if !self.search.wait_findable(self.router.startup_wait()).await {
            tracing::debug!("a search at start-up answered before the index took every tool");
        }
        self.search_settled.store(true, Ordering::Relaxed);
    }

    /// `tools/call`: the aggregator's own meta-tools, or a call routed to
    /// the server that owns the tool.
    async fn call_tool(
        &self,
        client: &Arc<ClientConnection>,
        params: Option<Value>,
        written: Option<Box<RawValue>>,
    ) -> Result<Json, RpcFailure> {
        let mut params = params.ok_or_else(|| RpcFailure::invalid("tools/call needs params"))?;
        let mut name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcFailure::invalid("tools/call needs a string `name`"))?
            .to_owned();
        // Passed on to the server, which may drop a request whose `_meta`
        // is not an object and leave the call waiting for its timeout.
        if params
            .get("_meta")
            .is_some_and(|m| !m.is_object() && !m.is_null())
        {
            return Err(RpcFailure::invalid("`_meta` must be an object"));
        }
        let mut arguments = match written {
            Some(text) => Some(Json::Text(text)),
            None => params.get_mut("arguments").map(Value::take).map(Json::Tree),
        };
        if name == super::meta::SEARCH_TOOLS {
            self.settle_search().await;
            let (search, table) = (self.search.clone(), self.router.table());
            let arguments = arguments.as_ref().map(Json::to_tree);
            let view = client
                .profile()
                .map(|profile| self.router.view_of(&table, profile));
            // Only a search filtered by skill needs to know which are here.
            let filters_skills = arguments
                .as_ref()
                .and_then(|a| a.get("skills"))
                .is_some_and(|skills| !skills.is_null());
            let present = filters_skills.then(|| self.router.skill_counts(view.as_deref()));
            let only = view.map(|view| (Arc::clone(&view.tool_ids), view.servers.clone()));
            return tokio::task::spawn_blocking(move || {
                super::meta::search_tools(
                    &search,
                    &table,
                    arguments.as_ref(),
                    only,
                    present.as_deref(),
                )
            })
            .await
            .map(Json::Tree)
            .map_err(|err| RpcFailure::new(INTERNAL_ERROR, format!("search failed: {err}")));
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
        let sink: Option<Arc<dyn crate::model::CallSink>> = Some(client.clone());
        // Note who the server works for while the call runs.
        let server_id = self
            .router
            .resolve_in_view(&name, None, client.profile())
            .await
            .ok()
            .map(|(_, route)| route.server_id);
        let _caller = server_id.map(|id| super::requests::CallerGuard::new(self, id, client));
        // A 2026-07-28 client's answers to a server's questions pass
        // through to the server that asked.
        let input = self.take_input_round(client, &mut params, &target)?;
        // Only a 2026-07-28 server can ask for input, and only a
        // 2025 client's call is then retried here: keep copies for
        // the retry just then (arguments can be large).
        let retry_copies = (!client.takes_input_results()
            && server_id.is_some_and(|id| self.router.asks_in_results(id)))
        .then(|| (arguments.clone(), meta.clone()));
        let mut first = Some((arguments, meta));
        let caller = client.caller();
        let retries = retry_copies.is_some();
        self.with_input_rounds(client, &target, server_id, input, retries, |input| {
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
        // The lists as the client's view has them.
        let lists = || {
            let table = self.router.table();
            match client.profile() {
                None => (
                    Arc::clone(&table.resources),
                    Arc::clone(&table.resource_templates),
                    Arc::clone(&table.prompts),
                ),
                Some(profile) => {
                    let view = self.router.view_of(&table, profile);
                    (
                        Arc::clone(&view.resources),
                        Arc::clone(&view.resource_templates),
                        Arc::clone(&view.prompts),
                    )
                }
            }
        };
        match method {
            "resources/list" => {
                self.router.settle_startup().await;
                Ok(json!({"resources": lists().0.as_ref()}))
            }
            "resources/templates/list" => {
                self.router.settle_startup().await;
                Ok(json!({"resourceTemplates": lists().1.as_ref()}))
            }
            "prompts/list" => {
                self.router.settle_startup().await;
                Ok(json!({"prompts": lists().2.as_ref()}))
            }
            "resources/read" => {
                let mut params =
                    params.ok_or_else(|| RpcFailure::invalid("resources/read needs params"))?;
                let uri = params
                    .get("uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcFailure::invalid("resources/read needs a string `uri`"))?
                    .to_owned();
                let meta = params.get_mut("_meta").map(Value::take);
                self.router
                    .read_resource(&uri, meta, &client.caller())
                    .await
                    .map_err(RpcFailure::from)
            }
            "completion/complete" => {
                let params = params
                    .ok_or_else(|| RpcFailure::invalid("completion/complete needs params"))?;
                self.router
                    .complete(params, client.profile())
                    .await
                    .map_err(RpcFailure::from)
            }
            "prompts/get" => {
                let mut params =
                    params.ok_or_else(|| RpcFailure::invalid("prompts/get needs params"))?;
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcFailure::invalid("prompts/get needs a string `name`"))?
                    .to_owned();
                let arguments = params.get_mut("arguments").map(Value::take);
                let meta = params.get_mut("_meta").map(Value::take);
                let caller = client.caller();
                let target = super::relay::target("prompts/get", &name, None);
                let input = self.take_input_round(client, &mut params, &target)?;
                let server = self
                    .router
                    .table()
                    .route_prompt(&name)
                    .map(|route| route.server_id);
                self.with_input_rounds(client, &target, server, input, true, |input| {
                    let (name, arguments, meta, caller) =
                        (&name, arguments.clone(), meta.clone(), &caller);
                    async move {
                        self.router
                            .get_prompt(name, arguments, meta, input, caller)
                            .await
                            .map(Json::Tree)
                            .map_err(RpcFailure::from)
                    }
                })
                .await
                .and_then(tree)
            }
            other => Err(RpcFailure::new(
                METHOD_NOT_FOUND,
                format!("Method not found: {other}"),
            )),
        }
    }
}
