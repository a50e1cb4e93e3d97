//! Config files applied to the registry: `serve --config` at start, and the
//! file each relaying client brings. A file's servers are added or updated
//! by name; a server is removed only when the file that added it no longer
//! names it (servers added through the API, or by other files, stay), and
//! no other watched file names it (that file takes it over). Once
//! the daemon runs, what a file changed is connected, reconnected with its
//! new settings, or stopped at once. `ConfigFiles` keeps them applied: a
//! file is re-read when it changes (in the environment of whoever brought
//! it), and an edit that does not load leaves the last good state, with
//! the reason shown in the log and in the aggregator's state.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::LoadedConfig;
use crate::model::ServerSource;
use crate::registry::{ConfigFileStatus, Registry, RegistryError, ServerSpec};
use crate::router::Router;
use crate::store::UpsertOutcome;

/// How often watched files are looked at.
const POLL: Duration = Duration::from_secs(1);
/// How long a changed file must stand still before it is applied (an
/// editor writes in several steps).
const SETTLE: Duration = Duration::from_millis(300);

/// What applying a file did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub servers: usize,
    pub changed: usize,
    pub removed: usize,
}

/// What a file dropped that another watched file still names: left in
/// place by this file's apply, then taken over by that file.
#[derive(Debug, Default)]
pub struct Spared {
    pub servers: HashSet<String>,
    pub profiles: HashSet<String>,
}

/// Applies `loaded` (read from `path`). `running` is the router of a
/// daemon already serving: the servers the file changed are connected or
/// stopped through it; at start, nothing is connected yet. What `spared`
/// names is not removed though the file dropped it (another file still
/// names it and takes it over).
pub async fn apply(
    registry: &Registry,
    running: Option<&Router>,
    path: &Path,
    loaded: LoadedConfig,
    spared: &Spared,
) -> Result<Applied, RegistryError> {
    for warning in &loaded.warnings {
        tracing::warn!(config = %path.display(), "{warning}");
    }
    let source = crate::config::source_path(path);
    let actor = format!("config:{source}");
    let servers = loaded.servers.len();
    let named: HashSet<String> = loaded.servers.iter().map(|s| s.name.clone()).collect();
    let changed = upsert_specs(registry, running, loaded.servers, &actor).await?;
    let mut removed = 0;
    for server in registry.list(None).await? {
        let from_this_file =
            matches!(&server.source, ServerSource::ConfigFile { path } if *path == source);
        if from_this_file && !named.contains(&server.name) && !spared.servers.contains(&server.name)
        {
            if let Some(router) = running {
                router.stop(server.id).await;
            }
            registry.remove(&server.id.to_string(), &actor).await?;
            tracing::info!(server = %server.name, "removed: no longer in the config file");
            removed += 1;
        }
    }
    let profiles = apply_profiles(registry, &source, loaded.profiles, &spared.profiles).await?;
    tracing::info!(config = %path.display(), servers, changed, removed, profiles, "config applied");
    Ok(Applied {
        servers,
        changed,
        removed,
    })
}

/// Adds or updates servers as a file defines them, and (on a running
/// daemon) connects, reconnects or leaves each as its change needs; how
/// many changed.
async fn upsert_specs(
    registry: &Registry,
    running: Option<&Router>,
    specs: Vec<ServerSpec>,
    actor: &str,
) -> Result<usize, RegistryError> {
    let results = registry.upsert(specs, actor).await?;
    let mut changed = 0;
    let mut to_connect = Vec::new();
    for (record, outcome) in &results {
        if *outcome == UpsertOutcome::Unchanged {
            continue;
        }
        changed += 1;
        let Some(router) = running else { continue };
        match outcome {
            // Read per call from the table, which follows the store.
            UpsertOutcome::Retuned => continue,
            // Its session runs on the old settings.
            UpsertOutcome::Updated => router.stop(record.id).await,
            UpsertOutcome::Inserted | UpsertOutcome::Unchanged => {}
        }
        if record.auto_connect {
            to_connect.push((record.id, record.name.clone()));
        }
    }
    if let Some(router) = running {
        router.connect_starting(to_connect);
    }
    Ok(changed)
}

/// Stores a file's profiles (added or replaced by name) and removes those
/// it added before and no longer names; how many it names.
async fn apply_profiles(
    registry: &Registry,
    source: &str,
    profiles: Vec<crate::model::Profile>,
    spared: &HashSet<String>,
) -> Result<usize, RegistryError> {
    let named: HashSet<String> = profiles.iter().map(|p| p.name.clone()).collect();
    let count = profiles.len();
    let stored = registry.profiles().await?;
    for mut profile in profiles {
        // The file applied last wins, as for servers; said, since the
        // clients of the other file's profile see their view change.
        if let Some(other) = stored
            .iter()
            .find(|p| p.name == profile.name)
            .and_then(|p| p.source.as_deref())
            .filter(|other| *other != source)
            && !stored
                .iter()
                .any(|p| p.name == profile.name && p.same_view(&profile))
        {
            tracing::warn!(
                profile = %profile.name,
                "profile {} of {other} is replaced by the one in {source}",
                profile.name
            );
        }
        profile.source = Some(source.to_owned());
        registry.put_profile(profile).await?;
    }
    for profile in registry.profiles().await? {
        if profile.source.as_deref() == Some(source)
            && !named.contains(&profile.name)
            && !spared.contains(&profile.name)
        {
            // The file wins over the tokens bound to the view (unlike an
            // admin's removal, which they hold off): said, since those
            // tokens now reach nothing.
            let bound: Vec<String> = registry
                .tokens()
                .await?
                .into_iter()
                .filter(|token| token.profile.as_deref() == Some(profile.name.as_str()))
                .map(|token| token.name.to_string())
                .collect();
            if !bound.is_empty() {
                tracing::warn!(
                    profile = %profile.name,
                    "profile {} left {source}; the token(s) {} bound to it reach nothing until it is defined again or they are revoked",
                    profile.name,
                    bound.join(", ")
                );
            }
            registry.remove_profile(&profile.name).await?;
        }
    }
    Ok(count)
}

/// The variables a file's `$VAR`s expand in: a client's, or (`None`) this
/// process's own.
type Environment = Option<Arc<BTreeMap<String, String>>>;

/// Loads a file in its environment.
fn load_in(path: &Path, env: &Environment) -> Result<LoadedConfig, crate::config::ConfigError> {
    match env {
        Some(env) => crate::config::load_with_env(path, &|name| env.get(name).cloned()),
        None => crate::config::load(path),
    }
}

/// What a file looked like when last read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    content: u64,
}

impl Stamp {
    /// `None` when the file cannot be read (gone, unreadable).
    fn of(path: &Path) -> Option<Stamp> {
        use std::hash::{Hash as _, Hasher as _};
        let metadata = std::fs::metadata(path).ok()?;
        // Not read: too large, or a device or pipe, whose read may never
        // end (`/dev/zero`) or block the watch (a FIFO).
        if metadata.len() > crate::config::MAX_CONFIG_BYTES || !metadata.is_file() {
            return Some(Stamp {
                modified: metadata.modified().ok(),
                len: metadata.len(),
                content: 0,
            });
        }
        let bytes = std::fs::read(path).ok()?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut hasher);
        Some(Stamp {
            modified: metadata.modified().ok(),
            len: metadata.len(),
            content: hasher.finish(),
        })
    }
}

struct Watched {
    env: Environment,
    stamp: Option<Stamp>,
    status: ConfigFileStatus,
    /// What it last applied (none: a file a full disk kept from being
    /// applied at start).
    last_good: Option<Arc<LoadedConfig>>,
}

/// What a file dropped and others still define, with their definitions.
#[derive(Debug, Default)]
struct Handover {
    servers: Vec<(PathBuf, ServerSpec)>,
    profiles: Vec<(PathBuf, crate::model::Profile)>,
}

impl Handover {
    fn has_server(&self, name: &str) -> bool {
        self.servers.iter().any(|(_, spec)| spec.name == name)
    }

    fn has_profile(&self, name: &str) -> bool {
        self.profiles
            .iter()
            .any(|(_, profile)| profile.name == name)
    }

    fn spared(&self) -> Spared {
        Spared {
            servers: self.servers.iter().map(|(_, s)| s.name.clone()).collect(),
            profiles: self.profiles.iter().map(|(_, p)| p.name.clone()).collect(),
        }
    }
}

/// The config files a running daemon keeps applied; cheap to clone.
#[derive(Clone)]
pub struct ConfigFiles {
    registry: Registry,
    router: Router,
    files: Arc<Mutex<BTreeMap<PathBuf, Watched>>>,
    /// One file applied at a time (a client attaching while its file is
    /// re-read).
    applying: Arc<tokio::sync::Mutex<()>>,
    status: Arc<watch::Sender<Vec<ConfigFileStatus>>>,
}

impl ConfigFiles {
    pub fn new(registry: Registry, router: Router) -> ConfigFiles {
        ConfigFiles {
            registry,
            router,
            files: Arc::default(),
            applying: Arc::default(),
            status: Arc::new(watch::Sender::new(Vec::new())),
        }
    }

    /// Each file as it stands, for the aggregator's state.
    pub fn status(&self) -> watch::Receiver<Vec<ConfigFileStatus>> {
        self.status.subscribe()
    }

    /// Keeps watching a file applied at start (`serve --config`), with
    /// what it applied (for a hand-over while a later edit of it does not
    /// load).
    pub fn started_with(&self, path: &Path, applied: Arc<LoadedConfig>) {
        let stamp = Stamp::of(path);
        self.record(path, None, stamp, Ok(applied.servers.len()));
        self.keep_last_good(path, applied);
    }

    /// Watches a file the store could not take at start (a full disk):
    /// it counts as changed, so it is applied again until it is.
    pub fn started_without(&self, path: &Path, reason: &str) {
        self.record(path, None, None, Err(reason.to_owned()));
    }

    /// Loads and applies a file in `env` (a client's), and keeps it
    /// applied from now on. `Err` says why it was not.
    pub async fn apply_file(
        &self,
        path: &Path,
        env: BTreeMap<String, String>,
    ) -> Result<(), String> {
        self.load_and_apply(path, Some(Arc::new(env))).await
    }

    async fn load_and_apply(&self, path: &Path, env: Environment) -> Result<(), String> {
        let _one_at_a_time = self.applying.lock().await;
        let stamp = Stamp::of(path);
        let loaded = load_in(path, &env);
        let mut disk_failed = false;
        let result = match loaded {
            Ok(loaded) => {
                let handover = self.named_elsewhere(path, &loaded).await;
                let last_good = Arc::new(loaded.clone());
                let applied = apply(
                    &self.registry,
                    Some(&self.router),
                    path,
                    loaded,
                    &handover.spared(),
                )
                .await
                .map(|applied| applied.servers)
                .map_err(|err| {
                    disk_failed = matches!(
                        err,
                        RegistryError::Store(crate::store::StoreError::Disk { .. })
                    );
                    format!("cannot apply {}: {err}", path.display())
                });
                if applied.is_ok() {
                    self.hand_over(handover).await;
                    self.keep_last_good(path, last_good);
                }
                applied
            }
            Err(err) => Err(err.to_string()),
        };
        if let Err(reason) = &result {
            // Said once for as long as it fails the same way (a full disk
            // is tried again every second).
            let said = self
                .files
                .lock()
                .ok()
                .and_then(|files| files.get(path).and_then(|w| w.status.error.clone()));
            if said.as_deref() != Some(reason.as_str()) {
                tracing::warn!(
                    config = %path.display(),
                    "{reason}; the servers stay as the last good version left them"
                );
            }
        }
        // A file the disk could not take counts as unread: it is applied
        // again at the next look, until the disk takes it.
        let stamp = if disk_failed { None } else { stamp };
        self.record(path, env, stamp, result.clone());
        result.map(|_| ())
    }

    /// What `path` owns and no longer names that another watched file
    /// still does, each with that file's own definition: the file as it
    /// reads now, or as it last applied when it does not load now. Two
    /// clients' files may name one server; the one applied last owns it,
    /// and its edit must not take the server from the other.
    async fn named_elsewhere(&self, path: &Path, loaded: &LoadedConfig) -> Handover {
        let source = crate::config::source_path(path);
        let named: HashSet<&str> = loaded.servers.iter().map(|s| s.name.as_str()).collect();
        let named_profiles: HashSet<&str> =
            loaded.profiles.iter().map(|p| p.name.as_str()).collect();
        let dropped: HashSet<String> = match self.registry.list(None).await {
            Ok(servers) => servers
                .into_iter()
                .filter(|server| {
                    matches!(&server.source, ServerSource::ConfigFile { path } if *path == source)
                        && !named.contains(server.name.as_str())
                })
                .map(|server| server.name)
                .collect(),
            Err(_) => return Handover::default(),
        };
        let dropped_profiles: HashSet<String> = match self.registry.profiles().await {
            Ok(profiles) => profiles
                .into_iter()
                .filter(|p| {
                    p.source.as_deref() == Some(source.as_str())
                        && !named_profiles.contains(p.name.as_str())
                })
                .map(|p| p.name)
                .collect(),
            Err(_) => return Handover::default(),
        };
        if dropped.is_empty() && dropped_profiles.is_empty() {
            return Handover::default();
        }
        let others: Vec<(PathBuf, Environment, Option<Arc<LoadedConfig>>)> = match self.files.lock()
        {
            Ok(files) => files
                .iter()
                .filter(|(other, _)| crate::config::source_path(other) != source)
                .map(|(other, w)| (other.clone(), w.env.clone(), w.last_good.clone()))
                .collect(),
            Err(_) => return Handover::default(),
        };
        let mut handover = Handover::default();
        for (other, env, last_good) in others {
            let Some(other_loaded) = load_in(&other, &env).ok().map(Arc::new).or(last_good) else {
                continue;
            };
            for spec in &other_loaded.servers {
                if dropped.contains(&spec.name) && !handover.has_server(&spec.name) {
                    handover.servers.push((other.clone(), spec.clone()));
                }
            }
            for profile in &other_loaded.profiles {
                if dropped_profiles.contains(&profile.name) && !handover.has_profile(&profile.name)
                {
                    handover.profiles.push((other.clone(), profile.clone()));
                }
            }
        }
        handover
    }

    /// Each spared server and profile becomes its new file's own, with
    /// that file's definition (the rest of that file is left as it is).
    async fn hand_over(&self, handover: Handover) {
        let mut by_file: BTreeMap<PathBuf, Vec<ServerSpec>> = BTreeMap::new();
        for (file, spec) in handover.servers {
            by_file.entry(file).or_default().push(spec);
        }
        for (file, specs) in by_file {
            let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
            let actor = format!("config:{}", crate::config::source_path(&file));
            match upsert_specs(&self.registry, Some(&self.router), specs, &actor).await {
                Ok(_) => tracing::info!(
                    config = %file.display(),
                    "kept {}: still named in this file, which now owns them",
                    names.join(", ")
                ),
                Err(err) => tracing::warn!(
                    config = %file.display(),
                    "{} stay registered but could not be handed over to this file: {err}",
                    names.join(", ")
                ),
            }
        }
        for (file, mut profile) in handover.profiles {
            let name = profile.name.clone();
            profile.source = Some(crate::config::source_path(&file));
            match self.registry.put_profile(profile).await {
                Ok(_) => tracing::info!(
                    config = %file.display(),
                    "kept profile {name}: still defined in this file, which now owns it"
                ),
                Err(err) => tracing::warn!(
                    config = %file.display(),
                    "profile {name} stays but could not be handed over to this file: {err}"
                ),
            }
        }
    }

    /// Remembers what a file last applied, for when a later edit of it
    /// does not load and another file hands it a server.
    fn keep_last_good(&self, path: &Path, loaded: Arc<LoadedConfig>) {
        if let Ok(mut files) = self.files.lock()
            && let Some(watched) = files.get_mut(path)
        {
            watched.last_good = Some(loaded);
        }
    }

    fn record(
        &self,
        path: &Path,
        env: Environment,
        stamp: Option<Stamp>,
        result: Result<usize, String>,
    ) {
        let Ok(mut files) = self.files.lock() else {
            return;
        };
        let watched = files.entry(path.to_path_buf()).or_insert_with(|| Watched {
            env: env.clone(),
            stamp: None,
            last_good: None,
            status: ConfigFileStatus {
                path: path.display().to_string(),
                servers: 0,
                applied_at: None,
                error: None,
            },
        });
        // The newest client's environment wins for later edits.
        watched.env = env;
        watched.stamp = stamp;
        match result {
            Ok(servers) => {
                watched.status.servers = servers;
                watched.status.applied_at = Some(chrono::Utc::now());
                watched.status.error = None;
            }
            Err(reason) => watched.status.error = Some(reason),
        }
        let status = files.values().map(|w| w.status.clone()).collect();
        self.status.send_replace(status);
    }

    /// Re-applies each file once it has changed and stood still, until
    /// `shutdown`.
    pub fn spawn_watch(&self, shutdown: CancellationToken) {
        let files = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(POLL) => {}
                    () = shutdown.cancelled() => return,
                }
                for (path, env) in files.changed().await {
                    tokio::select! {
                        _ = files.load_and_apply(&path, env) => {}
                        () = shutdown.cancelled() => return,
                    }
                }
            }
        });
    }

    /// Files that changed since they were last read and then stood still
    /// for `SETTLE`.
    async fn changed(&self) -> Vec<(PathBuf, Environment)> {
        let watched: Vec<(PathBuf, Option<Stamp>)> = match self.files.lock() {
            Ok(files) => files.iter().map(|(p, w)| (p.clone(), w.stamp)).collect(),
            Err(_) => return Vec::new(),
        };
        let moved: Vec<(PathBuf, Option<Stamp>)> = watched
            .into_iter()
            .filter_map(|(path, last)| {
                let now = Stamp::of(&path);
                (now != last).then_some((path, now))
            })
            .collect();
        if moved.is_empty() {
            return Vec::new();
        }
        tokio::time::sleep(SETTLE).await;
        let Ok(files) = self.files.lock() else {
            return Vec::new();
        };
        moved
            .into_iter()
            .filter(|(path, seen)| Stamp::of(path) == *seen)
            .filter_map(|(path, _)| files.get(&path).map(|w| (path, w.env.clone())))
            .collect()
    }
}
