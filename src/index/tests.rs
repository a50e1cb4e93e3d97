//! The search service over a real store, the real tantivy index and the
//! real model.

use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::broadcast;

use super::*;
use crate::model::wire_name::WireNameRules;
use crate::model::{ServerId, ServerRecord, ServerSource};

/// A catalog-only server whose tools the tests replace at will: not
/// pinned, so a changed or added tool is indexed, not held back.
fn server(store: &Store, name: &str) -> ServerRecord {
    let mut record = ServerRecord::new(
        name,
        crate::model::Transport::placeholder(),
        ServerSource::Api,
    );
    record.trust.pinning = crate::model::PinPolicy::Off;
    store.insert_server(&record, "test").unwrap();
    record
}

fn tool(name: &str, description: &str, params: &[(&str, &str)]) -> Value {
    let properties: serde_json::Map<String, Value> = params
        .iter()
        .map(|(p, d)| ((*p).to_owned(), json!({"type": "string", "description": d})))
        .collect();
    json!({"name": name, "description": description, "inputSchema": {"type": "object", "properties": properties}})
}

struct Fixture {
    _dir: tempfile::TempDir,
    data_dir: std::path::PathBuf,
    store: Arc<Store>,
    github: ServerRecord,
    gitlab: ServerRecord,
    files: ServerRecord,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_path_buf();
    let store = Arc::new(Store::open(&data_dir).unwrap());
    let rules = WireNameRules::default();
    let github = server(&store, "github");
    let gitlab = server(&store, "gitlab");
    let files = server(&store, "filesystem");
    store
        .replace_tools(
            github.id,
            &[
                tool(
                    "create_issue",
                    "Create a new issue in a GitHub repository",
                    &[
                        ("owner", "Repository owner"),
                        ("repo", "Repository name"),
                        ("title", "Issue title"),
                    ],
                ),
                tool(
                    "search_code",
                    "Search for code across GitHub repositories",
                    &[("q", "Search query")],
                ),
                tool(
                    "create_pull_request",
                    "Create a new pull request in a GitHub repository",
                    &[
                        ("head", "Branch with changes"),
                        ("base", "Branch to merge into"),
                    ],
                ),
            ],
            &rules,
        )
        .unwrap();
    store
        .replace_tools(
            gitlab.id,
            &[
                tool(
                    "create_issue",
                    "Create a new issue in a GitLab project",
                    &[
                        ("project_id", "Project ID or path"),
                        ("title", "Issue title"),
                    ],
                ),
                tool(
                    "createMergeRequest",
                    "Open a merge request in a GitLab project",
                    &[("source_branch", "Source branch")],
                ),
            ],
            &rules,
        )
        .unwrap();
    store
        .replace_tools(
            files.id,
            &[
                tool(
                    "read_file",
                    "Read the complete contents of a file from the file system.",
                    &[("path", "Path of the file")],
                ),
                tool(
                    "write_file",
                    "Create a new file or overwrite an existing file with new content.",
                    &[("path", "Path"), ("content", "Text to write")],
                ),
                tool(
                    "list_directory",
                    "Get a detailed listing of all files and directories in a specified path.",
                    &[("path", "Directory")],
                ),
            ],
            &rules,
        )
        .unwrap();
    Fixture {
        _dir: dir,
        data_dir,
        store,
        github,
        gitlab,
        files,
    }
}

fn open(f: &Fixture) -> SearchIndex {
    let index = SearchIndex::open(Arc::clone(&f.store), &f.data_dir).unwrap();
    index.load_model();
    assert!(index.semantic_available(), "{:?}", index.model_warning());
    index.sync(false).unwrap();
    index
}

fn ask(
    index: &SearchIndex,
    query: &str,
    mode: SearchMode,
    servers: Option<HashSet<ServerId>>,
) -> Vec<String> {
    index
        .search(&SearchRequest {
            query: query.to_owned(),
            limit: 5,
            mode,
            servers,
            skills: None,
            tools: None,
            include_external: true,
        })
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.doc.tool_id.to_string())
        .collect()
}

#[test]
fn finds_tools_by_name_by_paraphrase_and_by_server() {
    let f = fixture();
    let index = open(&f);
    for mode in [
        SearchMode::Hybrid,
        SearchMode::Keyword,
        SearchMode::Semantic,
    ] {
        assert_eq!(
            ask(&index, "read_file", mode, None)[0],
            "filesystem.read_file",
            "{mode:?}"
        );
    }
    assert_eq!(
        ask(
            &index,
            "show me what is inside a document on disk",
            SearchMode::Hybrid,
            None
        )[0],
        "filesystem.read_file"
    );
    assert_eq!(
        ask(
            &index,
            "new issue for the GitLab project",
            SearchMode::Hybrid,
            None
        )[0],
        "gitlab.create_issue"
    );
    assert_eq!(
        ask(&index, "file a bug on GitHub", SearchMode::Hybrid, None)[0],
        "github.create_issue"
    );
    // camelCase names are words too.
    assert_eq!(
        ask(&index, "merge request", SearchMode::Keyword, None)[0],
        "gitlab.createMergeRequest"
    );
    // Same-named tools on two servers both come back.
    let both = ask(&index, "create issue", SearchMode::Hybrid, None);
    assert!(
        both.contains(&"github.create_issue".to_owned())
            && both.contains(&"gitlab.create_issue".to_owned()),
        "{both:?}"
    );
    // The server filter applies on both sides.
    let only_gitlab = ask(
        &index,
        "create issue",
        SearchMode::Hybrid,
        Some(HashSet::from([f.gitlab.id])),
    );
    assert!(!only_gitlab.is_empty());
    assert!(
        only_gitlab.iter().all(|id| id.starts_with("gitlab.")),
        "{only_gitlab:?}"
    );
}

/// A sync of many tools embeds on a helper session beside the first
/// (`sync.rs` HELPER_FROM); every tool gets both its vectors, and the
/// helper is gone once the sync is over.
#[test]
fn a_large_sync_embeds_side_by_side_and_gives_the_helper_back() {
    let f = fixture();
    let bulk = server(&f.store, "bulk");
    let topics = [
        "invoices", "tickets", "recipes", "flights", "songs", "photos",
    ];
    let tools: Vec<Value> = (0..300)
        .map(|i| {
            let topic = topics[i % topics.len()];
            tool(
                &format!("list_{topic}_{i}"),
                &format!("Lists the {topic} of account number {i}"),
                &[("account", "The account to read")],
            )
        })
        .chain([tool(
            "forecast",
            "Tells tomorrow's weather for a city",
            &[("city", "City name")],
        )])
        .collect();
    f.store
        .replace_tools(bulk.id, &tools, &WireNameRules::default())
        .unwrap();
    let index = open(&f);
    let progress = index.progress().borrow().clone();
    assert_eq!(progress.refining_tools, 0, "{progress:?}");
    assert!(progress.semantic, "{progress:?}");
    assert_eq!(
        ask(&index, "will it rain tomorrow", SearchMode::Semantic, None).first(),
        Some(&"bulk.forecast".to_owned())
    );
    let embedder = index.embedder().unwrap();
    if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
        assert_eq!(embedder.sessions_loaded(), 2, "no helper embedded");
    }
    assert_eq!(embedder.sessions_alive(), 1, "the helper outlived the sync");
}

#[test]
fn removed_tools_vanish_and_a_restart_reuses_index_and_embeddings() {
    let f = fixture();
    let index = open(&f);
    assert_eq!(
        ask(&index, "read file", SearchMode::Hybrid, None)[0],
        "filesystem.read_file"
    );
    f.store.remove_server(f.files.id, "test").unwrap();
    index.sync(false).unwrap();
    for mode in [
        SearchMode::Hybrid,
        SearchMode::Keyword,
        SearchMode::Semantic,
    ] {
        assert!(
            ask(&index, "read file", mode, None)
                .iter()
                .all(|id| !id.starts_with("filesystem.")),
            "{mode:?}"
        );
    }
    drop(index);

    // A restart: the keyword index matches the store, so nothing is
    // re-indexed there; vectors all come from the cache.
    let generation = f.store.catalog_generation().unwrap();
    let reopened = SearchIndex::open(Arc::clone(&f.store), &f.data_dir).unwrap();
    assert_eq!(reopened.inner.opened_at, Some(generation));
    reopened.load_model();
    let keys_before = count_embeddings(&f.store);
    reopened.sync(false).unwrap();
    assert_eq!(
        count_embeddings(&f.store),
        keys_before,
        "nothing was embedded again"
    );
    assert_eq!(
        ask(&reopened, "create a pull request", SearchMode::Hybrid, None)[0],
        "github.create_pull_request"
    );
    let _ = f.github;
}

/// A store of one server embeds its tools without the server's name (a
/// word every text would share); a second server brings the name back.
#[test]
fn a_lone_servers_name_leaves_its_tools_vectors_until_a_second_server_comes() {
    let f = fixture();
    let index = open(&f);
    let definition_hash = || {
        f.store
            .tools_named(std::iter::once((f.github.id, "create_pull_request")))
            .unwrap()
            .remove(0)
            .unwrap()
            .definition_hash
    };
    let held_under = |hash: &str| {
        index
            .inner
            .vectors
            .read()
            .unwrap()
            .holds("github.create_pull_request", hash)
    };
    let named = definition_hash();
    let lone = format!("{named}~lone");
    assert!(held_under(&named) && !held_under(&lone));

    f.store.remove_server(f.gitlab.id, "test").unwrap();
    f.store.remove_server(f.files.id, "test").unwrap();
    let embedded_before = count_embeddings(&f.store);
    index.sync(false).unwrap();
    assert!(held_under(&lone) && !held_under(&named));
    assert!(
        count_embeddings(&f.store) > embedded_before,
        "the lone server's tools were embedded again, without its name"
    );
    assert_eq!(
        ask(&index, "open a pull request", SearchMode::Semantic, None)[0],
        "github.create_pull_request"
    );

    let jira = server(&f.store, "jira");
    f.store
        .replace_tools(
            jira.id,
            &[tool("create_ticket", "Create a Jira ticket", &[])],
            &WireNameRules::default(),
        )
        .unwrap();
    index.sync(false).unwrap();
    assert!(held_under(&named) && !held_under(&lone));
    assert_eq!(
        ask(&index, "jira ticket", SearchMode::Semantic, None)[0],
        "jira.create_ticket"
    );
}

#[test]
fn a_stale_or_deleted_keyword_index_is_rebuilt_from_the_store() {
    let f = fixture();
    let index = open(&f);
    drop(index);
    // The store moves on while the index is closed (as after a crash).
    f.store
        .replace_tools(
            f.gitlab.id,
            &[tool(
                "delete_branch",
                "Delete a branch of a GitLab project",
                &[],
            )],
            &WireNameRules::default(),
        )
        .unwrap();
    let reopened = open(&f);
    assert_eq!(
        ask(&reopened, "delete branch", SearchMode::Keyword, None)[0],
        "gitlab.delete_branch"
    );
    assert!(
        ask(&reopened, "merge request", SearchMode::Keyword, None)
            .iter()
            .all(|id| id != "gitlab.createMergeRequest")
    );
    drop(reopened);
    std::fs::remove_dir_all(index_dir(&f.data_dir)).unwrap();
    let rebuilt = open(&f);
    assert_eq!(
        ask(&rebuilt, "delete branch", SearchMode::Keyword, None)[0],
        "gitlab.delete_branch"
    );
    assert_eq!(
        ask(
            &rebuilt,
            "list the files in a folder",
            SearchMode::Hybrid,
            None
        )[0],
        "filesystem.list_directory"
    );
}

/// The index's folder deleted under a running daemon: the rebuild the
/// failed sync asks for (and `reindex`) makes it anew, and new tools are
/// found by keyword again without a restart.
#[test]
fn a_keyword_index_deleted_while_open_is_made_anew_by_a_rebuild() {
    let f = fixture();
    let index = open(&f);
    std::fs::remove_dir_all(index_dir(&f.data_dir)).unwrap();
    f.store
        .replace_tools(
            f.gitlab.id,
            &[tool(
                "delete_branch",
                "Delete a branch of a GitLab project",
                &[],
            )],
            &WireNameRules::default(),
        )
        .unwrap();
    let _ = index.sync(false);
    index.sync(true).unwrap();
    assert_eq!(
        ask(&index, "delete branch", SearchMode::Keyword, None)[0],
        "gitlab.delete_branch"
    );
    assert!(index_dir(&f.data_dir).join("meta.json").is_file());
    drop(index);
    let reopened = open(&f);
    assert_eq!(
        ask(&reopened, "delete branch", SearchMode::Keyword, None)[0],
        "gitlab.delete_branch"
    );
}

fn count_embeddings(store: &Store) -> u64 {
    store.retain_embeddings_count().unwrap()
}

/// The classification worker's first pass waits on `synced`: it must be
/// reported once the first sync ended, and at once when search is off.
#[tokio::test]
async fn maintenance_reports_its_first_sync_ended_and_search_off_as_synced() {
    for setting in [SearchSetting::Keyword, SearchSetting::Off] {
        let f = fixture();
        let index = SearchIndex::open_with(Arc::clone(&f.store), &f.data_dir, setting).unwrap();
        let mut progress = index.progress();
        assert!(
            !progress.borrow().synced,
            "{setting:?}: synced before any sync"
        );
        let shutdown = tokio_util::sync::CancellationToken::new();
        let (catalog, _) = broadcast::channel(4);
        let (registry, _) = broadcast::channel(4);
        let task =
            index.spawn_maintenance(catalog.subscribe(), registry.subscribe(), shutdown.clone());
        let ended = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            progress.wait_for(|p| p.synced),
        )
        .await
        .expect("the first sync never ended")
        .expect("progress closed")
        .clone();
        assert!(!ended.syncing, "{setting:?}: {ended:?}");
        if setting == SearchSetting::Keyword {
            let total = f.store.all_tools().unwrap().len();
            assert!(total > 0);
            assert_eq!(ended.indexed_tools, total, "{ended:?}");
        }
        shutdown.cancel();
        task.await.unwrap();
    }
}

#[test]
fn a_keyword_index_that_cannot_be_written_is_kept_in_memory() {
    let f = fixture();
    // Nothing can be created under /proc, whoever we are (root included).
    let unwritable = std::path::Path::new("/proc/self/no-such-dir");
    let index = SearchIndex::open(Arc::clone(&f.store), unwritable).unwrap();
    index.sync(false).unwrap();
    assert!(
        ask(&index, "pull request", SearchMode::Keyword, None)
            .iter()
            .any(|id| id == "github.create_pull_request")
    );
}
