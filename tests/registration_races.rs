//! Two registrations of one name racing each other end in exactly
//! one 201 and one 409, and one stored record.

mod common;

use common::{Daemon, http, stdio_server};
use reqwest::StatusCode;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_registrations_of_one_name_yield_one_201_and_one_409() {
    let d = Daemon::start();
    let url = d.api("/api/v1/aggregator/servers");
    for round in 0..25 {
        let name = format!("race-{round}");
        let body = stdio_server(&name);
        let (a, b) = tokio::join!(
            http().post(&url).json(&body).send(),
            http().post(&url).json(&body).send()
        );
        let mut statuses = [a.unwrap().status(), b.unwrap().status()];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::CREATED, StatusCode::CONFLICT],
            "round {round}"
        );
    }
    let list: Vec<Value> = http().get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(list.len(), 25, "one record per name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_racers_on_one_name_leave_exactly_one_winner() {
    let d = Daemon::start();
    let url = d.api("/api/v1/aggregator/servers");
    let body = stdio_server("popular");
    let requests = (0..16).map(|_| {
        let (url, body) = (url.clone(), body.clone());
        tokio::spawn(async move { http().post(&url).json(&body).send().await.unwrap().status() })
    });
    let mut created = 0;
    let mut conflicts = 0;
    for request in requests {
        match request.await.unwrap() {
            StatusCode::CREATED => created += 1,
            StatusCode::CONFLICT => conflicts += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((created, conflicts), (1, 15));
}
