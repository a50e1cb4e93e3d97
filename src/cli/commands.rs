//! The administration commands: each talks to a running daemon through its
//! admin API and prints a table (or JSON with `--json`).

use serde_json::{Value, json};
use std::process::ExitCode;

use super::client::{AdminClient, ClientError};
use super::output::{field, fields, table};
use super::{
    AddArgs, CallArgs, CliError, ClientArgs, Command, ConnectArgs, ImportArgs, ListArgs, NameArgs,
    SearchArgs, SearchModeArg, ServersCommand, ToolsArgs,
};
use crate::config;
use crate::daemon::{DEFAULT_LISTEN, LISTEN_ENV};
use crate::model::Transport;
use crate::paths::{self, DaemonInfo};

const SERVERS_PATH: &str = "/api/v1/aggregator/servers";

pub(super) fn connect(args: &ClientArgs) -> AdminClient {
    let data_dir = paths::resolve_data_dir(args.data_dir.data_dir.as_deref());
    let url = args
        .url
        .clone()
        .or_else(|| {
            data_dir
                .as_deref()
                .and_then(DaemonInfo::read)
                .map(|info| info.url)
        })
        .or_else(|| {
            std::env::var(LISTEN_ENV)
                .ok()
                .map(|addr| format!("http://{addr}"))
        })
        .unwrap_or_else(|| format!("http://{DEFAULT_LISTEN}"));
    let token = args
        .token
        .clone()
        .or_else(|| data_dir.as_deref().and_then(paths::read_token));
    AdminClient::new(&url, token)
}

pub(super) async fn admin(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Servers(ServersCommand::Add(args)) => servers_add(args).await,
        Command::Servers(ServersCommand::List(args)) => servers_list(args).await,
        Command::Servers(ServersCommand::Show(args)) => servers_show(args).await,
        Command::Servers(ServersCommand::Remove(args)) => {
            let client = connect(&args.client);
            client
                .delete(&format!("{SERVERS_PATH}/{}", encode_segment(&args.name)))
                .await?;
            if args.client.json {
                println!("{}", json!({"removed": args.name}));
            } else {
                println!("removed {}", args.name);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Import(args) => import(args).await,
        Command::Servers(ServersCommand::Connect(args)) => servers_connect(args).await,
        Command::Servers(ServersCommand::Disconnect(args)) => {
            let client = connect(&args.client);
            let segment = encode_segment(&args.name);
            let answer: Value = client
                .post(
                    &format!("{SERVERS_PATH}/{segment}/disconnect"),
                    &json!({"force": args.force}),
                )
                .await?;
            if args.client.json {
                println!("{answer}");
            } else {
                println!(
                    "{} {} ({} call(s) cut off)",
                    args.name,
                    field(&answer, "status"),
                    field(&answer, "pending_requests")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools(args) => tools(args).await,
        Command::Search(args) => search(args).await,
        Command::Reindex(args) => reindex(args).await,
        Command::Call(args) => call(args).await,
        Command::State(args) => {
            let client = connect(&args);
            let state: Value = client.get("/api/v1/aggregator/state").await?;
            if args.json {
                println!("{state:#}");
            } else {
                let keys = [
                    "total_servers",
                    "connected_servers",
                    "degraded_servers",
                    "connecting_servers",
                    "disconnected_servers",
                    "error_servers",
                    "total_tools",
                    "classified_tools",
                    "unclassified_tools",
                    "last_sync",
                ];
                let pairs: Vec<_> = keys.iter().map(|k| (*k, field(&state, k))).collect();
                println!("{}", fields(&pairs));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit(args) => {
            let client = connect(&args.client);
            let path = audit_path(&args);
            let entries: Vec<Value> = client.get(&path).await?;
            if args.client.json {
                println!("{}", Value::from(entries));
            } else {
                let rows = entries
                    .iter()
                    .map(|e| {
                        [
                            "timestamp",
                            "actor",
                            "action",
                            "server",
                            "result",
                            "details",
                        ]
                        .map(|k| field(e, k))
                        .to_vec()
                    })
                    .collect();
                println!(
                    "{}",
                    table(
                        &["TIME", "ACTOR", "ACTION", "SERVER", "RESULT", "DETAILS"],
                        rows
                    )
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Skills(command) => super::skills::run(command).await,
        Command::Store(command) => super::store::run(command).await,
        Command::Serve(_) | Command::Stdio(_) => unreachable!("handled in run"),
    }
}

async fn servers_add(args: AddArgs) -> Result<ExitCode, CliError> {
    let transport = add_transport(&args)?;
    let body = json!({
        "name": args.name,
        "description": args.description,
        "transport_type": transport.transport_type(),
        "connection_config": transport.connection_config(false),
        "health_check_url": args.health_check_url,
        "health_check_interval_secs": args.health_interval,
        "auto_connect": !args.no_auto_connect,
        "priority": args.priority,
    });
    let client = connect(&args.client);
    let server: Value = client.post(SERVERS_PATH, &body).await?;
    if args.client.json {
        println!("{server:#}");
    } else {
        println!(
            "registered {} ({}, {}) id {}",
            field(&server, "name"),
            field(&server, "transport_type"),
            field(&server, "status"),
            field(&server, "id")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The transport `servers add` describes; the daemon validates the details.
pub(super) fn add_transport(args: &AddArgs) -> Result<Transport, CliError> {
    let usage = |msg: &str| CliError::Usage(msg.to_owned());
    let url = args.http.clone().or_else(|| args.sse.clone());
    match (url, args.command.split_first()) {
        (Some(_), Some(_)) => Err(usage(
            "give either a command (after --) or --http/--sse, not both",
        )),
        (None, None) => Err(usage(
            "say how to reach the server: a command after `--` (stdio), --http URL (Streamable HTTP) or --sse URL (legacy SSE); see --help",
        )),
        (None, Some((command, rest))) => {
            if !args.headers.is_empty() {
                return Err(usage("--header is for SSE / HTTP servers"));
            }
            let env = args
                .env
                .iter()
                .map(|pair| {
                    pair.split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .ok_or_else(|| {
                            CliError::Usage(format!("--env {pair:?} must look like KEY=VALUE"))
                        })
                })
                .collect::<Result<_, _>>()?;
            let cwd = args.cwd.as_deref().map(|dir| {
                std::path::absolute(dir)
                    .unwrap_or_else(|_| dir.to_path_buf())
                    .display()
                    .to_string()
            });
            Ok(Transport::Stdio {
                command: command.clone(),
                args: rest.to_vec(),
                env,
                cwd,
            })
        }
        (Some(url), None) => {
            if !args.env.is_empty() || args.cwd.is_some() {
                return Err(usage("--env and --cwd are for stdio servers"));
            }
            let headers = args
                .headers
                .iter()
                .map(|h| {
                    h.split_once(':')
                        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                        .ok_or_else(|| {
                            CliError::Usage(format!("--header {h:?} must look like 'Name: value'"))
                        })
                })
                .collect::<Result<_, _>>()?;
            Ok(if args.sse.is_some() {
                Transport::Sse { url, headers }
            } else {
                Transport::Http {
                    base_url: url,
                    headers,
                }
            })
        }
    }
}

async fn servers_connect(args: ConnectArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let segment = encode_segment(&args.name);
    let answer: Value = client
        .post(&format!("{SERVERS_PATH}/{segment}/connect"), &json!({}))
        .await?;
    if !args.wait {
        if args.client.json {
            println!("{answer}");
        } else {
            println!("{}: {}", args.name, field(&answer, "message"));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let server: Value = client.get(&format!("{SERVERS_PATH}/{segment}")).await?;
        let status = field(&server, "status");
        let settled = matches!(status.as_str(), "CONNECTED" | "DEGRADED" | "ERROR");
        if settled || std::time::Instant::now() > deadline {
            if args.client.json {
                println!("{server}");
            } else if status == "ERROR" {
                println!("{}: ERROR: {}", args.name, field(&server, "error_message"));
            } else {
                println!(
                    "{}: {status} ({} tools)",
                    args.name,
                    field(&server, "tool_count")
                );
            }
            return Ok(if status == "CONNECTED" || status == "DEGRADED" {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn call(args: CallArgs) -> Result<ExitCode, CliError> {
    let arguments: Value = serde_json::from_str(&args.arguments).map_err(|err| {
        CliError::Usage(format!(
            "the arguments are not JSON ({err}); pass an object like '{{\"key\": \"value\"}}'"
        ))
    })?;
    if !arguments.is_object() {
        return Err(CliError::Usage(
            "the arguments must be a JSON object".to_owned(),
        ));
    }
    let client = connect(&args.client);
    let body = json!({"name": args.name, "arguments": arguments, "server_id": args.server});
    let result: Value = client.post_long("/api/v1/tools/call", &body).await?;
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if args.client.json {
        println!("{result:#}");
    } else {
        let mut printed = false;
        for item in result
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match item.get("type").and_then(Value::as_str) {
                Some("text") => println!("{}", field(item, "text")),
                Some(kind) => println!(
                    "[{kind} content: {}]",
                    item.get("mimeType")
                        .and_then(Value::as_str)
                        .unwrap_or("see --json")
                ),
                None => println!("{item}"),
            }
            printed = true;
        }
        if let Some(structured) = result.get("structuredContent") {
            println!("{structured:#}");
            printed = true;
        }
        if !printed {
            println!("(no content)");
        }
        if let Some(meta) = result.get("metadata") {
            eprintln!(
                "routed to {} in {:.2} ms, ran {:.2} ms",
                field(meta, "routed_to"),
                meta.get("routing_time_ms")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0),
                meta.get("execution_time_ms")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
            );
        }
    }
    Ok(if is_error {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn tools(args: ToolsArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let servers: Vec<String> = match &args.server {
        Some(server) => vec![server.clone()],
        None => client
            .get::<Vec<Value>>(SERVERS_PATH)
            .await?
            .iter()
            .map(|s| field(s, "name"))
            .collect(),
    };
    let mut all = Vec::new();
    for server in servers {
        let tools: Vec<Value> = client
            .get(&format!("{SERVERS_PATH}/{}/tools", encode_segment(&server)))
            .await?;
        all.extend(tools);
    }
    if args.client.json {
        println!("{}", Value::from(all));
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        println!("no tools (servers list their tools once connected)");
        return Ok(ExitCode::SUCCESS);
    }
    let rows = all
        .iter()
        .map(|t| {
            let description: String = field(t, "description")
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(60)
                .collect();
            let wire = match t.get("wire_name").and_then(Value::as_str) {
                Some(wire) => wire.to_owned(),
                None => format!("(rejected: {})", field(t, "rejected_reason")),
            };
            vec![field(t, "id"), wire, description]
        })
        .collect();
    println!("{}", table(&["TOOL", "MCP NAME", "DESCRIPTION"], rows));
    Ok(ExitCode::SUCCESS)
}

async fn servers_list(args: ListArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let path = match &args.status {
        Some(status) => format!("{SERVERS_PATH}?status={}", encode_segment(status)),
        None => SERVERS_PATH.to_owned(),
    };
    let servers: Vec<Value> = client.get(&path).await?;
    if args.client.json {
        println!("{}", Value::from(servers));
        return Ok(ExitCode::SUCCESS);
    }
    if servers.is_empty() {
        println!("no servers registered (add one with `mcp-aggregator servers add`)");
        return Ok(ExitCode::SUCCESS);
    }
    let rows = servers
        .iter()
        .map(|s| {
            vec![
                field(s, "name"),
                field(s, "status"),
                field(s, "transport_type"),
                field(s, "tool_count"),
                health_summary(s),
                field(s, "priority"),
                field(s, "auto_connect"),
                field(s, "error_message"),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "NAME",
                "STATUS",
                "TRANSPORT",
                "TOOLS",
                "HEALTH",
                "PRIORITY",
                "AUTO",
                "ERROR"
            ],
            rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

async fn servers_show(args: NameArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let segment = encode_segment(&args.name);
    let server: Value = client.get(&format!("{SERVERS_PATH}/{segment}")).await?;
    let history: Vec<Value> = client
        .get(&format!("{SERVERS_PATH}/{segment}/history?limit=10"))
        .await?;
    if args.client.json {
        let mut server = server;
        server["history"] = Value::from(history);
        println!("{server:#}");
        return Ok(ExitCode::SUCCESS);
    }
    let keys = [
        "name",
        "id",
        "status",
        "error_message",
        "transport_type",
        "connection_config",
        "description",
        "tool_count",
        "priority",
        "auto_connect",
        "health_check_url",
        "health_check_interval_secs",
        "last_health_check",
        "registered_at",
        "connected_at",
        "source",
    ];
    let mut pairs: Vec<_> = keys.iter().map(|k| (*k, field(&server, k))).collect();
    pairs.extend(health_details(&server));
    println!("{}", fields(&pairs));
    if !history.is_empty() {
        println!("\nrecent history:");
        let rows = history
            .iter()
            .map(|h| {
                ["timestamp", "event_type", "trigger", "details"]
                    .map(|k| field(h, k))
                    .to_vec()
            })
            .collect();
        println!("{}", table(&["TIME", "EVENT", "TRIGGER", "DETAILS"], rows));
    }
    Ok(ExitCode::SUCCESS)
}

async fn import(args: ImportArgs) -> Result<ExitCode, CliError> {
    let loaded = config::load(&args.file)?;
    for warning in &loaded.warnings {
        eprintln!("warning: {warning}");
    }
    let client = connect(&args.client);
    let mut results = Vec::new();
    let mut failed = 0;
    for spec in &loaded.servers {
        let body = json!({
            "name": spec.name,
            "description": spec.description,
            "transport_type": spec.transport.transport_type(),
            "connection_config": spec.transport.connection_config(false),
            "health_check_url": spec.health_check_url,
            "health_check_interval_secs": spec.health_check_interval_secs,
            "auto_connect": spec.auto_connect,
            "priority": spec.priority,
        });
        let (outcome, detail) = match client.post::<Value>(SERVERS_PATH, &body).await {
            Ok(_) => ("registered", String::new()),
            Err(ClientError::Api { status, detail }) if status == reqwest::StatusCode::CONFLICT => {
                ("skipped", detail)
            }
            Err(err @ ClientError::Api { .. }) => {
                failed += 1;
                ("failed", err.to_string())
            }
            Err(err) => return Err(err.into()),
        };
        results.push(json!({"name": spec.name, "result": outcome, "detail": detail}));
    }
    if args.client.json {
        println!("{}", Value::from(results));
    } else {
        let rows = results
            .iter()
            .map(|r| ["name", "result", "detail"].map(|k| field(r, k)).to_vec())
            .collect();
        println!("{}", table(&["NAME", "RESULT", "DETAIL"], rows));
    }
    Ok(if failed > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// Percent-encodes a path segment or query value.
pub(super) fn encode_segment(raw: &str) -> String {
    url::form_urlencoded::byte_serialize(raw.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

async fn search(args: SearchArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let mode = match args.mode {
        SearchModeArg::Hybrid => "hybrid",
        SearchModeArg::Keyword => "keyword",
        SearchModeArg::Semantic => "semantic",
    };
    let mut body = json!({"query": args.query, "limit": args.limit, "mode": mode});
    if !args.servers.is_empty() {
        body["server_filter"] = json!(args.servers);
    }
    if !args.skills.is_empty() {
        body["skill_filter"] = json!(args.skills);
    }
    let answer: Value = client.post("/api/v1/search", &body).await?;
    if args.client.json {
        println!("{answer:#}");
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(warning) = answer.pointer("/metadata/warning").and_then(Value::as_str) {
        eprintln!("warning: {warning}");
    }
    let tools = answer
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if tools.is_empty() {
        println!(
            "no tools found among {} tool(s) of {} available server(s)",
            field(&answer["metadata"], "total_tools_searched"),
            field(&answer["metadata"], "servers_searched")
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows = tools
        .iter()
        .map(|t| {
            let score = t.get("score").and_then(Value::as_f64).unwrap_or_default();
            let description: String = field(t, "description")
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(70)
                .collect();
            vec![
                format!("{score:.3}"),
                field(t, "name"),
                field(&t["source_server"], "status"),
                field(t, "primary_skill_id"),
                description,
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["SCORE", "NAME", "SERVER STATUS", "SKILL", "DESCRIPTION"],
            rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// Rebuilds inside the daemon when one answers, else here.
async fn reindex(args: ClientArgs) -> Result<ExitCode, CliError> {
    let data_dir = paths::resolve_data_dir(args.data_dir.data_dir.as_deref());
    let daemon_running =
        args.url.is_some() || data_dir.as_deref().and_then(DaemonInfo::read).is_some();
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} tools")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message("indexing");
    let status = if daemon_running {
        let client = connect(&args);
        let _: Value = client.post("/api/v1/search/reindex", &json!({})).await?;
        loop {
            let status: Value = client.get("/api/v1/search/status").await?;
            bar.set_length(status["total_tools"].as_u64().unwrap_or(0));
            bar.set_position(status["indexed_tools"].as_u64().unwrap_or(0));
            if status["syncing"] == json!(false) {
                break status;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    } else {
        let Some(data_dir) = data_dir else {
            return Err(CliError::Usage(
                "no data dir: pass --data-dir or set MCP_AGGREGATOR_DATA_DIR".into(),
            ));
        };
        local_reindex(data_dir, bar.clone()).await?
    };
    bar.finish_and_clear();
    if args.json {
        println!("{status}");
    } else {
        println!(
            "indexed {} tool(s){}",
            field(&status, "indexed_tools"),
            if status["semantic"] == json!(true) {
                String::new()
            } else {
                format!(
                    " by keyword only: {}",
                    status
                        .get("warning")
                        .and_then(Value::as_str)
                        .unwrap_or("the model is unavailable")
                )
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn local_reindex(
    data_dir: std::path::PathBuf,
    bar: indicatif::ProgressBar,
) -> Result<Value, CliError> {
    let failed = |err: &dyn std::fmt::Display| CliError::Failed(err.to_string());
    let opened = tokio::task::spawn_blocking(move || crate::daemon::open_search_index(&data_dir))
        .await
        .map_err(|e| failed(&e))?
        .map_err(|e| failed(&e))?;
    let mut progress = opened.progress();
    let index = opened.clone();
    let work = tokio::task::spawn_blocking(move || index.sync(true));
    tokio::pin!(work);
    let result = loop {
        tokio::select! {
            result = &mut work => break result,
            changed = progress.changed() => {
                if changed.is_err() {
                    continue;
                }
                let now = progress.borrow().clone();
                bar.set_length(now.total_tools as u64);
                bar.set_position(now.indexed_tools as u64);
            }
        }
    };
    result.map_err(|e| failed(&e))?.map_err(|e| failed(&e))?;
    let done = opened.progress().borrow().clone();
    Ok(json!({
        "indexed_tools": done.indexed_tools,
        "total_tools": done.total_tools,
        "generation": done.generation,
        "syncing": false,
        "semantic": opened.semantic_available(),
        "warning": opened.model_warning(),
    }))
}

/// The audit page the filters ask for (the query built before any await:
/// the serializer is not `Send`).
fn audit_path(args: &super::AuditArgs) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query.append_pair("limit", &args.limit.to_string());
    if let Some(before) = args.before {
        query.append_pair("before", &before.to_string());
    }
    for (key, value) in [
        ("server", args.server.clone()),
        ("action", args.action.clone()),
        ("actor", args.actor.clone()),
        (
            "result",
            args.result.map(|r| {
                match r {
                    super::AuditResultArg::Ok => "ok",
                    super::AuditResultArg::Error => "error",
                }
                .to_owned()
            }),
        ),
        ("since", args.since.map(|t| t.to_rfc3339())),
        ("until", args.until.map(|t| t.to_rfc3339())),
    ] {
        if let Some(value) = value {
            query.append_pair(key, &value);
        }
    }
    format!("/api/v1/aggregator/audit?{}", query.finish())
}

/// Milliseconds as short text.
fn millis(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1} ms"))
}

fn percent(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_owned(), |share| format!("{:.1}%", share * 100.0))
}

/// The health column of `servers list`: p50 response time, recent error
/// rate, uptime, and failed checks in a row when there are any.
fn health_summary(server: &Value) -> String {
    let health = &server["health"];
    if health.is_null() {
        return "-".to_owned();
    }
    let mut summary = format!(
        "p50 {} · {} errors · {} up",
        millis(&health["response_time_ms"]["p50"]),
        percent(&health["error_rate"]),
        percent(&health["uptime_ratio"]),
    );
    if let Some(failures) = health["consecutive_failures"].as_u64().filter(|f| *f > 0) {
        summary.push_str(&format!(" · {failures} checks failed"));
    }
    summary
}

/// The health lines of `servers show`.
fn health_details(server: &Value) -> Vec<(&'static str, String)> {
    let health = &server["health"];
    if health.is_null() {
        return vec![(
            "health",
            "- (not connected since the aggregator started)".to_owned(),
        )];
    }
    let times = &health["response_time_ms"];
    vec![
        (
            "check_interval",
            format!("{} s", field(health, "check_interval_secs")),
        ),
        (
            "response_time",
            format!(
                "last {} · p50 {} · p95 {}",
                millis(&times["last"]),
                millis(&times["p50"]),
                millis(&times["p95"])
            ),
        ),
        (
            "error_rate",
            format!(
                "{} of the last {} calls",
                percent(&health["error_rate"]),
                field(health, "recent_calls")
            ),
        ),
        (
            "health_checks",
            format!(
                "{} passed · {} failed · {} failed in a row",
                field(health, "checks_passed"),
                field(health, "checks_failed"),
                field(health, "consecutive_failures")
            ),
        ),
        ("last_error", field(health, "last_error")),
        ("uptime", percent(&health["uptime_ratio"])),
        ("degraded_reason", field(health, "degraded_reason")),
    ]
}
