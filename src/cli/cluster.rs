//! `mcp-aggregator cluster status`: the replicas a shared PostgreSQL store
//! saw recently, read from the store itself (so it answers while every
//! replica is down).

use std::process::ExitCode;
use std::time::Duration;

use super::admin_args::ClusterCommand;
use super::error::CliError;
use super::output::table;
use crate::daemon::{self, DaemonError, SharedStore};

pub(super) async fn run(command: ClusterCommand) -> Result<ExitCode, CliError> {
    let ClusterCommand::Status(args) = command;
    let shared = SharedStore {
        url: args.store,
        password_file: args.store_password_file,
        replica_id: String::new(),
    };
    let within = Duration::from_secs(args.within);
    let replicas = tokio::task::spawn_blocking(move || daemon::cluster_status(&shared, within))
        .await
        .map_err(|err| CliError::Failed(err.to_string()))?
        .map_err(|err: DaemonError| CliError::Usage(err.to_string()))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&replicas).unwrap_or_default()
        );
    } else if replicas.is_empty() {
        println!("no replica seen in the last {} s", args.within);
    } else {
        let rows = replicas
            .iter()
            .map(|r| {
                vec![
                    r.id.clone(),
                    r.address.clone(),
                    r.version.clone(),
                    format!("{} s", r.up_seconds),
                    format!("{} s ago", r.seen_seconds_ago),
                ]
            })
            .collect();
        println!(
            "{}",
            table(&["REPLICA", "ADDRESS", "VERSION", "UP", "SEEN"], rows)
        );
    }
    Ok(if replicas.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
