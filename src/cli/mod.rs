//! The command line: `serve` runs the daemon; `servers`, `import`, `state`
//! and `audit` administer a running daemon through its admin API.
//!
//! This file runs it (the runtime each command gets, `serve`'s and
//! `stdio`'s set-up, and which file runs each command). What it parses is
//! defined apart: `args.rs` (the top level), `daemon_args.rs` and
//! `admin_args.rs`, with `parse.rs`'s value parsers; one file per resource
//! runs its commands, over `client.rs` (the admin API) and `output.rs`.

mod admin_args;
mod args;
mod audit;
mod client;
mod clients;
mod cluster;
mod daemon_args;
mod error;
mod generated;
mod import;
mod login;
mod output;
mod parse;
mod profiles;
mod search;
mod servers;
mod setup;
mod skills;
mod state;
mod store;
mod tokens;
mod tools;

use clap::Parser as _;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

use crate::daemon::{self, ServeOptions};
use crate::logging;
use crate::paths::{self, DATA_DIR_ENV};
pub use args::Cli;
use args::Command;
use daemon_args::{DataDirArg, ServeArgs, StdioArgs};
use error::CliError;

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return parse_failure(&err),
    };
    // Before any thread or child exists: whatever descriptors whoever
    // started us left open must not reach the servers we start.
    crate::sessions::close_inherited_on_exec();
    crate::http_client::init();
    daemon::install_panic_hook();
    // The stdio front door serves one client: a single-threaded runtime
    // keeps every hop of a call on one thread (no cross-thread wake-ups),
    // which is what per-call latency is made of. The daemon serves many
    // clients and uses every core.
    let mut builder = match &cli.command {
        Command::Stdio(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    // Run as a spawned task, not as the block_on future: on the
    // single-threaded runtime, tasks woken or spawned from the block_on
    // future go through the cross-thread queue and an eventfd write.
    let code = runtime.block_on(async move {
        match tokio::spawn(run(cli)).await {
            Ok(code) => code,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::from(1)
            }
        }
    });
    // A blocking task still running (a batch being embedded) must not hold
    // the exit up: everything durable was committed already.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    if code == ExitCode::SUCCESS {
        // Everything is closed and committed. A thread still inside ONNX
        // Runtime (the model loading when a SIGTERM came early) would crash
        // the C library's exit-time destructors (SIGSEGV seen in CI): leave
        // without running them.
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: `_exit` ends the process at once; nothing of ours needs
        // to run after this point.
        unsafe { libc::_exit(0) }
    }
    code
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(args) => {
            let telemetry = logging::init(
                cli.log_format,
                logging::DEFAULT_FILTER,
                args.tracing.otlp_endpoint.as_deref(),
            );
            let code = serve(args).await;
            telemetry.shutdown().await;
            code
        }
        Command::Stdio(args) => {
            // stdout is the MCP channel: logs go to stderr, quietly.
            let telemetry = logging::init(
                cli.log_format,
                "warn,mcp_aggregator=info,rmcp=warn",
                args.tracing.otlp_endpoint.as_deref(),
            );
            let code = stdio(args).await;
            telemetry.shutdown().await;
            code
        }
        other => {
            // A reader that stops early (`mcp-aggregator tools | head`)
            // ends this process quietly, as it would any Unix filter,
            // instead of a print panicking on EPIPE. Only here: the
            // daemon and `stdio` need EPIPE as an error.
            // SAFETY: setting a signal's disposition to its default has
            // no memory-safety preconditions.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            }
            logging::init(cli.log_format, "warn", None);
            match admin(other).await {
                Ok(code) => code,
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::from(err.exit_code())
                }
            }
        }
    }
}

/// The commands that administer a running daemon (or, `store`, its data
/// dir), each run by its resource's file.
async fn admin(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Servers(command) => servers::run(command).await,
        Command::Import(args) => import::run(args).await,
        Command::Client(command) => setup::run(command),
        Command::Tools(args) => tools::tools(args).await,
        Command::Call(args) => tools::call(args).await,
        Command::Search(args) => search::search(args).await,
        Command::Reindex(args) => search::reindex(args).await,
        Command::State(args) => state::show(args).await,
        Command::Audit(args) => audit::show(args).await,
        Command::Skills(command) => skills::run(command).await,
        Command::Profiles(command) => profiles::run(command).await,
        Command::Tokens(command) => tokens::run(command).await,
        Command::Store(command) => store::run(command).await,
        Command::Cluster(command) => cluster::run(command).await,
        Command::Login(args) => login::login(args).await,
        Command::Logout(args) => login::logout(args).await,
        Command::Completions(args) => generated::completions(args),
        Command::Man(args) => generated::man(args),
        Command::Serve(_) | Command::Stdio(_) => unreachable!("handled in run"),
    }
}

/// Prints clap's message (help and version included), with a hint for
/// the slip everyone makes once: a stdio server's command given to
/// `servers add` without the `--` before it.
fn parse_failure(err: &clap::Error) -> ExitCode {
    let _ = err.print();
    let given: Vec<String> = std::env::args().skip(1).collect();
    let adding = given.windows(2).any(|w| w[0] == "servers" && w[1] == "add");
    if err.kind() == clap::error::ErrorKind::UnknownArgument
        && adding
        && !given.iter().any(|a| a == "--")
    {
        eprintln!(
            "\nhint: put a stdio server's command after `--`, e.g. `mcp-aggregator servers add time -- uvx mcp-server-time`"
        );
    }
    ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2))
}

/// What `serve` and `stdio` both need first: the data dir and a shutdown
/// token cancelled by SIGINT/SIGTERM.
fn process_setup(data_dir: &DataDirArg) -> Result<(PathBuf, CancellationToken), ExitCode> {
    let Some(data_dir) = paths::resolve_data_dir(data_dir.data_dir.as_deref()) else {
        eprintln!(
            "error: no data dir: pass --data-dir or set {DATA_DIR_ENV} (no home directory found)"
        );
        return Err(ExitCode::from(2));
    };
    let shutdown = CancellationToken::new();
    if let Err(err) = daemon::cancel_on_signals(shutdown.clone()) {
        eprintln!("error: cannot install signal handlers: {err}");
        return Err(ExitCode::from(1));
    }
    Ok((data_dir, shutdown))
}

fn finish(result: Result<(), daemon::DaemonError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Said once: the log goes to stderr too.
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

async fn stdio(args: StdioArgs) -> ExitCode {
    if args.in_process {
        let (data_dir, shutdown) = match process_setup(&args.data_dir) {
            Ok(setup) => setup,
            Err(code) => return code,
        };
        let front_door = args
            .routing
            .front_door(&args.limits, &args.health, &args.search);
        return finish(
            daemon::stdio_in_process(args.config, args.profile, data_dir, front_door, shutdown)
                .await,
        );
    }
    let Some(data_dir) = paths::resolve_data_dir(args.data_dir.data_dir.as_deref()) else {
        eprintln!(
            "error: no data dir: pass --data-dir or set {DATA_DIR_ENV} (no home directory found)"
        );
        return ExitCode::from(2);
    };
    let (daemon_args, daemon_settings) = daemon_args_for(&data_dir, args.idle_exit);
    let options = crate::relay::RelayOptions {
        daemon_args,
        daemon_settings,
        data_dir,
        config: args.config,
        profile: args.profile,
    };
    // The relay blocks on its two descriptors; a signal ends it (the
    // daemon sees its socket close).
    let relayed = tokio::task::spawn_blocking(move || crate::relay::run(&options)).await;
    match relayed {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(err)) => {
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

/// The `serve` command line a daemon started by this `stdio` client runs:
/// this command line's own settings (everything but what only the relay
/// uses), for this data dir, stopping when idle; and those settings alone,
/// as given (a daemon already running keeps its own).
fn daemon_args_for(
    data_dir: &std::path::Path,
    idle_exit: std::time::Duration,
) -> (Vec<std::ffi::OsString>, Vec<String>) {
    let mut given: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let Some(at) = given.iter().position(|a| a == "stdio") else {
        return (Vec::new(), Vec::new());
    };
    given[at] = "serve".into();
    let mut args = Vec::with_capacity(given.len() + 6);
    let mut settings = Vec::new();
    let mut skip_value = false;
    for (index, arg) in given.into_iter().enumerate() {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let text = arg.to_string_lossy();
        let name = text.split('=').next().unwrap_or_default();
        // The client's own: a daemon serves every client.
        if matches!(
            name,
            "--config" | "--data-dir" | "--idle-exit" | "--profile"
        ) {
            skip_value = !text.contains('=');
            continue;
        }
        if index > at {
            settings.push(text.into_owned());
        }
        args.push(arg);
    }
    args.extend([
        "--data-dir".into(),
        data_dir.as_os_str().to_owned(),
        "--idle-exit".into(),
        format!("{}s", idle_exit.as_secs()).into(),
        "--started-by-client".into(),
    ]);
    (args, settings)
}

async fn serve(args: ServeArgs) -> ExitCode {
    let (data_dir, shutdown) = match process_setup(&args.data_dir) {
        Ok(setup) => setup,
        Err(code) => return code,
    };
    let options = ServeOptions {
        config: args.config,
        data_dir,
        shared: args.shared.shared(args.listen),
        listen: args.listen,
        require_token: args.require_token,
        allowed_hosts: args.allow_hosts,
        front_door: args
            .routing
            .front_door(&args.limits, &args.health, &args.search),
        listener: args.listener.listener(),
        mcp_sessions: args.listener.sessions(),
        idle_exit: args.idle_exit,
        started_by_client: args.started_by_client,
    };
    finish(daemon::serve(options, shutdown).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use admin_args::ServersCommand;
    use clap::CommandFactory as _;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn add_infers_the_transport() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            let Command::Servers(ServersCommand::Add(add)) = cli.command else {
                panic!()
            };
            servers::add_transport(&add)
        };
        let stdio = parse(&[
            "m",
            "servers",
            "add",
            "t",
            "--env",
            "A=b",
            "--",
            "uvx",
            "mcp-server-time",
        ])
        .unwrap();
        assert_eq!(stdio.transport_type(), crate::model::TransportType::Stdio);
        let http = parse(&[
            "m",
            "servers",
            "add",
            "r",
            "--http",
            "http://h/mcp",
            "--header",
            "X-Key: v",
        ])
        .unwrap();
        assert_eq!(http.secrets()["X-Key"], "v");
        let sse = parse(&["m", "servers", "add", "r", "--sse", "http://h/sse"]).unwrap();
        assert_eq!(sse.transport_type(), crate::model::TransportType::Sse);
        assert!(parse(&["m", "servers", "add", "r"]).is_err());
        assert!(parse(&["m", "servers", "add", "r", "--http", "http://h", "--", "x"]).is_err());
        assert!(parse(&["m", "servers", "add", "r", "--env", "novalue", "--", "x"]).is_err());
        assert!(
            Cli::try_parse_from(["m", "servers", "add", "r", "--http", "a", "--sse", "b"]).is_err()
        );
    }
}
