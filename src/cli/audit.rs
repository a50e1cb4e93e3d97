//! `mcp-aggregator audit`: the daemon's audit log, filtered, newest first.

use serde_json::Value;
use std::process::ExitCode;

use super::admin_args::{AuditArgs, AuditResultArg};
use super::client::connect;
use super::error::CliError;
use super::output::{field, table};

pub(super) async fn show(args: AuditArgs) -> Result<ExitCode, CliError> {
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

/// The audit page the filters ask for (the query built before any await:
/// the serializer is not `Send`).
fn audit_path(args: &AuditArgs) -> String {
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
                    AuditResultArg::Ok => "ok",
                    AuditResultArg::Error => "error",
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
