//! Config files applied to the registry: `serve --config` at start, and the
//! file each relaying client brings. A file's servers are added or updated
//! by name; a server is removed only when the file that added it no longer
//! names it (servers added through the API, or by other files, stay). Once
//! the daemon runs, what a file changed is connected, reconnected with its
//! new settings, or stopped at once.

use std::collections::HashSet;
use std::path::Path;

use crate::config::LoadedConfig;
use crate::model::ServerSource;
use crate::registry::{Registry, RegistryError};
use crate::router::Router;
use crate::store::UpsertOutcome;

/// What applying a file did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub servers: usize,
    pub changed: usize,
    pub removed: usize,
}

/// Applies `loaded` (read from `path`). `running` is the router of a
/// daemon already serving: the servers the file changed are connected or
/// stopped through it; at start, nothing is connected yet.
pub async fn apply(
    registry: &Registry,
    running: Option<&Router>,
    path: &Path,
    loaded: LoadedConfig,
) -> Result<Applied, RegistryError> {
    for warning in &loaded.warnings {
        tracing::warn!(config = %path.display(), "{warning}");
    }
    let source = crate::config::source_path(path);
    let actor = format!("config:{source}");
    let servers = loaded.servers.len();
    let named: HashSet<String> = loaded.servers.iter().map(|s| s.name.clone()).collect();
    let results = registry.upsert(loaded.servers, &actor).await?;
    let mut changed = 0;
    let mut to_connect = Vec::new();
    for (record, outcome) in &results {
        if *outcome == UpsertOutcome::Unchanged {
            continue;
        }
        changed += 1;
        let Some(router) = running else { continue };
        if *outcome == UpsertOutcome::Updated {
            // Its session runs on the old settings.
            router.stop(record.id).await;
        }
        if record.auto_connect {
            to_connect.push((record.id, record.name.clone()));
        }
    }
    if let Some(router) = running {
        router.connect_starting(to_connect);
    }
    let mut removed = 0;
    for server in registry.list(None).await? {
        let from_this_file =
            matches!(&server.source, ServerSource::ConfigFile { path } if *path == source);
        if from_this_file && !named.contains(&server.name) {
            if let Some(router) = running {
                router.stop(server.id).await;
            }
            registry.remove(&server.id.to_string(), &actor).await?;
            tracing::info!(server = %server.name, "removed: no longer in the config file");
            removed += 1;
        }
    }
    tracing::info!(config = %path.display(), servers, changed, removed, "config applied");
    Ok(Applied {
        servers,
        changed,
        removed,
    })
}
