//! Logging in to a remote server that needs one, against a real
//! authorization server (the official TypeScript SDK's `mcpAuthRouter`,
//! `tests/conformance/oauth_server.mjs`): the login through the daemon's
//! callback, refresh across an expiry under 50 concurrent calls (one
//! refresh), a revoked grant → needs login → login → calls again, a
//! client the server forgot registered again, and no token or secret in
//! plain text in the API, the log, the audit trail or the store file; a
//! device login (RFC 8628) for a box without a browser.

mod common;

use common::{Daemon, http, http_test_server, rest_call, wait_status};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

/// The access tokens' lifetime: long enough that fifty calls fit well
/// inside the quarter of it before expiry when they are refreshed.
const TOKEN_SECONDS: u64 = 20;

fn oauth_server() -> (common::Reaped, String) {
    let mut command = Command::new(common::node22());
    command
        .arg(common::conformance_dir().join("oauth_server.mjs"))
        .args(["--token-seconds", &TOKEN_SECONDS.to_string()]);
    let (server, port) = http_test_server(command);
    (server, format!("http://127.0.0.1:{port}"))
}

async fn server_record(d: &Daemon, name: &str) -> Value {
    common::get_json(&d.api(&format!("/api/v1/aggregator/servers/{name}"))).await
}

/// Waits until the server shows an authorization URL, and opens it as a
/// browser would (the authorization server approves at once and sends the
/// browser back to the daemon's callback); the callback's page.
async fn log_in(d: &Daemon, name: &str) -> String {
    let end = Instant::now() + Duration::from_secs(60);
    let url = loop {
        let record = server_record(d, name).await;
        if let Some(url) = record["auth"]["authorization_url"].as_str() {
            assert_eq!(record["auth"]["state"], "needs_login", "{record}");
            break url.to_owned();
        }
        assert!(
            Instant::now() < end,
            "{name} never asked for a login: {record}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let page = http()
        .get(&url)
        .send()
        .await
        .expect("open the authorization URL");
    assert_eq!(page.status(), 200, "the callback refused the login");
    page.text().await.unwrap_or_default()
}

async fn stats(base: &str) -> Value {
    common::get_json(&format!("{base}/test/stats")).await
}

async fn control(base: &str, what: &str) {
    let response = http()
        .post(format!("{base}/test/{what}"))
        .send()
        .await
        .expect("the test control answers");
    assert!(response.status().is_success());
}

async fn call_ok(d: &Daemon) -> String {
    let (status, body) = rest_call(d, "remote__whoami", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_ne!(body["isError"], true, "{body}");
    body["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A pending login's URL carries its single-use state: whoever opens it
/// binds the server to the account they sign in with. A read-only token
/// sees that a login is needed, not the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_token_is_not_shown_a_pending_logins_url() {
    let (_server, base) = oauth_server();
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let d = Daemon::start_in(&data_dir, &["--require-token"]);
    let admin = std::fs::read_to_string(data_dir.join("admin.token")).unwrap();
    let (code, out, err) = common::cli(
        &data_dir,
        &["tokens", "create", "reader", "--scope", "read"],
    );
    assert_eq!(code, 0, "{err}");
    let reader = out.trim().to_owned();
    let registered = http()
        .post(d.api("/api/v1/aggregator/servers"))
        .bearer_auth(admin.trim())
        .json(&json!({"name": "remote", "transport_type": "HTTP",
               "connection_config": {"base_url": format!("{base}/mcp")}}))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 201);
    let seen_by = |token: String| {
        let url = d.api("/api/v1/aggregator/servers/remote");
        async move {
            http()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let end = Instant::now() + Duration::from_secs(60);
    while seen_by(admin.trim().to_owned()).await["auth"]["authorization_url"].is_null() {
        assert!(Instant::now() < end, "no login was asked for");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let read = seen_by(reader.clone()).await;
    assert_eq!(read["auth"]["state"], "needs_login", "{read}");
    assert!(read["auth"].get("authorization_url").is_none(), "{read}");
    let listed: Value = http()
        .get(d.api("/api/v1/aggregator/servers"))
        .bearer_auth(&reader)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        listed[0]["auth"].get("authorization_url").is_none()
            && !listed.to_string().contains("state="),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_keeps_working_through_expiry_revocation_and_a_forgotten_client() {
    let (_server, base) = oauth_server();
    let d = Daemon::start();
    common::register(
        &d,
        json!({"name": "remote", "transport_type": "HTTP",
               "connection_config": {"base_url": format!("{base}/mcp")}}),
    )
    .await;

    // Refused at first: a login is asked for, and the server waits for it
    // (no retry loop of 401s) with an error that names the command.
    let page = log_in(&d, "remote").await;
    assert!(page.contains("logged in to <b>remote</b>"), "{page}");
    let record = wait_status(&d, "remote", "CONNECTED", Duration::from_secs(30)).await;
    assert_eq!(record["auth"]["state"], "authorized", "{record}");
    assert!(
        record["auth"].get("authorization_url").is_none(),
        "{record}"
    );
    let first_client = call_ok(&d).await;
    let after_login = stats(&base).await;
    assert_eq!(after_login["registrations"], 1, "{after_login}");
    assert_eq!(after_login["codeExchanges"], 1, "{after_login}");
    assert_eq!(after_login["refreshes"], 0, "{after_login}");

    // Near the access token's expiry, fifty calls at once: one refresh.
    let expires_at: chrono::DateTime<chrono::Utc> = record["auth"]["expires_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("the expiry is shown");
    let refresh_window = chrono::Duration::milliseconds((TOKEN_SECONDS * 250) as i64);
    while chrono::Utc::now() < expires_at - refresh_window + chrono::Duration::milliseconds(200) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let d_url = d.url.clone();
            tokio::spawn(async move {
                let response = http()
                    .post(format!("{d_url}/api/v1/tools/call"))
                    .json(&json!({"name": "remote__whoami", "arguments": {}}))
                    .timeout(Duration::from_secs(120))
                    .send()
                    .await
                    .expect("POST /tools/call");
                let status = response.status().as_u16();
                (
                    status,
                    response.json::<Value>().await.unwrap_or(Value::Null),
                )
            })
        })
        .collect();
    for call in calls {
        let (status, body) = call.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_ne!(body["isError"], true, "{body}");
    }
    let after_burst = stats(&base).await;
    assert_eq!(
        after_burst["refreshes"], 1,
        "one refresh for fifty calls: {after_burst}"
    );
    assert_eq!(after_burst["refused"], 0, "{after_burst}");

    // Every grant revoked: the refresh is refused, the call says to log
    // in (no endless 401s), and a login brings the server back.
    control(&base, "revoke-all").await;
    let (status, body) = rest_call(&d, "remote__whoami", json!({})).await;
    assert_eq!(status, 503, "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("mcp-aggregator login remote"), "{body}");
    log_in(&d, "remote").await;
    assert_eq!(
        call_ok(&d).await,
        first_client,
        "the same registered client"
    );
    let after_relogin = stats(&base).await;
    assert_eq!(after_relogin["registrations"], 1, "{after_relogin}");

    // The authorization server forgot its clients: the stored one is
    // refused, and the next login registers again.
    control(&base, "forget-clients").await;
    control(&base, "revoke-all").await;
    let (status, _) = rest_call(&d, "remote__whoami", json!({})).await;
    assert_eq!(status, 503);
    log_in(&d, "remote").await;
    let second_client = call_ok(&d).await;
    assert_ne!(second_client, first_client, "a new client was registered");
    let after_reregistration = stats(&base).await;
    assert_eq!(
        after_reregistration["registrations"], 2,
        "{after_reregistration}"
    );

    // A pre-registered client's secret, beside what the server issued.
    let secret = "pre-registered-secret-4c1f9e";
    let pre = common::register(
        &d,
        json!({"name": "pre", "transport_type": "HTTP", "auto_connect": false,
               "connection_config": {"base_url": format!("{base}/mcp")},
               "oauth": {"client_id": "pre-client", "client_secret": secret}}),
    )
    .await;
    assert_eq!(pre["oauth"]["client_secret"], "***", "{pre}");

    // Logout forgets (and revokes) the grant.
    let out = common::post_json(
        &d.api("/api/v1/aggregator/servers/remote/logout"),
        &json!({}),
    )
    .await;
    assert_eq!(out["logged_out"], true, "{out}");

    // The next call meets a refusal that starts a login (registering a
    // client); the user's own `login` then uses that client, not another.
    let (status, _) = rest_call(&d, "remote__whoami", json!({})).await;
    assert_eq!(status, 503);
    let asked = common::post_json(
        &d.api("/api/v1/aggregator/servers/remote/login"),
        &json!({}),
    )
    .await;
    assert!(asked["authorization_url"].is_string(), "{asked}");
    log_in(&d, "remote").await;
    call_ok(&d).await;
    let after_logout = stats(&base).await;
    assert_eq!(
        after_logout["registrations"], 3,
        "one registration for the login after logout: {after_logout}"
    );

    // No token or secret anywhere in plain text.
    let mut secrets: Vec<String> = stats(&base).await["issued"]
        .as_array()
        .expect("issued")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    secrets.push(secret.to_owned());
    assert!(secrets.len() > 4);
    let servers: Value = common::get_json(&d.api("/api/v1/aggregator/servers")).await;
    let audit: Value = common::get_json(&d.api("/api/v1/aggregator/audit?limit=10000")).await;
    let mut d = d;
    d.terminate(Duration::from_secs(20));
    let log = std::fs::read_to_string(common::log_path(&d.data_dir)).unwrap_or_default();
    let store = std::fs::read(d.data_dir.join("store.redb")).expect("the store file");
    for secret in &secrets {
        for (place, text) in [
            ("the API", servers.to_string()),
            ("the audit trail", audit.to_string()),
            ("the log", log.clone()),
        ] {
            assert!(!text.contains(secret.as_str()), "{secret} in {place}");
        }
        assert!(
            !store.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} in the store file"
        );
    }
}

/// A pre-registered client belongs to one authorization server: a server
/// naming another (here: its own, where the client was configured for
/// `https://login.example.com`) gets no login with its id and secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_registered_client_goes_to_its_own_authorization_server_only() {
    let (_server, base) = oauth_server();
    let d = Daemon::start();
    common::register(
        &d,
        json!({"name": "pre", "transport_type": "HTTP",
               "connection_config": {"base_url": format!("{base}/mcp")},
               "oauth": {"client_id": "pre-client", "client_secret": "pre-secret",
                         "issuer": "https://login.example.com"}}),
    )
    .await;
    let end = Instant::now() + Duration::from_secs(60);
    let auth = loop {
        let record = server_record(&d, "pre").await;
        if record["auth"]["state"] == "failed" {
            break record["auth"].clone();
        }
        assert!(
            record["auth"]["authorization_url"].is_null(),
            "a login was offered with the client of another server: {record}"
        );
        assert!(Instant::now() < end, "the login never failed: {record}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let detail = auth["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("https://login.example.com") && detail.contains("not sent elsewhere"),
        "{auth}"
    );
    assert_eq!(stats(&base).await["codeExchanges"], 0);
}

/// Without `oauth.issuer`, a pre-registered client belongs to the
/// authorization server of its first login, and stays so after a logout:
/// a server that then names another gets no login with its secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_registered_client_stays_with_its_first_authorization_server_after_logout() {
    let (_server, base) = oauth_server();
    let (_foreign, foreign) = oauth_server();
    let d = Daemon::start();
    let preregistered = http()
        .post(format!("{base}/test/preregister"))
        .json(
            &json!({"client_id": "pre-client", "client_secret": "pre-secret",
                      "redirect_uris": [d.api("/oauth/callback")]}),
        )
        .send()
        .await
        .expect("the authorization server answers");
    assert!(preregistered.status().is_success());
    common::register(
        &d,
        json!({"name": "pre", "transport_type": "HTTP",
               "connection_config": {"base_url": format!("{base}/mcp")},
               "oauth": {"client_id": "pre-client", "client_secret": "pre-secret"}}),
    )
    .await;
    log_in(&d, "pre").await;
    wait_status(&d, "pre", "CONNECTED", Duration::from_secs(60)).await;
    assert_eq!(stats(&base).await["codeExchanges"], 1);

    let renamed = http()
        .post(format!("{base}/test/name-issuer"))
        .json(&json!({"url": format!("{foreign}/")}))
        .send()
        .await
        .expect("the test control answers");
    assert!(renamed.status().is_success());
    let out = common::post_json(&d.api("/api/v1/aggregator/servers/pre/logout"), &json!({})).await;
    assert_eq!(out["logged_out"], true, "{out}");
    let again =
        common::post_json(&d.api("/api/v1/aggregator/servers/pre/logout"), &json!({})).await;
    assert_eq!(
        again["logged_out"], false,
        "nothing was held any more: {again}"
    );

    for device in [false, true] {
        let started = http()
            .post(d.api("/api/v1/aggregator/servers/pre/login"))
            .json(&json!({"device": device}))
            .send()
            .await
            .expect("the daemon answers");
        let status = started.status().as_u16();
        let body: Value = started.json().await.unwrap_or(Value::Null);
        let record = server_record(&d, "pre").await;
        assert!(
            record["auth"]["authorization_url"].is_null(),
            "a login was offered with the client of another server: {status} {body} {record}"
        );
        let said = format!("{body} {}", record["auth"]);
        assert!(said.contains("not sent elsewhere"), "{status} {said}");
    }
    let foreign_stats = stats(&foreign).await;
    assert_eq!(foreign_stats["clientSecretsReceived"], 0, "{foreign_stats}");
    assert_eq!(foreign_stats["registrations"], 0, "{foreign_stats}");
}

/// A box without a browser: `login --device` shows a URL and a code to
/// use on another device; the daemon polls until the user approved, and
/// the server connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_login_connects_a_server_on_a_box_without_a_browser() {
    let (_server, base) = oauth_server();
    let d = Daemon::start();
    common::register(
        &d,
        json!({"name": "remote", "transport_type": "HTTP",
               "connection_config": {"base_url": format!("{base}/mcp")}}),
    )
    .await;
    let started = common::post_json(
        &d.api("/api/v1/aggregator/servers/remote/login"),
        &json!({"device": true}),
    )
    .await;
    let code = started["user_code"]
        .as_str()
        .expect("a user code")
        .to_owned();
    let url = started["authorization_url"]
        .as_str()
        .expect("a URL")
        .to_owned();
    assert!(url.starts_with(&format!("{base}/device")), "{started}");
    let record = server_record(&d, "remote").await;
    assert_eq!(record["auth"]["state"], "needs_login", "{record}");
    assert_eq!(record["auth"]["user_code"], code.as_str(), "{record}");
    let (code_cli, listed, _) = common::cli(&d.data_dir, &["servers", "list"]);
    assert_eq!(code_cli, 0);
    assert!(
        listed.contains("needs login (mcp-aggregator login remote)"),
        "{listed}"
    );
    let (_, shown, _) = common::cli(&d.data_dir, &["servers", "show", "remote"]);
    assert!(shown.contains(&code), "the code to type is shown: {shown}");
    // Not logged in before the user approves (the daemon keeps polling).
    assert_eq!(stats(&base).await["codeExchanges"], 0);
    // "The user" approves on another device.
    let approved = http().get(&url).send().await.expect("approve");
    assert!(approved.status().is_success());
    let record = wait_status(&d, "remote", "CONNECTED", Duration::from_secs(60)).await;
    assert_eq!(record["auth"]["state"], "authorized", "{record}");
    assert!(record["auth"].get("user_code").is_none(), "{record}");
    call_ok(&d).await;
    assert_eq!(stats(&base).await["codeExchanges"], 1);
}
