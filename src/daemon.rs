//! `mcp-aggregator serve`: opens the store, applies the config file, serves
//! the HTTP listener, and shuts everything down cleanly on SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState};
use crate::catalog::Catalog;
use crate::catalog::wire_name::WireNameRules;
use crate::config::{self, ConfigError};
use crate::model::ServerSource;
use crate::paths::{self, DaemonInfo};
use crate::registry::{Registry, RegistryError};
use crate::sessions::{SessionManager, SessionSettings};
use crate::store::{Store, StoreError, UpsertOutcome};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";
pub const LISTEN_ENV: &str = "MCP_AGGREGATOR_LISTEN";
pub const TOKEN_ENV: &str = "MCP_AGGREGATOR_TOKEN";
/// How long in-flight requests get to finish once shutdown starts.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);
/// How long sessions get to close (stdio children: SIGTERM, then SIGKILL).
pub const SESSIONS_GRACE: Duration = Duration::from_millis(1400);

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot apply the config file: {0}")]
    Registry(#[from] RegistryError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    DataFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the server stopped with an error: {0}")]
    Serve(std::io::Error),
}

impl DaemonError {
    /// 2 for bad input (the config file), 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            DaemonError::Config(_) | DaemonError::Registry(RegistryError::Invalid(_)) => 2,
            _ => 1,
        }
    }
}

/// What `serve` needs to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub config: Option<PathBuf>,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// Require the bearer token even on a loopback address (shared hosts).
    pub require_token: bool,
}

/// Runs the daemon until `shutdown` is cancelled.
pub async fn serve(options: ServeOptions, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let started = Instant::now();
    // Read the config before touching the store: a typo must not leave a
    // half-started daemon behind.
    let loaded = options.config.as_deref().map(config::load).transpose()?;

    let data_dir = options.data_dir.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&data_dir))
        .await
        .map_err(|err| DaemonError::Serve(std::io::Error::other(err)))??;
    let store = Arc::new(store);
    let reset = {
        let store = Arc::clone(&store);
        tokio::task::spawn_blocking(move || store.reset_statuses_after_restart())
            .await
            .map_err(|err| DaemonError::Serve(std::io::Error::other(err)))??
    };
    if reset > 0 {
        tracing::info!(
            servers = reset,
            "statuses reset to DISCONNECTED after restart"
        );
    }
    let registry = Registry::new(Arc::clone(&store));

    if let (Some(path), Some(loaded)) = (&options.config, loaded) {
        apply_config(&registry, path, loaded).await?;
    }

    let catalog = Catalog::new(Arc::clone(&store), WireNameRules::default());
    let sessions = SessionManager::new(registry.clone(), catalog, SessionSettings::default());

    let token = admin_token(&options)?;
    let state = AppState {
        registry,
        sessions: sessions.clone(),
        token: token.map(Arc::from),
        started,
    };
    let app = api::router(state);

    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| DaemonError::Bind {
            addr: options.listen,
            source,
        })?;
    let bound = listener.local_addr().map_err(DaemonError::Serve)?;
    let info = DaemonInfo {
        pid: std::process::id(),
        url: format!("http://{bound}"),
    };
    info.write(&options.data_dir)
        .map_err(|source| DaemonError::DataFile {
            path: options.data_dir.join(paths::DAEMON_FILE),
            source,
        })?;
    tracing::info!(
        url = %info.url,
        data_dir = %options.data_dir.display(),
        startup_ms = started.elapsed().as_millis() as u64,
        "listening on {}",
        info.url
    );

    // Servers join as they connect; the listener does not wait for them.
    let connecting = sessions.clone();
    tokio::spawn(async move {
        match connecting.connect_auto().await {
            Ok(count) if count > 0 => {
                tracing::info!(servers = count, "connecting auto-connect servers")
            }
            Ok(_) => {}
            Err(err) => tracing::error!("cannot start auto-connect: {err}"),
        }
    });

    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let result = tokio::select! {
        result = server => result.map_err(DaemonError::Serve),
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!("requests still running after {SHUTDOWN_GRACE:?}; closing them");
            Ok(())
        }
    };
    sessions.shutdown(SESSIONS_GRACE).await;
    DaemonInfo::remove(&options.data_dir, info.pid);
    tracing::info!("stopped");
    result
}

async fn apply_config(
    registry: &Registry,
    path: &Path,
    loaded: config::LoadedConfig,
) -> Result<(), DaemonError> {
    for warning in &loaded.warnings {
        tracing::warn!(config = %path.display(), "{warning}");
    }
    let actor = match loaded.servers.first().map(|s| &s.source) {
        Some(ServerSource::ConfigFile { path }) => format!("config:{path}"),
        _ => format!("config:{}", path.display()),
    };
    let count = loaded.servers.len();
    let results = registry.upsert(loaded.servers, &actor).await?;
    let changed = results
        .iter()
        .filter(|(_, o)| *o != UpsertOutcome::Unchanged)
        .count();
    tracing::info!(config = %path.display(), servers = count, changed, "config applied");
    Ok(())
}

/// Whether the API needs a bearer token: always once the listener is
/// reachable from other hosts, and on loopback when asked.
pub fn token_required(listen: SocketAddr, require_token: bool) -> bool {
    require_token || !listen.ip().is_loopback()
}

/// The bearer token, when one is required: `MCP_AGGREGATOR_TOKEN`, else the
/// data dir's token file, generated (mode 0600) on first use.
fn admin_token(options: &ServeOptions) -> Result<Option<String>, DaemonError> {
    if !token_required(options.listen, options.require_token) {
        return Ok(None);
    }
    if let Some(token) = std::env::var(TOKEN_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        return Ok(Some(token.trim().to_owned()));
    }
    let path = options.data_dir.join(paths::TOKEN_FILE);
    if let Some(token) = paths::read_token(&options.data_dir) {
        return Ok(Some(token));
    }
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    crate::store::secrets::write_private_file(&path, token.as_bytes()).map_err(|source| {
        DaemonError::DataFile {
            path: path.clone(),
            source,
        }
    })?;
    tracing::warn!(
        token_file = %path.display(),
        "the API needs `Authorization: Bearer <token>`; a token was generated into the token file"
    );
    Ok(Some(token))
}

/// Cancels `token` on SIGINT or SIGTERM.
pub fn cancel_on_signals(token: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received; shutting down"),
            _ = interrupt.recv() => tracing::info!("SIGINT received; shutting down"),
        }
        token.cancel();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_required_beyond_loopback_or_when_asked() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(!token_required(addr("127.0.0.1:8765"), false));
        assert!(!token_required(addr("[::1]:8765"), false));
        assert!(token_required(addr("127.0.0.1:8765"), true));
        assert!(token_required(addr("0.0.0.0:8765"), false));
        assert!(token_required(addr("192.0.2.10:8765"), false));
        assert!(token_required(addr("[::]:8765"), false));
    }
}
