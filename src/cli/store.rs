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
    .map_err(|err| CliError::Usage(err.to_string()))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print_report(&report);
    }
    Ok(
        if report.sound() || report.recovered.is_some() && recovering {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

fn print_report(report: &crate::daemon::StoreReport) {
    println!("store: {}", report.path.display());
    if let Some(err) = &report.open_error {
        println!("cannot be opened: {err}");
    }
    println!(
        "page check: {}",
        if report.integrity_ok {
            "sound"
        } else {
            "damage found"
        }
    );
    for table in &report.tables {
        match &table.damage {
            None => println!("  {:<20} {:>8} entries", table.table, table.entries),
            Some(damage) => println!(
                "  {:<20} {:>8} entries read, then: {damage}",
                table.table, table.entries
            ),
        }
    }
    match (&report.recovered, &report.damaged_kept) {
        (Some(recovered), Some(kept)) => println!(
            "recovered into {} (the damaged file is kept as {})",
            recovered.display(),
            kept.display()
        ),
        (Some(recovered), None) => println!(
            "recovered into {}; to use it, stop the daemon and move it to store.redb (or run `store recover --replace`)",
            recovered.display()
        ),
        _ if report.sound() => println!("the store is sound"),
        _ => println!(
            "the store is damaged: `mcp-aggregator store recover` copies what can be read into a new store"
        ),
    }
}
