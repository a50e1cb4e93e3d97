//! The admin HTTP API (axum): the contracts under `/api/v1` (docs/rules.md,
//! Admin API contracts), its
//! OpenAPI document, and `/healthz`. Handlers call the registry; they never
//! touch the store directly.

pub mod auth;
pub mod error;
pub mod extract;
pub mod guard;
pub mod load;
pub mod metrics;
pub mod page;
pub mod profiles;
pub mod search;
pub mod servers;
pub mod skills;
pub mod tokens;
pub mod tools;
pub mod trust;
pub mod views;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http_error::HttpError;
use crate::registry::Registry;

/// Largest request body accepted (a registration is a few KiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
pub const OPENAPI_PATH: &str = "/api/v1/openapi.json";

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub registry: Registry,
    pub router: crate::router::Router,
    pub search: crate::index::SearchIndex,
    pub skills: crate::skills::Skills,
    /// When set, every route but `/healthz` needs `Authorization: Bearer`.
    pub token: Option<Arc<str>>,
    /// The admin page's signed-in browsers.
    pub page_sessions: page::Sessions,
    /// Named tokens with scopes (accepted wherever the token is).
    pub tokens: tokens::Tokens,
    /// Which `Host` and `Origin` values the listener accepts.
    pub hosts: guard::HostPolicy,
    pub started: Instant,
    /// This replica's id, when several share one store.
    pub replica: Option<Arc<str>>,
    /// The config files the daemon keeps applied, as they stand.
    pub config_files: tokio::sync::watch::Receiver<Vec<crate::registry::ConfigFileStatus>>,
    /// What named tokens hold of the listener at once.
    pub token_load: load::TokenLoad,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "mcp-aggregator admin API", description = "Register, inspect and remove the MCP servers the aggregator connects to."),
    tags((name = "servers", description = "Server registrations"), (name = "tools", description = "Calling tools"), (name = "skills", description = "Skills and classification"), (name = "profiles", description = "Views: what a client that picks a profile sees"), (name = "process", description = "The aggregator process"))
)]
struct ApiDoc;

/// Records in the audit log something done to `subject` (`skill:ID`,
/// `profile:NAME`) that is not a server; a failed write is only said.
async fn audit_done(state: &AppState, actor: &str, action: &str, subject: &str) {
    if let Err(err) = state
        .registry
        .audit_event(actor, action, subject, "ok")
        .await
    {
        tracing::warn!("cannot record {action} in the audit log: {err}");
    }
}

/// The API router and its OpenAPI document, built from the same route list.
/// `extra` routes (the MCP endpoint) share the listener, the token check and
/// the panic guard.
pub fn router_with_openapi(
    state: AppState,
    extra: Option<Router<AppState>>,
) -> (Router, utoipa::openapi::OpenApi) {
    let (router, mut openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(servers::register_server, servers::list_servers))
        .routes(routes!(servers::get_server, servers::delete_server))
        .routes(routes!(servers::server_tools))
        .routes(routes!(servers::connect_server))
        .routes(routes!(auth::login))
        .routes(routes!(auth::logout))
        .routes(routes!(auth::callback))
        .routes(routes!(servers::disconnect_server))
        .routes(routes!(servers::server_history))
        .routes(routes!(servers::aggregator_state))
        .routes(routes!(servers::audit_log))
        .routes(routes!(tools::call_tool))
        .routes(routes!(tools::conflicts))
        .routes(routes!(tools::cache_stats))
        .routes(routes!(tokens::list_tokens, tokens::create_token))
        .routes(routes!(tokens::revoke_token))
        .routes(routes!(trust::held_tools))
        .routes(routes!(trust::tool_changes))
        .routes(routes!(trust::approve_tool))
        .routes(routes!(trust::reject_tool))
        .routes(routes!(search::search))
        .routes(routes!(search::index_status))
        .routes(routes!(search::reindex))
        .routes(routes!(skills::list_skills, skills::create_skill))
        .routes(routes!(skills::classification_status))
        .routes(routes!(skills::list_suggestions))
        .routes(routes!(skills::dismiss_suggestion))
        .routes(routes!(skills::accept_suggestion))
        .routes(routes!(skills::reclassify))
        .routes(routes!(
            skills::get_skill,
            skills::update_skill,
            skills::delete_skill
        ))
        .routes(routes!(skills::skill_tools))
        .routes(routes!(profiles::list_profiles))
        .routes(routes!(
            profiles::get_profile,
            profiles::put_profile,
            profiles::delete_profile
        ))
        .routes(routes!(healthz))
        .routes(routes!(metrics::metrics))
        .split_for_parts();
    if state.token.is_some() {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
    let document = Arc::new(openapi.clone());
    let router = match extra {
        Some(extra) => router.merge(extra),
        None => router,
    };
    let router = router
        .route("/", get(page::index))
        .route("/admin/app.js", get(page::app_js))
        .route("/admin/signin.js", get(page::signin_js))
        .route("/admin/app.css", get(page::app_css))
        .route(
            "/admin/session",
            get(page::session_info)
                .post(page::sign_in)
                .delete(page::sign_out),
        )
        .route(
            OPENAPI_PATH,
            get(move || async move { Json(document.as_ref().clone()) }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // One middleware, not one per check: each boxes a service and a
        // future for every request. Handed only what it checks: its state
        // is cloned for every request too.
        .layer(axum::middleware::from_fn_with_state(
            Gate {
                hosts: state.hosts.clone(),
                token: state.token.clone(),
                sessions: state.page_sessions.clone(),
                named: state.tokens.clone(),
                load: state.token_load.clone(),
            },
            gate,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .with_state(state);
    (router, openapi)
}

/// The API router (with the MCP endpoint when given).
pub fn router(state: AppState, extra: Option<Router<AppState>>) -> Router {
    router_with_openapi(state, extra).0
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `degraded` while the store cannot be written.
    status: &'static str,
    version: &'static str,
    uptime_seconds: u64,
    /// This replica's id, when several share one store (`serve --store`).
    #[serde(skip_serializing_if = "Option::is_none")]
    replica: Option<String>,
    /// The store's disk: `ok`, or `failing` with the error and since when.
    #[schema(value_type = Object)]
    storage: crate::model::StorageStatus,
}

/// Liveness of the aggregator process itself (never needs a token): 200,
/// or 503 while its store cannot be written (a full or failing disk).
#[utoipa::path(get, path = "/healthz", tag = "process", responses(
    (status = 200, body = Health),
    (status = 503, description = "The store cannot be written", body = Health)
))]
async fn healthz(
    State(state): State<AppState>,
    admin: Option<axum::Extension<TokenName>>,
) -> (StatusCode, Json<Health>) {
    let mut storage = state.registry.storage().await;
    if state.token.is_some() && admin.is_none() {
        // Anyone may ask whether the process is up; where its data lives
        // and what the disk said are for the admin token.
        storage.path.clear();
        storage.error = None;
    }
    let failing = storage.status != "ok";
    let health = Health {
        status: if failing { "degraded" } else { "ok" },
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: state.started.elapsed().as_secs(),
        replica: state.replica.as_deref().map(str::to_owned),
        storage,
    };
    let status = if failing {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, Json(health))
}

async fn not_found(uri: Uri) -> HttpError {
    HttpError::new(StatusCode::NOT_FOUND, format!("Not Found: {}", uri.path()))
}

async fn method_not_allowed(request: Request) -> HttpError {
    HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "Method {} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
}

use crate::model::TokenName;

/// What the listener checks before any route runs.
#[derive(Clone)]
struct Gate {
    hosts: guard::HostPolicy,
    /// When set, every route but `/healthz` needs it as a bearer token.
    token: Option<Arc<str>>,
    sessions: page::Sessions,
    named: tokens::Tokens,
    load: load::TokenLoad,
}

/// Every request: the host and origin checks first (a cross-site request
/// is refused before anything else looks at it), then the token; every
/// error that leaves is `{"detail": …}`.
async fn gate(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    if let Some(refused) = guard::refuse(&gate.hosts, &request) {
        return refused;
    }
    if let Some(refused) = check_token(&gate, &mut request) {
        return refused;
    }
    // A named token's request counts until its answer is sent whole (an
    // event stream until it closes); the admin token's never does.
    let held = match (
        request.extensions().get::<crate::model::TokenScope>(),
        request.extensions().get::<TokenName>(),
    ) {
        (Some(_), Some(name)) => match gate.load.enter(&name.0) {
            Ok(held) => Some(held),
            Err(crowded) => {
                return HttpError::new(StatusCode::TOO_MANY_REQUESTS, crowded.to_string())
                    .into_response();
            }
        },
        _ => None,
    };
    let response = as_json_error(next.run(request).await).await;
    match held {
        Some(held) => response.map(|body| axum::body::Body::new(load::HeldBody::new(body, held))),
        None => response,
    }
}

/// The refusal of a request without the token, when one is required.
fn check_token(gate: &Gate, request: &mut Request) -> Option<Response> {
    let expected = gate.token.as_deref()?;
    let sessions = &gate.sessions;
    // A browser sent back by an authorization server carries no token:
    // the login's single-use state is what the callback checks.
    let path = request.uri().path();
    let public = matches!(path, "/healthz" | "/oauth/callback") || page::is_public_asset(path);
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if public {
        // Open to anyone; with the admin token `/healthz` says more.
        if presented.is_some_and(|token| constant_time_eq(token.as_bytes(), expected.as_bytes())) {
            request
                .extensions_mut()
                .insert(TokenName(Arc::from("admin")));
        }
        return None;
    }
    if presented.is_some_and(|token| constant_time_eq(token.as_bytes(), expected.as_bytes()))
        || sessions.admits(request.method(), request.headers())
    {
        request
            .extensions_mut()
            .insert(TokenName(Arc::from("admin")));
        return None;
    }
    if let Some(named) = presented.and_then(|secret| gate.named.find(secret)) {
        if let Some(refusal) =
            tokens::scope_refusal(&named, request.method(), path, request.uri().query())
        {
            return Some(HttpError::new(StatusCode::FORBIDDEN, refusal).into_response());
        }
        request
            .extensions_mut()
            .insert(TokenName(Arc::from(named.name.as_str())));
        request.extensions_mut().insert(named.scope);
        return None;
    }
    if path == "/" && request.method() == axum::http::Method::GET {
        return Some(page::signin_page());
    }
    let mut response =
        HttpError::new(StatusCode::UNAUTHORIZED, "missing or invalid bearer token").into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(response)
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is
/// case-insensitive, RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Largest error body turned into `{"detail"}` (framework rejections are a
/// line of text).
const MAX_ERROR_TEXT: usize = 4096;

/// Every error of every route leaves as `{"detail": …}`: the framework's own
/// rejections (a body over the limit, a bad header) are plain text, so they
/// are wrapped here.
async fn as_json_error(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_ERROR_TEXT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let detail = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut wrapped = HttpError::new(status, detail).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            wrapped.headers_mut().insert(name.clone(), value.clone());
        }
    }
    wrapped
}

/// Compares without an early exit, so response timing does not reveal how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }
}
