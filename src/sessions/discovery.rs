//! Discovery (BR-003): list a server's tools, resources, resource templates
//! and prompts through every page, and hand them to the catalog.

use serde_json::{Value, json};
use std::collections::HashSet;

use super::session::{RpcError, Session};
use crate::catalog::Catalog;
use crate::model::{CatalogKind, ServerId};

/// Pages followed at most (a server that never stops paginating is cut off).
pub const MAX_PAGES: usize = 1000;
/// Items kept at most per list.
pub const MAX_ITEMS: usize = 50_000;

/// Lists every page of `method`, collecting the `field` arrays.
pub async fn list_all(
    session: &Session,
    method: &str,
    field: &str,
) -> Result<Vec<Value>, RpcError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| json!({"cursor": c}));
        let first_page = cursor.is_none();
        let mut result = session.request(method, params).await?;
        if first_page && let Some(ttl) = result.get("ttlMs").and_then(Value::as_u64) {
            session.note_list_ttl(method, ttl);
        }
        if let Some(Value::Array(page)) = result.get_mut(field).map(Value::take) {
            items.extend(page);
        }
        if items.len() >= MAX_ITEMS {
            tracing::warn!(
                server = session.server(),
                method,
                "more than {MAX_ITEMS} items; the rest is ignored"
            );
            items.truncate(MAX_ITEMS);
            return Ok(items);
        }
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => {
                if !seen.insert(next.to_owned()) {
                    tracing::warn!(
                        server = session.server(),
                        method,
                        "the server repeated a cursor; stopping there"
                    );
                    return Ok(items);
                }
                cursor = Some(next.to_owned());
            }
            _ => return Ok(items),
        }
    }
    tracing::warn!(
        server = session.server(),
        method,
        "more than {MAX_PAGES} pages; the rest is ignored"
    );
    Ok(items)
}

/// Which lists to (re-)discover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Tools,
    Resources,
    Prompts,
    Everything,
}

/// Lists and stores what the server offers. A list the server does not
/// support is stored as empty; a failure is logged and leaves the stored
/// list as it was. The lists are fetched together and the tools stored
/// last: a client that sees a server's tools sees its resources and
/// prompts too.
pub async fn discover(session: &Session, server_id: ServerId, catalog: &Catalog, what: What) {
    let server = session.server();
    let wants = |part: What| what == part || what == What::Everything;
    let tools = async {
        if wants(What::Tools) {
            Some(fetch(session, "tools", "tools/list", "tools").await)
        } else {
            None
        }
    };
    let resources = async {
        if wants(What::Resources) {
            Some(tokio::join!(
                fetch(session, "resources", "resources/list", "resources"),
                fetch(
                    session,
                    "resources",
                    "resources/templates/list",
                    "resourceTemplates"
                ),
            ))
        } else {
            None
        }
    };
    let prompts = async {
        if wants(What::Prompts) {
            Some(fetch(session, "prompts", "prompts/list", "prompts").await)
        } else {
            None
        }
    };
    let (tools, resources, prompts) = tokio::join!(tools, resources, prompts);
    if let Some((listed, templates)) = resources {
        store_items(
            server,
            server_id,
            catalog,
            "resources/list",
            CatalogKind::Resource,
            listed,
        )
        .await;
        store_items(
            server,
            server_id,
            catalog,
            "resources/templates/list",
            CatalogKind::ResourceTemplate,
            templates,
        )
        .await;
    }
    if let Some(listed) = prompts {
        store_items(
            server,
            server_id,
            catalog,
            "prompts/list",
            CatalogKind::Prompt,
            listed,
        )
        .await;
    }
    match tools {
        Some(Ok(tools)) => {
            if tools.is_empty() {
                tracing::warn!(server, "the server offers no tools");
            }
            let count = tools.len();
            for tool in &tools {
                if let Err(reason) =
                    crate::model::param_headers::header_params(tool.get("inputSchema"))
                {
                    let name = tool.get("name").and_then(serde_json::Value::as_str);
                    tracing::warn!(
                        server,
                        tool = name.unwrap_or_default(),
                        "{reason}: the tool is not offered to clients"
                    );
                }
            }
            match catalog.apply_tools(server_id, tools).await {
                // Servers often repeat list_changed; say so only when
                // something changed.
                Ok(diff) if diff.changed() => tracing::info!(
                    server,
                    tools = count,
                    added = diff.added,
                    updated = diff.updated,
                    removed = diff.removed,
                    rejected = diff.rejected,
                    "tools discovered"
                ),
                Ok(_) => tracing::debug!(server, tools = count, "tools unchanged"),
                Err(err) => tracing::error!(server, "cannot store the tools: {err}"),
            }
        }
        Some(Err(err)) => tracing::warn!(server, "tools/list failed: {err}"),
        None => {}
    }
}

async fn store_items(
    server: &str,
    server_id: ServerId,
    catalog: &Catalog,
    method: &str,
    kind: CatalogKind,
    listed: Result<Vec<Value>, RpcError>,
) {
    match listed {
        Ok(items) => {
            let count = items.len();
            if let Err(err) = catalog.apply_items(server_id, kind, items).await {
                tracing::error!(server, "cannot store the result of {method}: {err}");
            } else {
                tracing::debug!(server, method, count, "discovered");
            }
        }
        Err(err) => tracing::warn!(server, "{method} failed: {err}"),
    }
}

/// Lists `method` if the server declared `capability`; "method not found"
/// counts as an empty list.
async fn fetch(
    session: &Session,
    capability: &str,
    method: &str,
    field: &str,
) -> Result<Vec<Value>, RpcError> {
    if !session.has_capability(capability) {
        return Ok(Vec::new());
    }
    match list_all(session, method, field).await {
        Err(err) if err.is_method_not_found() => Ok(Vec::new()),
        other => other,
    }
}
