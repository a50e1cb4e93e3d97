//! The store's tests, through `Store`'s own API on a fresh data dir (the
//! catalog's in `catalog`), so they hold whichever file a method lives in.

use super::meta::{META, META_SCHEMA_VERSION};
use super::*;
use crate::model::{
    AuditEntry, ServerRecord, ServerSource, ServerStatus, StatusTrigger, Transport,
};
use std::collections::BTreeMap;
use uuid::Uuid;

/// The engines a store's tables can be on: the file alone, or a real
/// PostgreSQL (a cluster of the test's own) with the file beside it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Engine {
    File,
    #[cfg(feature = "postgres")]
    Postgres,
}

/// A store on one engine, with what it lives on.
pub(super) struct TestStore {
    store: Store,
    _dir: tempfile::TempDir,
    #[cfg(feature = "postgres")]
    cluster: Option<super::postgres::test_cluster::TestCluster>,
}

impl TestStore {
    /// `None` when the engine is not here (no PostgreSQL outside CI): the
    /// test is skipped, saying so.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(super) fn open(engine: Engine, test: &str) -> Option<TestStore> {
        let dir = tempfile::tempdir().unwrap();
        match engine {
            Engine::File => Some(TestStore {
                store: Store::open(dir.path()).unwrap(),
                _dir: dir,
                #[cfg(feature = "postgres")]
                cluster: None,
            }),
            #[cfg(feature = "postgres")]
            Engine::Postgres => {
                use super::postgres::{PgTables, PgTarget, test_cluster::TestCluster};
                let cluster = TestCluster::start_or_skip(test)?;
                let target = PgTarget::new(&cluster.url(), None).unwrap();
                let tables = PgTables::connect(target, test).unwrap();
                Some(TestStore {
                    store: Store::open_shared(dir.path(), tables).unwrap(),
                    _dir: dir,
                    cluster: Some(cluster),
                })
            }
        }
    }
}

/// A token is bound only to a view that is there, and a view a token is
/// bound to is removed only by a config file (not an admin): both
/// checked inside the write, so a race between the two cannot leave a
/// token reaching nothing.
fn tokens_and_the_views_they_reach_stay_consistent(engine: Engine) {
    let Some(store) = TestStore::open(engine, "tokens and views") else {
        return;
    };
    let token = |name: &str, profile: &str| crate::model::NamedToken {
        name: name.to_owned(),
        scope: crate::model::TokenScope::Mcp,
        profile: Some(profile.to_owned()),
        hash: "h".repeat(64),
        created_at: chrono::Utc::now(),
        created_by: "test".to_owned(),
    };
    let err = store.add_token(&token("early", "dev"), "test").unwrap_err();
    assert!(matches!(err, StoreError::Stale(_)), "{err}");
    let view: crate::model::Profile = serde_json::from_value(
        serde_json::json!({"name": "dev", "servers": ["*"], "updated_at": "2026-12-03T00:00:00Z"}),
    )
    .unwrap();
    store.put_profile(&view).unwrap();
    store.add_token(&token("agent", "dev"), "test").unwrap();
    let err = store.remove_unbound_profile("dev").unwrap_err();
    assert!(err.to_string().contains("agent"), "{err}");
    assert_eq!(store.profiles().unwrap().len(), 1);
    store.revoke_token("agent", "test").unwrap();
    assert!(store.remove_unbound_profile("dev").unwrap().is_some());
}

fn a_removal_that_cannot_read_what_it_removes_removes_nothing(engine: Engine) {
    let Some(store) = TestStore::open(engine, "failed removal") else {
        return;
    };
    let name = "written-by-another-version".to_owned();
    store
        .write(|txn| txn.insert(super::profiles::PROFILES, &name, &b"not json".to_vec()))
        .unwrap();
    let err = store.remove_profile(&name).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    let kept = store
        .read(|txn| {
            use super::tables::Reads as _;
            txn.get(super::profiles::PROFILES, &name)
        })
        .unwrap();
    assert!(kept.is_some(), "an error leaves the store as it was");
}

#[cfg(feature = "postgres")]
#[test]
fn each_replica_keeps_its_own_statuses_and_history_and_shares_the_audit() {
    use super::postgres::{PgTables, PgTarget};
    let Some(a) = TestStore::open(Engine::Postgres, "replica statuses") else {
        return;
    };
    let Some(cluster) = a.cluster.as_ref() else {
        unreachable!("a PostgreSQL store has its cluster")
    };
    // A second replica: its own data dir, the same key, the same database.
    let dir_b = tempfile::tempdir().unwrap();
    std::fs::copy(a._dir.path().join(KEY_FILE), dir_b.path().join(KEY_FILE)).unwrap();
    let target = PgTarget::new(&cluster.url(), None).unwrap();
    let b = Store::open_shared(dir_b.path(), PgTables::connect(target, "b").unwrap()).unwrap();

    let server = record("alpha");
    a.insert_server(&server, "test").unwrap();
    let step = |store: &Store, to, trigger| {
        store
            .transition_server(server.id, to, trigger, None, |r| {
                if to == ServerStatus::Error {
                    r.error_message = Some("refused".into());
                }
            })
            .unwrap()
    };
    step(&a, ServerStatus::Connecting, StatusTrigger::Connect);
    step(&a, ServerStatus::Connected, StatusTrigger::ConnectSucceeded);
    let status = |store: &Store| store.get_server(server.id).unwrap().unwrap().status;
    assert_eq!(status(&a), ServerStatus::Connected);
    assert_eq!(
        status(&b),
        ServerStatus::Disconnected,
        "b never connected it"
    );
    assert_eq!(
        b.get_server_by_name("alpha")
            .unwrap()
            .unwrap()
            .transport
            .secrets()["TOKEN"],
        "s3cret-value",
        "b opens what a sealed: they share the key"
    );
    // The key sealing clients' states: a's for both, whatever b's file has.
    let (key_a, key_b) = ([1u8; 32], [2u8; 32]);
    assert_eq!(a.shared_state_key(key_a).unwrap(), key_a);
    assert_eq!(b.shared_state_key(key_b).unwrap(), key_a);
    assert_eq!(a.shared_state_key(key_b).unwrap(), key_a, "kept");

    step(&b, ServerStatus::Connecting, StatusTrigger::Connect);
    let failed = step(&b, ServerStatus::Error, StatusTrigger::ConnectFailed);
    assert_eq!(failed.error_message.as_deref(), Some("refused"));
    assert_eq!(b.list_servers().unwrap()[0].status, ServerStatus::Error);
    assert_eq!(a.list_servers().unwrap()[0].status, ServerStatus::Connected);
    assert_eq!(
        a.get_server(server.id).unwrap().unwrap().error_message,
        None
    );

    let events = |store: &Store| -> Vec<String> {
        store
            .history(server.id, 100)
            .unwrap()
            .into_iter()
            .map(|e| e.event_type)
            .collect()
    };
    assert_eq!(events(&a), ["REGISTERED", "CONNECTING", "CONNECTED"]);
    assert_eq!(events(&b), ["REGISTERED", "CONNECTING", "ERROR"]);
    let statuses = a
        .audit(100, None, &Default::default())
        .unwrap()
        .into_iter()
        .filter(|e| e.action == "status")
        .count();
    assert_eq!(statuses, 4, "one audit trail, both replicas' changes in it");

    assert_eq!(b.reset_statuses_after_restart().unwrap(), 1);
    assert_eq!(status(&b), ServerStatus::Disconnected);
    assert_eq!(
        status(&a),
        ServerStatus::Connected,
        "a's sessions did not restart"
    );
    assert_eq!(b.reset_statuses_after_restart().unwrap(), 0);

    // A third replica with a key of its own is refused, saying why.
    let dir_c = tempfile::tempdir().unwrap();
    let target = PgTarget::new(&cluster.url(), None).unwrap();
    let err = Store::open_shared(dir_c.path(), PgTables::connect(target, "c").unwrap())
        .err()
        .expect("another key is refused");
    assert!(
        err.to_string().contains("every replica needs the same key"),
        "{err}"
    );
}

#[cfg(feature = "postgres")]
#[test]
fn a_shared_store_that_is_down_refuses_writes_as_a_storage_failure_and_works_once_back() {
    let Some(store) = TestStore::open(Engine::Postgres, "shared store outage") else {
        return;
    };
    let Some(cluster) = store.cluster.as_ref() else {
        unreachable!("a PostgreSQL store has its cluster")
    };
    let a = record("alpha");
    store.insert_server(&a, "test").unwrap();
    cluster.stop().unwrap();
    let b = record("beta");
    let err = store.insert_server(&b, "test").unwrap_err();
    assert!(err.is_storage_failure(), "{err}");
    assert!(err.to_string().contains("PostgreSQL"), "{err}");

    cluster.start_again().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Err(err) = store.insert_server(&b, "test") {
        assert!(err.is_storage_failure(), "{err}");
        assert!(std::time::Instant::now() < deadline, "never back: {err}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let names: Vec<String> = store
        .list_servers()
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["alpha", "beta"], "nothing acknowledged was lost");
}

#[cfg(feature = "postgres")]
#[test]
fn secrets_are_sealed_in_the_shared_store_too() {
    let Some(store) = TestStore::open(Engine::Postgres, "sealed in postgres") else {
        return;
    };
    let Some(cluster) = store.cluster.as_ref() else {
        unreachable!("a PostgreSQL store has its cluster")
    };
    let a = record("alpha");
    store.insert_server(&a, "test").unwrap();
    let mut client = ::postgres::Client::connect(&cluster.url(), ::postgres::NoTls).unwrap();
    let rows: i64 = client
        .query_one(
            "SELECT count(*) FROM mcp_aggregator_kv WHERE tbl = 'servers'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "the registration is in the shared relation");
    let plain: i64 = client
        .query_one(
            "SELECT count(*) FROM mcp_aggregator_kv WHERE position($1::bytea in v) > 0",
            &[&b"s3cret-value".as_slice()],
        )
        .unwrap()
        .get(0);
    assert_eq!(plain, 0, "the plain secret must not be in the database");
    assert_eq!(
        store.get_server(a.id).unwrap().unwrap().transport.secrets()["TOKEN"],
        "s3cret-value"
    );
}

impl std::ops::Deref for TestStore {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

impl std::ops::DerefMut for TestStore {
    fn deref_mut(&mut self) -> &mut Store {
        &mut self.store
    }
}

/// One test per engine for each named test function (`fn name(Engine)`).
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        mod on_file {
            $(#[test]
            fn $name() {
                super::$name(super::Engine::File)
            })*
        }
        #[cfg(feature = "postgres")]
        mod on_postgres {
            $(#[test]
            fn $name() {
                super::$name(super::Engine::Postgres)
            })*
        }
    };
}

on_both_engines!(
    a_removal_that_cannot_read_what_it_removes_removes_nothing,
    tokens_and_the_views_they_reach_stay_consistent,
    insert_get_list_and_remove,
    duplicate_names_are_refused,
    transitions_go_through_the_state_machine_and_into_history,
    history_is_bounded_per_server,
    upsert_inserts_updates_and_keeps_identity,
    audit_records_every_operation_with_increasing_sequence,
    the_audit_log_is_bounded_in_bytes_and_each_entry_in_size,
);

fn record(name: &str) -> ServerRecord {
    ServerRecord::new(
        name,
        Transport::Stdio {
            command: "echo".into(),
            args: vec!["hi".into()],
            env: BTreeMap::from([("TOKEN".to_owned(), "s3cret-value".to_owned())]),
            cwd: None,
        },
        ServerSource::Api,
    )
}

fn insert_get_list_and_remove(engine: Engine) {
    let Some(store) = TestStore::open(engine, "insert_get_list_and_remove") else {
        return;
    };
    let a = record("alpha");
    let b = record("beta");
    store.insert_server(&b, "test").unwrap();
    store.insert_server(&a, "test").unwrap();
    assert_eq!(store.get_server(a.id).unwrap().as_ref(), Some(&a));
    assert_eq!(
        store.get_server_by_name("beta").unwrap().map(|r| r.id),
        Some(b.id)
    );
    let names: Vec<_> = store
        .list_servers()
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["alpha", "beta"], "listed by name");

    let removed = store.remove_server(a.id, "test").unwrap();
    assert_eq!(removed.name, "alpha");
    assert!(store.get_server(a.id).unwrap().is_none());
    assert!(store.get_server_by_name("alpha").unwrap().is_none());
    assert!(
        store.history(a.id, 100).unwrap().is_empty(),
        "history goes with the server"
    );
    assert!(matches!(
        store.remove_server(a.id, "test"),
        Err(StoreError::NotFound(_))
    ));
    // The name is free again.
    store.insert_server(&record("alpha"), "test").unwrap();
}

fn duplicate_names_are_refused(engine: Engine) {
    let Some(store) = TestStore::open(engine, "duplicate_names_are_refused") else {
        return;
    };
    store.insert_server(&record("dup"), "test").unwrap();
    let err = store.insert_server(&record("dup"), "test").unwrap_err();
    assert_eq!(err.to_string(), "Server already exists: dup");
    assert_eq!(store.list_servers().unwrap().len(), 1);
}

#[test]
fn secrets_are_encrypted_on_disk_and_readable_through_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let a = record("alpha");
    store.insert_server(&a, "test").unwrap();
    let bytes = std::fs::read(store.path()).unwrap();
    let needle = b"s3cret-value";
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "the plain secret must not be in the store file"
    );
    assert_eq!(
        store.get_server(a.id).unwrap().unwrap().transport.secrets()["TOKEN"],
        "s3cret-value"
    );
}

#[test]
fn a_second_open_of_the_same_dir_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let _first = Store::open(dir.path()).unwrap();
    let err = Store::open(dir.path())
        .err()
        .expect("second open must fail");
    assert!(matches!(err, StoreError::AlreadyOpen { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("in use by another mcp-aggregator process")
    );
}

#[test]
fn reopening_keeps_everything_and_the_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let a = record("alpha");
    {
        let store = Store::open(dir.path()).unwrap();
        store.insert_server(&a, "test").unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.get_server(a.id).unwrap(), Some(a));
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
}

#[test]
fn a_newer_schema_is_refused_without_touching_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let txn = store.db().unwrap().begin_write().unwrap();
        txn.open_table(META.redb())
            .unwrap()
            .insert(META_SCHEMA_VERSION, SCHEMA_VERSION + 1)
            .unwrap();
        txn.commit().unwrap();
    }
    let err = Store::open(dir.path())
        .err()
        .expect("newer schema must be refused");
    assert!(matches!(err, StoreError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1));
}

fn transitions_go_through_the_state_machine_and_into_history(engine: Engine) {
    let Some(store) = TestStore::open(
        engine,
        "transitions_go_through_the_state_machine_and_into_history",
    ) else {
        return;
    };
    let a = record("alpha");
    store.insert_server(&a, "test").unwrap();
    let gen_before = store.generation().unwrap();

    let rec = store
        .transition_server(
            a.id,
            ServerStatus::Connecting,
            StatusTrigger::Connect,
            None,
            |_| {},
        )
        .unwrap();
    assert_eq!(rec.status, ServerStatus::Connecting);
    let rec = store
        .transition_server(
            a.id,
            ServerStatus::Connected,
            StatusTrigger::ConnectSucceeded,
            None,
            |_| {},
        )
        .unwrap();
    assert!(rec.connected_at.is_some());
    let err = store
        .transition_server(
            a.id,
            ServerStatus::Connecting,
            StatusTrigger::Connect,
            None,
            |_| {},
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Transition(_)), "{err}");
    assert_eq!(
        store.get_server(a.id).unwrap().unwrap().status,
        ServerStatus::Connected
    );
    assert!(store.generation().unwrap() > gen_before);

    let events: Vec<_> = store
        .history(a.id, 10)
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(events, ["REGISTERED", "CONNECTING", "CONNECTED"]);

    assert_eq!(store.reset_statuses_after_restart().unwrap(), 1);
    assert_eq!(
        store.get_server(a.id).unwrap().unwrap().status,
        ServerStatus::Disconnected
    );
    assert_eq!(store.reset_statuses_after_restart().unwrap(), 0);
}

fn history_is_bounded_per_server(engine: Engine) {
    let Some(store) = TestStore::open(engine, "history_is_bounded_per_server") else {
        return;
    };
    let a = record("alpha");
    store.insert_server(&a, "test").unwrap();
    let mut to = ServerStatus::Connecting;
    for _ in 0..(HISTORY_PER_SERVER + 20) {
        store
            .transition_server(a.id, to, StatusTrigger::Connect, None, |_| {})
            .unwrap();
        to = if to == ServerStatus::Connecting {
            ServerStatus::Disconnected
        } else {
            ServerStatus::Connecting
        };
    }
    let history = store.history(a.id, usize::MAX).unwrap();
    assert_eq!(history.len() as u64, HISTORY_PER_SERVER);
    assert_ne!(
        history[0].event_type, "REGISTERED",
        "the oldest entries were dropped"
    );
}

fn upsert_inserts_updates_and_keeps_identity(engine: Engine) {
    let Some(store) = TestStore::open(engine, "upsert_inserts_updates_and_keeps_identity") else {
        return;
    };
    let original = record("alpha");
    let outcomes = store
        .upsert_servers(std::slice::from_ref(&original), "config:x")
        .unwrap();
    assert_eq!(outcomes, [UpsertOutcome::Inserted]);

    // Same settings, new id: nothing changes.
    let again = ServerRecord {
        id: Uuid::new_v4(),
        ..original.clone()
    };
    assert_eq!(
        store.upsert_servers(&[again], "config:x").unwrap(),
        [UpsertOutcome::Unchanged]
    );

    let changed = ServerRecord {
        id: Uuid::new_v4(),
        description: Some("new".into()),
        auto_connect: !original.auto_connect,
        ..original.clone()
    };
    assert_eq!(
        store
            .upsert_servers(&[changed.clone(), record("beta")], "config:x")
            .unwrap(),
        [UpsertOutcome::Updated, UpsertOutcome::Inserted]
    );
    // What only calls read is applied without reconnecting.
    let mut retuned = changed.clone();
    retuned.priority += 5;
    retuned.trust.limits.max_concurrent = Some(3);
    retuned.trust.validate_arguments = Some(true);
    assert_eq!(
        store.upsert_servers(&[retuned], "config:x").unwrap(),
        [UpsertOutcome::Retuned]
    );
    let mut repinned = changed.clone();
    repinned.trust.pinning = crate::model::PinPolicy::Off;
    assert_eq!(
        store.upsert_servers(&[repinned], "config:x").unwrap(),
        [UpsertOutcome::Updated],
        "a pinning policy is applied to a fresh listing"
    );
    let stored = store.get_server_by_name("alpha").unwrap().unwrap();
    assert_eq!(stored.id, original.id, "the id survives an update");
    assert_eq!(stored.description.as_deref(), Some("new"));
    let actions: Vec<_> = store
        .audit(10, None, &Default::default())
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions,
        [
            "update", "update", "register", "update", "verify", "register"
        ],
        "newest first"
    );
}

fn audit_records_every_operation_with_increasing_sequence(engine: Engine) {
    let Some(store) = TestStore::open(
        engine,
        "audit_records_every_operation_with_increasing_sequence",
    ) else {
        return;
    };
    let a = record("alpha");
    store.insert_server(&a, "api:127.0.0.1").unwrap();
    store
        .record_audit(
            "api:127.0.0.1",
            "register",
            "alpha",
            "Server already exists: alpha",
        )
        .unwrap();
    store.remove_server(a.id, "cli:me").unwrap();
    let audit = store.audit(10, None, &Default::default()).unwrap();
    assert_eq!(audit.len(), 3);
    assert_eq!(audit[0].action, "remove");
    assert_eq!(audit[0].actor, "cli:me");
    assert_eq!(audit[1].result, "Server already exists: alpha");
    assert!(audit[0].seq > audit[1].seq && audit[1].seq > audit[2].seq);
}

fn the_audit_log_is_bounded_in_bytes_and_each_entry_in_size(engine: Engine) {
    let Some(mut store) = TestStore::open(
        engine,
        "the_audit_log_is_bounded_in_bytes_and_each_entry_in_size",
    ) else {
        return;
    };
    store.set_audit_max_bytes(64 * 1024);
    let huge = "n".repeat(1_000_000);
    for _ in 0..200 {
        store
            .record_audit("api:127.0.0.1", "register", &huge, "name too long")
            .unwrap();
    }
    let all = store.audit(usize::MAX, None, &Default::default()).unwrap();
    let bytes: usize = all
        .iter()
        .map(|e| serde_json::to_vec(e).unwrap().len())
        .sum();
    assert!(bytes <= 64 * 1024, "{bytes} bytes kept");
    assert!(all.len() > 10, "recent entries are kept: {}", all.len());
    assert!(all[0].server.len() < 1000, "{}", all[0].server.len());
    assert!(all[0].server.ends_with("more bytes)"), "says it was cut");
    assert_eq!(all[0].seq, 200, "the newest is kept");
    // Paging: entries before a seq, newest first.
    let page = store
        .audit(3, Some(all[0].seq), &Default::default())
        .unwrap();
    assert_eq!(
        page.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![199, 198, 197]
    );

    // A batch (a second of calls) is bounded the same way, trimmed at once.
    let batch: Vec<AuditEntry> = (0..50)
        .map(|n| AuditEntry {
            seq: 0,
            timestamp: chrono::Utc::now(),
            actor: "mcp".into(),
            action: "call".into(),
            server: huge.clone(),
            result: format!("ok {n}"),
            details: None,
        })
        .collect();
    store.append_audits(batch).unwrap();
    let all = store.audit(usize::MAX, None, &Default::default()).unwrap();
    let bytes: usize = all
        .iter()
        .map(|e| serde_json::to_vec(e).unwrap().len())
        .sum();
    assert!(bytes <= 64 * 1024, "{bytes} bytes kept after a batch");
    assert_eq!(all[0].seq, 250, "numbered on: {:?}", all[0]);
    assert_eq!(all[0].result, "ok 49");
    assert!(
        all.windows(2).all(|w| w[0].seq == w[1].seq + 1),
        "what is kept has no gap"
    );
}

mod catalog {
    use super::*;
    use crate::model::wire_name::WireNameRules;
    use crate::model::{CatalogKind, RefusedItem};
    use serde_json::json;

    on_both_engines!(
        definitions_are_kept_raw_with_unknown_fields,
        rediscovery_keeps_unchanged_updates_changed_and_removes_vanished,
        a_list_cut_off_keeps_what_it_did_not_reach_and_refused_tools_show_why,
        a_colliding_wire_name_rejects_only_that_tool_and_removal_cleans_up,
        the_ui_a_host_renders_is_pinned_and_an_earlier_pin_carried_over_once,
        a_server_that_never_ends_its_list_is_trusted_on_first_use_once,
        warn_pins_follow_what_the_server_lists,
    );

    fn stored(store: &Store, name: &str) -> ServerRecord {
        let r = record(name);
        store.insert_server(&r, "test").unwrap();
        r
    }

    fn the_ui_a_host_renders_is_pinned_and_an_earlier_pin_carried_over_once(engine: Engine) {
        let Some(store) = TestStore::open(
            engine,
            "the_ui_a_host_renders_is_pinned_and_an_earlier_pin_carried_over_once",
        ) else {
            return;
        };
        let server = stored(&store, "srv");
        let rules = WireNameRules::default();
        let view = |uri: &str, revision: u64| {
            json!({"name": "view", "description": "Shows the board.",
                "inputSchema": {"type": "object"},
                "_meta": {"ui": {"resourceUri": uri}, "vendor/revision": revision}})
        };
        let ping = |meta: serde_json::Value| {
            json!({"name": "ping", "description": "Answers pong.",
                "inputSchema": {"type": "object"}, "_meta": meta})
        };
        let list = |tools: &[serde_json::Value]| {
            store.replace_tools(server.id, tools, &rules).unwrap();
            let held = |name: &str| {
                store
                    .tool(server.id, name)
                    .unwrap()
                    .unwrap()
                    .hold
                    .map(|h| h.reason)
            };
            (held("view"), held("ping"))
        };
        assert_eq!(
            list(&[view("ui://srv/board", 1), ping(json!({}))]),
            (None, None),
            "approved on first use"
        );
        // Other `_meta` keys change freely.
        assert_eq!(
            list(&[view("ui://srv/board", 2), ping(json!({}))]),
            (None, None)
        );

        // A pin as a release before this one left it: the fingerprint of
        // the fields it pinned, no `_meta`. Relisted as it was, it is
        // carried over, not held.
        let earlier = crate::trust::earlier_fingerprint(&view("ui://srv/board", 2)).unwrap();
        let as_an_earlier_release_left_it = || {
            store
                .write(|txn| {
                    let key = crate::store::pins::tool_key("view");
                    let mut pin =
                        crate::store::pins::pin_in(txn, server.id.as_u128(), &key)?.unwrap();
                    pin.fingerprint = earlier.clone();
                    pin.ui_pinned = false;
                    crate::store::pins::put_pin(txn, server.id.as_u128(), &key, &pin)
                })
                .unwrap();
        };
        as_an_earlier_release_left_it();
        assert_eq!(
            list(&[view("ui://srv/board", 2), ping(json!({}))]),
            (None, None),
            "an upgrade holds nothing"
        );

        // A server that swaps the UI at the first listing after the
        // upgrade (what the earlier release stored had the old one) is
        // held, and stays held when it lists the same again.
        let changed = Some(crate::model::HoldReason::Changed);
        as_an_earlier_release_left_it();
        assert_eq!(
            list(&[view("ui://evil/board", 2), ping(json!({}))]),
            (changed, None)
        );
        assert_eq!(
            list(&[view("ui://evil/board", 2), ping(json!({}))]),
            (changed, None)
        );

        // The UI swapped, or added to a tool approved without one: held.
        assert_eq!(
            list(&[
                view("ui://evil/board", 2),
                ping(json!({"ui": {"resourceUri": "ui://evil/ping"}}))
            ]),
            (changed, changed)
        );
        let old_flat = ping(json!({"ui/resourceUri": "ui://srv/ping"}));
        assert_ne!(
            crate::trust::fingerprint(&old_flat),
            crate::trust::fingerprint(&ping(json!({}))),
            "the older flat key is pinned too"
        );
    }

    fn definitions_are_kept_raw_with_unknown_fields(engine: Engine) {
        let Some(store) = TestStore::open(engine, "definitions_are_kept_raw_with_unknown_fields")
        else {
            return;
        };
        let server = stored(&store, "srv");
        let tool = json!({
            "name": "search",
            "description": "Search things",
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
            "outputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true, "futureHint": 7},
            "execution": {"taskSupport": "optional"},
            "_meta": {"vendor/x": [1, 2, 3]},
            "icons": [{"src": "data:,"}]
        });
        let diff = store
            .replace_tools(
                server.id,
                std::slice::from_ref(&tool),
                &WireNameRules::default(),
            )
            .unwrap();
        assert_eq!((diff.added, diff.updated, diff.removed), (1, 0, 0));
        let tools = store.tools(server.id).unwrap();
        assert_eq!(
            tools[0].definition.value(),
            tool,
            "byte-for-byte the same JSON value"
        );
        assert_eq!(tools[0].id, "srv.search");
        assert_eq!(tools[0].wire_name.as_deref(), Some("srv__search"));
        assert_eq!(store.get_server(server.id).unwrap().unwrap().tool_count, 1);
        assert_eq!(
            store.wire_name_owner("srv__search").unwrap(),
            Some((server.id, "search".to_owned()))
        );
    }

    fn rediscovery_keeps_unchanged_updates_changed_and_removes_vanished(engine: Engine) {
        let Some(store) = TestStore::open(
            engine,
            "rediscovery_keeps_unchanged_updates_changed_and_removes_vanished",
        ) else {
            return;
        };
        let server = stored(&store, "srv");
        let rules = WireNameRules::default();
        let a = json!({"name": "a", "inputSchema": {"type": "object"}});
        let b = json!({"name": "b", "inputSchema": {"type": "object"}});
        store
            .replace_tools(server.id, &[a.clone(), b.clone()], &rules)
            .unwrap();
        let generation = store.generation().unwrap();
        let same = store
            .replace_tools(server.id, &[a.clone(), b.clone()], &rules)
            .unwrap();
        assert_eq!(same.unchanged, 2);
        assert!(!same.changed());
        assert_eq!(
            store.generation().unwrap(),
            generation,
            "nothing changed, nothing to rebuild"
        );

        let b2 = json!({"name": "b", "description": "now documented", "inputSchema": {"type": "object"}});
        let c = json!({"name": "c", "inputSchema": {"type": "object"}});
        let diff = store.replace_tools(server.id, &[b2, c], &rules).unwrap();
        assert_eq!(
            (diff.added, diff.updated, diff.removed, diff.unchanged),
            (1, 1, 1, 0)
        );
        let names: Vec<_> = store
            .tools(server.id)
            .unwrap()
            .into_iter()
            .map(|t| t.original_name)
            .collect();
        assert_eq!(names, ["b", "c"]);
        assert_eq!(
            store.wire_name_owner("srv__a").unwrap(),
            None,
            "a vanished tool frees its wire name"
        );
        assert_eq!(
            store.tools(server.id).unwrap()[0].description.as_deref(),
            Some("now documented")
        );
    }

    fn a_list_cut_off_keeps_what_it_did_not_reach_and_refused_tools_show_why(engine: Engine) {
        let Some(store) = TestStore::open(
            engine,
            "a_list_cut_off_keeps_what_it_did_not_reach_and_refused_tools_show_why",
        ) else {
            return;
        };
        let rules = WireNameRules::default();
        let server = stored(&store, "srv");
        let all = [
            json!({"name": "a"}),
            json!({"name": "b"}),
            json!({"name": "c"}),
        ];
        store.replace_tools(server.id, &all, &rules).unwrap();
        // Cut off after "a" (a bound): "b" and "c" stay; "d" is refused.
        let refused = [RefusedItem {
            name: "d".to_owned(),
            reason: "too large".to_owned(),
        }];
        let diff = store
            .replace_listed_tools(server.id, &all[..1], &refused, false, &rules)
            .unwrap();
        assert_eq!((diff.removed, diff.refused), (0, 1));
        let tools = store.tools(server.id).unwrap();
        let names: Vec<_> = tools.iter().map(|t| t.original_name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        let d = tools.iter().find(|t| t.original_name == "d").unwrap();
        assert_eq!(d.withheld_because(), Some("too large"));
        assert_eq!(store.get_server(server.id).unwrap().unwrap().tool_count, 4);
        // Read whole, the list removes what it no longer holds.
        let diff = store
            .replace_listed_tools(server.id, &all[..1], &[], true, &rules)
            .unwrap();
        assert_eq!(diff.removed, 3);
    }

    /// A list is cut off only by what the server sends (a repeated cursor,
    /// too many items): its first listing approves the server all the
    /// same, so a tool it adds later is held like any other's.
    fn a_server_that_never_ends_its_list_is_trusted_on_first_use_once(engine: Engine) {
        let Some(store) = TestStore::open(
            engine,
            "a_server_that_never_ends_its_list_is_trusted_on_first_use_once",
        ) else {
            return;
        };
        let rules = WireNameRules::default();
        let server = stored(&store, "srv");
        let a = json!({"name": "a", "description": "Reads a."});
        let exfil = json!({"name": "exfil", "description": "Sends everything away."});
        store
            .replace_listed_tools(server.id, std::slice::from_ref(&a), &[], false, &rules)
            .unwrap();
        store
            .replace_listed_tools(server.id, &[a, exfil], &[], false, &rules)
            .unwrap();
        let held = |name: &str| {
            store
                .tool(server.id, name)
                .unwrap()
                .unwrap()
                .hold
                .map(|h| h.reason)
        };
        assert_eq!(held("a"), None);
        assert_eq!(held("exfil"), Some(crate::model::HoldReason::New));
    }

    /// Under `warn` every new definition is pinned: a server renaming its
    /// tools at each listing must not grow the store with the names it
    /// dropped (a listing cut off keeps the pins of the tools it keeps).
    fn warn_pins_follow_what_the_server_lists(engine: Engine) {
        let Some(store) = TestStore::open(engine, "warn_pins_follow_what_the_server_lists") else {
            return;
        };
        let rules = WireNameRules::default();
        let mut warned = record("srv");
        warned.trust.pinning = crate::model::PinPolicy::Warn;
        store.insert_server(&warned, "test").unwrap();
        let pinned = |name: &str| store.tool_pin(warned.id, name).unwrap().is_some();
        for round in 0..3 {
            let tools = [
                json!({"name": format!("t{round}")}),
                json!({"name": "kept"}),
            ];
            store.replace_tools(warned.id, &tools, &rules).unwrap();
        }
        assert!(pinned("t2") && pinned("kept"));
        assert!(!pinned("t0") && !pinned("t1"), "pins of dropped names stay");
        // Cut off after "t3": "kept" stays listed, and pinned.
        store
            .replace_listed_tools(warned.id, &[json!({"name": "t3"})], &[], false, &rules)
            .unwrap();
        assert!(pinned("t3") && pinned("kept"));

        // `block` keeps an approved pin of a tool that left: coming back
        // changed, it is held.
        let blocked = stored(&store, "blocked");
        store
            .replace_tools(blocked.id, &[json!({"name": "a"})], &rules)
            .unwrap();
        store.replace_tools(blocked.id, &[], &rules).unwrap();
        assert!(store.tool_pin(blocked.id, "a").unwrap().is_some());
    }

    fn a_colliding_wire_name_rejects_only_that_tool_and_removal_cleans_up(engine: Engine) {
        let Some(store) = TestStore::open(
            engine,
            "a_colliding_wire_name_rejects_only_that_tool_and_removal_cleans_up",
        ) else {
            return;
        };
        let rules = WireNameRules::default();
        let x = stored(&store, "x");
        let xy = stored(&store, "x__y");
        store
            .replace_tools(x.id, &[json!({"name": "y__z"})], &rules)
            .unwrap();
        let diff = store
            .replace_tools(
                xy.id,
                &[json!({"name": "z"}), json!({"name": "other"})],
                &rules,
            )
            .unwrap();
        assert_eq!(diff.rejected, 1);
        let tools = store.tools(xy.id).unwrap();
        let z = tools.iter().find(|t| t.original_name == "z").unwrap();
        assert_eq!(z.wire_name, None);
        assert!(z.rejected.as_deref().unwrap().contains("x.y__z"));
        assert!(
            tools
                .iter()
                .find(|t| t.original_name == "other")
                .unwrap()
                .wire_name
                .is_some()
        );

        store
            .replace_items(
                x.id,
                CatalogKind::Prompt,
                &[json!({"name": "p"}), json!({"name": "p"})],
                true,
            )
            .unwrap();
        assert_eq!(
            store.items(x.id, CatalogKind::Prompt).unwrap().len(),
            1,
            "duplicates collapse"
        );
        store.remove_server(x.id, "test").unwrap();
        assert!(store.tools(x.id).unwrap().is_empty());
        assert!(store.items(x.id, CatalogKind::Prompt).unwrap().is_empty());
        assert_eq!(
            store.wire_name_owner("x__y__z").unwrap(),
            None,
            "removal frees the alias"
        );
    }
}
