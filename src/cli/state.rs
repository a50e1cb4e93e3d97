//! `mcp-aggregator state`: counts of servers by status and of tools.

use serde_json::Value;
use std::process::ExitCode;

use super::admin_args::ClientArgs;
use super::client::connect;
use super::error::CliError;
use super::output::{field, fields};

pub(super) async fn show(args: ClientArgs) -> Result<ExitCode, CliError> {
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
