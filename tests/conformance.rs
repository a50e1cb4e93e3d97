//! The official MCP conformance runner (npm `@modelcontextprotocol/conformance`)
//! pointed at the aggregator's `/mcp`, for the 2025 suite and the 2026-07-28
//! requirements, with a conformance backend behind it over stdio and over
//! Streamable HTTP: `backend.mjs` (a 2025 server, TypeScript SDK 1.x) and
//! `backend2026.mjs` (a dual-era server, TypeScript SDK v2, which the
//! aggregator speaks 2026-07-28 to; its 2025 clients' calls too, since it
//! serves 2025 requests without a session). Each run is checked against an
//! expected-failures file that may only shrink: the runner fails on an
//! unlisted failure and on a listed entry that passes.

#![cfg(feature = "fixture")]

mod common;

use common::{Daemon, wait_status};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const UP: Duration = Duration::from_secs(60);

use common::{conformance_dir, node22 as node};

/// Runs the runner against `url`; panics with its report unless every
/// failure is one the baseline lists and every listed one still fails.
fn run_conformance(url: &str, requirements: Option<&str>, baseline: &str, label: &str) {
    let dir = conformance_dir();
    let out = tempfile::tempdir().unwrap();
    let mut runner = Command::new(node());
    runner
        .arg("--require")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/npm/loopback.cjs"))
        .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url, "--expected-failures"])
        .arg(dir.join(baseline))
        .arg("--output-dir")
        .arg(out.path());
    if let Some(revision) = requirements {
        runner.args(["--requirements", revision]);
    }
    let output = runner
        .stdin(Stdio::null())
        .output()
        .expect("run the conformance runner");
    let report = String::from_utf8_lossy(&output.stdout);
    let summary = report
        .split("=== SUMMARY ===")
        .nth(1)
        .unwrap_or(&report)
        .to_owned();
    eprintln!("conformance, {label}:{summary}");
    // The runner skips some scenarios in its baseline check (extensions):
    // the list is held to exactly what fails here, so it can only shrink.
    let listed = baseline_entries(&dir.join(baseline));
    let failing = failing_scenarios(out.path());
    let stale: Vec<&String> = listed.iter().filter(|s| !failing.contains(*s)).collect();
    let unlisted: Vec<&String> = failing.iter().filter(|s| !listed.contains(*s)).collect();
    assert!(
        stale.is_empty() && unlisted.is_empty(),
        "conformance, {label}: {baseline} lists {stale:?}, which now pass (remove them), and misses {unlisted:?}, which fail\nchecks that did not pass:\n{}\n{summary}",
        checks_not_passed(out.path(), &unlisted)
    );
    assert!(
        output.status.success(),
        "conformance, {label}: the run does not match {baseline}\nchecks that did not pass:\n{}\n{summary}\n{}",
        checks_not_passed(out.path(), &[]),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The scenarios an expected-failures file lists (`server:` entries).
fn baseline_entries(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|entry| entry.trim().to_owned())
        .collect()
}

/// The scenarios of a run with a check that failed or warned, named as the
/// runner names them (its result folders are `server-<scenario>-<time>`).
fn failing_scenarios(dir: &Path) -> Vec<String> {
    let mut failing = Vec::new();
    let Ok(folders) = std::fs::read_dir(dir) else {
        return failing;
    };
    for folder in folders.flatten() {
        let checks: Vec<serde_json::Value> =
            std::fs::read_to_string(folder.path().join("checks.json"))
                .ok()
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default();
        let fails = checks
            .iter()
            .any(|c| matches!(c["status"].as_str(), Some("FAILURE" | "WARNING")));
        let name = folder.file_name().to_string_lossy().into_owned();
        let parts: Vec<&str> = name.split('-').collect();
        // `<time>` is 2026-11-26T09-35-08-048Z: six dash-separated parts.
        if fails && parts.len() > 7 {
            failing.push(parts[1..parts.len() - 6].join("-"));
        }
    }
    failing.sort();
    failing.dedup();
    failing
}

/// Every check of the run that did not pass, with what it said; of the
/// `only` scenarios when it names any (the runner's folders are
/// `server-<scenario>-<time>`).
fn checks_not_passed(dir: &Path, only: &[&String]) -> String {
    let mut lines = Vec::new();
    let Ok(scenarios) = std::fs::read_dir(dir) else {
        return String::new();
    };
    for scenario in scenarios.flatten() {
        let folder = scenario.file_name().to_string_lossy().into_owned();
        if !only.is_empty()
            && !only
                .iter()
                .any(|name| folder.starts_with(&format!("server-{name}-")))
        {
            continue;
        }
        let path = scenario.path().join("checks.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let checks: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_default();
        for check in checks {
            let status = check["status"].as_str().unwrap_or_default();
            if status != "SUCCESS" && status != "INFO" && status != "SKIPPED" {
                lines.push(format!(
                    "  {} / {}: {status}: {} {}",
                    scenario.file_name().to_string_lossy(),
                    check["id"].as_str().unwrap_or_default(),
                    check["errorMessage"].as_str().unwrap_or_default(),
                    check["details"]
                ));
            }
        }
    }
    lines.join("\n")
}

/// A daemon with the backend registered from a config file, its tools listed.
async fn aggregator_with(config: serde_json::Value) -> (tempfile::TempDir, Daemon) {
    let temp = tempfile::tempdir().unwrap();
    let path = temp.path().join("servers.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &["--config", path.to_str().unwrap()],
    );
    wait_status(&d, "conf", "CONNECTED", UP).await;
    let end = std::time::Instant::now() + UP;
    loop {
        let tools: Vec<serde_json::Value> =
            common::get_json(&d.api("/api/v1/aggregator/servers/conf/tools")).await;
        if !tools.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "the backend listed no tools"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (temp, d)
}

/// The expected failures of a backend's runs: `(2025 suite, 2026-07-28)`.
struct Baselines {
    legacy: &'static str,
    modern: &'static str,
}

const BACKEND_2025: Baselines = Baselines {
    legacy: "expected-failures-2025.yaml",
    modern: "expected-failures-2026-07-28.yaml",
};

const BACKEND_2026: Baselines = Baselines {
    legacy: "expected-failures-2025.yaml",
    modern: "expected-failures-2026-07-28-backend2026.yaml",
};

fn run_both_eras(d: &Daemon, label: &str, baselines: &Baselines) {
    let url = d.api("/mcp");
    run_conformance(
        &url,
        None,
        baselines.legacy,
        &format!("2025 suite, {label}"),
    );
    run_conformance(
        &url,
        Some("2026-07-28"),
        baselines.modern,
        &format!("2026-07-28 requirements, {label}"),
    );
}

/// The protocol revision the aggregator speaks to the backend.
async fn spoken_revision(d: &Daemon) -> String {
    let server: serde_json::Value =
        common::get_json(&d.api("/api/v1/aggregator/servers/conf")).await;
    server["protocol_version"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_through_the_aggregator_with_a_stdio_backend() {
    let backend = conformance_dir().join("backend.mjs");
    let (_temp, d) = aggregator_with(serde_json::json!({"mcpServers": {"conf": {
        "command": node(), "args": [backend]
    }}}))
    .await;
    assert_eq!(spoken_revision(&d).await, "2025-06-18");
    tokio::task::spawn_blocking(move || {
        run_both_eras(&d, "2025 backend over stdio", &BACKEND_2025)
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_through_the_aggregator_with_an_http_backend() {
    let mut backend = Command::new(node());
    backend.arg(conformance_dir().join("backend.mjs"));
    let (_backend, port) = common::http_test_server(backend);
    let (_temp, d) = aggregator_with(serde_json::json!({"mcpServers": {"conf": {
        "type": "http", "url": format!("http://127.0.0.1:{port}/mcp")
    }}}))
    .await;
    assert_eq!(spoken_revision(&d).await, "2025-06-18");
    tokio::task::spawn_blocking(move || {
        run_both_eras(&d, "2025 backend over Streamable HTTP", &BACKEND_2025)
    })
    .await
    .unwrap();
}

/// A dual-era server is spoken to in 2026-07-28 (the probe the spec's
/// compatibility section describes), whatever era the client speaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_through_the_aggregator_with_a_2026_stdio_backend() {
    let backend = conformance_dir().join("backend2026.mjs");
    let (_temp, d) = aggregator_with(serde_json::json!({"mcpServers": {"conf": {
        "command": node(), "args": [backend]
    }}}))
    .await;
    assert_eq!(spoken_revision(&d).await, "2026-07-28");
    tokio::task::spawn_blocking(move || {
        run_both_eras(&d, "2026 backend over stdio", &BACKEND_2026)
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_through_the_aggregator_with_a_2026_http_backend() {
    let mut backend = Command::new(node());
    backend.arg(conformance_dir().join("backend2026.mjs"));
    let (_backend, port) = common::http_test_server(backend);
    let (_temp, d) = aggregator_with(serde_json::json!({"mcpServers": {"conf": {
        "type": "http", "url": format!("http://127.0.0.1:{port}/mcp")
    }}}))
    .await;
    assert_eq!(spoken_revision(&d).await, "2026-07-28");
    tokio::task::spawn_blocking(move || {
        run_both_eras(&d, "2026 backend over Streamable HTTP", &BACKEND_2026)
    })
    .await
    .unwrap();
}

/// A server that speaks both eras and keeps 2025 clients in sessions of
/// their own, as the conformance repository's reference server does, is
/// spoken to in 2026-07-28; a 2025 client's calls go over a 2025 session
/// beside it, so each client is served as it would be by the server alone
/// (the reference server asks a 2025 client for sampling and elicitation
/// only in such a session; a server that serves 2025 requests without a
/// session, like `backend2026.mjs`, keeps its 2026-07-28 path, where its
/// questions come inside results: the runs above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_era_server_serves_each_client_in_the_clients_own_era() {
    let mut backend = Command::new(node());
    backend.arg(conformance_dir().join("dual_era_server.mjs"));
    let (_backend, port) = common::http_test_server(backend);
    let (_temp, d) = aggregator_with(serde_json::json!({"mcpServers": {"conf": {
        "type": "http", "url": format!("http://127.0.0.1:{port}/mcp")
    }}}))
    .await;
    assert_eq!(spoken_revision(&d).await, "2026-07-28");
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "conf__era", "arguments": {}}});
    let session = common::mcp_session_with(&d, serde_json::json!({})).await;
    // Twice: the first call opens the 2025 session, the second finds it.
    for _ in 0..2 {
        let answer = common::mcp_call(&d, &session, call.clone()).await;
        assert_eq!(answer["result"]["content"][0]["text"], "legacy", "{answer}");
    }
    let prompt = common::mcp_call(
        &d,
        &session,
        serde_json::json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
            "params": {"name": "conf.era"}}),
    )
    .await;
    assert_eq!(
        prompt["result"]["messages"][0]["content"]["text"], "legacy",
        "{prompt}"
    );
    let modern = serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "conf__era", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "modern", "version": "1"}}}});
    let answer: serde_json::Value = common::http()
        .post(d.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "conf__era")
        .json(&modern)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "modern", "{answer}");
}

/// Disconnecting a dual-era server lets the calls running on the 2025
/// session beside its own finish first, as on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_lets_the_calls_on_the_2025_session_finish() {
    let temp = tempfile::tempdir().unwrap();
    let started = temp.path().join("started");
    let mut backend = Command::new(node());
    backend
        .arg(conformance_dir().join("dual_era_server.mjs"))
        .arg("--started-file")
        .arg(&started);
    let (_backend, port) = common::http_test_server(backend);
    let (_temp, d) = aggregator_with(serde_json::json!({"mcpServers": {"conf": {
        "type": "http", "url": format!("http://127.0.0.1:{port}/mcp")
    }}}))
    .await;
    let session = common::mcp_session_with(&d, serde_json::json!({})).await;
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "conf__sleep", "arguments": {"ms": 2000}}});
    let running = {
        let (d_url, session) = (d.api("/mcp"), session.clone());
        tokio::spawn(async move {
            let response = common::http()
                .post(d_url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .json(&call)
                .send()
                .await
                .unwrap();
            response.text().await.unwrap()
        })
    };
    common::wait_for(UP, || started.exists().then_some(())).expect("the call reached the server");
    let disconnected: serde_json::Value = common::http()
        .post(d.api("/api/v1/aggregator/servers/conf/disconnect"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer = running.await.unwrap();
    assert!(answer.contains("legacy"), "the call was cut off: {answer}");
    assert!(!answer.contains("\"error\""), "{answer}");
    assert_eq!(disconnected["pending_requests"], 0, "{disconnected}");
}

/// A server that keeps forgetting the 2025 sessions it gives (replicas
/// that share none) costs a 2025 client a failed call each time, so after
/// the second such session breaks, its calls stay on the 2026-07-28
/// session, which the server serves whatever it forgets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_keeps_forgetting_2025_sessions_is_called_in_2026() {
    let mut backend = Command::new(node());
    backend
        .arg(conformance_dir().join("dual_era_server.mjs"))
        .arg("--forget-sessions");
    let (_backend, port) = common::http_test_server(backend);
    let (_temp, d) = aggregator_with(serde_json::json!({"mcpServers": {"conf": {
        "type": "http", "url": format!("http://127.0.0.1:{port}/mcp")
    }}}))
    .await;
    let session = common::mcp_session_with(&d, serde_json::json!({})).await;
    let mut answers = Vec::new();
    for id in 0..8 {
        let answer = common::mcp_call(
            &d,
            &session,
            serde_json::json!({"jsonrpc": "2.0", "id": id + 10, "method": "tools/call",
                "params": {"name": "conf__era", "arguments": {}}}),
        )
        .await;
        answers.push(
            answer["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or("failed")
                .to_owned(),
        );
    }
    assert_eq!(answers[0], "legacy", "{answers:?}");
    assert!(
        answers
            .iter()
            .filter(|a| *a != "legacy" && *a != "modern")
            .count()
            <= 2,
        "{answers:?}"
    );
    assert!(answers[5..].iter().all(|a| a == "modern"), "{answers:?}");
}

/// The aggregator as the client: the runner starts a scenario's server and
/// runs `client_driver.py`, which registers it with a fresh daemon and
/// calls its tools through the aggregator; the scenario server checks what
/// the aggregator sent it — the 2025 handshake, SSE resumption, and the
/// 2026-07-28 request metadata, standard and `Mcp-Param-*` headers,
/// exclusion of tools with invalid `x-mcp-header` annotations, and JSON
/// Schema 2020-12 passed through intact, a network `$ref` never fetched, and
/// input-required rounds (`requestState` echoed, a new id per retry), and
/// an elicitation during a call reaching the driver as an input round (it
/// answers with the schema's defaults, SEP-1034). One
/// scenario at a time (the whole requirement set starts some forty daemons
/// at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aggregator_as_a_client_of_the_conformance_scenarios() {
    tokio::task::spawn_blocking(|| {
        for scenario in [
            "initialize",
            "tools_call",
            "sse-retry",
            "request-metadata",
            "http-standard-headers",
            "http-custom-headers",
            "http-invalid-tool-headers",
            "json-schema-2020-12-preservation",
            "json-schema-ref-no-deref",
            "sep-2322-client-request-state",
            "elicitation-sep1034-client-defaults",
        ] {
            run_client_conformance(&["--scenario", scenario], scenario);
        }
    })
    .await
    .unwrap();
}

/// The aggregator logging in to servers that ask for it: every scored
/// `auth/*` scenario of the 2025-11-25 and 2026-07-28 requirement sets.
/// The scenario's authorization server approves without a user; the driver
/// opens the `authorization_url` the aggregator shows (as a browser would)
/// and the login finishes through the daemon's `/oauth/callback`. Checked:
/// discovery and its fallbacks, scopes (from the challenge, the metadata,
/// omitted), step-up and its limit, the three token-endpoint
/// authentications, pre-registered, metadata-document and registered
/// clients (with `application_type`), resource indicators and a resource
/// that is not the server's, `offline_access`, a moved authorization
/// server, and the RFC 9207 `iss` checks (compared exactly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aggregator_logs_in_as_the_conformance_auth_scenarios_require() {
    tokio::task::spawn_blocking(|| {
        for scenario in [
            "auth/metadata-default",
            "auth/metadata-var1",
            "auth/metadata-var2",
            "auth/metadata-var3",
            "auth/basic-cimd",
            "auth/scope-from-www-authenticate",
            "auth/scope-from-scopes-supported",
            "auth/scope-omitted-when-undefined",
            "auth/scope-step-up",
            "auth/scope-retry-limit",
            "auth/token-endpoint-auth-basic",
            "auth/token-endpoint-auth-post",
            "auth/token-endpoint-auth-none",
            "auth/pre-registration",
            "auth/2025-03-26-oauth-metadata-backcompat",
            "auth/2025-03-26-oauth-endpoint-fallback",
            "auth/resource-mismatch",
            "auth/offline-access-scope",
            "auth/offline-access-not-supported",
            "auth/authorization-server-migration",
            "auth/iss-supported",
            "auth/iss-not-advertised",
            "auth/iss-supported-missing",
            "auth/iss-wrong-issuer",
            "auth/iss-unexpected",
            "auth/iss-normalized",
            "auth/metadata-issuer-mismatch",
        ] {
            run_client_conformance(&["--scenario", scenario], scenario);
        }
    })
    .await
    .unwrap();
}

fn run_client_conformance(args: &[&str], label: &str) {
    let dir = conformance_dir();
    let driver = dir.join("client_driver.py");
    // The runner picks its servers' ports at random; one another process
    // holds (EADDRINUSE, seen in CI) is the runner's bad luck, not a
    // verdict: that scenario runs again, at most twice more.
    for attempt in 1..=3 {
        let output = Command::new(node())
            .arg("--require")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/npm/loopback.cjs"))
            .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
            .args(["client", "--command"])
            .arg(format!("python3 {}", driver.display()))
            .args(args)
            .env("MCP_AGGREGATOR_BIN", common::BIN)
            .stdin(Stdio::null())
            .output()
            .expect("run the conformance runner");
        let report = String::from_utf8_lossy(&output.stdout);
        let errors = String::from_utf8_lossy(&output.stderr);
        eprintln!(
            "client conformance, {label}: {}",
            report
                .lines()
                .filter(|l| l.starts_with("Passed") || l.starts_with("Total"))
                .collect::<Vec<_>>()
                .join("; ")
        );
        let port_taken = report.contains("EADDRINUSE") || errors.contains("EADDRINUSE");
        if !output.status.success() && port_taken && attempt < 3 {
            eprintln!("client conformance, {label}: the runner's port was taken; again");
            continue;
        }
        assert!(
            output.status.success(),
            "client conformance, {label}: failed\n{report}\n{errors}"
        );
        return;
    }
}
