//! The listener as a web page, a careless client or a local attacker meets
//! it: cross-site and rebound requests are refused on every route before
//! anything runs, every error is `{"detail"}` JSON, files in the data dir
//! are private, `/mcp` sessions expire, and a server that never answers is
//! reported as a timeout that names it.

mod common;

use common::*;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

const UP: Duration = Duration::from_secs(30);

/// The registration a malicious page would send: run a command at once.
fn command_running_registration(marker: &std::path::Path) -> String {
    json!({
        "name": "pwned",
        "transport_type": "STDIO",
        "connection_config": {"command": "sh", "args": ["-c", format!("id > {}", marker.display())]},
        "auto_connect": true
    })
    .to_string()
}

fn detail(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("not a {{\"detail\"}} body: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_and_rebound_requests_reach_no_route() {
    let d = Daemon::start();
    let marker = d.data_dir.with_extension("pwned");
    let body = command_running_registration(&marker);
    let local = d.url.trim_start_matches("http://").to_owned();
    let servers = "/api/v1/aggregator/servers";

    // DNS rebinding: a page on evil.com whose name now points at us; the
    // browser's "simple" cross-site POST (text/plain).
    let (status, text) = raw_http(
        &d.url,
        &raw_request(
            "POST",
            servers,
            &[
                ("Host", "evil.com:8765"),
                ("Origin", "http://evil.com:8765"),
                ("Content-Type", "text/plain"),
            ],
            &body,
        ),
    );
    assert_eq!(status, 403, "{text}");
    assert!(detail(&text).contains("evil.com"), "{text}");
    // Reading is refused to a rebound name as well.
    let (status, text) = raw_http(
        &d.url,
        &raw_request("GET", servers, &[("Host", "evil.com")], ""),
    );
    assert_eq!(status, 403, "{text}");
    // A foreign Origin with the right Host and even the right type.
    let (status, text) = raw_http(
        &d.url,
        &raw_request(
            "POST",
            servers,
            &[
                ("Host", &local),
                ("Origin", "https://evil.com"),
                ("Content-Type", "application/json"),
            ],
            &body,
        ),
    );
    assert_eq!(status, 403, "{text}");
    // No Origin (a form in an old browser, a careless tool) but not JSON.
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let (status, text) = raw_http(
            &d.url,
            &raw_request(
                "POST",
                servers,
                &[("Host", &local), ("Content-Type", content_type)],
                &body,
            ),
        );
        assert_eq!(status, 415, "{content_type}: {text}");
        assert!(detail(&text).contains("application/json"), "{text}");
    }
    // A sandboxed iframe (Origin: null) posting a batch to /mcp.
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page", "version": "0"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    ])
    .to_string();
    for content_type in ["text/plain", "application/json"] {
        let (status, text) = raw_http(
            &d.url,
            &raw_request(
                "POST",
                "/mcp",
                &[
                    ("Host", &local),
                    ("Origin", "null"),
                    ("Content-Type", content_type),
                ],
                &batch,
            ),
        );
        assert_eq!(status, 403, "Origin null with {content_type}: {text}");
    }

    // Nothing ran and nothing was stored.
    let listed: Value = get_json(&d.api(servers)).await;
    assert_eq!(listed, json!([]), "{listed}");
    assert!(!marker.exists(), "the command ran");

    // The CLI and plain curl (loopback Host, no Origin, JSON) still work,
    // and so does a page served from loopback itself.
    let (code, out, err) = cli(&d.data_dir, &["servers", "list"]);
    assert_eq!(code, 0, "{out}{err}");
    let harmless = json!({"name": "fine", "transport_type": "STDIO", "connection_config": {"command": "true"}, "auto_connect": false}).to_string();
    let (status, text) = raw_http(
        &d.url,
        &raw_request(
            "POST",
            servers,
            &[
                ("Host", &local),
                ("Origin", "http://localhost:6274"),
                ("Content-Type", "application/json"),
            ],
            &harmless,
        ),
    );
    assert_eq!(status, 201, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_json_and_bad_messages_get_jsonrpc_errors() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let d = Daemon::start_in(&data, &["--max-message-bytes", "65536"]);
    let local = d.url.trim_start_matches("http://").to_owned();

    // Over the /mcp body limit: 413 with a detail.
    let big = format!(
        "{{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\", \"params\": {{\"x\": \"{}\"}}}}",
        "a".repeat(70_000)
    );
    let (status, text) = raw_http(
        &d.url,
        &raw_request(
            "POST",
            "/mcp",
            &[("Host", &local), ("Content-Type", "application/json")],
            &big,
        ),
    );
    assert_eq!(status, 413, "{text}");
    detail(&text);
    // Unknown route, wrong method, a body that is not JSON.
    let (status, text) = raw_http(
        &d.url,
        &raw_request("GET", "/nope", &[("Host", &local)], ""),
    );
    assert_eq!(status, 404);
    detail(&text);
    let (status, text) = raw_http(
        &d.url,
        &raw_request("PUT", "/healthz", &[("Host", &local)], ""),
    );
    assert_eq!(status, 405);
    detail(&text);

    // JSON-RPC that is not 2.0.
    let response = http()
        .post(d.api("/mcp"))
        .json(&json!({"jsonrpc": "1.0", "id": 5, "method": "initialize", "params": {}}))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    let answer = if body.is_array() {
        body[0].clone()
    } else {
        body
    };
    assert_eq!(answer["error"]["code"], -32600, "{answer}");

    // The data dir and what is in it are the owner's alone.
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("store.redb")), 0o600);
    assert_eq!(mode(&data.join("daemon.json")), 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_with_env(
        &temp.path().join("data"),
        &["--require-token"],
        &[("MCP_AGGREGATOR_TOKEN", "t0ken-value")],
    );
    let url = d.api("/api/v1/aggregator/servers");
    for (value, expected) in [
        ("Bearer t0ken-value", 200),
        ("bearer t0ken-value", 200),
        ("BEARER t0ken-value", 200),
        ("Bearer wrong", 401),
        ("Basic t0ken-value", 401),
    ] {
        let status = http()
            .get(&url)
            .header("authorization", value)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, expected, "{value}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_mcp_sessions_expire() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &["--session-idle-timeout", "1"]);
    let session = mcp_session_with(&d, json!({})).await;
    // Used now, the session is there; left alone, it goes.
    let ping = || async {
        http()
            .post(d.api("/mcp"))
            .header("mcp-session-id", &session)
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(ping().await, 200);
    let end = std::time::Instant::now() + UP;
    loop {
        // Only a probe every 2 s, so the session is idle in between.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let status = ping().await;
        if status == 404 {
            break;
        }
        assert!(std::time::Instant::now() < end, "the session never expired");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answers_the_wrong_id_is_a_timeout_that_names_it() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &["--request-timeout", "2"]);
    register(&d, hostile_server("liar", &[])).await;
    wait_status(&d, "liar", "CONNECTED", UP).await;

    let (status, body) = rest_call(&d, "liar.wrong_id", json!({})).await;
    assert_eq!(status, 504, "{body}");
    let text = body["detail"].as_str().unwrap_or_default();
    assert!(
        text.contains("liar") && text.contains("did not answer"),
        "{body}"
    );

    let (code, out, err) = cli(&d.data_dir, &["call", "liar.hang", "{}"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("liar") && err.contains("did not answer"),
        "{err}"
    );
    assert!(!err.contains("no mcp-aggregator daemon"), "{err}");
}

/// The admin page: without the token a browser gets the sign-in form (no
/// data), its static files and nothing else; signing in with the token
/// sets an HttpOnly, SameSite=Strict cookie that then stands for the
/// token; a wrong token, a cross-site sign-in and a non-JSON one are
/// refused; signing out expires the cookie. Every page file carries the
/// content security policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_signs_in_with_the_token_and_only_with_it() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_with_env(
        &temp.path().join("data"),
        &["--require-token"],
        &[("MCP_AGGREGATOR_TOKEN", "t0ken-value")],
    );
    let client = http();
    let page = client.get(d.api("/")).send().await.unwrap();
    assert_eq!(page.status(), 401);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let signin = page.text().await.unwrap();
    assert!(
        signin.contains("/admin/signin.js"),
        "the sign-in form: {signin}"
    );
    for asset in ["/admin/app.js", "/admin/signin.js", "/admin/app.css"] {
        let answer = client.get(d.api(asset)).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{asset}");
        assert!(answer.headers().contains_key("content-security-policy"));
    }
    let servers = d.api("/api/v1/aggregator/servers");
    assert_eq!(client.get(&servers).send().await.unwrap().status(), 401);
    let session: Value = client
        .get(d.api("/admin/session"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session, json!({"token_required": true}));

    let sign_in = |body: &'static str| {
        client
            .post(d.api("/admin/session"))
            .header("content-type", "application/json")
            .body(body)
    };
    let wrong = sign_in(r#"{"token": "guess"}"#).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(detail(&wrong.text().await.unwrap()).contains("not the admin token"));
    assert!(
        sign_in(r#"{"token": "t0ken-value"}"#)
            .header("origin", "http://evil.com")
            .send()
            .await
            .unwrap()
            .status()
            == 403,
        "a cross-site sign-in is refused"
    );
    let (status, _) = raw_http(
        &d.url,
        &raw_request(
            "POST",
            "/admin/session",
            &[("Host", "127.0.0.1"), ("Content-Type", "text/plain")],
            r#"{"token": "t0ken-value"}"#,
        ),
    );
    assert_eq!(status, 415, "a form post cannot sign in");

    let signed = sign_in(r#"{"token": "t0ken-value"}"#).send().await.unwrap();
    assert_eq!(signed.status(), 204);
    let cookie = signed.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    assert!(
        !pair.contains("t0ken-value"),
        "the cookie is a session, not the token: {pair}"
    );
    let page = client
        .get(d.api("/"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("/admin/app.js"));
    let listed = client
        .get(&servers)
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    // A cookie a page elsewhere on loopback added does not hide ours.
    let both = format!("mcp_aggregator_admin=junk; {pair}");
    let listed = client
        .get(&servers)
        .header("cookie", &both)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let forged = client
        .get(&servers)
        .header("cookie", "mcp_aggregator_admin=t0ken-value")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401, "the token is not a session");

    // A change on the session's strength comes from this origin only: a
    // page on another loopback port gets the cookie sent, not the change.
    let own_origin = d.url.trim_end_matches('/').to_owned();
    let other_port = format!("http://127.0.0.1:{}", common::free_port());
    let reindex = d.api("/api/v1/search/reindex");
    for (origin, expected) in [
        (Some(other_port.as_str()), 401),
        (None, 401),
        (Some(own_origin.as_str()), 202),
    ] {
        let mut request = client.post(&reindex).header("cookie", &pair);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let status = request.send().await.unwrap().status();
        assert!(
            status == expected || (expected == 202 && status.is_success()),
            "Origin {origin:?}: {status}"
        );
    }

    let out = client.delete(d.api("/admin/session")).send().await.unwrap();
    assert_eq!(out.status(), 204);
    assert!(
        out.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
}

/// The aggregator registered as its own server, through its `/mcp` or
/// through a wrapped `stdio` on its own data dir (what a careless import
/// or a hostile config could do): the session sees its own answer and
/// refuses, saying why; none of its own tools fold back into the catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aggregator_refuses_itself_as_a_server() {
    let d = Daemon::start();
    let data_dir = d.data_dir.to_str().unwrap().to_owned();
    let registrations = [
        json!({"name": "loop-http", "transport_type": "HTTP",
               "connection_config": {"base_url": d.api("/mcp")}}),
        json!({"name": "loop-stdio", "transport_type": "STDIO",
               "connection_config": {"command": "sh", "args": ["-c", format!("exec '{BIN}' stdio --data-dir '{data_dir}'")]}}),
    ];
    for registration in &registrations {
        let answer = http()
            .post(d.api("/api/v1/aggregator/servers"))
            .json(registration)
            .send()
            .await
            .unwrap();
        assert!(
            answer.status().is_success(),
            "{}",
            answer.text().await.unwrap()
        );
    }
    for name in ["loop-http", "loop-stdio"] {
        let url = d.api(&format!("/api/v1/aggregator/servers/{name}"));
        let end = std::time::Instant::now() + UP;
        let seen = loop {
            let server: Value = http().get(&url).send().await.unwrap().json().await.unwrap();
            if server["error_message"]
                .as_str()
                .is_some_and(|e| e.contains("itself"))
            {
                break server;
            }
            assert!(
                std::time::Instant::now() < end,
                "{name} was never refused: {server}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_ne!(seen["status"], "CONNECTED", "{seen}");
        assert_eq!(seen["tool_count"], 0, "{seen}");
    }
    let state: Value = http()
        .get(d.api("/api/v1/aggregator/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["total_tools"], 0, "{state}");
}

/// Connections kept alive with a cheap request every few seconds, as many
/// as the listener takes, do not keep the owner out: at the cap, served
/// keep-alive connections are closed to make room.
#[tokio::test(flavor = "multi_thread")]
async fn keep_alive_connections_cannot_hold_the_listener_against_the_owner() {
    use std::io::{Read as _, Write as _};
    use std::sync::atomic::{AtomicBool, Ordering};
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let d = Daemon::start_in(
        &data_dir,
        &[
            "--require-token",
            "--max-connections",
            "8",
            "--header-timeout",
            "120",
        ],
    );
    let admin = std::fs::read_to_string(data_dir.join("admin.token")).unwrap();
    let address = d.url.trim_start_matches("http://").to_owned();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..8)
        .map(|_| {
            let (address, stop) = (address.clone(), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                // Bounded: stops when told, or after 600 requests.
                let mut sent = 0;
                while !stop.load(Ordering::Relaxed) && sent < 600 {
                    let Ok(mut stream) = std::net::TcpStream::connect(&address) else {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut buffer = [0u8; 4096];
                    while !stop.load(Ordering::Relaxed) && sent < 600 {
                        let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
                        sent += 1;
                        if stream.write_all(request.as_bytes()).is_err() {
                            break;
                        }
                        match stream.read(&mut buffer) {
                            Ok(n) if n > 0 => {}
                            _ => break,
                        }
                        std::thread::sleep(Duration::from_millis(500));
                    }
                }
            })
        })
        .collect();
    // Until the hogs hold every connection.
    let _ = wait_for(Duration::from_secs(30), || {
        let log = std::fs::read_to_string(log_path(&data_dir)).unwrap_or_default();
        log.contains("connection cap reached").then_some(())
    });
    let owner = http()
        .get(d.api("/api/v1/aggregator/servers"))
        .bearer_auth(admin.trim())
        .timeout(Duration::from_secs(60))
        .send()
        .await;
    stop.store(true, Ordering::Relaxed);
    for hog in hogs {
        let _ = hog.join();
    }
    let owner = owner.expect("the owner got in while others held every connection");
    assert_eq!(owner.status(), 200);
}
