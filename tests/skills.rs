//! Skills end to end through the real binary, the real model and a real
//! server (`server-everything` over stdio, and our fixture): tools are
//! classified in the background, results and tool lists carry
//! their skills, searches filter by skill, the taxonomy is edited
//! through the API and the CLI (built-in skills are hidden, never lost),
//! reclassification, skill vectors following membership and the
//! suggestion queue for tools that fit no skill.

mod common;

use common::{
    Daemon, cli, everything_js, get_json, http, register, wait_index_settled, wait_status,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
const UP: Duration = Duration::from_secs(90);

fn everything(name: &str) -> Value {
    json!({"name": name, "transport_type": "STDIO",
           "connection_config": {"command": "node", "args": [everything_js().to_str().unwrap(), "stdio"]}})
}

async fn send(method: reqwest::Method, url: String, body: Option<Value>) -> (u16, Value) {
    let mut request = http().request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Polls the classification status until every tool of the catalog went
/// through classification with the classifier `check` accepts.
async fn wait_classified(d: &Daemon, total: u64, check: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + UP;
    loop {
        let status: Value = get_json(&d.api("/api/v1/skills/status")).await;
        if status["classified"] == total
            && status["discovered"] == 0
            && status["classifying"] == 0
            && check(&status)
        {
            return status;
        }
        assert!(
            Instant::now() < end,
            "classification did not settle: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn skills_of(tool: &Value) -> Vec<String> {
    tool["skill_ids"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn tools_are_classified_in_the_background_and_found_by_skill() {
    let d = Daemon::start();
    register(&d, everything("everything")).await;
    wait_status(&d, "everything", "CONNECTED", UP).await;
    // CONNECTED comes before the first listing is stored.
    wait_listed(&d, "everything", 10).await;
    wait_index_settled(&d).await;
    let tools: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers/everything/tools")).await;
    let total = tools.len() as u64;
    assert!(total >= 10, "{total} tools");
    let status = wait_classified(&d, total, |_| true).await;
    assert!(
        status["classifier"]
            .as_str()
            .unwrap()
            .starts_with("local:v"),
        "{status}"
    );

    // 1–3 skills at ≥ 0.5, highest first, the first is primary.
    let tools: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers/everything/tools")).await;
    let mut with_skills = 0;
    for tool in &tools {
        assert_eq!(tool["classification_state"], "CLASSIFIED", "{tool}");
        assert_eq!(tool["is_classified"], true, "{tool}");
        let skills = tool["skills"].as_array().unwrap();
        assert!(skills.len() <= 3, "{tool}");
        let confidences: Vec<f64> = skills
            .iter()
            .map(|s| s["confidence"].as_f64().unwrap())
            .collect();
        assert!(
            confidences.iter().all(|c| (0.5..=1.0).contains(c)),
            "{tool}"
        );
        assert!(confidences.windows(2).all(|w| w[0] >= w[1]), "{tool}");
        assert_eq!(
            skills_of(tool),
            skills
                .iter()
                .map(|s| s["skill_id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        );
        match skills.first() {
            Some(first) => {
                with_skills += 1;
                assert_eq!(tool["primary_skill_id"], first["skill_id"], "{tool}");
            }
            None => assert!(tool["primary_skill_id"].is_null(), "{tool}"),
        }
    }
    assert!(
        with_skills >= total / 2,
        "only {with_skills} of {total} tools have a skill"
    );
    let sum = tools
        .iter()
        .find(|t| t["original_name"] == "get-sum")
        .unwrap();
    assert_eq!(sum["primary_skill_id"], "math_calculation", "{sum}");

    // Search results carry the skills; a skill filter keeps only
    // tools with one of its skills; an unknown skill is refused.
    let (code, answer) = send(
        reqwest::Method::POST,
        d.api("/api/v1/search"),
        Some(json!({"query": "add two numbers", "limit": 3})),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["tools"][0]["name"], "everything.get-sum", "{answer}");
    assert_eq!(answer["tools"][0]["primary_skill_id"], "math_calculation");
    let (code, answer) = send(
        reqwest::Method::POST,
        d.api("/api/v1/search"),
        Some(json!({"query": "echo a message", "skill_filter": ["math_calculation"]})),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    let found = answer["tools"].as_array().unwrap();
    assert!(!found.is_empty(), "{answer}");
    assert!(
        found
            .iter()
            .all(|t| skills_of(t).contains(&"math_calculation".to_owned())),
        "{answer}"
    );
    let (code, answer) = send(
        reqwest::Method::POST,
        d.api("/api/v1/search"),
        Some(json!({"query": "echo", "skill_filter": ["no_such_skill"]})),
    )
    .await;
    assert_eq!(code, 422, "{answer}");
    assert!(answer["detail"].as_str().unwrap().contains("no_such_skill"));

    // A skill's tools, its count and its vector (the members' mean).
    let members: Vec<Value> = get_json(&d.api("/api/v1/skills/math_calculation/tools")).await;
    assert!(members.iter().any(|t| t["id"] == "everything.get-sum"));
    let skill: Value = get_json(&d.api("/api/v1/skills/math_calculation")).await;
    assert_eq!(skill["tool_count"], members.len(), "{skill}");
    assert_eq!(skill["vector"], "tools", "{skill}");
    let state: Value = get_json(&d.api("/api/v1/aggregator/state")).await;
    assert_eq!(state["classified_tools"], total, "{state}");
    assert_eq!(state["unclassified_tools"], 0, "{state}");

    // The CLI shows the same.
    let (code, out, err) = cli(&d.data_dir, &["skills", "tools", "math_calculation"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("everything.get-sum"), "{out}");
    let (code, out, err) = cli(
        &d.data_dir,
        &[
            "search",
            "add two numbers",
            "--skill",
            "math_calculation",
            "--limit",
            "1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("everything.get-sum") && out.contains("math_calculation"),
        "{out}"
    );

    // Removing the server empties the skill; its vector falls
    // back to its description.
    let (code, _) = send(
        reqwest::Method::DELETE,
        d.api("/api/v1/aggregator/servers/everything"),
        None,
    )
    .await;
    assert_eq!(code, 204);
    let end = Instant::now() + UP;
    loop {
        let skill: Value = get_json(&d.api("/api/v1/skills/math_calculation")).await;
        if skill["tool_count"] == 0 && skill["vector"] == "description" {
            break;
        }
        assert!(Instant::now() < end, "the skill kept its members: {skill}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_taxonomy_is_edited_and_built_in_skills_are_hidden_not_lost() {
    let mut d = Daemon::start();
    let skills = d.api("/api/v1/skills");
    let listed: Vec<Value> = get_json(&skills).await;
    assert!((25..=50).contains(&listed.len()), "{}", listed.len());
    assert!(
        listed
            .iter()
            .all(|s| s["builtin"] == true && s["hidden"] == false)
    );

    let gardening = json!({"id": "gardening", "name": "Gardening", "description": "Plants, watering schedules and garden care",
                         "examples": ["when should I water the tomatoes", "prune the roses"]});
    let (code, created) = send(
        reqwest::Method::POST,
        skills.clone(),
        Some(gardening.clone()),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["builtin"], false);
    assert_eq!(created["tool_count"], 0);
    let (code, again) = send(reqwest::Method::POST, skills.clone(), Some(gardening)).await;
    assert_eq!(code, 409, "{again}");
    let (code, clash) = send(
        reqwest::Method::POST,
        skills.clone(),
        Some(json!({"id": "email", "name": "Mail", "description": "a built-in id"})),
    )
    .await;
    assert_eq!(code, 409, "{clash}");
    for bad in [
        json!({"id": "Bad Id", "name": "x", "description": "y"}),
        json!({"id": "ok_id", "name": "", "description": "y"}),
        json!({"id": "ok_id", "name": "x", "description": "y", "examples": vec!["e"; 31]}),
        json!({"id": "ok_id", "name": "x"}),
        json!({"id": "ok_id", "name": "x", "description": "y", "colour": "red"}),
    ] {
        let (code, answer) = send(reqwest::Method::POST, skills.clone(), Some(bad.clone())).await;
        assert_eq!(code, 422, "{bad} -> {answer}");
        assert!(answer["detail"].is_string(), "{answer}");
    }

    // Edit (the id comes from the path), then a mismatch is refused.
    let (code, edited) = send(
        reqwest::Method::PUT,
        format!("{skills}/gardening"),
        Some(json!({"name": "Gardening and plants", "description": "Plants, seeds, watering and garden care"})),
    )
    .await;
    assert_eq!(code, 200, "{edited}");
    assert_eq!(edited["name"], "Gardening and plants");
    let (code, _) = send(
        reqwest::Method::PUT,
        format!("{skills}/gardening"),
        Some(json!({"id": "other", "name": "x", "description": "y"})),
    )
    .await;
    assert_eq!(code, 422);
    let (code, _) = send(
        reqwest::Method::PUT,
        format!("{skills}/nope"),
        Some(json!({"name": "x", "description": "y"})),
    )
    .await;
    assert_eq!(code, 404);

    // A built-in skill: deleting hides it (200, still readable), listing
    // skips it unless asked, PUT hidden=false brings it back.
    let (code, hidden) = send(reqwest::Method::DELETE, format!("{skills}/email"), None).await;
    assert_eq!(code, 200, "{hidden}");
    assert_eq!(hidden["hidden"], true);
    let listed: Vec<Value> = get_json(&skills).await;
    assert!(listed.iter().all(|s| s["id"] != "email"));
    let all: Vec<Value> = get_json(&format!("{skills}?include_hidden=true")).await;
    assert!(
        all.iter()
            .any(|s| s["id"] == "email" && s["hidden"] == true)
    );

    // Survives a restart, as does the user skill.
    d.terminate(Duration::from_secs(10));
    let restarted = Daemon::start_in(&d.data_dir, &[]);
    let d = restarted;
    let skills = d.api("/api/v1/skills");
    let email: Value = get_json(&format!("{skills}/email")).await;
    assert_eq!(email["hidden"], true, "{email}");
    let gardening: Value = get_json(&format!("{skills}/gardening")).await;
    assert_eq!(gardening["name"], "Gardening and plants");

    // The CLI: show it again, remove the user skill (exit 2 for unknown).
    let dir = d.data_dir.as_path();
    let (code, out, err) = cli(dir, &["skills", "show-again", "email"]);
    assert_eq!(code, 0, "{out}{err}");
    let email: Value = get_json(&format!("{skills}/email")).await;
    assert_eq!(email["hidden"], false, "{email}");
    assert_eq!(email["builtin"], true, "{email}");
    let (code, out, _) = cli(dir, &["skills", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("gardening") && out.contains("email"), "{out}");
    let (code, _, err) = cli(
        dir,
        &[
            "skills",
            "add",
            "bad id",
            "--name",
            "x",
            "--description",
            "y",
        ],
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = cli(dir, &["skills", "remove", "gardening"]);
    assert_eq!(code, 0);
    let (code, _) = send(reqwest::Method::GET, format!("{skills}/gardening"), None).await;
    assert_eq!(code, 404);
    let (code, _, err) = cli(dir, &["skills", "remove", "gardening"]);
    assert_eq!(code, 2, "{err}");

    // Every edit is in the audit log.
    let audit: Vec<Value> = get_json(&d.api("/api/v1/aggregator/audit?limit=100")).await;
    let actions: Vec<&str> = audit.iter().filter_map(|e| e["action"].as_str()).collect();
    for action in ["skill_create", "skill_update", "skill_hide", "skill_delete"] {
        assert!(
            actions.contains(&action),
            "{action} missing from {actions:?}"
        );
    }
}

#[tokio::test]
async fn reclassification_follows_the_taxonomy_and_unfit_tools_are_suggested() {
    let d = Daemon::start();
    // The fixture's generated tools ("Generated tool number N") do nothing
    // a skill describes.
    register(
        &d,
        json!({"name": "fixture", "transport_type": "STDIO",
               "connection_config": {"command": FIXTURE, "args": ["--tools", "5"]}}),
    )
    .await;
    wait_status(&d, "fixture", "CONNECTED", UP).await;
    // CONNECTED comes before the first listing is stored.
    wait_listed(&d, "fixture", 5).await;
    wait_index_settled(&d).await;
    let tools: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers/fixture/tools")).await;
    let total = tools.len() as u64;
    let first = wait_classified(&d, total, |_| true).await;
    let without = first["without_skill"].as_u64().unwrap();
    assert!(without > 0, "{first}");

    // Every unfit tool is in a proposed skill, the generated ones (alike in
    // meaning) in one, with a description and examples from the tools.
    let suggestions: Vec<Value> = get_json(&d.api("/api/v1/skills/suggestions")).await;
    let queued: usize = suggestions.iter().map(|s| ids_of(s).len()).sum();
    assert_eq!(queued as u64, without, "{suggestions:?}");
    let generated = generated_suggestion(&suggestions);
    assert!(
        generated["description"]
            .as_str()
            .is_some_and(|d| d.contains("Generated tool")),
        "{generated}"
    );
    assert!(
        !generated["examples"].as_array().unwrap().is_empty(),
        "{generated}"
    );

    // A suggestion is dismissed once.
    let url = |id: u64| d.api(&format!("/api/v1/skills/suggestions/{id}"));
    let dismissed = generated["id"].as_u64().unwrap();
    let (code, _) = send(reqwest::Method::DELETE, url(dismissed), None).await;
    assert_eq!(code, 204);
    let (code, _) = send(reqwest::Method::DELETE, url(dismissed), None).await;
    assert_eq!(code, 404);

    // Reclassify on request: the server's tools are queued and done again,
    // and the tools still unfit are proposed again.
    let (code, answer) = send(
        reqwest::Method::POST,
        d.api("/api/v1/skills/reclassify"),
        Some(json!({"servers": ["fixture"]})),
    )
    .await;
    assert_eq!(code, 202, "{answer}");
    assert_eq!(answer["queued"], total);
    wait_classified(&d, total, |s| s["last_pass_tools"] == total).await;
    let (code, answer) = send(
        reqwest::Method::POST,
        d.api("/api/v1/skills/reclassify"),
        Some(json!({"servers": ["ghost"]})),
    )
    .await;
    assert_eq!(code, 404, "{answer}");
    // (The first pass classified every tool too: the proposal coming back
    // is what tells that the new pass ran.)
    let end = Instant::now() + UP;
    let suggestions = loop {
        let suggestions: Vec<Value> = get_json(&d.api("/api/v1/skills/suggestions")).await;
        if suggestions
            .iter()
            .any(|s| ids_of(s).contains(&"fixture.tool_0000".to_owned()))
        {
            break suggestions;
        }
        assert!(
            Instant::now() < end,
            "the unfit tools were not proposed again: {suggestions:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let proposed = generated_suggestion(&suggestions)["id"].as_u64().unwrap();
    assert_ne!(proposed, dismissed, "a dismissed suggestion's id came back");

    // The CLI lists proposals with their descriptions; an unknown one is
    // exit 2.
    let dir = d.data_dir.as_path();
    let (code, out, err) = cli(dir, &["skills", "suggestions"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("DESCRIPTION") && out.contains("Generated tool"),
        "{out}"
    );
    let (code, out, err) = cli(dir, &["skills", "accept", "9999"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("not found"), "{err}");

    // Accepting it adds the proposed skill (here with our own id): the
    // taxonomy changes, every tool is classified again under the new
    // classifier, and the generated tools now fit it.
    let accept = |id: u64| d.api(&format!("/api/v1/skills/suggestions/{id}/accept"));
    let (code, answer) = send(
        reqwest::Method::POST,
        accept(proposed),
        Some(json!({"id": "Not An Id"})),
    )
    .await;
    assert_eq!(code, 422, "{answer}");
    let (code, answer) = send(
        reqwest::Method::POST,
        accept(proposed),
        Some(json!({"colour": "blue"})),
    )
    .await;
    assert_eq!(code, 422, "{answer}");
    let (code, answer) = send(reqwest::Method::POST, accept(9_999), None).await;
    assert_eq!(code, 404, "{answer}");
    let (code, created) = send(
        reqwest::Method::POST,
        accept(proposed),
        Some(json!({"id": "generated"})),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["id"], "generated", "{created}");
    assert!(
        created["description"]
            .as_str()
            .is_some_and(|d| d.contains("Generated tool")),
        "{created}"
    );
    let suggestions: Vec<Value> = get_json(&d.api("/api/v1/skills/suggestions")).await;
    assert!(
        suggestions.iter().all(|s| s["id"] != proposed),
        "an accepted suggestion stays queued: {suggestions:?}"
    );
    let old = first["classifier"].as_str().unwrap().to_owned();
    wait_classified(&d, total, |s| s["classifier"] != old.as_str()).await;
    let members: Vec<Value> = get_json(&d.api("/api/v1/skills/generated/tools")).await;
    assert!(
        members.iter().any(|t| t["id"] == "fixture.tool_0000"),
        "{members:?}"
    );
}

fn ids_of(suggestion: &Value) -> Vec<String> {
    suggestion["tool_ids"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// The suggestion holding the fixture's generated tools, all five of them.
fn generated_suggestion(suggestions: &[Value]) -> &Value {
    let generated = suggestions
        .iter()
        .find(|s| ids_of(s).contains(&"fixture.tool_0000".to_owned()))
        .unwrap_or_else(|| panic!("no suggestion holds tool_0000: {suggestions:?}"));
    for n in 1..5 {
        let id = format!("fixture.tool_{n:04}");
        assert!(
            ids_of(generated).contains(&id),
            "{id} apart: {suggestions:?}"
        );
    }
    generated
}

/// How the test's chat completions server behaves.
#[derive(Clone, Copy, PartialEq, Debug)]
enum ChatMode {
    Fails,
    Answers,
    Garbage,
    Slow,
}

#[derive(Clone)]
struct ChatServer {
    mode: std::sync::Arc<std::sync::Mutex<ChatMode>>,
    requests: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

/// A small OpenAI-compatible chat completions server (real HTTP, axum): it
/// classifies `get-sum` as math, `echo` as fitting nothing (proposing a
/// skill), everything else as testing; or fails, or talks nonsense, or
/// answers too late, as the test sets it.
async fn chat_server() -> (ChatServer, u16) {
    use axum::routing::post;
    let server = ChatServer {
        mode: std::sync::Arc::new(std::sync::Mutex::new(ChatMode::Fails)),
        requests: std::sync::Arc::default(),
    };
    let state = server.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |axum::Json(request): axum::Json<Value>| {
            let state = state.clone();
            async move {
                state.requests.lock().unwrap().push(request.clone());
                let mode = *state.mode.lock().unwrap();
                let user = request["messages"][1]["content"].as_str().unwrap_or_default().to_owned();
                let content = if user.contains("Tool: get-sum\n") {
                    json!({"skills": [{"skill_id": "math_calculation", "confidence": 0.95}], "new_skill": null})
                } else if user.contains("Tool: echo\n") {
                    json!({"skills": [], "new_skill": {"name": "Echo and replay", "description": "Tools that send input back"}})
                } else {
                    json!({"skills": [{"skill_id": "testing_debugging", "confidence": 0.9}], "new_skill": null})
                };
                let ok = json!({"id": "c1", "object": "chat.completion",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content.to_string()}}]});
                match mode {
                    ChatMode::Answers => (axum::http::StatusCode::OK, axum::Json(ok)),
                    ChatMode::Fails => (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        axum::Json(json!({"error": {"message": "model not loaded"}})),
                    ),
                    ChatMode::Garbage => (
                        axum::http::StatusCode::OK,
                        axum::Json(json!({"choices": [{"message": {"content": "{\"skills\": \"all of them\"}"}}]})),
                    ),
                    ChatMode::Slow => {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        (axum::http::StatusCode::OK, axum::Json(ok))
                    }
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (server, port)
}

fn tool_named<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools.iter().find(|t| t["original_name"] == name).unwrap()
}

#[tokio::test]
async fn an_llm_classifier_is_used_when_it_answers_and_the_local_one_covers_its_failures() {
    let (chat, port) = chat_server().await;
    let url = format!("http://127.0.0.1:{port}/v1");
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        temp.path(),
        &[
            "--classifier-url",
            &url,
            "--classifier-model",
            "test-model",
            "--classifier-timeout",
            "2",
            "--classifier-retry",
            "1",
        ],
    );
    register(&d, everything("everything")).await;
    wait_status(&d, "everything", "CONNECTED", UP).await;
    // CONNECTED comes before the first listing is stored.
    wait_listed(&d, "everything", 10).await;
    wait_index_settled(&d).await;
    let tools_url = d.api("/api/v1/aggregator/servers/everything/tools");
    let total = get_json::<Vec<Value>>(&tools_url).await.len() as u64;

    // The LLM endpoint fails; every tool still gets the local
    // classifier's skills, records why, and waits for a retry.
    let status = wait_classified(&d, total, |s| s["awaiting_retry"] == total).await;
    assert!(
        status["classifier"]
            .as_str()
            .unwrap()
            .starts_with("llm:test-model:"),
        "{status}"
    );
    let tools: Vec<Value> = get_json(&tools_url).await;
    let sum = tool_named(&tools, "get-sum");
    assert_eq!(sum["primary_skill_id"], "math_calculation", "{sum}");
    assert!(
        sum["classification_error"]
            .as_str()
            .unwrap()
            .contains("HTTP 500"),
        "{sum}"
    );

    // The endpoint recovers: the retries classify every tool with it.
    *chat.mode.lock().unwrap() = ChatMode::Answers;
    wait_classified(&d, total, |s| s["awaiting_retry"] == 0).await;
    let tools: Vec<Value> = get_json(&tools_url).await;
    let sum = tool_named(&tools, "get-sum");
    assert_eq!(
        sum["skills"],
        json!([{"skill_id": "math_calculation", "confidence": 0.95}]),
        "{sum}"
    );
    assert!(sum.get("classification_error").is_none(), "{sum}");
    let other = tool_named(&tools, "get-env");
    assert_eq!(other["primary_skill_id"], "testing_debugging", "{other}");
    let echo = tool_named(&tools, "echo");
    assert_eq!(echo["skill_ids"], json!([]), "{echo}");
    assert_eq!(echo["classification_state"], "CLASSIFIED", "{echo}");
    // The skill the LLM proposed is queued for review under its name.
    let suggestions: Vec<Value> = get_json(&d.api("/api/v1/skills/suggestions")).await;
    let proposed = suggestions.iter().find(|s| s["name"] == "Echo and replay");
    assert!(
        proposed.is_some_and(|s| s["tool_ids"] == json!(["everything.echo"])),
        "{suggestions:?}"
    );
    // What was asked: strict JSON over the taxonomy, for the model named.
    let request = chat.requests.lock().unwrap().last().cloned().unwrap();
    assert_eq!(request["model"], "test-model");
    assert_eq!(request["response_format"]["json_schema"]["strict"], true);
    assert!(
        request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("math_calculation")
    );

    // An answer off the schema, and one too late, are failures: the local
    // classifier answers and the error says why.
    for (mode, expected) in [
        (ChatMode::Garbage, "schema"),
        (ChatMode::Slow, "did not answer"),
    ] {
        *chat.mode.lock().unwrap() = mode;
        let (code, answer) = send(
            reqwest::Method::POST,
            d.api("/api/v1/skills/reclassify"),
            Some(json!({"tool_ids": ["everything.get-sum"]})),
        )
        .await;
        assert_eq!(
            (code, answer["queued"].as_u64()),
            (202, Some(1)),
            "{answer}"
        );
        let end = Instant::now() + UP;
        loop {
            let tools: Vec<Value> = get_json(&tools_url).await;
            let sum = tool_named(&tools, "get-sum").clone();
            if sum["classification_error"]
                .as_str()
                .is_some_and(|e| e.contains(expected))
            {
                assert_eq!(sum["classification_state"], "CLASSIFIED", "{sum}");
                assert_eq!(sum["primary_skill_id"], "math_calculation", "{sum}");
                break;
            }
            assert!(Instant::now() < end, "{mode:?} never showed: {sum}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waits until `server` has at least `count` tools stored.
async fn wait_listed(d: &Daemon, server: &str, count: usize) {
    let url = d.api(&format!("/api/v1/aggregator/servers/{server}/tools"));
    let end = std::time::Instant::now() + UP;
    loop {
        let tools: Vec<Value> = get_json(&url).await;
        if tools.len() >= count {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "{server}: {} tools",
            tools.len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
