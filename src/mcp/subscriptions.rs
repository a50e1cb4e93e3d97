//! Clients' resource subscriptions (each with the URI as the client named
//! it, namespaced or the server's own) and what reaches subscribers: a
//! server's resource updates, and list_changed when what a client can list
//! changed.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::FrontDoor;
use super::client::ClientConnection;
use crate::router::Router;

/// A client subscribed to a resource, and the URI it used.
struct Subscriber {
    client: std::sync::Weak<ClientConnection>,
    uri: String,
}

/// A server's own resource URI -> the clients subscribed to it.
#[derive(Default)]
pub(super) struct Subscriptions {
    by_resource: Mutex<HashMap<(crate::model::ServerId, String), Vec<Subscriber>>>,
}

impl Subscriptions {
    /// Notes a subscription; true if it is the first to that resource (the
    /// server is asked then).
    pub(super) fn add(
        &self,
        client: &Arc<ClientConnection>,
        route: &crate::router::ItemRoute,
        uri: &str,
    ) -> bool {
        let Ok(mut subs) = self.by_resource.lock() else {
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
    pub(super) fn remove(
        &self,
        client: &Arc<ClientConnection>,
        route: &crate::router::ItemRoute,
        uri: &str,
    ) -> bool {
        let Ok(mut subs) = self.by_resource.lock() else {
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

    /// The live clients subscribed to a server's resource, each with the
    /// URI it used.
    fn subscribers(
        &self,
        server_id: crate::model::ServerId,
        uri: &str,
    ) -> Vec<(Arc<ClientConnection>, String)> {
        self.by_resource
            .lock()
            .ok()
            .and_then(|subs| {
                subs.get(&(server_id, uri.to_owned())).map(|list| {
                    list.iter()
                        .filter_map(|s| Some((s.client.upgrade()?, s.uri.clone())))
                        .collect()
                })
            })
            .unwrap_or_default()
    }
}

/// Passes servers' resource updates on to the clients subscribed to them,
/// for as long as the server lives.
pub(super) fn spawn_update_fanout(server: &Arc<FrontDoor>) {
    let weak = Arc::downgrade(server);
    let mut notices = server.router().notices();
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
            for (client, uri) in server.subscriptions.subscribers(notice.server_id, uri) {
                // Not for a client whose view no longer has the server.
                if !server
                    .router()
                    .admits_server(client.profile(), notice.server_id)
                {
                    continue;
                }
                let mut message = notice.message.clone();
                message["params"]["uri"] = Value::String(uri);
                client.outbound().notify(message);
            }
        }
    });
}

/// How long list changes are gathered before a client is told of them.
const LIST_CHANGED_WINDOW: std::time::Duration = std::time::Duration::from_millis(250);

/// Sends list_changed notifications to a client whenever what it can list
/// changes; ends when the client goes away.
pub async fn forward_list_changes(router: Router, client: Arc<ClientConnection>) {
    let mut changes = router.subscribe();
    changes.borrow_and_update();
    // What the client's view holds (its profile's, or everything).
    let mut last = router.fingerprints_for(client.profile());
    while changes.changed().await.is_ok() {
        // Servers joining at start change the lists many times within a
        // moment, and each notification makes a desktop client list again:
        // one per kind for the lot, and none for a list that came back to
        // what the client last heard of.
        tokio::time::sleep(LIST_CHANGED_WINDOW).await;
        changes.borrow_and_update();
        let now = router.fingerprints_for(client.profile());
        if client.outbound().is_closed() {
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
