//! The tables on a real PostgreSQL (started by `TestCluster`): what the
//! store's rules rely on — byte order, snapshots, one writer at a time,
//! announced commits, migrations once — checked against the engine.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::test_cluster::TestCluster;
use super::*;

fn connect(cluster: &TestCluster, origin: &str) -> PgTables {
    let target = PgTarget::with_password_from(&cluster.url(), None, None).unwrap();
    PgTables::connect(target, origin).unwrap()
}

fn put(tables: &PgTables, table: &str, entries: &[(&[u8], &[u8])]) {
    let mut txn = tables.begin_write().unwrap();
    for (key, value) in entries {
        txn.insert(table, key, value).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn a_password_in_the_url_is_refused_and_one_from_a_file_is_used() {
    let err = PgTarget::with_password_from("postgresql://app:hunter2@db.internal/agg", None, None)
        .unwrap_err();
    assert!(matches!(err, PgError::PasswordInUrl), "{err}");
    assert!(!err.to_string().contains("hunter2"));
    assert!(matches!(
        PgTarget::with_password_from("mysql://x", None, None),
        Err(PgError::BadUrl(_))
    ));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, "s3cret\nignored\n").unwrap();
    let target = PgTarget::with_password_from(
        "postgresql://app@db.internal/agg",
        Some(&file),
        Some("env".into()),
    )
    .unwrap();
    assert_eq!(target.config.get_password(), Some(&b"s3cret"[..]));
    assert!(!format!("{target:?}").contains("s3cret"));
    let target =
        PgTarget::with_password_from("postgresql://app@db.internal/agg", None, Some("env".into()))
            .unwrap();
    assert_eq!(target.config.get_password(), Some(&b"env"[..]));
    let missing = PgTarget::with_password_from(
        "postgresql://app@db.internal/agg",
        Some(&dir.path().join("absent")),
        None,
    )
    .unwrap_err();
    assert!(matches!(missing, PgError::PasswordFile { .. }), "{missing}");
}

#[test]
fn replicas_starting_together_migrate_once_and_a_newer_schema_is_refused() {
    let Some(cluster) = TestCluster::start_or_skip("migrations") else {
        return;
    };
    let url = cluster.url();
    let starters: Vec<_> = (0..4)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let target = PgTarget::with_password_from(&url, None, None).unwrap();
                PgTables::connect(target, &format!("replica-{i}")).map(|t| t.schema_version())
            })
        })
        .collect();
    for starter in starters {
        assert_eq!(starter.join().unwrap().unwrap().unwrap(), PG_SCHEMA_VERSION);
    }
    let mut client = postgres::Client::connect(&url, NoTls).unwrap();
    let applied: Vec<i32> = client
        .query(
            "SELECT version FROM mcp_aggregator_schema ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(applied, (1..=PG_SCHEMA_VERSION).collect::<Vec<_>>());

    client
        .execute(
            "INSERT INTO mcp_aggregator_schema (version) VALUES ($1)",
            &[&(PG_SCHEMA_VERSION + 1)],
        )
        .unwrap();
    let target = PgTarget::with_password_from(&url, None, None).unwrap();
    let err = PgTables::connect(target, "old-build").unwrap_err();
    assert!(
        matches!(err, PgError::NewerSchema { found } if found == PG_SCHEMA_VERSION + 1),
        "{err}"
    );
}

#[test]
fn ranges_come_back_in_byte_order_within_their_table() {
    let Some(cluster) = TestCluster::start_or_skip("ranges") else {
        return;
    };
    let tables = connect(&cluster, "a");
    // Big-endian numbers and a tuple key with a string after a fixed-width
    // prefix: the shapes the store's keys take.
    let keys: Vec<Vec<u8>> = [0u64, 1, 255, 256, 65_536, u64::MAX]
        .iter()
        .map(|n| n.to_be_bytes().to_vec())
        .collect();
    let mut txn = tables.begin_write().unwrap();
    for key in keys.iter().rev() {
        txn.insert("numbers", key, b"n").unwrap();
    }
    txn.insert("other", &keys[0], b"elsewhere").unwrap();
    for name in ["b", "a", "ab", "\u{e9}", "Z"] {
        let mut key = 7u128.to_be_bytes().to_vec();
        key.extend_from_slice(name.as_bytes());
        txn.insert("tools", &key, name.as_bytes()).unwrap();
    }
    txn.commit().unwrap();

    let mut read = tables.begin_read().unwrap();
    let all = read
        .range(
            "numbers",
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            None,
        )
        .unwrap();
    assert_eq!(all.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), keys);
    let names: Vec<String> = read
        .range(
            "tools",
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            None,
        )
        .unwrap()
        .into_iter()
        .map(|(_, v)| String::from_utf8(v).unwrap())
        .collect();
    let mut sorted = vec!["b", "a", "ab", "\u{e9}", "Z"];
    sorted.sort();
    assert_eq!(names, sorted, "string keys in Rust's (byte) order");

    let middle = read
        .range(
            "numbers",
            Bound::Excluded(&keys[1]),
            Bound::Included(&keys[4]),
            Order::Descending,
            Some(2),
        )
        .unwrap();
    assert_eq!(
        middle.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![keys[4].clone(), keys[3].clone()]
    );
    assert_eq!(read.len("numbers").unwrap(), 6);
    assert_eq!(read.len("other").unwrap(), 1);
    assert_eq!(read.len("absent").unwrap(), 0);
    assert_eq!(
        read.get("other", &keys[0]).unwrap().as_deref(),
        Some(&b"elsewhere"[..])
    );
    read.commit().unwrap();

    let mut txn = tables.begin_write().unwrap();
    assert_eq!(
        txn.insert("other", &keys[0], b"new").unwrap().as_deref(),
        Some(&b"elsewhere"[..])
    );
    assert_eq!(
        txn.remove("other", &keys[0]).unwrap().as_deref(),
        Some(&b"new"[..])
    );
    assert_eq!(txn.remove("other", &keys[0]).unwrap(), None);
    assert_eq!(
        txn.remove_range(
            "numbers",
            Bound::Included(&keys[2]),
            Bound::Excluded(&keys[5])
        )
        .unwrap(),
        3
    );
    txn.commit().unwrap();
    let mut read = tables.begin_read().unwrap();
    assert_eq!(read.len("numbers").unwrap(), 3);
    assert_eq!(read.len("other").unwrap(), 0);
}

#[test]
fn a_read_keeps_its_snapshot_and_an_uncommitted_write_leaves_nothing() {
    let Some(cluster) = TestCluster::start_or_skip("snapshots") else {
        return;
    };
    let tables = connect(&cluster, "a");
    put(&tables, "t", &[(b"k", b"1")]);
    let mut before = tables.begin_read().unwrap();
    assert_eq!(before.get("t", b"k").unwrap().as_deref(), Some(&b"1"[..]));
    put(&tables, "t", &[(b"k", b"2"), (b"j", b"new")]);
    assert_eq!(before.get("t", b"k").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(before.get("t", b"j").unwrap(), None);
    drop(before);

    {
        let mut abandoned = tables.begin_write().unwrap();
        abandoned.insert("t", b"k", b"3").unwrap();
        abandoned.insert("t", b"lost", b"x").unwrap();
    }
    let mut after = tables.begin_read().unwrap();
    assert_eq!(after.get("t", b"k").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(after.get("t", b"lost").unwrap(), None);
    // A read cannot write: the engine refuses it.
    assert!(after.insert("t", b"k", b"4").is_err());
}

#[test]
fn writers_on_several_replicas_take_turns() {
    let Some(cluster) = TestCluster::start_or_skip("writers") else {
        return;
    };
    let replicas: Vec<Arc<PgTables>> = (0..3)
        .map(|i| Arc::new(connect(&cluster, &format!("r{i}"))))
        .collect();
    put(&replicas[0], "meta", &[(b"counter", &0u64.to_be_bytes())]);
    const EACH: u64 = 40;
    let writers: Vec<_> = replicas
        .iter()
        .map(|tables| {
            let tables = Arc::clone(tables);
            std::thread::spawn(move || {
                for _ in 0..EACH {
                    let mut txn = tables.begin_write().unwrap();
                    let bytes = txn.get("meta", b"counter").unwrap().unwrap();
                    let n = u64::from_be_bytes(bytes.try_into().unwrap());
                    txn.insert("meta", b"counter", &(n + 1).to_be_bytes())
                        .unwrap();
                    txn.commit().unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let mut read = replicas[2].begin_read().unwrap();
    let bytes = read.get("meta", b"counter").unwrap().unwrap();
    assert_eq!(
        u64::from_be_bytes(bytes.try_into().unwrap()),
        3 * EACH,
        "no increment lost"
    );
}

#[test]
fn every_commit_is_announced_with_its_origin_and_tables() {
    let Some(cluster) = TestCluster::start_or_skip("announcements") else {
        return;
    };
    let writer = connect(&cluster, "replica-a");
    let reader = connect(&cluster, "replica-b");
    let mut changes = reader.listen().unwrap();

    {
        let mut rolled_back = writer.begin_write().unwrap();
        rolled_back.insert("servers", b"x", b"y").unwrap();
    }
    let mut read = writer.begin_read().unwrap();
    read.get("servers", b"x").unwrap();
    read.commit().unwrap();
    let mut audit_only = writer.begin_write().unwrap();
    audit_only.insert("audit_log", b"1", b"a call").unwrap();
    audit_only.insert("meta", b"audit_seq", b"1").unwrap();
    audit_only.commit().unwrap();
    let mut txn = writer.begin_write().unwrap();
    txn.insert("servers", b"1", b"one").unwrap();
    txn.insert("audit", b"1", b"registered").unwrap();
    txn.insert("servers", b"2", b"two").unwrap();
    txn.commit().unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    let change = loop {
        if let Some(change) = changes.next_within(Duration::from_millis(200)).unwrap() {
            break change;
        }
        assert!(Instant::now() < deadline, "no change announced");
    };
    assert_eq!(
        change,
        Change {
            origin: "replica-a".into(),
            tables: vec!["audit".into(), "servers".into()],
        },
        "the first announcement is the committed write: the rolled-back one, the read and the calls' audit sent none"
    );
    assert_eq!(
        changes.next_within(Duration::from_millis(100)).unwrap(),
        None
    );
}

#[test]
fn an_outage_is_an_error_that_says_so_and_the_tables_work_once_it_is_over() {
    let Some(cluster) = TestCluster::start_or_skip("outage") else {
        return;
    };
    let tables = connect(&cluster, "a");
    put(&tables, "t", &[(b"k", b"kept")]);
    let mut changes = tables.listen().unwrap();
    cluster.stop().unwrap();

    let err = tables.begin_write().err().expect("no database, no write");
    assert!(err.is_unavailable(), "{err}");
    let lost = (0..50)
        .find_map(|_| changes.next_within(Duration::from_millis(100)).err())
        .expect("the listener notices the lost connection");
    assert!(lost.is_unavailable(), "{lost}");

    cluster.start_again().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let value = loop {
        match tables.begin_read().and_then(|mut read| read.get("t", b"k")) {
            Ok(value) => break value,
            Err(err) => {
                assert!(err.is_unavailable(), "{err}");
                assert!(
                    Instant::now() < deadline,
                    "the tables did not come back: {err}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert_eq!(value.as_deref(), Some(&b"kept"[..]));
    put(&tables, "t", &[(b"k", b"after")]);
}

#[test]
fn writers_waiting_their_turn_leave_connections_to_the_reads() {
    let Some(cluster) = TestCluster::start_or_skip("writers and reads") else {
        return;
    };
    let tables = Arc::new(connect(&cluster, "a"));
    put(&tables, "t", &[(b"k", b"v")]);
    let holding = tables.begin_write().unwrap();
    // More writers than the pool has connections, all waiting for the one
    // that holds the turn.
    let (started, ready) = std::sync::mpsc::channel();
    let writers: Vec<_> = (0..2 * POOL_SIZE)
        .map(|i| {
            let tables = Arc::clone(&tables);
            let started = started.clone();
            std::thread::spawn(move || {
                started.send(()).unwrap();
                let mut txn = tables.begin_write().unwrap();
                txn.insert("t", format!("w{i}").as_bytes(), b"x").unwrap();
                txn.commit().unwrap();
            })
        })
        .collect();
    for _ in 0..2 * POOL_SIZE {
        ready.recv().unwrap();
    }
    let mut read = tables
        .begin_read()
        .expect("a read is served while writers wait");
    assert_eq!(read.get("t", b"k").unwrap().as_deref(), Some(&b"v"[..]));
    drop(read);
    holding.commit().unwrap();
    for writer in writers {
        writer.join().unwrap();
    }
    let mut read = tables.begin_read().unwrap();
    assert_eq!(read.len("t").unwrap(), 1 + 2 * u64::from(POOL_SIZE));
}
