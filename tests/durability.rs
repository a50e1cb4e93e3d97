//! Acknowledged writes survive `kill -9`: a daemon registers servers as fast
//! as clients send them, is SIGKILLed mid-stream, and the reopened store
//! holds every registration that was answered 201, in a consistent state.

mod common;

use common::{Daemon, http, stdio_server};
use mcp_aggregator::store::Store;
use reqwest::StatusCode;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_registrations_survive_sigkill() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut daemon = Daemon::start_in(&data_dir, &[]);
    let url = daemon.api("/api/v1/aggregator/servers");
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));

    // Four writers, each bounded to 2,000 registrations.
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let (url, acknowledged) = (url.clone(), Arc::clone(&acknowledged));
            tokio::spawn(async move {
                let client = http();
                for i in 0..2000 {
                    let name = format!("w{writer}-s{i}");
                    match client.post(&url).json(&stdio_server(&name)).send().await {
                        Ok(response) if response.status() == StatusCode::CREATED => {
                            acknowledged.lock().unwrap().insert(name);
                        }
                        Ok(response) => panic!("unexpected {}", response.status()),
                        Err(_) => return, // the daemon is gone
                    }
                }
            })
        })
        .collect();

    // Kill once a good number of writes were acknowledged (bounded wait).
    let enough = common::wait_for(Duration::from_secs(60), || {
        (acknowledged.lock().unwrap().len() >= 200).then_some(())
    });
    assert!(
        enough.is_some(),
        "the daemon acknowledged too few registrations"
    );
    daemon.kill9();
    for writer in writers {
        writer.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();

    let store = Store::open(&data_dir).expect("the store reopens after SIGKILL");
    let stored: BTreeSet<String> = store
        .list_servers()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    let missing: Vec<_> = acknowledged.difference(&stored).collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    // Consistency: every listed server resolves by name and by id, once.
    for name in &stored {
        let by_name = store
            .get_server_by_name(name)
            .unwrap()
            .expect("name index entry");
        let by_id = store.get_server(by_name.id).unwrap().expect("record");
        assert_eq!(&by_id.name, name);
        assert_eq!(
            by_id.transport.secrets()["API_KEY"],
            "k-secret-123",
            "secrets decrypt after the crash"
        );
    }
    let audited = store
        .audit(usize::MAX, None, &Default::default())
        .unwrap()
        .iter()
        .filter(|e| e.action == "register" && e.result == "ok")
        .count();
    assert_eq!(
        audited,
        stored.len(),
        "one audit entry per stored registration"
    );
}
