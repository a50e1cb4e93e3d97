//! `mcp-aggregator import FILE`: every server of a config file registered
//! with a running daemon, one by one (a name already taken is skipped).

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

use super::admin_args::ImportArgs;
use super::client::{ClientError, SERVERS_PATH, connect};
use super::clients;
use super::error::CliError;
use super::output::{field, table};
use crate::config;

pub(super) async fn run(args: ImportArgs) -> Result<ExitCode, CliError> {
    let file = source_file(&args)?;
    let loaded = config::load(&file)?;
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
            "trust": spec.trust,
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

/// The file to read: a path that exists, else a client's own file.
/// A path that exists wins over a client's name.
fn source_file(args: &ImportArgs) -> Result<PathBuf, CliError> {
    let path = PathBuf::from(&args.source);
    if path.exists() {
        if args.project.is_some() {
            return Err(CliError::Usage(
                "--project goes with a client's name, not with a file".into(),
            ));
        }
        return Ok(path);
    }
    // Not a client's name: the file's loader says it is missing.
    let Some(client) = clients::find(&args.source) else {
        return Ok(path);
    };
    let file = client
        .config_file(args.project.as_deref())
        .map_err(CliError::Usage)?;
    if !file.exists() {
        return Err(CliError::Usage(format!(
            "{} keeps its servers in {}, and there is no such file here",
            client.title,
            file.display()
        )));
    }
    eprintln!("reading {}'s servers from {}", client.title, file.display());
    Ok(file)
}
