//! Logins to remote servers (the MCP authorization spec, client side):
//! what each HTTP server's authorization stands at, the logins waiting for
//! their callback, and the grants (client registration, tokens) kept
//! sealed in the store. Sessions ask it for a bearer token and tell it
//! when a server refused one; the admin API starts logins, serves the
//! callback and shows the state. It calls the store and the network, and
//! nothing of the sessions: a finished login is announced on a watch the
//! supervisor waits on.

pub mod discovery;
pub mod flow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

use crate::model::{OAuthClientSettings, ServerId, ServerRecord, Transport};
use crate::store::Store;
use discovery::{Challenge, Discovered, ServerMetadata};
use flow::{Client, ClientAuth};

/// How long a login's authorization URL stays usable.
pub const LOGIN_EXPIRY: Duration = Duration::from_secs(15 * 60);
/// A token this close to its expiry is refreshed before it is sent.
const REFRESH_AHEAD: Duration = Duration::from_secs(60);
/// Step-ups (a broader scope asked for) in a row before we stop asking:
/// a server that refuses every scope must not loop (with the first login,
/// at most three authorization requests).
pub const STEP_UP_LIMIT: u32 = 2;
/// Logins waiting for their callback, across servers (a bound, not a
/// quota: the oldest is dropped).
const PENDING_MAX: usize = 256;

#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    #[error("{0}")]
    Discovery(String),
    #[error("{0}")]
    Registration(String),
    #[error("{0}")]
    Token(String),
    #[error("the authorization server refused: {error} {description}")]
    Refused { error: String, description: String },
    #[error("{0}")]
    Callback(String),
    #[error("cannot store the login: {0}")]
    Store(String),
    #[error("the server {0} is not an HTTP server with a login")]
    NotApplicable(String),
}

/// What a server's authorization stands at (the API's `auth.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthState {
    /// No login asked for (the server never refused us).
    None,
    /// Tokens are held.
    Authorized,
    /// A login is needed: `authorization_url` is where to do it.
    NeedsLogin,
    /// A login could not be started or finished: `detail` says why.
    Failed,
}

/// The API's view of a server's authorization.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuthView {
    pub state: AuthState,
    /// Present exactly while the server waits for a login.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization_url: Option<String>,
    /// For a device login: the code to type at `authorization_url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When the access token held expires, if it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Everything a login left, stored sealed (one JSON text per server).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Grant {
    issuer: String,
    resource: String,
    metadata: ServerMetadata,
    client: Client,
    access_token: String,
    refresh_token: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    /// How long the access token was issued for (seconds).
    #[serde(default)]
    lifetime_secs: Option<u64>,
    scope: Option<String>,
}

impl Grant {
    /// Whether it still carries a token: a refused refresh or a logout
    /// leaves a grant without, kept for what binds the client.
    fn holds_token(&self) -> bool {
        !self.access_token.is_empty()
    }

    /// Whether the access token is about to expire: within a minute, or
    /// within a quarter of its lifetime when that is shorter (a token of a
    /// few seconds is not refreshed at every request).
    fn expiring(&self) -> bool {
        let ahead = self.lifetime_secs.map_or(REFRESH_AHEAD, |life| {
            REFRESH_AHEAD.min(Duration::from_millis(life.saturating_mul(250)))
        });
        self.expires_at.is_some_and(|at| {
            at - chrono::Duration::from_std(ahead).unwrap_or_default() <= Utc::now()
        })
    }
}

/// What to do after the server refused a request.
#[derive(Debug)]
pub enum AfterRefusal {
    /// A fresh token is held: send the request again (once).
    Retry,
    /// A login is needed (its message names how).
    NeedsLogin(String),
    /// Not an authorization matter we can fix.
    Fail(String),
}

/// A login waiting for its callback.
struct Pending {
    server: ServerId,
    verifier: String,
    redirect_uri: String,
    discovered: Discovered,
    client: Client,
    scope: Option<String>,
    started: Instant,
}

/// The logins of every server.
pub struct OAuth {
    store: Arc<Store>,
    http: reqwest::Client,
    /// The daemon's own callback (`http://127.0.0.1:PORT/oauth/callback`),
    /// known once the listener is bound.
    redirect_uri: RwLock<Option<String>>,
    servers: Mutex<HashMap<ServerId, Arc<ServerAuth>>>,
    pending: Mutex<HashMap<String, Pending>>,
}

/// One server's authorization.
pub struct ServerAuth {
    id: ServerId,
    name: String,
    url: url::Url,
    settings: Option<OAuthClientSettings>,
    inner: Mutex<Inner>,
    /// One refresh or login start at a time for this server.
    single_flight: tokio::sync::Mutex<()>,
    /// Bumped when a login finishes (the supervisor reconnects).
    logins: watch::Sender<u64>,
    /// Step-ups since a request last went through with a token: counted
    /// across logins, since each login is what a refusing server loops on.
    step_ups: std::sync::atomic::AtomicU32,
    /// Bumped by each device login started: an older one stops polling.
    device_polls: std::sync::atomic::AtomicU64,
    /// Bumped by each refresh tried (whatever its outcome).
    refresh_attempts: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// Read from the store at first use.
    loaded: bool,
    grant: Option<Grant>,
    state: Option<(AuthState, Option<String>)>,
    authorization_url: Option<String>,
    /// The code to type at `authorization_url` (a device login).
    user_code: Option<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl OAuth {
    pub fn new(store: Arc<Store>) -> Arc<OAuth> {
        Arc::new(OAuth {
            store,
            http: crate::http_client::client(Duration::from_secs(10)),
            redirect_uri: RwLock::new(None),
            servers: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// Where authorization servers send the browser back: the daemon's
    /// listener (a wildcard address is reached on loopback).
    pub fn set_listener(&self, bound: std::net::SocketAddr) {
        let host = match bound.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_owned(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        let uri = format!("http://{host}:{}/oauth/callback", bound.port());
        if let Ok(mut slot) = self.redirect_uri.write() {
            *slot = Some(uri);
        }
    }

    fn redirect_uri(&self) -> Option<String> {
        self.redirect_uri.read().ok().and_then(|r| r.clone())
    }

    /// The authorization of an HTTP server that carries no credential of
    /// its own (an `Authorization` header configured means the user
    /// handles it); `None` for the others.
    pub fn for_server(&self, record: &ServerRecord) -> Option<Arc<ServerAuth>> {
        let Transport::Http { base_url, headers } = &record.transport else {
            return None;
        };
        if headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            return None;
        }
        let url = url::Url::parse(base_url).ok()?;
        let mut servers = lock(&self.servers);
        if let Some(auth) = servers.get(&record.id)
            && auth.url == url
            && auth.settings == record.oauth
        {
            return Some(Arc::clone(auth));
        }
        let auth = Arc::new(ServerAuth {
            id: record.id,
            name: record.name.clone(),
            url,
            settings: record.oauth.clone(),
            inner: Mutex::new(Inner::default()),
            single_flight: tokio::sync::Mutex::new(()),
            logins: watch::Sender::new(0),
            step_ups: std::sync::atomic::AtomicU32::new(0),
            device_polls: std::sync::atomic::AtomicU64::new(0),
            refresh_attempts: std::sync::atomic::AtomicU64::new(0),
        });
        servers.insert(record.id, Arc::clone(&auth));
        Some(auth)
    }

    /// The API's view of a server's authorization (`None`: not applicable).
    pub async fn view(&self, record: &ServerRecord) -> Option<AuthView> {
        let auth = self.for_server(record)?;
        self.load(&auth).await;
        Some(auth.view())
    }

    async fn load(&self, auth: &ServerAuth) {
        if lock(&auth.inner).loaded {
            return;
        }
        // Not marked loaded when the store cannot be read (a shared store
        // out of reach): the next use reads it again.
        let Ok(stored) = self.stored_grant(auth).await else {
            return;
        };
        let mut inner = lock(&auth.inner);
        if !inner.loaded {
            inner.loaded = true;
            if stored.as_ref().is_some_and(Grant::holds_token) {
                inner.state = Some((AuthState::Authorized, None));
            }
            inner.grant = stored;
        }
    }

    /// The grant the store holds for `auth`'s server; `Err` when the
    /// store cannot be read.
    async fn stored_grant(&self, auth: &ServerAuth) -> Result<Option<Grant>, ()> {
        let store = Arc::clone(&self.store);
        let id = auth.id;
        let text = tokio::task::spawn_blocking(move || store.oauth_grant(id))
            .await
            .map_err(|_| ())?
            .map_err(|_| ())?;
        Ok(text
            .and_then(|text| serde_json::from_str::<Grant>(&text).ok())
            // Tokens issued for another URL (the server's was changed since)
            // are never sent to this one: it logs in afresh.
            .filter(|grant| discovery::resource_matches(&grant.resource, &auth.url)))
    }

    /// Reads again every grant held: another replica logged in or out, or
    /// refreshed a token (a refresh token it spent is spent here too). A
    /// server that waits here for a login made there reconnects.
    pub async fn reload_grants(&self) {
        let held: Vec<Arc<ServerAuth>> = lock(&self.servers).values().cloned().collect();
        for auth in held {
            let Ok(stored) = self.stored_grant(&auth).await else {
                continue;
            };
            let _flight = auth.single_flight.lock().await;
            let logged_in = {
                let mut inner = lock(&auth.inner);
                let same = match (&inner.grant, &stored) {
                    (Some(held), Some(stored)) => {
                        held.access_token == stored.access_token
                            && held.refresh_token == stored.refresh_token
                    }
                    (None, None) => true,
                    _ => false,
                };
                inner.loaded = true;
                if same {
                    continue;
                }
                let logged_in = stored.as_ref().is_some_and(Grant::holds_token);
                inner.grant = stored;
                logged_in
            };
            if logged_in {
                if auth.needs_login() {
                    tracing::info!(server = %auth.name, "logged in on another replica");
                }
                auth.set_state(AuthState::Authorized, None, None);
                auth.logins.send_modify(|n| *n += 1);
            } else {
                let mut inner = lock(&auth.inner);
                inner.state = None;
                inner.authorization_url = None;
            }
        }
    }

    async fn save(&self, id: ServerId, grant: Option<&Grant>) -> Result<(), OAuthError> {
        let store = Arc::clone(&self.store);
        let text = grant
            .map(serde_json::to_string)
            .transpose()
            .map_err(|err| OAuthError::Store(err.to_string()))?;
        tokio::task::spawn_blocking(move || match text {
            Some(text) => store.put_oauth_grant(id, &text),
            None => store.remove_oauth_grant(id).map(|_| ()),
        })
        .await
        .map_err(|err| OAuthError::Store(err.to_string()))?
        .map_err(|err| OAuthError::Store(err.to_string()))
    }

    /// The token to send, refreshed first when it is about to expire.
    pub async fn bearer(&self, auth: &ServerAuth) -> Option<String> {
        self.load(auth).await;
        // Read before the grant is looked at: a refresh that ends between
        // the two is seen below.
        let attempts = auth.refresh_attempts.load(Ordering::SeqCst);
        let expiring = {
            let inner = lock(&auth.inner);
            let grant = inner.grant.as_ref()?;
            grant.expiring() && grant.refresh_token.is_some()
        };
        if expiring {
            let _flight = auth.single_flight.lock().await;
            // Another call refreshed (or tried to) while this one waited:
            // one attempt per wave of calls, not one each after a failure.
            if auth.refresh_attempts.load(Ordering::SeqCst) == attempts
                && let Err(err) = self.refresh(auth).await
            {
                tracing::warn!(server = %auth.name, "cannot refresh the access token: {err}");
            }
        }
        auth.access_token()
    }

    /// The server refused a request (`status` 401 or 403) that carried
    /// `sent` (or no token): refresh, step up, or start a login.
    pub async fn refused(
        &self,
        auth: &ServerAuth,
        status: u16,
        www_authenticate: Option<&str>,
        sent: Option<&str>,
    ) -> AfterRefusal {
        self.load(auth).await;
        let challenge = www_authenticate.map(Challenge::parse).unwrap_or_default();
        let _flight = auth.single_flight.lock().await;
        let now = auth.access_token();
        // Another call already got a new token while this one was refused.
        if now.is_some() && now.as_deref() != sent {
            return AfterRefusal::Retry;
        }
        if status == 403 {
            if challenge.error.as_deref() != Some("insufficient_scope") {
                return AfterRefusal::Fail(format!(
                    "the server {} refused the request (HTTP 403)",
                    auth.name
                ));
            }
            let steps = auth.step_ups.fetch_add(1, Ordering::Relaxed) + 1;
            if steps > STEP_UP_LIMIT {
                let reason = format!(
                    "the server {} still refuses the scope after {STEP_UP_LIMIT} logins asking for more; not asking again (log in again to retry)",
                    auth.name
                );
                auth.set_state(AuthState::Failed, Some(reason.clone()), None);
                return AfterRefusal::Fail(reason);
            }
            let held = lock(&auth.inner)
                .grant
                .as_ref()
                .and_then(|g| g.scope.clone());
            let scope = union_scopes(held.as_deref(), challenge.scope.as_deref());
            return self.start_login_locked(auth, &challenge, scope).await;
        }
        if sent.is_some() {
            let can_refresh = lock(&auth.inner)
                .grant
                .as_ref()
                .is_some_and(|g| g.refresh_token.is_some());
            if can_refresh {
                match self.refresh(auth).await {
                    Ok(()) => return AfterRefusal::Retry,
                    Err(err) => {
                        tracing::warn!(server = %auth.name, "the refresh was refused ({err}); a login is needed")
                    }
                }
            }
        }
        // A login already waiting for the user (a URL open in a browser, a
        // device code being typed) is kept: calls refused meanwhile point
        // to it.
        let shown = auth.view();
        let awaited = self.pending_login(auth.id) || shown.user_code.is_some();
        if awaited && shown.authorization_url.is_some() {
            return AfterRefusal::NeedsLogin(needs_login_message(&auth.name));
        }
        let scope = challenge.scope.clone();
        self.start_login_locked(auth, &challenge, scope).await
    }

    /// Whether a login of this server awaits its callback.
    fn pending_login(&self, server: ServerId) -> bool {
        lock(&self.pending)
            .values()
            .any(|p| p.server == server && p.started.elapsed() < LOGIN_EXPIRY)
    }

    /// Starts a login now (`login NAME`, or the API), without waiting for
    /// the server to refuse a request.
    pub async fn start_login(&self, auth: &ServerAuth) -> Result<String, OAuthError> {
        self.load(auth).await;
        let _flight = auth.single_flight.lock().await;
        auth.step_ups.store(0, Ordering::Relaxed);
        let challenge = self.probe(auth).await;
        let scope = challenge.scope.clone();
        match self.start_login_locked(auth, &challenge, scope).await {
            AfterRefusal::NeedsLogin(_) => auth
                .view()
                .authorization_url
                .ok_or_else(|| OAuthError::Callback("no login started".into())),
            AfterRefusal::Fail(reason) => Err(OAuthError::Discovery(reason)),
            AfterRefusal::Retry => Err(OAuthError::Callback("already logged in".into())),
        }
    }

    /// Starts a login by the device authorization grant (RFC 8628), for a
    /// box without a browser: the view shows where to go and the code to
    /// type there, and the daemon polls until the user approved it.
    pub async fn start_device_login(
        self: &Arc<Self>,
        auth: &Arc<ServerAuth>,
    ) -> Result<String, OAuthError> {
        self.load(auth).await;
        let _flight = auth.single_flight.lock().await;
        auth.step_ups.store(0, Ordering::Relaxed);
        let challenge = self.probe(auth).await;
        let (_, discovered, scope, client) = self
            .prepare(auth, &challenge, challenge.scope.clone())
            .await?;
        let Some(endpoint) = discovered.metadata.device_authorization_endpoint.clone() else {
            return Err(OAuthError::Discovery(format!(
                "the authorization server of {} offers no device login; open the URL of `mcp-aggregator login {}` on a machine with a browser (forwarding the daemon's port)",
                auth.name, auth.name
            )));
        };
        let device = flow::device_authorization(
            &self.http,
            &endpoint,
            &client,
            &discovered.resource,
            scope.as_deref(),
        )
        .await?;
        let url = device
            .verification_uri_complete
            .clone()
            .unwrap_or_else(|| device.verification_uri.clone());
        {
            let mut inner = lock(&auth.inner);
            inner.state = Some((AuthState::NeedsLogin, None));
            inner.authorization_url = Some(url.clone());
            inner.user_code = Some(device.user_code.clone());
        }
        let generation = auth.device_polls.fetch_add(1, Ordering::Relaxed) + 1;
        let oauth = Arc::clone(self);
        let auth = Arc::clone(auth);
        tokio::spawn(async move {
            oauth
                .poll_device(&auth, generation, device, discovered, client, scope)
                .await;
        });
        Ok(url)
    }

    /// Polls the token endpoint until the user approved the device login,
    /// refused it, or it expired (or another login replaced it).
    async fn poll_device(
        &self,
        auth: &ServerAuth,
        generation: u64,
        device: flow::DeviceAnswer,
        discovered: Discovered,
        client: Client,
        scope: Option<String>,
    ) {
        let started = Instant::now();
        let lifetime = Duration::from_secs(device.expires_in.unwrap_or(600).min(3600));
        let mut interval = Duration::from_secs(device.interval.unwrap_or(5).clamp(1, 60));
        let endpoint = discovered
            .metadata
            .token_endpoint
            .clone()
            .unwrap_or_default();
        loop {
            tokio::time::sleep(interval).await;
            if auth.device_polls.load(Ordering::Relaxed) != generation {
                return;
            }
            if started.elapsed() >= lifetime {
                auth.set_state(
                    AuthState::Failed,
                    Some(format!(
                        "the device login to {} expired; start it again",
                        auth.name
                    )),
                    None,
                );
                return;
            }
            let answer = flow::token_request(
                &self.http,
                &endpoint,
                &client,
                &discovered.resource,
                vec![
                    ("grant_type", flow::DEVICE_CODE_GRANT.into()),
                    ("device_code", device.device_code.clone()),
                ],
            )
            .await;
            match answer {
                Ok(answer) => {
                    let grant = Grant {
                        issuer: discovered.issuer.clone(),
                        resource: discovered.resource.clone(),
                        metadata: discovered.metadata.clone(),
                        client: client.clone(),
                        access_token: answer.access_token,
                        refresh_token: answer.refresh_token,
                        expires_at: expiry(answer.expires_in),
                        lifetime_secs: answer.expires_in,
                        scope: answer.scope.or(scope.clone()),
                    };
                    let _flight = auth.single_flight.lock().await;
                    if auth.device_polls.load(Ordering::Relaxed) != generation {
                        return;
                    }
                    if let Err(err) = self.save(auth.id, Some(&grant)).await {
                        auth.set_state(AuthState::Failed, Some(err.to_string()), None);
                        return;
                    }
                    {
                        let mut inner = lock(&auth.inner);
                        inner.grant = Some(grant);
                        inner.loaded = true;
                    }
                    auth.set_state(AuthState::Authorized, None, None);
                    auth.logins.send_modify(|n| *n += 1);
                    tracing::info!(server = %auth.name, "logged in (device login)");
                    return;
                }
                Err(OAuthError::Refused { error, .. }) if error == "authorization_pending" => {}
                Err(OAuthError::Refused { error, .. }) if error == "slow_down" => {
                    interval += Duration::from_secs(5);
                }
                Err(err) => {
                    let reason = format!("the device login to {} failed: {err}", auth.name);
                    tracing::warn!(server = %auth.name, "{reason}");
                    auth.set_state(AuthState::Failed, Some(reason), None);
                    return;
                }
            }
        }
    }

    /// The server's challenge to a request without a token (what to log
    /// in for), when it gives one.
    async fn probe(&self, auth: &ServerAuth) -> Challenge {
        let body = r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#;
        let response = self
            .http
            .post(auth.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .timeout(Duration::from_secs(10))
            .body(body)
            .send()
            .await;
        response
            .ok()
            .filter(|r| r.status().as_u16() == 401 || r.status().as_u16() == 403)
            .and_then(|r| {
                r.headers()
                    .get(reqwest::header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(Challenge::parse)
            })
            .unwrap_or_default()
    }

    /// Discovery, a client, and the authorization URL; the server is then
    /// `needs_login`. Called holding the server's single flight.
    async fn start_login_locked(
        &self,
        auth: &ServerAuth,
        challenge: &Challenge,
        scope: Option<String>,
    ) -> AfterRefusal {
        match self.begin(auth, challenge, scope).await {
            Ok(url) => {
                tracing::warn!(
                    server = %auth.name,
                    "the server needs a login: run `mcp-aggregator login {}`",
                    auth.name
                );
                auth.set_state(AuthState::NeedsLogin, None, Some(url));
                AfterRefusal::NeedsLogin(needs_login_message(&auth.name))
            }
            Err(err) => {
                let reason = format!("cannot start a login to {}: {err}", auth.name);
                tracing::warn!(server = %auth.name, "{reason}");
                auth.set_state(AuthState::Failed, Some(reason.clone()), None);
                AfterRefusal::Fail(reason)
            }
        }
    }

    /// Discovery, the scope to ask for, and the client to log in as.
    async fn prepare(
        &self,
        auth: &ServerAuth,
        challenge: &Challenge,
        scope: Option<String>,
    ) -> Result<(String, Discovered, Option<String>, Client), OAuthError> {
        let redirect_uri = self.redirect_uri().ok_or_else(|| {
            OAuthError::Callback("the daemon has no HTTP listener to receive the login".into())
        })?;
        let discovered = discovery::discover(&self.http, &auth.url, challenge).await?;
        let scope = scope
            .or_else(|| {
                auth.settings
                    .as_ref()
                    .and_then(|s| s.scopes.as_ref())
                    .map(|s| s.join(" "))
            })
            .or_else(|| discovered.scopes_supported.as_ref().map(|s| s.join(" ")))
            .filter(|s| !s.is_empty());
        // Refresh tokens are asked for where the server offers them.
        let scope = match (&scope, &discovered.metadata.scopes_supported) {
            (Some(s), Some(offered))
                if offered.iter().any(|o| o == "offline_access")
                    && !s.split(' ').any(|x| x == "offline_access") =>
            {
                Some(format!("{s} offline_access"))
            }
            _ => scope,
        };
        let client = self
            .client_for(auth, &discovered, &redirect_uri, scope.as_deref())
            .await?;
        Ok((redirect_uri, discovered, scope, client))
    }

    async fn begin(
        &self,
        auth: &ServerAuth,
        challenge: &Challenge,
        scope: Option<String>,
    ) -> Result<String, OAuthError> {
        let (redirect_uri, discovered, scope, client) =
            self.prepare(auth, challenge, scope).await?;
        let state = flow::random_token(32);
        let verifier = flow::random_token(48);
        let url = flow::AuthorizationRequest {
            endpoint: discovered
                .metadata
                .authorization_endpoint
                .as_deref()
                .unwrap_or_default(),
            client_id: &client.client_id,
            redirect_uri: &redirect_uri,
            state: &state,
            verifier: &verifier,
            scope: scope.as_deref(),
            resource: &discovered.resource,
        }
        .url()?;
        let mut pending = lock(&self.pending);
        pending.retain(|_, p| p.started.elapsed() < LOGIN_EXPIRY && p.server != auth.id);
        if pending.len() >= PENDING_MAX
            && let Some(oldest) = pending
                .iter()
                .min_by_key(|(_, p)| p.started)
                .map(|(k, _)| k.clone())
        {
            pending.remove(&oldest);
        }
        pending.insert(
            state,
            Pending {
                server: auth.id,
                verifier,
                redirect_uri,
                discovered,
                client,
                scope,
                started: Instant::now(),
            },
        );
        Ok(url)
    }

    /// The client to log in as: pre-registered, the one registered before
    /// (same issuer, same callback), a metadata document, or a new
    /// registration.
    async fn client_for(
        &self,
        auth: &ServerAuth,
        discovered: &Discovered,
        redirect_uri: &str,
        scope: Option<&str>,
    ) -> Result<Client, OAuthError> {
        let methods = discovered
            .metadata
            .token_endpoint_auth_methods_supported
            .as_deref();
        if let Some(settings) = &auth.settings {
            if let Some(client_id) = &settings.client_id {
                // A client registered beforehand belongs to one
                // authorization server: the one configured, else the one
                // of the first login made with it. A server naming another
                // must not receive its id and secret.
                let bound = settings.issuer.clone().or_else(|| {
                    lock(&auth.inner).grant.as_ref().and_then(|g| {
                        (g.client.kind == "pre_registered" && &g.client.client_id == client_id)
                            .then(|| g.issuer.clone())
                    })
                });
                if settings
                    .client_secret
                    .as_deref()
                    .is_some_and(|s| s.starts_with(crate::model::server::SEALED_PREFIX))
                {
                    return Err(OAuthError::Registration(
                        "its stored client secret cannot be decrypted: secret.key is not the key \
                         it was sealed with (replaced or lost); restore it, or enter the secret again"
                            .into(),
                    ));
                }
                if let Some(bound) = bound
                    && !discovery::same_issuer(&bound, &discovered.issuer)
                {
                    return Err(OAuthError::Discovery(format!(
                        "the server now names the authorization server {}, but its \
                         pre-registered client belongs to {bound}; its credentials are not \
                         sent elsewhere (set oauth.issuer if it really moved)",
                        discovered.issuer
                    )));
                }
                return Ok(Client {
                    client_id: client_id.clone(),
                    client_secret: settings.client_secret.clone(),
                    auth: ClientAuth::choose(settings.client_secret.is_some(), methods),
                    redirect_uri: redirect_uri.to_owned(),
                    kind: "pre_registered".into(),
                });
            }
            if let Some(document) = &settings.client_metadata_url
                && discovered.metadata.client_id_metadata_document_supported
            {
                return Ok(Client {
                    client_id: document.clone(),
                    client_secret: None,
                    auth: ClientAuth::None,
                    redirect_uri: redirect_uri.to_owned(),
                    kind: "metadata_document".into(),
                });
            }
        }
        let previous = lock(&auth.inner).grant.as_ref().and_then(|g| {
            (g.client.kind == "dynamic"
                && g.client.redirect_uri == redirect_uri
                && discovery::same_issuer(&g.issuer, &discovered.issuer))
            .then(|| g.client.clone())
        });
        if let Some(client) = previous {
            return Ok(client);
        }
        // A login started a moment ago (by the server's refusal, before the
        // user asked for one) registered a client already: one is enough.
        let pending = lock(&self.pending).values().find_map(|p| {
            (p.server == auth.id
                && p.client.kind == "dynamic"
                && p.redirect_uri == redirect_uri
                && discovery::same_issuer(&p.discovered.issuer, &discovered.issuer))
            .then(|| p.client.clone())
        });
        if let Some(client) = pending {
            return Ok(client);
        }
        flow::register(&self.http, &discovered.metadata, redirect_uri, scope).await
    }

    /// Renews the access token with the refresh token. Called holding the
    /// server's single flight. A refused refresh forgets the tokens.
    async fn refresh(&self, auth: &ServerAuth) -> Result<(), OAuthError> {
        let result = self.refresh_once(auth).await;
        // Counted once it is over (its grant in place): a call that looked
        // at the grant before sees it changed.
        auth.refresh_attempts.fetch_add(1, Ordering::SeqCst);
        result
    }

    async fn refresh_once(&self, auth: &ServerAuth) -> Result<(), OAuthError> {
        let Some(grant) = lock(&auth.inner).grant.clone() else {
            return Err(OAuthError::Token("no grant held".into()));
        };
        let Some(refresh_token) = grant.refresh_token.clone() else {
            return Err(OAuthError::Token("no refresh token held".into()));
        };
        let endpoint = grant.metadata.token_endpoint.clone().unwrap_or_default();
        let answer = flow::token_request(
            &self.http,
            &endpoint,
            &grant.client,
            &grant.resource,
            vec![
                ("grant_type", "refresh_token".into()),
                ("refresh_token", refresh_token.clone()),
            ],
        )
        .await;
        match answer {
            Ok(answer) => {
                let renewed = Grant {
                    access_token: answer.access_token,
                    // The server may rotate it, or keep the old one valid.
                    refresh_token: answer.refresh_token.or(Some(refresh_token)),
                    expires_at: expiry(answer.expires_in),
                    lifetime_secs: answer.expires_in,
                    scope: answer.scope.or(grant.scope.clone()),
                    ..grant
                };
                self.save(auth.id, Some(&renewed)).await?;
                lock(&auth.inner).grant = Some(renewed);
                // A login under way (a step-up, a device login) stays shown.
                if !auth.needs_login() {
                    auth.set_state(AuthState::Authorized, None, None);
                }
                tracing::info!(server = %auth.name, "access token refreshed");
                Ok(())
            }
            Err(err) => {
                // Only a refused grant or client ends it: a server error, a
                // rate limit or an unreachable server leaves it for the
                // next try.
                if let OAuthError::Refused { error, .. } = &err
                    && matches!(
                        error.as_str(),
                        "invalid_grant" | "invalid_client" | "unauthorized_client"
                    )
                {
                    // Revoked or expired: no retrying 401s with it. A
                    // client the server no longer knows is registered
                    // again at the next login.
                    let mut client = grant.client.clone();
                    if matches!(error.as_str(), "invalid_client" | "unauthorized_client")
                        && client.kind == "dynamic"
                    {
                        client.kind = "refused".into();
                    }
                    let kept = Grant {
                        access_token: String::new(),
                        refresh_token: None,
                        expires_at: None,
                        client,
                        ..grant
                    };
                    let _ = self.save(auth.id, Some(&kept)).await;
                    lock(&auth.inner).grant = Some(kept);
                }
                Err(err)
            }
        }
    }

    /// The browser came back (`/oauth/callback`): the code is exchanged,
    /// the grant stored, the server told. Returns the server's name.
    pub async fn callback(&self, query: &CallbackQuery) -> Result<String, OAuthError> {
        let Some(state) = query.state.as_deref() else {
            return Err(OAuthError::Callback("the callback carries no state".into()));
        };
        // Single use: taken out whatever happens next.
        let pending = lock(&self.pending).remove(state);
        let Some(pending) = pending else {
            return Err(OAuthError::Callback(
                "this login is unknown, used already or expired; start it again with `mcp-aggregator login NAME`".into(),
            ));
        };
        let auth = lock(&self.servers).get(&pending.server).cloned();
        let Some(auth) = auth else {
            return Err(OAuthError::Callback(
                "the server of this login is gone".into(),
            ));
        };
        let result = self.finish(&auth, pending, query).await;
        if let Err(OAuthError::Refused { error, .. }) = &result
            && matches!(error.as_str(), "invalid_client" | "unauthorized_client")
        {
            // The next login registers again instead of reusing it.
            if let Some(grant) = lock(&auth.inner).grant.as_mut()
                && grant.client.kind == "dynamic"
            {
                grant.client.kind = "refused".into();
            }
        }
        if let Err(err) = &result {
            let reason = format!("the login to {} failed: {err}", auth.name);
            tracing::warn!(server = %auth.name, "{reason}");
            auth.set_state(AuthState::Failed, Some(reason), None);
        }
        result.map(|()| auth.name.clone())
    }

    async fn finish(
        &self,
        auth: &ServerAuth,
        pending: Pending,
        query: &CallbackQuery,
    ) -> Result<(), OAuthError> {
        if pending.started.elapsed() >= LOGIN_EXPIRY {
            return Err(OAuthError::Callback(
                "the login expired; start it again".into(),
            ));
        }
        if let Some(error) = &query.error {
            return Err(OAuthError::Refused {
                error: error.clone(),
                description: query.error_description.clone().unwrap_or_default(),
            });
        }
        // RFC 9207: the issuer the answer says it comes from must be the
        // one we sent the user to; required when the server says it sends it.
        // Compared as strings, exactly (no URL normalisation): a variant
        // that only matches once normalised is another issuer.
        let issuer = pending
            .discovered
            .metadata
            .issuer
            .as_deref()
            .unwrap_or(&pending.discovered.issuer);
        match &query.iss {
            Some(iss) if iss != issuer => {
                return Err(OAuthError::Callback(format!(
                    "the answer comes from issuer {iss:?}, not {issuer:?} (a mix-up attack?); refused"
                )));
            }
            None if pending
                .discovered
                .metadata
                .authorization_response_iss_parameter_supported =>
            {
                return Err(OAuthError::Callback(
                    "the authorization server promised an `iss` parameter and the answer has none; refused".into(),
                ));
            }
            _ => {}
        }
        let Some(code) = query.code.clone() else {
            return Err(OAuthError::Callback("the callback carries no code".into()));
        };
        let endpoint = pending
            .discovered
            .metadata
            .token_endpoint
            .clone()
            .unwrap_or_default();
        let answer = flow::token_request(
            &self.http,
            &endpoint,
            &pending.client,
            &pending.discovered.resource,
            vec![
                ("grant_type", "authorization_code".into()),
                ("code", code),
                ("redirect_uri", pending.redirect_uri.clone()),
                ("code_verifier", pending.verifier.clone()),
            ],
        )
        .await?;
        let grant = Grant {
            issuer: pending.discovered.issuer.clone(),
            resource: pending.discovered.resource.clone(),
            metadata: pending.discovered.metadata.clone(),
            client: pending.client.clone(),
            access_token: answer.access_token,
            refresh_token: answer.refresh_token,
            expires_at: expiry(answer.expires_in),
            lifetime_secs: answer.expires_in,
            scope: answer.scope.or(pending.scope),
        };
        // Under the server's single flight: a refresh under way cannot
        // overwrite the grant this login just got.
        let _flight = auth.single_flight.lock().await;
        self.save(auth.id, Some(&grant)).await?;
        {
            let mut inner = lock(&auth.inner);
            inner.grant = Some(grant);
            inner.loaded = true;
        }
        auth.set_state(AuthState::Authorized, None, None);
        auth.logins.send_modify(|n| *n += 1);
        tracing::info!(server = %auth.name, "logged in");
        Ok(())
    }

    /// Forgets a server's grant (revoking its tokens where the
    /// authorization server offers it). Whether there was one.
    pub async fn logout(&self, auth: &ServerAuth) -> Result<bool, OAuthError> {
        self.load(auth).await;
        let _flight = auth.single_flight.lock().await;
        let grant = lock(&auth.inner).grant.take();
        lock(&self.pending).retain(|_, p| p.server != auth.id);
        auth.device_polls.fetch_add(1, Ordering::Relaxed);
        if let Some(grant) = &grant
            && let Some(endpoint) = &grant.metadata.revocation_endpoint
        {
            for token in [
                grant.refresh_token.as_deref(),
                Some(grant.access_token.as_str()),
            ]
            .into_iter()
            .flatten()
            .filter(|t| !t.is_empty())
            {
                flow::revoke(&self.http, endpoint, &grant.client, token).await;
            }
        }
        // A pre-registered client stays bound to the authorization server
        // of its first login: its grant is kept without tokens, or the next
        // login would send its secret to whichever one the server names.
        let bound = grant
            .as_ref()
            .filter(|g| {
                g.client.kind == "pre_registered"
                    && auth.settings.as_ref().is_some_and(|s| s.issuer.is_none())
            })
            .map(|g| Grant {
                access_token: String::new(),
                refresh_token: None,
                expires_at: None,
                scope: None,
                ..g.clone()
            });
        self.save(auth.id, bound.as_ref()).await?;
        {
            let mut inner = lock(&auth.inner);
            inner.grant = bound;
            inner.state = None;
            inner.authorization_url = None;
        }
        auth.step_ups.store(0, Ordering::Relaxed);
        Ok(grant.is_some_and(|g| g.holds_token() || g.refresh_token.is_some()))
    }

    /// Forgets what is held in memory for a server that was removed.
    pub fn forget(&self, id: ServerId) {
        lock(&self.servers).remove(&id);
        lock(&self.pending).retain(|_, p| p.server != id);
    }
}

impl ServerAuth {
    fn access_token(&self) -> Option<String> {
        lock(&self.inner)
            .grant
            .as_ref()
            .map(|g| g.access_token.clone())
            .filter(|t| !t.is_empty())
    }

    fn set_state(&self, state: AuthState, detail: Option<String>, url: Option<String>) {
        let mut inner = lock(&self.inner);
        inner.state = Some((state, detail));
        inner.authorization_url = url;
        inner.user_code = None;
        if state != AuthState::NeedsLogin {
            // A login that finished another way ends a device login's polling.
            self.device_polls.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request carrying the token went through: the scope sufficed.
    pub fn accepted(&self) {
        if self.step_ups.load(Ordering::Relaxed) != 0 {
            self.step_ups.store(0, Ordering::Relaxed);
        }
    }

    /// Whether the server waits for a login.
    pub fn needs_login(&self) -> bool {
        matches!(
            lock(&self.inner).state,
            Some((AuthState::NeedsLogin | AuthState::Failed, _))
        )
    }

    /// Changes when a login finishes.
    pub fn logins(&self) -> watch::Receiver<u64> {
        self.logins.subscribe()
    }

    pub fn view(&self) -> AuthView {
        let inner = lock(&self.inner);
        let (state, detail) = inner.state.clone().unwrap_or((AuthState::None, None));
        let grant = inner
            .grant
            .as_ref()
            .filter(|_| state == AuthState::Authorized);
        AuthView {
            state,
            authorization_url: inner
                .authorization_url
                .clone()
                .filter(|_| state == AuthState::NeedsLogin),
            user_code: inner
                .user_code
                .clone()
                .filter(|_| state == AuthState::NeedsLogin),
            detail,
            expires_at: grant.and_then(|g| g.expires_at),
            scope: grant.and_then(|g| g.scope.clone()),
        }
    }
}

/// What a front-door client is told about a server that needs a login.
pub fn needs_login_message(server: &str) -> String {
    format!(
        "the server {server} needs a login: run `mcp-aggregator login {server}` (or open the authorization_url of GET /api/v1/aggregator/servers/{server})"
    )
}

/// The query of `/oauth/callback`.
#[derive(Debug, Default, Deserialize)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

fn expiry(expires_in: Option<u64>) -> Option<DateTime<Utc>> {
    let seconds = i64::try_from(expires_in?).ok()?;
    Utc::now().checked_add_signed(chrono::Duration::try_seconds(seconds)?)
}

/// The scopes held and the ones asked for, once each, in order.
fn union_scopes(held: Option<&str>, asked: Option<&str>) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for scope in held
        .into_iter()
        .chain(asked)
        .flat_map(|s| s.split(' '))
        .filter(|s| !s.is_empty())
    {
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    (!out.is_empty()).then(|| out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_up_asks_for_the_held_scopes_and_the_new_ones() {
        assert_eq!(
            union_scopes(Some("read"), Some("read write")).as_deref(),
            Some("read write")
        );
        assert_eq!(union_scopes(None, None), None);
        assert_eq!(union_scopes(None, Some("a")).as_deref(), Some("a"));
    }
}
