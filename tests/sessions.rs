//! Sessions against real servers over real transports: the npm reference
//! server over stdio, legacy SSE and Streamable HTTP, and our rmcp fixture
//! (pagination, 1,000+ tools, dotted and long names, list_changed, stalls,
//! crashes, grandchildren).

#![cfg(feature = "fixture")]

mod common;

use common::{
    Daemon, Everything, everything_js, free_port, http, process_alive, read_pid, register, signal,
    wait_for, wait_status,
};
use mcp_aggregator::model::CatalogKind;
use mcp_aggregator::store::Store;
use serde_json::{Value, json};
use std::time::Duration;

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const UP: Duration = Duration::from_secs(30);
/// Tools of a fixture started with no flags.
const DEFAULT: usize = common::FIXED + 3;
/// Tools of the big fixture: fixed + 1,000 + dotted + long name.
const BIG: usize = common::FIXED + 1000 + 2;

fn fixture(name: &str, args: &[&str]) -> Value {
    json!({
        "name": name,
        "transport_type": "STDIO",
        "connection_config": {"command": FIXTURE, "args": args},
    })
}

async fn tools(d: &Daemon, server: &str) -> Vec<Value> {
    common::get_json(&d.api(&format!("/api/v1/aggregator/servers/{server}/tools"))).await
}

async fn history_events(d: &Daemon, server: &str) -> Vec<String> {
    let history: Vec<Value> = common::get_json(&d.api(&format!(
        "/api/v1/aggregator/servers/{server}/history?limit=1000"
    )))
    .await;
    history
        .iter()
        .map(|h| h["event_type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_sse_and_streamable_http() {
    let sse = Everything::start("sse", free_port());
    let streamable = Everything::start("streamableHttp", free_port());
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut d = Daemon::start_in(&data_dir, &[]);
    register(
        &d,
        json!({"name": "ev-stdio", "transport_type": "STDIO",
        "connection_config": {"command": "node", "args": [everything_js(), "stdio"]}}),
    )
    .await;
    register(
        &d,
        json!({"name": "ev-sse", "transport_type": "SSE",
        "connection_config": {"url": format!("http://127.0.0.1:{}/sse", sse.port)}}),
    )
    .await;
    register(
        &d,
        json!({"name": "ev-http", "transport_type": "HTTP",
        "connection_config": {"base_url": format!("http://127.0.0.1:{}/mcp", streamable.port)}}),
    )
    .await;
    let mut counts = Vec::new();
    for name in ["ev-stdio", "ev-sse", "ev-http"] {
        let server = wait_status(&d, name, "CONNECTED", UP).await;
        assert!(server["connected_at"].is_string(), "{server}");
        let listed = wait_for_tools(&d, name, 5).await;
        let ids: Vec<&str> = listed.iter().map(|t| t["id"].as_str().unwrap()).collect();
        assert!(
            ids.contains(&format!("{name}.echo").as_str()),
            "{name}: {ids:?}"
        );
        let echo = listed
            .iter()
            .find(|t| t["original_name"] == "echo")
            .unwrap();
        assert_eq!(echo["wire_name"], format!("{}__echo", name));
        assert_eq!(echo["source_server"], name);
        assert_eq!(echo["is_external"], true);
        assert_eq!(echo["is_classified"], false);
        assert_eq!(echo["input_schema"]["type"], "object");
        counts.push(listed.len());
    }
    assert!(
        counts.windows(2).all(|w| w[0] == w[1]),
        "the same server over three transports: {counts:?}"
    );
    let state: Value = common::get_json(&d.api("/api/v1/aggregator/state")).await;
    assert_eq!(state["connected_servers"], 3);
    assert_eq!(state["total_tools"], counts.iter().sum::<usize>());
    assert!(state["last_sync"].is_string());

    assert!(d.terminate(Duration::from_secs(5)).is_some());
    // Resources, templates and prompts were stored too.
    let store = Store::open(&data_dir).unwrap();
    for server in store.list_servers().unwrap() {
        let resources = store.items(server.id, CatalogKind::Resource).unwrap();
        let templates = store
            .items(server.id, CatalogKind::ResourceTemplate)
            .unwrap();
        let prompts = store.items(server.id, CatalogKind::Prompt).unwrap();
        assert!(!resources.is_empty(), "{}: no resources", server.name);
        assert!(
            !templates.is_empty(),
            "{}: no resource templates",
            server.name
        );
        assert!(!prompts.is_empty(), "{}: no prompts", server.name);
        assert!(resources.iter().all(|r| r["uri"].is_string()));
        assert!(prompts.iter().all(|p| p["name"].is_string()));
    }
}

async fn wait_for_tools(d: &Daemon, server: &str, at_least: usize) -> Vec<Value> {
    let end = std::time::Instant::now() + UP;
    loop {
        let listed = tools(d, server).await;
        if listed.len() >= at_least {
            return listed;
        }
        assert!(
            std::time::Instant::now() < end,
            "{server} listed only {} tools",
            listed.len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_paginated_tools_with_dotted_and_long_names() {
    let d = Daemon::start();
    register(
        &d,
        fixture(
            "big",
            &[
                "--tools",
                "1000",
                "--page-size",
                "50",
                "--dotted",
                "--long-name",
            ],
        ),
    )
    .await;
    wait_status(&d, "big", "CONNECTED", UP).await;
    let listed = wait_for_tools(&d, "big", BIG).await;
    assert_eq!(
        listed.len(),
        BIG,
        "every page was followed (fixed + 1000 + dotted + long)"
    );
    let server: Value = common::get_json(&d.api("/api/v1/aggregator/servers/big")).await;
    assert_eq!(server["tool_count"], BIG);

    let dotted = listed
        .iter()
        .find(|t| t["original_name"] == "api.v2.create")
        .expect("dotted tool");
    assert_eq!(
        dotted["id"], "big.api.v2.create",
        "only the first dot separates"
    );
    assert_eq!(dotted["wire_name"], "big__api_v2_create");

    let long = listed
        .iter()
        .find(|t| t["original_name"].as_str().unwrap().len() == 200)
        .expect("long tool");
    let wire = long["wire_name"].as_str().unwrap();
    assert!(wire.len() <= 48 && wire.starts_with("big__nnnn"), "{wire}");
    let mut wire_names: Vec<&str> = listed
        .iter()
        .filter_map(|t| t["wire_name"].as_str())
        .collect();
    assert!(wire_names.iter().all(|w| {
        w.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }));
    wire_names.sort();
    wire_names.dedup();
    assert_eq!(wire_names.len(), BIG, "wire names are unique");
}

/// A server never connected is probed with `server/discover`; a 2025 one is
/// then asked to `initialize` in the same process. The revision it spoke is
/// kept in the store, so after a restart a 2025 server goes straight to
/// `initialize` and a server of both eras to 2026-07-28.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_is_spoken_to_in_its_era_and_the_era_is_remembered() {
    let temp = tempfile::tempdir().unwrap();
    let old_log = temp.path().join("old.log");
    let both_log = temp.path().join("both.log");
    let old_log_arg = old_log.to_str().unwrap().to_owned();
    let both_log_arg = both_log.to_str().unwrap().to_owned();
    // The handshakes the fixture saw (it logs its subscriptions too).
    let read = |path: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|line| *line != "subscriptions/listen")
            .map(str::to_owned)
            .collect()
    };
    let data = temp.path().join("data");
    {
        let d = Daemon::start_in(&data, &[]);
        register(
            &d,
            fixture("old", &["--legacy-only", "--handshake-log", &old_log_arg]),
        )
        .await;
        register(&d, fixture("both", &["--handshake-log", &both_log_arg])).await;
        for (name, revision) in [("old", "2025-06-18"), ("both", "2026-07-28")] {
            let server = wait_status(&d, name, "CONNECTED", UP).await;
            assert_eq!(server["protocol_version"], revision, "{server}");
        }
        assert_eq!(read(&old_log), ["server/discover", "initialize"]);
        assert_eq!(read(&both_log), ["server/discover"]);
        // Both eras' tools are listed and called alike.
        wait_for_tools(&d, "old", DEFAULT).await;
        wait_for_tools(&d, "both", DEFAULT).await;
        for name in ["old.echo", "both.echo"] {
            let answer = common::post_json(
                &d.api("/api/v1/tools/call"),
                &json!({"name": name, "arguments": {"n": 1}}),
            )
            .await;
            assert_eq!(answer["content"][0]["text"], r#"{"n":1}"#, "{answer}");
        }
    }
    std::fs::remove_file(&old_log).unwrap();
    std::fs::remove_file(&both_log).unwrap();
    let d = Daemon::start_in(&data, &[]);
    for (name, revision) in [("old", "2025-06-18"), ("both", "2026-07-28")] {
        let server = wait_status(&d, name, "CONNECTED", UP).await;
        assert_eq!(server["protocol_version"], revision, "{server}");
    }
    assert_eq!(read(&old_log), ["initialize"]);
    assert_eq!(read(&both_log), ["server/discover"]);
}

/// A 2026-07-28 server that ends the subscription bringing its list
/// changes is subscribed to again, so a tool it adds afterwards is still
/// discovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_the_server_ends_is_opened_again() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("handshake.log");
    let log_arg = log.to_str().unwrap().to_owned();
    let d = Daemon::start();
    register(
        &d,
        fixture(
            "ending",
            &["--handshake-log", &log_arg, "--end-listen-after-ms", "100"],
        ),
    )
    .await;
    wait_status(&d, "ending", "CONNECTED", UP).await;
    let listens = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == "subscriptions/listen")
            .count()
    };
    common::wait_for(UP, || (listens() >= 2).then_some(()))
        .expect("the subscription the server ended was opened again");
    let added = common::post_json(
        &d.api("/api/v1/tools/call"),
        &json!({"name": "ending.add_tool", "arguments": {"name": "after_the_end"}}),
    )
    .await;
    assert_eq!(added["isError"], false, "{added}");
    let listed = wait_for_tools(&d, "ending", DEFAULT + 1).await;
    assert!(
        listed.iter().any(|t| t["original_name"] == "after_the_end"),
        "the tool added after the first subscription ended was discovered"
    );
}

/// A 2026-07-28 server whose subscription stream is cut without an answer
/// (a proxy's idle timeout) is subscribed to again, later each time it is
/// cut at once; before, list changes silently stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_stream_cut_without_an_answer_is_opened_again() {
    let d = Daemon::start();
    let (_server, port) = common::hostile_listening(&["--modern"], "--http");
    register(&d, common::http_server("cut", port)).await;
    let connected = wait_status(&d, "cut", "CONNECTED", UP).await;
    assert_eq!(connected["protocol_version"], "2026-07-28", "{connected}");
    let end = std::time::Instant::now() + UP;
    loop {
        let answer = common::post_json(
            &d.api("/api/v1/tools/call"),
            &json!({"name": "cut.listens", "arguments": {}}),
        )
        .await;
        let listens: u32 = answer["content"][0]["text"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if listens >= 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "subscribed {listens} times: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A 2026-07-28 server that cannot announce list changes but says how long
/// its lists stay fresh (`ttlMs`) is listed again when that time is up: a
/// tool it adds silently is discovered. (The TypeScript SDK v2 backend, told
/// to declare no `listChanged` and a 1 s lifetime.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_announce_changes_is_listed_again_when_its_lists_expire() {
    let (conformance, node) = (common::conformance_dir(), common::node22());
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "silent", "transport_type": "STDIO", "connection_config": {
            "command": node,
            "args": [conformance.join("backend2026.mjs"), "--ttl-ms", "1000", "--no-list-changed"]
        }}),
    )
    .await;
    let server = wait_status(&d, "silent", "CONNECTED", UP).await;
    assert_eq!(server["protocol_version"], "2026-07-28", "{server}");
    wait_for_tools(&d, "silent", 1).await;
    let added = common::post_json(
        &d.api("/api/v1/tools/call"),
        &json!({"name": "silent.test_trigger_tool_change", "arguments": {}}),
    )
    .await;
    assert_eq!(added["content"][0]["text"], "test_added_tool", "{added}");
    let end = std::time::Instant::now() + UP;
    loop {
        let listed = tools(&d, "silent").await;
        if listed
            .iter()
            .any(|t| t["original_name"] == "test_added_tool")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "the tool added silently was never discovered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_triggers_rediscovery() {
    let d = Daemon::start();
    register(&d, fixture("changing", &["--add-tool-after-ms", "300"])).await;
    wait_status(&d, "changing", "CONNECTED", UP).await;
    let listed = wait_for_tools(&d, "changing", DEFAULT + 1).await;
    assert!(
        listed.iter().any(|t| t["original_name"] == "late_tool"),
        "the tool added later was discovered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_stdio_server_reconnects_and_the_others_never_notice() {
    let temp = tempfile::tempdir().unwrap();
    let pid_a = temp.path().join("a.pid");
    let d = Daemon::start();
    register(
        &d,
        fixture("victim", &["--pid-file", pid_a.to_str().unwrap()]),
    )
    .await;
    register(&d, fixture("bystander", &[])).await;
    wait_status(&d, "victim", "CONNECTED", UP).await;
    wait_status(&d, "bystander", "CONNECTED", UP).await;
    wait_for_tools(&d, "victim", DEFAULT).await;

    let first = read_pid(&pid_a);
    std::fs::remove_file(&pid_a).unwrap();
    signal(first as i32, libc::SIGKILL);
    // It comes back by itself, under a new process, with its tools.
    let second = read_pid(&pid_a);
    assert_ne!(first, second);
    let server = wait_status(&d, "victim", "CONNECTED", UP).await;
    assert!(server["error_message"].is_null(), "{server}");
    let events = history_events(&d, "victim").await;
    let tail: Vec<&str> = events
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(tail, ["ERROR", "CONNECTING", "CONNECTED"], "{events:?}");
    assert_eq!(tools(&d, "victim").await.len(), DEFAULT);
    assert!(!process_alive(first), "the killed server was reaped");

    let bystander = history_events(&d, "bystander").await;
    assert_eq!(
        bystander,
        ["REGISTERED", "CONNECTING", "CONNECTED"],
        "the other server never noticed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_restarted_on_its_port_is_recovered() {
    let port = free_port();
    let mut server = Everything::start("streamableHttp", port);
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "remote", "transport_type": "HTTP",
        "connection_config": {"base_url": format!("http://127.0.0.1:{port}/mcp")}}),
    )
    .await;
    wait_status(&d, "remote", "CONNECTED", UP).await;
    server.stop();
    let down = wait_status(&d, "remote", "ERROR", UP).await;
    assert!(down["error_message"].is_string(), "{down}");
    let _restarted = Everything::start("streamableHttp", port);
    wait_status(&d, "remote", "CONNECTED", Duration::from_secs(60)).await;
    assert!(wait_for_tools(&d, "remote", 5).await.len() >= 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_servers_connect_while_one_never_answers_initialize() {
    let d = Daemon::start();
    register(&d, fixture("staller", &["--stall"])).await;
    for i in 0..20 {
        register(&d, fixture(&format!("s{i:02}"), &["--tools", "5"])).await;
    }
    for i in 0..20 {
        wait_status(&d, &format!("s{i:02}"), "CONNECTED", UP).await;
    }
    // All twenty are up while the staller is still waiting for its answer.
    let staller: Value = common::get_json(&d.api("/api/v1/aggregator/servers/staller")).await;
    assert_eq!(staller["status"], "CONNECTING", "{staller}");
    let state: Value = common::get_json(&d.api("/api/v1/aggregator/state")).await;
    assert_eq!(state["connected_servers"], 20);
    // A clean stop ends the staller too (a SIGKILLed daemon could not: the
    // staller, stuck in its handshake, would outlive the test).
    let mut d = d;
    assert!(
        d.terminate(Duration::from_secs(20)).is_some(),
        "the daemon did not stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_process_survives_shutdown_disconnect_or_removal() {
    let temp = tempfile::tempdir().unwrap();
    let file = |name: &str| temp.path().join(name).to_str().unwrap().to_owned();
    let mut d = Daemon::start();
    register(
        &d,
        fixture(
            "shut",
            &[
                "--pid-file",
                &file("shut.pid"),
                "--spawn-child",
                &file("shut.child"),
            ],
        ),
    )
    .await;
    register(
        &d,
        fixture(
            "disc",
            &[
                "--pid-file",
                &file("disc.pid"),
                "--spawn-child",
                &file("disc.child"),
            ],
        ),
    )
    .await;
    register(
        &d,
        fixture(
            "gone",
            &[
                "--pid-file",
                &file("gone.pid"),
                "--spawn-child",
                &file("gone.child"),
            ],
        ),
    )
    .await;
    for name in ["shut", "disc", "gone"] {
        wait_status(&d, name, "CONNECTED", UP).await;
    }
    let pids = |name: &str| {
        [
            read_pid(temp.path().join(format!("{name}.pid")).as_path()),
            read_pid(temp.path().join(format!("{name}.child")).as_path()),
        ]
    };
    let (shut, disc, gone) = (pids("shut"), pids("disc"), pids("gone"));
    assert!(
        shut.iter()
            .chain(&disc)
            .chain(&gone)
            .all(|p| process_alive(*p))
    );

    // Disconnect: the server and its grandchild end; its tools stay stored.
    let answer = common::post_json(
        &d.api("/api/v1/aggregator/servers/disc/disconnect"),
        &json!({"force": false}),
    )
    .await;
    assert_eq!(
        answer,
        json!({"status": "DISCONNECTED", "pending_requests": 0})
    );
    assert!(
        wait_for(Duration::from_secs(5), || disc
            .iter()
            .all(|p| !process_alive(*p))
            .then_some(()))
        .is_some(),
        "disconnect left {disc:?}"
    );
    assert_eq!(
        tools(&d, "disc").await.len(),
        DEFAULT,
        "tools stay stored while disconnected"
    );

    // Removal: the same, and the tools go too.
    let response = http()
        .delete(d.api("/api/v1/aggregator/servers/gone"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert!(
        wait_for(Duration::from_secs(5), || gone
            .iter()
            .all(|p| !process_alive(*p))
            .then_some(()))
        .is_some(),
        "removal left {gone:?}"
    );

    // Shutdown: everything the aggregator started is gone.
    let status = d
        .terminate(Duration::from_secs(3))
        .expect("the daemon stops within 3 s");
    assert!(status.success());
    assert!(
        wait_for(Duration::from_secs(5), || shut
            .iter()
            .all(|p| !process_alive(*p))
            .then_some(()))
        .is_some(),
        "shutdown left {shut:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_and_disconnect_follow_the_contract() {
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "manual", "transport_type": "STDIO", "auto_connect": false,
        "connection_config": {"command": FIXTURE, "args": []}}),
    )
    .await;
    let url = |action: &str| d.api(&format!("/api/v1/aggregator/servers/manual/{action}"));
    let response = http().post(url("connect")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"status": "CONNECTING", "message": "Connection initiated"})
    );
    wait_status(&d, "manual", "CONNECTED", UP).await;
    let response = http().post(url("connect")).send().await.unwrap();
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["detail"], "Server already connected: manual");

    let response = http().post(url("disconnect")).send().await.unwrap();
    assert_eq!(response.status(), 200, "the body is optional");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "DISCONNECTED");
    // Disconnecting again is harmless; bad bodies are refused.
    assert_eq!(
        http()
            .post(url("disconnect"))
            .json(&json!({"force": true}))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http()
            .post(url("disconnect"))
            .json(&json!({"force": "yes"}))
            .send()
            .await
            .unwrap()
            .status(),
        422
    );
    assert_eq!(
        http()
            .post(d.api("/api/v1/aggregator/servers/nope/connect"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        http()
            .post(d.api("/api/v1/aggregator/servers/nope/disconnect"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    // A server that cannot start ends in ERROR with the reason, and keeps retrying.
    register(
        &d,
        json!({"name": "broken", "transport_type": "STDIO",
        "connection_config": {"command": "/nonexistent/mcp-server"}}),
    )
    .await;
    let broken = wait_status(&d, "broken", "ERROR", UP).await;
    assert!(
        broken["error_message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/mcp-server"),
        "{broken}"
    );
    let end = std::time::Instant::now() + UP;
    loop {
        let events = history_events(&d, "broken").await;
        if events.iter().filter(|e| *e == "ERROR").count() >= 2 {
            assert!(events.contains(&"CONNECTING".to_owned()));
            break;
        }
        assert!(std::time::Instant::now() < end, "no retry: {events:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Disconnect stops the retries.
    let body: Value = http()
        .post(d.api("/api/v1/aggregator/servers/broken/disconnect"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["status"], "DISCONNECTED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_names_are_stable_and_collisions_reject_only_the_colliding_tool() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    // Server `x` offers `y__z`; server `x__y` offers `z`: both want `x__y__z`.
    let first_names;
    {
        let mut d = Daemon::start_in(&data_dir, &[]);
        register(&d, fixture("x", &["--extra-tool", "y__z"])).await;
        wait_status(&d, "x", "CONNECTED", UP).await;
        wait_for_tools(&d, "x", DEFAULT + 1).await;
        register(&d, fixture("x__y", &["--extra-tool", "z"])).await;
        wait_status(&d, "x__y", "CONNECTED", UP).await;
        let loser = wait_for_tools(&d, "x__y", DEFAULT + 1).await;
        let z = loser.iter().find(|t| t["original_name"] == "z").unwrap();
        assert!(z["wire_name"].is_null(), "{z}");
        let reason = z["rejected_reason"].as_str().unwrap();
        assert!(
            reason.contains("x__y__z") && reason.contains("x.y__z"),
            "{reason}"
        );
        assert!(
            loser
                .iter()
                .filter(|t| t["original_name"] != "z")
                .all(|t| t["wire_name"].is_string()),
            "only the colliding tool is rejected"
        );
        let winner = tools(&d, "x").await;
        assert_eq!(
            winner
                .iter()
                .find(|t| t["original_name"] == "y__z")
                .unwrap()["wire_name"],
            "x__y__z"
        );
        first_names = wire_map(&[winner, loser]);
        assert!(d.terminate(Duration::from_secs(5)).is_some());
    }
    // Restart: servers connect in parallel, in whatever order; names stay.
    let d = Daemon::start_in(&data_dir, &[]);
    wait_status(&d, "x", "CONNECTED", UP).await;
    wait_status(&d, "x__y", "CONNECTED", UP).await;
    let again = wire_map(&[tools(&d, "x").await, tools(&d, "x__y").await]);
    assert_eq!(first_names, again);
}

fn wire_map(lists: &[Vec<Value>]) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = lists
        .iter()
        .flatten()
        .map(|t| (t["id"].as_str().unwrap().to_owned(), t["wire_name"].clone()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_connects_lists_tools_and_disconnects() {
    let d = Daemon::start();
    let dir = d.data_dir.clone();
    let run = move |args: Vec<&'static str>| {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || common::cli(&dir, &args))
    };
    register(
        &d,
        json!({"name": "fx", "transport_type": "STDIO", "auto_connect": false,
        "connection_config": {"command": FIXTURE, "args": ["--dotted"]}}),
    )
    .await;
    let (code, stdout, stderr) = run(vec!["servers", "connect", "fx", "--wait"])
        .await
        .unwrap();
    assert_eq!(code, 0, "{stderr}");
    // `--wait` returns once the first listing is stored, not at CONNECTED.
    assert!(
        stdout.contains(&format!("fx: CONNECTED ({} tools)", DEFAULT + 1)),
        "{stdout}"
    );
    let (code, stdout, _) = run(vec!["servers", "list"]).await.unwrap();
    assert_eq!(code, 0);
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(" fx ") && l.contains(&format!(" {} ", DEFAULT + 1))),
        "{stdout}"
    );
    let (code, _, stderr) = run(vec!["servers", "connect", "fx"]).await.unwrap();
    assert_eq!(code, 2);
    assert!(stderr.contains("already connected"), "{stderr}");

    let (code, stdout, _) = run(vec!["tools", "--server", "fx"]).await.unwrap();
    assert_eq!(code, 0);
    assert!(
        stdout.contains("fx.api.v2.create") && stdout.contains("fx__api_v2_create"),
        "{stdout}"
    );
    let (code, stdout, _) = run(vec!["tools", "--json"]).await.unwrap();
    assert_eq!(code, 0);
    let all: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(all.len(), DEFAULT + 1);

    let (code, stdout, stderr) = run(vec!["servers", "disconnect", "fx"]).await.unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("DISCONNECTED"), "{stdout}");
    let (code, _, stderr) = run(vec!["servers", "connect", "nope"]).await.unwrap();
    assert_eq!(code, 2);
    assert!(stderr.contains("Server not found: nope"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_end_in_error_with_a_clear_reason() {
    // A loopback HTTP server that refuses every request with 401.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app =
        axum::Router::new().fallback(|| async { (axum::http::StatusCode::UNAUTHORIZED, "no") });
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let d = Daemon::start();
    register(&d, json!({"name": "locked", "transport_type": "HTTP",
        "connection_config": {"base_url": format!("http://127.0.0.1:{port}/mcp"), "headers": {"Authorization": "Bearer wrong"}}}))
    .await;
    let locked = wait_status(&d, "locked", "ERROR", UP).await;
    let reason = locked["error_message"].as_str().unwrap();
    assert!(
        reason.contains("credentials") && reason.contains("401"),
        "{reason}"
    );
    assert!(
        !reason.contains("wrong"),
        "the token never appears in errors"
    );
    server.abort();
}

/// A stateless Streamable HTTP server (no session id, 404 to GET — how the
/// TypeScript SDK is commonly deployed) stays connected and serves calls;
/// an answer's event stream the server closes early is resumed with
/// `Last-Event-ID`, no sooner than its `retry:` asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_http_server_stays_connected_and_a_closed_stream_is_resumed() {
    let mut server = std::process::Command::new("python3");
    server.arg(common::hostile_py()).arg("--stateless");
    let (_server, port) = common::http_test_server(server);
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "stateless", "transport_type": "HTTP",
        "connection_config": {"base_url": format!("http://127.0.0.1:{port}/mcp")}}),
    )
    .await;
    wait_status(&d, "stateless", "CONNECTED", UP).await;
    wait_for_tools(&d, "stateless", 1).await;
    let (status, body) = common::rest_call(&d, "stateless.echo", json!({"n": 1})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], r#"{"n": 1}"#, "{body}");
    let (status, body) = common::rest_call(&d, "stateless.resumable", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let text = body["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("resumed after ev-"), "{body}");
    // The GET the server refused never counted as a lost session.
    let events = history_events(&d, "stateless").await;
    assert!(
        !events
            .iter()
            .any(|e| e.contains("FAIL") || e.contains("ERROR")),
        "{events:?}"
    );
    let record: Value = common::get_json(&d.api("/api/v1/aggregator/servers/stateless")).await;
    assert_eq!(record["status"], "CONNECTED", "{record}");
}

/// A server that answers a call as newline-delimited JSON frames (as the
/// conformance suite's reference server does on its stateless path): each
/// frame is read as it arrives, so its in-band `elicitation/create` reaches
/// the calling client (a stdio client that declared elicitation) and the
/// client's answer goes back to the server, which only then writes the
/// result — read as a whole body, the call would never end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_inside_a_streamed_json_answer_reaches_the_calling_client() {
    use tokio::io::AsyncWriteExt as _;
    let mut server = std::process::Command::new("python3");
    server.arg(common::hostile_py()).arg("--stateless");
    let (_server, port) = common::http_test_server(server);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"frames": {"type": "http",
            "url": format!("http://127.0.0.1:{port}/mcp")}}})
        .to_string(),
    )
    .unwrap();
    let (_child, mut stdin, mut stdout) = common::spawn_stdio(
        &config,
        &dir.path().join("data"),
        std::process::Stdio::null(),
    );
    let mut send = async |message: Value| {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "t", "version": "0"}}}),
    )
    .await;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    // The config's server is connected in the background: its tool is
    // called once it is listed (on a busy machine, after the handshake).
    let deadline = tokio::time::Instant::now() + UP;
    for n in 100.. {
        send(json!({"jsonrpc": "2.0", "id": n, "method": "tools/list"})).await;
        let listed = loop {
            let line = tokio::time::timeout(UP, stdout.next_line())
                .await
                .expect("the aggregator answers tools/list")
                .unwrap()
                .expect("the aggregator is still there");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == n {
                break message;
            }
        };
        let tools = listed["result"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if tools.iter().any(|t| t["name"] == "frames__ndjson_ask") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "frames__ndjson_ask never listed: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "frames__ndjson_ask", "arguments": {}}}))
    .await;
    let mut asked = false;
    let result = loop {
        let line = tokio::time::timeout(UP, stdout.next_line())
            .await
            .expect("the aggregator goes on talking")
            .unwrap()
            .expect("the aggregator is still there");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["method"] == "elicitation/create" {
            assert_eq!(message["params"]["message"], "Proceed?", "{message}");
            asked = true;
            send(json!({"jsonrpc": "2.0", "id": message["id"],
                "result": {"action": "accept", "content": {"ok": true}}}))
            .await;
        } else if message["id"] == 2 {
            break message;
        }
    };
    assert!(asked, "the client was never asked: {result}");
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        text, r#"answered in band: result {"action": "accept", "content": {"ok": true}}"#,
        "{result}"
    );
}

/// The same streamed in-band request, for a 2026-07-28 client of `/mcp`
/// (which is never sent requests): it gets the question as an
/// input-required result, and its retry with the answer and the sealed
/// state hands the answer to the waiting server, whose result follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_inside_a_streamed_json_answer_reaches_a_2026_client_as_an_input_round() {
    let mut server = std::process::Command::new("python3");
    server.arg(common::hostile_py()).arg("--stateless");
    let (_server, port) = common::http_test_server(server);
    let d = Daemon::start();
    register(
        &d,
        json!({"name": "frames", "transport_type": "HTTP",
        "connection_config": {"base_url": format!("http://127.0.0.1:{port}/mcp")}}),
    )
    .await;
    wait_status(&d, "frames", "CONNECTED", UP).await;
    wait_for_tools(&d, "frames", 1).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let call = async |params: Value| -> Value {
        let response = common::http()
            .post(d.api("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "frames__ndjson_ask")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
            .timeout(UP)
            .send()
            .await
            .expect("POST /mcp");
        assert_eq!(response.status(), 200);
        response.json().await.expect("a JSON answer")
    };
    let first = call(json!({"name": "frames__ndjson_ask", "arguments": {}, "_meta": meta})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let (key, asked) = result["inputRequests"]
        .as_object()
        .and_then(|asked| asked.iter().next())
        .expect("one question");
    assert_eq!(asked["method"], "elicitation/create", "{first}");
    let second = call(
        json!({"name": "frames__ndjson_ask", "arguments": {}, "_meta": meta,
        "inputResponses": {key.as_str(): {"action": "accept", "content": {"ok": true}}},
        "requestState": result["requestState"]}),
    )
    .await;
    assert_eq!(
        second["result"]["content"][0]["text"],
        r#"answered in band: result {"action": "accept", "content": {"ok": true}}"#,
        "{second}"
    );
}
