//! Sessions: one live MCP session per server, shared by everything in the
//! process. A supervisor task per server owns its lifecycle — connect with
//! timeout and backoff, discovery, reconnect after a crash, drain on
//! disconnect — and drives the status state machine through the registry.
//!
//! The client side speaks raw JSON-RPC (see `session.rs`) rather than rmcp's
//! typed client: the aggregator passes definitions and results through, and
//! rmcp's typed model drops fields it does not know.

mod calls;
mod discovery;
mod dispatch;
mod events;
mod health;
// The bridge is a Streamable HTTP client of the daemon: it opens this link.
pub mod http;
mod legacy_session;
mod link;
mod over_http;
mod pending;
mod revision;
mod rpc_error;
mod session;
mod sse;
mod stdio;
pub use stdio::withhold_store_password;
mod supervisor;
mod transport;
mod vitals;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::catalog::Catalog;
use crate::model::{
    Backoff, ConnectOutcome, ServerId, ServerNotice, ServerRequestHandler, ServerStatus,
    StatusTrigger,
};
use crate::registry::{Registry, RegistryError, RegistryEvent};
pub use calls::CallGuard;
pub use events::SessionEvent;
pub use health::HealthSettings;
pub use rpc_error::RpcError;
pub use session::Session;
pub use stdio::close_inherited_on_exec;
pub use transport::LinkError;

/// A fresh channel for what a link receives.
pub fn inbound_channel() -> (
    mpsc::Sender<transport::Received>,
    mpsc::Receiver<transport::Received>,
) {
    mpsc::channel(transport::INBOUND_CAPACITY)
}

/// Timeouts and retry policy. The retries never give up, so a server that
/// comes back is always reconnected.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub drain_timeout: Duration,
    /// Delays between failed attempts (never gives up).
    pub backoff: Backoff,
    /// How long a call waits for a server that is connecting (or asked to
    /// reconnect by the call) before it fails.
    pub call_wait: Duration,
    pub health: health::HealthSettings,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            connect_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            backoff: Backoff {
                first: Duration::from_secs(1),
                ceiling: Duration::from_secs(30),
            },
            call_wait: Duration::from_secs(10),
            health: health::HealthSettings::default(),
        }
    }
}

impl SessionSettings {
    /// The delay before retry number `attempt` (0-based), drawn afresh.
    pub fn retry_delay(&self, attempt: usize) -> Duration {
        let failures = u32::try_from(attempt).unwrap_or(u32::MAX).saturating_add(1);
        self.backoff.delay(failures, fastrand::u64(..))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("the aggregator is shutting down")]
    ShuttingDown,
}

enum Command {
    Connect,
    /// The store accepts writes again: a connected server's status and
    /// lists are written again (what failed meanwhile was lost).
    Relist,
    Disconnect {
        force: bool,
        reply: oneshot::Sender<usize>,
    },
    Stop {
        reply: oneshot::Sender<()>,
    },
}

struct Handle {
    commands: mpsc::UnboundedSender<Command>,
    session: watch::Receiver<Option<Arc<Session>>>,
    task: JoinHandle<()>,
}

pub(crate) struct Shared {
    registry: Registry,
    catalog: Catalog,
    settings: SessionSettings,
    http: reqwest::Client,
    notices: tokio::sync::broadcast::Sender<ServerNotice>,
    request_handler: std::sync::RwLock<Option<Arc<dyn ServerRequestHandler>>>,
    /// `auto_connect` servers whose first attempt has not ended yet (neither
    /// connected and discovered, nor failed), and servers connected whose
    /// lists are being discovered: what a client that lists right after
    /// start-up (or calls a tool of a server that just connected) waits for.
    starting: watch::Sender<HashSet<ServerId>>,
    /// Servers asked to connect (a registration, the admin API) whose
    /// attempt has not ended: a call for one of their tools waits for it.
    /// Lists do not — a server that hangs while connecting would hold every
    /// list up.
    connecting: watch::Sender<HashSet<ServerId>>,
    /// Each supervised server's health record.
    vitals: Mutex<HashMap<ServerId, Arc<vitals::Vitals>>>,
    /// Logins to the servers that ask for one (set once by the daemon).
    oauth: std::sync::OnceLock<Arc<crate::oauth::OAuth>>,
}

impl Shared {
    /// The server's health record, made on first use.
    fn vitals(&self, record: &crate::model::ServerRecord) -> Arc<vitals::Vitals> {
        let interval = self
            .settings
            .health
            .interval_for(record.health_check_interval_secs);
        let mut all = match self.vitals.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let vitals = all.entry(record.id).or_insert_with(|| {
            Arc::new(vitals::Vitals::new(&record.name, record.status, interval))
        });
        vitals.set_interval(interval);
        Arc::clone(vitals)
    }

    fn known_vitals(&self, id: ServerId) -> Option<Arc<vitals::Vitals>> {
        self.vitals.lock().ok()?.get(&id).cloned()
    }

    /// Tells whoever listens (the router) that a server announced a change
    /// of one of its lists, now listed again.
    fn announce(&self, id: ServerId, method: &str) {
        let _ = self.notices.send(ServerNotice {
            server_id: id,
            message: crate::jsonrpc::notification(method, None),
        });
    }

    /// The server is connected and its lists are being discovered.
    fn starting(&self, id: ServerId) {
        self.starting
            .send_if_modified(|starting| starting.insert(id));
    }

    /// The server's attempt is over, whichever way it went.
    fn started(&self, id: ServerId) {
        self.starting
            .send_if_modified(|starting| starting.remove(&id));
        self.connecting
            .send_if_modified(|connecting| connecting.remove(&id));
    }
}

/// The sessions of every server; cheap to clone.
#[derive(Clone)]
pub struct SessionManager {
    shared: Arc<Shared>,
    handles: Arc<Mutex<HashMap<ServerId, Handle>>>,
    closing: Arc<std::sync::atomic::AtomicBool>,
    /// 2025 sessions beside servers' own, for 2025 clients' calls.
    legacy: Arc<legacy_session::LegacySessions>,
}

impl SessionManager {
    pub fn new(registry: Registry, catalog: Catalog, settings: SessionSettings) -> SessionManager {
        let http = crate::http_client::client(Duration::from_secs(10));
        let (notices, _) = tokio::sync::broadcast::channel(1024);
        SessionManager {
            shared: Arc::new(Shared {
                registry,
                catalog,
                settings,
                http,
                notices,
                request_handler: std::sync::RwLock::new(None),
                starting: watch::Sender::new(HashSet::new()),
                connecting: watch::Sender::new(HashSet::new()),
                vitals: Mutex::new(HashMap::new()),
                oauth: std::sync::OnceLock::new(),
            }),
            handles: Arc::new(Mutex::new(HashMap::new())),
            closing: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            legacy: Arc::default(),
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    pub fn settings(&self) -> &SessionSettings {
        &self.shared.settings
    }

    /// A server's health figures (none: it was never connected).
    pub fn health(&self, id: ServerId) -> Option<crate::model::health::HealthFigures> {
        self.shared.known_vitals(id).map(|v| v.figures())
    }

    /// Why a server is DEGRADED, when it is.
    pub fn degraded_reason(&self, id: ServerId) -> Option<String> {
        self.shared.known_vitals(id)?.degraded_reason()
    }

    pub fn catalog(&self) -> &Catalog {
        &self.shared.catalog
    }

    /// Where servers' own requests (sampling, elicitation, roots) go from now
    /// on (sessions opened later use it).
    pub fn set_request_handler(&self, handler: Arc<dyn ServerRequestHandler>) {
        if let Ok(mut slot) = self.shared.request_handler.write() {
            *slot = Some(handler);
        }
    }

    /// Where servers that ask for a login get one (sessions opened later
    /// use it); set once.
    pub fn set_oauth(&self, oauth: Arc<crate::oauth::OAuth>) {
        let _ = self.shared.oauth.set(oauth);
    }

    /// The logins, when set.
    pub fn oauth(&self) -> Option<&Arc<crate::oauth::OAuth>> {
        self.shared.oauth.get()
    }

    /// Notifications servers send on their own (resource updates, logs).
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<ServerNotice> {
        self.shared.notices.subscribe()
    }

    /// Starts connecting every `auto_connect` server, in parallel, without
    /// waiting for any of them. They count as starting (see `wait_started`)
    /// from before this returns.
    pub async fn connect_auto(&self) -> Result<usize, SessionsError> {
        let servers = self.shared.registry.list(None).await?;
        let auto: Vec<_> = servers
            .into_iter()
            .filter(|s| s.auto_connect)
            .map(|s| (s.id, s.name))
            .collect();
        Ok(self.connect_starting(auto))
    }

    /// Starts connecting `servers` (id and name), in parallel, without
    /// waiting: they count as starting, as at start-up, so a client that
    /// lists once sees them (servers a config file brings to a running
    /// daemon).
    pub fn connect_starting(&self, servers: Vec<(ServerId, String)>) -> usize {
        self.shared
            .starting
            .send_modify(|starting| starting.extend(servers.iter().map(|(id, _)| *id)));
        let manager = self.clone();
        let count = servers.len();
        tokio::spawn(async move {
            for (id, name) in servers {
                match manager.connect(id).await {
                    Ok(ConnectOutcome::Initiated) => {}
                    Ok(ConnectOutcome::AlreadyConnected) => manager.shared.started(id),
                    Err(err) => {
                        manager.shared.started(id);
                        tracing::error!(server = %name, "cannot start connecting: {err}")
                    }
                }
            }
        });
        count
    }

    /// Whether an `auto_connect` server is still on its first attempt, or a
    /// connected server's lists are being discovered.
    pub fn is_starting(&self) -> bool {
        !self.shared.starting.borrow().is_empty()
    }

    /// Whether this server just connected and its lists are still being
    /// discovered (or it is on its first attempt at start-up).
    pub fn is_discovering(&self, id: ServerId) -> bool {
        self.shared.starting.borrow().contains(&id)
    }

    /// Waits, at most `limit`, until every `auto_connect` server's first
    /// attempt is over — connected with its lists discovered, or failed —
    /// and every server that just connected has its lists.
    /// Returns at once when nothing is starting; true if it had to wait.
    pub async fn wait_started(&self, limit: Duration) -> bool {
        if self.shared.starting.borrow().is_empty() {
            return false;
        }
        let mut starting = self.shared.starting.subscribe();
        let _ = tokio::time::timeout(limit, starting.wait_for(HashSet::is_empty)).await;
        true
    }

    /// `wait_started`, and also every server asked to connect since whose
    /// attempt is not over (what a call for a tool nobody offers yet waits
    /// for). True if it had to wait.
    pub async fn wait_connected(&self, limit: Duration) -> bool {
        if self.shared.connecting.borrow().is_empty() {
            return self.wait_started(limit).await;
        }
        let deadline = tokio::time::Instant::now() + limit;
        let mut connecting = self.shared.connecting.subscribe();
        let _ = tokio::time::timeout_at(deadline, connecting.wait_for(HashSet::is_empty)).await;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.wait_started(left).await;
        true
    }

    /// Asks for a connection (idempotent). The status moves to `CONNECTING`
    /// before this returns; the attempt itself runs in the background.
    pub async fn connect(&self, id: ServerId) -> Result<ConnectOutcome, SessionsError> {
        if self.closing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(SessionsError::ShuttingDown);
        }
        let record = self.shared.registry.get(&id.to_string()).await?;
        match record.status {
            ServerStatus::Connected | ServerStatus::Degraded => {
                return Ok(ConnectOutcome::AlreadyConnected);
            }
            ServerStatus::Connecting => {}
            from @ (ServerStatus::Disconnected | ServerStatus::Error) => {
                let trigger = if from == ServerStatus::Error {
                    StatusTrigger::Reconnect
                } else {
                    StatusTrigger::Connect
                };
                match self
                    .shared
                    .registry
                    .transition(id, ServerStatus::Connecting, trigger, None, |r| {
                        r.error_message = None
                    })
                    .await
                {
                    Ok(_) => {
                        // Counted as a reconnect here, as the supervisor
                        // would when it moves the server itself.
                        let vitals = self.shared.vitals(&record);
                        vitals.attempt_started();
                        vitals.status_changed(ServerStatus::Connecting, None);
                    }
                    // Someone else moved it first (a racing connect): fine.
                    Err(err) if err.is_refused_transition() => {}
                    Err(err) => return Err(err.into()),
                }
            }
        }
        let mut handles = self.lock();
        let alive = handles.get(&id).is_some_and(|h| !h.task.is_finished());
        if !alive {
            let (commands, receiver) = mpsc::unbounded_channel();
            let (publish, session) = watch::channel(None);
            let task = tokio::spawn(supervisor::run(
                Arc::clone(&self.shared),
                id,
                receiver,
                publish,
            ));
            handles.insert(
                id,
                Handle {
                    commands,
                    session,
                    task,
                },
            );
        }
        if let Some(handle) = handles.get(&id) {
            // A call for one of its tools made right after this returns
            // (a registration's 201) waits for the attempt instead of
            // finding no such tool; the supervisor ends it either way.
            self.shared
                .connecting
                .send_if_modified(|connecting| connecting.insert(id));
            let _ = handle.commands.send(Command::Connect);
        }
        Ok(ConnectOutcome::Initiated)
    }

    /// Disconnects: waits for in-flight calls (up to the drain timeout), or
    /// with `force` cancels them. Returns how many calls were cut off.
    /// Disconnecting a server that is not connected just stops its retries.
    pub async fn disconnect(&self, id: ServerId, force: bool) -> Result<usize, SessionsError> {
        let _ = self.shared.registry.get(&id.to_string()).await?;
        let commands = self.lock().get(&id).map(|h| h.commands.clone());
        let Some(commands) = commands else {
            return Ok(0);
        };
        let (reply, answer) = oneshot::channel();
        if commands.send(Command::Disconnect { force, reply }).is_err() {
            return Ok(0);
        }
        Ok(answer.await.unwrap_or(0))
    }

    /// Ends a server's supervisor (force-disconnecting it); used before removal.
    pub async fn stop(&self, id: ServerId) {
        self.legacy.forget(id);
        let handle = self.lock().remove(&id);
        if let Some(handle) = handle {
            let (reply, answer) = oneshot::channel();
            if handle.commands.send(Command::Stop { reply }).is_ok() {
                let _ = answer.await;
            }
            let _ = handle.task.await;
        }
        let vitals = self
            .shared
            .vitals
            .lock()
            .ok()
            .and_then(|mut v| v.remove(&id));
        if let Some(vitals) = vitals {
            vitals.forget();
        }
    }

    /// The session a call of `caller` goes over: the server's own, or for
    /// a 2025 client of a server spoken to in 2026-07-28 over HTTP, a 2025
    /// session beside it when the server keeps one (see `legacy_session`).
    pub async fn session_for_caller(
        &self,
        id: ServerId,
        main: Arc<Session>,
        caller: &crate::model::Caller,
    ) -> Arc<Session> {
        if !legacy_session::wants_legacy(&main, caller) {
            return main;
        }
        let shared = Arc::clone(&self.shared);
        self.legacy
            .session_beside(id, main, || async move {
                let record = shared.registry.get(&id.to_string()).await.ok()?;
                let (events, mut receiver) = events::event_channel();
                // Its list changes are the server's own session's to act on.
                tokio::spawn(async move { while receiver.recv().await.is_some() {} });
                match supervisor::open_legacy(&shared, &record, events).await {
                    Ok(session) => Some(session),
                    Err(reason) => {
                        tracing::info!(server = %record.name, "no 2025 session beside the 2026-07-28 one ({reason}); 2025 clients' calls go over the 2026-07-28 session");
                        None
                    }
                }
            })
            .await
    }

    /// The live session of a server, if it is connected.
    pub fn session(&self, id: ServerId) -> Option<Arc<Session>> {
        self.lock()
            .get(&id)
            .and_then(|h| h.session.borrow().clone())
    }

    /// The server's live session, waiting (at most `wait`) while it is
    /// connecting or about to publish its session; a server in ERROR is
    /// asked to reconnect once, a DISCONNECTED one is not waited for (an
    /// admin's choice). Woken by the session being published and by status
    /// changes, never by polling. `Err` is the status it was left in (none:
    /// the server is not registered).
    pub async fn wait_session(
        &self,
        id: ServerId,
        wait: Duration,
    ) -> Result<Arc<Session>, Option<ServerStatus>> {
        let live = |session: Option<Arc<Session>>| session.filter(|s| !s.is_closed());
        // Subscribed before the status is read, so no change is missed.
        let mut statuses = self.registry().subscribe();
        let mut published = self.lock().get(&id).map(|h| h.session.clone());
        if let Some(session) = published.as_ref().and_then(|rx| live(rx.borrow().clone())) {
            return Ok(session);
        }
        let mut status = match self.registry().get(&id.to_string()).await {
            Ok(record) => record.status,
            Err(_) => return Err(None),
        };
        let deadline = tokio::time::Instant::now() + wait;
        // Asked to reconnect; then whether the attempt started (a later
        // ERROR is that attempt failing, not the one we nudged).
        let (mut nudged, mut attempting) = (false, false);
        loop {
            if published.is_none() {
                published = self.lock().get(&id).map(|h| h.session.clone());
            }
            if let Some(session) = published.as_ref().and_then(|rx| live(rx.borrow().clone())) {
                return Ok(session);
            }
            match status {
                ServerStatus::Disconnected => return Err(Some(status)),
                ServerStatus::Error if attempting => return Err(Some(status)),
                // The circuit breaker: a server whose last attempt failed
                // moments ago is not asked again by every call.
                ServerStatus::Error
                    if !nudged
                        && self.shared.known_vitals(id).is_some_and(|v| {
                            v.breaker_open(self.shared.settings.health.breaker_cooldown)
                        }) =>
                {
                    return Err(Some(status));
                }
                ServerStatus::Error if !nudged => {
                    nudged = true;
                    let _ = self.connect(id).await;
                    // `connect` moved it to CONNECTING (or the supervisor
                    // is about to): read where it is now.
                    match self.registry().get(&id.to_string()).await {
                        Ok(record) => status = record.status,
                        Err(_) => return Err(None),
                    }
                    continue;
                }
                ServerStatus::Connecting if nudged => attempting = true,
                _ => {}
            }
            let session_changed = async {
                match published.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = session_changed => {}
                event = statuses.recv() => match event {
                    // Events queued before the status was read are stale:
                    // an event is a cue to read the status, not the status.
                    Ok(RegistryEvent::StatusChanged { id: changed, .. }) if changed == id => {
                        match self.registry().get(&id.to_string()).await {
                            Ok(record) => status = record.status,
                            Err(_) => return Err(None),
                        }
                    }
                    Ok(RegistryEvent::Removed { id: removed, .. }) if removed == id => return Err(None),
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        match self.registry().get(&id.to_string()).await {
                            Ok(record) => status = record.status,
                            Err(_) => return Err(None),
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Err(Some(status)),
                },
                () = tokio::time::sleep_until(deadline) => return Err(Some(status)),
            }
        }
    }

    /// Whether `shutdown` began (what follows from sessions closing, such
    /// as rebuilding the routing table, is then wasted work).
    pub fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stops every supervisor and closes every session (child process groups
    /// are terminated and reaped), within `deadline`.
    pub async fn shutdown(&self, deadline: Duration) {
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let handles: Vec<(ServerId, Handle)> = self.lock().drain().collect();
        let stops = handles.into_iter().map(|(_, handle)| async move {
            let (reply, answer) = oneshot::channel();
            if handle.commands.send(Command::Stop { reply }).is_ok() {
                let _ = answer.await;
            }
            let _ = handle.task.await;
        });
        if tokio::time::timeout(deadline, futures_util::future::join_all(stops))
            .await
            .is_err()
        {
            tracing::warn!("some sessions did not close within {deadline:?}");
        }
    }

    /// After the store failed writes and accepts them again: connected
    /// servers write their status and lists again, and `auto_connect`
    /// servers that never got to connect (the daemon started on a full
    /// disk) connect now.
    pub async fn resume_after_store_recovery(&self) {
        for handle in self.lock().values() {
            let _ = handle.commands.send(Command::Relist);
        }
        let Ok(servers) = self.shared.registry.list(None).await else {
            return;
        };
        // A server whose session ended with no record of it (its removal
        // failed on the full disk after its session was stopped).
        for server in &servers {
            let up = server.status.is_available() || server.status == ServerStatus::Connecting;
            if up && !self.lock().contains_key(&server.id) {
                let _ = self
                    .shared
                    .registry
                    .transition(
                        server.id,
                        ServerStatus::Disconnected,
                        StatusTrigger::Disconnect,
                        Some("its session ended while the store could not record it".into()),
                        |_| {},
                    )
                    .await;
            }
        }
        let Ok(servers) = self.shared.registry.list(None).await else {
            return;
        };
        let stalled: Vec<(ServerId, String)> = servers
            .into_iter()
            .filter(|s| s.auto_connect && s.status == ServerStatus::Disconnected)
            .filter(|s| {
                self.lock()
                    .get(&s.id)
                    .is_none_or(|h| h.session.borrow().is_none())
            })
            .map(|s| (s.id, s.name))
            .collect();
        if !stalled.is_empty() {
            tracing::info!(
                servers = stalled.len(),
                "connecting the servers a failing store kept from connecting"
            );
            self.connect_starting(stalled);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ServerId, Handle>> {
        match self.handles.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}
