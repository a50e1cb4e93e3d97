//! `/api/v1/aggregator/…`: registration, listing, details, removal, tools,
//! connection history, aggregator state and the audit log.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::extract::{Actor, JsonBody, PathParam, QueryParams};
use super::views::{ServerView, ToolView};
use crate::http_error::{ErrorBody, HttpError};
use crate::model::ConnectOutcome;
use crate::model::{
    AuditEntry, AuditFilter, AuditResult, ConnectionHistoryEntry, ServerSource, ServerStatus,
    TransportType,
};
use crate::registry::AggregatorState;
use crate::registry::validate::{self, ServerSpec};
use crate::router::ControlError;

/// The body of `POST /api/v1/aggregator/servers` (docs/rules.md,
/// Registration validation).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterServerRequest {
    /// `^[a-z][a-z0-9_-]*$`, at most 255 characters, unique.
    pub name: String,
    /// At most 1000 characters.
    #[serde(default)]
    pub description: Option<String>,
    pub transport_type: TransportType,
    /// STDIO: `command` (required), `args`, `env`, `cwd`. SSE: `url`
    /// (required), `headers`. HTTP: `base_url` (required), `headers`.
    #[schema(value_type = Object)]
    pub connection_config: serde_json::Value,
    #[serde(default)]
    pub health_check_url: Option<String>,
    /// Seconds between this server's health checks (1–86400; default: the
    /// daemon's interval, 30 s unless set).
    #[serde(default)]
    pub health_check_interval_secs: Option<u32>,
    /// Connect right after registration and at every start (default true).
    #[serde(default)]
    pub auto_connect: Option<bool>,
    /// Higher wins when un-namespaced names collide (default 0).
    #[serde(default)]
    pub priority: Option<i32>,
    /// HTTP servers that need a login: a pre-registered OAuth client
    /// (`client_id`, `client_secret`, `issuer`), `scopes`, `client_metadata_url`.
    #[serde(default)]
    pub oauth: Option<crate::model::OAuthClientSettings>,
    /// `pinning` (`off`, `warn`, `block` — the default) and `limits` (`max_concurrent`, `calls_per_second`, `burst`,
    /// `call_timeout_secs`, `wait_ms`).
    #[serde(default)]
    pub trust: crate::model::TrustSettings,
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct ListServersQuery {
    /// Only servers with this status.
    pub status: Option<String>,
    /// Include each server's tools.
    #[serde(default)]
    pub include_tools: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct LimitQuery {
    /// How many entries to return (default 100, at most 10000).
    pub limit: Option<usize>,
}

/// A page of the audit log.
#[derive(Debug, Deserialize, IntoParams)]
pub struct AuditQuery {
    /// How many entries to return (default 100, at most 10000).
    pub limit: Option<usize>,
    /// Only entries older than this `seq` (pass the last `seq` of a page to get the next).
    pub before: Option<u64>,
    /// Only this server's entries (its name).
    pub server: Option<String>,
    /// Only this action (`register`, `update`, `verify`, `remove`, `connect`, `disconnect`, `status`).
    pub action: Option<String>,
    /// Only actors containing this text (`health-monitor`, `supervisor`, `cli:`, `config:`, an address).
    pub actor: Option<String>,
    /// `ok`, or `error` for every operation that did not succeed.
    #[param(inline)]
    pub result: Option<AuditResult>,
    /// Only entries at or after this time (RFC 3339).
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only entries before this time (RFC 3339).
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 10_000;

/// Register an external MCP server.
#[utoipa::path(
    post,
    path = "/api/v1/aggregator/servers",
    tag = "servers",
    request_body = RegisterServerRequest,
    responses(
        (status = 201, description = "Registered", body = ServerView),
        (status = 409, description = "Server name already exists", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "Invalid request data", body = ErrorBody),
    )
)]
pub async fn register_server(
    State(state): State<AppState>,
    Actor(actor): Actor,
    JsonBody(req): JsonBody<RegisterServerRequest>,
) -> Result<(StatusCode, Json<ServerView>), HttpError> {
    let transport = validate::parse_connection_config(req.transport_type, req.connection_config)
        .map_err(|err| HttpError::unprocessable(err.to_string()))?;
    let spec = ServerSpec {
        name: req.name,
        description: req.description,
        transport,
        health_check_url: req.health_check_url,
        health_check_interval_secs: req.health_check_interval_secs,
        auto_connect: req.auto_connect.unwrap_or(true),
        priority: req.priority.unwrap_or(0),
        source: ServerSource::Api,
        oauth: req.oauth,
        trust: req.trust,
    };
    let mut record = state.registry.register(spec, &actor).await?;
    if record.auto_connect {
        match state.router.connect(record.id).await {
            Ok(_) => record = state.registry.get(&record.id.to_string()).await?,
            Err(err) => tracing::error!(server = %record.name, "cannot start connecting: {err}"),
        }
    }
    Ok((StatusCode::CREATED, Json(ServerView::new(&record))))
}

/// List registered servers, ordered by name.
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/servers",
    tag = "servers",
    params(ListServersQuery),
    responses(
        (status = 200, body = Vec<ServerView>),
        (status = 422, description = "Unknown status", body = ErrorBody),
    )
)]
pub async fn list_servers(
    State(state): State<AppState>,
    scope: Option<axum::Extension<crate::model::TokenScope>>,
    QueryParams(query): QueryParams<ListServersQuery>,
) -> Result<Json<Vec<ServerView>>, HttpError> {
    let logins = may_log_in(scope);
    let status = query
        .status
        .as_deref()
        .map(str::parse::<ServerStatus>)
        .transpose()
        .map_err(|err| HttpError::unprocessable(format!("status: {err}")))?;
    let records = state.registry.list(status).await?;
    let mut views = Vec::with_capacity(records.len());
    for record in &records {
        let mut view = ServerView::new(record)
            .with_health(state.router.health(record.id))
            .with_discovering(state.router.is_discovering(record.id))
            .with_auth(state.router.auth_view(record).await, logins);
        if query.include_tools {
            let tools = state.registry.tools(&record.id.to_string()).await?;
            view.tools = Some(tools.iter().map(ToolView::new).collect());
        }
        views.push(view);
    }
    Ok(Json(views))
}

/// A server's details, by id or name.
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/servers/{id}",
    tag = "servers",
    params(("id" = String, Path, description = "Server id or name")),
    responses(
        (status = 200, body = ServerView),
        (status = 404, description = "Server not found", body = ErrorBody),
    )
)]
pub async fn get_server(
    State(state): State<AppState>,
    scope: Option<axum::Extension<crate::model::TokenScope>>,
    PathParam(id): PathParam<String>,
) -> Result<Json<ServerView>, HttpError> {
    let record = state.registry.get(&id).await?;
    let auth = state.router.auth_view(&record).await;
    Ok(Json(
        ServerView::new(&record)
            .with_health(state.router.health(record.id))
            .with_discovering(state.router.is_discovering(record.id))
            .with_auth(auth, may_log_in(scope)),
    ))
}

/// Whether the caller may finish a login it is shown: a pending login's
/// URL carries its single-use `state`, and whoever opens it binds the
/// server to the account they sign in with — not for a read-only token.
fn may_log_in(scope: Option<axum::Extension<crate::model::TokenScope>>) -> bool {
    !matches!(scope, Some(axum::Extension(crate::model::TokenScope::Read)))
}

/// Remove a server and everything that belongs to it.
#[utoipa::path(
    delete,
    path = "/api/v1/aggregator/servers/{id}",
    tag = "servers",
    params(("id" = String, Path, description = "Server id or name")),
    responses(
        (status = 204, description = "Removed"),
        (status = 404, description = "Server not found", body = ErrorBody),
        (status = 507, description = "The disk is full: nothing was changed, the server runs on", body = ErrorBody),
    )
)]
pub async fn delete_server(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
) -> Result<StatusCode, HttpError> {
    // A server is disconnected before it is deleted; while the store
    // cannot record the removal, it is left running as it is.
    if let Ok(record) = state.registry.get(&id).await {
        refuse_while_unwritable(&state, "remove a server").await?;
        state.router.stop(record.id).await;
    }
    state.registry.remove(&id, &actor).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The tools a server offers (empty until it has been connected).
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/servers/{id}/tools",
    tag = "servers",
    params(("id" = String, Path, description = "Server id or name")),
    responses(
        (status = 200, body = Vec<ToolView>),
        (status = 404, description = "Server not found", body = ErrorBody),
    )
)]
pub async fn server_tools(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<Vec<ToolView>>, HttpError> {
    let tools = state.registry.tools(&id).await?;
    Ok(Json(tools.iter().map(ToolView::new).collect()))
}

/// `POST …/connect` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectResponse {
    pub status: ServerStatus,
    pub message: String,
}

/// `POST …/disconnect` body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DisconnectRequest {
    /// Cancel calls in flight instead of waiting for them (up to 30 s).
    #[serde(default)]
    pub force: bool,
}

/// `POST …/disconnect` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct DisconnectResponse {
    pub status: ServerStatus,
    /// Calls that were still running and were cut off.
    pub pending_requests: usize,
}

/// Start connecting to a server (returns at once; watch its status).
#[utoipa::path(
    post,
    path = "/api/v1/aggregator/servers/{id}/connect",
    tag = "servers",
    params(("id" = String, Path, description = "Server id or name")),
    responses(
        (status = 200, description = "Connection initiated", body = ConnectResponse),
        (status = 404, description = "Server not found", body = ErrorBody),
        (status = 409, description = "Server already connected", body = ErrorBody),
    )
)]
pub async fn connect_server(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
) -> Result<Json<ConnectResponse>, HttpError> {
    let record = state.registry.get(&id).await?;
    refuse_while_unwritable(&state, "connect").await?;
    let outcome = state.router.connect(record.id).await;
    let result = match &outcome {
        Ok(ConnectOutcome::Initiated) => "ok".to_owned(),
        Ok(ConnectOutcome::AlreadyConnected) => "already connected".to_owned(),
        Err(err) => err.to_string(),
    };
    let _ = state
        .registry
        .audit_event(&actor, "connect", &record.name, &result)
        .await;
    match outcome {
        Ok(ConnectOutcome::Initiated) => Ok(Json(ConnectResponse {
            status: ServerStatus::Connecting,
            message: "Connection initiated".to_owned(),
        })),
        Ok(ConnectOutcome::AlreadyConnected) => Err(HttpError::new(
            StatusCode::CONFLICT,
            format!("Server already connected: {}", record.name),
        )),
        Err(err) => Err(control_error(err)),
    }
}

/// Disconnect a server: in-flight calls finish (up to 30 s) unless `force`.
/// Its tools stay stored but are not offered until it reconnects.
#[utoipa::path(
    post,
    path = "/api/v1/aggregator/servers/{id}/disconnect",
    tag = "servers",
    params(("id" = String, Path, description = "Server id or name")),
    request_body(content = Option<DisconnectRequest>),
    responses(
        (status = 200, description = "Disconnected", body = DisconnectResponse),
        (status = 404, description = "Server not found", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    )
)]
pub async fn disconnect_server(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
    body: axum::body::Bytes,
) -> Result<Json<DisconnectResponse>, HttpError> {
    let request: DisconnectRequest = if body.iter().all(u8::is_ascii_whitespace) {
        DisconnectRequest::default()
    } else {
        super::extract::parse_json(&body)?
    };
    let record = state.registry.get(&id).await?;
    refuse_while_unwritable(&state, "disconnect").await?;
    let outcome = state.router.disconnect(record.id, request.force).await;
    let result = match &outcome {
        Ok(_) => "ok".to_owned(),
        Err(err) => err.to_string(),
    };
    let _ = state
        .registry
        .audit_event(&actor, "disconnect", &record.name, &result)
        .await;
    let pending_requests = outcome.map_err(control_error)?;
    let status = state.registry.get(&id).await?.status;
    Ok(Json(DisconnectResponse {
        status,
        pending_requests,
    }))
}

/// Connecting and disconnecting are status changes the store records:
/// while it cannot be written, one would happen unrecorded (a server shown
/// CONNECTED with its process gone, and `connect` refused as "already
/// connected"), so it is refused and the server left as it is.
async fn refuse_while_unwritable(state: &AppState, what: &str) -> Result<(), HttpError> {
    let storage = state.registry.storage_for_a_change().await;
    if storage.status != "failing" {
        return Ok(());
    }
    let status = if storage.disk_full {
        StatusCode::INSUFFICIENT_STORAGE
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Err(HttpError::new(
        status,
        format!(
            "cannot {what} while the store cannot be written ({}); the server is left as it is: \
             try again once the store can be written",
            storage.error.as_deref().unwrap_or("writes fail")
        ),
    ))
}

fn control_error(err: ControlError) -> HttpError {
    match err {
        ControlError::Registry(err) => err.into(),
        ControlError::ShuttingDown => {
            HttpError::new(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
        }
    }
}

/// A server's connection history, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/servers/{id}/history",
    tag = "servers",
    params(("id" = String, Path, description = "Server id or name"), LimitQuery),
    responses(
        (status = 200, body = Vec<ConnectionHistoryEntry>),
        (status = 404, description = "Server not found", body = ErrorBody),
    )
)]
pub async fn server_history(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    QueryParams(query): QueryParams<LimitQuery>,
) -> Result<Json<Vec<ConnectionHistoryEntry>>, HttpError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT);
    Ok(Json(state.registry.history(&id, limit).await?))
}

/// Counts of servers by status and of tools.
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/state",
    tag = "servers",
    responses((status = 200, body = AggregatorState))
)]
pub async fn aggregator_state(
    State(state): State<AppState>,
) -> Result<Json<AggregatorState>, HttpError> {
    let mut counts = state.registry.state().await?;
    let progress = state.skills.progress().borrow().clone();
    counts.classified_tools = progress.classified as u64;
    counts.unclassified_tools = counts.total_tools.saturating_sub(counts.classified_tools);
    counts.config_files = state.config_files.borrow().clone();
    Ok(Json(counts))
}

/// Every server operation, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/audit",
    tag = "servers",
    params(AuditQuery),
    responses((status = 200, body = Vec<AuditEntry>))
)]
pub async fn audit_log(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<AuditQuery>,
) -> Result<Json<Vec<AuditEntry>>, HttpError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT);
    let filter = AuditFilter {
        server: query.server,
        action: query.action,
        actor: query.actor,
        result: query.result,
        since: query.since,
        until: query.until,
    };
    Ok(Json(
        state.registry.audit(limit, query.before, filter).await?,
    ))
}
