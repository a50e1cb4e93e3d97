//! `mcp-aggregator store check|recover`: what can be read of a damaged
//! store, and a new store made of it. Both need the data dir to themselves
//! (stop the daemon first) and never change the original file.

use clap::{Args, Subcommand};
use std::process::ExitCode;

use super::{CliError, DataDirArg};
use crate::paths;

#[derive(Debug, Subcommand)]
pub(super) enum StoreCommand {
    /// Check the store file page by page and read every table (through a copy; the file is not changed).
    #[command(after_help = "Examples:\n  \
mcp-aggregator store check\n  \
mcp-aggregator store check --data-dir /var/lib/mcp-aggregator --json\n\n\
Exit code 0 when the store is sound, 1 when damage was found, 2 when it cannot be checked \
(no store there, or a daemon holds it: stop it first).")]
    Check(StoreArgs),
    /// Copy everything readable into a new store (store.recovered.redb); --replace puts it in place.
    #[command(after_help = "Examples:\n  \
mcp-aggregator store recover\n  \
mcp-aggregator store recover --replace\n\n\
The damaged file is never changed: with --replace it is kept as store.redb.damaged-<time>. \
Registrations (with their sealed secrets), history, audit, skills and the catalog are copied as far \
as they can be read; servers' tools are discovered again when they connect, and the search index \
is rebuilt.")]
    Recover(RecoverArgs),
}

#[derive(Debug, Args)]
pub(super) struct StoreArgs {
    #[command(flatten)]
    data_dir: DataDirArg,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct RecoverArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Put the recovered store in place of the damaged one (kept beside it).
    #[arg(long)]
    replace: bool,
}

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
