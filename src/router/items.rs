//! Resources, prompts and completion: a namespaced URI or prompt name
//! routed to its server (templates matched too), reads through the
//! resource cache, subscriptions, prompts/get, completion/complete.

use serde_json::{Value, json};

use super::calls::InputRound;
use super::routes::ItemRoute;
use super::table::UriForm;
use super::{CallError, Router, cache};
use crate::jsonrpc::Json;
use crate::model::Caller;

impl Router {
    /// Where a resource URI a client used goes (see
    /// `RouteTable::route_resource`), waiting for servers still starting if
    /// nobody offers it yet.
    /// Outside the caller's view (`profile`), no resource is found.
    pub async fn route_resource(
        &self,
        uri: &str,
        profile: Option<&str>,
    ) -> Result<(ItemRoute, UriForm), CallError> {
        let found = match self.table().route_resource(uri) {
            Some(found) => Some(found),
            None => {
                self.settle().await;
                self.table().route_resource(uri)
            }
        };
        found
            .filter(|(route, _)| self.admits_server(profile, route.server_id))
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

    /// Reads a resource (through the cache). Contents name their URI in
    /// the form the client used.
    pub async fn read_resource(
        &self,
        uri: &str,
        meta: Option<Value>,
        caller: &Caller,
    ) -> Result<Value, CallError> {
        let (route, form) = self.route_resource(uri, caller.profile.as_deref()).await?;
        let key = cache::key(route.server_id, &route.original);
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
        let profile = caller.profile.as_deref();
        let route = table
            .route_prompt(name)
            .filter(|route| self.admits_server(profile, route.server_id))
            .cloned()
            .ok_or_else(|| match table.withheld_prompt(name) {
                Some((server, reason)) if self.admits_server(profile, *server) => {
                    CallError::Withheld {
                        name: name.to_owned(),
                        reason: reason.to_string(),
                    }
                }
                _ => CallError::UnknownPrompt(name.to_owned()),
            })?;
        super::calls::InputRound::check_server(input.as_ref(), route.server_id)?;
        let session = self.session_for(&table, route.server_id).await?;
        // As for a tool call: a 2025 client's over a 2025 session where the
        // server keeps one; a retry with answers where it was asked.
        let session = if input.is_none() {
            self.sessions
                .session_for_caller(route.server_id, session, caller)
                .await
        } else {
            session
        };
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
    pub async fn complete(
        &self,
        mut params: Value,
        profile: Option<&str>,
    ) -> Result<Value, CallError> {
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
        if !self.admits_server(profile, route.server_id) {
            // Named as the client named it: nothing of the server shows.
            let given = reference
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            return Err(match field {
                "name" => CallError::UnknownPrompt(given),
                _ => CallError::UnknownResource(given),
            });
        }
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
}
