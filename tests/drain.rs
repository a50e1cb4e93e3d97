//! Disconnect with calls in flight, driven through the library
//! against a real fixture process: a plain disconnect lets the call finish,
//! a forced one cuts it off with a clear error.

#![cfg(feature = "fixture")]

use mcp_aggregator::catalog::Catalog;
use mcp_aggregator::model::wire_name::WireNameRules;
use mcp_aggregator::model::{ServerSource, ServerStatus, Transport};
use mcp_aggregator::registry::{Registry, ServerSpec};
use mcp_aggregator::sessions::{RpcError, SessionManager, SessionSettings};
use mcp_aggregator::store::Store;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");

/// The store, registry and session manager of a data dir, in this process.
fn sessions_on(dir: &std::path::Path) -> (Arc<Store>, Registry, SessionManager) {
    let store = Arc::new(Store::open(dir).unwrap());
    let registry = Registry::new(Arc::clone(&store));
    let catalog = Catalog::new(Arc::clone(&store), WireNameRules::default());
    let manager = SessionManager::new(registry.clone(), catalog, SessionSettings::default());
    (store, registry, manager)
}

async fn connected(
    manager: &SessionManager,
    registry: &Registry,
    name: &str,
) -> mcp_aggregator::model::ServerId {
    let spec = ServerSpec {
        name: name.to_owned(),
        description: None,
        transport: Transport::Stdio {
            command: FIXTURE.to_owned(),
            args: vec![],
            env: Default::default(),
            cwd: None,
        },
        health_check_url: None,
        health_check_interval_secs: None,
        auto_connect: false,
        priority: 0,
        source: ServerSource::Api,
        oauth: None,
        trust: Default::default(),
    };
    let id = registry.register(spec, "test").await.unwrap().id;
    manager.connect(id).await.unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    while manager.session(id).is_none() {
        assert!(Instant::now() < end, "{name} did not connect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_waits_for_calls_and_force_cuts_them_off() {
    let temp = tempfile::tempdir().unwrap();
    let (store, registry, manager) = sessions_on(temp.path());
    let id = connected(&manager, &registry, "slow").await;

    // A call of 400 ms is running when the disconnect comes: it completes.
    let session = manager.session(id).unwrap();
    let call = tokio::spawn(async move {
        session
            .request(
                "tools/call",
                Some(json!({"name": "sleep", "arguments": {"ms": 400}})),
            )
            .await
    });
    wait_in_flight(&manager, id).await;
    let cut_off = manager.disconnect(id, false).await.unwrap();
    assert_eq!(cut_off, 0);
    let result = call
        .await
        .unwrap()
        .expect("the call finished during the drain");
    assert_eq!(result["content"][0]["text"], "slept 400 ms");
    assert_eq!(
        registry.get("slow").await.unwrap().status,
        ServerStatus::Disconnected
    );
    assert!(manager.session(id).is_none());

    // Reconnect; a 30 s call is cut off by a forced disconnect.
    manager.connect(id).await.unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    while manager.session(id).is_none() {
        assert!(Instant::now() < end);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let session = manager.session(id).unwrap();
    let call = tokio::spawn(async move {
        session
            .request(
                "tools/call",
                Some(json!({"name": "sleep", "arguments": {"ms": 30000}})),
            )
            .await
    });
    wait_in_flight(&manager, id).await;
    let cut_off = manager.disconnect(id, true).await.unwrap();
    assert_eq!(cut_off, 1);
    let error = call.await.unwrap().expect_err("the call was cut off");
    assert!(matches!(error, RpcError::Closed(_)), "{error}");
    assert_eq!(
        registry.get("slow").await.unwrap().status,
        ServerStatus::Disconnected
    );
    // The tools stay stored while disconnected.
    assert_eq!(store.tools(id).unwrap().len(), 7 + 3);
    manager.shutdown(Duration::from_secs(3)).await;
}

async fn wait_in_flight(manager: &SessionManager, id: mcp_aggregator::model::ServerId) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if manager.session(id).is_some_and(|s| s.in_flight() > 0) {
            return;
        }
        assert!(Instant::now() < end, "the call never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_fails_and_the_session_goes_on() {
    let temp = tempfile::tempdir().unwrap();
    let (_store, registry, manager) = sessions_on(temp.path());
    let id = connected(&manager, &registry, "slow").await;
    let session = manager.session(id).unwrap();
    let error = session
        .request_with_timeout(
            "tools/call",
            Some(json!({"name": "sleep", "arguments": {"ms": 30000}})),
            Duration::from_millis(300),
        )
        .await
        .expect_err("no answer within the timeout");
    assert!(
        matches!(error, RpcError::Timeout(t) if t == Duration::from_millis(300)),
        "{error}"
    );
    assert_eq!(session.in_flight(), 0, "the timed-out request is forgotten");
    // The session is still usable.
    let answer = session
        .request(
            "tools/call",
            Some(json!({"name": "echo", "arguments": {"after": "timeout"}})),
        )
        .await
        .unwrap();
    assert_eq!(answer["content"][0]["text"], r#"{"after":"timeout"}"#);
    manager.shutdown(Duration::from_secs(3)).await;
}
