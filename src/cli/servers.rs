//! `mcp-aggregator servers …`: register, list, show, connect, disconnect
//! and remove servers through the daemon's admin API.

use serde_json::{Value, json};
use std::process::ExitCode;

use super::admin_args::{AddArgs, ConnectArgs, ListArgs, NameArgs, ServersCommand};
use super::client::{SERVERS_PATH, connect, encode_segment};
use super::error::CliError;
use super::output::{field, fields, table};
use crate::model::Transport;

pub(super) async fn run(command: ServersCommand) -> Result<ExitCode, CliError> {
    match command {
        ServersCommand::Add(args) => servers_add(args).await,
        ServersCommand::List(args) => servers_list(args).await,
        ServersCommand::Show(args) => servers_show(args).await,
        ServersCommand::Remove(args) => {
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
        ServersCommand::Connect(args) => servers_connect(args).await,
        ServersCommand::Disconnect(args) => {
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
        // Connected is settled once its first listing is stored, so the
        // tool count printed is the server's.
        let settled = match status.as_str() {
            "CONNECTED" | "DEGRADED" => server["discovering"] != Value::Bool(true),
            "ERROR" => true,
            _ => false,
        };
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
                login_summary(s),
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
                "LOGIN",
                "PRIORITY",
                "AUTO",
                "ERROR"
            ],
            rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// Where a server's login stands, for a table: `-` when it does not log
/// in, else its state (`needs_login` names the command).
fn login_summary(server: &Value) -> String {
    match server["auth"]["state"].as_str() {
        None => "-".to_owned(),
        Some("needs_login") => format!(
            "needs login (mcp-aggregator login {})",
            server["name"].as_str().unwrap_or_default()
        ),
        Some(state) => state.to_owned(),
    }
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
    if server["auth"].is_object() {
        pairs.push(("login", login_summary(&server)));
        for key in [
            "authorization_url",
            "user_code",
            "expires_at",
            "scope",
            "detail",
        ] {
            if let Some(value) = server["auth"][key].as_str() {
                pairs.push((key, value.to_owned()));
            }
        }
    }
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
        ("list_error", field(health, "list_error")),
    ]
}
