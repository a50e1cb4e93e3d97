//! The admin page at `/` in a real browser: Debian's Chromium driven by
//! Playwright for Python (`tests/browser/admin_page.py`), against the real
//! daemon with the fixture server registered. Once on an open daemon, once
//! on one that requires its token (through the sign-in form).
//!
//! Screenshots go to `target/screenshots/`, and to `docs/screenshots/`
//! with `UPDATE_SCREENSHOTS=1`. Without `/usr/bin/chromium` the tests say
//! so loudly and pass, except in CI (`CI` set), where they fail.

#![cfg(feature = "fixture")]

mod common;

use common::{Daemon, http, wait_for};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const CHROMIUM: &str = "/usr/bin/chromium";
/// The server registered before the browser opens, and the one the page adds.
const SERVER: &str = "fixture";
const ADDED: &str = "sandbox";
/// Playwright waits 30 s at most for each step; the whole run is bounded too.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    root().join("tests/.venv/bin/python")
}

/// Whether the browser is here. In CI it must be; elsewhere its absence
/// skips the test, loudly.
fn browser_present() -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    let why = format!("{CHROMIUM} is missing (Debian: apt-get install chromium)");
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the admin page's browser test: {why}"
    );
    eprintln!(
        "\n************************************************************\n\
         SKIPPED: the admin page's browser test: {why}\n\
         ************************************************************\n"
    );
    false
}

/// The driver comes with the test venv (tests/python/requirements.txt).
fn assert_playwright() {
    let python = python();
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup.sh",
        python.display()
    );
    let found = Command::new(&python)
        .args(["-c", "import playwright.sync_api"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "Playwright is not installed in tests/.venv: run scripts/setup.sh"
    );
}

fn authorized(request: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

/// Registers the fixture server and waits until it is connected.
async fn register_fixture(d: &Daemon, token: Option<&str>) {
    let body = json!({
        "name": SERVER,
        "description": "The test suite's fixture MCP server",
        "transport_type": "STDIO",
        "connection_config": {"command": FIXTURE, "args": []},
    });
    let response = authorized(http().post(d.api("/api/v1/aggregator/servers")), token)
        .json(&body)
        .send()
        .await
        .expect("POST /servers");
    let status = response.status();
    assert_eq!(
        status,
        201,
        "registration refused: {}",
        response.text().await.unwrap_or_default()
    );
    let end = Instant::now() + Duration::from_secs(60);
    let url = d.api(&format!("/api/v1/aggregator/servers/{SERVER}"));
    loop {
        let seen: Value = match authorized(http().get(&url), token).send().await {
            Ok(response) => response.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        if seen["status"] == "CONNECTED" {
            break;
        }
        assert!(
            Instant::now() < end,
            "{SERVER} did not connect within 60 s: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // A few calls, one failing, so the figures and health have something to show.
    for (tool, expected) in [
        ("echo", 200),
        ("echo", 200),
        ("structured", 200),
        ("fail", 502),
    ] {
        let response = authorized(http().post(d.api("/api/v1/tools/call")), token)
            .json(&json!({"name": format!("{SERVER}.{tool}"), "arguments": {"value": "hello"}}))
            .send()
            .await
            .expect("POST /tools/call");
        assert_eq!(response.status(), expected, "calling {tool}");
    }
    // The failed call is in the server's audit trail too (the page filters
    // by server); calls are written within about a second.
    let audit = d.api(&format!(
        "/api/v1/aggregator/audit?server={SERVER}&action=call"
    ));
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let entries: Value = match authorized(http().get(&audit), token).send().await {
            Ok(response) => response.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let failed = entries.as_array().is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e["result"].as_str().is_some_and(|r| r.starts_with("error")))
        });
        if failed {
            break;
        }
        assert!(
            Instant::now() < end,
            "the failed call is not in {SERVER}'s audit trail: {entries}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs the browser script against the daemon; panics with its output and
/// the daemon's log when it fails.
fn run_script(d: &Daemon, token: Option<&str>, shots: &Path) {
    let _ = std::fs::remove_dir_all(shots);
    std::fs::create_dir_all(shots).expect("the screenshots directory");
    let output_path = d.data_dir.join("browser-test.log");
    let output = std::fs::File::create(&output_path).expect("a log file for the script");
    let mut command = Command::new(python());
    command
        .arg(root().join("tests/browser/admin_page.py"))
        .arg(&d.url)
        .args(["--expect-server", SERVER, "--new-server", ADDED])
        .args(["--add-command", FIXTURE, "--search", "echo"])
        .arg("--screenshots")
        .arg(shots)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("the log file"))
        .stderr(output);
    if let Some(token) = token {
        command.args(["--token", token]);
    }
    let mut child = command.spawn().expect("run tests/browser/admin_page.py");
    let status = wait_for(SCRIPT_DEADLINE, || child.try_wait().ok().flatten());
    let said = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the browser test did not finish within {SCRIPT_DEADLINE:?}:\n{}",
            said(&output_path)
        );
    };
    let log = said(&common::log_path(&d.data_dir));
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    assert!(
        status.success(),
        "the browser test failed ({status}); screenshots in {}:\n{}\n--- daemon log (last lines) ---\n{}",
        shots.display(),
        said(&output_path),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
}

/// With `UPDATE_SCREENSHOTS=1`, copies the named screenshots to
/// `docs/screenshots/admin-NAME.png` for the README.
fn publish(shots: &Path, names: &[&str]) {
    if std::env::var("UPDATE_SCREENSHOTS").as_deref() != Ok("1") {
        return;
    }
    let docs = root().join("docs/screenshots");
    std::fs::create_dir_all(&docs).expect("docs/screenshots");
    for name in names {
        let from = shots.join(format!("{name}.png"));
        let to = docs.join(format!("admin-{name}.png"));
        std::fs::copy(&from, &to)
            .unwrap_or_else(|err| panic!("copy {} to {}: {err}", from.display(), to.display()));
    }
}

fn screenshots(name: &str) -> PathBuf {
    root().join("target/screenshots").join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_works_in_a_browser() {
    if !browser_present() {
        return;
    }
    assert_playwright();
    let temp = tempfile::tempdir().expect("temp dir");
    let d = Daemon::start_in(&temp.path().join("data"), &[]);
    register_fixture(&d, None).await;
    let shots = screenshots("admin-page");
    tokio::task::block_in_place(|| run_script(&d, None, &shots));
    publish(&shots, &["servers", "tools", "search", "audit"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_signs_in_with_the_token() {
    if !browser_present() {
        return;
    }
    assert_playwright();
    let token = "admin-page-test-token-7f3a9c";
    let temp = tempfile::tempdir().expect("temp dir");
    let d = Daemon::start_with_env(
        &temp.path().join("data"),
        &["--require-token"],
        &[("MCP_AGGREGATOR_TOKEN", token)],
    );
    // Without the token the API refuses, and `/` is the sign-in form.
    let refused = http()
        .get(d.api("/api/v1/aggregator/servers"))
        .send()
        .await
        .expect("GET /servers");
    assert_eq!(refused.status(), 401);
    register_fixture(&d, Some(token)).await;
    let shots = screenshots("admin-page-token");
    tokio::task::block_in_place(|| run_script(&d, Some(token), &shots));
    publish(&shots, &["signin"]);
}
