//! `mcp-aggregator store check|recover`: what can be read of a damaged
//! store, and a new store made of it. Both need the data dir to themselves
//! (stop the daemon first) and never change the original file.

use std::process::ExitCode;

use super::admin_args::StoreCommand;
use super::error::CliError;
use crate::paths;

pub(super) async fn run(command: StoreCommand) -> Result<ExitCode, CliError> {
    let (args, replace, recovering) = match command {
        StoreCommand::Check(args) => (args, false, false),
        StoreCommand::Recover(args) => (args.store, args.replace, true),
    };
    let Some(data_dir) = paths::resolve_data_dir(args.data_dir.data_dir.as_deref()) else {
        return Err(CliError::Usage(
            "no data dir: pass --data-dir or set MCP_AGGREGATOR_DATA_DIR".into(),
        ));
    };
    let report = tokio::task::spawn_blocking(move || {
        if recovering {
            crate::daemon::recover_store(&data_dir, replace)
        } else {
            crate::daemon::check_store(&data_dir)
        }
    })
    .await
    .map_err(|err| CliError::Failed(err.to_string()))?
    .map_err(|err| match crate::daemon::store_refused(&err) {
        true => CliError::Usage(err.to_string()),
        // The disk (full, read-only, failing): exit 1, as I/O is.
        false => CliError::Failed(err.to_string()),
    })?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        println!("{report}");
    }
    Ok(
        if recovering && report.recovered.is_some() || !recovering && report.sound() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}
