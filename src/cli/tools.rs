//! `mcp-aggregator tools` and `call`: the tools servers offer, and a call
//! to one through the daemon.

use serde_json::{Value, json};
use std::process::ExitCode;

use super::admin_args::{CallArgs, ToolsArgs};
use super::client::{SERVERS_PATH, connect, encode_segment};
use super::error::CliError;
use super::output::{field, table};

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
