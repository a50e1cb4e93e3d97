//! The router over a real store, with no server connected: views.

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

use super::{CallError, ConflictStrategy, Router};
use crate::catalog::Catalog;
use crate::model::wire_name::WireNameRules;
use crate::model::{CatalogKind, Profile, ServerRecord, ServerSource, ServerStatus, Transport};
use crate::registry::Registry;
use crate::sessions::{SessionManager, SessionSettings};
use crate::store::Store;

fn profile(value: serde_json::Value) -> Profile {
    let mut value = value;
    value["updated_at"] = json!("2026-11-28T00:00:00Z");
    serde_json::from_value(value).expect("a profile")
}

/// Two connected servers (`alpha`, `beta`), three tools each, a prompt
/// each, and the router over them.
async fn two_servers() -> (
    tempfile::TempDir,
    Registry,
    Router,
    [crate::model::ServerId; 2],
) {
    two_servers_listing(|_| {
        let tools = (0..3)
            .map(|i| json!({"name": format!("tool_{i}"), "inputSchema": {"type": "object"}}))
            .collect();
        (
            tools,
            vec![(CatalogKind::Prompt, vec![json!({"name": "greet"})])],
        )
    })
    .await
}

/// Two connected servers (`alpha`, `beta`) listing what `lists` gives for
/// each name (tools, other items by kind), and the router over them.
async fn two_servers_listing(
    lists: impl Fn(
        &str,
    ) -> (
        Vec<serde_json::Value>,
        Vec<(CatalogKind, Vec<serde_json::Value>)>,
    ),
) -> (
    tempfile::TempDir,
    Registry,
    Router,
    [crate::model::ServerId; 2],
) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let rules = WireNameRules::default();
    let mut ids = Vec::new();
    for name in ["alpha", "beta"] {
        let record = ServerRecord {
            status: ServerStatus::Connected,
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
        let (tools, items) = lists(name);
        store.replace_tools(record.id, &tools, &rules).unwrap();
        for (kind, items) in items {
            store.replace_items(record.id, kind, &items, true).unwrap();
        }
        ids.push(record.id);
    }
    let registry = Registry::new(Arc::clone(&store));
    let catalog = Catalog::new(Arc::clone(&store), rules);
    let sessions = SessionManager::new(registry.clone(), catalog, SessionSettings::default());
    let router = Router::start(sessions, ConflictStrategy::default(), Duration::ZERO).await;
    (dir, registry, router, [ids[0], ids[1]])
}

/// A tool's UI (`_meta.ui.resourceUri`, read by the host by the server's
/// own URI) reaches that tool's server only: another server listing the
/// same URI, or a template matching it, must not answer for it. A URI two
/// servers list, that the conflict strategy gives to neither, reaches
/// none rather than a third server's template.
#[tokio::test]
async fn a_tools_ui_reaches_its_own_server_only() {
    let (_dir, _registry, router, [alpha, beta]) = two_servers_listing(|name| match name {
        "alpha" => (
            vec![json!({
                "name": "board",
                "inputSchema": {"type": "object"},
                "_meta": {"ui": {"resourceUri": "ui://a/board"}, "openai/outputTemplate": "ui://a/old"}
            })],
            vec![(
                CatalogKind::Resource,
                vec![json!({"uri": "file:///shared", "name": "shared"})],
            )],
        ),
        _ => (
            Vec::new(),
            vec![
                (
                    CatalogKind::Resource,
                    vec![
                        json!({"uri": "ui://a/board", "name": "impostor"}),
                        json!({"uri": "file:///shared", "name": "shared"}),
                    ],
                ),
                (
                    CatalogKind::ResourceTemplate,
                    vec![json!({"uriTemplate": "{+rest}", "name": "catch-all"})],
                ),
            ],
        ),
    })
    .await;
    let table = router.table();
    for uri in ["ui://a/board", "ui://a/old"] {
        let (route, form) = table.route_resource(uri).expect("the tool's UI is routed");
        assert_eq!(route.server_id, alpha, "{uri}");
        assert_eq!(&*route.original, uri);
        assert_eq!(form, super::table::UriForm::Own);
    }
    // Listed by both at the same priority: no server, not beta's template.
    assert!(table.route_resource("file:///shared").is_none());
    // Named as listed, each still reaches its own.
    let (route, _) = table.route_resource("beta:file:///shared").expect("listed");
    assert_eq!(route.server_id, beta);
    // A URI nobody lists or names as a UI still goes by template.
    let (route, _) = table.route_resource("ui://b/other").expect("by template");
    assert_eq!(route.server_id, beta);
}

/// A view's lists and fingerprints follow its profile alone: editing
/// another profile, or a server outside it announcing a change, leaves
/// them (and its clients) alone; calls outside it are unknown tools.
#[tokio::test]
async fn a_view_moves_only_with_what_it_lists() {
    let (_dir, registry, router, [_alpha, beta]) = two_servers().await;
    registry
        .put_profile(profile(json!({"name": "a", "servers": ["alpha"]})))
        .await
        .unwrap();
    registry
        .put_profile(profile(json!({"name": "b", "tools": ["beta.*"]})))
        .await
        .unwrap();
    router.check_profile("a").await.unwrap();
    router.check_profile("b").await.unwrap();
    for unknown in ["c", "Not A Name", ""] {
        assert!(matches!(
            router.check_profile(unknown).await,
            Err(CallError::UnknownProfile(_))
        ));
    }

    let table = router.table();
    let a = router.view_of(&table, "a");
    let mut ids: Vec<&str> = a.tool_ids.iter().map(|id| &**id).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["alpha.tool_0", "alpha.tool_1", "alpha.tool_2"]);
    assert_eq!(a.prompts.len(), 1, "alpha's prompt only");
    assert_eq!(
        router.view_of(&table, "b").prompts.len(),
        1,
        "no server rule: the servers of its tools"
    );

    let (all, in_a, in_b) = (
        router.fingerprints_for(None),
        router.fingerprints_for(Some("a")),
        router.fingerprints_for(Some("b")),
    );
    assert_ne!(in_a, in_b);

    // Another profile edited: a's view and everything's stand still.
    registry
        .put_profile(profile(
            json!({"name": "b", "tools": ["beta.*"], "exclude_tools": ["beta__tool_1"]}),
        ))
        .await
        .unwrap();
    router.reload_profiles_now().await;
    assert_eq!(router.fingerprints_for(Some("a")), in_a);
    assert_eq!(router.fingerprints_for(None), all);
    let b_now = router.fingerprints_for(Some("b"));
    assert_ne!(b_now.tools, in_b.tools);
    assert_eq!(b_now.prompts, in_b.prompts, "b's prompts did not change");
    assert_eq!(router.view_of(&router.table(), "b").tools.len(), 2);

    // beta says its tools changed: b and everything move, a does not.
    router.announce(beta, |f| &mut f.tools).await;
    assert_eq!(router.fingerprints_for(Some("a")), in_a);
    assert_ne!(router.fingerprints_for(Some("b")).tools, b_now.tools);
    assert_ne!(router.fingerprints_for(None).tools, all.tools);

    // Calls: the view decides, and no error names what is outside it.
    let outside = router
        .resolve_in_view("beta__tool_0", None, Some("a"))
        .await;
    assert!(
        matches!(&outside, Err(CallError::UnknownTool(name)) if name == "beta__tool_0"),
        "{outside:?}"
    );
    // A bare name alpha and beta tie on: ambiguous outside the view, the
    // view's own tool inside it.
    assert!(matches!(
        router.resolve_in_view("tool_0", None, None).await,
        Err(CallError::Ambiguous { .. })
    ));
    let bare = router.resolve_in_view("tool_0", None, Some("a")).await;
    assert!(
        matches!(&bare, Ok((_, route)) if &*route.tool_id == "alpha.tool_0"),
        "a bare name is the view's own tool, not ambiguous with beta's: {bare:?}"
    );
    assert!(
        router
            .resolve_in_view("alpha__tool_0", None, Some("a"))
            .await
            .is_ok()
    );
    assert!(
        router
            .resolve_in_view("beta.tool_1", None, Some("b"))
            .await
            .is_err()
    );

    // A profile removed under its clients admits nothing.
    registry.remove_profile("a").await.unwrap();
    router.reload_profiles_now().await;
    assert!(router.view_of(&router.table(), "a").tools.is_empty());
    assert!(
        router
            .resolve_in_view("alpha__tool_0", None, Some("a"))
            .await
            .is_err()
    );
}
