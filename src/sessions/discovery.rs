//! Discovery: list a server's tools, resources, resource templates
//! and prompts through every page, and hand them to the catalog.

use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::rpc_error::RpcError;
use super::session::Session;
use crate::catalog::Catalog;
use crate::jsonrpc::Members;
use crate::model::{CatalogKind, RefusedItem, ServerId};

/// Pages followed at most (a server that never stops paginating is cut off).
pub const MAX_PAGES: usize = 1000;
/// Items kept at most per list.
pub const MAX_ITEMS: usize = 50_000;
/// Characters of a refused item's own name kept (a name can be the huge part).
const REFUSED_NAME_CHARS: usize = 200;

/// What one server's discovery may still read, all its lists together
/// (`limits::max_catalog_bytes`): a server sending page after page of
/// 20 MB definitions is cut off after the first ones, not after gigabytes.
/// Resources, templates and prompts together may take half of it: a huge
/// resource list never starves the tools, listed at the same time.
pub struct Budget {
    left: AtomicUsize,
    /// What the lists other than tools may still take.
    others_left: AtomicUsize,
    total: usize,
    spent: AtomicBool,
}

impl Budget {
    pub fn new(total: usize) -> Budget {
        Budget {
            left: AtomicUsize::new(total),
            others_left: AtomicUsize::new(total / 2),
            total,
            spent: AtomicBool::new(false),
        }
    }

    /// Takes `bytes` from what is left; false (and logged once) when they
    /// do not fit: that list stops there.
    fn take(&self, server: &str, method: &str, bytes: usize) -> bool {
        let take_from = |counter: &AtomicUsize| {
            counter
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(bytes)
                })
                .is_ok()
        };
        let others_fit = method == "tools/list" || take_from(&self.others_left);
        let taken = others_fit && take_from(&self.left);
        if others_fit && !taken && method != "tools/list" {
            self.others_left.fetch_add(bytes, Ordering::Relaxed);
        }
        if !taken && !self.spent.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                server,
                method,
                "the server's lists passed their share of {} bytes (--max-catalog-bytes); the rest is ignored",
                self.total
            );
        }
        taken
    }
}

/// One list as discovery keeps it: the items, those refused, and whether
/// it was read to its end (a list cut off by a bound removes nothing from
/// what is stored).
#[derive(Debug)]
pub struct Listed {
    pub items: Vec<Value>,
    pub refused: Vec<RefusedItem>,
    pub complete: bool,
}

impl Default for Listed {
    fn default() -> Self {
        Listed {
            items: Vec::new(),
            refused: Vec::new(),
            complete: true,
        }
    }
}

/// Lists every page of `method`, collecting the `field` arrays; `key` is
/// the field naming an item (for a refused one). Each item is read on its
/// own: one that is too large (`limits::max_definition_bytes`) or nested
/// too deep to read is refused alone, never the whole list.
pub async fn list_all(
    session: &Session,
    method: &str,
    field: &str,
    key: &str,
    budget: &Budget,
) -> Result<Listed, RpcError> {
    let mut listed = Listed::default();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    let max_definition = crate::limits::max_definition_bytes();
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| json!({"cursor": c}));
        let first_page = cursor.is_none();
        let result = session.request_raw(method, params).await?;
        if !budget.take(session.server(), method, result.get().len()) {
            listed.complete = false;
            return Ok(listed);
        }
        let page = Page::read(&result).map_err(|err| {
            RpcError::Malformed(format!("the result of {method} is not a list: {err}"))
        })?;
        if first_page && let Some(ttl) = page.ttl_ms {
            session.note_list_ttl(method, ttl);
        }
        let items = page.items(field).ok_or_else(|| {
            RpcError::Malformed(format!(
                "the result of {method} has no `{field}` array; what is stored is kept"
            ))
        })?;
        for item in items {
            match admit(item, key, max_definition) {
                Ok(item) => listed.items.push(item),
                Err(refused) => listed.refused.push(refused),
            }
        }
        if listed.items.len() + listed.refused.len() > MAX_ITEMS {
            tracing::warn!(
                server = session.server(),
                method,
                "more than {MAX_ITEMS} items; the rest is ignored"
            );
            listed.items.truncate(MAX_ITEMS);
            listed.complete = false;
            return Ok(listed);
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => {
                if !seen.insert(next.clone()) {
                    tracing::warn!(
                        server = session.server(),
                        method,
                        "the server repeated a cursor; stopping there"
                    );
                    listed.complete = false;
                    return Ok(listed);
                }
                cursor = Some(next);
            }
            _ => return Ok(listed),
        }
    }
    tracing::warn!(
        server = session.server(),
        method,
        "more than {MAX_PAGES} pages; the rest is ignored"
    );
    listed.complete = false;
    Ok(listed)
}

/// A page of a list, read one level deep.
struct Page<'a> {
    members: Members<'a>,
    next_cursor: Option<String>,
    ttl_ms: Option<u64>,
}

impl<'a> Page<'a> {
    fn read(result: &'a RawValue) -> serde_json::Result<Page<'a>> {
        let members = Members::read(result)?;
        let next_cursor = members
            .get("nextCursor")
            .and_then(|c| serde_json::from_str::<Option<String>>(c.get()).ok())
            .flatten();
        let ttl_ms = members
            .get("ttlMs")
            .and_then(|t| serde_json::from_str::<u64>(t.get()).ok());
        Ok(Page {
            members,
            next_cursor,
            ttl_ms,
        })
    }

    /// The list's items as they were written; `None` when the field is
    /// missing or not an array (a broken answer, which must not empty the
    /// stored list).
    fn items(&self, field: &str) -> Option<Vec<&RawValue>> {
        self.members
            .get(field)
            .and_then(|items| serde_json::from_str(items.get()).ok())
    }
}

/// An item as a tree, or why it is refused.
fn admit(item: &RawValue, key: &str, max: usize) -> Result<Value, RefusedItem> {
    let size = item.get().len();
    let reason = if size > max {
        format!(
            "its definition is {size} bytes, more than the {max} allowed for one (--max-definition-bytes)"
        )
    } else {
        match serde_json::from_str::<Value>(item.get()) {
            Ok(value) => return Ok(without_unsafe_icons(value)),
            Err(err) if err.to_string().contains("recursion limit") => {
                "its definition is nested more than 128 levels deep".to_owned()
            }
            Err(err) => format!("its definition cannot be read: {err}"),
        }
    };
    let name: String = Members::read(item)
        .ok()
        .and_then(|members| {
            let name = members.get(key)?;
            serde_json::from_str::<String>(name.get()).ok()
        })
        .unwrap_or_default();
    let short: String = name.chars().take(REFUSED_NAME_CHARS).collect();
    let name = if short.len() < name.len() {
        format!("{short}…")
    } else {
        short
    };
    Err(RefusedItem { name, reason })
}

/// The item with only the icons a client may safely fetch or show: an
/// `https:`, `http:` or `data:image/` source. A `javascript:` or `file:`
/// source is dropped: a host that renders it would run or read what the
/// server chose.
fn without_unsafe_icons(mut item: Value) -> Value {
    if let Some(Value::Array(icons)) = item.get_mut("icons") {
        icons.retain(|icon| {
            icon.get("src")
                .and_then(Value::as_str)
                .is_some_and(is_safe_icon_source)
        });
    }
    item
}

fn is_safe_icon_source(source: &str) -> bool {
    let lower = source.trim_start().to_ascii_lowercase();
    lower.starts_with("https://")
        || lower.starts_with("http://")
        || lower.starts_with("data:image/")
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
    let budget = Budget::new(crate::limits::max_catalog_bytes());
    let budget = &budget;
    let tools = async {
        if wants(What::Tools) {
            Some(fetch(session, "tools", "tools/list", "tools", "name", budget).await)
        } else {
            None
        }
    };
    let resources = async {
        if wants(What::Resources) {
            Some(tokio::join!(
                fetch(
                    session,
                    "resources",
                    "resources/list",
                    "resources",
                    CatalogKind::Resource.key_field(),
                    budget
                ),
                fetch(
                    session,
                    "resources",
                    "resources/templates/list",
                    "resourceTemplates",
                    CatalogKind::ResourceTemplate.key_field(),
                    budget
                ),
            ))
        } else {
            None
        }
    };
    let prompts = async {
        if wants(What::Prompts) {
            Some(
                fetch(
                    session,
                    "prompts",
                    "prompts/list",
                    "prompts",
                    CatalogKind::Prompt.key_field(),
                    budget,
                )
                .await,
            )
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
        Some(Ok(Listed {
            items,
            refused,
            complete,
        })) => {
            if items.is_empty() && refused.is_empty() {
                tracing::warn!(server, "the server offers no tools");
            }
            session.tools_listed(None);
            say_refused(server, server_id, "tools/list", &refused);
            let count = items.len() + refused.len();
            let stored = catalog
                .apply_tools(server_id, items, refused, complete)
                .await;
            session.tools_stored(stored.as_ref().err().map(ToString::to_string));
            match stored {
                // Servers often repeat list_changed; say so only when
                // something changed.
                Ok(diff) if diff.changed() => tracing::info!(
                    server,
                    tools = count,
                    added = diff.added,
                    updated = diff.updated,
                    removed = diff.removed,
                    rejected = diff.rejected,
                    refused = diff.refused,
                    "tools discovered"
                ),
                Ok(_) => tracing::debug!(server, tools = count, "tools unchanged"),
                Err(err) => tracing::error!(server, "cannot store the tools: {err}"),
            }
        }
        Some(Err(err)) => {
            let reason = crate::model::redact::shown_reason(&format!("tools/list failed: {err}"));
            tracing::warn!(server, "{reason}");
            session.tools_listed(Some(reason));
        }
        None => {}
    }
}

async fn store_items(
    server: &str,
    server_id: ServerId,
    catalog: &Catalog,
    method: &str,
    kind: CatalogKind,
    listed: Result<Listed, RpcError>,
) {
    match listed {
        Ok(Listed {
            items,
            refused,
            complete,
        }) => {
            say_refused(server, server_id, method, &refused);
            let count = items.len();
            if let Err(err) = catalog.apply_items(server_id, kind, items, complete).await {
                tracing::error!(server, "cannot store the result of {method}: {err}");
            } else {
                tracing::debug!(server, method, count, "discovered");
            }
        }
        Err(err) => tracing::warn!(server, "{method} failed: {err}"),
    }
}

/// Says what a list refused: the first few by name, then a count (a
/// server refused 50,000 times is one line, not 50,000); and only when it
/// differs from what the server's last listing refused (every relisting
/// would say it again).
fn say_refused(server: &str, server_id: ServerId, method: &str, refused: &[RefusedItem]) {
    const NAMED: usize = 5;
    static LAST_SAID: std::sync::Mutex<Option<HashMap<(ServerId, String), u64>>> =
        std::sync::Mutex::new(None);
    let fingerprint = {
        use std::hash::{Hash as _, Hasher as _};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for item in refused {
            (&item.name, &item.reason).hash(&mut hasher);
        }
        hasher.finish()
    };
    let mut last = match LAST_SAID.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let said = last
        .get_or_insert_with(HashMap::new)
        .insert((server_id, method.to_owned()), fingerprint);
    drop(last);
    if said == Some(fingerprint) {
        return;
    }
    for item in refused.iter().take(NAMED) {
        tracing::warn!(server, method, item = %item.name, "{}; refused", item.reason);
    }
    if refused.len() > NAMED {
        tracing::warn!(
            server,
            method,
            refused = refused.len(),
            "and {} more refused",
            refused.len() - NAMED
        );
    }
}

/// Lists `method` if the server declared `capability`; "method not found"
/// counts as an empty list.
async fn fetch(
    session: &Session,
    capability: &str,
    method: &str,
    field: &str,
    key: &str,
    budget: &Budget,
) -> Result<Listed, RpcError> {
    if !session.has_capability(capability) {
        return Ok(Listed::default());
    }
    match list_all(session, method, field, key, budget).await {
        Err(err) if err.is_method_not_found() => Ok(Listed::default()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_half_for_the_tools() {
        let budget = Budget::new(100);
        assert!(budget.take("s", "resources/list", 40));
        assert!(
            !budget.take("s", "prompts/list", 20),
            "past half for the others"
        );
        assert!(budget.take("s", "prompts/list", 10));
        assert!(budget.take("s", "tools/list", 50), "the tools get the rest");
        assert!(!budget.take("s", "tools/list", 1), "and no more");
    }

    #[test]
    fn icons_a_client_could_run_or_read_are_dropped() {
        let item = serde_json::value::RawValue::from_string(
            serde_json::json!({"name": "t", "icons": [
                {"src": "https://example.com/a.png"},
                {"src": "javascript:alert(document.cookie)"},
                {"src": " JavaScript:alert(1)"},
                {"src": "file:///etc/passwd"},
                {"src": "data:text/html,<script>x</script>"},
                {"src": "data:image/png;base64,AAAA"},
                {"sizes": ["1x1"]}
            ]})
            .to_string(),
        )
        .unwrap();
        let admitted = admit(&item, "name", 1 << 20).unwrap();
        let kept: Vec<&str> = admitted["icons"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|icon| icon["src"].as_str())
            .collect();
        assert_eq!(
            kept,
            ["https://example.com/a.png", "data:image/png;base64,AAAA"]
        );
    }

    #[test]
    fn an_item_too_large_or_too_deep_is_refused_with_its_name() {
        let deep = format!(
            "{{\"name\": \"deep\", \"inputSchema\": {}1{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        let deep = RawValue::from_string(deep).unwrap();
        let refused = admit(&deep, "name", 1 << 20).unwrap_err();
        assert_eq!(refused.name, "deep");
        assert!(refused.reason.contains("128 levels"), "{}", refused.reason);
        let large = RawValue::from_string(format!(
            "{{\"name\": \"{}\", \"d\": \"{}\"}}",
            "n".repeat(500),
            "x".repeat(2000)
        ))
        .unwrap();
        let refused = admit(&large, "name", 1000).unwrap_err();
        assert!(
            refused.reason.contains("more than the 1000"),
            "{}",
            refused.reason
        );
        assert!(refused.name.chars().count() <= REFUSED_NAME_CHARS + 1);
        let fine = RawValue::from_string("{\"name\": \"ok\"}".to_owned()).unwrap();
        assert_eq!(admit(&fine, "name", 1000).unwrap()["name"], "ok");
    }
}
