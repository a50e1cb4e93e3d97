//! The daemon as a process: clean shutdown on signals, one process per data
//! dir, config files applied at start, statuses reset after a restart, and
//! a large store listed without trouble.

mod common;

use common::{BIN, Daemon, http, spawn_serve, wait_for};
use mcp_aggregator::model::{ServerStatus, StatusTrigger};
use mcp_aggregator::store::Store;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

#[test]
fn sigterm_sigint_and_sighup_stop_the_daemon_within_two_seconds() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut daemon = Daemon::start();
        let daemon_file = daemon.data_dir.join("daemon.json");
        assert!(daemon_file.exists());
        common::signal(daemon.pid(), signal);
        let status = wait_for(Duration::from_secs(2), || {
            daemon.child.try_wait().ok().flatten()
        })
        .expect("the daemon must exit within 2 s");
        assert!(status.success(), "clean exit on signal {signal}: {status}");
        assert!(!daemon_file.exists(), "the daemon file is removed on exit");
    }
}

#[test]
fn a_second_daemon_on_the_same_data_dir_gets_a_clear_error() {
    let first = Daemon::start();
    let output = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&first.data_dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("in use by another mcp-aggregator process"),
        "{stderr}"
    );
}

#[test]
fn a_busy_port_is_a_clear_error() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    let temp = tempfile::tempdir().unwrap();
    let output = Command::new(BIN)
        .args(["serve", "--listen", &addr, "--data-dir"])
        .arg(temp.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
}

#[test]
fn config_errors_exit_2_with_the_location() {
    let temp = tempfile::tempdir().unwrap();
    let cases = [
        ("missing.json", None, "Config file not found"),
        ("bad.json", Some("{\"mcpServers\": {"), "Invalid JSON"),
        (
            "schema.json",
            Some("{\"mcpServers\": {\"a\": {\"args\": []}}}"),
            "$.mcpServers.a.command",
        ),
        (
            "var.json",
            Some(
                "{\"mcpServers\": {\"a\": {\"command\": \"x\", \"env\": {\"K\": \"${MCPAGG_TEST_UNSET_VAR}\"}}}}",
            ),
            "Missing environment variable: MCPAGG_TEST_UNSET_VAR",
        ),
    ];
    for (file, contents, expected) in cases {
        let path = temp.path().join(file);
        if let Some(contents) = contents {
            std::fs::write(&path, contents).unwrap();
        }
        let output = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(temp.path().join("data"))
            .arg("--config")
            .arg(&path)
            .env_remove("MCPAGG_TEST_UNSET_VAR")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{file}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{file}: {stderr}");
    }
}

#[tokio::test]
async fn config_servers_are_upserted_at_start_and_the_file_wins() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {
            "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"TOKEN": "${MCPAGG_TEST_TOKEN:-default-token}"}, "autoConnect": false},
            "off": {"command": "x", "disabled": true}
        }, "servers": {"remote": {"type": "http", "url": "http://127.0.0.1:9/mcp", "autoConnect": false}}}"#,
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();

    let mut first = Daemon::start_in(&data_dir, &["--config", config_arg]);
    let list: Vec<Value> = common::get_json(&first.api("/api/v1/aggregator/servers")).await;
    let names: Vec<&str> = list.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["everything", "off", "remote"]);
    assert_eq!(
        list[1]["auto_connect"], false,
        "disabled servers do not auto-connect"
    );
    assert_eq!(list[0]["source"]["kind"], "config_file");
    let everything_id = list[0]["id"].clone();
    // A server added through the API persists across restarts.
    let added = http()
        .post(first.api("/api/v1/aggregator/servers"))
        .json(&common::stdio_server("api-added"))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 201);
    assert!(first.terminate(Duration::from_secs(5)).is_some());

    // The file changes: its servers are updated, ids kept, API servers stay.
    std::fs::write(
        &config,
        r#"{"mcpServers": {"everything": {"command": "node", "args": ["server.js"], "description": "changed", "autoConnect": false}}}"#,
    )
    .unwrap();
    let second = Daemon::start_in(&data_dir, &["--config", config_arg]);
    let list: Vec<Value> = common::get_json(&second.api("/api/v1/aggregator/servers")).await;
    let names: Vec<&str> = list.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["api-added", "everything"],
        "servers the file no longer names are removed; API servers stay"
    );
    let everything = &list[1];
    assert_eq!(
        everything["id"], everything_id,
        "the id survives an update from the file"
    );
    assert_eq!(everything["connection_config"]["command"], "node");
    assert_eq!(everything["description"], "changed");
}

/// A config that is a symlink is known by the link: re-pointed at a new
/// generation (a dotfile manager's `ln -sfn`), the servers the new target
/// dropped are removed, while the daemon runs and across a restart.
#[tokio::test]
async fn a_symlinked_config_repointed_removes_what_the_new_target_dropped() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let (first_generation, second_generation, third_generation) = (
        temp.path().join("gen1.json"),
        temp.path().join("gen2.json"),
        temp.path().join("gen3.json"),
    );
    let entry = r#"{"command": "x", "autoConnect": false}"#;
    std::fs::write(
        &first_generation,
        format!(r#"{{"mcpServers": {{"kept": {entry}, "old": {entry}}}}}"#),
    )
    .unwrap();
    std::fs::write(
        &second_generation,
        format!(r#"{{"mcpServers": {{"kept": {entry}}}}}"#),
    )
    .unwrap();
    std::fs::write(&third_generation, r#"{"mcpServers": {}}"#).unwrap();
    let config = temp.path().join("servers.json");
    let point_at = |target: &std::path::Path| {
        let next = temp.path().join("servers.json.next");
        std::os::unix::fs::symlink(target, &next).unwrap();
        std::fs::rename(&next, &config).unwrap();
    };
    point_at(&first_generation);
    let names = |d: &Daemon| {
        let url = d.api("/api/v1/aggregator/servers");
        async move {
            let list: Vec<Value> = common::get_json(&url).await;
            list.iter()
                .filter_map(|s| s["name"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        }
    };
    let mut d = Daemon::start_in(&data_dir, &["--config", config.to_str().unwrap()]);
    assert_eq!(names(&d).await, ["kept", "old"]);

    point_at(&second_generation);
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while names(&d).await != ["kept"] {
        assert!(
            std::time::Instant::now() < end,
            "old was never removed: {:?}",
            names(&d).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(d.terminate(Duration::from_secs(5)).is_some());

    point_at(&third_generation);
    let d = Daemon::start_in(&data_dir, &["--config", config.to_str().unwrap()]);
    assert!(names(&d).await.is_empty(), "{:?}", names(&d).await);
}

/// A config file that drops a view removes it even when tokens are bound
/// to it (the file wins), and says which tokens now reach nothing.
#[tokio::test]
async fn a_view_dropped_by_its_file_names_the_tokens_it_strands() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {}, "profiles": {"dev": {"servers": ["*"]}}}"#,
    )
    .unwrap();
    let d = Daemon::start_in(&data_dir, &["--config", config.to_str().unwrap()]);
    let (code, _, err) = common::cli(
        &data_dir,
        &[
            "tokens",
            "create",
            "dev-agent",
            "--scope",
            "mcp",
            "--profile",
            "dev",
        ],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::write(&config, r#"{"mcpServers": {}}"#).unwrap();
    let view = d.api("/api/v1/profiles/dev");
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while http().get(&view).send().await.unwrap().status() != 404 {
        assert!(std::time::Instant::now() < end, "dev was never removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The log is written in the background: read until the line is in.
    let said = wait_for(Duration::from_secs(30), || {
        let log = std::fs::read_to_string(common::log_path(&data_dir)).ok()?;
        log.lines()
            .any(|line| line.contains("dev-agent") && line.contains("reach nothing"))
            .then_some(())
    });
    assert!(
        said.is_some(),
        "{}",
        std::fs::read_to_string(common::log_path(&data_dir)).unwrap_or_default()
    );
}

#[tokio::test]
async fn statuses_are_reset_after_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    {
        let mut daemon = Daemon::start_in(&data_dir, &[]);
        let created = http()
            .post(daemon.api("/api/v1/aggregator/servers"))
            .json(&common::stdio_server("was-connected"))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
        daemon.terminate(Duration::from_secs(5)).expect("stops");
    }
    // Simulate a crash while connected: the store says CONNECTED.
    {
        let store = Store::open(&data_dir).unwrap();
        let id = store
            .get_server_by_name("was-connected")
            .unwrap()
            .unwrap()
            .id;
        store
            .transition_server(
                id,
                ServerStatus::Connecting,
                StatusTrigger::Connect,
                None,
                |_| {},
            )
            .unwrap();
        store
            .transition_server(
                id,
                ServerStatus::Connected,
                StatusTrigger::ConnectSucceeded,
                None,
                |_| {},
            )
            .unwrap();
    }
    let daemon = Daemon::start_in(&data_dir, &[]);
    let server: Value =
        common::get_json(&daemon.api("/api/v1/aggregator/servers/was-connected")).await;
    assert_eq!(server["status"], "DISCONNECTED");
    let history: Vec<Value> =
        common::get_json(&daemon.api("/api/v1/aggregator/servers/was-connected/history")).await;
    assert_eq!(history.last().unwrap()["trigger"], "process_restart");
}

#[tokio::test]
async fn ten_thousand_servers_are_listed_without_trouble() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    {
        let store = Store::open(&data_dir).unwrap();
        let records: Vec<_> = (0..10_000)
            .map(|i| mcp_aggregator::model::ServerRecord {
                description: Some(format!("bulk server {i}")),
                auto_connect: false,
                ..mcp_aggregator::model::ServerRecord::new(
                    format!("server-{i:05}"),
                    mcp_aggregator::model::Transport::Http {
                        base_url: format!("http://127.0.0.1:9/{i}"),
                        headers: Default::default(),
                    },
                    mcp_aggregator::model::ServerSource::Api,
                )
            })
            .collect();
        store.upsert_servers(&records, "test").unwrap();
    }
    let daemon = Daemon::start_in(&data_dir, &[]);
    let list: Vec<Value> = common::get_json(&daemon.api("/api/v1/aggregator/servers")).await;
    assert_eq!(list.len(), 10_000);
    assert_eq!(list[0]["name"], "server-00000");
    assert_eq!(list[9_999]["name"], "server-09999");
    let state: Value = common::get_json(&daemon.api("/api/v1/aggregator/state")).await;
    assert_eq!(state["total_servers"], 10_000);
    let one: Value = common::get_json(&daemon.api("/api/v1/aggregator/servers/server-04242")).await;
    assert_eq!(one["description"], "bulk server 4242");
}

#[tokio::test]
async fn with_require_token_the_api_needs_the_generated_token() {
    // Tests bind loopback only; --require-token gives the same protection a
    // non-loopback bind turns on by itself.
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut child = spawn_serve(&data_dir, &["--require-token"]);
    let info: Value = wait_for(Duration::from_secs(20), || {
        let text = std::fs::read_to_string(data_dir.join("daemon.json")).ok()?;
        serde_json::from_str(&text).ok()
    })
    .expect("started");
    let base = info["url"].as_str().unwrap().to_owned();
    let token = std::fs::read_to_string(data_dir.join("admin.token")).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(data_dir.join("admin.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let unauthorized = http()
        .get(format!("{base}/api/v1/aggregator/servers"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    assert_eq!(unauthorized.headers()["www-authenticate"], "Bearer");
    let wrong = http()
        .get(format!("{base}/api/v1/aggregator/servers"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let ok = http()
        .get(format!("{base}/api/v1/aggregator/servers"))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let health = http().get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "liveness needs no token");

    // The CLI finds the token in the data dir.
    let (code, stdout, stderr) = common::cli(&data_dir, &["servers", "list", "--url", &base]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("no servers registered"), "{stdout}");

    common::signal(child.id() as i32, libc::SIGTERM);
    let status =
        wait_for(Duration::from_secs(5), || child.try_wait().ok().flatten()).expect("stops");
    assert!(
        status.success(),
        "SIGTERM ended the daemon with {status}; its log:\n{}",
        std::fs::read_to_string(common::log_path(&data_dir)).unwrap_or_default()
    );
}

/// Replacing a config file's view through the API works, and says that
/// the file's next apply puts its own back; a view of the API's own is
/// replaced without a word.
#[tokio::test]
async fn replacing_a_files_view_through_the_api_says_the_file_wins() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {}, "profiles": {"dev": {"servers": ["*"]}}}"#,
    )
    .unwrap();
    let d = Daemon::start_in(&data_dir, &["--config", config.to_str().unwrap()]);
    let put = || async {
        let response = http()
            .put(d.api("/api/v1/profiles/dev"))
            .json(&serde_json::json!({"servers": ["github"]}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        response.json::<serde_json::Value>().await.unwrap()
    };
    let replaced = put().await;
    let warning = replaced["warning"].as_str().unwrap_or_default();
    assert!(
        warning.contains(config.to_str().unwrap()) && warning.contains("puts its own back"),
        "{replaced}"
    );
    assert_eq!(replaced["servers"], serde_json::json!(["github"]));
    let again = put().await;
    assert!(again.get("warning").is_none(), "{again}");
}
