//! `mcp-aggregator tools` and `call`: the tools servers offer, and a call
//! to one through the daemon.

use serde_json::{Value, json};
use std::process::ExitCode;

use super::admin_args::{CallArgs, ToolDecisionArgs, ToolsArgs, ToolsCommand};
use super::client::{SERVERS_PATH, connect, encode_segment};
use super::error::CliError;
use super::output::{field, table};

const TOOLS_PATH: &str = "/api/v1/aggregator/tools";

pub(super) async fn tools(args: ToolsArgs) -> Result<ExitCode, CliError> {
    match args.command {
        None => list(args).await,
        Some(ToolsCommand::Held(client_args)) => {
            let client = connect(&client_args);
            let held: Vec<Value> = client.get(&format!("{TOOLS_PATH}/held")).await?;
            if client_args.json {
                println!("{}", Value::from(held));
            } else if held.is_empty() {
                println!("nothing is held back");
            } else {
                let rows = held
                    .iter()
                    .map(|t| {
                        let rules: Vec<String> = t["findings"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|f| f["severity"] == "high")
                            .map(|f| field(f, "rule"))
                            .collect();
                        vec![
                            field(t, "tool_id"),
                            field(&t["hold"], "reason"),
                            rules.join(", "),
                            field(&t["hold"], "since"),
                        ]
                    })
                    .collect();
                println!("{}", table(&["TOOL", "WHY", "FINDINGS", "SINCE"], rows));
                println!(
                    "\nsee what changed: mcp-aggregator tools diff TOOL; then approve or reject it"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(ToolsCommand::Diff(name_args)) => {
            let client = connect(&name_args.client);
            let changes: Value = client
                .get(&format!(
                    "{TOOLS_PATH}/{}/changes",
                    encode_segment(&name_args.name)
                ))
                .await?;
            if name_args.client.json {
                println!("{changes:#}");
            } else {
                print!("{}", describe_changes(&changes));
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(ToolsCommand::Approve(decision)) => decide(decision, "approve").await,
        Some(ToolsCommand::Reject(decision)) => decide(decision, "reject").await,
    }
}

async fn decide(args: ToolDecisionArgs, action: &str) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let body = json!({"fingerprint": args.fingerprint});
    let decided: Value = client
        .post(
            &format!("{TOOLS_PATH}/{}/{action}", encode_segment(&args.name)),
            &body,
        )
        .await?;
    if args.client.json {
        println!("{decided:#}");
    } else {
        let state = match field(&decided, "state").as_str() {
            "held" => "held back",
            _ => "offered to clients",
        };
        println!(
            "{} {}d ({}): now {state}",
            field(&decided, "tool_id"),
            action,
            field(&decided, "fingerprint")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `tools diff` as text: the state, what changed word by word, the
/// findings, and the command that approves exactly this definition.
fn describe_changes(changes: &Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let id = field(changes, "tool_id");
    let _ = writeln!(
        out,
        "tool {id} (server {}, pinning {}): {}",
        field(changes, "server"),
        field(changes, "pinning"),
        if changes["state"] == "held" {
            "HELD BACK"
        } else {
            "offered"
        }
    );
    if changes["hold"].is_object() {
        let _ = writeln!(out, "  {}", field(&changes["hold"], "message"));
    }
    let _ = writeln!(out, "fingerprint now: {}", field(changes, "fingerprint"));
    match changes["approved"].as_object() {
        Some(approved) => {
            let approved = Value::Object(approved.clone());
            let _ = writeln!(
                out,
                "approved:        {} at {} by {}",
                field(&approved, "fingerprint"),
                field(&approved, "approved_at"),
                field(&approved, "approved_by")
            );
        }
        None => {
            let _ = writeln!(out, "approved:        never");
        }
    }
    let fields = changes["changes"].as_array().cloned().unwrap_or_default();
    if fields.is_empty() {
        let _ = writeln!(out, "changes:         none since it was approved");
    } else {
        let _ = writeln!(out, "changes ([-removed-] {{+added+}}):");
        for change in &fields {
            let marked: String = change["spans"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| {
                    let text = field(s, "text");
                    match s["op"].as_str() {
                        Some("delete") => format!("[-{text}-]"),
                        Some("insert") => format!("{{+{text}+}}"),
                        _ => text,
                    }
                })
                .collect();
            let _ = writeln!(out, "  {}:", field(change, "field"));
            for line in marked.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    let findings = changes["findings"].as_array().cloned().unwrap_or_default();
    if !findings.is_empty() {
        let _ = writeln!(out, "findings:");
        for finding in &findings {
            let _ = writeln!(
                out,
                "  {} {} in {}: \"{}\" ({})",
                field(finding, "severity").to_uppercase(),
                field(finding, "rule"),
                field(finding, "field"),
                field(finding, "excerpt"),
                field(finding, "message")
            );
        }
    }
    if changes["state"] == "held" {
        let _ = writeln!(
            out,
            "approve this definition: mcp-aggregator tools approve {id} --fingerprint {}",
            field(changes, "fingerprint")
        );
    }
    out
}

pub(super) async fn list(args: ToolsArgs) -> Result<ExitCode, CliError> {
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

pub(super) async fn call(args: CallArgs) -> Result<ExitCode, CliError> {
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
