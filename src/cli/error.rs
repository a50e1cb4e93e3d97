//! How a command fails: the message printed after `error:` and the exit
//! code (2 for a usage or config mistake, 1 when the operation failed, and
//! the admin client's own codes).

use super::client::ClientError;
use crate::config;

/// A CLI failure with its exit code.
#[derive(Debug, thiserror::Error)]
pub(super) enum CliError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    pub(super) fn exit_code(&self) -> u8 {
        match self {
            CliError::Client(err) => err.exit_code(),
            CliError::Usage(_) | CliError::Config(_) => 2,
            CliError::Failed(_) => 1,
        }
    }
}
