//! `subscriptions/listen` at the front door (2026-07-28): the list changes
//! and resource updates a client asked for, tagged with its subscription,
//! until it ends it; resource subscriptions reach the servers once per
//! resource, whoever listens, and end however the listen ends.

use serde_json::{Map, Value, json};
use std::sync::Arc;

use crate::jsonrpc;
use crate::mcp::{ClientConnection, FrontDoor, outbound};

const META: &str = "_meta";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// `subscriptions/listen`: acknowledges what of the client's filter it
/// honours, then sends the list changes and resource updates asked for,
/// each tagged with the subscription (the request's id), until the
/// client ends it (closes the stream; on stdio, cancels the request) or
/// goes away. Resource subscriptions reach the servers as 2025
/// `resources/subscribe` (once per resource, whoever listens).
pub(super) async fn listen(
    server: &FrontDoor,
    transport: &Arc<ClientConnection>,
    id: &Value,
    params: Option<&Value>,
) -> Value {
    let filter = params
        .and_then(|p| p.get("notifications"))
        .cloned()
        .unwrap_or(Value::Null);
    let wants = |key: &str| filter.get(key).and_then(Value::as_bool).unwrap_or(false);
    let (tools, prompts, resources) = (
        wants("toolsListChanged"),
        wants("promptsListChanged"),
        wants("resourcesListChanged"),
    );
    let (updates_tx, mut updates) = outbound::Outbound::for_client();
    let listener = ClientConnection::new(Arc::new(updates_tx));
    if let Some(profile) = transport.profile() {
        listener.set_profile(profile);
    }
    let mut guard = ListenGuard {
        server,
        listener: Arc::clone(&listener),
        subscribed: Vec::new(),
    };
    let asked: Vec<String> = filter
        .get("resourceSubscriptions")
        .and_then(Value::as_array)
        .map(|uris| {
            uris.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for uri in asked {
        let Ok((route, _)) = server
            .router()
            .route_resource(&uri, transport.profile())
            .await
        else {
            continue;
        };
        if server.subscriptions.add(&listener, &route, &uri)
            && server
                .router()
                .resource_subscription(&route, true)
                .await
                .is_err()
        {
            server.subscriptions.remove(&listener, &route, &uri);
            continue;
        }
        guard.subscribed.push((route, uri));
    }
    let mut honored = Map::new();
    for (key, on) in [
        ("toolsListChanged", tools),
        ("promptsListChanged", prompts),
        ("resourcesListChanged", resources),
    ] {
        if on {
            honored.insert(key.to_owned(), Value::Bool(true));
        }
    }
    if !guard.subscribed.is_empty() {
        let uris: Vec<&str> = guard
            .subscribed
            .iter()
            .map(|(_, uri)| uri.as_str())
            .collect();
        honored.insert("resourceSubscriptions".to_owned(), json!(uris));
    }
    let tag = |mut message: Value| {
        if !message.get("params").is_some_and(Value::is_object) {
            message["params"] = json!({});
        }
        message["params"][META][SUBSCRIPTION_ID] = id.clone();
        message
    };
    // Watched before the acknowledgement: a client that changes a list
    // as soon as it reads it must hear of the change.
    let mut changes = server.router().subscribe();
    changes.borrow_and_update();
    let mut last = server.router().fingerprints_for(transport.profile());
    let outbound = transport.outbound();
    outbound.notify(tag(jsonrpc::notification(
        "notifications/subscriptions/acknowledged",
        Some(json!({"notifications": honored})),
    )));
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    break;
                }
                changes.borrow_and_update();
                let now = server.router().fingerprints_for(transport.profile());
                for (on, differs, method) in [
                    (tools, now.tools != last.tools, "notifications/tools/list_changed"),
                    (prompts, now.prompts != last.prompts, "notifications/prompts/list_changed"),
                    (resources, now.resources != last.resources, "notifications/resources/list_changed"),
                ] {
                    if on && differs {
                        outbound.notify(tag(jsonrpc::notification(method, None)));
                    }
                }
                last = now;
            }
            update = updates.recv() => match update {
                Some(update) => {
                    if let Ok(update) = update.into_tree() {
                        outbound.notify(tag(update));
                    }
                }
                None => break,
            },
            () = outbound.stalled() => break,
        }
        if outbound.is_closed() {
            break;
        }
    }
    json!({"_meta": {SUBSCRIPTION_ID: id}})
}

/// Ends a listen's resource subscriptions however the listen ends (the
/// client closing its stream drops the request's future): the last
/// subscriber of a resource tells its server.
struct ListenGuard<'a> {
    server: &'a FrontDoor,
    listener: Arc<ClientConnection>,
    subscribed: Vec<(crate::router::ItemRoute, String)>,
}

impl Drop for ListenGuard<'_> {
    fn drop(&mut self) {
        for (route, uri) in self.subscribed.drain(..) {
            if self
                .server
                .subscriptions
                .remove(&self.listener, &route, &uri)
            {
                let router = self.server.router().clone();
                tokio::spawn(async move {
                    let _ = router.resource_subscription(&route, false).await;
                });
            }
        }
    }
}
