//! `mcp-aggregator serve`: opens the store, applies the config file, serves
//! the HTTP listener and the local socket relays attach to, and shuts
//! everything down cleanly on SIGINT/SIGTERM (or, started for a client,
//! once no client has been attached for `--idle-exit`).
//! `config_files.rs` applies config files; `local.rs` is the socket.

mod config_files;
mod local;
#[cfg(feature = "postgres")]
mod replicas;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState};
use crate::catalog::Catalog;
use crate::config::{self, ConfigError};
use crate::index::{IndexError, SearchIndex};
use crate::mcp::meta::Expose;
use crate::mcp::{self, FrontDoor, http::McpHttp};
use crate::model::wire_name::WireNameRules;
use crate::paths::{self, DaemonInfo};
use crate::registry::{Registry, RegistryError};
use crate::router::{ConflictStrategy, Router};
use crate::sessions::{SessionManager, SessionSettings};
use crate::skills::Skills;
use crate::store::{Store, StoreError};

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
    #[error(
        "cannot listen on {addr}: {source} (give another address with --listen ADDR:PORT or MCP_AGGREGATOR_LISTEN; nothing was changed)"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    DataFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the search index: {0}")]
    Index(#[from] IndexError),
    #[error("the server stopped with an error: {0}")]
    Serve(std::io::Error),
    #[error("{0}")]
    Profile(String),
    /// `--store` names a store this build cannot use, or names it wrongly.
    #[error("--store: {0}")]
    SharedStore(String),
    #[error(
        "{TOKEN_ENV} cannot be used as a token: {0} (use up to 512 visible ASCII characters, e.g. `openssl rand -hex 32`)"
    )]
    BadToken(&'static str),
    /// The store could not be opened for a disk that refuses writes: what
    /// a running daemon waits out, a start cannot.
    #[error(
        "the store cannot be opened ({reason}){}; nothing already stored is lost: start again once it takes writes",
        if *full { ": the disk holding the data dir is full, free space there" } else { "" }
    )]
    DiskAtStart { reason: String, full: bool },
}

/// The exit status of a daemon whose store cannot be used as it is
/// (damaged, emptied, of a newer version): starting it again does not
/// help, so the shipped unit does not (`RestartPreventExitStatus=65`).
pub const EXIT_STORE_UNUSABLE: u8 = 65;

impl DaemonError {
    /// 2 for bad input (the config file), 65 for a store that cannot be
    /// used as it is, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            DaemonError::Config(_)
            | DaemonError::Registry(RegistryError::Invalid(_))
            | DaemonError::Profile(_)
            | DaemonError::SharedStore(_)
            | DaemonError::BadToken(_) => 2,
            DaemonError::Store(err) | DaemonError::Registry(RegistryError::Store(err))
                if err.is_unusable() =>
            {
                EXIT_STORE_UNUSABLE
            }
            _ => 1,
        }
    }

    /// A blocking task of the start-up that panicked: damage in the store
    /// when the panic hook found it there.
    fn from_task(err: tokio::task::JoinError, data_dir: &Path) -> DaemonError {
        match crate::store::damage() {
            Some(detail) if err.is_panic() => DaemonError::Store(StoreError::Damaged {
                path: data_dir.join("store.redb"),
                detail,
            }),
            _ => DaemonError::Serve(std::io::Error::other(err)),
        }
    }
}

/// Reports panics as one logged error instead of the default text on
/// stderr; one inside redb (how it meets a damaged page) is recorded as
/// damage of the store, which stops a running daemon (exit 65) instead of
/// letting every later request meet it again.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = crate::store::panic_message(info.payload());
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        if at.contains("/redb-") {
            if crate::store::damage_is_news() {
                tracing::error!(at, "the store's file made no sense to redb: {message}");
                crate::store::report_damage(format!("{message} ({at})"));
            } else {
                tracing::debug!(at, "damage met: {message}");
            }
        } else if tracing::dispatcher::has_been_set() {
            tracing::error!(at, "internal error: {message}");
        } else {
            eprintln!("error: internal error at {at}: {message}");
        }
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            eprintln!("{}", std::backtrace::Backtrace::force_capture());
        }
    }));
}

/// Resolves with the error to stop on once the store was found damaged
/// while running: stopping is better than writing to a damaged file.
async fn store_damaged(data_dir: &Path) -> DaemonError {
    let detail = crate::store::damage_found().await;
    // A panic inside redb is not proof: a copy of the file is checked, and
    // a sound one is a failure to restart from (exit 1), not damage (65).
    let dir = data_dir.to_path_buf();
    let sound = tokio::task::spawn_blocking(move || crate::store::confirmed_sound(&dir))
        .await
        .unwrap_or(false);
    if sound {
        tracing::error!(
            "redb failed ({detail}) on a store file that checks out sound; stopping, a restart takes over"
        );
        return DaemonError::Serve(std::io::Error::other(format!(
            "the store failed ({detail}); its file checks out sound"
        )));
    }
    let err = StoreError::Damaged {
        path: data_dir.join("store.redb"),
        detail,
    };
    tracing::error!("{err}; stopping");
    DaemonError::Store(err)
}

/// A store shared with other replicas (`serve --store postgres://…`).
#[derive(Debug, Clone)]
pub struct SharedStore {
    /// A `postgres://` URL (or `key=value` pairs) without a password.
    pub url: String,
    /// The password's file (its first line); else `PGPASSWORD`, if set.
    pub password_file: Option<PathBuf>,
    /// This replica's id among the others (`--replica-id`).
    pub replica_id: String,
}

/// The id a replica takes when not given one: the host's name and the
/// port it listens on.
pub fn default_replica_id(listen: SocketAddr) -> String {
    let uname = rustix::system::uname();
    let host = uname.nodename().to_string_lossy();
    let host = if host.is_empty() { "localhost" } else { &host };
    format!("{host}:{}", listen.port())
}

/// What `serve` needs to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub config: Option<PathBuf>,
    pub data_dir: PathBuf,
    /// The tables on a PostgreSQL shared with other replicas; `None`: all
    /// in the data dir's file.
    pub shared: Option<SharedStore>,
    pub listen: SocketAddr,
    /// Require the bearer token even on a loopback address (shared hosts).
    pub require_token: bool,
    /// Host names the listener accepts besides loopback (DNS-rebinding
    /// protection); `*` accepts any.
    pub allowed_hosts: Vec<String>,
    pub front_door: FrontDoorOptions,
    /// Header timeout and connection cap of the listener.
    pub listener: crate::listener::ListenerLimits,
    /// Idle expiry and caps of `/mcp` sessions.
    pub mcp_sessions: crate::mcp::session_table::SessionLimits,
    /// Stop once no local client has been attached for this long (a
    /// daemon started by a `stdio` client); never when `None`.
    pub idle_exit: Option<Duration>,
    /// Started by a `stdio` client: when `listen` is taken (another data
    /// dir's daemon), listen on a free loopback port instead of failing.
    pub started_by_client: bool,
}

/// Settings of the MCP front door and the sessions behind it, shared by
/// `serve` and `stdio`.
#[derive(Debug, Clone)]
pub struct FrontDoorOptions {
    /// What bare tool names shared by several servers reach.
    pub conflict_strategy: ConflictStrategy,
    /// What `tools/list` offers.
    pub expose: Expose,
    /// How long a server gets to answer `initialize`.
    pub connect_timeout: Duration,
    /// How long a server gets to answer a request (a tool call).
    pub request_timeout: Duration,
    /// How long a list or call made while `auto_connect` servers are still
    /// starting waits for them.
    pub startup_wait: Duration,
    /// How long a call waits for a server that is (re)connecting.
    pub call_wait: Duration,
    /// Health checks: interval, timeout, circuit breaker.
    pub health: crate::sessions::HealthSettings,
    /// How tools are classified into skills.
    pub skills: crate::skills::SkillsSettings,
    /// How much search is done (`--search`).
    pub search: crate::index::SearchSetting,
    /// Vectors beyond which the vector index is a graph (`--graph-from`).
    pub graph_from: usize,
    /// Whether tool calls are recorded in the audit log.
    pub audit_calls: bool,
    /// Whether calls' arguments are checked against the tool's schema,
    /// for servers that do not say (`--validate-arguments`).
    pub validate_arguments: bool,
}

impl Default for FrontDoorOptions {
    fn default() -> Self {
        let sessions = SessionSettings::default();
        FrontDoorOptions {
            conflict_strategy: ConflictStrategy::default(),
            expose: Expose::default(),
            connect_timeout: sessions.connect_timeout,
            request_timeout: sessions.request_timeout,
            startup_wait: crate::router::STARTUP_WAIT,
            call_wait: sessions.call_wait,
            health: sessions.health,
            skills: crate::skills::SkillsSettings::default(),
            search: crate::index::SearchSetting::default(),
            graph_from: crate::index::GRAPH_FROM,
            audit_calls: true,
            validate_arguments: false,
        }
    }
}

/// Everything a running aggregator is made of, shared by `serve` and `stdio`.
pub struct Stack {
    pub store: Arc<Store>,
    pub registry: Registry,
    pub sessions: SessionManager,
    pub router: Router,
    pub mcp: Arc<FrontDoor>,
    pub search: SearchIndex,
    pub skills: Skills,
    /// Stops the search index's background work.
    background: CancellationToken,
    /// The index's and the classifier's workers, each ending its running
    /// job before it returns (see `index::let_go`).
    workers: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Why the config file given at start could not be applied (a full
    /// disk): it is applied again once the disk takes it.
    pub config_error: Option<String>,
}

impl Stack {
    /// Opens the store, resets statuses after a restart, applies the config
    /// file, and starts the routing table. Nothing connects yet.
    pub async fn open(
        data_dir: &Path,
        shared: Option<&SharedStore>,
        config: Option<(&Path, config::LoadedConfig)>,
        front_door: FrontDoorOptions,
    ) -> Result<Stack, DaemonError> {
        // This process runs the servers: their orphans are ours to end.
        crate::reaper::become_subreaper();
        crate::reaper::spawn_orphan_reaper();
        // Servers left running by an aggregator that was killed outright
        // (the process it started for each dies with it; the rest of a
        // server does not). In the background: the grace must not delay
        // the start.
        tokio::spawn(async {
            let swept = tokio::task::spawn_blocking(|| {
                crate::reaper::sweep_abandoned(std::time::Duration::from_secs(1))
            })
            .await
            .unwrap_or(0);
            if swept > 0 {
                tracing::warn!(
                    processes = swept,
                    "ended server processes left running by an aggregator that was killed"
                );
            }
        });
        let (dir, shared_store) = (data_dir.to_path_buf(), shared.cloned());
        let store = tokio::task::spawn_blocking(move || open_store(&dir, shared_store.as_ref()))
            .await
            .map_err(|err| DaemonError::from_task(err, data_dir))??;
        let store = Arc::new(store);
        let reset = {
            let store = Arc::clone(&store);
            tokio::task::spawn_blocking(move || store.reset_statuses_after_restart())
                .await
                .map_err(|err| DaemonError::from_task(err, data_dir))?
        };
        match reset {
            Ok(0) => {}
            Ok(servers) => {
                tracing::info!(servers, "statuses reset to DISCONNECTED after restart")
            }
            // A full disk at start: serve what is stored; the statuses are
            // put right as servers connect.
            Err(StoreError::Disk { .. }) => {}
            Err(err) => return Err(err.into()),
        }
        let registry = Registry::new(Arc::clone(&store));
        let mut config_error = None;
        if let Some((path, loaded)) = config {
            match config_files::apply(&registry, None, path, loaded, &Default::default()).await {
                Err(RegistryError::Store(err @ StoreError::Disk { .. })) => {
                    tracing::warn!(
                        config = %path.display(),
                        "the config file could not be applied ({err}); the stored registrations are served, and the file is applied once the disk takes it"
                    );
                    config_error = Some(format!("cannot apply {}: {err}", path.display()));
                }
                other => {
                    other?;
                }
            }
        }
        // The poisoning rules compile while the rest starts.
        tokio::task::spawn_blocking(crate::trust::warm_up);
        let catalog = Catalog::new(Arc::clone(&store), WireNameRules::default());
        let settings = SessionSettings {
            connect_timeout: front_door.connect_timeout,
            request_timeout: front_door.request_timeout,
            call_wait: front_door.call_wait,
            health: front_door.health,
            ..SessionSettings::default()
        };
        let sessions = SessionManager::new(registry.clone(), catalog, settings);
        sessions.set_oauth(crate::oauth::OAuth::new(Arc::clone(&store)));
        let router = Router::start(
            sessions.clone(),
            front_door.conflict_strategy,
            front_door.startup_wait,
        )
        .await;
        router.check_arguments_by_default(front_door.validate_arguments);
        if front_door.audit_calls {
            router.audit_calls(registry.clone());
        }
        let search = {
            let (store, dir) = (Arc::clone(&store), data_dir.to_path_buf());
            let setting = front_door.search;
            let index =
                tokio::task::spawn_blocking(move || SearchIndex::open_with(store, &dir, setting))
                    .await
                    .map_err(|err| DaemonError::from_task(err, data_dir))??;
            index.set_graph_from(front_door.graph_from);
            index
        };
        router.use_index(search.clone());
        let background = CancellationToken::new();
        let maintenance = search.spawn_maintenance(
            sessions.catalog().subscribe(),
            registry.subscribe(),
            background.clone(),
        );
        let skills = Skills::new(
            Arc::clone(&store),
            search.clone(),
            front_door.skills.clone(),
        );
        let classifier = skills.spawn_worker(background.clone());
        // While the store fails writes it is tried again now and then (a
        // daemon nobody writes to must still notice the disk has room);
        // once writes work, what could not be stored meanwhile is.
        let resumer = {
            let (sessions, shutdown) = (sessions.clone(), background.clone());
            let store = Arc::clone(&store);
            let mut recoveries = store.write_recoveries();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        changed = recoveries.changed() => if changed.is_err() { return },
                        () = tokio::time::sleep(STORE_RETRY) => {
                            if store.storage_status_now().status != "ok" {
                                let store = Arc::clone(&store);
                                let _ = tokio::task::spawn_blocking(move || store.storage_status()).await;
                            }
                            continue;
                        }
                        () = shutdown.cancelled() => return,
                    }
                    sessions.resume_after_store_recovery().await;
                }
            })
        };
        let key_path = data_dir.join(crate::paths::STATE_KEY_FILE);
        let data_file = |source| DaemonError::DataFile {
            path: key_path.clone(),
            source,
        };
        let state_key = match crate::paths::private_key(&key_path).map_err(data_file)? {
            Some(key) => key,
            // It only seals the states handed to clients for a retry: a
            // damaged one is replaced, and those states are refused.
            None => {
                tracing::warn!(
                    "{} is not a 32-byte key; replacing it (input-required retries issued before are refused)",
                    key_path.display()
                );
                std::fs::remove_file(&key_path).map_err(data_file)?;
                crate::paths::private_key(&key_path)
                    .map_err(data_file)?
                    .ok_or_else(|| data_file(std::io::Error::other("not a 32-byte key")))?
            }
        };
        // Replicas share one, so a client's retry may reach any of them.
        let state_key = {
            let store = Arc::clone(&store);
            tokio::task::spawn_blocking(move || store.shared_state_key(state_key))
                .await
                .map_err(|err| DaemonError::from_task(err, data_dir))??
        };
        let mcp = FrontDoor::new(
            router.clone(),
            search.clone(),
            front_door.expose.clone(),
            &state_key,
        );
        Ok(Stack {
            store,
            registry,
            sessions,
            router,
            mcp,
            search,
            skills,
            background,
            workers: std::sync::Mutex::new(vec![maintenance, classifier, resumer]),
            config_error,
        })
    }

    /// Starts connecting the auto-connect servers in the background: the
    /// front doors serve at once and servers join as they come up (a
    /// client's first list waits for them, bounded).
    pub async fn connect_in_background(&self) {
        match self.sessions.connect_auto().await {
            Ok(count) if count > 0 => {
                tracing::info!(servers = count, "connecting auto-connect servers")
            }
            Ok(_) => {}
            Err(err) => tracing::error!("cannot start auto-connect: {err}"),
        }
    }

    /// Closes every session (child processes terminated and reaped). A
    /// sync or classification under way stops at its next batch and is
    /// waited for (bounded): it holds the store, which closes cleanly only
    /// once nothing does (else the next start checks and repairs it). Only
    /// before the process exits (the vectors are not freed).
    pub async fn shutdown(&self) {
        self.background.cancel();
        self.search.stop();
        self.search.abandon_at_exit();
        self.skills.stop();
        self.sessions.shutdown(SESSIONS_GRACE).await;
        // Their jobs hold the store; it closes cleanly once they are done.
        let workers = self
            .workers
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default();
        let _ = tokio::time::timeout(
            crate::index::LET_GO_WAIT,
            futures_util::future::join_all(workers),
        )
        .await;
        self.router.abandon_table_at_exit();
        // Whatever a server left that its session's end did not (a
        // session cut short by the grace, an orphan of unknown origin).
        let _ = tokio::task::spawn_blocking(crate::reaper::end_all).await;
    }
}

/// The data dir's store, its tables on a shared PostgreSQL when `shared`
/// names one. Blocking.
fn open_store(data_dir: &Path, shared: Option<&SharedStore>) -> Result<Store, DaemonError> {
    if shared.is_some_and(|shared| shared.password_file.is_none()) {
        crate::sessions::withhold_store_password();
    }
    match shared {
        None => Store::open(data_dir).map_err(|err| match err {
            StoreError::Disk { reason, full } => DaemonError::DiskAtStart { reason, full },
            err => DaemonError::Store(err),
        }),
        #[cfg(feature = "postgres")]
        Some(shared) => replicas::open_store(data_dir, shared),
        #[cfg(not(feature = "postgres"))]
        Some(_) => Err(no_postgres()),
    }
}

/// A replica as `cluster status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplicaStatus {
    pub id: String,
    /// Where it is reached (its listener's URL).
    pub address: String,
    pub version: String,
    pub up_seconds: u64,
    pub seen_seconds_ago: u64,
}

/// `cluster status`: the replicas of the shared store at `shared.url`
/// whose heartbeat is at most `within` old. Blocking.
pub fn cluster_status(
    shared: &SharedStore,
    within: Duration,
) -> Result<Vec<ReplicaStatus>, DaemonError> {
    #[cfg(feature = "postgres")]
    return replicas::seen(shared, within);
    #[cfg(not(feature = "postgres"))]
    {
        let _ = (shared, within);
        Err(no_postgres())
    }
}

#[cfg(not(feature = "postgres"))]
fn no_postgres() -> DaemonError {
    DaemonError::SharedStore(
        "this build cannot use a PostgreSQL store: it was built without the `postgres` feature (cargo build --release --features postgres)".to_owned(),
    )
}

/// What `store check` and `store recover` found.
use crate::store::RecoveryReport;

/// Whether a `store check`/`recover` failure is a refusal — a daemon
/// holds the store (stop it first), there is none where the user pointed,
/// or the user may not read it — rather than the disk failing.
pub fn store_refused(err: &StoreError) -> bool {
    match err {
        StoreError::AlreadyOpen { .. } => true,
        StoreError::DataDir { source, .. } => matches!(
            source.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
        ),
        _ => false,
    }
}

/// `store check`: every page and table of the data dir's store, read
/// through a copy.
pub fn check_store(data_dir: &Path) -> Result<RecoveryReport, StoreError> {
    crate::store::check(data_dir)
}

/// `store recover`: what can be read, into a new store (in place of the
/// damaged one, kept beside it, with `replace`).
pub fn recover_store(data_dir: &Path, replace: bool) -> Result<RecoveryReport, StoreError> {
    crate::store::recover_into_new(data_dir, replace)
}

/// Runs the daemon until `shutdown` is cancelled.
/// The search index over a data dir no daemon owns (for a reindex without
/// one), with the model loaded. Blocking.
pub fn open_search_index(data_dir: &Path) -> Result<SearchIndex, DaemonError> {
    let store = Arc::new(Store::open(data_dir)?);
    let index = SearchIndex::open(store, data_dir)?;
    index.load_model();
    Ok(index)
}

pub async fn serve(options: ServeOptions, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let started = Instant::now();
    // Read the config and take the port before touching the store: a typo
    // or a port in use must not leave a half-started daemon behind.
    let loaded = options.config.as_deref().map(config::load).transpose()?;
    let config = options.config.as_deref().zip(loaded);
    let listener = bind_listener(&options).await?;
    if let Some(shared) = &options.shared {
        crate::metrics::set_replica(&shared.replica_id);
    }
    let first_config = config
        .as_ref()
        .map(|(path, loaded)| (path.to_path_buf(), Arc::new(loaded.clone())));
    let stack = open_when_free(&options, config).await?;
    let config_files = config_files::ConfigFiles::new(stack.registry.clone(), stack.router.clone());
    if let Some((path, loaded)) = first_config {
        match &stack.config_error {
            None => config_files.started_with(&path, loaded),
            Some(reason) => config_files.started_without(&path, reason),
        }
    }
    config_files.spawn_watch(shutdown.clone());
    if let Some(descriptors) = crate::listener::raise_descriptor_limit() {
        tracing::debug!(descriptors, "open-descriptor limit");
    }

    let token = admin_token(&options)?;
    let named_tokens = api::tokens::Tokens::new(stack.registry.tokens().await?);
    let state = AppState {
        registry: stack.registry.clone(),
        router: stack.router.clone(),
        search: stack.search.clone(),
        skills: stack.skills.clone(),
        token: token.map(Arc::from),
        page_sessions: api::page::Sessions::default(),
        tokens: named_tokens.clone(),
        hosts: host_policy(&options),
        replica: options
            .shared
            .as_ref()
            .map(|s| Arc::from(s.replica_id.as_str())),
        started,
        config_files: config_files.status(),
        token_load: api::load::TokenLoad::for_listener(options.listener.max_connections),
    };
    let mcp_http = McpHttp::new(
        Arc::clone(&stack.mcp),
        options.mcp_sessions,
        options.shared.as_ref().map(|s| s.replica_id.as_str()),
    )
    .ending_streams_on(named_tokens.revocations());
    mcp_http.spawn_expiry(shutdown.clone());
    // `--idle-exit` counts the clients of `/mcp` beside those on the socket.
    let http_clients = options.idle_exit.map(|_| {
        let usage = mcp::http_use::HttpUse::default();
        let mcp_http = mcp_http.clone();
        let in_use = {
            let usage = usage.clone();
            move |idle| mcp_http.in_use_within(&usage, idle)
        };
        (usage, in_use)
    });
    let app = api::router(
        state,
        Some(mcp::http::routes(
            mcp_http,
            http_clients.as_ref().map(|(usage, _)| usage.clone()),
        )),
    );

    let bound = listener.local_addr().map_err(DaemonError::Serve)?;
    if let Some(oauth) = stack.sessions.oauth() {
        oauth.set_listener(bound);
    }
    // Before anything can find us (the local socket, the daemon file): a
    // client's first list must see the auto-connect servers as starting,
    // not an empty catalog with nothing to wait for.
    stack.connect_in_background().await;

    let local = match local::LocalSocket::bind(
        &options.data_dir,
        local::LocalServices {
            mcp: Arc::clone(&stack.mcp),
            config_files,
            registry: stack.registry.clone(),
        },
        shutdown.clone(),
    ) {
        Ok(local) => local,
        Err(err) => {
            // The servers already starting are ended, not left behind.
            stack.shutdown().await;
            return Err(err);
        }
    };
    if let (Some(idle), Some((_, in_use))) = (options.idle_exit, http_clients) {
        local.exit_when_idle(idle, shutdown.clone(), in_use);
    }
    #[cfg(feature = "postgres")]
    if let Some(shared) = &options.shared {
        replicas::spawn(
            Arc::clone(&stack.store),
            replicas::Follower {
                registry: stack.registry.clone(),
                router: stack.router.clone(),
                skills: stack.skills.clone(),
                tokens: named_tokens,
            },
            shared.replica_id.clone(),
            format!("http://{bound}"),
            shutdown.clone(),
        );
    }
    let info = DaemonInfo::of_this_process(format!("http://{bound}"));
    // A full disk at start: serve anyway; only finding us by data dir fails.
    if let Err(err) = info.write(&options.data_dir) {
        tracing::warn!(
            "cannot write {} ({err}); commands that find the daemon through its data dir need --url {} until it is written at the next start",
            options.data_dir.join(paths::DAEMON_FILE).display(),
            info.url
        );
    }
    tracing::info!(
        url = %info.url,
        socket = %local.path().display(),
        data_dir = %options.data_dir.display(),
        startup_ms = started.elapsed().as_millis() as u64,
        "listening on {} (admin page at {}/, MCP at {}/mcp, and for `stdio` clients at {})",
        info.url,
        info.url,
        info.url,
        local.path().display()
    );
    let server = crate::listener::serve(listener, app, options.listener, shutdown.clone());
    let result = tokio::select! {
        () = server => Ok(()),
        err = store_damaged(&options.data_dir) => Err(err),
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!("requests still running after {SHUTDOWN_GRACE:?}; closing them");
            Ok(())
        }
    };
    // The local socket goes first (see `local`).
    shutdown.cancel();
    stack.shutdown().await;
    DaemonInfo::remove(&options.data_dir, info.pid);
    tracing::info!("stopped");
    result
}

/// How long a daemon started by a client waits for the data dir while a
/// daemon that is stopping still holds it.
const WAIT_FOR_STOPPING_DAEMON: Duration = Duration::from_secs(20);

/// `Stack::open`; a daemon started by a client waits (bounded) while the
/// store is held by a daemon that is stopping (its last client left just
/// before this one came, and its socket is already gone).
async fn open_when_free(
    options: &ServeOptions,
    config: Option<(&Path, config::LoadedConfig)>,
) -> Result<Stack, DaemonError> {
    let until = Instant::now() + WAIT_FOR_STOPPING_DAEMON;
    loop {
        let attempt = config
            .as_ref()
            .map(|(path, loaded)| (*path, loaded.clone()));
        match Stack::open(
            &options.data_dir,
            options.shared.as_ref(),
            attempt,
            options.front_door.clone(),
        )
        .await
        {
            Err(DaemonError::Store(StoreError::AlreadyOpen { .. }))
                if options.started_by_client && Instant::now() < until =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// The HTTP listener's socket. A daemon started for a client whose port
/// is taken listens on a free loopback port (the CLI finds it through the
/// data dir).
async fn bind_listener(options: &ServeOptions) -> Result<tokio::net::TcpListener, DaemonError> {
    match tokio::net::TcpListener::bind(options.listen).await {
        Ok(listener) => Ok(listener),
        Err(err) if options.started_by_client && err.kind() == std::io::ErrorKind::AddrInUse => {
            let any = SocketAddr::from(([127, 0, 0, 1], 0));
            tracing::info!(
                "{} is in use; listening on a free loopback port instead",
                options.listen
            );
            tokio::net::TcpListener::bind(any)
                .await
                .map_err(|source| DaemonError::Bind { addr: any, source })
        }
        Err(source) => Err(DaemonError::Bind {
            addr: options.listen,
            source,
        }),
    }
}

/// `mcp-aggregator stdio --in-process`: the MCP front door on
/// stdin/stdout, with this process owning the data dir (one client, no
/// daemon), until stdin closes or a signal arrives.
pub async fn stdio_in_process(
    config_path: Option<PathBuf>,
    profile: Option<String>,
    data_dir: PathBuf,
    front_door: FrontDoorOptions,
    shutdown: CancellationToken,
) -> Result<(), DaemonError> {
    let loaded = config_path.as_deref().map(config::load).transpose()?;
    let config = config_path.as_deref().zip(loaded);
    let stack = Stack::open(&data_dir, None, config, front_door).await?;
    if let Some(name) = &profile
        && let Err(err) = stack.router.check_profile(name).await
    {
        let reason = unknown_profile(&stack.registry, err).await;
        stack.shutdown().await;
        return Err(DaemonError::Profile(reason));
    }
    // This process serves this one client, so a server's questions asked
    // outside a call (roots at its start) are its. Not so the daemon: what
    // it would hand a server then is one client's, kept for every other.
    stack.mcp.set_single_client(true);
    stack.connect_in_background().await;
    let served = mcp::stdio::serve(
        Arc::clone(&stack.mcp),
        mcp::stdio::stdin(),
        mcp::stdio::stdout(),
        profile,
        shutdown,
    );
    let result = tokio::select! {
        () = served => Ok(()),
        err = store_damaged(&data_dir) => Err(err),
    };
    stack.shutdown().await;
    result
}

/// How often a store that fails writes is tried again when nobody writes.
const STORE_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Says that a client's profile does not exist, and which do.
pub async fn unknown_profile(registry: &Registry, err: crate::router::CallError) -> String {
    let known: Vec<String> = registry
        .profiles()
        .await
        .map(|profiles| profiles.into_iter().map(|p| p.name).collect())
        .unwrap_or_default();
    match known.is_empty() {
        true => format!(
            "{err}: no profiles are defined (add them in a config file's `profiles`, or with `mcp-aggregator profiles set`)"
        ),
        false => format!("{err}; the profiles are: {}", known.join(", ")),
    }
}

/// Loopback names, the `--allow-host` names, and the listen address itself
/// when it is a specific one (clients reach it by that address).
fn host_policy(options: &ServeOptions) -> api::guard::HostPolicy {
    let mut hosts = options.allowed_hosts.clone();
    if !options.listen.ip().is_unspecified() {
        hosts.push(options.listen.ip().to_string());
    } else if hosts.is_empty() {
        tracing::warn!(
            listen = %options.listen,
            "listening on every address, but only loopback Host names are accepted: give the names clients use with --allow-host (or `*` behind a proxy)"
        );
    }
    api::guard::HostPolicy::new(hosts)
}

/// Whether the API needs a bearer token: always once the listener is
/// reachable from other hosts, and on loopback when asked.
pub fn token_required(listen: SocketAddr, require_token: bool) -> bool {
    require_token || !listen.ip().is_loopback()
}

/// The bearer token, when one is required: `MCP_AGGREGATOR_TOKEN`, else the
/// data dir's token file, generated (mode 0600) on first use.
/// A token file someone else could read (made by hand, restored from a
/// backup, a link to a shared file) is made readable by its owner only,
/// and the user is told: whoever read it may use it.
fn keep_token_file_private(path: &Path) {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let Ok(link) = std::fs::symlink_metadata(path) else {
        return;
    };
    if link.file_type().is_symlink() {
        tracing::warn!(token_file = %path.display(), "the token file is a symbolic link; the token it holds may be readable elsewhere: replace it with a file of its own (delete it and restart to have one generated)");
        return;
    }
    if link.mode() & 0o077 == 0 {
        return;
    }
    let fixed = link.uid() == rustix::process::getuid().as_raw()
        && std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).is_ok();
    tracing::warn!(
        token_file = %path.display(),
        made_private = fixed,
        "the token file was readable by others; anyone who read it can use the API: replace the token (delete the file and restart) if that matters"
    );
}

fn admin_token(options: &ServeOptions) -> Result<Option<String>, DaemonError> {
    if !token_required(options.listen, options.require_token) {
        return Ok(None);
    }
    if let Some(token) = std::env::var(TOKEN_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        let token = token.trim();
        // One no client could send (an HTTP header is ASCII) or no cookie
        // could hold would only lock everyone out.
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(DaemonError::BadToken(
                "it holds spaces, control or non-ASCII characters, which no HTTP client can send",
            ));
        }
        if token.len() > 512 {
            return Err(DaemonError::BadToken("it is longer than 512 characters"));
        }
        return Ok(Some(token.to_owned()));
    }
    let path = options.data_dir.join(paths::TOKEN_FILE);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file() && !m.is_symlink()) {
        return Err(DaemonError::DataFile {
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "it is not a regular file: move it away (a new token is then made)",
            ),
            path,
        });
    }
    if let Some(token) = paths::read_token(&options.data_dir) {
        keep_token_file_private(&path);
        return Ok(Some(token));
    }
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    crate::paths::write_private_file(&path, token.as_bytes()).map_err(|source| {
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

/// Cancels `token` on SIGINT, SIGTERM or SIGHUP (a closed terminal):
/// every one a clean shutdown, never the default death that leaves
/// `daemon.json`, the socket and the servers behind.
pub fn cancel_on_signals(token: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received; shutting down"),
            _ = interrupt.recv() => tracing::info!("SIGINT received; shutting down"),
            _ = hangup.recv() => tracing::info!("SIGHUP received (its terminal closed?); shutting down"),
        }
        token.cancel();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_others_can_read_is_made_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join(paths::TOKEN_FILE);
        std::fs::write(&path, "secret").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        keep_token_file_private(&path);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

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
