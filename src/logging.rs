//! Structured logs to stderr (stdout is the MCP channel in stdio mode).

use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// What is logged when `RUST_LOG` is not set. rmcp logs every notification
/// at INFO, so its target defaults to `warn`.
pub const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// Installs the global subscriber; `RUST_LOG` overrides `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests embedding the library) is harmless: keep the first.
    let _ = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
