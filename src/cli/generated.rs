//! `completions` and `man`: shell completion scripts and man pages,
//! generated from the clap definition the binary parses with, so they
//! always describe the commands it has.

use clap::CommandFactory as _;
use std::io::Write as _;
use std::process::ExitCode;

use super::args::{Cli, CompletionsArgs, ManArgs};
use super::error::CliError;

const BIN_NAME: &str = "mcp-aggregator";

pub(super) fn completions(args: CompletionsArgs) -> Result<ExitCode, CliError> {
    let mut command = Cli::command();
    // Into a buffer first: clap_complete panics when its writer fails (a
    // closed pipe, a full disk).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, BIN_NAME, &mut script);
    print(&script)
}

pub(super) fn man(args: ManArgs) -> Result<ExitCode, CliError> {
    let command = Cli::command();
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .and_then(|()| clap_mangen::generate_to(command, &dir))
                .map_err(|err| {
                    CliError::Failed(format!(
                        "cannot write man pages into {}: {err}",
                        dir.display()
                    ))
                })?;
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .map_err(|err| CliError::Failed(format!("cannot render the man page: {err}")))?;
            return print(&page);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes to stdout; a reader that stopped early (`| head`) is not an error.
fn print(bytes: &[u8]) -> Result<ExitCode, CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::Failed(format!("cannot write to stdout: {err}")))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}
