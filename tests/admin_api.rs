//! Every endpoint and error code of the admin API, over real HTTP against
//! the real binary.

mod common;

use common::{Daemon, http, stdio_server};
use reqwest::StatusCode;
use serde_json::{Value, json};

const SERVERS: &str = "/api/v1/aggregator/servers";

async fn post(d: &Daemon, body: &Value) -> (StatusCode, Value) {
    let response = http().post(d.api(SERVERS)).json(body).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(d: &Daemon, path: &str) -> (StatusCode, Value) {
    let response = http().get(d.api(path)).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn detail(body: &Value) -> &str {
    body["detail"]
        .as_str()
        .unwrap_or_else(|| panic!("no detail in {body}"))
}

#[tokio::test]
async fn register_then_read_list_and_remove() {
    let d = Daemon::start();
    let (status, created) = post(&d, &stdio_server("everything")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    for key in [
        "id",
        "name",
        "status",
        "transport_type",
        "tool_count",
        "registered_at",
    ] {
        assert!(
            created.get(key).is_some(),
            "201 body lacks {key}: {created}"
        );
    }
    assert_eq!(created["name"], "everything");
    assert_eq!(
        created["status"], "DISCONNECTED",
        "new servers start DISCONNECTED"
    );
    assert_eq!(created["transport_type"], "STDIO");
    assert_eq!(created["tool_count"], 0);
    let id = created["id"].as_str().unwrap().to_owned();

    let (status, by_id) = get(&d, &format!("{SERVERS}/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(by_id["description"], "test server");
    assert_eq!(by_id["connection_config"]["command"], "npx");
    let (status, by_name) = get(&d, &format!("{SERVERS}/everything")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(by_name["id"], id.as_str());

    let (status, list) = get(&d, SERVERS).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["name"], "everything");
    assert!(list[0].get("last_health_check").is_some());

    let (status, tools) = get(&d, &format!("{SERVERS}/{id}/tools")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(tools, json!([]), "no tools until the server is connected");

    let (status, history) = get(&d, &format!("{SERVERS}/{id}/history")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(history[0]["event_type"], "REGISTERED");

    let response = http()
        .delete(d.api(&format!("{SERVERS}/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(response.bytes().await.unwrap().is_empty());
    let (status, body) = get(&d, &format!("{SERVERS}/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(detail(&body), format!("Server not found: {id}"));
    let (_, list) = get(&d, SERVERS).await;
    assert_eq!(list, json!([]));
}

#[tokio::test]
async fn every_transport_registers_with_its_required_field() {
    let d = Daemon::start();
    let sse = json!({"name": "legacy", "transport_type": "SSE",
        "connection_config": {"url": "http://127.0.0.1:3001/sse", "headers": {"Authorization": "Bearer tok-123"}},
        "health_check_url": "http://127.0.0.1:3001/health", "auto_connect": false, "priority": 5});
    let (status, body) = post(&d, &sse).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["transport_type"], "SSE");
    assert_eq!(body["priority"], 5);
    assert_eq!(body["auto_connect"], false);
    assert_eq!(body["health_check_url"], "http://127.0.0.1:3001/health");

    let http_server = json!({"name": "remote", "transport_type": "HTTP",
        "connection_config": {"base_url": "http://127.0.0.1:3002/mcp"}});
    let (status, body) = post(&d, &http_server).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["auto_connect"], true, "auto_connect defaults to true");
    assert_eq!(
        body["connection_config"]["base_url"],
        "http://127.0.0.1:3002/mcp"
    );
}

#[tokio::test]
async fn secrets_are_never_echoed() {
    let d = Daemon::start();
    let sse = json!({"name": "legacy", "transport_type": "SSE",
        "connection_config": {"url": "http://127.0.0.1:3001/sse", "headers": {"Authorization": "Bearer tok-123"}}});
    let (_, created) = post(&d, &sse).await;
    let (_, stdio) = post(&d, &stdio_server("local")).await;
    let (_, list) = get(&d, &format!("{SERVERS}?include_tools=true")).await;
    let (_, one) = get(&d, &format!("{SERVERS}/local")).await;
    for body in [&created, &stdio, &list, &one] {
        let text = body.to_string();
        assert!(
            !text.contains("tok-123") && !text.contains("k-secret-123"),
            "secret leaked: {text}"
        );
    }
    assert_eq!(
        created["connection_config"]["headers"]["Authorization"],
        "***"
    );
    assert_eq!(
        one["connection_config"]["env"]["API_KEY"], "***",
        "keys are shown, values are not"
    );
    assert_eq!(
        list[0]["tools"],
        json!([]),
        "include_tools adds the tool list"
    );
}

#[tokio::test]
async fn validation_errors_are_422_with_a_detail() {
    let d = Daemon::start();
    let base = stdio_server("ok");
    let with = |key: &str, value: Value| {
        let mut body = base.clone();
        body[key] = value;
        body
    };
    let without = |key: &str| {
        let mut body = base.clone();
        body.as_object_mut().unwrap().remove(key);
        body
    };
    let cases = [
        (with("name", json!("GitHub")), "name"),
        (with("name", json!("1abc")), "name"),
        (with("name", json!("a.b")), "name"),
        (with("name", json!("ünï")), "name"),
        (with("name", json!("")), "name"),
        (with("name", json!("a".repeat(256))), "name"),
        (with("name", json!(42)), "name"),
        (without("name"), "name"),
        (without("transport_type"), "transport_type"),
        (with("transport_type", json!("WEBSOCKET")), "transport_type"),
        (without("connection_config"), "connection_config"),
        (with("connection_config", json!({"args": []})), "command"),
        (
            with("connection_config", json!({"command": ""})),
            "connection_config.command",
        ),
        (
            with("connection_config", json!({"command": "x", "args": "-y"})),
            "connection_config.args",
        ),
        (
            with(
                "connection_config",
                json!({"command": "x", "url": "http://h"}),
            ),
            "url",
        ),
        (with("description", json!("d".repeat(1001))), "description"),
        (
            with("health_check_url", json!("not a url")),
            "health_check_url",
        ),
        (with("auto_connect", json!("yes")), "auto_connect"),
        (with("priority", json!("high")), "priority"),
        (with("unknown_field", json!(1)), "unknown_field"),
    ];
    for (body, mentions) in cases {
        let (status, response) = post(&d, &body).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body} -> {response}"
        );
        assert!(
            detail(&response).contains(mentions),
            "{body}: detail {:?} should mention {mentions}",
            detail(&response)
        );
    }
    let sse_without_url =
        json!({"name": "s", "transport_type": "SSE", "connection_config": {"headers": {}}});
    let (status, response) = post(&d, &sse_without_url).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(detail(&response).contains("url"), "{response}");
    let http_with_url = json!({"name": "h", "transport_type": "HTTP", "connection_config": {"url": "http://h/mcp"}});
    let (status, response) = post(&d, &http_with_url).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(detail(&response).contains("base_url"), "{response}");

    let (_, list) = get(&d, SERVERS).await;
    assert_eq!(list, json!([]), "nothing invalid was stored");
}

#[tokio::test]
async fn malformed_and_oversized_bodies_are_refused_and_nothing_is_lost() {
    let d = Daemon::start();
    let (status, _) = post(&d, &stdio_server("keep")).await;
    assert_eq!(status, StatusCode::CREATED);

    let send = |body: Vec<u8>| {
        http()
            .post(d.api(SERVERS))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for raw in [
        &b"{\"name\": \"x\","[..],
        b"not json",
        b"",
        b"[1,2]",
        b"null",
        b"{\"name\":\"x\"} trailing",
        b"\xff\xfe",
    ] {
        let response = send(raw.to_vec()).await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{:?} -> {body}",
            String::from_utf8_lossy(raw)
        );
        assert!(!detail(&body).is_empty());
    }

    let mut huge = stdio_server("huge");
    huge["description"] = json!("x".repeat(2 * 1024 * 1024));
    let response = send(serde_json::to_vec(&huge).unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = response.json().await.unwrap();
    assert!(detail(&body).contains("limit"), "{body}");

    let (status, list) = get(&d, SERVERS).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        list.as_array().unwrap().len(),
        1,
        "the stored server survived: {list}"
    );
    assert_eq!(list[0]["name"], "keep");
}

#[tokio::test]
async fn duplicates_unknowns_and_wrong_methods() {
    let d = Daemon::start();
    assert_eq!(post(&d, &stdio_server("dup")).await.0, StatusCode::CREATED);
    let (status, body) = post(&d, &stdio_server("dup")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body, json!({"detail": "Server already exists: dup"}));

    for path in [
        format!("{SERVERS}/nope"),
        format!("{SERVERS}/nope/tools"),
        format!("{SERVERS}/nope/history"),
        format!("{SERVERS}/00000000-0000-0000-0000-000000000000"),
    ] {
        let (status, body) = get(&d, &path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(detail(&body).starts_with("Server not found"), "{body}");
    }
    let response = http()
        .delete(d.api(&format!("{SERVERS}/nope")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body: Value = response.json().await.unwrap();
    assert_eq!(detail(&body), "Server not found: nope");

    let (status, body) = get(&d, "/api/v1/nothing-here").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(detail(&body).contains("/api/v1/nothing-here"));

    let response = http().put(d.api(SERVERS)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let body: Value = response.json().await.unwrap();
    assert!(detail(&body).contains("PUT"));

    let (status, body) = get(&d, &format!("{SERVERS}?status=RUNNING")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(detail(&body).contains("RUNNING"));
    let (status, _) = get(&d, &format!("{SERVERS}?include_tools=maybe")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn list_filters_by_status() {
    let d = Daemon::start();
    post(&d, &stdio_server("a")).await;
    post(&d, &stdio_server("b")).await;
    let (_, disconnected) = get(&d, &format!("{SERVERS}?status=DISCONNECTED")).await;
    assert_eq!(disconnected.as_array().unwrap().len(), 2);
    let (_, connected) = get(&d, &format!("{SERVERS}?status=connected")).await;
    assert_eq!(connected, json!([]));
}

#[tokio::test]
async fn state_counts_servers_by_status() {
    let d = Daemon::start();
    let (status, state) = get(&d, "/api/v1/aggregator/state").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(state["total_servers"], 0);
    for name in ["a", "b", "c"] {
        post(&d, &stdio_server(name)).await;
    }
    let (_, state) = get(&d, "/api/v1/aggregator/state").await;
    assert_eq!(state["total_servers"], 3);
    assert_eq!(state["disconnected_servers"], 3);
    assert_eq!(state["connected_servers"], 0);
    assert_eq!(state["error_servers"], 0);
    assert_eq!(state["total_tools"], 0);
    assert_eq!(state["classified_tools"], 0);
    assert_eq!(state["unclassified_tools"], 0);
    assert!(state.get("last_sync").is_some());
}

#[tokio::test]
async fn audit_log_records_who_did_what() {
    let d = Daemon::start();
    post(&d, &stdio_server("a")).await;
    post(&d, &stdio_server("a")).await;
    http()
        .delete(d.api(&format!("{SERVERS}/a")))
        .send()
        .await
        .unwrap();
    let (status, audit) = get(&d, "/api/v1/aggregator/audit").await;
    assert_eq!(status, StatusCode::OK);
    let actions: Vec<(&str, &str)> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["result"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("remove", "ok"),
            ("register", "Server already exists: a"),
            ("register", "ok")
        ]
    );
    assert_eq!(audit[0]["actor"], "api:127.0.0.1");
    assert!(audit[0]["timestamp"].is_string());
}

#[tokio::test]
async fn healthz_answers() {
    let d = Daemon::start();
    let (status, body) = get(&d, "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
}

/// The OpenAPI document lists exactly the routes that exist: every
/// documented operation answers (not with the router's 404/405), and every
/// route we serve is documented.
#[tokio::test]
async fn openapi_document_matches_the_routes() {
    let d = Daemon::start();
    let (status, doc) = get(&d, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    let mut documented = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            documented.push((method.to_uppercase(), path.clone()));
        }
    }
    documented.sort();
    let expected = [
        ("DELETE", "/api/v1/aggregator/servers/{id}"),
        ("DELETE", "/api/v1/aggregator/tokens/{name}"),
        ("DELETE", "/api/v1/profiles/{name}"),
        ("DELETE", "/api/v1/skills/suggestions/{id}"),
        ("DELETE", "/api/v1/skills/{id}"),
        ("GET", "/api/v1/aggregator/audit"),
        ("GET", "/api/v1/aggregator/cache"),
        ("GET", "/api/v1/aggregator/conflicts"),
        ("GET", "/api/v1/aggregator/servers"),
        ("GET", "/api/v1/aggregator/servers/{id}"),
        ("GET", "/api/v1/aggregator/servers/{id}/history"),
        ("GET", "/api/v1/aggregator/servers/{id}/tools"),
        ("GET", "/api/v1/aggregator/state"),
        ("GET", "/api/v1/aggregator/tokens"),
        ("GET", "/api/v1/aggregator/tools/held"),
        ("GET", "/api/v1/aggregator/tools/{id}/changes"),
        ("GET", "/api/v1/profiles"),
        ("GET", "/api/v1/profiles/{name}"),
        ("GET", "/api/v1/search/status"),
        ("GET", "/api/v1/skills"),
        ("GET", "/api/v1/skills/status"),
        ("GET", "/api/v1/skills/suggestions"),
        ("GET", "/api/v1/skills/{id}"),
        ("GET", "/api/v1/skills/{id}/tools"),
        ("GET", "/healthz"),
        ("GET", "/metrics"),
        ("GET", "/oauth/callback"),
        ("POST", "/api/v1/aggregator/servers"),
        ("POST", "/api/v1/aggregator/servers/{id}/connect"),
        ("POST", "/api/v1/aggregator/servers/{id}/disconnect"),
        ("POST", "/api/v1/aggregator/servers/{id}/login"),
        ("POST", "/api/v1/aggregator/servers/{id}/logout"),
        ("POST", "/api/v1/aggregator/tokens"),
        ("POST", "/api/v1/aggregator/tools/{id}/approve"),
        ("POST", "/api/v1/aggregator/tools/{id}/reject"),
        ("POST", "/api/v1/search"),
        ("POST", "/api/v1/search/reindex"),
        ("POST", "/api/v1/skills"),
        ("POST", "/api/v1/skills/reclassify"),
        ("POST", "/api/v1/skills/suggestions/{id}/accept"),
        ("POST", "/api/v1/tools/call"),
        ("PUT", "/api/v1/profiles/{name}"),
        ("PUT", "/api/v1/skills/{id}"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, expected);

    // Every documented operation is routed: it answers with a documented
    // status or a {"detail"} of its own, never the fallback's.
    for (method, path) in &documented {
        let concrete = path.replace("{id}", "no-such-server");
        let response = http()
            .request(method.parse().unwrap(), d.api(&concrete))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status == StatusCode::NOT_FOUND {
            assert!(
                !detail(&body).starts_with("Not Found:"),
                "{method} {path} fell through to the router's 404: {body}"
            );
        }
        let documented_codes = paths[path.as_str()][method.to_lowercase()]["responses"]
            .as_object()
            .unwrap();
        assert!(
            documented_codes.contains_key(status.as_str()),
            "{method} {path} answered {status}, not documented"
        );
    }
    assert!(doc["components"]["schemas"]["ServerView"].is_object());
    assert!(doc["components"]["schemas"]["RegisterServerRequest"].is_object());
}

/// Profiles: added (201), replaced (200), read with the tools the view
/// lists, listed, removed (204); bad names, patterns and bodies are 422,
/// a missing one 404, each with a detail; the audit log has each change.
#[tokio::test]
async fn profiles_are_added_read_replaced_and_removed() {
    let d = Daemon::start();
    let put = |name: &str, body: Value| {
        let url = d.api(&format!("/api/v1/profiles/{name}"));
        async move {
            let response = http().put(url).json(&body).send().await.unwrap();
            let status = response.status();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, created) = put(
        "coding",
        json!({"servers": ["git*"], "exclude_tools": ["*.delete_*"]}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["name"], "coding");
    assert_eq!(created["mcp_path"], "/mcp/coding");
    assert_eq!(
        created["visible_tools"],
        json!([]),
        "no server is connected"
    );
    assert!(
        created.get("source").is_none(),
        "added through the API: {created}"
    );

    let (status, replaced) = put("coding", json!({"tools": ["github.*"]})).await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    let (status, read) = get(&d, "/api/v1/profiles/coding").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read["tools"], json!(["github.*"]));
    assert!(read.get("servers").is_none(), "replaced whole: {read}");
    let (status, listed) = get(&d, "/api/v1/profiles").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");

    for (name, body, wanted) in [
        ("Bad Name", json!({}), "name"),
        ("ok", json!({"tools": [""]}), "tools[0]"),
        ("ok", json!({"servers": "github"}), "servers"),
        ("ok", json!({"unknown": true}), "unknown"),
        ("ok", json!({"tools": vec!["x"; 1001]}), "tools"),
    ] {
        let (status, body) = put(name, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{name}: {body}");
        assert!(detail(&body).contains(wanted), "{name}: {body}");
    }
    let (status, missing) = get(&d, "/api/v1/profiles/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(detail(&missing), "Profile not found: nope");

    let url = d.api("/api/v1/profiles/coding");
    let deleted = http().delete(&url).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let again = http().delete(&url).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
    let (_, audit) = get(&d, "/api/v1/aggregator/audit?server=profile:coding").await;
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        ["profile_delete", "profile_put", "profile_put"],
        "{audit}"
    );
}
