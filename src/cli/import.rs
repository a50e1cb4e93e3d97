//! `mcp-aggregator import FILE`: every server of a config file registered
//! with a running daemon, one by one (a name already taken is skipped).

use serde_json::{Value, json};
use std::process::ExitCode;

use super::admin_args::ImportArgs;
use super::client::{ClientError, SERVERS_PATH, connect};
use super::error::CliError;
use super::output::{field, table};
use crate::config;

pub(super) async fn run(args: ImportArgs) -> Result<ExitCode, CliError> {
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
